//! Which replica judges a resource's canary rollout, and what it reads of
//! the others.
//!
//! One replica judges the steps of a rollout for the whole fleet: the
//! holder of shard 0 when sharded (as [`super::prune`] prunes), the leader
//! with `--leader-elect` (standbys reconcile nothing), else the only
//! replica. It judges on its own figures plus those every other replica
//! publishes in its `status.replicas` entry for the same canary and step,
//! and writes each decision to `status.rollout`; every other replica
//! follows that status (see [`super::rollout`]), so all of them serve the
//! same cohort and conclude the same way.

use std::sync::{Arc, OnceLock};

use crate::crd::plugin::{JinghzhuPlugin, ReplicaRollout};
use crate::leader::Leadership;
use crate::shards::Shards;

/// The shard whose holder judges rollouts (the one whose holder prunes).
pub const JUDGING_SHARD: u32 = 0;

/// How the judging replica is chosen.
#[derive(Clone)]
pub enum JudgeBy {
    /// This is the only replica.
    Alone,
    /// The leader of `--leader-elect`.
    Leader(Leadership),
    /// The holder of shard [`JUDGING_SHARD`].
    Shard(Shards),
}

/// Whether this replica judges; the fleet's shape is known only once the
/// election or the shards started, after the resources are followed, so
/// it is decided later ([`RolloutJudge::decide`]); until then nothing is
/// judged here.
#[derive(Clone)]
pub struct RolloutJudge {
    by: Arc<OnceLock<JudgeBy>>,
}

impl std::fmt::Debug for RolloutJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let by = match self.by.get() {
            None => "undecided",
            Some(JudgeBy::Alone) => "alone",
            Some(JudgeBy::Leader(_)) => "the leader",
            Some(JudgeBy::Shard(_)) => "the holder of shard 0",
        };
        f.debug_struct("RolloutJudge").field("by", &by).finish()
    }
}

impl Default for RolloutJudge {
    /// The only replica.
    fn default() -> Self {
        let judge = Self::later();
        judge.decide(JudgeBy::Alone);
        judge
    }
}

impl RolloutJudge {
    /// A judge decided later by [`RolloutJudge::decide`].
    pub fn later() -> Self {
        Self {
            by: Arc::new(OnceLock::new()),
        }
    }

    /// How the judging replica is chosen (the first call counts).
    pub fn decide(&self, by: JudgeBy) {
        let _ = self.by.set(by);
    }

    /// Whether this replica judges now.
    pub fn here(&self) -> bool {
        match self.by.get() {
            None => false,
            Some(JudgeBy::Alone) => true,
            Some(JudgeBy::Leader(leadership)) => leadership.is_leading(),
            Some(JudgeBy::Shard(shards)) => shards.is_active_here(JUDGING_SHARD),
        }
    }
}

/// The figures the other replicas published in `resource`'s status.
pub fn others_figures(resource: Option<&JinghzhuPlugin>, replica: &str) -> Vec<ReplicaRollout> {
    resource
        .and_then(|r| r.status.as_ref())
        .map(|status| {
            status
                .replicas
                .iter()
                .filter(|entry| entry.name != replica)
                .filter_map(|entry| entry.rollout.clone())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::plugin::{JinghzhuPluginStatus, ReplicaStatus};

    #[test]
    fn an_undecided_judge_judges_nothing_and_a_lone_one_does() {
        assert!(!RolloutJudge::later().here());
        assert!(RolloutJudge::default().here());
        let judge = RolloutJudge::later();
        judge.decide(JudgeBy::Leader(Leadership::always()));
        assert!(judge.here(), "a host without election leads");
    }

    #[test]
    fn the_others_figures_leave_out_this_replica_and_entries_without_any() {
        let entry = |name: &str, step: Option<u32>| ReplicaStatus {
            name: name.into(),
            rollout: step.map(|step| ReplicaRollout {
                canary: "sha256:c".into(),
                step,
                ..ReplicaRollout::default()
            }),
            ..ReplicaStatus::default()
        };
        let mut resource = JinghzhuPlugin::new("p", Default::default());
        resource.status = Some(JinghzhuPluginStatus {
            replicas: vec![entry("me", Some(1)), entry("a", Some(2)), entry("b", None)],
            ..JinghzhuPluginStatus::default()
        });
        let others = others_figures(Some(&resource), "me");
        assert_eq!(others.len(), 1);
        assert_eq!(others[0].step, 2);
        assert!(others_figures(None, "me").is_empty());
    }
}
