//! Builders of the objects the wasm-operator's tests reconcile, so a test
//! says only what matters to it: a [`Jinghzhu`](jinghzhu()), a [`Pod`](pod())
//! (bare, controlled by a Jinghzhu, or as the host creates it) and its
//! [`CachedPod`](PodBuilder::cached), a [`JinghzhuPlugin`](plugin_resource()).
//!
//! A builder starts from the object with its name alone and sets only what
//! it is told: no defaults a test did not ask for (an unset namespace stays
//! unset). Only the model's types: no client, no async runtime, no wasmtime.
//! A dev-dependency of the host, the runtime and the test crates; never a
//! dependency of a shipped crate (`host/tests/rooms.rs` checks).
//!
//! ```
//! use wasm_operator_testkit::{jinghzhu, pod};
//! let web = jinghzhu("web").namespace("shop").uid("uid-web").desired(2).build();
//! let ready = pod("web-a").created_by_host(&web).phase("Running").ready(true).build();
//! assert_eq!(ready.metadata.namespace.as_deref(), Some("shop"));
//! ```

mod jinghzhu;
mod plugin;
mod pod;

pub use jinghzhu::{JinghzhuBuilder, jinghzhu};
pub use plugin::{PluginResourceBuilder, plugin_resource};
pub use pod::{PodBuilder, controller_of, pod};

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// `entries` as a label or annotation map.
pub fn string_map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The time `secs` seconds after the epoch.
///
/// # Panics
/// When `secs` is outside the range a timestamp holds (a test's mistake).
pub fn at_second(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).expect("seconds within the timestamp range"))
}
