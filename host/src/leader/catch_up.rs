//! The first reconciles after a takeover must not act on a cache that lags
//! behind what the previous leader wrote just before it stopped: a pod it
//! created that this host's cache does not show yet would be created again.
//!
//! [`LeaderGate::enter`] waits for leadership and then, once per term, for a
//! barrier: a consistent (quorum) list of our pods' metadata from the API
//! server, taken after this host became leader, and a wait until the pod
//! cache holds every pod in it. Pods deleted meanwhile are dropped from the
//! wait by re-listing. The barrier gives up after a timeout (with a warning):
//! expectations and the next reconciles still converge, and a stuck watch
//! must not stop the controller.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;

use super::{Leadership, Term};
use crate::cached_pod::CachedPod;
use crate::locks::MutexExt;

/// How long the barrier waits before letting reconciles go anyway.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(10);

type Barrier = Shared<BoxFuture<'static, ()>>;

/// Leadership plus the once-per-term cache barrier.
pub struct LeaderGate {
    leadership: Leadership,
    pods: Api<Pod>,
    selector: String,
    cache: Store<CachedPod>,
    barrier: Mutex<Option<(u64, Barrier)>>,
}

impl LeaderGate {
    /// A gate for reconciles that read `cache` (filled from `pods` with `selector`).
    pub fn new(
        leadership: Leadership,
        pods: Api<Pod>,
        selector: &str,
        cache: Store<CachedPod>,
    ) -> Self {
        Self {
            leadership,
            pods,
            selector: selector.to_string(),
            cache,
            barrier: Mutex::new(None),
        }
    }

    /// The leadership this gate waits on.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// Waits until this host leads and (once per elected term) its pod cache
    /// has caught up with the API server. `None` when shutting down.
    pub async fn enter(&self) -> Option<Term> {
        let term = self.leadership.wait_leading().await?;
        if self.leadership.is_elected() {
            self.barrier_for(term.number()).await;
        }
        Some(term)
    }

    fn barrier_for(&self, term: u64) -> Barrier {
        let mut slot = self.barrier.lock_unpoisoned();
        if let Some((t, barrier)) = slot.as_ref()
            && *t == term
        {
            return barrier.clone();
        }
        let barrier = catch_up(
            self.pods.clone(),
            self.selector.clone(),
            self.cache.clone(),
            CATCH_UP_TIMEOUT,
        )
        .boxed()
        .shared();
        *slot = Some((term, barrier.clone()));
        barrier
    }
}

/// Waits until `cache` holds every pod a quorum list of `pods` (with
/// `selector`) returns, re-listing to forget pods deleted meanwhile.
pub async fn catch_up(
    pods: Api<Pod>,
    selector: String,
    cache: Store<CachedPod>,
    timeout: Duration,
) {
    let started = tokio::time::Instant::now();
    let params = ListParams::default().labels(&selector);
    let mut missing: Option<HashSet<String>> = None;
    let mut listed_at = started;
    loop {
        if missing.is_none() || listed_at.elapsed() > Duration::from_secs(1) {
            match pods.list_metadata(&params).await {
                Ok(list) => {
                    let live: HashSet<String> = list.items.iter().filter_map(|p| p.uid()).collect();
                    missing = Some(match missing.take() {
                        // Keep waiting only for pods that still exist.
                        Some(previous) => previous.intersection(&live).cloned().collect(),
                        None => live,
                    });
                    listed_at = tokio::time::Instant::now();
                }
                Err(err) => {
                    tracing::warn!(error = %err, "after taking over: listing pods to check the cache failed; retrying");
                }
            }
        }
        if let Some(waiting) = missing.as_mut() {
            let cached: HashSet<String> = cache.state().iter().filter_map(|p| p.uid()).collect();
            waiting.retain(|uid| !cached.contains(uid));
            if waiting.is_empty() {
                tracing::info!(
                    waited_ms = started.elapsed().as_millis() as u64,
                    "after taking over: the pod cache shows every pod the API server has; reconciling"
                );
                return;
            }
        }
        if started.elapsed() > timeout {
            tracing::warn!(
                missing = missing.as_ref().map_or(0, HashSet::len),
                ?timeout,
                "after taking over: the pod cache has not caught up; reconciling anyway"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
