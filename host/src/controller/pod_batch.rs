//! Pod events as triggers for their controlling Jinghzhu, gathered per owner
//! for a short window.
//!
//! A Jinghzhu's pods change in bursts: created together, then scheduled,
//! started and made ready one by one within a second. Reconciling on every
//! one of those events writes a status for every intermediate count (ready
//! 1, then 2, then 3), each write a request to the API server. So the first
//! pod event of an owner schedules its reconcile [`PodBatchConfig::window`]
//! later, and the events that follow within that window join it (kube's
//! [`scheduler`](mod@kube::runtime::scheduler) keeps the earliest time per
//! owner): a burst costs one reconcile, and no owner waits longer than the
//! window after its first event. Changes to the Jinghzhu itself (a spec
//! edit) are not delayed.
//!
//! A watch error is logged and skipped; the watcher retries with backoff on
//! its own, as it does for `owns_stream`.

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::scheduler::{ScheduleRequest, scheduler};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::cached_pod::CachedPod;
use crate::crd::Jinghzhu;

/// How pod events are gathered before they queue their owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodBatchConfig {
    /// How long an owner waits after its first pod event when the queue is
    /// short (zero: at once).
    pub window: Duration,
    /// The longest it waits when many objects are queued.
    pub max_window: Duration,
    /// The controller's workers.
    pub workers: u16,
}

impl Default for PodBatchConfig {
    fn default() -> Self {
        Self {
            window: DEFAULT_WINDOW,
            max_window: DEFAULT_MAX_WINDOW,
            workers: 4,
        }
    }
}

/// The default window: long enough to gather a burst of pod changes, short
/// next to the time pods take to start.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(100);
/// The default longest window.
pub const DEFAULT_MAX_WINDOW: Duration = Duration::from_secs(1);

impl PodBatchConfig {
    /// The window for a pod event when `waiting` objects are due and wait
    /// for a worker (not those still gathering their own events): one
    /// [`window`](Self::window) more for every round of the workers the
    /// queue holds, up to [`max_window`](Self::max_window). An idle host
    /// reacts within one window; a host working through a backlog gathers
    /// more of each owner's pod changes into one reconcile instead of
    /// adding to the backlog (what a busy controller-runtime queue does by
    /// itself).
    pub fn window_for(&self, waiting: usize) -> Duration {
        let rounds = waiting / usize::from(self.workers.max(1));
        let factor = u32::try_from(rounds.saturating_add(1)).unwrap_or(u32::MAX);
        self.window
            .saturating_mul(factor)
            .min(self.max_window.max(self.window))
    }
}

/// The Jinghzhu that controls `pod`, if any.
pub fn controlling_owner(pod: &CachedPod) -> Option<ObjectRef<Jinghzhu>> {
    let owner = pod.owner_references().iter().find(|o| {
        o.controller == Some(true)
            && o.kind == Jinghzhu::kind(&())
            && o.api_version == Jinghzhu::api_version(&())
    })?;
    let reference = ObjectRef::new(&owner.name);
    Some(match pod.namespace() {
        Some(namespace) => reference.within(&namespace),
        None => reference,
    })
}

/// Turns pod events into reconcile triggers for their owners, each owner
/// at most once per window; `waiting` tells how many objects are due and
/// wait for a worker.
pub fn owner_triggers(
    pods: impl Stream<Item = Result<CachedPod, watcher::Error>> + Send + 'static,
    config: PodBatchConfig,
    waiting: impl Fn() -> usize + Send + 'static,
) -> impl Stream<Item = ObjectRef<Jinghzhu>> + Send + 'static {
    let requests = pods.filter_map(move |event| {
        futures::future::ready(match event {
            Ok(pod) => controlling_owner(&pod).map(|owner| ScheduleRequest {
                message: owner,
                run_at: tokio::time::Instant::now() + config.window_for(waiting()),
            }),
            Err(err) => {
                tracing::warn!(error = %err, "pod watch error; the watcher retries");
                None
            }
        })
    });
    scheduler(requests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn pod(name: &str, owner: &str, kind: &str, controller: bool) -> CachedPod {
        CachedPod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "jinghzhu.io/v1".into(),
                    kind: kind.into(),
                    name: owner.into(),
                    uid: format!("uid-{owner}"),
                    controller: Some(controller),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            ..CachedPod::default()
        }
    }

    #[test]
    fn only_a_controlling_jinghzhu_is_an_owner() {
        let owner = controlling_owner(&pod("a", "web", "Jinghzhu", true)).expect("owner");
        assert_eq!(owner, ObjectRef::new("web").within("default"));
        assert!(controlling_owner(&pod("b", "web", "Jinghzhu", false)).is_none());
        assert!(controlling_owner(&pod("c", "rs", "ReplicaSet", true)).is_none());
        assert!(controlling_owner(&CachedPod::default()).is_none());
    }

    #[tokio::test]
    async fn a_burst_of_pod_events_queues_each_owner_once_within_the_window() {
        let window = Duration::from_millis(100);
        // The watch stays open, as it does in the host.
        let events = futures::stream::iter(vec![
            Ok(pod("web-1", "web", "Jinghzhu", true)),
            Ok(pod("web-2", "web", "Jinghzhu", true)),
            Ok(pod("db-1", "db", "Jinghzhu", true)),
            Ok(pod("web-1", "web", "Jinghzhu", true)),
            Ok(pod("stray", "x", "ReplicaSet", true)),
        ])
        .chain(futures::stream::pending());
        let started = tokio::time::Instant::now();
        let config = PodBatchConfig {
            window,
            ..PodBatchConfig::default()
        };
        let mut triggers = Box::pin(owner_triggers(events, config, || 0));
        let mut names = Vec::new();
        for _ in 0..2 {
            let owner = tokio::time::timeout(Duration::from_secs(5), triggers.next())
                .await
                .expect("an owner within the window")
                .expect("open stream");
            names.push(owner.name);
        }
        // Nothing was let through before the window had passed.
        assert!(started.elapsed() >= window, "{:?}", started.elapsed());
        names.sort();
        assert_eq!(names, ["db", "web"]);
        // And each owner only once for the whole burst.
        let more = tokio::time::timeout(window * 3, triggers.next()).await;
        assert!(more.is_err(), "another trigger: {more:?}");
    }

    #[test]
    fn the_window_grows_with_the_queue_up_to_its_limit() {
        let config = PodBatchConfig {
            window: Duration::from_millis(100),
            max_window: Duration::from_secs(1),
            workers: 4,
        };
        assert_eq!(config.window_for(0), Duration::from_millis(100));
        assert_eq!(config.window_for(3), Duration::from_millis(100));
        assert_eq!(config.window_for(4), Duration::from_millis(200));
        assert_eq!(config.window_for(20), Duration::from_millis(600));
        assert_eq!(config.window_for(10_000), Duration::from_secs(1));
        assert_eq!(config.window_for(usize::MAX), Duration::from_secs(1));
        // A limit below the window never shortens it.
        let odd = PodBatchConfig {
            max_window: Duration::ZERO,
            ..config
        };
        assert_eq!(odd.window_for(100), Duration::from_millis(100));
    }

    #[tokio::test]
    async fn a_zero_window_queues_at_once() {
        let events = futures::stream::iter(vec![Ok(pod("web-1", "web", "Jinghzhu", true))])
            .chain(futures::stream::pending());
        let mut triggers = Box::pin(owner_triggers(
            events,
            PodBatchConfig {
                window: Duration::ZERO,
                ..PodBatchConfig::default()
            },
            || 100,
        ));
        let owner = tokio::time::timeout(Duration::from_millis(50), triggers.next())
            .await
            .expect("at once");
        assert_eq!(owner.map(|o| o.name).as_deref(), Some("web"));
    }
}
