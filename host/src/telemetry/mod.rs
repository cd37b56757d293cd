//! Telemetry: what the host tells the outside about its work. It owns the
//! counters and histograms exported on `/metrics` ([`metrics`]), the
//! Kubernetes Events queue and its background writer ([`events`],
//! [`event_writer`]) and the probe state behind `/healthz` and `/readyz`
//! ([`health`]).
//!
//! It sits below the rooms that report through it (`controller/`,
//! `slot/`, `delivery/`, `apply/`, `serve.rs`, `run.rs`) so none of them reaches up
//! for another to record something. It may import only the rooms below it:
//! `runtime/` (a plugin's identity and errors, for metric labels), `crd`,
//! and `plugin_text` (every Event's text is escaped and bounded there).
//!
//! - [`metrics`]: what was done, as counters (controller-runtime's names).
//! - [`events`]: the queue Events go through, recorded in the background.
//! - [`event_writer`]: writes them, repeats as series, remembering little.
//! - [`health`]: the controller loop's heartbeat and cache sync, for probes.
//! - [`log_limit`]: per-object rate limits for the lines at info and above.

pub mod event_writer;
pub mod events;
pub mod health;
pub mod log_limit;
pub mod metrics;
pub mod queue;

/// The `controller` (and workqueue `name`) label of every controller metric.
pub const CONTROLLER_NAME: &str = "jinghzhu";

/// A histogram family whose histograms are made by a plain function.
type HistogramFamily<L> = prometheus_client::metrics::family::Family<
    L,
    prometheus_client::metrics::histogram::Histogram,
    fn() -> prometheus_client::metrics::histogram::Histogram,
>;
