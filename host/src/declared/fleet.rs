//! A declared controller's canary under `--shards`: no replica sees every
//! parent's reconciles, so each replica publishes what it serves and its
//! figures for the canary's step in its own entry of the
//! `PluginController`'s `status.replicas` (server-side apply under its own
//! field manager, `wasm-operator/<replica>`, at most every
//! [`FIGURES_INTERVAL`]). The holder of shard 0 judges the step on its own
//! figures plus the entries it counts
//! ([`crate::delivery::resource::fleet::entries_counted`]: live members'
//! own entries, within the parents the cluster holds) and writes each
//! decision to `status.rollout`; every other replica follows that
//! decision: the judge's step, or its promotion or abort. The judge removes
//! the entries no replica wrote in one guarded patch (the list holds at
//! most 256), as on the `Jinghzhu` path.

use std::collections::HashSet;
use std::time::Instant;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};

use super::rollout::{Judged, RolloutView, Slot};
use crate::crd::controller::PluginController;
use crate::crd::plugin::{ReplicaRollout, ReplicaStatus, RolloutStatus, RolloutStepRecord};
use crate::delivery::resource::FIELD_MANAGER_PREFIX;
use crate::delivery::resource::fleet::{self, Ignored};
// The same pace as the Jinghzhu path's fleet.
use crate::delivery::resource::rollout::{
    ENTRY_RETRY_INTERVAL, FIGURES_INTERVAL, FLEET_COUNT_INTERVAL, JUDGE_READ_TIMEOUT,
    PLANTED_INTERVAL,
};
use crate::delivery::resource::status::{REWRITE_INTERVAL, remove_entries_of};
use crate::plugin_text;
use crate::shards::Shards;

/// One sharded replica's side of a controller's rollout.
pub(super) struct Fleet {
    client: Client,
    controller: String,
    shards: Shards,
    parent: ApiResource,
    /// The entry last written, and when.
    written: Option<(serde_json::Value, Instant)>,
    /// When a write had to leave the entry out (the list was full).
    left_out: Option<Instant>,
    planted_checked: Option<Instant>,
    parents_counted: Option<(u64, Instant)>,
    /// Entries left out of the judging, reported once each.
    reported: HashSet<(String, Ignored)>,
}

/// What a tick decided of the rollout `before`.
pub(super) struct Decided {
    /// The rollout before the decision.
    pub before: RolloutView,
    /// The decision.
    pub judged: Judged,
    /// The figures it was made on (the judge's words, when followed).
    pub figures: String,
    /// The judge's step history, when followed.
    pub history: Option<Vec<RolloutStepRecord>>,
}

/// What a tick did: a decision, and Warnings to say.
#[derive(Default)]
pub(super) struct Tick {
    /// The rollout's change, if any.
    pub decided: Option<Decided>,
    /// Warnings about entries whose figures the judge left out.
    pub warnings: Vec<String>,
}

impl Fleet {
    /// The side of the controller `controller` (whose parents are of
    /// `parent`) on the replica holding `shards`.
    pub(super) fn new(
        client: Client,
        controller: &str,
        shards: Shards,
        parent: ApiResource,
    ) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            shards,
            parent,
            written: None,
            left_out: None,
            planted_checked: None,
            parents_counted: None,
            reported: HashSet::new(),
        }
    }

    /// Whether this replica judges the rollout now (it holds shard 0).
    pub(super) fn judges(&self) -> bool {
        super::sharding::writes_resource_status(Some(&self.shards))
    }

    /// Every second: judges the step (the holder of shard 0) or follows
    /// the judge's decision in `resource` (as last seen), then writes this
    /// replica's entry.
    pub(super) async fn tick(&mut self, slot: &Slot, resource: &PluginController) -> Tick {
        let mut tick = Tick::default();
        if let Some(before) = slot.view() {
            if self.judges() {
                self.remove_planted(resource).await;
                let others = self.counted(resource, &mut tick.warnings).await;
                let (judged, figures) = slot.judge(Instant::now(), &others);
                tick.decided = Some(Decided {
                    before,
                    judged,
                    figures,
                    history: None,
                });
            } else {
                tick.decided = follow(slot, before, resource);
            }
        }
        self.publish(slot).await;
        tick
    }

    /// Writes this replica's entry: the stable plugin it serves and its
    /// figures for the step going on; when it changed (at most every
    /// [`FIGURES_INTERVAL`]) or every [`REWRITE_INTERVAL`].
    async fn publish(&mut self, slot: &Slot) {
        let entry = ReplicaStatus {
            name: self.shards.identity().to_string(),
            digest: slot.stable().digest().to_string(),
            state: if slot.canary().is_some() {
                "RollingOut".into()
            } else {
                "Serving".into()
            },
            rollout: slot.figures(),
            ..ReplicaStatus::default()
        };
        let entry = serde_json::to_value(entry).unwrap_or_default();
        let now = Instant::now();
        if let Some((last, at)) = &self.written {
            let wait = if *last == entry {
                REWRITE_INTERVAL
            } else {
                FIGURES_INTERVAL
            };
            if now.saturating_duration_since(*at) < wait {
                return;
            }
        }
        if self
            .left_out
            .is_some_and(|at| now.saturating_duration_since(at) < ENTRY_RETRY_INTERVAL)
        {
            return;
        }
        let body = serde_json::json!({
            "apiVersion": PluginController::api_version(&()),
            "kind": PluginController::kind(&()),
            "metadata": { "name": self.controller },
            "status": { "replicas": [entry] },
        });
        let manager = format!("{FIELD_MANAGER_PREFIX}{}", self.shards.identity());
        let api: Api<PluginController> = Api::all(self.client.clone());
        let params = PatchParams::apply(&manager).force();
        match api
            .patch_status(&self.controller, &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => {
                self.written = Some((entry, now));
                self.left_out = None;
            }
            Err(kube::Error::Api(status)) if status.code == 422 => {
                tracing::warn!(controller = %self.controller, error = %status.message, "this replica's status.replicas entry was refused (is the list full?); the judge removes entries no replica wrote, tried again shortly");
                self.left_out = Some(now);
            }
            Err(err) => {
                tracing::warn!(controller = %self.controller, error = %err, "could not write this replica's status.replicas entry");
            }
        }
    }

    /// The other replicas' figures the judge counts; a Warning for each
    /// entry left out (once per entry and reason) goes to `warnings`.
    async fn counted(
        &mut self,
        resource: &PluginController,
        warnings: &mut Vec<String>,
    ) -> Vec<ReplicaRollout> {
        let entries = resource.status.as_ref().map(|s| s.replicas.as_slice());
        let entries = entries.unwrap_or_default();
        let me = self.shards.identity().to_string();
        let others = entries.iter().any(|e| e.rollout.is_some() && e.name != me);
        if !others {
            return Vec::new();
        }
        let bound = self.parents().await;
        let live = self.shards.members();
        let counted = fleet::entries_counted(&resource.metadata, entries, &me, &live, bound);
        for (name, why) in counted.ignored {
            if !self.reported.insert((name.clone(), why)) {
                continue;
            }
            let name = plugin_text::escape_within(&name, 253);
            tracing::warn!(controller = %self.controller, entry = %name, reason = why.as_str(), "rollout figures not counted");
            warnings.push(format!(
                "the rollout's judge leaves out the figures of the status.replicas entry {name} \
                 (rule rollout/figures-not-counted): {}",
                ignored_text(why)
            ));
        }
        counted.figures
    }

    /// How many parents the cluster holds (no replica can have seen more),
    /// counted at most every [`FLEET_COUNT_INTERVAL`]; unknown (no
    /// bound) until counted.
    async fn parents(&mut self) -> u64 {
        if let Some((count, at)) = self.parents_counted
            && at.elapsed() < FLEET_COUNT_INTERVAL
        {
            return count;
        }
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &self.parent);
        let count = match fleet::count_objects(api, JUDGE_READ_TIMEOUT).await {
            Some(count) => count,
            None => self.parents_counted.map_or(u64::MAX, |(count, _)| count),
        };
        self.parents_counted = Some((count, Instant::now()));
        count
    }

    /// Removes the entries no replica wrote (not owned by the field
    /// manager of the replica they name), all of them in one guarded patch
    /// every [`PLANTED_INTERVAL`]: they are not the fleet's, and a full
    /// list keeps real replicas' entries out.
    async fn remove_planted(&mut self, resource: &PluginController) {
        if self
            .planted_checked
            .is_some_and(|at| at.elapsed() < PLANTED_INTERVAL)
        {
            return;
        }
        self.planted_checked = Some(Instant::now());
        let entries = resource.status.as_ref().map(|s| s.replicas.as_slice());
        let planted = fleet::planted_entries(&resource.metadata, entries.unwrap_or_default());
        if planted.is_empty() {
            return;
        }
        match remove_entries_of::<PluginController>(&self.client, &self.controller, &planted).await
        {
            Ok(()) => {
                tracing::info!(controller = %self.controller, removed = planted.len(), "removed the status.replicas entries no replica wrote");
                // The list has room now: this replica's entry goes in at
                // once rather than at its next retry.
                self.left_out = None;
                self.written = None;
            }
            Err(err) => {
                tracing::debug!(controller = %self.controller, error = %err, "the status.replicas entries no replica wrote were not removed (moved meanwhile?); looked at again next time");
            }
        }
    }
}

/// The words of a Warning for an entry left out.
fn ignored_text(why: Ignored) -> &'static str {
    match why {
        Ignored::NotLive => "its replica is not a live member of the fleet",
        Ignored::NotItsOwn => "it was not written by its replica's field manager",
        Ignored::OutOfBounds => "it claims more parents than the cluster holds",
    }
}

/// The judge's decision on the canary `digest` at `resource`'s generation
/// now, as its status shows it.
pub(super) fn decision<'a>(
    resource: &'a PluginController,
    digest: &str,
) -> Option<&'a RolloutStatus> {
    let rollout = resource.status.as_ref().and_then(|s| s.rollout.as_ref());
    fleet::decided_for(rollout, resource.metadata.generation, digest)
}

/// A replica that does not judge follows the judge's decision on the
/// canary it rolls out (`before`): its step, or its promotion or abort.
fn follow(slot: &Slot, before: RolloutView, resource: &PluginController) -> Option<Decided> {
    let rollout = decision(resource, before.canary.digest())?;
    let followed = fleet::followed(rollout)?;
    let judged = slot.follow(before.canary.digest(), followed)?;
    Some(Decided {
        before,
        judged,
        figures: format!(
            "as the judge {} decided: {}",
            rollout.judge.as_deref().unwrap_or("(holder of shard 0)"),
            rollout.message.as_deref().unwrap_or_default()
        ),
        history: Some(rollout.history.clone()),
    })
}

/// Removes `replica`'s entry from the `status.replicas` of every
/// `PluginController` that has one (a replica stopping gracefully: its
/// entry would otherwise stay for good, left out of every judgement as
/// not live). One guarded patch per resource; errors are logged.
pub async fn leave(client: &Client, replica: &str) {
    let api: Api<PluginController> = Api::all(client.clone());
    let resources = match api.list(&Default::default()).await {
        Ok(list) => list.items,
        Err(err) => {
            tracing::warn!(error = %err, "could not list the PluginControllers to remove this replica's entries");
            return;
        }
    };
    for resource in resources {
        let entries = resource.status.as_ref().map_or(&[][..], |s| &s.replicas);
        let Some(index) = entries.iter().position(|r| r.name == replica) else {
            continue;
        };
        let name = resource.name_any();
        let entry = [(index, replica.to_string())];
        match remove_entries_of::<PluginController>(client, &name, &entry).await {
            Ok(()) => {
                tracing::info!(controller = %name, replica, "removed this replica's entry from the PluginController status")
            }
            Err(err) => {
                tracing::warn!(controller = %name, error = %err, "could not remove this replica's entry from the PluginController status")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::controller::PluginControllerStatus;

    fn controller(generation: i64, rollout: RolloutStatus) -> PluginController {
        let mut resource: PluginController = serde_json::from_value(serde_json::json!({
            "apiVersion": "wasm-operator.io/v1alpha1",
            "kind": "PluginController",
            "metadata": {"name": "c", "generation": generation},
            "spec": {
                "parent": {"apiVersion": "example.com/v1", "kind": "Thing"},
                "source": {"file": {"path": "/p.wasm"}},
            }
        }))
        .expect("a PluginController");
        resource.status = Some(PluginControllerStatus {
            rollout: Some(rollout),
            ..PluginControllerStatus::default()
        });
        resource
    }

    #[test]
    fn a_decision_counts_only_for_its_canary_at_the_generation_now() {
        let rollout = RolloutStatus {
            phase: "Promoted".into(),
            canary: Some("sha256:c".into()),
            observed_generation: Some(2),
            ..RolloutStatus::default()
        };
        let resource = controller(2, rollout.clone());
        assert!(decision(&resource, "sha256:c").is_some());
        assert!(
            decision(&resource, "sha256:other").is_none(),
            "another canary"
        );
        let edited = controller(3, rollout);
        assert!(
            decision(&edited, "sha256:c").is_none(),
            "decided before an edit of the spec (a retry)"
        );
    }
}
