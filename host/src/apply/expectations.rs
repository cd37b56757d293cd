//! Expectations: what this host has just done to an object's Pods and is
//! waiting to see in its cache.
//!
//! The pod cache lags the API server. Without expectations, a reconcile that
//! runs after we created a pod but before the watch delivered it would see
//! too few pods and create another one. Like the ReplicaSet controller in
//! kube-controller-manager, we count creates *before* sending them, so a
//! create whose outcome is unknown (a timeout after the API server may have
//! committed it) still counts until the watch shows a new pod of the object
//! or the expectations time out; and we remember the UIDs of pods we
//! created and deleted until the cache shows them.
//!
//! Everything is keyed by the Jinghzhu's UID, not its name: a Jinghzhu
//! deleted and recreated under the same name starts clean, and the entry
//! of a deleted Jinghzhu is dropped when the watch reports the deletion.
//!
//! ```
//! use std::time::Duration;
//! use wasm_operator::apply::expectations::Expectations;
//!
//! let expectations = Expectations::new(Duration::from_secs(300));
//! expectations.expect_creations("uid-web", 1); // before sending the create
//! assert!(!expectations.satisfied("uid-web", |_uid| None));
//! expectations.created("uid-web", "pod-1"); // the API server answered
//! assert!(!expectations.satisfied("uid-web", |_uid| None));
//! // The cache now holds the pod (not terminating):
//! assert!(expectations.satisfied("uid-web", |uid| (uid == "pod-1").then_some(false)));
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Pending creates and deletes per Jinghzhu UID.
#[derive(Debug)]
pub struct Expectations {
    timeout: Duration,
    pending: Mutex<HashMap<String, Pending>>,
}

#[derive(Debug, Default)]
struct Pending {
    /// Creates sent whose pod we have not identified yet: no answer yet, or
    /// an answer that leaves open whether the pod was created.
    in_flight: usize,
    /// UIDs of pods we created that the cache has not shown yet.
    creates: HashSet<String>,
    /// UIDs of new pods the watch showed before our create returned them.
    arrived: HashSet<String>,
    /// UIDs of pods we deleted that the cache still shows as live.
    deletes: HashSet<String>,
    since: Option<Instant>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.in_flight == 0 && self.creates.is_empty() && self.deletes.is_empty()
    }
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

    fn with_pending<T>(&self, owner: &str, f: impl FnOnce(&mut Pending) -> T) -> T {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let entry = pending.entry(owner.to_string()).or_default();
        entry.since = Some(Instant::now());
        f(entry)
    }

    /// Records that `count` creates for `owner` are about to be sent. Call
    /// before sending them.
    pub fn expect_creations(&self, owner: &str, count: usize) {
        self.with_pending(owner, |p| p.in_flight = p.in_flight.saturating_add(count));
    }

    /// A create for `owner` returned the pod `uid`.
    pub fn created(&self, owner: &str, uid: &str) {
        self.with_pending(owner, |p| {
            if p.arrived.remove(uid) {
                return; // the watch was faster and already counted it
            }
            p.in_flight = p.in_flight.saturating_sub(1);
            p.creates.insert(uid.to_string());
        });
    }

    /// A create for `owner` certainly failed (the API server refused it):
    /// nothing will arrive for it.
    pub fn creation_failed(&self, owner: &str) {
        self.with_pending(owner, |p| p.in_flight = p.in_flight.saturating_sub(1));
    }

    /// The watch showed a pod `uid` controlled by `owner` for the first time.
    pub fn observe_added(&self, owner: &str, uid: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = pending.get_mut(owner) else {
            return;
        };
        if p.creates.remove(uid) {
            return;
        }
        if p.in_flight > 0 {
            // One of our creates whose answer we have not had (or lost).
            p.in_flight -= 1;
            p.arrived.insert(uid.to_string());
        }
    }

    /// Records that we deleted the pod `uid` of `owner`.
    pub fn expect_deleted(&self, owner: &str, uid: &str) {
        self.with_pending(owner, |p| p.deletes.insert(uid.to_string()));
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

    /// True when the cache reflects everything we did for `owner`, so a
    /// reconcile may act on it. `cached(uid)` tells whether the cache holds
    /// that pod: `None` if absent, `Some(terminating)` if present. Pending
    /// entries older than the timeout are dropped (and count as satisfied).
    pub fn satisfied(&self, owner: &str, cached: impl Fn(&str) -> Option<bool>) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = pending.get_mut(owner) else {
            return true;
        };
        p.creates.retain(|uid| cached(uid).is_none());
        p.deletes.retain(|uid| cached(uid) == Some(false));
        let expired = p.since.is_some_and(|since| since.elapsed() > self.timeout);
        if p.is_empty() || expired {
            if expired && !p.is_empty() {
                tracing::warn!(
                    owner,
                    in_flight = p.in_flight,
                    creates = p.creates.len(),
                    deletes = p.deletes.len(),
                    "expectations timed out; reconciling with the cache as it is"
                );
            }
            pending.remove(owner);
            return true;
        }
        false
    }

    /// Pending (creates, deletes) of `owner`, for logs.
    pub fn pending(&self, owner: &str) -> (usize, usize) {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending
            .get(owner)
            .map(|p| (p.in_flight + p.creates.len(), p.deletes.len()))
            .unwrap_or((0, 0))
    }

    /// Forgets `owner` (the Jinghzhu is gone).
    pub fn forget(&self, owner: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.remove(owner);
    }

    /// How many Jinghzhus have pending entries (for tests and metrics).
    pub fn len(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when nothing is pending for any Jinghzhu.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Expectations {
        Expectations::new(Duration::from_secs(300))
    }

    #[test]
    fn creates_count_before_they_are_sent_and_wait_for_the_cache() {
        let e = fresh();
        assert!(e.satisfied("k", |_| None), "nothing pending");
        e.expect_creations("k", 2);
        assert!(!e.satisfied("k", |_| None), "sent, no answer yet");
        e.created("k", "u1");
        e.created("k", "u2");
        assert!(!e.satisfied("k", |uid| (uid == "u1").then_some(false)));
        assert_eq!(e.pending("k"), (1, 0));
        assert!(e.satisfied("k", |_| Some(false)));
        assert!(e.is_empty());
    }

    #[test]
    fn a_create_with_an_unknown_outcome_waits_for_the_watch() {
        let e = fresh();
        e.expect_creations("k", 1);
        // The create timed out: no `created`, no `creation_failed`.
        assert!(!e.satisfied("k", |_| None), "must not create again yet");
        // The watch then shows the pod the API server did commit.
        e.observe_added("k", "u9");
        assert!(e.satisfied("k", |_| None));
    }

    #[test]
    fn a_refused_create_releases_its_count() {
        let e = fresh();
        e.expect_creations("k", 1);
        e.creation_failed("k");
        assert!(e.satisfied("k", |_| None));
    }

    #[test]
    fn the_watch_may_be_faster_than_the_answer() {
        let e = fresh();
        e.expect_creations("k", 1);
        e.observe_added("k", "u1");
        e.created("k", "u1");
        assert_eq!(e.pending("k"), (0, 0));
        assert!(e.satisfied("k", |_| None));
    }

    #[test]
    fn deletes_wait_until_the_pod_is_gone_or_terminating() {
        let e = fresh();
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
        let e = fresh();
        e.expect_creations("k", 1);
        e.created("k", "u1");
        e.observe_gone("u1");
        assert!(e.satisfied("k", |_| None));
    }

    #[test]
    fn expectations_time_out() {
        let e = Expectations::new(Duration::from_millis(1));
        e.expect_creations("k", 1);
        std::thread::sleep(Duration::from_millis(5));
        assert!(e.satisfied("k", |_| None));
        assert_eq!(e.pending("k"), (0, 0));
    }

    #[test]
    fn owners_are_independent_and_forgotten() {
        let e = fresh();
        e.expect_creations("a", 1);
        assert!(e.satisfied("b", |_| None));
        e.observe_added("b", "x");
        assert!(!e.satisfied("a", |_| None), "b's pod is not a's");
        e.forget("a");
        assert!(e.satisfied("a", |_| None));
        assert!(e.is_empty());
    }
}
