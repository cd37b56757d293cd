//! The per-object write budget: how many writes (pod creates and deletes,
//! status patches, Events) the reconciles of one Jinghzhu may cause per
//! minute, as a token bucket per Jinghzhu UID.
//!
//! A plugin that changes its status on every call (a timestamp in the
//! message), asks for new Event reasons every time, or deletes and
//! recreates its pods in a loop would otherwise turn each reconcile into
//! writes that trigger the next reconcile. A proposal is applied only if
//! the object's bucket holds enough tokens for all of its writes (nothing is
//! half-applied); otherwise the object waits until it does, and gets a
//! Warning Event saying why (at most one per minute, not charged).
//!
//! ```
//! use std::time::Duration;
//! use wasm_operator::controller::budget::{BudgetConfig, WriteBudget};
//!
//! let budget = WriteBudget::new(BudgetConfig { burst: 10, per_minute: 60 });
//! assert!(budget.try_spend("uid-web", 10).is_ok());
//! let wait = budget.try_spend("uid-web", 1).expect_err("empty");
//! assert!(wait <= Duration::from_secs(1));
//! ```

use crate::locks::MutexExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The size and refill rate of each object's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetConfig {
    /// Most writes in a burst (the bucket's size): enough for a scale-up to
    /// the pod limit with its Events and status writes.
    pub burst: u32,
    /// Writes per minute once the burst is spent (the refill rate).
    pub per_minute: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            burst: 1200,
            per_minute: 120,
        }
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
    warned: Option<Instant>,
}

/// Token buckets by Jinghzhu UID.
#[derive(Debug)]
pub struct WriteBudget {
    config: BudgetConfig,
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// How often the Warning Event of an object over its budget may repeat.
const WARN_EVERY: Duration = Duration::from_secs(60);

impl WriteBudget {
    /// Empty buckets start full.
    pub fn new(config: BudgetConfig) -> Self {
        Self {
            config,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> BudgetConfig {
        self.config
    }

    fn rate_per_sec(&self) -> f64 {
        f64::from(self.config.per_minute.max(1)) / 60.0
    }

    /// Takes `cost` tokens from `owner`'s bucket, or says how long until it
    /// holds that many (nothing is taken then).
    pub fn try_spend(&self, owner: &str, cost: u32) -> Result<(), Duration> {
        let burst = f64::from(self.config.burst);
        let rate = self.rate_per_sec();
        let mut buckets = self.buckets.lock_unpoisoned();
        let now = Instant::now();
        let bucket = buckets.entry(owner.to_string()).or_insert(Bucket {
            tokens: burst,
            updated: now,
            warned: None,
        });
        let elapsed = now.duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.updated = now;
        let cost = f64::from(cost);
        if bucket.tokens >= cost {
            bucket.tokens -= cost;
            Ok(())
        } else {
            let missing = cost.min(burst) - bucket.tokens;
            Err(Duration::from_secs_f64((missing / rate).max(0.001)))
        }
    }

    /// True (and remembered) when `owner` may get another Warning Event
    /// about its budget now.
    pub fn should_warn(&self, owner: &str) -> bool {
        let mut buckets = self.buckets.lock_unpoisoned();
        let Some(bucket) = buckets.get_mut(owner) else {
            return false;
        };
        if bucket.warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return false;
        }
        bucket.warned = Some(Instant::now());
        true
    }

    /// Forgets `owner` (the Jinghzhu is gone).
    pub fn forget(&self, owner: &str) {
        self.buckets.lock_unpoisoned().remove(owner);
    }

    /// How many objects have a bucket.
    pub fn len(&self) -> usize {
        self.buckets.lock_unpoisoned().len()
    }

    /// True when no object has a bucket.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_refill_rate() {
        let budget = WriteBudget::new(BudgetConfig {
            burst: 5,
            per_minute: 600,
        });
        assert!(budget.try_spend("a", 5).is_ok());
        let wait = budget.try_spend("a", 2).expect_err("empty");
        assert!(
            wait > Duration::from_millis(100) && wait <= Duration::from_millis(200),
            "{wait:?}"
        );
        assert!(budget.try_spend("b", 5).is_ok(), "objects are independent");
        std::thread::sleep(Duration::from_millis(250));
        assert!(budget.try_spend("a", 2).is_ok(), "refilled at 10/s");
    }

    #[test]
    fn a_denied_spend_takes_nothing_and_warnings_are_spaced() {
        let budget = WriteBudget::new(BudgetConfig {
            burst: 3,
            per_minute: 1,
        });
        assert!(budget.try_spend("a", 4).is_err());
        assert!(
            budget.try_spend("a", 3).is_ok(),
            "the denied spend took nothing"
        );
        assert!(budget.should_warn("a"));
        assert!(!budget.should_warn("a"));
        budget.forget("a");
        assert!(budget.is_empty());
        assert!(
            budget.try_spend("a", 3).is_ok(),
            "a recreated object starts full"
        );
    }
}
