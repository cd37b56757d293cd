//! Canary rollouts: a new plugin serves a growing cohort of the objects,
//! step by step, and each step is judged against the stable plugin on the
//! rest of the objects over the same window.
//!
//! The cohort is a stable hash of the object's UID ([`cohort_of`], FNV-1a
//! 64, in ten-thousandths): the same on every replica and after restarts,
//! and monotone in the weight, so an object that joined the canary never
//! goes back to stable while the rollout goes on. A step is judged once it
//! has been held for its duration and the canary served at least the
//! fewest reconciles it asks for: the canary's failure rate over its
//! cohort (objects whose latest reconcile in the step failed) may exceed the
//! stable plugin's over the other objects by at most the allowed increase.
//! Objects that were failing under the stable plugin when the rollout began
//! are not charged to the canary (a tenant's broken objects cannot veto an
//! upgrade). Pass: the next step (or promotion after the last); fail: abort.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::LoadedPlugin;

/// Cohort positions per object: weights are in hundredths of a percent.
pub const COHORT_SCALE: u32 = 10_000;

/// The object's place in the cohort order: `0..COHORT_SCALE`.
pub fn cohort_of(uid: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(COHORT_SCALE)).unwrap_or(0)
}

/// Whether the object `uid` is in a cohort of `percent` of the objects.
pub fn in_cohort(uid: &str, percent: u32) -> bool {
    cohort_of(uid) < percent.min(100) * (COHORT_SCALE / 100)
}

/// How a rollout goes (from `spec.rollout`).
#[derive(Debug, Clone, PartialEq)]
pub struct Strategy {
    /// Cohort sizes in percent, increasing, the last 100.
    pub steps: Vec<u32>,
    /// How long each step is held before it is judged.
    pub hold: Duration,
    /// Fewest canary reconciles in a step before it is judged.
    pub min_reconciles: u32,
    /// The most the canary's failure rate may exceed the stable's.
    pub max_failure_increase: f64,
}

impl Strategy {
    /// `steps` made usable: sorted, deduplicated, within 1..=100, ending at 100.
    pub fn normalized(mut self) -> Self {
        self.steps.retain(|s| (1..=100).contains(s));
        self.steps.sort_unstable();
        self.steps.dedup();
        if self.steps.last() != Some(&100) {
            self.steps.push(100);
        }
        self
    }
}

/// Latest outcome per object within a step.
#[derive(Debug, Default)]
struct Tally {
    failed: HashMap<String, bool>,
    reconciles: u32,
}

impl Tally {
    fn record(&mut self, object: &str, ok: bool) {
        self.reconciles = self.reconciles.saturating_add(1);
        self.failed.insert(object.to_string(), !ok);
    }

    /// Failed objects over judged objects (0 with none).
    fn failure_rate(&self) -> f64 {
        if self.failed.is_empty() {
            return 0.0;
        }
        let failed = self.failed.values().filter(|f| **f).count();
        failed as f64 / self.failed.len() as f64
    }
}

/// What a judged step decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Not yet judged: held for its duration or for more reconciles.
    Hold,
    /// Passed: the next step, with this weight.
    Advance(u32),
    /// Passed the last step: the canary becomes the stable plugin.
    Promote,
    /// Failed: back to the stable plugin.
    Abort(AbortReason),
}

/// Why a rollout was aborted: the criterion and its figures.
#[derive(Debug, Clone, PartialEq)]
pub struct AbortReason {
    /// The rule id, e.g. `rollout/failure-rate`.
    pub rule: &'static str,
    /// The figures, for people.
    pub message: String,
}

/// A rollout in progress: the new plugin and how its steps are judged.
#[derive(Debug)]
pub struct Canary {
    /// The new plugin.
    pub plugin: Arc<LoadedPlugin>,
    /// Its steps and their tallies.
    pub steps: Steps,
}

impl Canary {
    /// A rollout of `plugin` over the stable plugin `stable` (its digest),
    /// its first step starting now; `excused` were failing under stable.
    pub fn start(
        plugin: Arc<LoadedPlugin>,
        stable: String,
        strategy: Strategy,
        excused: HashSet<String>,
    ) -> Self {
        let canary = plugin.digest().to_string();
        Self {
            plugin,
            steps: Steps::start(canary, stable, strategy, excused),
        }
    }
}

/// The steps of a rollout, and the outcomes of the one going on.
#[derive(Debug)]
pub struct Steps {
    canary: String,
    /// The stable plugin's digest.
    pub stable: String,
    strategy: Strategy,
    step: usize,
    step_started: Instant,
    canary_tally: Tally,
    stable_tally: Tally,
    /// Objects failing under the stable plugin when the rollout began.
    excused: HashSet<String>,
    /// Held at its step (`spec.rollout.paused`).
    pub paused: bool,
}

impl Steps {
    /// The first step of a rollout of `canary` over `stable` (digests).
    pub fn start(
        canary: String,
        stable: String,
        strategy: Strategy,
        excused: HashSet<String>,
    ) -> Self {
        Self {
            canary,
            stable,
            strategy: strategy.normalized(),
            step: 0,
            step_started: Instant::now(),
            canary_tally: Tally::default(),
            stable_tally: Tally::default(),
            excused,
            paused: false,
        }
    }

    /// The cohort's size now, in percent.
    pub fn weight(&self) -> u32 {
        self.strategy.steps.get(self.step).copied().unwrap_or(100)
    }

    /// The step now (from 1) and how many there are.
    pub fn step(&self) -> (usize, usize) {
        (self.step + 1, self.strategy.steps.len())
    }

    /// Whether the object `uid` is served by the canary now.
    pub fn serves(&self, uid: &str) -> bool {
        in_cohort(uid, self.weight())
    }

    /// Records a reconcile of `object` by the plugin `digest`.
    pub fn record(&mut self, object: &str, digest: &str, ok: bool) {
        if digest == self.canary {
            if !self.excused.contains(object) {
                self.canary_tally.record(object, ok);
            }
        } else if digest == self.stable {
            self.stable_tally.record(object, ok);
        }
    }

    /// Judges the step at `now` (see the module documentation); an
    /// advance starts the next step.
    pub fn judge(&mut self, now: Instant) -> Verdict {
        if self.paused {
            return Verdict::Hold;
        }
        let canary = self.canary_tally.failure_rate();
        let stable = self.stable_tally.failure_rate();
        // A failing canary is aborted as soon as it has been seen enough,
        // without waiting for the step's end.
        let seen = self.canary_tally.reconciles >= self.strategy.min_reconciles;
        if seen && canary - stable > self.strategy.max_failure_increase {
            return Verdict::Abort(AbortReason {
                rule: "rollout/failure-rate",
                message: format!(
                    "at step {}/{} ({}%): {:.0}% of {} canary objects failed against {:.0}% of {} \
                     stable ones (allowed increase {:.0} points)",
                    self.step + 1,
                    self.strategy.steps.len(),
                    self.weight(),
                    canary * 100.0,
                    self.canary_tally.failed.len(),
                    stable * 100.0,
                    self.stable_tally.failed.len(),
                    self.strategy.max_failure_increase * 100.0
                ),
            });
        }
        if !seen || now.saturating_duration_since(self.step_started) < self.strategy.hold {
            return Verdict::Hold;
        }
        if self.step + 1 >= self.strategy.steps.len() {
            return Verdict::Promote;
        }
        self.step += 1;
        self.step_started = now;
        self.canary_tally = Tally::default();
        self.stable_tally = Tally::default();
        Verdict::Advance(self.weight())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uids(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("0b9c{i:04x}-58e1-4c3a-9d3e-{i:012x}"))
            .collect()
    }

    #[test]
    fn the_cohort_is_stable_and_monotone_in_the_weight() {
        let uids = uids(2000);
        // The same value every time (across replicas and restarts: no seed).
        assert_eq!(cohort_of("abc"), cohort_of("abc"));
        assert_eq!(cohort_of("abc"), 3931); // FNV-1a 64 of "abc" is 0xe71fa2190541574b
        let mut previous: HashSet<&String> = HashSet::new();
        for percent in [0, 1, 5, 25, 50, 100] {
            let cohort: HashSet<&String> = uids.iter().filter(|u| in_cohort(u, percent)).collect();
            assert!(previous.is_subset(&cohort), "{percent}%: nobody leaves");
            let share = cohort.len() as f64 / uids.len() as f64 * 100.0;
            assert!(
                (share - f64::from(percent)).abs() <= 3.0,
                "{percent}%: {share:.1}% of the objects"
            );
            previous = cohort;
        }
        assert_eq!(previous.len(), uids.len());
    }

    fn steps(excused: &[&str]) -> Steps {
        Steps::start(
            "sha256:new".into(),
            "sha256:old".into(),
            Strategy {
                steps: vec![10, 50],
                hold: Duration::from_secs(10),
                min_reconciles: 4,
                max_failure_increase: 0.1,
            },
            excused.iter().map(|s| s.to_string()).collect(),
        )
    }

    #[test]
    fn a_step_passes_after_its_hold_and_enough_reconciles_then_promotes() {
        let start = Instant::now();
        let mut steps = steps(&[]);
        for object in ["a", "b", "c"] {
            steps.record(object, "sha256:new", true);
        }
        let later = start + Duration::from_secs(11);
        assert_eq!(steps.judge(later), Verdict::Hold, "3 of 4 reconciles");
        steps.record("d", "sha256:new", true);
        assert_eq!(steps.judge(start), Verdict::Hold, "held for its duration");
        assert_eq!(steps.judge(later), Verdict::Advance(50));
        for object in ["a", "b", "c", "d"] {
            steps.record(object, "sha256:new", true);
        }
        let end = later + Duration::from_secs(11);
        assert_eq!(steps.judge(end), Verdict::Advance(100));
        for object in ["a", "b", "c", "d"] {
            steps.record(object, "sha256:new", true);
        }
        assert_eq!(steps.judge(end + Duration::from_secs(11)), Verdict::Promote);
    }

    #[test]
    fn failures_beyond_the_stables_abort_at_once_and_old_failures_are_excused() {
        let mut steps = steps(&["broken"]);
        // The tenant's object fails under both: not charged to the canary.
        for _ in 0..4 {
            steps.record("broken", "sha256:new", false);
            steps.record("broken", "sha256:old", false);
        }
        for object in ["a", "b", "c", "d"] {
            steps.record(object, "sha256:new", true);
        }
        assert_eq!(steps.judge(Instant::now()), Verdict::Hold);
        // One in five failing against the stable's one in one: no more than it.
        steps.record("e", "sha256:new", false);
        assert_eq!(steps.judge(Instant::now()), Verdict::Hold);
        // The stable plugin's figures over the same window: none failing.
        let mut steps = steps_with_healthy_stable();
        steps.record("e", "sha256:new", false);
        let Verdict::Abort(reason) = steps.judge(Instant::now()) else {
            panic!("aborted");
        };
        assert_eq!(reason.rule, "rollout/failure-rate");
        assert!(
            reason.message.contains("20% of 5 canary objects"),
            "{}",
            reason.message
        );
    }

    fn steps_with_healthy_stable() -> Steps {
        let mut steps = steps(&[]);
        for object in ["a", "b", "c", "d"] {
            steps.record(object, "sha256:new", true);
        }
        for object in ["x", "y"] {
            steps.record(object, "sha256:old", true);
        }
        steps
    }

    #[test]
    fn steps_are_sorted_bounded_and_end_at_one_hundred() {
        let strategy = Strategy {
            steps: vec![25, 0, 5, 250, 5],
            hold: Duration::ZERO,
            min_reconciles: 0,
            max_failure_increase: 0.0,
        }
        .normalized();
        assert_eq!(strategy.steps, [5, 25, 100]);
    }
}
