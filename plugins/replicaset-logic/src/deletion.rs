//! Which surplus Pods to delete first, following the `ActivePods` ordering
//! of Kubernetes' ReplicaSet controller as far as the input tells: Pods that
//! are not running yet (`pending`, then `unknown`) before `running` ones,
//! not ready before ready, no creation time before newer before older; and
//! finally by name so the choice is deterministic.
//!
//! (The controller also prefers unscheduled Pods, Pods sharing a node and
//! Pods with more restarts; the input carries none of that.)

use std::cmp::Ordering;

use jinghzhu_plugin_sdk::types::{PodPhase, Timestamp};
use jinghzhu_plugin_sdk::view::PodView;

/// The rank of a phase: lower goes first.
fn phase_rank(phase: PodPhase) -> u8 {
    match phase {
        PodPhase::Pending => 0,
        PodPhase::Unknown => 1,
        PodPhase::Running => 2,
        // Finished Pods are not live and never candidates; rank them last.
        PodPhase::Succeeded | PodPhase::Failed => 3,
    }
}

/// Missing creation time first, then newest first.
fn cmp_newest_first(a: Option<&Timestamp>, b: Option<&Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(a),
    }
}

/// `Less` when `a` should be deleted before `b`.
pub fn cmp_deletion_priority(a: &PodView<'_>, b: &PodView<'_>) -> Ordering {
    let (ma, mb) = (a.metadata(), b.metadata());
    phase_rank(a.phase())
        .cmp(&phase_rank(b.phase()))
        .then_with(|| a.ready().cmp(&b.ready()))
        .then_with(|| {
            cmp_newest_first(
                ma.creation_timestamp().as_ref(),
                mb.creation_timestamp().as_ref(),
            )
        })
        .then_with(|| ma.name().cmp(mb.name()))
}

/// The `count` Pods of `candidates` to delete, first to go first.
pub fn pick<'a>(candidates: &[PodView<'a>], count: usize) -> Vec<PodView<'a>> {
    let mut ordered = candidates.to_vec();
    ordered.sort_by(cmp_deletion_priority);
    ordered.truncate(count);
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;
    use jinghzhu_plugin_sdk::testing::pod;
    use jinghzhu_plugin_sdk::types::Pod;

    fn names(pods: &[PodView<'_>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata().name().to_owned())
            .collect()
    }

    fn views(pods: &[Pod]) -> Vec<PodView<'_>> {
        pods.iter().map(PodView::of).collect()
    }

    #[test]
    fn order_follows_active_pods() {
        let pods: Vec<Pod> = vec![
            pod("old-ready", PodPhase::Running).created_at(100).into(),
            pod("new-ready", PodPhase::Running).created_at(200).into(),
            pod("running-not-ready", PodPhase::Running)
                .ready(false)
                .created_at(50)
                .into(),
            pod("unknown", PodPhase::Unknown).created_at(10).into(),
            pod("pending-old", PodPhase::Pending).created_at(10).into(),
            pod("pending-new", PodPhase::Pending).created_at(300).into(),
            pod("pending-no-time", PodPhase::Pending)
                .no_creation_timestamp()
                .into(),
        ];
        let refs = views(&pods);
        assert_eq!(
            names(&pick(&refs, pods.len())),
            [
                "pending-no-time",
                "pending-new",
                "pending-old",
                "unknown",
                "running-not-ready",
                "new-ready",
                "old-ready"
            ]
        );
        assert_eq!(names(&pick(&refs, 2)), ["pending-no-time", "pending-new"]);
    }

    #[test]
    fn ties_break_by_name() {
        let pods: Vec<Pod> = vec![
            pod("b", PodPhase::Running).into(),
            pod("a", PodPhase::Running).into(),
        ];
        let refs = views(&pods);
        assert_eq!(names(&pick(&refs, 1)), ["a"]);
    }
}
