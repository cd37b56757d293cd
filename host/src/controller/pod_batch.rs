//! Pod events as triggers for their controlling Jinghzhu, gathered per owner
//! for a short window.
//!
//! A Jinghzhu's pods change in bursts: created together, then scheduled,
//! started and made ready one by one within a second. Reconciling on every
//! one of those events writes a status for every intermediate count (ready
//! 1, then 2, then 3), each write a request to the API server. So the first
//! pod event of an owner schedules its reconcile [`PodBatchConfig::window`]
//! later, and the events that follow within that window join it (kube's
//! [`scheduler`](kube::runtime::scheduler) keeps the earliest time per
//! owner): a burst costs one reconcile, and no owner waits longer than the
//! window after its first event. Changes to the Jinghzhu itself (a spec
//! edit) are not delayed.
//!
//! A watch error is logged and skipped; the watcher retries with backoff on
//! its own, as it does for `owns_stream`.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::scheduler::{ScheduleRequest, scheduler};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::crd::Jinghzhu;

/// How pod events are gathered before they queue their owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodBatchConfig {
    /// Longest an owner waits after its first pod event (zero: at once).
    pub window: Duration,
}

impl Default for PodBatchConfig {
    fn default() -> Self {
        Self {
            window: DEFAULT_WINDOW,
        }
    }
}

/// The default window: long enough to gather a burst of pod changes, short
/// next to the time pods take to start.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(100);

/// The Jinghzhu that controls `pod`, if any.
pub fn controlling_owner(pod: &Pod) -> Option<ObjectRef<Jinghzhu>> {
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
/// at most once per window.
pub fn owner_triggers(
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    config: PodBatchConfig,
) -> impl Stream<Item = ObjectRef<Jinghzhu>> + Send + 'static {
    let requests = pods.filter_map(move |event| {
        futures::future::ready(match event {
            Ok(pod) => controlling_owner(&pod).map(|owner| ScheduleRequest {
                message: owner,
                run_at: tokio::time::Instant::now() + config.window,
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

    fn pod(name: &str, owner: &str, kind: &str, controller: bool) -> Pod {
        Pod {
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
            ..Pod::default()
        }
    }

    #[test]
    fn only_a_controlling_jinghzhu_is_an_owner() {
        let owner = controlling_owner(&pod("a", "web", "Jinghzhu", true)).expect("owner");
        assert_eq!(owner, ObjectRef::new("web").within("default"));
        assert!(controlling_owner(&pod("b", "web", "Jinghzhu", false)).is_none());
        assert!(controlling_owner(&pod("c", "rs", "ReplicaSet", true)).is_none());
        assert!(controlling_owner(&Pod::default()).is_none());
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
        let mut triggers = Box::pin(owner_triggers(events, PodBatchConfig { window }));
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

    #[tokio::test]
    async fn a_zero_window_queues_at_once() {
        let events = futures::stream::iter(vec![Ok(pod("web-1", "web", "Jinghzhu", true))])
            .chain(futures::stream::pending());
        let mut triggers = Box::pin(owner_triggers(
            events,
            PodBatchConfig {
                window: Duration::ZERO,
            },
        ));
        let owner = tokio::time::timeout(Duration::from_millis(50), triggers.next())
            .await
            .expect("at once");
        assert_eq!(owner.map(|o| o.name).as_deref(), Some("web"));
    }
}
