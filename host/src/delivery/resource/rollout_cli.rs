//! `wasm-operator rollout promote|abort|pause|resume NAME [--controller]`:
//! drives a canary rollout of the `JinghzhuPlugin` (or, with
//! `--controller`, the `PluginController`) NAME by patching that resource
//! only; the hosts act on it ([`super::rollout`], `declared::supervisor`).
//! `promote` and `abort` write the rollout-action annotation naming the
//! canary now rolling out (so the decision never applies to a later one);
//! `pause` and `resume` set `spec.rollout.paused`.

use anyhow::{Result, bail};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::rollout::ROLLOUT_ACTION_ANNOTATION;
use crate::crd::controller::{self, PluginController};
use crate::crd::plugin::{JinghzhuPlugin, RolloutSpec, RolloutStatus};

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
    /// The JinghzhuPlugin (or, with `--controller`, the PluginController).
    pub name: String,
    /// NAME is a PluginController (a declared controller of any kind).
    #[arg(long)]
    pub controller: bool,
}

/// A resource that rolls plugins out: its rollout spec and status, and
/// the annotation a person's decision goes in.
trait RollsOut:
    Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
    + Clone
    + std::fmt::Debug
    + DeserializeOwned
{
    const KIND: &'static str;
    const PLURAL: &'static str;
    const ANNOTATION: &'static str;
    fn rollout_spec(&self) -> Option<&RolloutSpec>;
    fn rollout_status(&self) -> Option<&RolloutStatus>;
}

impl RollsOut for JinghzhuPlugin {
    const KIND: &'static str = "JinghzhuPlugin";
    const PLURAL: &'static str = "jinghzhuplugins";
    const ANNOTATION: &'static str = ROLLOUT_ACTION_ANNOTATION;
    fn rollout_spec(&self) -> Option<&RolloutSpec> {
        self.spec.rollout.as_ref()
    }
    fn rollout_status(&self) -> Option<&RolloutStatus> {
        self.status.as_ref().and_then(|s| s.rollout.as_ref())
    }
}

impl RollsOut for PluginController {
    const KIND: &'static str = "PluginController";
    const PLURAL: &'static str = "plugincontrollers";
    const ANNOTATION: &'static str = controller::ROLLOUT_ACTION_ANNOTATION;
    fn rollout_spec(&self) -> Option<&RolloutSpec> {
        self.spec.rollout.as_ref()
    }
    fn rollout_status(&self) -> Option<&RolloutStatus> {
        self.status.as_ref().and_then(|s| s.rollout.as_ref())
    }
}

/// Patches the `JinghzhuPlugin` `name` for `action`; returns what was done.
pub async fn apply(client: &Client, name: &str, action: RolloutAction) -> Result<String> {
    act::<JinghzhuPlugin>(client, name, action).await
}

/// Patches the `PluginController` `name` for `action`; returns what was done.
pub async fn apply_to_controller(
    client: &Client,
    name: &str,
    action: RolloutAction,
) -> Result<String> {
    act::<PluginController>(client, name, action).await
}

async fn act<K: RollsOut>(client: &Client, name: &str, action: RolloutAction) -> Result<String> {
    let api: Api<K> = Api::all(client.clone());
    let (kind, plural) = (K::KIND, K::PLURAL);
    let Some(resource) = api.get_opt(name).await? else {
        bail!("no {kind} {name} (kubectl get {plural} lists them)");
    };
    if resource.rollout_spec().is_none() {
        bail!("the {kind} {name} has no spec.rollout: its new artifacts serve at once");
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
            let rollout = resource.rollout_status();
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
            let annotation = K::ANNOTATION;
            let patch = serde_json::json!({"metadata": {"annotations": {annotation: value}}});
            api.patch(name, &params, &Patch::Merge(&patch)).await?;
            Ok(format!(
                "{name}: {verb} of the canary {canary} asked for ({annotation})"
            ))
        }
    }
}
