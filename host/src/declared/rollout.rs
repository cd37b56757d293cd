//! The plugin slot of one declared controller: the stable plugin and, with
//! `spec.rollout`, a canary on a growing cohort of the parents, each step
//! judged against the stable plugin over the other parents
//! ([`crate::judging::plan`]). Unsharded, one replica runs a declared
//! controller and judges on its own figures. Sharded, each replica
//! publishes its figures ([`Slot::figures`]), the holder of shard 0 judges
//! on its own plus the others' ([`Slot::judge`], see [`super::fleet`]) and
//! every other replica follows its decision ([`Slot::follow`]).
//!
//! The cohort is a stable hash of the parent's UID; a parent that joined
//! the canary stays with it while the rollout goes on. Parents whose latest
//! reconcile under the stable plugin failed when the rollout began are
//! judged on neither side. Whatever the plugin, its output is held to the
//! same declaration and pod policy: a canary cannot loosen them. With
//! `shadowStable` the stable plugin runs as a shadow on the canary's
//! cohort ([`super::shadow`]) and the share of differing outputs is judged.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::shadow::Shadow;
use crate::crd::plugin::ReplicaRollout;
use crate::judging::plan::{AbortReason, Steps, Strategy, Verdict};
use crate::judging::tally::Sample;
use crate::locks::{MutexExt, RwLockExt};
use crate::runtime::LoadedPlugin;
use crate::slot::canary::Followed;

/// How often a canary's step is judged.
pub const JUDGE_TICK: Duration = Duration::from_secs(1);

/// Most parents remembered as failing under the stable plugin (beyond
/// this, the oldest memory is dropped: a failure not remembered is charged
/// to the canary, never excused wrongly).
pub const FAILING_REMEMBERED: usize = 100_000;

/// The stable plugin, and a canary while a rollout goes on.
pub struct Slot {
    stable: RwLock<Arc<LoadedPlugin>>,
    canary: Mutex<Option<Canary>>,
    /// Parents (UIDs) whose latest reconcile under the stable plugin failed.
    failing: Mutex<HashSet<String>>,
}

struct Canary {
    plugin: Arc<LoadedPlugin>,
    steps: Steps,
    /// The stable plugin as a shadow on the cohort (`shadowStable`), and
    /// its comparisons (true: the outputs differed).
    stable_shadow: Option<(Arc<Shadow>, mpsc::Receiver<bool>)>,
}

/// A rollout as the status shows it.
#[derive(Debug, Clone)]
pub struct RolloutView {
    /// The stable plugin.
    pub stable: Arc<LoadedPlugin>,
    /// The canary.
    pub canary: Arc<LoadedPlugin>,
    /// Its cohort, in percent.
    pub weight: u32,
    /// The step now (from 1), and how many.
    pub step: (usize, usize),
}

/// What judging a step decided.
#[derive(Debug, Clone)]
pub enum Judged {
    /// No rollout goes on, or the step is held.
    Hold,
    /// Held past twice its duration without the reconciles it needs.
    Starved,
    /// The next step began.
    Advanced,
    /// The canary passed its last step and is the stable plugin now.
    Promoted(Arc<LoadedPlugin>),
    /// The canary failed a criterion; every parent is back on stable.
    Aborted(Arc<LoadedPlugin>, AbortReason),
}

impl Slot {
    /// A slot serving `plugin` to every parent.
    pub fn new(plugin: Arc<LoadedPlugin>) -> Self {
        Self {
            stable: RwLock::new(plugin),
            canary: Mutex::new(None),
            failing: Mutex::new(HashSet::new()),
        }
    }

    /// The stable plugin.
    pub fn stable(&self) -> Arc<LoadedPlugin> {
        self.stable.read_unpoisoned().clone()
    }

    /// The canary, while a rollout goes on.
    pub fn canary(&self) -> Option<Arc<LoadedPlugin>> {
        self.canary
            .lock_unpoisoned()
            .as_ref()
            .map(|c| c.plugin.clone())
    }

    /// The plugin the parent `uid` is reconciled with now.
    pub fn plugin_for(&self, uid: &str) -> Arc<LoadedPlugin> {
        if let Some(canary) = self.canary.lock_unpoisoned().as_ref()
            && canary.steps.serves(uid)
        {
            return canary.plugin.clone();
        }
        self.stable()
    }

    /// Serves `plugin` to every parent at once; a rollout going on ends.
    pub fn swap(&self, plugin: Arc<LoadedPlugin>) {
        *self.canary.lock_unpoisoned() = None;
        *self.stable.write_unpoisoned() = plugin;
        self.failing.lock_unpoisoned().clear();
    }

    /// Rolls `plugin` out as a canary over the stable plugin, from its
    /// first step (a canary going on is replaced).
    pub fn start_canary(&self, plugin: Arc<LoadedPlugin>, strategy: Strategy, paused: bool) {
        let stable = self.stable().digest().to_string();
        let excused = self.failing.lock_unpoisoned().clone();
        // No stable check runs beside a declared controller's canary: its
        // failures and refusals count at once.
        let mut steps =
            Steps::start(plugin.digest().to_string(), stable, strategy, excused).unchecked();
        steps.paused = paused;
        *self.canary.lock_unpoisoned() = Some(Canary {
            plugin,
            steps,
            stable_shadow: None,
        });
    }

    /// Runs `shadow` (the stable plugin, reporting) beside the canary on
    /// its cohort (`shadowStable`): its comparisons are judged
    /// (`rollout/difference`). Dropped with the canary.
    pub fn shadow_stable(&self, shadow: Arc<Shadow>, comparisons: mpsc::Receiver<bool>) {
        if let Some(canary) = self.canary.lock_unpoisoned().as_mut() {
            canary.stable_shadow = Some((shadow, comparisons));
        }
    }

    /// The stable shadow to offer a call to when the plugin `digest` (the
    /// one that served it) is the canary.
    pub fn stable_shadow_for(&self, digest: &str) -> Option<Arc<Shadow>> {
        let canary = self.canary.lock_unpoisoned();
        let canary = canary.as_ref().filter(|c| c.plugin.digest() == digest)?;
        canary
            .stable_shadow
            .as_ref()
            .map(|(shadow, _)| shadow.clone())
    }

    /// Records how the reconcile of parent `uid` by the plugin `digest`
    /// ended.
    pub fn record(&self, uid: &str, digest: &str, sample: Sample, latency: Duration) {
        if digest == self.stable().digest() {
            let mut failing = self.failing.lock_unpoisoned();
            if matches!(sample, Sample::Accepted { .. }) {
                failing.remove(uid);
            } else if failing.len() < FAILING_REMEMBERED {
                failing.insert(uid.to_string());
            }
        }
        if let Some(canary) = self.canary.lock_unpoisoned().as_mut() {
            canary.steps.record(uid, digest, sample, latency);
        }
    }

    /// Forgets the parent `uid` (deleted).
    pub fn forget(&self, uid: &str) {
        self.failing.lock_unpoisoned().remove(uid);
    }

    /// The rollout going on, if any.
    pub fn view(&self) -> Option<RolloutView> {
        let canary = self.canary.lock_unpoisoned();
        let canary = canary.as_ref()?;
        Some(RolloutView {
            stable: self.stable(),
            canary: canary.plugin.clone(),
            weight: canary.steps.weight(),
            step: canary.steps.step(),
        })
    }

    /// This replica's figures for the step going on, for its entry in
    /// `status.replicas` (sharded).
    pub fn figures(&self) -> Option<ReplicaRollout> {
        let mut slot = self.canary.lock_unpoisoned();
        let canary = slot.as_mut()?;
        canary.drain_comparisons();
        let (canary_figures, stable_figures) = canary.steps.figures(Instant::now());
        Some(ReplicaRollout {
            canary: canary.plugin.digest().to_string(),
            step: u32::try_from(canary.steps.step().0).unwrap_or(u32::MAX),
            canary_figures,
            stable_figures,
        })
    }

    /// Judges the step going on at `now` on this replica's figures and
    /// `others` (the other replicas' entries: those of this canary and
    /// step count); a promotion makes the canary the stable plugin, an
    /// abort drops it. Returns the decision and the figures it was made on.
    pub fn judge(&self, now: Instant, others: &[ReplicaRollout]) -> (Judged, String) {
        let mut slot = self.canary.lock_unpoisoned();
        let Some(canary) = slot.as_mut() else {
            return (Judged::Hold, String::new());
        };
        canary.drain_comparisons();
        let step = u32::try_from(canary.steps.step().0).unwrap_or(u32::MAX);
        let theirs: Vec<_> = others
            .iter()
            .filter(|r| r.canary == canary.plugin.digest() && r.step == step)
            .map(|r| (r.canary_figures, r.stable_figures))
            .collect();
        let (verdict, figures) = canary.steps.judge(now, &theirs);
        let judged = match verdict {
            Verdict::Hold => Judged::Hold,
            Verdict::Starved if canary.steps.report_starved() => Judged::Starved,
            Verdict::Starved => Judged::Hold,
            Verdict::Advance { .. } => Judged::Advanced,
            Verdict::Promote => {
                drop(slot);
                return (self.conclude(true), figures);
            }
            Verdict::Abort(reason) => {
                drop(slot);
                return (self.conclude_aborted(reason), figures);
            }
        };
        (judged, figures)
    }

    /// Follows the judge's decision on the canary `digest` (read from the
    /// status): its step, begun some time ago (the cohort grows, never
    /// shrinks), or its promotion or abort. `None`: nothing changed here,
    /// or another canary (or none) rolls out here.
    pub fn follow(&self, digest: &str, decision: Followed) -> Option<Judged> {
        let mut slot = self.canary.lock_unpoisoned();
        let canary = slot.as_mut().filter(|c| c.plugin.digest() == digest)?;
        match decision {
            Followed::Step { step, ago } => {
                let before = canary.steps.step().0;
                canary.steps.follow(step, ago);
                (canary.steps.step().0 > before).then_some(Judged::Advanced)
            }
            Followed::Promoted => {
                drop(slot);
                Some(self.conclude(true))
            }
            Followed::Aborted(reason) => {
                drop(slot);
                Some(self.conclude_aborted(reason))
            }
        }
    }

    /// Ends the rollout going on: `promote` makes the canary the stable
    /// plugin, else it is dropped (with no reason given: see
    /// [`Slot::conclude_aborted`]).
    fn conclude(&self, promote: bool) -> Judged {
        let mut slot = self.canary.lock_unpoisoned();
        let Some(canary) = slot.take() else {
            return Judged::Hold;
        };
        drop(slot);
        if promote {
            *self.stable.write_unpoisoned() = canary.plugin.clone();
            self.failing.lock_unpoisoned().clear();
            return Judged::Promoted(canary.plugin);
        }
        Judged::Aborted(
            canary.plugin,
            AbortReason {
                rule: "rollout/manual-abort",
                message: String::new(),
            },
        )
    }

    /// Drops the canary, aborted for `reason`.
    fn conclude_aborted(&self, reason: AbortReason) -> Judged {
        match self.conclude(false) {
            Judged::Aborted(plugin, _) => Judged::Aborted(plugin, reason),
            other => other,
        }
    }

    /// Ends the rollout by a person's decision: `promote` makes the canary
    /// stable, else it is aborted (`rollout/manual-abort`). `None` when no
    /// rollout of `digest` goes on.
    pub fn decide(&self, digest: &str, promote: bool) -> Option<Judged> {
        let slot = self.canary.lock_unpoisoned();
        slot.as_ref().filter(|c| c.plugin.digest() == digest)?;
        drop(slot);
        if promote {
            return Some(self.conclude(true));
        }
        Some(self.conclude_aborted(AbortReason {
            rule: "rollout/manual-abort",
            message: "aborted by the rollout-action annotation".into(),
        }))
    }
}

impl Canary {
    /// Counts the stable shadow's comparisons reported so far.
    fn drain_comparisons(&mut self) {
        if let Some((_, comparisons)) = self.stable_shadow.as_mut() {
            while let Ok(differed) = comparisons.try_recv() {
                self.steps.record_comparison(differed);
            }
        }
    }
}
