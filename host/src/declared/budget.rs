//! The write budget of one declared controller: how many API writes (child
//! applies that change something, deletes, status writes) all its
//! reconciles together may make per second, as one token bucket.
//!
//! A plugin that changes a child or its status on every call, or deletes
//! what it recreates, would otherwise turn each reconcile into writes that
//! wake the next one, as fast as the API server answers. A plan is written
//! only if the bucket holds enough tokens for all of its writes (nothing is
//! half-applied; a plan larger than the bucket waits for a full bucket);
//! otherwise the parent waits until it does and gets a Warning
//! `WriteBudgetExceeded` naming the rule [`RULE`].
//!
//! ```
//! use wasm_operator::declared::budget::WriteBudget;
//!
//! let budget = WriteBudget::new(10, 20);
//! assert!(budget.try_spend(20).is_ok());
//! assert!(budget.try_spend(1).is_err());
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::locks::MutexExt;

/// The rule a plan over the budget is held by.
pub const RULE: &str = "writes/budget";
/// Writes per second a controller may make once its burst is spent.
pub const DEFAULT_PER_SECOND: u32 = 200;
/// Writes a controller may make at once (the bucket's size): a thousand
/// parents' first reconciles, each a few children and a status.
pub const DEFAULT_BURST: u32 = 5000;

/// One controller's bucket.
#[derive(Debug)]
pub struct WriteBudget {
    per_second: u32,
    burst: u32,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl WriteBudget {
    /// A full bucket of `burst` refilled at `per_second` (at least 1).
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self {
            per_second: per_second.max(1),
            burst: burst.max(1),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(burst.max(1)),
                updated: Instant::now(),
            }),
        }
    }

    /// Writes per second.
    pub fn per_second(&self) -> u32 {
        self.per_second
    }

    /// The bucket's size.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Takes `cost` tokens, or says how long until the bucket holds enough
    /// (nothing is taken then). A cost over the burst is taken from a full
    /// bucket (the bucket goes below empty).
    pub fn try_spend(&self, cost: u32) -> Result<(), Duration> {
        if cost == 0 {
            return Ok(());
        }
        let rate = f64::from(self.per_second);
        let burst = f64::from(self.burst);
        let mut bucket = self.bucket.lock_unpoisoned();
        let now = Instant::now();
        let elapsed = now.duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.updated = now;
        let needed = f64::from(cost).min(burst);
        if bucket.tokens >= needed {
            bucket.tokens -= f64::from(cost);
            return Ok(());
        }
        let missing = needed - bucket.tokens;
        Err(Duration::from_secs_f64((missing / rate).max(0.001)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_and_a_denied_spend_takes_nothing() {
        let budget = WriteBudget::new(100, 5);
        assert!(budget.try_spend(5).is_ok());
        let wait = budget.try_spend(2).expect_err("empty");
        assert!(
            wait > Duration::from_millis(10) && wait <= Duration::from_millis(20),
            "{wait:?}"
        );
        std::thread::sleep(Duration::from_millis(30));
        assert!(budget.try_spend(2).is_ok(), "refilled at 100/s");
        assert!(
            budget.try_spend(0).is_ok(),
            "nothing to write costs nothing"
        );
    }

    #[test]
    fn a_plan_larger_than_the_bucket_waits_for_a_full_one() {
        let budget = WriteBudget::new(1000, 3);
        assert!(budget.try_spend(10).is_ok(), "a full bucket takes it");
        let wait = budget.try_spend(10).expect_err("below empty");
        assert!(wait <= Duration::from_millis(11), "{wait:?}");
        std::thread::sleep(wait + Duration::from_millis(5));
        assert!(budget.try_spend(10).is_ok(), "full again");
    }
}
