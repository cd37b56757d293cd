//! What the host writes into a Jinghzhu's status itself, next to the
//! plugin's proposal: `status.readyReplicas` (observed from its pods) and
//! `status.reconciledBy` (the plugin that made the proposal).
//!
//! The plugin decides `current`, `podList`, `state` and `message`; how many
//! pods are ready is an observation, not a decision, so the host counts it
//! from the same cache snapshot the plugin was given and adds it to whatever
//! status is written. (The WIT `jinghzhu-status` record has no such field:
//! adding one would break every existing plugin's type check.) The count
//! follows the ReplicaSet controller's `readyReplicas`: pods that are live
//! (not terminating, not `Succeeded`/`Failed`) with a `Ready` condition
//! `True`.

use k8s_openapi::api::core::v1::Pod;

use crate::crd::JinghzhuStatus;

/// True when the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// True when the pod counts towards `desired`: not terminating and not
/// finished (`Succeeded` or `Failed`).
pub fn is_live(pod: &Pod) -> bool {
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
    pod.metadata.deletion_timestamp.is_none() && !finished
}

/// How many of `owned` are live and ready.
pub fn ready_replicas<'a>(owned: impl IntoIterator<Item = &'a Pod>) -> u32 {
    let ready = owned
        .into_iter()
        .filter(|p| is_live(p) && is_ready(p))
        .count();
    u32::try_from(ready).unwrap_or(u32::MAX)
}

/// The status to write, given the one `stored` on the object, the one the
/// plugin `proposed` (if any), the `owned` pods it saw and the plugin's
/// stamp (`reconciled_by`): the proposal with the host's `readyReplicas` and
/// `reconciledBy`; without a proposal, the stored status with both brought
/// up to date. `None` when there is nothing to say (no proposal and no
/// status yet). The caller still skips the write when the result equals
/// `stored`, so the plugin's identity costs no write of its own.
pub fn status_to_write(
    stored: Option<&JinghzhuStatus>,
    proposed: Option<&JinghzhuStatus>,
    owned: &[Pod],
    reconciled_by: &str,
) -> Option<JinghzhuStatus> {
    let mut status = proposed.or(stored)?.clone();
    status.ready_replicas = Some(ready_replicas(owned));
    status.reconciled_by = Some(reconciled_by.to_string());
    Some(status)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn pod(name: &str, phase: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn terminating(mut pod: Pod) -> Pod {
        pod.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        pod
    }

    #[test]
    fn only_live_ready_pods_count() {
        let pods = [
            pod("ready", "Running", true),
            pod("running-not-ready", "Running", false),
            pod("pending", "Pending", false),
            terminating(pod("terminating-ready", "Running", true)),
            pod("failed", "Failed", false),
            pod("succeeded-with-stale-ready", "Succeeded", true),
            Pod::default(),
        ];
        assert_eq!(ready_replicas(&pods), 1);
        assert!(is_ready(&pods[0]) && !is_ready(&pods[1]) && !is_ready(&pods[6]));
        assert!(is_live(&pods[2]) && !is_live(&pods[3]) && !is_live(&pods[4]));
    }

    #[test]
    fn the_host_adds_ready_replicas_and_its_plugin_to_what_is_written() {
        const STAMP: &str = "replicaset@0.1.0 (sha256:0123456789ab)";
        let pods = [pod("a", "Running", true), pod("b", "Running", false)];
        let stored = JinghzhuStatus {
            current: 2,
            state: "Pending".into(),
            ready_replicas: Some(0),
            ..JinghzhuStatus::default()
        };
        let proposed = JinghzhuStatus {
            current: 2,
            state: "Running".into(),
            ..JinghzhuStatus::default()
        };
        // A proposal is written with the host's count.
        let written =
            status_to_write(Some(&stored), Some(&proposed), &pods, STAMP).expect("status");
        assert_eq!(
            (written.state.as_str(), written.ready_replicas),
            ("Running", Some(1))
        );
        assert_eq!(written.reconciled_by.as_deref(), Some(STAMP));
        // No proposal: the stored status, with the count brought up to date.
        let refreshed = status_to_write(Some(&stored), None, &pods, STAMP).expect("status");
        assert_eq!(
            (refreshed.state.as_str(), refreshed.ready_replicas),
            ("Pending", Some(1))
        );
        // Nothing proposed and nothing stored: nothing to write.
        assert_eq!(status_to_write(None, None, &pods, STAMP), None);
        // Up to date already: the same status comes back, so no write is made.
        let current = JinghzhuStatus {
            ready_replicas: Some(1),
            reconciled_by: Some(STAMP.into()),
            ..stored
        };
        assert_eq!(
            status_to_write(Some(&current), None, &pods, STAMP),
            Some(current.clone())
        );
        // Another plugin took over: its stamp makes the status differ.
        let swapped = status_to_write(Some(&current), None, &pods, "other@2.0.0 (sha256:f00)");
        assert_ne!(swapped, Some(current));
    }
}
