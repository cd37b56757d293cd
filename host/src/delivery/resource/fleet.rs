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

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::crd::plugin::{
    JinghzhuPlugin, ReplicaRollout, ReplicaStatus, RolloutFigures, RolloutStatus,
};
use crate::judging::criteria;
use crate::judging::plan::AbortReason;
use crate::leader::Leadership;
use crate::shards::Shards;
use crate::slot::canary::Followed;

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

impl RolloutJudge {
    /// The other replicas whose entries the judge may count: the live
    /// members when sharded (each renews a membership Lease); none with
    /// `--leader-elect` (standbys reconcile nothing) or alone.
    pub fn live_members(&self) -> Vec<String> {
        match self.by.get() {
            Some(JudgeBy::Shard(shards)) => shards.members(),
            _ => Vec::new(),
        }
    }
}

/// Why an entry's figures were left out of the judging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ignored {
    /// Its replica is not a live member of the fleet.
    NotLive,
    /// Not written by its replica's field manager (`wasm-operator/<name>`).
    NotItsOwn,
    /// It claims more objects than the fleet has.
    OutOfBounds,
}

impl Ignored {
    /// The label of the metric and the words of the Warning.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotLive => "not-live",
            Self::NotItsOwn => "not-its-own",
            Self::OutOfBounds => "out-of-bounds",
        }
    }
}

/// The other replicas' figures the judge counts, and the entries it left
/// out (by name, and why).
#[derive(Debug, Default, PartialEq)]
pub struct Counted {
    /// Figures to add to the judge's own.
    pub figures: Vec<ReplicaRollout>,
    /// Entries left out.
    pub ignored: Vec<(String, Ignored)>,
}

/// The figures the other replicas published in `resource`'s status that
/// the judge counts (see [`entries_counted`]).
pub fn others_figures(
    resource: Option<&JinghzhuPlugin>,
    replica: &str,
    live: &[String],
    objects_bound: u64,
) -> Counted {
    let Some(resource) = resource else {
        return Counted::default();
    };
    let entries = resource.status.as_ref().map(|s| s.replicas.as_slice());
    entries_counted(
        &resource.metadata,
        entries.unwrap_or_default(),
        replica,
        live,
        objects_bound,
    )
}

/// The figures of the other replicas' `entries` (a resource's
/// `status.replicas`, whose metadata is `meta`) that the judge counts: an
/// entry counts only while its replica is one of `live`, only as written by
/// its replica's own field manager, and only within what that replica could
/// have seen (no more objects than `objects_bound`, the fleet's; its counts
/// consistent with each other).
pub fn entries_counted(
    meta: &ObjectMeta,
    entries: &[ReplicaStatus],
    replica: &str,
    live: &[String],
    objects_bound: u64,
) -> Counted {
    let mut counted = Counted::default();
    let owned = own_entries(meta);
    for entry in entries {
        let Some(figures) = entry.rollout.as_ref().filter(|_| entry.name != replica) else {
            continue;
        };
        let ignored = if !owned.contains(&entry.name) {
            Some(Ignored::NotItsOwn)
        } else if !live.contains(&entry.name) {
            Some(Ignored::NotLive)
        } else if figures
            .canary_figures
            .objects
            .saturating_add(figures.stable_figures.objects)
            > objects_bound
        {
            Some(Ignored::OutOfBounds)
        } else {
            None
        };
        match ignored {
            Some(why) => counted.ignored.push((entry.name.clone(), why)),
            None => counted.figures.push(ReplicaRollout {
                canary_figures: consistent(figures.canary_figures),
                stable_figures: consistent(figures.stable_figures),
                ..figures.clone()
            }),
        }
    }
    counted
}

/// `figures` with every count bounded by what it is a part of: failing and
/// stalled objects by the objects, objects and refused, accepted and
/// compared proposals by the reconciles, differing ones by those compared.
fn consistent(figures: RolloutFigures) -> RolloutFigures {
    let reconciles = figures.reconciles;
    let objects = figures.objects.min(reconciles);
    let compared = figures.compared.min(reconciles);
    RolloutFigures {
        reconciles,
        objects,
        failed: figures.failed.min(objects),
        stalled: figures.stalled.min(objects),
        rejected: figures.rejected.min(reconciles),
        accepted: figures.accepted.min(reconciles),
        compared,
        differed: figures.differed.min(compared),
        ..figures
    }
}

/// The `status.replicas` entries no replica wrote (not under their own
/// replica's field manager), with their indexes, for one guarded removal.
pub fn planted_entries(meta: &ObjectMeta, entries: &[ReplicaStatus]) -> Vec<(usize, String)> {
    let own = own_entries(meta);
    entries
        .iter()
        .enumerate()
        .filter(|(_, e)| !own.contains(&e.name))
        .map(|(index, e)| (index, e.name.clone()))
        .collect()
}

/// The names of the `status.replicas` entries written by their replica's
/// own field manager (`wasm-operator/<name>` owns the entry keyed by
/// `name`, as the resource's `metadata.managedFields` records it).
pub fn own_entries(meta: &ObjectMeta) -> std::collections::HashSet<String> {
    let mut own = std::collections::HashSet::new();
    for managed in meta.managed_fields.iter().flatten() {
        let Some(name) = managed
            .manager
            .as_deref()
            .and_then(|m| m.strip_prefix(super::FIELD_MANAGER_PREFIX))
        else {
            continue;
        };
        let key = format!("k:{}", serde_json::json!({ "name": name }));
        let owns = managed
            .fields_v1
            .as_ref()
            .and_then(|f| f.0.get("f:status"))
            .and_then(|s| s.get("f:replicas"))
            .is_some_and(|r| r.get(&key).is_some());
        if owns {
            own.insert(name.to_string());
        }
    }
    own
}

/// The judge's `rollout` if it is of the canary `digest` at `generation`
/// (the resource's now): a decision for another canary, or one made
/// before an edit of the spec (a retry), is not this one's.
pub fn decided_for<'a>(
    rollout: Option<&'a RolloutStatus>,
    generation: Option<i64>,
    digest: &str,
) -> Option<&'a RolloutStatus> {
    rollout.filter(|r| r.canary.as_deref() == Some(digest) && r.observed_generation == generation)
}

/// How long ago an RFC 3339 time was (zero when unreadable or ahead).
pub fn since(time: Option<&str>) -> Duration {
    time.and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .and_then(|t| {
            let ago = k8s_openapi::jiff::Timestamp::now().duration_since(t);
            Duration::try_from(ago).ok()
        })
        .unwrap_or_default()
}

/// `step/steps` → the step.
pub fn step_of(rollout: &RolloutStatus) -> usize {
    rollout
        .step
        .as_deref()
        .and_then(|s| s.split_once('/'))
        .and_then(|(step, _)| step.parse().ok())
        .unwrap_or(1)
}

/// What a replica that does not judge makes of the judge's `rollout`.
pub fn followed(rollout: &RolloutStatus) -> Option<Followed> {
    match rollout.phase.as_str() {
        "Progressing" | "Paused" => Some(Followed::Step {
            step: step_of(rollout),
            ago: since(rollout.step_started.as_deref()),
        }),
        "Promoted" => Some(Followed::Promoted),
        "Aborted" => Some(Followed::Aborted(AbortReason {
            rule: criteria::rule_named(rollout.rule.as_deref().unwrap_or_default()),
            message: rollout.message.clone().unwrap_or_default(),
        })),
        _ => None,
    }
}

/// How many objects `api` lists (no replica can have seen more), asked
/// with a one-item list; `None` when the list failed or took longer than
/// `timeout`.
pub async fn count_objects<K>(api: kube::Api<K>, timeout: Duration) -> Option<u64>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let listed = tokio::time::timeout(
        timeout,
        api.list_metadata(&kube::api::ListParams::default().limit(1)),
    )
    .await;
    let Ok(Ok(list)) = listed else {
        return None;
    };
    Some(
        match (
            list.metadata.remaining_item_count,
            list.metadata.continue_.as_deref(),
        ) {
            (Some(rest), _) => u64::try_from(rest).unwrap_or(0) + list.items.len() as u64,
            (None, None | Some("")) => list.items.len() as u64,
            (None, Some(_)) => u64::MAX,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::plugin::{JinghzhuPluginStatus, ReplicaStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    #[test]
    fn an_undecided_judge_judges_nothing_and_a_lone_one_does() {
        assert!(!RolloutJudge::later().here());
        assert!(RolloutJudge::default().here());
        let judge = RolloutJudge::later();
        judge.decide(JudgeBy::Leader(Leadership::always()));
        assert!(judge.here(), "a host without election leads");
    }

    fn entry(name: &str, objects: Option<u64>) -> ReplicaStatus {
        ReplicaStatus {
            name: name.into(),
            rollout: objects.map(|objects| ReplicaRollout {
                canary: "sha256:c".into(),
                step: 1,
                canary_figures: RolloutFigures {
                    reconciles: objects,
                    objects,
                    failed: objects * 2,
                    ..RolloutFigures::default()
                },
                ..ReplicaRollout::default()
            }),
            ..ReplicaStatus::default()
        }
    }

    /// `manager` owns the `status.replicas` entries named `entries`.
    fn owns(manager: &str, entries: &[&str]) -> ManagedFieldsEntry {
        let keys: serde_json::Map<String, serde_json::Value> = entries
            .iter()
            .map(|name| {
                (
                    format!("k:{}", serde_json::json!({ "name": name })),
                    serde_json::json!({".": {}}),
                )
            })
            .collect();
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            subresource: Some("status".into()),
            fields_v1: Some(FieldsV1(
                serde_json::json!({"f:status": {"f:replicas": keys}}),
            )),
            ..ManagedFieldsEntry::default()
        }
    }

    fn resource(entries: Vec<ReplicaStatus>, managers: Vec<ManagedFieldsEntry>) -> JinghzhuPlugin {
        let mut resource = JinghzhuPlugin::new("p", Default::default());
        resource.metadata.managed_fields = Some(managers);
        resource.status = Some(JinghzhuPluginStatus {
            replicas: entries,
            ..JinghzhuPluginStatus::default()
        });
        resource
    }

    #[test]
    fn only_live_members_own_entries_within_the_fleet_count() {
        let resource = resource(
            vec![
                entry("me", Some(1)),
                entry("live", Some(4)),
                entry("crashed", Some(4)),
                entry("planted", Some(100_000)),
                entry("boastful", Some(50)),
                entry("quiet", None),
            ],
            vec![
                owns("wasm-operator/me", &["me"]),
                owns("wasm-operator/live", &["live"]),
                owns("wasm-operator/crashed", &["crashed"]),
                owns("kubectl-patch", &["planted"]),
                owns("wasm-operator/boastful", &["boastful"]),
                // A manager named for one replica owning another's entry.
                owns("wasm-operator/live", &["quiet"]),
            ],
        );
        let live = ["me", "live", "planted", "boastful", "quiet"].map(String::from);
        let counted = others_figures(Some(&resource), "me", &live, 20);
        assert_eq!(counted.figures.len(), 1);
        let theirs = counted.figures[0].canary_figures;
        assert_eq!(
            (theirs.objects, theirs.failed),
            (4, 4),
            "failed bounded by objects"
        );
        assert_eq!(
            counted.ignored,
            [
                ("crashed".to_string(), Ignored::NotLive),
                ("planted".to_string(), Ignored::NotItsOwn),
                ("boastful".to_string(), Ignored::OutOfBounds),
            ]
        );
        assert!(others_figures(None, "me", &live, 20).figures.is_empty());
        let owned = own_entries(&resource.metadata);
        assert!(owned.contains("live") && !owned.contains("planted") && !owned.contains("quiet"));
    }
}
