//! The criteria a canary's step is judged by: the canary's figures on its
//! cohort against the stable plugin's on the other objects over the same
//! window ([`RolloutFigures`], the fleet's sums). Each criterion has a rule
//! id, named in the abort's Warning Event and condition with its figures.

use std::time::Duration;

use crate::crd::plugin::RolloutFigures;

/// Why a rollout was aborted: the criterion and its figures.
#[derive(Debug, Clone, PartialEq)]
pub struct AbortReason {
    /// The rule id, e.g. `rollout/failure-rate`.
    pub rule: &'static str,
    /// The figures, for people.
    pub message: String,
}

/// The thresholds of `spec.rollout` (shares and increases as fractions).
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// `rollout/failure-rate`: failing objects, in points over the stable's.
    pub max_failure_increase: f64,
    /// `rollout/rejected-proposals`: refused proposals per reconcile, in
    /// points over the stable's.
    pub max_rejected_increase: f64,
    /// `rollout/write-rate`: writes per reconcile, relative to the stable's.
    pub max_writes_increase: f64,
    /// `rollout/latency`: p99 call latency, relative to the stable's.
    pub max_latency_increase: f64,
    /// How long an object may go without converging before it is stalled.
    pub stall: Duration,
    /// `rollout/stalled-objects`: stalled objects, in points over the stable's.
    pub max_stalled_increase: f64,
    /// `rollout/difference`: with the stable shadow on, the most differing
    /// proposals, as a share of those compared.
    pub max_difference: Option<f64>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            max_failure_increase: 0.1,
            max_rejected_increase: 0.1,
            max_writes_increase: 1.0,
            max_latency_increase: 2.0,
            stall: Duration::from_secs(120),
            max_stalled_increase: 0.1,
            max_difference: None,
        }
    }
}

/// Every rule a rollout can be aborted by.
pub const RULES: [&str; 7] = [
    "rollout/failure-rate",
    "rollout/rejected-proposals",
    "rollout/stalled-objects",
    "rollout/write-rate",
    "rollout/latency",
    "rollout/difference",
    "rollout/manual-abort",
];

/// The rule named `name` (as a follower reads it from the status), or
/// `rollout/aborted` for a name it does not know.
pub fn rule_named(name: &str) -> &'static str {
    RULES
        .iter()
        .find(|rule| **rule == name)
        .copied()
        .unwrap_or("rollout/aborted")
}

/// Writes per reconcile the canary may exceed the stable's by in any case.
pub const WRITES_SLACK: f64 = 0.5;
/// Calls each plugin must have made before p99s are compared (a p99 of
/// fewer is the slowest call, a cold start as likely as a regression).
pub const LATENCY_MIN_SAMPLES: u64 = 100;
/// Calls each plugin must have made before medians are compared, where
/// there are too few for a p99 (a small fleet): one cold start does not
/// move a median of three.
pub const LATENCY_MIN_MEDIAN_SAMPLES: u64 = 3;
/// Microseconds of p99 the canary may exceed the stable's by in any case.
pub const LATENCY_SLACK_MICROS: f64 = 1000.0;
/// Microseconds of median the canary may exceed the stable's by in any case
/// (a few calls on a busy machine move a median more than many move a p99).
pub const MEDIAN_SLACK_MICROS: f64 = 2000.0;

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The first criterion the canary fails once it made `min_reconciles`
/// (comparisons for the difference), or `None`; `stable` is the stable
/// plugin's figures over the same window.
pub fn failed_criterion(
    canary: &RolloutFigures,
    stable: &RolloutFigures,
    thresholds: &Thresholds,
    min_reconciles: u64,
) -> Option<AbortReason> {
    judged(canary, stable, thresholds, min_reconciles, true)
}

/// [`failed_criterion`] against the stable plugin's figures of an earlier
/// window (the step before, where the stable plugin serves no object
/// now): every criterion but latency, since calls made at another moment
/// (a quieter or a busier one) say nothing about the plugin's speed.
pub fn failed_against_baseline(
    canary: &RolloutFigures,
    baseline: &RolloutFigures,
    thresholds: &Thresholds,
    min_reconciles: u64,
) -> Option<AbortReason> {
    judged(canary, baseline, thresholds, min_reconciles, false)
}

fn judged(
    canary: &RolloutFigures,
    stable: &RolloutFigures,
    thresholds: &Thresholds,
    min_reconciles: u64,
    same_window: bool,
) -> Option<AbortReason> {
    if canary.reconciles < min_reconciles {
        return difference(canary, thresholds, min_reconciles);
    }
    let points = |name: &str, c: (u64, u64), s: (u64, u64), max: f64, rule: &'static str| {
        let (cs, ss) = (share(c.0, c.1), share(s.0, s.1));
        (cs - ss > max).then(|| AbortReason {
            rule,
            message: format!(
                "{:.0}% of {} canary {name} against {:.0}% of {} stable ones (allowed increase {:.0} points)",
                cs * 100.0,
                c.1,
                ss * 100.0,
                s.1,
                max * 100.0
            ),
        })
    };
    points(
        "objects failed",
        (canary.failed, canary.objects),
        (stable.failed, stable.objects),
        thresholds.max_failure_increase,
        "rollout/failure-rate",
    )
    .or_else(|| {
        points(
            "proposals refused",
            (canary.rejected, canary.reconciles),
            (stable.rejected, stable.reconciles),
            thresholds.max_rejected_increase,
            "rollout/rejected-proposals",
        )
    })
    .or_else(|| {
        points(
            "objects stopped converging",
            (canary.stalled, canary.objects),
            (stable.stalled, stable.objects),
            thresholds.max_stalled_increase,
            "rollout/stalled-objects",
        )
    })
    .or_else(|| relative(canary, stable, thresholds, min_reconciles))
    .or_else(|| {
        same_window
            .then(|| latency(canary, stable, thresholds))
            .flatten()
    })
    .or_else(|| difference(canary, thresholds, min_reconciles))
}

/// Writes per accepted reconcile, judged only when the stable plugin made
/// `min_reconciles` too (there is nothing to compare with before) and both
/// had proposals accepted.
fn relative(
    canary: &RolloutFigures,
    stable: &RolloutFigures,
    thresholds: &Thresholds,
    min_reconciles: u64,
) -> Option<AbortReason> {
    if stable.reconciles < min_reconciles.max(1) {
        return None;
    }
    let (cw, sw) = (
        share(canary.writes, canary.accepted),
        share(stable.writes, stable.accepted),
    );
    let both_wrote = canary.accepted > 0 && stable.accepted > 0;
    if both_wrote && exceeds(cw, sw, thresholds.max_writes_increase, WRITES_SLACK) {
        return Some(AbortReason {
            rule: "rollout/write-rate",
            message: format!(
                "{cw:.2} writes per canary reconcile against {sw:.2} per stable one (allowed increase {:.0}%)",
                thresholds.max_writes_increase * 100.0
            ),
        });
    }
    None
}

/// The p99 call latency where both plugins made enough calls for one, else
/// the median where both made a few (see the sample constants), with
/// [`LATENCY_SLACK_MICROS`] and [`MEDIAN_SLACK_MICROS`] of slack.
fn latency(
    canary: &RolloutFigures,
    stable: &RolloutFigures,
    thresholds: &Thresholds,
) -> Option<AbortReason> {
    let calls = canary.reconciles.min(stable.reconciles);
    let (name, cl, sl, slack) = if calls >= LATENCY_MIN_SAMPLES {
        (
            "p99",
            canary.p99_micros,
            stable.p99_micros,
            LATENCY_SLACK_MICROS,
        )
    } else if calls >= LATENCY_MIN_MEDIAN_SAMPLES {
        (
            "median",
            canary.p50_micros,
            stable.p50_micros,
            MEDIAN_SLACK_MICROS,
        )
    } else {
        return None;
    };
    let (cl, sl) = (cl as f64, sl as f64);
    exceeds(cl, sl, thresholds.max_latency_increase, slack)
    .then(|| AbortReason {
        rule: "rollout/latency",
        message: format!(
            "canary {name} call latency {:.1} ms against the stable's {:.1} ms (allowed increase {:.0}%)",
            cl / 1000.0,
            sl / 1000.0,
            thresholds.max_latency_increase * 100.0
        ),
    })
}

/// Whether the canary's figure is above the stable's by more than the
/// allowed relative increase plus an absolute slack (which keeps tiny
/// figures, where one event is a large share, from deciding alone).
fn exceeds(canary: f64, stable: f64, allowed_increase: f64, slack: f64) -> bool {
    canary > stable * (1.0 + allowed_increase) + slack
}

/// The share of canary proposals that differed from the stable shadow's.
fn difference(
    canary: &RolloutFigures,
    thresholds: &Thresholds,
    min_reconciles: u64,
) -> Option<AbortReason> {
    let max = thresholds.max_difference?;
    if canary.compared < min_reconciles.max(1) {
        return None;
    }
    let differed = share(canary.differed, canary.compared);
    (differed > max).then(|| AbortReason {
        rule: "rollout/difference",
        message: format!(
            "{:.0}% of {} canary proposals differed from the stable shadow's (allowed {:.0}%)",
            differed * 100.0,
            canary.compared,
            max * 100.0
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy(reconciles: u64) -> RolloutFigures {
        RolloutFigures {
            reconciles,
            objects: reconciles,
            accepted: reconciles,
            writes: reconciles,
            p99_micros: 200,
            p50_micros: 100,
            ..RolloutFigures::default()
        }
    }

    fn rule_of(canary: RolloutFigures, thresholds: &Thresholds) -> Option<&'static str> {
        failed_criterion(&canary, &healthy(10), thresholds, 5).map(|r| r.rule)
    }

    #[test]
    fn each_criterion_aborts_with_its_rule_and_a_healthy_canary_passes() {
        let t = Thresholds {
            max_difference: Some(0.1),
            ..Thresholds::default()
        };
        assert_eq!(rule_of(healthy(10), &t), None);
        let failing = RolloutFigures {
            failed: 3,
            ..healthy(10)
        };
        assert_eq!(rule_of(failing, &t), Some("rollout/failure-rate"));
        let refused = RolloutFigures {
            rejected: 2,
            ..healthy(10)
        };
        assert_eq!(rule_of(refused, &t), Some("rollout/rejected-proposals"));
        let stalled = RolloutFigures {
            stalled: 2,
            ..healthy(10)
        };
        assert_eq!(rule_of(stalled, &t), Some("rollout/stalled-objects"));
        let writing = RolloutFigures {
            writes: 30,
            ..healthy(10)
        };
        assert_eq!(rule_of(writing, &t), Some("rollout/write-rate"));
        let slow = RolloutFigures {
            p99_micros: 5000,
            ..healthy(200)
        };
        assert_eq!(
            rule_of(slow, &t),
            None,
            "fewer than 100 stable calls: medians"
        );
        assert_eq!(
            failed_criterion(&slow, &healthy(200), &t, 5).map(|r| r.rule),
            Some("rollout/latency")
        );
        // A small fleet: too few calls for a p99, enough for a median.
        let slow_median = RolloutFigures {
            p50_micros: 4000,
            ..healthy(4)
        };
        let reason = failed_criterion(&slow_median, &healthy(4), &t, 3);
        assert_eq!(reason.as_ref().map(|r| r.rule), Some("rollout/latency"));
        assert!(reason.is_some_and(|r| r.message.contains("median")));
        let two_calls = RolloutFigures {
            p50_micros: 4000,
            ..healthy(2)
        };
        assert!(failed_criterion(&two_calls, &healthy(2), &t, 2).is_none());
        let differing = RolloutFigures {
            compared: 10,
            differed: 10,
            ..healthy(10)
        };
        assert_eq!(rule_of(differing, &t), Some("rollout/difference"));
    }

    #[test]
    fn nothing_is_judged_before_enough_reconciles_and_small_figures_have_slack() {
        let t = Thresholds::default();
        let few = RolloutFigures {
            failed: 2,
            ..healthy(2)
        };
        assert_eq!(rule_of(few, &t), None, "2 of 5 reconciles");
        // Twice the stable's writes, but within half a write per reconcile.
        let stable = RolloutFigures {
            writes: 1,
            ..healthy(10)
        };
        let canary = RolloutFigures {
            writes: 6,
            ..healthy(10)
        };
        assert!(failed_criterion(&canary, &stable, &t, 5).is_none());
        // Three times a fast stable's p99, but within a millisecond.
        let canary = RolloutFigures {
            p99_micros: 900,
            ..healthy(10)
        };
        assert!(failed_criterion(&canary, &healthy(10), &t, 5).is_none());
        // Without the shadow the difference is not a criterion.
        let differing = RolloutFigures {
            compared: 10,
            differed: 10,
            ..healthy(10)
        };
        assert_eq!(rule_of(differing, &t), None);
    }

    #[test]
    fn failures_the_stable_plugin_has_too_are_not_charged() {
        let t = Thresholds::default();
        let stable = RolloutFigures {
            failed: 5,
            ..healthy(10)
        };
        let canary = RolloutFigures {
            failed: 5,
            ..healthy(10)
        };
        assert!(failed_criterion(&canary, &stable, &t, 5).is_none());
    }
}
