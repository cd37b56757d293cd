//! The write budget of one declared controller: how many API writes (child
//! applies that change something, deletes, status writes) all its
//! reconciles together may make per second, as one token bucket, and each
//! namespace's fair share of it.
//!
//! A plugin that changes a child or its status on every call, or deletes
//! what it recreates, would otherwise turn each reconcile into writes that
//! wake the next one, as fast as the API server answers. A plan is written
//! only if the bucket holds enough tokens for all of its writes (nothing is
//! half-applied; a plan larger than the bucket waits for a full bucket);
//! otherwise the parent waits until it does and gets a Warning
//! `WriteBudgetExceeded` naming the rule [`RULE`].
//!
//! **Fairness between namespaces** (rule [`NAMESPACE_RULE`]): no namespace
//! may take the controller's bucket below its *reserve* (a quarter of the
//! burst). Below it, a namespace spends only from a share bucket of its
//! own (a quarter of the rate, a sixteenth of the burst). One namespace's
//! parents alone therefore leave at least the reserve, less their share,
//! to every other namespace, while a controller serving one namespace
//! still has nearly its whole budget.
//!
//! ```
//! use wasm_operator::declared::budget::WriteBudget;
//!
//! let budget = WriteBudget::new(10, 20);
//! assert!(budget.try_spend(20).is_ok());
//! assert!(budget.try_spend(1).is_err());
//!
//! let fair = WriteBudget::new(10, 16);
//! assert!(fair.try_spend_in("noisy", 12).is_ok(), "down to the reserve of 4");
//! assert!(fair.try_spend_in("noisy", 2).is_ok(), "its own share: 1 token, a plan of 2 from a full share");
//! assert!(fair.try_spend_in("noisy", 1).is_err(), "its share is spent");
//! assert!(fair.try_spend_in("quiet", 1).is_ok(), "another namespace's share");
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::locks::MutexExt;

/// The rule a plan over the controller's budget is held by.
pub const RULE: &str = "writes/budget";
/// The rule a plan over its namespace's share of the budget is held by.
pub const NAMESPACE_RULE: &str = "writes/namespace-budget";
/// Writes per second a controller may make once its burst is spent.
pub const DEFAULT_PER_SECOND: u32 = 200;
/// Writes a controller may make at once (the bucket's size): a thousand
/// parents' first reconciles, each a few children and a status.
pub const DEFAULT_BURST: u32 = 5000;
/// The reserve no single namespace may spend is the burst divided by this.
pub const RESERVE_DIVISOR: u32 = 4;
/// A namespace's share refills at the rate divided by this.
pub const SHARE_RATE_DIVISOR: u32 = 4;
/// A namespace's share holds the burst divided by this.
pub const SHARE_BURST_DIVISOR: u32 = 16;
/// Namespaces whose share is remembered before full ones are forgotten
/// (a full share is what a forgotten namespace starts with again).
const SHARES_KEPT: usize = 4096;

/// One controller's budget: its bucket and the namespaces' shares.
#[derive(Debug)]
pub struct WriteBudget {
    per_second: u32,
    burst: u32,
    buckets: Mutex<Buckets>,
}

#[derive(Debug)]
struct Buckets {
    controller: Bucket,
    shares: HashMap<String, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl Bucket {
    fn full(size: f64) -> Self {
        Self {
            tokens: size,
            updated: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant, rate: f64, size: f64) {
        let elapsed = now.duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(size);
        self.updated = now;
    }
}

/// A plan the budget holds back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// How long until it could pass.
    pub wait: Duration,
    /// Whether its namespace's share held it ([`NAMESPACE_RULE`]) rather
    /// than the controller's bucket ([`RULE`]).
    pub namespace_share: bool,
}

impl WriteBudget {
    /// A full bucket of `burst` refilled at `per_second` (at least 1).
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self {
            per_second: per_second.max(1),
            burst: burst.max(1),
            buckets: Mutex::new(Buckets {
                controller: Bucket::full(f64::from(burst.max(1))),
                shares: HashMap::new(),
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

    /// The tokens no single namespace may take from the controller's bucket.
    pub fn reserve(&self) -> f64 {
        f64::from(self.burst) / f64::from(RESERVE_DIVISOR)
    }

    /// A namespace's share: its rate and its size.
    pub fn share(&self) -> (f64, f64) {
        (
            f64::from(self.per_second) / f64::from(SHARE_RATE_DIVISOR),
            (f64::from(self.burst) / f64::from(SHARE_BURST_DIVISOR)).max(1.0),
        )
    }

    /// Takes `cost` tokens, or says how long until the bucket holds enough
    /// (nothing is taken then). A cost over the burst is taken from a full
    /// bucket (the bucket goes below empty). No fairness between
    /// namespaces: [`Self::try_spend_in`] has it.
    pub fn try_spend(&self, cost: u32) -> Result<(), Duration> {
        if cost == 0 {
            return Ok(());
        }
        let rate = f64::from(self.per_second);
        let burst = f64::from(self.burst);
        let mut buckets = self.buckets.lock_unpoisoned();
        let bucket = &mut buckets.controller;
        bucket.refill(Instant::now(), rate, burst);
        let needed = f64::from(cost).min(burst);
        if bucket.tokens >= needed {
            bucket.tokens -= f64::from(cost);
            return Ok(());
        }
        let missing = needed - bucket.tokens;
        Err(Duration::from_secs_f64((missing / rate).max(0.001)))
    }

    /// Takes `cost` tokens for a plan of a parent in `namespace`: from the
    /// controller's bucket while it stays above the reserve, below it from
    /// the namespace's share too (nothing is taken when denied).
    pub fn try_spend_in(&self, namespace: &str, cost: u32) -> Result<(), Denied> {
        if cost == 0 {
            return Ok(());
        }
        let rate = f64::from(self.per_second);
        let burst = f64::from(self.burst);
        let (share_rate, share_size) = self.share();
        let now = Instant::now();
        let mut buckets = self.buckets.lock_unpoisoned();
        buckets.controller.refill(now, rate, burst);
        let needed = f64::from(cost).min(burst);
        let tokens = buckets.controller.tokens;
        if tokens < needed {
            return Err(Denied {
                wait: Duration::from_secs_f64(((needed - tokens) / rate).max(0.001)),
                namespace_share: false,
            });
        }
        // A plan so large it would dig into the reserve even from a full
        // bucket passes from a full bucket, as without fairness.
        let floor = self.reserve().min(burst - needed);
        if tokens - needed >= floor {
            buckets.controller.tokens -= f64::from(cost);
            return Ok(());
        }
        if buckets.shares.len() >= SHARES_KEPT && !buckets.shares.contains_key(namespace) {
            forget_full_shares(&mut buckets.shares, now, share_rate, share_size);
        }
        let share = buckets
            .shares
            .entry(namespace.to_string())
            .or_insert_with(|| Bucket::full(share_size));
        share.refill(now, share_rate, share_size);
        let share_needed = f64::from(cost).min(share_size);
        if share.tokens < share_needed {
            let wait = (share_needed - share.tokens) / share_rate;
            return Err(Denied {
                wait: Duration::from_secs_f64(wait.max(0.001)),
                namespace_share: true,
            });
        }
        share.tokens -= f64::from(cost);
        buckets.controller.tokens -= f64::from(cost);
        Ok(())
    }
}

/// Drops the shares that are full by now (a namespace met again starts
/// with a full share, the same thing).
fn forget_full_shares(shares: &mut HashMap<String, Bucket>, now: Instant, rate: f64, size: f64) {
    shares.retain(|_, share| {
        share.refill(now, rate, size);
        share.tokens < size
    });
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

    #[test]
    fn one_namespace_cannot_spend_the_reserve_beyond_its_share() {
        // Reserve 100, share 25/s and 25 tokens.
        let budget = WriteBudget::new(100, 400);
        assert!(
            budget.try_spend_in("noisy", 300).is_ok(),
            "down to the reserve"
        );
        assert!(budget.try_spend_in("noisy", 25).is_ok(), "its share");
        let denied = budget.try_spend_in("noisy", 5).expect_err("share spent");
        assert!(denied.namespace_share, "{denied:?}");
        assert!(denied.wait <= Duration::from_millis(210), "{denied:?}");
        for _ in 0..12 {
            assert!(
                budget.try_spend_in("quiet", 2).is_ok(),
                "another namespace spends its share of the reserve"
            );
        }
        let denied = budget.try_spend_in("quiet", 2).expect_err("its share too");
        assert!(denied.namespace_share);
    }

    #[test]
    fn the_controller_bucket_empty_is_the_controller_rule() {
        let budget = WriteBudget::new(1, 8);
        assert!(budget.try_spend_in("a", 6).is_ok());
        assert!(budget.try_spend_in("a", 1).is_ok(), "share of 1 (8/16 < 1)");
        assert!(budget.try_spend_in("b", 1).is_ok());
        let denied = budget.try_spend_in("c", 1).expect_err("empty");
        assert!(!denied.namespace_share, "{denied:?}");
    }

    #[test]
    fn a_plan_larger_than_the_bucket_passes_from_a_full_one_in_any_namespace() {
        let budget = WriteBudget::new(1000, 8);
        assert!(budget.try_spend_in("big", 20).is_ok(), "a full bucket");
        assert!(budget.try_spend_in("big", 20).is_err(), "below empty");
    }

    #[test]
    fn full_shares_are_forgotten_past_the_bound() {
        let mut shares = HashMap::new();
        let long_ago = Instant::now() - Duration::from_secs(60);
        shares.insert(
            "idle".to_string(),
            Bucket {
                tokens: 0.0,
                updated: long_ago,
            },
        );
        shares.insert("busy".to_string(), Bucket::full(-1.0));
        forget_full_shares(&mut shares, Instant::now(), 1.0, 4.0);
        assert!(!shares.contains_key("idle"), "refilled: forgotten");
        assert!(shares.contains_key("busy"));
    }
}
