//! A resource's canary rollout (`spec.rollout`, see
//! [`crate::hotswap::canary`]): a vetted artifact that is not the one
//! serving becomes a canary instead of being swapped in; the driver judges
//! its steps every second and writes each change to the status (the
//! `Rollout` condition and `status.rollout`); an abort is a refusal (rule
//! `rollout/failure-rate`, a `PluginRefused` Warning naming the figures).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Driver, RuleRefusal};
use crate::crd::plugin::{JinghzhuPlugin, PluginMode, RolloutSpec, RolloutStatus};
use crate::hotswap::canary::Strategy;
use crate::hotswap::rollout::{CanaryStart, RolloutChange, RolloutView};
use crate::runtime::LoadedPlugin;

/// The annotation by which a person promotes or aborts a canary:
/// `promote sha256:…` or `abort sha256:…` (the canary's digest, so a
/// decision never applies to a later canary). `wasm-operator rollout` writes it.
pub const ROLLOUT_ACTION_ANNOTATION: &str = "jinghzhu.io/rollout-action";

/// How often a rollout's step is judged.
pub const ROLLOUT_TICK: Duration = Duration::from_secs(1);

/// What became of a vetted artifact offered to the rollout.
pub(super) enum Offer {
    /// It is the canary now (or still).
    Canary,
    /// Refused (an aborted canary offered again); the refusal is written.
    Refused,
    /// No rollout: serve it directly.
    Serve,
}

/// The strategy `spec` describes.
fn strategy(spec: &RolloutSpec) -> Strategy {
    Strategy {
        steps: spec.steps.clone(),
        hold: Duration::from_secs(u64::from(spec.step_seconds)),
        min_reconciles: spec.min_reconciles,
        max_failure_increase: f64::from(spec.max_failure_increase_percent.min(100)) / 100.0,
    }
}

/// `status.rollout` for `view` in `phase`.
fn status_of(view: &RolloutView, phase: &str, message: Option<String>) -> RolloutStatus {
    RolloutStatus {
        phase: phase.into(),
        stable: Some(view.stable.clone()),
        canary: Some(view.canary.clone()),
        weight: view.weight,
        step: Some(format!("{}/{}", view.step.0, view.step.1)),
        message,
    }
}

impl Driver {
    /// Offers the vetted `plugin` to `resource`'s rollout, if it asks for
    /// one and this driver serves the active plugin.
    pub(super) async fn offer_canary(
        &mut self,
        resource: &JinghzhuPlugin,
        plugin: &Arc<LoadedPlugin>,
        seen_at: Instant,
    ) -> Offer {
        let Some(spec) = resource.spec.rollout.as_ref() else {
            return Offer::Serve;
        };
        if self.role != PluginMode::Active {
            return Offer::Serve;
        }
        match self
            .active
            .start_canary(plugin.clone(), strategy(spec), spec.paused)
        {
            Ok(CanaryStart::NoRollout) => Offer::Serve,
            Ok(start) => {
                if let Some(view) = self.active.rollout_view() {
                    let phase = if view.paused { "Paused" } else { "Progressing" };
                    let message = format!(
                        "{} canary at step {}/{}: {}% of the objects",
                        plugin.describe(),
                        view.step.0,
                        view.step.1,
                        view.weight
                    );
                    if start == CanaryStart::Started {
                        tracing::info!(resource = %self.name, %message, "canary rollout");
                    }
                    self.writer.set("Rollout", true, phase, &message);
                    self.writer
                        .set_rollout(Some(status_of(&view, phase, Some(message))));
                }
                Offer::Canary
            }
            Err(why) => {
                let refusal = RuleRefusal::new("rollout/aborted", why);
                self.refuse(resource, plugin.digest(), refusal, seen_at)
                    .await;
                Offer::Refused
            }
        }
    }

    /// Judges the rollout's step and writes what changed.
    pub(super) async fn on_rollout_tick(&mut self, resource: Option<Arc<JinghzhuPlugin>>) {
        let before = self.active.rollout_view();
        let Some(change) = self.active.advance_rollout(Instant::now()) else {
            return;
        };
        if let Some(before) = before {
            self.report_rollout(before, change, resource).await;
        }
    }

    /// A person's decision in the `jinghzhu.io/rollout-action` annotation
    /// (`promote sha256:…` or `abort sha256:…`, naming the canary it is
    /// for), acted on once per value.
    pub(super) async fn on_rollout_action(&mut self, resource: &Arc<JinghzhuPlugin>) {
        let action = resource
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ROLLOUT_ACTION_ANNOTATION))
            .cloned();
        if action.is_none() || action == self.last_rollout_action {
            return;
        }
        self.last_rollout_action = action.clone();
        let Some((verb, digest)) = action.as_deref().and_then(|a| a.split_once(' ')) else {
            tracing::warn!(resource = %self.name, action = ?action, "{ROLLOUT_ACTION_ANNOTATION} is not `promote DIGEST` or `abort DIGEST`; ignored");
            return;
        };
        let promote = match verb {
            "promote" => true,
            "abort" => false,
            _ => {
                tracing::warn!(resource = %self.name, verb, "unknown rollout action; ignored");
                return;
            }
        };
        let before = self.active.rollout_view();
        let Some(change) = self.active.decide_rollout(digest.trim(), promote) else {
            tracing::info!(resource = %self.name, verb, digest, "rollout action for a canary not rolling out here; nothing to do");
            return;
        };
        if let Some(before) = before {
            self.report_rollout(before, change, Some(resource.clone()))
                .await;
        }
    }

    /// Writes a rollout's change (status, condition; an abort as a refusal).
    async fn report_rollout(
        &mut self,
        before: RolloutView,
        change: RolloutChange,
        resource: Option<Arc<JinghzhuPlugin>>,
    ) {
        match change {
            RolloutChange::Advanced(weight) => {
                let view = self.active.rollout_view().unwrap_or(before);
                let message = format!(
                    "step {}/{}: the canary serves {weight}% of the objects",
                    view.step.0, view.step.1
                );
                self.writer.set("Rollout", true, "Progressing", &message);
                self.writer
                    .set_rollout(Some(status_of(&view, "Progressing", Some(message))));
            }
            RolloutChange::Promoted => {
                let message = format!("{} promoted: it serves every object", before.canary);
                self.writer.set("Rollout", true, "Promoted", &message);
                let mut status = status_of(&before, "Promoted", Some(message));
                status.weight = 100;
                self.writer.set_rollout(Some(status));
                self.report_serving();
            }
            RolloutChange::Aborted { canary, reason } => {
                let message = format!("aborted by {}: {}", reason.rule, reason.message);
                self.writer
                    .set_rollout(Some(status_of(&before, "Aborted", Some(message.clone()))));
                if let Some(resource) = resource {
                    let refusal = RuleRefusal::new(reason.rule, reason.message);
                    self.refuse(&resource, &canary, refusal, Instant::now())
                        .await;
                }
                self.writer.set("Rollout", false, "Aborted", &message);
            }
        }
        self.writer.write().await;
    }
}
