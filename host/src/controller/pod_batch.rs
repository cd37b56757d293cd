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
//! The one pod event not gathered is the one that settles its owner
//! ([`settles`]: as many live pods as desired, all ready, none terminating,
//! while the owner's status does not say so yet): it queues the owner at
//! once. That reconcile writes the settled status (which
//! [`super::status_window`] writes at once too), so the end of a scale
//! edit, which the person who made it waits for, does not wait for the
//! window; and it is the reconcile the window would have run anyway, with
//! no pod change of that burst left to gather.
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

/// Whether `jz`, whose controlled pods are `pods` as cached after a pod
/// event, has just settled: as many live pods as `spec.desired`, every one
/// ready, none terminating (a scale-down is settled when its pods are
/// gone), while its status does not say so yet (counts, or the generation
/// it describes when it names one). An object already shown settled is
/// not: its pod churn is gathered as usual.
pub fn settles<'a>(jz: &Jinghzhu, pods: impl IntoIterator<Item = &'a CachedPod>) -> bool {
    let desired = jz.spec.desired;
    let mut live: u32 = 0;
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            return false;
        }
        let finished = matches!(pod.phase.as_deref(), Some("Succeeded" | "Failed"));
        if finished {
            continue;
        }
        if pod.ready != Some(true) {
            return false;
        }
        live = live.saturating_add(1);
    }
    live == desired && !shown_settled(jz)
}

/// Whether the status of `jz` already shows it settled at its generation.
fn shown_settled(jz: &Jinghzhu) -> bool {
    let desired = jz.spec.desired;
    jz.status.as_ref().is_some_and(|s| {
        s.current == desired
            && s.ready_replicas == Some(desired)
            && s.observed_generation
                .is_none_or(|g| Some(g) == jz.metadata.generation)
    })
}

/// Turns pod events into reconcile triggers for their owners, each owner
/// at most once per window; `waiting` tells how many objects are due and
/// wait for a worker. An owner for which `settled` says true after the
/// event (see [`settles`]) is queued at once, ahead of its window.
pub fn owner_triggers(
    pods: impl Stream<Item = Result<CachedPod, watcher::Error>> + Send + 'static,
    config: PodBatchConfig,
    waiting: impl Fn() -> usize + Send + 'static,
    settled: impl Fn(&ObjectRef<Jinghzhu>) -> bool + Send + 'static,
) -> impl Stream<Item = ObjectRef<Jinghzhu>> + Send + 'static {
    let at_once = before_the_queue();
    let requests = pods.filter_map(move |event| {
        futures::future::ready(match event {
            Ok(pod) => controlling_owner(&pod).map(|owner| {
                let window = config.window_for(waiting());
                let run_at = if window.is_zero() || settled(&owner) {
                    at_once
                } else {
                    tokio::time::Instant::now() + window
                };
                ScheduleRequest {
                    message: owner,
                    run_at,
                }
            }),
            Err(err) => {
                tracing::warn!(error = %err, "pod watch error; the watcher retries");
                None
            }
        })
    });
    scheduler(requests)
}

/// An instant before the scheduler's queue is made, for the owners to
/// queue at once. The queue (tokio's `DelayQueue`) rounds a deadline up to
/// the next millisecond and hands out an entry due "now" only when its
/// timer fires (1 to 5 ms after the event, measured at N = 1000); an entry
/// due before the queue began has "already been reached" and is handed out
/// at its next poll. Entries keep their order and owners still merge: an
/// owner waiting for its window is pulled forward, as by any earlier time.
fn before_the_queue() -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_sub(Duration::from_millis(1)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use wasm_operator_testkit::{controller_of, jinghzhu};

    fn pod(name: &str, owner: &str, kind: &str, controller: bool) -> CachedPod {
        wasm_operator_testkit::pod(name)
            .namespace("default")
            .owner_reference(OwnerReference {
                kind: kind.into(),
                controller: Some(controller),
                ..controller_of(owner, &format!("uid-{owner}"))
            })
            .cached()
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
        let mut triggers = Box::pin(owner_triggers(events, config, || 0, |_| false));
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

    fn ready(name: &str, ready: Option<bool>) -> CachedPod {
        CachedPod {
            ready,
            phase: Some("Running".into()),
            ..pod(name, "web", "Jinghzhu", true)
        }
    }

    fn web(desired: u32, status: Option<(u32, u32)>) -> Jinghzhu {
        let mut jz = jinghzhu("web").desired(desired).generation(2).build();
        jz.status = status.map(|(current, ready)| crate::crd::JinghzhuStatus {
            current,
            ready_replicas: Some(ready),
            observed_generation: Some(2),
            ..Default::default()
        });
        jz
    }

    #[test]
    fn an_owner_settles_when_its_desired_pods_are_all_live_and_ready() {
        let a = ready("a", Some(true));
        let b = ready("b", Some(true));
        // Scaled 1 -> 2: the new pod's Ready settles it.
        assert!(settles(&web(2, Some((2, 1))), [&a, &b]));
        // Not yet: one not ready, or one too few.
        assert!(!settles(
            &web(2, Some((2, 1))),
            [&a, &ready("b", Some(false))]
        ));
        assert!(!settles(&web(2, Some((2, 1))), [&a, &ready("b", None)]));
        assert!(!settles(&web(2, Some((2, 1))), [&a]));
        // No status yet (a new object) settles too; so does zero pods of zero.
        assert!(settles(&web(2, None), [&a, &b]));
        assert!(settles(&web(0, Some((1, 1))), []));
        // A finished pod does not count, a terminating one holds it back
        // (a scale-down settles when its pod is gone).
        let done = CachedPod {
            phase: Some("Succeeded".into()),
            ..ready("c", Some(false))
        };
        assert!(settles(&web(2, Some((2, 1))), [&a, &b, &done]));
        let mut going = ready("c", Some(true));
        going.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        assert!(!settles(&web(2, Some((3, 3))), [&a, &b, &going]));
    }

    #[test]
    fn an_owner_whose_status_already_shows_it_settled_is_churn() {
        let (a, b) = (ready("a", Some(true)), ready("b", Some(true)));
        assert!(!settles(&web(2, Some((2, 2))), [&a, &b]));
        // The status describes an older generation (a spec edit in flight).
        let mut edited = web(2, Some((2, 2)));
        edited.metadata.generation = Some(3);
        assert!(settles(&edited, [&a, &b]));
        // A plugin that names no generation: the counts decide.
        let mut unnamed = web(2, Some((2, 2)));
        if let Some(status) = unnamed.status.as_mut() {
            status.observed_generation = None;
        }
        assert!(!settles(&unnamed, [&a, &b]));
    }

    #[tokio::test]
    async fn a_settling_event_queues_its_owner_ahead_of_the_window() {
        let window = Duration::from_secs(30);
        let events = futures::stream::iter(vec![
            Ok(pod("db-1", "db", "Jinghzhu", true)),
            Ok(pod("web-1", "web", "Jinghzhu", true)),
            Ok(pod("web-2", "web", "Jinghzhu", true)),
        ])
        .chain(futures::stream::pending());
        let config = PodBatchConfig {
            window,
            max_window: window,
            ..PodBatchConfig::default()
        };
        // Only web's second event settles it.
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let settled = move |owner: &ObjectRef<Jinghzhu>| {
            owner.name == "web" && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1
        };
        let mut triggers = Box::pin(owner_triggers(events, config, || 0, settled));
        let owner = tokio::time::timeout(Duration::from_secs(5), triggers.next())
            .await
            .expect("web at once, not after the window")
            .expect("open stream");
        assert_eq!(owner.name, "web");
        // It joined the request web's first event made: queued once.
        let more = tokio::time::timeout(Duration::from_millis(300), triggers.next()).await;
        assert!(more.is_err(), "another trigger: {more:?}");
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
            |_| false,
        ));
        let owner = tokio::time::timeout(Duration::from_millis(50), triggers.next())
            .await
            .expect("at once");
        assert_eq!(owner.map(|o| o.name).as_deref(), Some("web"));
    }

    #[tokio::test]
    async fn an_owner_queued_at_once_needs_no_timer_tick() {
        // Polled once, with no await in between for a timer to fire: an
        // entry due "now" would still sit in the scheduler's queue.
        for (window, settled) in [(Duration::ZERO, false), (DEFAULT_WINDOW, true)] {
            let events = futures::stream::iter(vec![Ok(pod("web-1", "web", "Jinghzhu", true))])
                .chain(futures::stream::pending());
            let config = PodBatchConfig {
                window,
                max_window: window,
                ..PodBatchConfig::default()
            };
            let mut triggers = Box::pin(owner_triggers(events, config, || 0, move |_| settled));
            let owner = triggers.next().now_or_never().flatten();
            assert_eq!(owner.map(|o| o.name).as_deref(), Some("web"), "{window:?}");
        }
    }
}
