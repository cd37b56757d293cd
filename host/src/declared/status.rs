//! What the host says on a `PluginController`'s status: resolving,
//! serving, refused, and the canary rollout going on or last decided.

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::controller::Declaration;
use super::kinds;
use crate::crd::controller::{PluginController, ShadowStatus};
use crate::crd::plugin::{PluginRefusal, RolloutStatus, RolloutStepRecord};
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
}

impl StatusOf {
    pub(super) fn new(resource: &PluginController, client: &Client) -> Self {
        Self {
            api: Api::all(client.clone()),
            name: resource.name_any(),
            generation: resource.metadata.generation,
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
