//! What every reconcile shares: the caches, the plugin slots, the
//! per-object bookkeeping, the Event sink and the limits ([`Context`]).
//! Its own file so the reconcile steps and their helpers (`strays`) can
//! both use it without importing each other.

use std::sync::Arc;

use kube::Client;
use kube::runtime::reflector::Store;

use super::PerObject;
use super::owner_index::OwnerIndex;
use super::readiness::CacheReady;
use super::recovery::Recovery;
use crate::apply::Limits;
use crate::apply::policy::PolicyConfig;
use crate::cached_pod::CachedPod;
use crate::crd::Jinghzhu;
use crate::slot::router::PluginRouter;
use crate::telemetry::events::EventSink;
use crate::telemetry::metrics::Metrics;

/// Everything a reconcile needs, shared by all workers.
pub struct Context {
    /// API client (the host's identity).
    pub client: Client,
    /// The Jinghzhu cache (the one the controller dispatches from).
    pub jinghzhus: Store<Jinghzhu>,
    /// The pod cache.
    pub pods: Store<CachedPod>,
    /// Which cached pods each Jinghzhu controls.
    pub pod_owners: OwnerIndex,
    /// Opens once the pod cache has had its initial list.
    pub pods_ready: CacheReady,
    /// Which plugin slot each object is reconciled with (the default's, or
    /// a tenant's); each slot is swappable.
    pub plugin: Arc<PluginRouter>,
    /// Expectations, backoff and write budget, per Jinghzhu UID.
    pub objects: Arc<PerObject>,
    /// Where Events go (queued; never waited for).
    pub events: EventSink,
    /// Objects that failed because the API server could not be reached.
    pub recovery: Arc<Recovery>,
    /// What a plugin may propose.
    pub limits: Limits,
    /// Which pod specs a plugin may propose.
    pub policy: PolicyConfig,
    /// Counters.
    pub metrics: Arc<Metrics>,
}
