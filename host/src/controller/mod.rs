//! The Kubernetes side of the host: watch Jinghzhus and the Pods they own,
//! queue the objects that need attention, reconcile each with the active
//! plugin and apply what it proposes.
//!
//! kube's runtime does the heavy lifting: [`kube::runtime::watcher`] +
//! [`kube::runtime::reflector`] are the informers and caches, and
//! [`kube::runtime::Controller`] is the workqueue (dedup, one reconcile at a
//! time per object, N concurrent workers, requeue-after). This module fills
//! its gaps: per-object exponential backoff ([`backoff`]), expectations so a
//! lagging cache never causes double creates ([`expectations`]), waiting for
//! the initial pod list before the first reconcile, and logs that tell the
//! story of each change.
//!
//! - [`watch`]: the two watch streams and their caches.
//! - [`reconcile`]: one reconcile: cache → plugin → validate → apply.
//! - [`metrics`]: what was done, as counters.
//! - [`readiness`]: the pod cache's initial-list gate every reconcile awaits.

pub mod backoff;
pub mod expectations;
pub mod metrics;
pub mod readiness;
pub mod reconcile;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::runtime::Controller;
use kube::runtime::controller::Config as RuntimeConfig;
use kube::runtime::events::{Recorder, Reporter};

use crate::apply::Limits;
use crate::hotswap::ActivePlugin;

pub use reconcile::Context;

/// What `wasm-operator run` configures.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Watch only this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Reconciles running at once (each object is still reconciled by one at a time).
    pub workers: u16,
    /// How long to trust our own expectations before reconciling anyway.
    pub expectations_timeout: Duration,
    /// Limits on what a plugin may propose.
    pub limits: Limits,
    /// Name reported as the source of Events.
    pub reporter: String,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            workers: 4,
            expectations_timeout: Duration::from_secs(300),
            limits: Limits::default(),
            reporter: "wasm-operator".to_string(),
        }
    }
}

/// Runs the controller until `shutdown` resolves, then lets running
/// reconciles finish.
pub async fn run(
    client: Client,
    plugin: Arc<ActivePlugin>,
    config: ControllerConfig,
    metrics: Arc<metrics::Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: config.reporter.clone(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let expectations = Arc::new(expectations::Expectations::new(config.expectations_timeout));
    let watches = watch::Watches::start(&client, config.namespace.as_deref(), expectations.clone());
    let ctx = Arc::new(Context {
        client,
        pods_ready: readiness::CacheReady::new(&watches.pod_cache),
        pods: watches.pod_cache.clone(),
        plugin: plugin.clone(),
        expectations,
        backoff: backoff::PerObjectBackoff::default(),
        recorder,
        limits: config.limits.clone(),
        metrics,
    });
    // Re-queue every known object when the plugin changes (hot swap).
    let swaps = plugin.swaps();
    Controller::for_stream(watches.jinghzhus, watches.jinghzhu_cache)
        .owns_stream(watches.pods)
        .reconcile_all_on(swaps)
        .with_config(RuntimeConfig::default().concurrency(config.workers))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                reconcile::log_controller_error(&err);
            }
        })
        .await;
}
