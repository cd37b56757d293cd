//! Expectations: what this host has just done to an object's Pods and is
//! waiting to see in its cache.
//!
//! The pod cache lags the API server. Without expectations, a reconcile that
//! runs after we created a pod but before the watch delivered it would see
//! too few pods and create another one. Like the ReplicaSet controller in
//! kube-controller-manager, we record the UIDs of the pods we create and
//! delete, and reconcile an object only once its cache shows all of them (or
//! after a timeout, in case a watch event was lost for good).
//!
//! ```
//! use std::time::Duration;
//! use wasm_operator::controller::expectations::Expectations;
//!
//! let expectations = Expectations::new(Duration::from_secs(300));
//! expectations.expect_created("ns/web", "uid-1");
//! assert!(!expectations.satisfied("ns/web", |_uid| None));
//! // The cache now holds the pod (not terminating):
//! assert!(expectations.satisfied("ns/web", |uid| (uid == "uid-1").then_some(false)));
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Pending creates and deletes per object key (`namespace/name`).
#[derive(Debug)]
pub struct Expectations {
    timeout: Duration,
    pending: Mutex<HashMap<String, Pending>>,
}

#[derive(Debug)]
struct Pending {
    /// UIDs of pods we created that the cache has not shown yet.
    creates: HashSet<String>,
    /// UIDs of pods we deleted that the cache still shows as live.
    deletes: HashSet<String>,
    since: Instant,
}

impl Expectations {
    /// Expectations that are given up on after `timeout` (the ReplicaSet
    /// controller uses 5 minutes).
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn with_pending<T>(&self, key: &str, f: impl FnOnce(&mut Pending) -> T) -> T {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let entry = pending.entry(key.to_string()).or_insert_with(|| Pending {
            creates: HashSet::new(),
            deletes: HashSet::new(),
            since: Instant::now(),
        });
        entry.since = Instant::now();
        f(entry)
    }

    /// Records that we created the pod `uid` for `key`.
    pub fn expect_created(&self, key: &str, uid: &str) {
        self.with_pending(key, |p| p.creates.insert(uid.to_string()));
    }

    /// Records that we deleted the pod `uid` of `key`.
    pub fn expect_deleted(&self, key: &str, uid: &str) {
        self.with_pending(key, |p| p.deletes.insert(uid.to_string()));
    }

    /// The watch saw pod `uid` disappear: nothing is pending on it any more
    /// (a pod we created may be deleted by someone else before our cache
    /// ever showed it).
    pub fn observe_gone(&self, uid: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for p in pending.values_mut() {
            p.creates.remove(uid);
            p.deletes.remove(uid);
        }
    }

    /// True when the cache reflects everything we did for `key`, so a
    /// reconcile may act on it. `cached(uid)` tells whether the cache holds
    /// that pod: `None` if absent, `Some(terminating)` if present. Pending
    /// entries older than the timeout are dropped (and count as satisfied).
    pub fn satisfied(&self, key: &str, cached: impl Fn(&str) -> Option<bool>) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = pending.get_mut(key) else {
            return true;
        };
        p.creates.retain(|uid| cached(uid).is_none());
        p.deletes.retain(|uid| cached(uid) == Some(false));
        if (p.creates.is_empty() && p.deletes.is_empty()) || p.since.elapsed() > self.timeout {
            if p.since.elapsed() > self.timeout {
                tracing::warn!(
                    object = key,
                    creates = p.creates.len(),
                    deletes = p.deletes.len(),
                    "expectations timed out; reconciling with the cache as it is"
                );
            }
            pending.remove(key);
            return true;
        }
        false
    }

    /// Pending (creates, deletes) of `key`, for logs.
    pub fn pending(&self, key: &str) -> (usize, usize) {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending
            .get(key)
            .map(|p| (p.creates.len(), p.deletes.len()))
            .unwrap_or((0, 0))
    }

    /// Forgets `key` (the object is gone).
    pub fn forget(&self, key: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_wait_for_the_cache_to_show_the_pod() {
        let e = Expectations::new(Duration::from_secs(300));
        assert!(e.satisfied("k", |_| None), "nothing pending");
        e.expect_created("k", "u1");
        e.expect_created("k", "u2");
        assert!(!e.satisfied("k", |uid| (uid == "u1").then_some(false)));
        assert_eq!(e.pending("k"), (1, 0));
        assert!(e.satisfied("k", |_| Some(false)));
    }

    #[test]
    fn deletes_wait_until_the_pod_is_gone_or_terminating() {
        let e = Expectations::new(Duration::from_secs(300));
        e.expect_deleted("k", "u1");
        assert!(
            !e.satisfied("k", |_| Some(false)),
            "still live in the cache"
        );
        assert!(e.satisfied("k", |_| Some(true)), "terminating counts");
        e.expect_deleted("k", "u2");
        assert!(e.satisfied("k", |_| None), "gone counts");
    }

    #[test]
    fn a_pod_deleted_before_the_cache_saw_it_releases_the_create() {
        let e = Expectations::new(Duration::from_secs(300));
        e.expect_created("k", "u1");
        e.observe_gone("u1");
        assert!(e.satisfied("k", |_| None));
    }

    #[test]
    fn expectations_time_out() {
        let e = Expectations::new(Duration::from_millis(1));
        e.expect_created("k", "u1");
        std::thread::sleep(Duration::from_millis(5));
        assert!(e.satisfied("k", |_| None));
        assert_eq!(e.pending("k"), (0, 0));
    }

    #[test]
    fn keys_are_independent() {
        let e = Expectations::new(Duration::from_secs(300));
        e.expect_created("a", "u1");
        assert!(e.satisfied("b", |_| None));
        e.forget("a");
        assert!(e.satisfied("a", |_| None));
    }
}
