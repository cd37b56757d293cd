//! The slot's side of a canary rollout ([`super::canary`]): which plugin
//! an object is reconciled with while one goes on, and the steps,
//! promotion and abort. A step's advance and an abort re-queue every
//! object, so the cohort moves within one reconcile each.

use std::sync::Arc;
use std::time::Instant;

use super::ActivePlugin;
use super::canary::{AbortReason, Canary, Strategy, Verdict};
use crate::runtime::LoadedPlugin;

/// What [`ActivePlugin::start_canary`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum CanaryStart {
    /// A rollout of the plugin began at its first step.
    Started,
    /// The plugin is the canary already: only `paused` was updated.
    Updated,
    /// Nothing serves yet, or the plugin is the stable one: no rollout
    /// (the caller serves it directly).
    NoRollout,
}

/// What changed in a rollout ([`ActivePlugin::advance_rollout`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RolloutChange {
    /// The next step began, with this cohort in percent.
    Advanced(u32),
    /// The canary passed its last step and serves every object.
    Promoted,
    /// The canary failed a criterion; every object is back on stable.
    Aborted {
        /// The canary's digest (not offered again until a retry).
        canary: String,
        /// The criterion and its figures.
        reason: AbortReason,
    },
}

/// A rollout as shown in the status.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutView {
    /// The stable plugin's digest.
    pub stable: String,
    /// The canary's digest.
    pub canary: String,
    /// The cohort now, in percent.
    pub weight: u32,
    /// The step now (from 1), and how many.
    pub step: (usize, usize),
    /// Held at its step.
    pub paused: bool,
}

impl ActivePlugin {
    /// Rolls `plugin` out as a canary over the plugin serving now (see
    /// [`CanaryStart`]). A canary aborted before is refused (its digest
    /// named) until [`ActivePlugin::retry_aborted`].
    pub fn start_canary(
        &self,
        plugin: Arc<LoadedPlugin>,
        strategy: Strategy,
        paused: bool,
    ) -> Result<CanaryStart, String> {
        let Some(stable) = self.serving() else {
            return Ok(CanaryStart::NoRollout);
        };
        let digest = plugin.digest().to_string();
        if stable.digest() == digest {
            *self.canary.write().unwrap_or_else(|e| e.into_inner()) = None;
            return Ok(CanaryStart::NoRollout);
        }
        if self.lock_aborted().as_deref() == Some(digest.as_str()) {
            return Err(format!(
                "{} was aborted as a canary; it is not offered again until a new digest or a \
                 retry (an edit of spec.rollout)",
                plugin.describe()
            ));
        }
        let mut canary = self.canary.write().unwrap_or_else(|e| e.into_inner());
        if let Some(running) = canary.as_mut()
            && running.plugin.digest() == digest
        {
            running.steps.paused = paused;
            return Ok(CanaryStart::Updated);
        }
        let excused = self
            .failing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failing_under(stable.digest());
        let mut started = Canary::start(plugin, stable.digest().to_string(), strategy, excused);
        started.steps.paused = paused;
        tracing::info!(
            stable = %stable.describe(),
            canary = %started.plugin.describe(),
            weight = started.steps.weight(),
            "canary rollout started"
        );
        *canary = Some(started);
        drop(canary);
        self.repin();
        self.generation.send_modify(|g| *g += 1);
        Ok(CanaryStart::Started)
    }

    /// Forgets the aborted canary, so the same digest may be rolled out again.
    pub fn retry_aborted(&self) {
        *self.aborted.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn lock_aborted(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.aborted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plugin the object `uid` is reconciled with now: the canary for
    /// its cohort while a rollout goes on, else the one serving.
    pub fn plugin_for(&self, uid: &str) -> Option<Arc<LoadedPlugin>> {
        let canary = self.canary.read().unwrap_or_else(|e| e.into_inner());
        if let Some(canary) = canary.as_ref()
            && canary.steps.serves(uid)
        {
            return Some(canary.plugin.clone());
        }
        drop(canary);
        self.serving()
    }

    /// Counts a reconcile's outcome for the rollout's judge.
    pub(super) fn record_for_rollout(&self, object: &str, digest: &str, ok: bool) {
        // Every reconcile records its outcome: no write lock without a rollout.
        if self
            .canary
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            return;
        }
        let mut canary = self.canary.write().unwrap_or_else(|e| e.into_inner());
        if let Some(canary) = canary.as_mut() {
            canary.steps.record(object, digest, ok);
        }
    }

    /// Judges the rollout's step at `now` and acts on the verdict.
    pub fn advance_rollout(&self, now: Instant) -> Option<RolloutChange> {
        let verdict = {
            let mut canary = self.canary.write().unwrap_or_else(|e| e.into_inner());
            canary.as_mut()?.steps.judge(now)
        };
        self.conclude(verdict)
    }

    /// A person's decision on the canary `digest` (promote, or abort with
    /// `reason`); nothing when another canary, or none, is rolling out.
    pub fn decide_rollout(&self, digest: &str, promote: bool) -> Option<RolloutChange> {
        let running = self
            .canary
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|c| c.plugin.digest() == digest);
        if !running {
            return None;
        }
        self.conclude(if promote {
            Verdict::Promote
        } else {
            Verdict::Abort(AbortReason {
                rule: "rollout/manual-abort",
                message: "aborted by hand (wasm-operator rollout abort, or the \
                          jinghzhu.io/rollout-action annotation)"
                    .into(),
            })
        })
    }

    /// Acts on a verdict on the running canary.
    fn conclude(&self, verdict: Verdict) -> Option<RolloutChange> {
        match verdict {
            Verdict::Hold => None,
            Verdict::Advance(weight) => {
                tracing::info!(weight, "canary rollout: the next step");
                self.generation.send_modify(|g| *g += 1);
                Some(RolloutChange::Advanced(weight))
            }
            Verdict::Promote => {
                let canary = self
                    .canary
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()?;
                tracing::info!(plugin = %canary.plugin.describe(), "canary rollout: promoted");
                self.swap(canary.plugin);
                Some(RolloutChange::Promoted)
            }
            Verdict::Abort(reason) => {
                let canary = self
                    .canary
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()?;
                let digest = canary.plugin.digest().to_string();
                tracing::warn!(plugin = %canary.plugin.describe(), rule = reason.rule, figures = %reason.message, "canary rollout aborted; every object back on the stable plugin");
                *self.lock_aborted() = Some(digest.clone());
                self.metrics.plugin_rollbacks.inc();
                self.generation.send_modify(|g| *g += 1);
                Some(RolloutChange::Aborted {
                    canary: digest,
                    reason,
                })
            }
        }
    }

    /// The rollout going on, if any.
    pub fn rollout_view(&self) -> Option<RolloutView> {
        let canary = self.canary.read().unwrap_or_else(|e| e.into_inner());
        canary.as_ref().map(|c| RolloutView {
            stable: c.steps.stable.clone(),
            canary: c.plugin.digest().to_string(),
            weight: c.steps.weight(),
            step: c.steps.step(),
            paused: c.steps.paused,
        })
    }
}
