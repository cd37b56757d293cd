//! Per-object exponential backoff for failed reconciles.
//!
//! kube's runtime requeues with whatever `Action` the error policy returns but
//! keeps no per-object failure history, so this module fills that gap with
//! the policy of client-go's `ItemExponentialFailureRateLimiter`: the n-th
//! consecutive failure of an object waits `base * 2^(n-1)` (5 ms doubling up
//! to [`MAX_BACKOFF`], 30 s, by default), and a success forgets the object.
//!
//! client-go doubles up to 1000 s. The host stops at 30 s: its client hands
//! a write refused with 429 or 503 straight back instead of waiting on
//! `Retry-After` ([`crate::kube_api::client`]), so this backoff is what spaces
//! the retries of such an object, and no object should wait a quarter of
//! an hour for a refusal that lasted seconds.
//!
//! ```
//! use std::time::Duration;
//! use wasm_operator::controller::backoff::PerObjectBackoff;
//!
//! let backoff = PerObjectBackoff::default();
//! assert_eq!(backoff.failed("ns/a"), Duration::from_millis(5));
//! assert_eq!(backoff.failed("ns/a"), Duration::from_millis(10));
//! backoff.succeeded("ns/a");
//! assert_eq!(backoff.failed("ns/a"), Duration::from_millis(5));
//! ```

use crate::locks::MutexExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Consecutive failures per object key, and the delays they earn.
#[derive(Debug)]
pub struct PerObjectBackoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

/// The longest the default backoff waits before retrying an object.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Default for PerObjectBackoff {
    /// 5 ms (client-go's) doubling to [`MAX_BACKOFF`].
    fn default() -> Self {
        Self::new(Duration::from_millis(5), MAX_BACKOFF)
    }
}

impl PerObjectBackoff {
    /// A backoff starting at `base` and never waiting longer than `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records a failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock_unpoisoned();
        let count = failures.entry(key.to_string()).or_insert(0);
        let exponent = *count;
        *count = count.saturating_add(1);
        // 2^exponent overflows quickly; anything past 2^40 * 5 ms is beyond any sane max.
        let factor = 2u64.saturating_pow(exponent.min(40));
        let delay = self
            .base
            .checked_mul(u32::try_from(factor).unwrap_or(u32::MAX))
            .unwrap_or(self.max);
        delay.min(self.max)
    }

    /// Forgets the failures of `key` (call on success or when the object is gone).
    pub fn succeeded(&self, key: &str) {
        let mut failures = self.failures.lock_unpoisoned();
        failures.remove(key);
    }

    /// Consecutive failures recorded for `key`.
    pub fn failures(&self, key: &str) -> u32 {
        let failures = self.failures.lock_unpoisoned();
        failures.get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_object_up_to_the_max_and_resets_on_success() {
        let backoff = PerObjectBackoff::default();
        let delays: Vec<_> = (0..5).map(|_| backoff.failed("a")).collect();
        assert_eq!(
            delays,
            [5, 10, 20, 40, 80].map(Duration::from_millis).to_vec()
        );
        // Another object is unaffected.
        assert_eq!(backoff.failed("b"), Duration::from_millis(5));
        for _ in 0..100 {
            backoff.failed("a");
        }
        assert_eq!(backoff.failed("a"), MAX_BACKOFF);
        backoff.succeeded("a");
        assert_eq!(backoff.failures("a"), 0);
        assert_eq!(backoff.failed("a"), Duration::from_millis(5));
    }
}
