//! The Kubernetes side of the host: watch Jinghzhus and the Pods they own,
//! queue the objects that need attention, reconcile each with the active
//! plugin and apply what it proposes.
//!
//! kube's runtime does the heavy lifting: [`kube::runtime::watcher`] +
//! [`kube::runtime::reflector`] are the informers and caches, and
//! [`kube::runtime::Controller`] is the workqueue (dedup, one reconcile at a
//! time per object, N concurrent workers, requeue-after). This module fills
//! its gaps: per-object exponential backoff ([`backoff`]), expectations so a
//! lagging cache never causes double creates ([`expectations`]), a
//! per-object write budget ([`budget`]), waiting for the initial pod list
//! before the first reconcile, and logs that tell the story of each change.
//! The per-object state is keyed by the Jinghzhu's UID ([`PerObject`]) and
//! dropped when the watch reports the object deleted.
//!
//! - [`watch`]: the two watch streams and their caches.
//! - [`reconcile`]: one reconcile: cache → plugin → validate → apply.
//! - [`metrics`]: what was done, as counters.
//! - [`readiness`]: the pod cache's initial-list gate every reconcile awaits.

pub mod backoff;
pub mod budget;
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
use crate::apply::policy::PolicyConfig;
use crate::hotswap::ActivePlugin;

pub use reconcile::Context;

/// What the host remembers about each Jinghzhu between reconciles, keyed by
/// its UID: a recreated object of the same name starts clean, and
/// [`PerObject::forget`] drops it all when the object is deleted.
#[derive(Debug)]
pub struct PerObject {
    /// Pods we created or deleted and wait to see in the cache.
    pub expectations: expectations::Expectations,
    /// Consecutive failures.
    pub backoff: backoff::PerObjectBackoff,
    /// Writes left this minute.
    pub budget: budget::WriteBudget,
}

impl PerObject {
    /// Drops everything kept for the Jinghzhu `uid`.
    pub fn forget(&self, uid: &str) {
        self.expectations.forget(uid);
        self.backoff.succeeded(uid);
        self.budget.forget(uid);
    }
}

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
    /// Which pod specs a plugin may propose.
    pub policy: PolicyConfig,
    /// Writes per object per minute.
    pub budget: budget::BudgetConfig,
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
            policy: PolicyConfig::default(),
            budget: budget::BudgetConfig::default(),
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
    let objects = Arc::new(PerObject {
        expectations: expectations::Expectations::new(config.expectations_timeout),
        backoff: backoff::PerObjectBackoff::default(),
        budget: budget::WriteBudget::new(config.budget),
    });
    let watches = watch::Watches::start(
        &client,
        config.namespace.as_deref(),
        objects.clone(),
        recorder.clone(),
    );
    let ctx = Arc::new(Context {
        client,
        pods_ready: readiness::CacheReady::new(&watches.pod_cache),
        pods: watches.pod_cache.clone(),
        plugin: plugin.clone(),
        objects,
        recorder,
        limits: config.limits.clone(),
        policy: config.policy.clone(),
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
