//! Canary rollouts: a new plugin serves a growing cohort of the objects,
//! step by step, and each step is judged against the stable plugin on the
//! rest of the objects over the same window.
//!
//! The cohort is a stable hash of the object's UID ([`cohort_of`], FNV-1a
//! 64, in ten-thousandths): the same on every replica and after restarts,
//! and monotone in the weight, so an object that joined the canary never
//! goes back to stable while the rollout goes on. A step is judged once it
//! has been held for its duration and the canary served at least the
//! fewest reconciles it asks for, on the [`criteria`]: the canary's figures
//! over its cohort ([`super::tally`]) against the stable plugin's over
//! the other objects. A failing criterion aborts at once, without waiting
//! for the step's end. Objects that were failing under the stable plugin
//! when the rollout began are not charged to the canary (a tenant's broken
//! objects cannot veto an upgrade). Pass: the next step (or promotion after
//! the last); fail: abort. With several replicas one judges on the sum of
//! every replica's figures and the others follow it
//! ([`Steps::follow`], see `delivery::resource::rollout`).

use std::collections::HashSet;
use std::time::{Duration, Instant};

pub use super::criteria::AbortReason;
use super::criteria::{self, Thresholds};
use super::tally::{Sample, Tally};
use crate::crd::plugin::{RolloutFigures, RolloutSpec};

/// Cohort positions per object: weights are in hundredths of a percent.
pub const COHORT_SCALE: u32 = 10_000;

/// FNV-1a 64 of `text`'s bytes: no seed, so the same on every replica.
pub fn fnv1a(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The object's place in the cohort order: `0..COHORT_SCALE`.
pub fn cohort_of(uid: &str) -> u32 {
    u32::try_from(fnv1a(uid) % u64::from(COHORT_SCALE)).unwrap_or(0)
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
    /// What aborts it.
    pub thresholds: Thresholds,
}

impl Strategy {
    /// The strategy `spec.rollout` asks for.
    pub fn of(spec: &RolloutSpec) -> Self {
        let percent = |p: u32| f64::from(p) / 100.0;
        Self {
            steps: spec.steps.clone(),
            hold: Duration::from_secs(u64::from(spec.step_seconds)),
            min_reconciles: spec.min_reconciles,
            thresholds: Thresholds {
                max_failure_increase: percent(spec.max_failure_increase_percent.min(100)),
                max_rejected_increase: percent(spec.max_rejected_increase_percent.min(100)),
                max_writes_increase: percent(spec.max_writes_increase_percent),
                max_latency_increase: percent(spec.max_latency_increase_percent),
                stall: Duration::from_secs(u64::from(spec.stall_seconds.max(1))),
                max_stalled_increase: percent(spec.max_stalled_increase_percent.min(100)),
                max_difference: spec
                    .shadow_stable
                    .then(|| percent(spec.max_difference_percent.min(100))),
            },
        }
    }

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

/// What a judged step decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Not yet judged: held for its duration or for more reconciles.
    Hold,
    /// Held past twice its duration without the reconciles it needs to be
    /// judged (no object reconciled at all): it waits, and says so.
    Starved,
    /// Passed: the next step, with this weight (`empty`: the step's cohort
    /// held no object, so there was nothing to judge).
    Advance {
        /// The next step's cohort, in percent.
        weight: u32,
        /// The step passed had no object in its cohort.
        empty: bool,
    },
    /// Passed the last step: the canary becomes the stable plugin.
    Promote,
    /// Failed: back to the stable plugin.
    Abort(AbortReason),
}

/// The shortest stall bound: an object short of converged this long in a
/// step counts as stalled, however short the step.
pub const MIN_STALL: Duration = Duration::from_secs(2);

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
    /// Objects failing under the stable plugin when the rollout or its
    /// step began: their failures are their input's, on neither side.
    excused: HashSet<String>,
    /// The stable plugin's fleet figures of the last step it served
    /// objects in: what the canary is held to where the stable plugin
    /// serves none (the 100% step).
    baseline: Option<RolloutFigures>,
    /// The step whose starvation was reported already.
    starved_reported: Option<usize>,
    /// Held at its step (`spec.rollout.paused`).
    pub paused: bool,
    /// The canary's failures and refusals wait for the stable plugin's
    /// verdict on the same input (see [`Tally::fair`]); without a stable
    /// check they count at once.
    checked: bool,
}

impl Steps {
    /// Counts one comparison of the canary's proposal with the stable
    /// shadow's (true: they differed).
    pub fn record_comparison(&mut self, differed: bool) {
        self.canary_tally.record_comparison(differed);
    }

    /// Settles a failure of the canary on object `uid` by the stable
    /// plugin's verdict on the same input (see [`Tally::settle`]).
    pub fn settle(&mut self, uid: &str, refused: bool, shared: bool) {
        self.canary_tally.settle(uid, refused, shared);
    }

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
            canary_tally: Tally::fair(),
            stable_tally: Tally::default(),
            excused,
            baseline: None,
            starved_reported: None,
            paused: false,
            checked: true,
        }
    }

    /// The same steps where no stable plugin checks the inputs the canary
    /// fails on: its failures and refusals count at once (waiting for a
    /// verdict that never comes would hide them until a step passed).
    pub fn unchecked(mut self) -> Self {
        self.checked = false;
        self.canary_tally = Tally::default();
        self
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

    /// The canary's digest.
    pub fn canary(&self) -> &str {
        &self.canary
    }

    /// Records a reconcile of `object` by the plugin `digest` (not of an
    /// excused object).
    pub fn record(&mut self, object: &str, digest: &str, sample: Sample, latency: Duration) {
        // Objects failing under stable when the step began count on
        // neither side: the two shares compare like with like.
        if self.excused.contains(object) {
            return;
        }
        let now = Instant::now();
        if digest == self.canary {
            self.canary_tally.record(object, sample, latency, now);
        } else if digest == self.stable {
            self.stable_tally.record(object, sample, latency, now);
        }
    }

    /// Excuses `objects` (failing under the stable plugin as a step
    /// begins): from now on they count on neither side.
    pub fn excuse(&mut self, objects: impl IntoIterator<Item = String>) {
        for object in objects {
            self.canary_tally.forget(&object);
            self.stable_tally.forget(&object);
            self.excused.insert(object);
        }
    }

    /// How long an object may stay short of converged before it is
    /// stalled: `stallSeconds`, but at most half the step (and at least
    /// [`MIN_STALL`]), so a step cannot pass with its cohort stuck.
    pub fn stall_bound(&self) -> Duration {
        self.strategy
            .thresholds
            .stall
            .min((self.strategy.hold / 2).max(MIN_STALL))
    }

    /// This replica's figures for the step now: the canary's, the stable's.
    pub fn figures(&mut self, now: Instant) -> (RolloutFigures, RolloutFigures) {
        let stall = self.stall_bound();
        (
            self.canary_tally.figures(now, stall),
            self.stable_tally.figures(now, stall),
        )
    }

    /// Takes an edited strategy: its steps and criteria apply from now on,
    /// at its first step no smaller than the cohort now (which never shrinks).
    pub fn update(&mut self, strategy: Strategy) {
        let weight = self.weight();
        self.strategy = strategy.normalized();
        self.step = self
            .strategy
            .steps
            .iter()
            .position(|step| *step >= weight)
            .unwrap_or(self.strategy.steps.len() - 1);
    }

    /// Follows the judge to step `step` (from 1), begun `ago`: the
    /// cohort grows (never shrinks) and the tallies start again.
    pub fn follow(&mut self, step: usize, ago: Duration) {
        let index = step.saturating_sub(1).min(self.strategy.steps.len() - 1);
        if index > self.step {
            self.step = index;
            let now = Instant::now();
            self.begin_step(now.checked_sub(ago).unwrap_or(now));
        }
    }

    /// The tallies start again for a step begun at `at`.
    fn begin_step(&mut self, at: Instant) {
        self.step_started = at;
        self.canary_tally = if self.checked {
            Tally::fair()
        } else {
            Tally::default()
        };
        self.stable_tally = Tally::default();
    }

    /// The fewest canary reconciles the step needs: `minReconciles`, or
    /// one per object of a smaller cohort (every object of a quiet fleet is
    /// reconciled once as a step begins, and no more).
    fn min_reconciles(&self, canary: &RolloutFigures) -> u64 {
        u64::from(self.strategy.min_reconciles).min(canary.objects.max(1))
    }

    /// Judges the step at `now` on this replica's figures plus `others`
    /// (the other replicas', for this step); an advance starts the next
    /// step. Returns the verdict and the figures it was made on.
    pub fn judge(
        &mut self,
        now: Instant,
        others: &[(RolloutFigures, RolloutFigures)],
    ) -> (Verdict, String) {
        let (mut canary, mut stable) = self.figures(now);
        for (c, s) in others {
            canary.add(c);
            stable.add(s);
        }
        let baseline = self.baseline.filter(|_| stable.objects == 0);
        let mut figures = describe(&canary, &stable);
        if baseline.is_some() {
            figures.push_str("; the stable plugin's figures of the step before are the baseline");
        }
        if self.paused {
            return (Verdict::Hold, figures);
        }
        let min = self.min_reconciles(&canary);
        // A failing canary is aborted as soon as it has been seen enough,
        // without waiting for the step's end.
        let thresholds = &self.strategy.thresholds;
        let failed = match &baseline {
            Some(baseline) => criteria::failed_against_baseline(&canary, baseline, thresholds, min),
            None => criteria::failed_criterion(&canary, &stable, thresholds, min),
        };
        if let Some(mut reason) = failed {
            let (step, steps) = self.step();
            reason.message = format!(
                "at step {step}/{steps} ({}%): {}",
                self.weight(),
                reason.message
            );
            return (Verdict::Abort(reason), figures);
        }
        let held_for = now.saturating_duration_since(self.step_started);
        if held_for < self.strategy.hold {
            return (Verdict::Hold, figures);
        }
        let last = self.step + 1 >= self.strategy.steps.len();
        let empty = canary.objects == 0 && stable.objects > 0 && !last;
        if canary.reconciles < min && !empty {
            let starved = held_for >= self.strategy.hold * 2;
            return (
                if starved {
                    Verdict::Starved
                } else {
                    Verdict::Hold
                },
                figures,
            );
        }
        if last {
            return (Verdict::Promote, figures);
        }
        if stable.objects > 0 {
            self.baseline = Some(stable);
        }
        self.step += 1;
        self.begin_step(now);
        let verdict = Verdict::Advance {
            weight: self.weight(),
            empty,
        };
        (verdict, figures)
    }

    /// Whether the starvation of the step now is to be reported (once per step).
    pub fn report_starved(&mut self) -> bool {
        let first = self.starved_reported != Some(self.step);
        self.starved_reported = Some(self.step);
        first
    }
}

/// Both plugins' figures in one line, for the step history and Events.
pub fn describe(canary: &RolloutFigures, stable: &RolloutFigures) -> String {
    let side = |f: &RolloutFigures| {
        format!(
            "{} reconciles of {} objects, {} failing, {} refused, {} writes, {} stalled, p50 {:.1} ms, p99 {:.1} ms",
            f.reconciles,
            f.objects,
            f.failed,
            f.rejected,
            f.writes,
            f.stalled,
            f.p50_micros as f64 / 1000.0,
            f.p99_micros as f64 / 1000.0
        )
    };
    let mut text = format!("canary: {}; stable: {}", side(canary), side(stable));
    if canary.compared > 0 {
        text.push_str(&format!(
            "; {} of {} canary proposals differed from the stable shadow's",
            canary.differed, canary.compared
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judging::tally::CHECK_PATIENCE;

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
                thresholds: Thresholds::default(),
            },
            excused.iter().map(|s| s.to_string()).collect(),
        )
    }

    const OK: Sample = Sample::Accepted {
        writes: 1,
        converged: true,
    };
    const MS: Duration = Duration::from_millis(1);

    fn record(steps: &mut Steps, object: &str, digest: &str, ok: bool) {
        let sample = if ok { OK } else { Sample::Failed };
        steps.record(object, digest, sample, MS);
    }

    fn advance(weight: u32) -> Verdict {
        Verdict::Advance {
            weight,
            empty: false,
        }
    }

    /// Without a stable check a refused canary is aborted at once, before
    /// its step's hold is over.
    #[test]
    fn an_unchecked_canarys_refusals_count_at_once() {
        let start = Instant::now();
        let mut checked = steps(&[]);
        let mut unchecked = steps(&[]).unchecked();
        for steps in [&mut checked, &mut unchecked] {
            for object in ["a", "b", "c", "d"] {
                steps.record(object, "sha256:new", Sample::Rejected, MS);
                steps.record(object, "sha256:old", OK, MS);
            }
        }
        let soon = start + Duration::from_secs(1);
        assert_eq!(
            checked.judge(soon, &[]).0,
            Verdict::Hold,
            "awaiting verdicts"
        );
        match unchecked.judge(soon, &[]).0 {
            Verdict::Abort(reason) => assert_eq!(reason.rule, "rollout/rejected-proposals"),
            other => panic!("expected an abort, got {other:?}"),
        }
    }

    #[test]
    fn a_step_passes_after_its_hold_and_enough_reconciles_then_promotes() {
        let start = Instant::now();
        let mut steps = steps(&[]);
        // One object reconciled twice: 2 of the 4 reconciles asked, and the
        // cohort is not smaller than that.
        record(&mut steps, "a", "sha256:new", true);
        record(&mut steps, "a", "sha256:new", true);
        let later = start + Duration::from_secs(11);
        for object in ["b", "c"] {
            record(&mut steps, object, "sha256:new", true);
        }
        assert_eq!(
            steps.judge(start, &[]).0,
            Verdict::Hold,
            "held for its duration"
        );
        assert_eq!(steps.judge(later, &[]).0, advance(50));
        for object in ["a", "b", "c", "d", "e"] {
            record(&mut steps, object, "sha256:new", true);
        }
        let end = later + Duration::from_secs(11);
        assert_eq!(steps.judge(end, &[]).0, advance(100));
        for object in ["a", "b", "c", "d"] {
            record(&mut steps, object, "sha256:new", true);
        }
        let (verdict, figures) = steps.judge(end + Duration::from_secs(11), &[]);
        assert_eq!(verdict, Verdict::Promote);
        assert!(
            figures.starts_with("canary: 4 reconciles of 4 objects, 0 failing"),
            "{figures}"
        );
    }

    #[test]
    fn a_cohort_smaller_than_min_reconciles_needs_each_object_once() {
        let start = Instant::now();
        let mut steps = steps(&[]);
        steps.strategy.min_reconciles = 8;
        for object in ["a", "b", "c", "d", "e", "f"] {
            steps.canary_tally.record(object, OK, MS, start);
        }
        assert_eq!(
            steps.judge(start + Duration::from_secs(11), &[]).0,
            advance(50)
        );
    }

    #[test]
    fn failures_beyond_the_stables_abort_once_charged_and_old_failures_are_excused() {
        let mut steps = steps(&["broken"]);
        // The tenant's object fails under both: not charged to the canary.
        for _ in 0..4 {
            record(&mut steps, "broken", "sha256:new", false);
            record(&mut steps, "broken", "sha256:old", false);
        }
        for object in ["a", "b", "c", "d"] {
            record(&mut steps, object, "sha256:new", true);
        }
        assert_eq!(steps.judge(Instant::now(), &[]).0, Verdict::Hold);
        let (canary, stable) = steps.figures(Instant::now());
        assert_eq!(
            (canary.objects, stable.objects),
            (4, 0),
            "counted on neither side"
        );
        // A new failure waits for the stable plugin's verdict on its input.
        record(&mut steps, "e", "sha256:new", false);
        assert_eq!(steps.judge(Instant::now(), &[]).0, Verdict::Hold);
        // Its own: one in five against none of the stable's.
        steps.canary_tally.settle("e", false, false);
        let Verdict::Abort(reason) = steps.judge(Instant::now(), &[]).0 else {
            panic!("aborted");
        };
        assert_eq!(reason.rule, "rollout/failure-rate");
        assert!(
            reason.message.contains("20% of 5 canary objects failed"),
            "{}",
            reason.message
        );
    }

    #[test]
    fn failures_the_stable_plugin_shares_on_the_same_input_are_not_charged() {
        let mut steps = steps(&[]);
        for object in ["a", "b", "c", "d"] {
            record(&mut steps, object, "sha256:new", true);
        }
        // The author broke three objects' input: every build fails on it.
        for object in ["x", "y", "z"] {
            record(&mut steps, object, "sha256:new", false);
            steps.canary_tally.settle(object, false, true);
        }
        let later = Instant::now() + Duration::from_secs(11);
        assert_eq!(steps.judge(later, &[]).0, advance(50));
    }

    #[test]
    fn failing_objects_moving_into_the_cohort_as_a_step_begins_are_excused() {
        let mut steps = steps(&[]);
        steps.excuse(["joined".to_string()]);
        for object in ["a", "b", "c", "d"] {
            record(&mut steps, object, "sha256:new", true);
        }
        record(&mut steps, "joined", "sha256:new", false);
        let (canary, _) = steps.figures(Instant::now() + CHECK_PATIENCE);
        assert_eq!((canary.objects, canary.failed), (4, 0));
    }

    #[test]
    fn a_stuck_cohort_is_stalled_within_a_short_step() {
        let start = Instant::now();
        let mut steps = steps(&[]);
        steps.strategy.thresholds.stall = Duration::from_secs(15);
        // Steps of 10 s: stalled after 5 s, not the 15 s asked.
        assert_eq!(steps.stall_bound(), Duration::from_secs(5));
        let stuck = Sample::Accepted {
            writes: 1,
            converged: false,
        };
        for object in ["a", "b", "c", "d"] {
            steps.canary_tally.record(object, stuck, MS, start);
        }
        for object in ["x", "y"] {
            steps.stable_tally.record(object, OK, MS, start);
        }
        let Verdict::Abort(reason) = steps.judge(start + Duration::from_secs(5), &[]).0 else {
            panic!("aborted before the step could pass");
        };
        assert_eq!(reason.rule, "rollout/stalled-objects");
    }

    #[test]
    fn an_empty_cohort_moves_on_and_no_traffic_at_all_starves() {
        let start = Instant::now();
        let mut steps = steps(&[]);
        for object in ["x", "y", "z"] {
            steps.stable_tally.record(object, OK, MS, start);
        }
        let held = start + Duration::from_secs(11);
        assert_eq!(
            steps.judge(held, &[]).0,
            Verdict::Advance {
                weight: 50,
                empty: true
            }
        );
        // The next step sees no reconcile at all.
        let later = held + Duration::from_secs(11);
        assert_eq!(steps.judge(later, &[]).0, Verdict::Hold);
        assert_eq!(
            steps.judge(held + Duration::from_secs(20), &[]).0,
            Verdict::Starved
        );
        assert!(steps.report_starved());
        assert!(!steps.report_starved(), "once per step");
    }

    #[test]
    fn the_last_step_is_held_to_the_stable_plugins_figures_of_the_step_before() {
        let start = Instant::now();
        let mut steps = steps(&[]);
        steps.strategy.steps = vec![50, 100];
        for object in ["a", "b", "c", "d"] {
            steps.canary_tally.record(object, OK, MS, start);
            steps
                .stable_tally
                .record(&format!("s-{object}"), OK, MS, start);
        }
        assert_eq!(
            steps.judge(start + Duration::from_secs(11), &[]).0,
            advance(100)
        );
        // At 100% nothing is left to the stable plugin: the canary's own
        // failures are held to the stable plugin's share of the step before.
        for object in ["a", "b", "c", "d", "e"] {
            steps
                .canary_tally
                .record(object, OK, Duration::from_millis(40), start);
        }
        let (verdict, figures) = steps.judge(start + Duration::from_secs(12), &[]);
        assert_eq!(
            verdict,
            Verdict::Hold,
            "latencies of another window are not compared"
        );
        assert!(figures.contains("baseline"), "{figures}");
        steps.canary_tally.record("f", Sample::Failed, MS, start);
        steps.canary_tally.settle("f", false, false);
        let Verdict::Abort(reason) = steps.judge(start + Duration::from_secs(12), &[]).0 else {
            panic!("aborted against the baseline");
        };
        assert_eq!(reason.rule, "rollout/failure-rate");
        assert!(
            reason.message.contains("against 0% of 4 stable ones"),
            "{}",
            reason.message
        );
    }

    fn steps_with_healthy_stable() -> Steps {
        let mut steps = steps(&[]);
        for object in ["a", "b", "c", "d"] {
            record(&mut steps, object, "sha256:new", true);
        }
        for object in ["x", "y"] {
            record(&mut steps, object, "sha256:old", true);
        }
        steps
    }

    #[test]
    fn the_judge_adds_the_other_replicas_figures() {
        // Healthy here; another replica's canary objects all fail.
        let mut steps = steps_with_healthy_stable();
        let theirs = RolloutFigures {
            reconciles: 4,
            objects: 4,
            failed: 4,
            ..RolloutFigures::default()
        };
        let Verdict::Abort(reason) = steps
            .judge(Instant::now(), &[(theirs, RolloutFigures::default())])
            .0
        else {
            panic!("aborted on the fleet's figures");
        };
        assert!(
            reason.message.contains("50% of 8 canary objects"),
            "{}",
            reason.message
        );
    }

    #[test]
    fn a_follower_moves_forward_only_and_starts_its_tallies_again() {
        let mut steps = steps_with_healthy_stable();
        steps.follow(2, Duration::ZERO);
        assert_eq!((steps.weight(), steps.step()), (50, (2, 3)));
        assert_eq!(steps.figures(Instant::now()).0.reconciles, 0);
        steps.follow(1, Duration::ZERO);
        assert_eq!(steps.weight(), 50, "never back");
        steps.follow(9, Duration::ZERO);
        assert_eq!(steps.weight(), 100, "at most the last step");
    }

    #[test]
    fn an_edited_strategy_never_shrinks_the_cohort() {
        let mut steps = steps_with_healthy_stable();
        steps.follow(2, Duration::ZERO);
        assert_eq!(steps.weight(), 50);
        let mut edited = steps.strategy.clone();
        edited.steps = vec![10, 20, 60];
        steps.update(edited);
        assert_eq!((steps.weight(), steps.step()), (60, (3, 4)));
    }

    #[test]
    fn steps_are_sorted_bounded_and_end_at_one_hundred() {
        let strategy = Strategy {
            steps: vec![25, 0, 5, 250, 5],
            hold: Duration::ZERO,
            min_reconciles: 0,
            thresholds: Thresholds::default(),
        }
        .normalized();
        assert_eq!(strategy.steps, [5, 25, 100]);
    }
}
