//! What the host says on a `PluginController`'s status: resolving,
//! serving, refused, and the canary rollout going on or last decided.
//!
//! Sharded, every replica supervises every resource, but only the holder
//! of shard 0 writes its status ([`super::sharding::writes_resource_status`]);
//! the others keep what they would have written as one merge patch, sent
//! when they take shard 0 ([`StatusOf::flush`]).

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::controller::Declaration;
use super::kinds;
use crate::crd::controller::{PluginController, ShadowStatus};
use crate::crd::plugin::{PluginRefusal, RolloutStatus, RolloutStepRecord};
use crate::locks::MutexExt;
use crate::refusal::Refusal;
use crate::runtime::LoadedPlugin;

/// A rollout as [`StatusOf::rollout`] shows it.
pub(super) struct RolloutShown<'a> {
    pub phase: &'a str,
    pub stable: &'a str,
    pub canary: &'a str,
    pub weight: u32,
    pub step: (usize, usize),
    pub message: &'a str,
    pub rule: Option<&'a str>,
    pub history: &'a [RolloutStepRecord],
}

/// Writes a resource's status (merge patches on its status subresource).
pub(super) struct StatusOf {
    api: Api<PluginController>,
    name: String,
    generation: Option<i64>,
    /// Sharded: the replica's shards (it writes while it holds shard 0).
    shards: Option<crate::shards::Shards>,
    /// What was not written yet (not the status writer), as one merge patch.
    unsent: std::sync::Mutex<Option<serde_json::Value>>,
}

impl StatusOf {
    pub(super) fn new(resource: &PluginController, client: &Client) -> Self {
        Self {
            api: Api::all(client.clone()),
            name: resource.name_any(),
            generation: resource.metadata.generation,
            shards: None,
            unsent: std::sync::Mutex::new(None),
        }
    }

    /// Sharded: writes only while this replica holds shard 0.
    pub(super) fn sharded(mut self, shards: Option<crate::shards::Shards>) -> Self {
        self.shards = shards;
        self
    }

    /// Sends what was kept while another replica wrote the status, once
    /// this one writes it (called on the supervisor's tick).
    pub(super) async fn flush(&self) {
        if !super::sharding::writes_resource_status(self.shards.as_ref()) {
            return;
        }
        let unsent = self.unsent.lock_unpoisoned().take();
        if let Some(status) = unsent {
            self.send(status).await;
        }
    }

    /// Sharded: once the supervisor is done, sends what is kept when this
    /// replica writes the status (until then it looks every second).
    pub(super) async fn settle(&self) {
        while self.unsent.lock_unpoisoned().is_some() {
            self.flush().await;
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }

    pub(super) async fn resolving(&self, declaration: &Declaration, why: &str) {
        self.write(json!({
            "state": "Resolving",
            "resources": resources(declaration),
            "conditions": [condition("Serving", false, "Resolving", why, self.generation)],
        }))
        .await;
    }

    pub(super) async fn serving(&self, declaration: &Declaration, plugin: &LoadedPlugin) {
        self.write(json!({
            "state": "Serving",
            "plugin": plugin.describe(),
            "digest": plugin.digest(),
            "resources": resources(declaration),
            "conditions": [condition("Serving", true, "Serving", &format!("{} serves", plugin.describe()), self.generation)],
        }))
        .await;
    }

    pub(super) async fn refused(&self, digest: &str, refusal: &Refusal) {
        let last = PluginRefusal {
            digest: digest.to_string(),
            rule: refusal.rule.to_string(),
            message: refusal.message.clone(),
            time: now_rfc3339(),
            replica: std::env::var("POD_NAME").unwrap_or_default(),
        };
        self.write(json!({
            "state": "Refused",
            "lastRefusal": last,
        }))
        .await;
    }

    /// Shows the rollout: `phase` (`Progressing`, `Paused`, `Promoted`,
    /// `Aborted`), the two plugins, the step, what happened last and, for
    /// an abort, the rule.
    pub(super) async fn rollout(&self, shown: RolloutShown<'_>) {
        let status = RolloutStatus {
            phase: shown.phase.to_string(),
            stable: Some(shown.stable.to_string()),
            canary: Some(shown.canary.to_string()),
            weight: shown.weight,
            step: Some(format!("{}/{}", shown.step.0, shown.step.1)),
            message: Some(crate::plugin_text::escape_within(shown.message, 1024)),
            rule: shown.rule.map(str::to_string),
            observed_generation: self.generation,
            step_started: Some(now_rfc3339()),
            history: shown.history.to_vec(),
            // Sharded: the replica that judges (the holder of shard 0).
            judge: self.shards.as_ref().map(|s| s.identity().to_string()),
            ..RolloutStatus::default()
        };
        let mut rollout = json!(status);
        // A merge patch keeps fields it does not name: an earlier rollout's
        // rule or history would linger.
        for field in ["rule", "history", "judge", "lastAction"] {
            if rollout.get(field).is_none() {
                rollout[field] = serde_json::Value::Null;
            }
        }
        self.write_raw(json!({ "rollout": rollout })).await;
    }

    /// Shows the shadow plugin's figures (`status.shadow`), whole: a field
    /// it does not hold is removed.
    pub(super) async fn shadow(&self, shadow: &ShadowStatus) {
        let mut shown = json!(shadow);
        for field in [
            "plugin",
            "digest",
            "since",
            "lastDifference",
            "lastRefused",
            "lastRefusal",
        ] {
            if shown.get(field).is_none() {
                shown[field] = serde_json::Value::Null;
            }
        }
        self.write_raw(json!({ "shadow": shown })).await;
    }

    /// Removes `status.shadow` (the spec has no shadow any more).
    pub(super) async fn shadow_removed(&self) {
        self.write_raw(json!({ "shadow": null })).await;
    }

    async fn write(&self, mut status: serde_json::Value) {
        status["observedGeneration"] = json!(self.generation);
        self.write_raw(status).await;
    }

    async fn write_raw(&self, status: serde_json::Value) {
        if !super::sharding::writes_resource_status(self.shards.as_ref()) {
            let mut unsent = self.unsent.lock_unpoisoned();
            match unsent.as_mut() {
                Some(kept) => compose_merge(kept, status),
                None => *unsent = Some(status),
            }
            return;
        }
        let unsent = self.unsent.lock_unpoisoned().take();
        let status = match unsent {
            Some(mut kept) => {
                compose_merge(&mut kept, status);
                kept
            }
            None => status,
        };
        self.send(status).await;
    }

    async fn send(&self, status: serde_json::Value) {
        let patch = json!({ "status": status });
        if let Err(err) = self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(controller = %self.name, "writing the PluginController's status: {err}");
        }
    }
}

/// `later` merged into `first` so that applying the result as a merge
/// patch (RFC 7386) does what applying `first` then `later` does: objects
/// are merged key by key, anything else (a `null` included) replaces.
fn compose_merge(first: &mut serde_json::Value, later: serde_json::Value) {
    match (first, later) {
        (serde_json::Value::Object(first), serde_json::Value::Object(later)) => {
            for (key, value) in later {
                match first.get_mut(&key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        compose_merge(existing, value);
                    }
                    _ => {
                        first.insert(key, value);
                    }
                }
            }
        }
        (first, later) => *first = later,
    }
}

/// The parent's resource, the children's, then each observed kind's and
/// its chain's.
fn resources(declaration: &Declaration) -> Vec<String> {
    std::iter::once(&declaration.parent)
        .chain(declaration.children.iter().map(|(kind, ..)| kind))
        .chain(
            declaration
                .observed
                .iter()
                .flat_map(|o| std::iter::once(&o.kind).chain(&o.through)),
        )
        .map(kinds::ResolvedKind::resource_name)
        .collect()
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> serde_json::Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": crate::plugin_text::escape_within(message, 1024),
        "lastTransitionTime": now_rfc3339(),
        "observedGeneration": generation,
    })
}

pub(super) fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_patches_compose_into_one_that_does_what_both_do() {
        let mut kept = json!({"state": "Resolving", "conditions": [1], "rollout": {"rule": "x", "phase": "Progressing"}});
        compose_merge(
            &mut kept,
            json!({"state": "Serving", "rollout": {"rule": null}, "digest": "sha256:a"}),
        );
        assert_eq!(
            kept,
            json!({"state": "Serving", "conditions": [1], "digest": "sha256:a",
                   "rollout": {"rule": null, "phase": "Progressing"}})
        );
        compose_merge(&mut kept, json!({"conditions": [2, 3]}));
        assert_eq!(kept["conditions"], json!([2, 3]), "a list replaces");
    }
}
