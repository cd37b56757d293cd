//! `wasm-operator rollout promote|abort|pause|resume NAME`: drives a canary
//! rollout of the `JinghzhuPlugin` NAME by patching that resource only; the
//! hosts act on it ([`super::rollout`]). `promote` and `abort` write the
//! `jinghzhu.io/rollout-action` annotation naming the canary now rolling
//! out (so the decision never applies to a later one); `pause` and `resume`
//! set `spec.rollout.paused`.

use anyhow::{Result, bail};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::rollout::ROLLOUT_ACTION_ANNOTATION;
use crate::crd::plugin::JinghzhuPlugin;

/// What to do with a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RolloutAction {
    /// The canary serves every object now.
    Promote,
    /// Every object back on the stable plugin; the canary's digest is not
    /// rolled out again until a new digest or an edit of `spec.rollout`.
    Abort,
    /// Hold the rollout at its step.
    Pause,
    /// Go on from the step it was held at.
    Resume,
}

/// `wasm-operator rollout` arguments.
#[derive(Debug, clap::Args)]
pub struct RolloutArgs {
    /// What to do.
    #[arg(value_enum)]
    pub action: RolloutAction,
    /// The JinghzhuPlugin.
    pub name: String,
}

/// Patches the resource `name` for `action`; returns what was done.
pub async fn apply(client: &Client, name: &str, action: RolloutAction) -> Result<String> {
    let api: Api<JinghzhuPlugin> = Api::all(client.clone());
    let Some(resource) = api.get_opt(name).await? else {
        bail!("no JinghzhuPlugin {name} (kubectl get jinghzhuplugins lists them)");
    };
    if resource.spec.rollout.is_none() {
        bail!("the JinghzhuPlugin {name} has no spec.rollout: its new artifacts serve at once");
    }
    let params = PatchParams::default();
    match action {
        RolloutAction::Pause | RolloutAction::Resume => {
            let paused = action == RolloutAction::Pause;
            let patch = serde_json::json!({"spec": {"rollout": {"paused": paused}}});
            api.patch(name, &params, &Patch::Merge(&patch)).await?;
            Ok(format!("{name}: spec.rollout.paused set to {paused}"))
        }
        RolloutAction::Promote | RolloutAction::Abort => {
            let rollout = resource.status.as_ref().and_then(|s| s.rollout.as_ref());
            let canary = rollout
                .filter(|r| r.phase == "Progressing" || r.phase == "Paused")
                .and_then(|r| r.canary.clone());
            let Some(canary) = canary else {
                bail!(
                    "{name} has no canary rolling out (status.rollout: {})",
                    rollout.map_or_else(|| "none".to_string(), |r| r.phase.clone())
                );
            };
            let verb = if action == RolloutAction::Promote {
                "promote"
            } else {
                "abort"
            };
            let value = format!("{verb} {canary}");
            let patch = serde_json::json!({"metadata": {"annotations": {ROLLOUT_ACTION_ANNOTATION: value}}});
            api.patch(&resource.name_any(), &params, &Patch::Merge(&patch))
                .await?;
            Ok(format!(
                "{name}: {verb} of the canary {canary} asked for ({ROLLOUT_ACTION_ANNOTATION})"
            ))
        }
    }
}
