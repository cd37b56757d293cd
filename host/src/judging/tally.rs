//! What one plugin did over one step of a canary rollout on this replica:
//! each reconcile's outcome ([`Sample`]) is tallied, and the tally is
//! summed up as [`RolloutFigures`] (the shape replicas publish in their
//! status entries and the judge adds up; see [`super::plan`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::crd::plugin::RolloutFigures;

/// Call latencies kept per step for the percentiles (the newest; older
/// ones are overwritten in turn).
pub const LATENCY_SAMPLES: usize = 4096;

/// How long a canary's failure or refusal waits for the stable plugin's
/// verdict on the same input (see [`crate::slot::stable_check`]) before it is
/// charged anyway: a check dropped or slow never hides a failing canary.
pub const CHECK_PATIENCE: Duration = Duration::from_secs(10);

/// How one reconcile by the plugin ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// The call failed (an error, a trap, a deadline).
    Failed,
    /// The call returned a proposal the host refused.
    Rejected,
    /// The proposal was accepted; `writes` it asked for (creates, deletes,
    /// a status), and whether it left the object converged (nothing to
    /// create or delete, as many live pods as desired).
    Accepted {
        /// Creates, deletes and a status write.
        writes: u32,
        /// Converged after it.
        converged: bool,
    },
}

/// Whose fault an object's latest failure (or refused proposal) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blame {
    /// Its latest call did not fail.
    None,
    /// It failed; the stable plugin's verdict on the same input is awaited
    /// (since then).
    Pending(Instant),
    /// It failed where the stable plugin does not: the plugin's own.
    Charged,
    /// The stable plugin fails the same way on that input: the input's.
    Shared,
}

/// One object's standing in the step.
#[derive(Debug, Clone, Copy)]
struct Standing {
    /// Its latest call's failure, and whose it is.
    failure: Blame,
    /// Since when its reconciles have left it short of converged (`None`:
    /// the latest accepted one left it converged).
    unconverged_since: Option<Instant>,
}

/// The outcomes of one plugin's reconciles in one step.
#[derive(Debug, Default)]
pub struct Tally {
    /// Failures and refusals wait for the stable plugin's verdict before
    /// they count (the canary's tally); otherwise they count at once.
    fair: bool,
    objects: HashMap<String, Standing>,
    reconciles: u64,
    rejected: u64,
    /// Refusals waiting for the stable plugin's verdict, by object.
    rejections_pending: HashMap<String, (u64, Instant)>,
    accepted: u64,
    writes: u64,
    compared: u64,
    differed: u64,
    latencies: Vec<u32>,
    next_latency: usize,
}

impl Tally {
    /// A tally whose failures and refusals count only once the stable
    /// plugin's verdict on the same input says they are the plugin's own
    /// ([`Tally::settle`]), or after [`CHECK_PATIENCE`].
    pub fn fair() -> Self {
        Self {
            fair: true,
            ..Self::default()
        }
    }

    /// Counts a reconcile of `object` that took `latency` in the call.
    pub fn record(&mut self, object: &str, sample: Sample, latency: Duration, now: Instant) {
        self.reconciles = self.reconciles.saturating_add(1);
        self.keep_latency(latency);
        // A new plugin commonly rewrites each status once: an object's
        // first reconcile in the step is not counted in the write rate.
        let again = self.objects.contains_key(object);
        let standing = self.objects.entry(object.to_string()).or_insert(Standing {
            failure: Blame::None,
            unconverged_since: None,
        });
        let blame = if self.fair {
            Blame::Pending(now)
        } else {
            Blame::Charged
        };
        standing.failure = match sample {
            Sample::Failed => blame,
            _ => Blame::None,
        };
        match sample {
            Sample::Failed => {}
            Sample::Rejected if self.fair => {
                let pending = self
                    .rejections_pending
                    .entry(object.to_string())
                    .or_insert((0, now));
                pending.0 = pending.0.saturating_add(1);
            }
            Sample::Rejected => self.rejected = self.rejected.saturating_add(1),
            Sample::Accepted { writes, converged } => {
                standing.unconverged_since = if converged {
                    None
                } else {
                    standing.unconverged_since.or(Some(now))
                };
                if again {
                    self.accepted = self.accepted.saturating_add(1);
                    self.writes = self.writes.saturating_add(u64::from(writes));
                }
            }
        }
    }

    /// The stable plugin's verdict on the input `object` last failed on
    /// (`refused`: its proposal was refused) or had its proposal refused
    /// on: `shared` when the stable plugin failed (or was refused) the same
    /// way, so the canary is not charged.
    pub fn settle(&mut self, object: &str, refused: bool, shared: bool) {
        if refused {
            if let Some((count, _)) = self.rejections_pending.remove(object)
                && !shared
            {
                self.rejected = self.rejected.saturating_add(count);
            }
            return;
        }
        if let Some(standing) = self.objects.get_mut(object)
            && matches!(standing.failure, Blame::Pending(_))
        {
            standing.failure = if shared {
                Blame::Shared
            } else {
                Blame::Charged
            };
        }
    }

    /// Charges what waited longer than [`CHECK_PATIENCE`] at `now`.
    fn charge_overdue(&mut self, now: Instant) {
        let overdue = |since: Instant| now.saturating_duration_since(since) >= CHECK_PATIENCE;
        for standing in self.objects.values_mut() {
            if let Blame::Pending(since) = standing.failure
                && overdue(since)
            {
                standing.failure = Blame::Charged;
            }
        }
        let rejected = &mut self.rejected;
        self.rejections_pending.retain(|_, (count, since)| {
            if overdue(*since) {
                *rejected = rejected.saturating_add(*count);
                false
            } else {
                true
            }
        });
    }

    /// Counts a comparison of this plugin's proposal with the stable
    /// shadow's.
    pub fn record_comparison(&mut self, differed: bool) {
        self.compared = self.compared.saturating_add(1);
        self.differed = self.differed.saturating_add(u64::from(differed));
    }

    /// Leaves `object` out from now on (its failures are not the plugin's).
    pub fn forget(&mut self, object: &str) {
        self.objects.remove(object);
        self.rejections_pending.remove(object);
    }

    fn keep_latency(&mut self, latency: Duration) {
        let micros = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        if self.latencies.len() < LATENCY_SAMPLES {
            self.latencies.push(micros);
        } else {
            self.latencies[self.next_latency] = micros;
            self.next_latency = (self.next_latency + 1) % LATENCY_SAMPLES;
        }
    }

    /// The tally summed up at `now` (what waited too long for the stable
    /// plugin's verdict is charged first): an object counts as stalled when
    /// its accepted reconciles have left it short of converged for `stall`.
    pub fn figures(&mut self, now: Instant, stall: Duration) -> RolloutFigures {
        self.charge_overdue(now);
        let stalled = self
            .objects
            .values()
            .filter(|s| {
                s.failure == Blame::None
                    && s.unconverged_since
                        .is_some_and(|since| now.saturating_duration_since(since) >= stall)
            })
            .count();
        let (p50_micros, p99_micros) = percentiles(&self.latencies);
        RolloutFigures {
            reconciles: self.reconciles,
            objects: self.objects.len() as u64,
            failed: self
                .objects
                .values()
                .filter(|s| s.failure == Blame::Charged)
                .count() as u64,
            rejected: self.rejected,
            accepted: self.accepted,
            writes: self.writes,
            stalled: stalled as u64,
            p99_micros,
            p50_micros,
            compared: self.compared,
            differed: self.differed,
        }
    }
}

/// The 50th and 99th percentiles of `samples` (0 with none).
fn percentiles(samples: &[u32]) -> (u64, u64) {
    if samples.is_empty() {
        return (0, 0);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let at = |percent: usize| {
        let rank = (sorted.len() * percent).div_ceil(100).saturating_sub(1);
        u64::from(sorted[rank])
    };
    (at(50), at(99))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn outcomes_are_counted_by_the_latest_per_object() {
        let start = Instant::now();
        let mut tally = Tally::default();
        tally.record("a", Sample::Failed, MS, start);
        tally.record(
            "a",
            Sample::Accepted {
                writes: 2,
                converged: false,
            },
            MS,
            start,
        );
        // A first reconcile's writes are not counted.
        tally.record(
            "c",
            Sample::Accepted {
                writes: 1,
                converged: true,
            },
            MS,
            start,
        );
        tally.record("b", Sample::Rejected, MS, start);
        tally.record("b", Sample::Failed, MS, start);
        tally.record_comparison(true);
        tally.record_comparison(false);
        let figures = tally.figures(start, Duration::from_secs(60));
        assert_eq!(figures.reconciles, 5);
        assert_eq!(figures.objects, 3);
        assert_eq!(figures.failed, 1, "b's latest call failed, a's did not");
        assert_eq!(figures.rejected, 1);
        assert_eq!((figures.accepted, figures.writes), (1, 2));
        assert_eq!((figures.compared, figures.differed), (2, 1));
        assert_eq!(figures.stalled, 0, "not for a whole stall yet");
    }

    #[test]
    fn an_object_never_converged_for_a_whole_stall_is_stalled() {
        let start = Instant::now();
        let stall = Duration::from_secs(30);
        let mut tally = Tally::default();
        tally.record(
            "stuck",
            Sample::Accepted {
                writes: 0,
                converged: false,
            },
            MS,
            start,
        );
        tally.record(
            "fine",
            Sample::Accepted {
                writes: 1,
                converged: false,
            },
            MS,
            start,
        );
        tally.record(
            "fine",
            Sample::Accepted {
                writes: 1,
                converged: true,
            },
            MS,
            start + MS,
        );
        assert_eq!(tally.figures(start + stall - MS, stall).stalled, 0);
        assert_eq!(tally.figures(start + stall, stall).stalled, 1);
    }

    #[test]
    fn the_p99_is_of_the_newest_samples() {
        let now = Instant::now();
        let mut tally = Tally::default();
        for i in 1..=100u64 {
            tally.record("a", Sample::Failed, Duration::from_micros(i), now);
        }
        let figures = tally.figures(now, MS);
        assert_eq!((figures.p50_micros, figures.p99_micros), (50, 99));
        for _ in 0..LATENCY_SAMPLES {
            tally.record("a", Sample::Failed, Duration::from_micros(7), now);
        }
        assert_eq!(
            tally.figures(now, MS).p99_micros,
            7,
            "the old ones are overwritten"
        );
        assert_eq!(percentiles(&[]), (0, 0));
    }

    #[test]
    fn an_object_that_converged_and_then_stopped_stalls() {
        let start = Instant::now();
        let stall = Duration::from_secs(5);
        let mut tally = Tally::default();
        let accepted = |converged| Sample::Accepted {
            writes: 1,
            converged,
        };
        tally.record("scaled", accepted(true), MS, start);
        // Scaled up later in the step; the plugin makes no pod.
        let scaled = start + Duration::from_secs(20);
        tally.record("scaled", accepted(false), MS, scaled);
        tally.record("scaled", accepted(false), MS, scaled + stall / 2);
        assert_eq!(tally.figures(scaled + stall - MS, stall).stalled, 0);
        assert_eq!(tally.figures(scaled + stall, stall).stalled, 1);
        tally.record("scaled", accepted(true), MS, scaled + stall);
        assert_eq!(tally.figures(scaled + stall * 2, stall).stalled, 0);
    }

    #[test]
    fn a_fair_tally_charges_only_what_the_stable_plugin_does_not_share() {
        let start = Instant::now();
        let mut tally = Tally::fair();
        for object in ["input-broken", "canary-broken", "unchecked"] {
            tally.record(object, Sample::Failed, MS, start);
        }
        tally.record("refused", Sample::Rejected, MS, start);
        tally.record("refused", Sample::Rejected, MS, start);
        let figures = tally.figures(start, MS);
        assert_eq!(
            (figures.failed, figures.rejected),
            (0, 0),
            "awaiting verdicts"
        );
        tally.settle("input-broken", false, true);
        tally.settle("canary-broken", false, false);
        tally.settle("refused", true, false);
        let figures = tally.figures(start, MS);
        assert_eq!((figures.failed, figures.rejected), (1, 2));
        // A verdict that never comes: charged after the patience.
        let figures = tally.figures(start + CHECK_PATIENCE, MS);
        assert_eq!(figures.failed, 2);
        // A late verdict for an object that recovered meanwhile changes nothing.
        tally.record(
            "canary-broken",
            Sample::Accepted {
                writes: 0,
                converged: true,
            },
            MS,
            start,
        );
        tally.settle("canary-broken", false, false);
        assert_eq!(tally.figures(start + CHECK_PATIENCE, MS).failed, 1);
    }
}
