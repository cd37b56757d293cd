//! The slot's side of a canary rollout ([`crate::judging::plan`]): which plugin
//! an object is reconciled with while one goes on, the outcomes it
//! records, the stable shadow on the cohort, and the steps, promotion and
//! abort, judged here ([`CanarySide::advance`]) or followed from
//! the judging replica ([`CanarySide::follow`]). A step's advance
//! and an abort re-queue every object, so the cohort moves within one
//! reconcile each.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::slot::ActivePlugin;
use tokio::sync::mpsc;

use super::stable_check::{self, StableCheck};
use crate::actions::ProposedActions;
use crate::apply::Limits;
use crate::apply::policy::PolicyConfig;
use crate::crd::Jinghzhu;
use crate::crd::plugin::ReplicaRollout;
use crate::judging::plan::{AbortReason, Steps, Strategy, Verdict};
use crate::judging::tally::Sample;
use crate::locks::{MutexExt, RwLockExt};
use crate::runtime::LoadedPlugin;
use crate::slot::shadow::{DEFAULT_SHADOW_QUEUE, ShadowQueue};

/// A rollout in progress: the new plugin and how its steps are judged.
pub struct Canary {
    /// The new plugin.
    pub plugin: Arc<LoadedPlugin>,
    /// Its steps and their tallies.
    pub steps: Steps,
    /// The stable plugin as a shadow on the cohort (`shadowStable`), and
    /// the comparisons it reports (true: the proposals differed).
    pub stable_shadow: Option<(ShadowQueue, mpsc::Receiver<bool>)>,
    /// The stable plugin run on the inputs the canary fails on, and its
    /// verdicts (see [`crate::slot::stable_check`]); none without a stable plugin.
    pub stable_check: Option<(StableCheck, mpsc::Receiver<stable_check::Verdict>)>,
}

impl std::fmt::Debug for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canary")
            .field("plugin", &self.plugin.describe())
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

impl Canary {
    /// A rollout of `plugin` over the stable plugin `stable` (its digest;
    /// the plugin itself where this replica has it, for the failure
    /// checks), its first step starting now; `excused` were failing under
    /// stable.
    pub fn start(
        plugin: Arc<LoadedPlugin>,
        (stable, stable_plugin): (String, Option<Arc<LoadedPlugin>>),
        strategy: Strategy,
        excused: HashSet<String>,
    ) -> Self {
        let canary = plugin.digest().to_string();
        Self {
            plugin,
            steps: Steps::start(canary, stable, strategy, excused),
            stable_shadow: None,
            stable_check: stable_plugin.map(StableCheck::start),
        }
    }

    /// Counts the stable shadow's comparisons and the stable plugin's
    /// verdicts on the canary's failures reported so far.
    pub fn drain_reports(&mut self) {
        if let Some((_, verdicts)) = self.stable_shadow.as_mut() {
            while let Ok(differed) = verdicts.try_recv() {
                self.steps.record_comparison(differed);
            }
        }
        if let Some((_, verdicts)) = self.stable_check.as_mut() {
            while let Ok(verdict) = verdicts.try_recv() {
                self.steps
                    .settle(&verdict.uid, verdict.refused, verdict.shared);
            }
        }
    }
}

/// What [`CanarySide::start`] did.
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

/// What changed in a rollout ([`CanarySide::advance`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RolloutChange {
    /// The next step began, with this cohort in percent (`empty`: the step
    /// before had no object in its cohort).
    Advanced {
        /// The cohort now, in percent.
        weight: u32,
        /// The step passed had no object in its cohort.
        empty: bool,
    },
    /// The step has been held past twice its duration without a reconcile
    /// to judge: it waits (reported once per step).
    Starved,
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

/// What the judge decided, as a follower reads it from the status.
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    /// The rollout is at this step (from 1), begun this long ago.
    Step {
        /// The step, from 1.
        step: usize,
        /// How long ago it began.
        ago: Duration,
    },
    /// The canary was promoted.
    Promoted,
    /// The canary was aborted.
    Aborted(AbortReason),
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

/// The slot's side of a rollout: `slot.canary()`.
pub struct CanarySide<'a> {
    pub(super) slot: &'a ActivePlugin,
}

impl CanarySide<'_> {
    /// Rolls `plugin` out as a canary over the plugin serving now (see
    /// [`CanaryStart`]). A canary aborted before is refused (its digest
    /// named) until [`CanarySide::retry_aborted`].
    pub fn start(
        &self,
        plugin: Arc<LoadedPlugin>,
        strategy: Strategy,
        paused: bool,
    ) -> Result<CanaryStart, String> {
        let Some(stable) = self.slot.serving() else {
            return Ok(CanaryStart::NoRollout);
        };
        let digest = plugin.digest().to_string();
        if stable.digest() == digest {
            *self.slot.canary.write_unpoisoned() = None;
            return Ok(CanaryStart::NoRollout);
        }
        if self.lock_aborted().as_deref() == Some(digest.as_str()) {
            return Err(format!(
                "{} was aborted as a canary; it is not offered again until a new digest or a \
                 retry (an edit of spec.rollout)",
                plugin.describe()
            ));
        }
        let mut canary = self.slot.canary.write_unpoisoned();
        if let Some(running) = canary.as_mut()
            && running.plugin.digest() == digest
        {
            // An edit of spec.rollout applies to the rollout going on; a
            // stable shadow turned on sees every cohort object again.
            let shadowed = running.stable_shadow.is_some();
            self.shadow_stable(
                running,
                &stable,
                strategy.thresholds.max_difference.is_some(),
            );
            running.steps.update(strategy);
            running.steps.paused = paused;
            let requeue = !shadowed && running.stable_shadow.is_some();
            drop(canary);
            if requeue {
                self.slot.generation.send_modify(|g| *g += 1);
            }
            return Ok(CanaryStart::Updated);
        }
        // Objects failing now (under stable, or a canary aborted since
        // stable last reconciled them) are not charged to this canary.
        let excused = self.slot.failing.lock_unpoisoned().failing_except(&digest);
        let shadowed = strategy.thresholds.max_difference.is_some();
        let mut started = Canary::start(
            plugin,
            (stable.digest().to_string(), Some(stable.clone())),
            strategy,
            excused,
        );
        started.steps.paused = paused;
        self.shadow_stable(&mut started, &stable, shadowed);
        tracing::info!(
            stable = %stable.describe(),
            canary = %started.plugin.describe(),
            weight = started.steps.weight(),
            "canary rollout started"
        );
        *canary = Some(started);
        drop(canary);
        self.slot.repin();
        self.slot.generation.send_modify(|g| *g += 1);
        Ok(CanaryStart::Started)
    }

    /// Takes up a rollout the fleet is in (read from the judge's status
    /// before anything serves here, as after a restart): `plugin` is the
    /// canary over the stable plugin `stable` (its digest), at step `step`
    /// begun `ago`. The stable plugin serves the other objects if this
    /// slot has it (restored by the caller); if not, they wait, and the
    /// canary serves its cohort. A canary aborted before is refused.
    pub fn resume(
        &self,
        plugin: Arc<LoadedPlugin>,
        stable: &str,
        strategy: Strategy,
        (step, ago, paused): (usize, Duration, bool),
    ) -> Result<CanaryStart, String> {
        let digest = plugin.digest().to_string();
        if self.lock_aborted().as_deref() == Some(digest.as_str()) {
            return Err(format!(
                "{} was aborted as a canary; it is not offered again until a new digest or a \
                 retry (an edit of spec.rollout)",
                plugin.describe()
            ));
        }
        let serving = self.slot.serving().filter(|s| s.digest() == stable);
        let shadowed = strategy.thresholds.max_difference.is_some();
        let mut resumed = Canary::start(
            plugin,
            (stable.to_string(), serving.clone()),
            strategy,
            HashSet::new(),
        );
        resumed.steps.paused = paused;
        resumed.steps.follow(step, ago);
        if let Some(stable) = &serving {
            self.shadow_stable(&mut resumed, stable, shadowed);
        }
        tracing::info!(
            stable,
            stable_here = serving.is_some(),
            canary = %resumed.plugin.describe(),
            weight = resumed.steps.weight(),
            "canary rollout taken up from the judge's status"
        );
        *self.slot.canary.write_unpoisoned() = Some(resumed);
        self.slot.repin();
        self.slot.generation.send_modify(|g| *g += 1);
        Ok(CanaryStart::Started)
    }

    /// Refuses `digest` as a canary until a retry (the judging replica
    /// aborted it; see [`CanarySide::start`]).
    pub fn refuse(&self, digest: &str) {
        *self.lock_aborted() = Some(digest.to_string());
    }

    /// Starts (or stops) the stable plugin as a shadow on `canary`'s cohort.
    fn shadow_stable(&self, canary: &mut Canary, stable: &Arc<LoadedPlugin>, on: bool) {
        if on && canary.stable_shadow.is_none() {
            canary.stable_shadow = Some(ShadowQueue::start_reporting(
                stable.clone(),
                DEFAULT_SHADOW_QUEUE,
                self.slot.metrics.clone(),
            ));
        } else if !on {
            canary.stable_shadow = None;
        }
    }

    /// Forgets the aborted canary, so the same digest may be rolled out again.
    pub fn retry_aborted(&self) {
        *self.slot.aborted.lock_unpoisoned() = None;
    }

    fn lock_aborted(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.slot.aborted.lock_unpoisoned()
    }

    /// Counts a reconcile's outcome (`sample`, its call `latency`) by the
    /// plugin `digest` for the rollout's judge.
    pub fn record(&self, object: &str, digest: &str, sample: Sample, latency: Duration) {
        // Every reconcile records its outcome: no write lock without a rollout.
        if self.slot.canary.read_unpoisoned().is_none() {
            return;
        }
        let mut canary = self.slot.canary.write_unpoisoned();
        if let Some(canary) = canary.as_mut() {
            canary.steps.record(object, digest, sample, latency);
        }
    }

    /// A canary's failed call (`refused`: its refused proposal) on the
    /// object `key` (`uid`) goes to the stable plugin, which is run on the
    /// same input to tell whose failure it is ([`crate::slot::stable_check`]).
    /// Nothing happens for other plugins' failures, or without a rollout.
    pub fn check_with_stable(
        &self,
        input: (&Arc<Jinghzhu>, &[Pod]),
        (key, uid, digest): (&str, &str, &str),
        refused: bool,
        (limits, host): (&Limits, &PolicyConfig),
    ) {
        let canary = self.slot.canary.read_unpoisoned();
        let Some(canary) = canary.as_ref().filter(|c| c.plugin.digest() == digest) else {
            return;
        };
        if let Some((check, _)) = &canary.stable_check {
            let policy = self.slot.policy_for(&canary.steps.stable, host);
            check.offer(input, (key, uid), refused, (limits, &policy));
        }
    }

    /// A canary's proposal `active` for the object `key` goes to the
    /// stable shadow of the rollout, if it runs one.
    pub(super) fn offer_stable_shadow(
        &self,
        jz: &Arc<Jinghzhu>,
        pods: &[Pod],
        (key, digest): (&str, &str),
        active: &ProposedActions,
        rules: (&Limits, &PolicyConfig),
    ) {
        let canary = self.slot.canary.read_unpoisoned();
        let Some(canary) = canary.as_ref() else {
            return;
        };
        if let Some((queue, _)) = &canary.stable_shadow
            && canary.plugin.digest() == digest
        {
            self.slot.offer_to(queue, jz, pods, key, active, rules);
        }
    }

    /// This replica's figures for the rollout's step now, for its entry.
    pub fn figures(&self) -> Option<ReplicaRollout> {
        let mut canary = self.slot.canary.write_unpoisoned();
        let canary = canary.as_mut()?;
        canary.drain_reports();
        let (canary_figures, stable_figures) = canary.steps.figures(Instant::now());
        Some(ReplicaRollout {
            canary: canary.plugin.digest().to_string(),
            step: u32::try_from(canary.steps.step().0).unwrap_or(u32::MAX),
            canary_figures,
            stable_figures,
        })
    }

    /// Judges the rollout's step at `now` on this replica's figures and
    /// `others` (the other replicas' entries), and acts on the verdict.
    /// Returns what changed and the figures it was judged on.
    pub fn advance(
        &self,
        now: Instant,
        others: &[ReplicaRollout],
    ) -> Option<(RolloutChange, String)> {
        let (verdict, figures) = {
            let mut canary = self.slot.canary.write_unpoisoned();
            let canary = canary.as_mut()?;
            canary.drain_reports();
            let digest = canary.plugin.digest().to_string();
            let step = u32::try_from(canary.steps.step().0).unwrap_or(u32::MAX);
            let theirs: Vec<_> = others
                .iter()
                .filter(|r| r.canary == digest && r.step == step)
                .map(|r| (r.canary_figures, r.stable_figures))
                .collect();
            let judged = canary.steps.judge(now, &theirs);
            if matches!(judged.0, Verdict::Advance { .. }) {
                self.excuse_failing(canary);
            }
            if judged.0 == Verdict::Starved && !canary.steps.report_starved() {
                return None;
            }
            judged
        };
        self.conclude(verdict).map(|change| (change, figures))
    }

    /// As a step begins: objects failing under the stable plugin now
    /// (those moving into the cohort among them) are excused for the rest
    /// of the rollout; their failures are their input's, not the canary's.
    fn excuse_failing(&self, canary: &mut Canary) {
        let failing = self
            .slot
            .failing
            .lock_unpoisoned()
            .failing_under(&canary.steps.stable);
        canary.steps.excuse(failing);
    }

    /// Follows the judge's decision on the canary `digest` (another
    /// replica's, read from the status): its step (begun `ago`), or
    /// its promotion or abort (`reason`).
    pub fn follow(&self, digest: &str, decision: Followed) -> Option<RolloutChange> {
        let mut canary = self.slot.canary.write_unpoisoned();
        let running = canary.as_mut().filter(|c| c.plugin.digest() == digest)?;
        match decision {
            Followed::Step { step, ago } => {
                let before = running.steps.step().0;
                running.steps.follow(step, ago);
                let weight = running.steps.weight();
                if step <= before {
                    return None;
                }
                self.excuse_failing(running);
                drop(canary);
                tracing::info!(weight, "canary rollout: the next step (the judge's)");
                self.slot.generation.send_modify(|g| *g += 1);
                Some(RolloutChange::Advanced {
                    weight,
                    empty: false,
                })
            }
            Followed::Promoted => {
                drop(canary);
                self.conclude(Verdict::Promote)
            }
            Followed::Aborted(reason) => {
                drop(canary);
                self.conclude(Verdict::Abort(reason))
            }
        }
    }

    /// A person's decision on the canary `digest` (promote, or abort with
    /// `reason`); nothing when another canary, or none, is rolling out.
    pub fn decide(&self, digest: &str, promote: bool) -> Option<RolloutChange> {
        let running = self
            .slot
            .canary
            .read_unpoisoned()
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
            Verdict::Starved => Some(RolloutChange::Starved),
            Verdict::Advance { weight, empty } => {
                tracing::info!(weight, empty, "canary rollout: the next step");
                self.slot.generation.send_modify(|g| *g += 1);
                Some(RolloutChange::Advanced { weight, empty })
            }
            Verdict::Promote => {
                let canary = self.slot.canary.write_unpoisoned().take()?;
                tracing::info!(plugin = %canary.plugin.describe(), "canary rollout: promoted");
                self.slot.swap(canary.plugin);
                Some(RolloutChange::Promoted)
            }
            Verdict::Abort(reason) => {
                let canary = self.slot.canary.write_unpoisoned().take()?;
                let digest = canary.plugin.digest().to_string();
                tracing::warn!(plugin = %canary.plugin.describe(), rule = reason.rule, figures = %reason.message, "canary rollout aborted; every object back on the stable plugin");
                *self.lock_aborted() = Some(digest.clone());
                self.slot.metrics.plugin_rollbacks.inc();
                self.slot.generation.send_modify(|g| *g += 1);
                Some(RolloutChange::Aborted {
                    canary: digest,
                    reason,
                })
            }
        }
    }

    /// The rollout going on, if any.
    pub fn view(&self) -> Option<RolloutView> {
        let canary = self.slot.canary.read_unpoisoned();
        canary.as_ref().map(|c| RolloutView {
            stable: c.steps.stable.clone(),
            canary: c.plugin.digest().to_string(),
            weight: c.steps.weight(),
            step: c.steps.step(),
            paused: c.steps.paused,
        })
    }
}
