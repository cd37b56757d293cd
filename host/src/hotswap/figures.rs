//! What one plugin did over one step of a canary rollout on this replica:
//! each reconcile's outcome ([`Sample`]) is tallied, and the tally is
//! summed up as [`RolloutFigures`] (the shape replicas publish in their
//! status entries and the judge adds up; see [`super::canary`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::crd::plugin::RolloutFigures;

/// Call latencies kept per step for the p99 (the newest; older ones are
/// overwritten in turn).
pub const LATENCY_SAMPLES: usize = 4096;

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

/// One object's standing in the step.
#[derive(Debug, Clone, Copy)]
struct Standing {
    /// Its latest call failed.
    failed: bool,
    /// One of its reconciles in the step left it converged.
    converged: bool,
    /// Its first reconcile in the step.
    first: Instant,
}

/// The outcomes of one plugin's reconciles in one step.
#[derive(Debug, Default)]
pub struct Tally {
    objects: HashMap<String, Standing>,
    reconciles: u64,
    rejected: u64,
    accepted: u64,
    writes: u64,
    compared: u64,
    differed: u64,
    latencies: Vec<u32>,
    next_latency: usize,
}

impl Tally {
    /// Counts a reconcile of `object` that took `latency` in the call.
    pub fn record(&mut self, object: &str, sample: Sample, latency: Duration, now: Instant) {
        self.reconciles = self.reconciles.saturating_add(1);
        self.keep_latency(latency);
        // A new plugin commonly rewrites each status once: an object's
        // first reconcile in the step is not counted in the write rate.
        let again = self.objects.contains_key(object);
        let standing = self.objects.entry(object.to_string()).or_insert(Standing {
            failed: false,
            converged: false,
            first: now,
        });
        standing.failed = sample == Sample::Failed;
        match sample {
            Sample::Failed => {}
            Sample::Rejected => self.rejected = self.rejected.saturating_add(1),
            Sample::Accepted { writes, converged } => {
                standing.converged |= converged;
                if again {
                    self.accepted = self.accepted.saturating_add(1);
                    self.writes = self.writes.saturating_add(u64::from(writes));
                }
            }
        }
    }

    /// Counts a comparison of this plugin's proposal with the stable
    /// shadow's.
    pub fn record_comparison(&mut self, differed: bool) {
        self.compared = self.compared.saturating_add(1);
        self.differed = self.differed.saturating_add(u64::from(differed));
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

    /// The tally summed up at `now`: an object counts as stalled when none
    /// of its reconciles in the step left it converged and the first was
    /// at least `stall` ago.
    pub fn figures(&self, now: Instant, stall: Duration) -> RolloutFigures {
        let stalled = self
            .objects
            .values()
            .filter(|s| !s.converged && now.saturating_duration_since(s.first) >= stall)
            .count();
        RolloutFigures {
            reconciles: self.reconciles,
            objects: self.objects.len() as u64,
            failed: self.objects.values().filter(|s| s.failed).count() as u64,
            rejected: self.rejected,
            accepted: self.accepted,
            writes: self.writes,
            stalled: stalled as u64,
            p99_micros: p99(&self.latencies),
            compared: self.compared,
            differed: self.differed,
        }
    }
}

/// The 99th percentile of `samples` (0 with none).
fn p99(samples: &[u32]) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    let mut sorted = samples.to_vec();
    let rank = (sorted.len() * 99).div_ceil(100).saturating_sub(1);
    let (_, value, _) = sorted.select_nth_unstable(rank);
    u64::from(*value)
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
        assert_eq!(tally.figures(now, MS).p99_micros, 99);
        for _ in 0..LATENCY_SAMPLES {
            tally.record("a", Sample::Failed, Duration::from_micros(7), now);
        }
        assert_eq!(
            tally.figures(now, MS).p99_micros,
            7,
            "the old ones are overwritten"
        );
        assert_eq!(p99(&[]), 0);
    }
}
