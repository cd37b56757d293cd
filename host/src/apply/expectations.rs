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
//! created and deleted until a reconcile's snapshot of the cache shows
//! them (not when the watch event arrives: a reconcile may have read its
//! snapshot just before it).
//!
//! A create that failed is released at once when its outcome is known: the
//! API server answered with an error, or the request certainly never left
//! (the connection could not be opened; see
//! [`crate::apply::WriteOutcome`]). A create that may have been sent (a
//! timeout, a 503 or a reset after the request went out) is never sent
//! again blindly: it keeps its count until the watch shows a new pod of the
//! object, or a read of the API server settles it
//! ([`Expectations::settle_by_read`]): the object's next reconcile lists its
//! pods (a quorum read, made after the create was answered), and every
//! maybe-sent create beyond the listed pods that neither the cache nor an
//! answered create explains was not made and is released (proposed again by
//! that reconcile). A pod that was made is either in that list or already
//! in the cache, so no create is repeated for it. What this cannot see: a
//! create still being processed by the API server when the read is served
//! (the client gave up waiting for a slow server); then the surplus pod is
//! deleted by the next reconcile.
//!
//! A reconcile held back by pending expectations is *waiting*: how many
//! objects wait is a gauge (`wasm_operator_expectations_waiting`), how many
//! gave up waiting a counter (`wasm_operator_expectation_timeouts_total`),
//! and [`Expectations::check`] says when a wait is long enough to be
//! logged at info level (after [`LOG_WAITS_AFTER`], then every
//! [`LOG_WAITS_EVERY`]).
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::locks::MutexExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// A reconcile held back this long by its expectations is logged at info.
pub const LOG_WAITS_AFTER: Duration = Duration::from_secs(5);

/// A wait that goes on is logged again this often (per object).
pub const LOG_WAITS_EVERY: Duration = Duration::from_secs(30);

/// Pending creates and deletes per Jinghzhu UID.
#[derive(Debug)]
pub struct Expectations {
    timeout: Duration,
    pending: Mutex<State>,
    report: OnceLock<Report>,
    /// Pod watch events applied to the pod cache so far (see
    /// [`Expectations::pod_event_applied`]): what a snapshot includes.
    pod_events: AtomicU64,
}

/// Where waits are counted once [`Expectations::report_to`] was called.
#[derive(Debug)]
struct Report {
    waiting: Gauge,
    timeouts: Counter,
}

#[derive(Debug, Default)]
struct State {
    owners: HashMap<String, Pending>,
    /// Owners whose `waiting_since` is set.
    waiting: usize,
}

impl State {
    /// Drops `owner`'s entry (and its wait).
    fn remove(&mut self, owner: &str) {
        if let Some(p) = self.owners.remove(owner)
            && p.waiting_since.is_some()
        {
            self.waiting = self.waiting.saturating_sub(1);
        }
    }
}

/// Creates sent and not all answered yet (see
/// [`Expectations::send_creations`]).
#[derive(Debug)]
pub struct CreatesInFlight<'a> {
    expectations: &'a Expectations,
    owner: &'a str,
    unanswered: usize,
}

impl CreatesInFlight<'_> {
    /// One create was answered (its outcome is recorded by the caller).
    pub fn answered(&mut self) {
        self.unanswered = self.unanswered.saturating_sub(1);
    }
}

impl Drop for CreatesInFlight<'_> {
    fn drop(&mut self) {
        for _ in 0..self.unanswered {
            self.expectations.maybe_sent(self.owner);
        }
    }
}

/// A delete sent and not answered yet (see [`Expectations::send_deletion`]).
#[derive(Debug)]
pub struct DeleteInFlight<'a> {
    expectations: &'a Expectations,
    owner: &'a str,
    uid: &'a str,
    answered: bool,
}

impl DeleteInFlight<'_> {
    /// The delete was made (or the pod was already gone or replaced).
    pub fn answered(mut self) {
        self.answered = true;
    }

    /// The delete certainly failed: the pod stays, nothing is awaited.
    pub fn failed(mut self) {
        self.answered = true;
        self.expectations.with_pending(self.owner, |p| {
            p.deletes.remove(self.uid);
        });
    }
}

impl Drop for DeleteInFlight<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.expectations.with_pending(self.owner, |p| {
                p.maybe_deleted.insert(self.uid.to_string());
            });
        }
    }
}

/// What [`Expectations::check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Nothing pending: the cache shows everything we did.
    Satisfied,
    /// Something was pending for longer than the timeout; given up on
    /// (reconcile with the cache as it is).
    TimedOut(Waiting),
    /// Still waiting for the cache to show what we did.
    Waiting(Waiting),
}

/// A wait on expectations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Creates not seen yet (sent with no answer, an unknown outcome, or
    /// answered but not in the cache).
    pub creates: usize,
    /// Of those, creates sent that have no answer (or a lost one).
    pub unanswered: usize,
    /// Deletes the cache still shows as live.
    pub deletes: usize,
    /// Since the first reconcile this wait held back.
    pub waited: Duration,
    /// Whether this wait should be logged at info now (rate-limited).
    pub log: bool,
}

#[derive(Debug, Default)]
struct Pending {
    /// Creates sent whose pod we have not identified yet: no answer yet, or
    /// an answer that leaves open whether the pod was created.
    in_flight: usize,
    /// UIDs of pods we created that the cache has not shown yet.
    creates: HashSet<String>,
    /// UIDs of new pods the watch showed before our create returned them
    /// (also in `creates` until a snapshot shows them).
    arrived: HashSet<String>,
    /// UIDs of pods we deleted that the cache still shows as live.
    deletes: HashSet<String>,
    /// Of `in_flight`, creates whose outcome is unknown (maybe sent).
    maybe_sent: usize,
    /// Of `deletes`, deletes whose outcome is unknown (sent, no answer).
    maybe_deleted: HashSet<String>,
    since: Option<Instant>,
    /// Pods that left the pod watch's selection alive (a label removed),
    /// by UID. Held until a snapshot read after they left shows them
    /// again, a read shows them deleted, or the hold passes.
    strays: HashMap<String, Stray>,
    /// When a reconcile was first held back by this entry.
    waiting_since: Option<Instant>,
    /// When this wait was last logged at info.
    logged: Option<Instant>,
}

/// A pod that left the pod watch's selection alive.
#[derive(Debug)]
struct Stray {
    name: String,
    /// Returned by [`Expectations::take_strays`] already.
    looked_at: bool,
    until: Instant,
    /// The pod event that dropped it from the cache (its number in
    /// [`Expectations::pod_events_applied`]): a snapshot read before that
    /// event was applied still shows the pod, and must not end the hold.
    left_at_event: u64,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.in_flight == 0
            && self.creates.is_empty()
            && self.deletes.is_empty()
            && self.strays.is_empty()
    }

    /// Takes one create off `in_flight`, keeping `maybe_sent` within it.
    fn one_in_flight_less(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.maybe_sent = self.maybe_sent.min(self.in_flight);
    }
}

impl Expectations {
    /// Expectations that are given up on after `timeout` (the ReplicaSet
    /// controller uses 5 minutes).
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            pending: Mutex::new(State::default()),
            report: OnceLock::new(),
            pod_events: AtomicU64::new(0),
        }
    }

    /// Counts one pod watch event as applied to the pod cache and its owner
    /// index. Called by the pod watch after each event, in order.
    pub fn pod_event_applied(&self) {
        self.pod_events.fetch_add(1, Ordering::SeqCst);
    }

    /// Pod watch events applied so far. A reconcile reads this before its
    /// snapshot of the cache, and hands it to [`Expectations::check_as_of`]:
    /// the snapshot shows at least what those events did.
    pub fn pod_events_applied(&self) -> u64 {
        self.pod_events.load(Ordering::SeqCst)
    }

    /// Counts waits in `waiting` (objects held back now) and expectations
    /// given up on in `timeouts`. The first call wins; later ones do nothing.
    pub fn report_to(&self, waiting: &Gauge, timeouts: &Counter) {
        self.report.get_or_init(|| Report {
            waiting: waiting.clone(),
            timeouts: timeouts.clone(),
        });
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.pending.lock_unpoisoned()
    }

    /// Publishes how many objects wait (call with the lock held, after a change).
    fn publish(&self, state: &State) {
        if let Some(report) = self.report.get() {
            report
                .waiting
                .set(i64::try_from(state.waiting).unwrap_or(i64::MAX));
        }
    }

    fn with_pending<T>(&self, owner: &str, f: impl FnOnce(&mut Pending) -> T) -> T {
        let mut state = self.lock();
        let entry = state.owners.entry(owner.to_string()).or_default();
        entry.since = Some(Instant::now());
        f(entry)
    }

    /// Records that `count` creates for `owner` are about to be sent. Call
    /// before sending them.
    pub fn expect_creations(&self, owner: &str, count: usize) {
        self.with_pending(owner, |p| p.in_flight = p.in_flight.saturating_add(count));
    }

    /// [`Expectations::expect_creations`], returning a guard that counts
    /// the answers ([`CreatesInFlight::answered`]): if it is dropped before
    /// every create was answered (the reconcile was cancelled mid-flight,
    /// as when its shard is lost), the rest count as maybe sent, settled by
    /// a read at the object's next reconcile. (Left unanswered, they held
    /// the object until the expectations timeout, 300 s.)
    pub fn send_creations<'a>(&'a self, owner: &'a str, count: usize) -> CreatesInFlight<'a> {
        self.expect_creations(owner, count);
        CreatesInFlight {
            expectations: self,
            owner,
            unanswered: count,
        }
    }

    /// A create for `owner` returned the pod `uid`.
    pub fn created(&self, owner: &str, uid: &str) {
        self.with_pending(owner, |p| {
            if p.arrived.remove(uid) {
                return; // the watch was faster and already counted it
            }
            p.one_in_flight_less();
            p.creates.insert(uid.to_string());
        });
    }

    /// A create for `owner` certainly failed (the API server answered with
    /// an error, or the request never left): nothing will arrive for it.
    pub fn creation_failed(&self, owner: &str) {
        self.with_pending(owner, |p| p.one_in_flight_less());
    }

    /// A create for `owner` may or may not have been made (its answer was a
    /// timeout, a 503 or lost): it keeps counting until the watch shows a
    /// new pod or a read settles it ([`Expectations::settle_by_read`]).
    pub fn maybe_sent(&self, owner: &str) {
        self.with_pending(owner, |p| {
            p.maybe_sent = p.maybe_sent.saturating_add(1).min(p.in_flight);
        });
    }

    /// How many creates and deletes of `owner` have an unknown outcome (to
    /// settle by a read before the next reconcile of `owner` acts).
    pub fn unknown_outcomes(&self, owner: &str) -> usize {
        self.lock()
            .owners
            .get(owner)
            .map_or(0, |p| p.maybe_sent + p.maybe_deleted.len())
    }

    /// Settles `owner`'s creates and deletes with an unknown outcome by a
    /// read of the API server. `listed` are the pods the API server has for
    /// `owner` (UID, and whether it is terminating; a quorum read sent
    /// after those requests ended); `cached(uid)` says whether the snapshot
    /// the reconcile works on holds that pod.
    ///
    /// Creates: a listed pod that is neither cached nor an awaited create
    /// of ours may be one of them (made, its answer lost): that many keep
    /// counting until the watch shows them; the rest were not made and are
    /// released. Deletes: a pod listed live was not deleted and is
    /// released; one gone or terminating was, and is awaited as any delete
    /// of ours. Returns how many were released.
    pub fn settle_by_read<'a>(
        &self,
        owner: &str,
        listed: impl IntoIterator<Item = (&'a str, bool)>,
        cached: impl Fn(&str) -> bool,
    ) -> usize {
        let mut state = self.lock();
        let Some(p) = state.owners.get_mut(owner) else {
            return 0;
        };
        let listed: Vec<(&str, bool)> = listed.into_iter().collect();
        let unexplained = listed
            .iter()
            .filter(|(uid, _)| !cached(uid) && !p.creates.contains(*uid))
            .count();
        let released = p.maybe_sent.saturating_sub(unexplained);
        p.in_flight = p.in_flight.saturating_sub(released);
        p.maybe_sent -= released;
        let not_deleted: Vec<String> = p
            .maybe_deleted
            .drain()
            .filter(|uid| listed.contains(&(uid.as_str(), false)))
            .collect();
        for uid in &not_deleted {
            p.deletes.remove(uid);
        }
        released + not_deleted.len()
    }

    /// The watch showed a pod `uid` controlled by `owner` for the first time.
    pub fn observe_added(&self, owner: &str, uid: &str) {
        let mut state = self.lock();
        let Some(p) = state.owners.get_mut(owner) else {
            return;
        };
        if p.creates.contains(uid) {
            // Answered already: it stays until a reconcile's snapshot shows
            // it ([`Expectations::check`]). Dropped here, a reconcile that
            // had read its snapshot just before this event (without the
            // pod) and checked just after found nothing pending and
            // created the pod again.
            return;
        }
        if p.in_flight > 0 {
            // One of our creates whose answer we have not had (or lost).
            // It is waited on like an answered create, until a reconcile's
            // snapshot shows it: a reconcile that read the cache just
            // before this event must not take it as done and create again.
            p.one_in_flight_less();
            p.arrived.insert(uid.to_string());
            p.creates.insert(uid.to_string());
        }
    }

    /// Records that we deleted the pod `uid` of `owner`.
    pub fn expect_deleted(&self, owner: &str, uid: &str) {
        self.with_pending(owner, |p| p.deletes.insert(uid.to_string()));
    }

    /// Records that the pod `uid` of `owner` is about to be deleted, and
    /// returns a guard for the answer: [`DeleteInFlight::answered`] keeps
    /// the delete awaited, [`DeleteInFlight::failed`] drops it. Dropped
    /// without either (the reconcile was cancelled with the request on the
    /// wire, as when its shard is lost), the delete counts as maybe made,
    /// settled by a read at the object's next reconcile
    /// ([`Expectations::settle_by_read`]). Recorded only after the answer,
    /// a cancelled delete left nothing behind, and the next reconcile could
    /// delete another pod in its place.
    pub fn send_deletion<'a>(&'a self, owner: &'a str, uid: &'a str) -> DeleteInFlight<'a> {
        self.expect_deleted(owner, uid);
        DeleteInFlight {
            expectations: self,
            owner,
            uid,
            answered: false,
        }
    }

    /// The watch saw pod `uid` disappear: a create of ours that no snapshot
    /// will show any more (someone deleted it before our cache ever showed
    /// it) is not waited for. A delete of ours stays pending until a
    /// reconcile's snapshot no longer shows the pod live
    /// ([`Expectations::check`]): released here, a reconcile that read its
    /// snapshot just before this event would see the pod still live and
    /// could delete another in its place.
    pub fn observe_gone(&self, uid: &str) {
        let mut state = self.lock();
        for p in state.owners.values_mut() {
            p.creates.remove(uid);
        }
    }

    /// The watch saw `owner`'s pod `uid` (`name`) leave while alive (not
    /// terminating): its labels no longer match the pod watch's selector.
    /// Reconciles of `owner` wait until the cache shows it again (its
    /// labels restored, see `controller::strays`), a read shows it gone
    /// ([`Expectations::stray_settled`]), or `hold` has passed, so a pod
    /// that is still running is never replaced for a lost label.
    ///
    /// Called while the event that drops the pod is applied, before the
    /// cache drops it: the event is number `pod_events_applied() + 1`.
    pub fn stray(&self, owner: &str, uid: &str, name: &str, hold: Duration) {
        let left_at_event = self.pod_events_applied() + 1;
        self.with_pending(owner, |p| {
            p.strays.insert(
                uid.to_string(),
                Stray {
                    name: name.to_string(),
                    looked_at: false,
                    until: Instant::now() + hold,
                    left_at_event,
                },
            );
        });
    }

    /// `owner`'s strays not looked at yet: (UID, name). Each is returned once.
    pub fn take_strays(&self, owner: &str) -> Vec<(String, String)> {
        let mut state = self.lock();
        let Some(p) = state.owners.get_mut(owner) else {
            return Vec::new();
        };
        p.strays
            .iter_mut()
            .filter(|(_, stray)| !stray.looked_at)
            .map(|(uid, stray)| {
                stray.looked_at = true;
                (uid.clone(), stray.name.clone())
            })
            .collect()
    }

    /// A read settled the stray `uid` of `owner`: the pod is gone (or
    /// terminating), so nothing is waited for.
    pub fn stray_settled(&self, owner: &str, uid: &str) {
        if let Some(p) = self.lock().owners.get_mut(owner) {
            p.strays.remove(uid);
        }
    }

    /// True when the cache reflects everything we did for `owner`, so a
    /// reconcile may act on it. `cached(uid)` tells whether the cache holds
    /// that pod: `None` if absent, `Some(terminating)` if present. Pending
    /// entries older than the timeout are dropped (and count as satisfied).
    pub fn satisfied(&self, owner: &str, cached: impl Fn(&str) -> Option<bool>) -> bool {
        !matches!(self.check(owner, cached), Check::Waiting(_))
    }

    /// [`Expectations::satisfied`], saying how long the reconciles of
    /// `owner` have been held back and whether to log it now. A `Waiting`
    /// answer counts as a held-back reconcile.
    pub fn check(&self, owner: &str, cached: impl Fn(&str) -> Option<bool>) -> Check {
        self.check_as_of(owner, u64::MAX, cached)
    }

    /// [`Expectations::check`] against a snapshot read once `events` pod
    /// events were applied ([`Expectations::pod_events_applied`]): a stray
    /// that left the cache after the snapshot was read is still held, even
    /// though the snapshot shows its pod.
    pub fn check_as_of(
        &self,
        owner: &str,
        events: u64,
        cached: impl Fn(&str) -> Option<bool>,
    ) -> Check {
        let mut state = self.lock();
        let Some(p) = state.owners.get_mut(owner) else {
            return Check::Satisfied;
        };
        p.creates.retain(|uid| cached(uid).is_none());
        p.deletes.retain(|uid| cached(uid) == Some(false));
        let deletes = &p.deletes;
        p.maybe_deleted.retain(|uid| deletes.contains(uid));
        let now = Instant::now();
        p.strays.retain(|uid, stray| {
            let back = events >= stray.left_at_event && cached(uid).is_some();
            !back && now < stray.until
        });
        let expired = p
            .since
            .is_some_and(|since| now.saturating_duration_since(since) > self.timeout);
        let mut waiting = Waiting {
            creates: p.in_flight + p.creates.len() + p.strays.len(),
            unanswered: p.in_flight,
            deletes: p.deletes.len(),
            waited: p
                .waiting_since
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since)),
            log: false,
        };
        if p.is_empty() || expired {
            let timed_out = expired && !p.is_empty();
            state.remove(owner);
            self.publish(&state);
            if !timed_out {
                return Check::Satisfied;
            }
            if let Some(report) = self.report.get() {
                report.timeouts.inc();
            }
            return Check::TimedOut(waiting);
        }
        if p.waiting_since.is_none() {
            p.waiting_since = Some(now);
            state.waiting += 1;
            self.publish(&state);
            return Check::Waiting(waiting);
        }
        let Some(p) = state.owners.get_mut(owner) else {
            return Check::Waiting(waiting);
        };
        waiting.log = waiting.waited >= LOG_WAITS_AFTER
            && p.logged
                .is_none_or(|at| now.saturating_duration_since(at) >= LOG_WAITS_EVERY);
        if waiting.log {
            p.logged = Some(now);
        }
        Check::Waiting(waiting)
    }

    /// Pending (creates, deletes) of `owner`, for logs.
    pub fn pending(&self, owner: &str) -> (usize, usize) {
        let state = self.lock();
        state
            .owners
            .get(owner)
            .map(|p| (p.in_flight + p.creates.len(), p.deletes.len()))
            .unwrap_or((0, 0))
    }

    /// Forgets `owner` (the Jinghzhu is gone).
    pub fn forget(&self, owner: &str) {
        let mut state = self.lock();
        state.remove(owner);
        self.publish(&state);
    }

    /// Keeps only the owners (uids) `keep` answers true for (the others
    /// are gone).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut state = self.lock();
        let gone: Vec<String> = state
            .owners
            .keys()
            .filter(|owner| !keep(owner))
            .cloned()
            .collect();
        for owner in gone {
            state.remove(&owner);
        }
        self.publish(&state);
    }

    /// How many Jinghzhus have pending entries (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().owners.len()
    }

    /// True when nothing is pending for any Jinghzhu.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many Jinghzhus have a reconcile held back by their expectations.
    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stray_holds_its_owner_until_the_cache_shows_it_again_or_it_is_settled() {
        let expectations = Expectations::new(Duration::from_secs(300));
        expectations.stray("owner", "pod-1", "web-a", Duration::from_secs(30));
        assert!(!expectations.satisfied("owner", |_| None));
        assert_eq!(
            expectations.take_strays("owner"),
            vec![("pod-1".to_string(), "web-a".to_string())]
        );
        assert!(expectations.take_strays("owner").is_empty(), "once");
        assert!(!expectations.satisfied("owner", |_| None));
        assert!(expectations.satisfied("owner", |uid| (uid == "pod-1").then_some(false)));
        expectations.stray("owner", "pod-2", "web-b", Duration::from_secs(30));
        expectations.stray_settled("owner", "pod-2");
        assert!(expectations.satisfied("owner", |_| None));
        expectations.stray("owner", "pod-3", "web-c", Duration::ZERO);
        assert!(
            expectations.satisfied("owner", |_| None),
            "held no longer than asked"
        );
    }

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
        // The watch then shows the pod the API server did commit; a
        // reconcile whose snapshot was read before that still waits.
        e.observe_added("k", "u9");
        assert!(!e.satisfied("k", |_| None), "a stale snapshot must wait");
        assert!(e.satisfied("k", |uid| (uid == "u9").then_some(false)));
    }

    #[test]
    fn a_maybe_sent_create_a_read_does_not_find_is_released() {
        let e = fresh();
        e.expect_creations("k", 3);
        e.created("k", "u1");
        e.maybe_sent("k");
        e.maybe_sent("k");
        assert_eq!(e.unknown_outcomes("k"), 2);
        assert!(
            !e.satisfied("k", |uid| (uid == "u1").then_some(false)),
            "until settled, the maybe-sent creates still count"
        );
        // The API server has only u1 (answered, in the snapshot): neither
        // maybe-sent create was made.
        assert_eq!(e.settle_by_read("k", [("u1", false)], |uid| uid == "u1"), 2);
        assert_eq!(e.unknown_outcomes("k"), 0);
        assert!(e.satisfied("k", |uid| (uid == "u1").then_some(false)));
        assert!(e.is_empty());
    }

    #[test]
    fn a_maybe_sent_create_a_read_finds_waits_for_the_watch() {
        let e = fresh();
        e.expect_creations("k", 2);
        e.maybe_sent("k");
        e.maybe_sent("k");
        // The API server has u0 (cached before), and u7 that nothing here
        // explains: one of the two was made.
        assert_eq!(
            e.settle_by_read("k", [("u0", false), ("u7", false)], |uid| uid == "u0"),
            1
        );
        assert_eq!(e.pending("k"), (1, 0), "the one that was made still counts");
        assert!(!e.satisfied("k", |uid| (uid == "u0").then_some(false)));
        // The watch shows it; a snapshot with it satisfies.
        e.observe_added("k", "u7");
        assert_eq!(e.unknown_outcomes("k"), 0);
        assert!(e.satisfied("k", |_| Some(false)));
    }

    #[test]
    fn a_maybe_sent_create_the_watch_shows_is_not_released_twice() {
        let e = fresh();
        e.expect_creations("k", 2);
        e.maybe_sent("k");
        e.maybe_sent("k");
        // One of the two was made: the watch shows it.
        e.observe_added("k", "u1");
        assert_eq!(
            e.pending("k"),
            (2, 0),
            "one in flight, one to see in a snapshot"
        );
        // A read then lists it: the other one was not made.
        assert_eq!(e.settle_by_read("k", [("u1", false)], |_| false), 1);
        assert!(
            !e.satisfied("k", |_| None),
            "the read releases the unseen one, not the one the watch showed"
        );
        assert!(e.satisfied("k", |uid| (uid == "u1").then_some(false)));
        // A later, answered create of the same object counts as usual.
        e.expect_creations("k", 1);
        e.created("k", "u2");
        assert!(!e.satisfied("k", |_| None));
        assert!(e.satisfied("k", |uid| (uid == "u2").then_some(false)));
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
        assert_eq!(
            e.pending("k"),
            (1, 0),
            "counted once, until a snapshot shows it"
        );
        assert!(!e.satisfied("k", |_| None));
        assert!(e.satisfied("k", |uid| (uid == "u1").then_some(false)));
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

    /// A reconcile reads its snapshot, then the watch delivers the pod,
    /// then the reconcile checks: the snapshot does not hold the pod, so
    /// the create is still pending (released by the watch event, a three-
    /// replica run under load created the pod again).
    #[test]
    fn an_answered_create_waits_for_a_snapshot_not_for_the_watch_event() {
        let e = fresh();
        e.expect_creations("k", 2);
        e.created("k", "u1");
        e.created("k", "u2");
        let snapshot_read_before_u2 = |uid: &str| (uid == "u1").then_some(false);
        e.observe_added("k", "u1");
        e.observe_added("k", "u2");
        assert!(!e.satisfied("k", snapshot_read_before_u2));
        assert!(
            e.satisfied("k", |_| Some(false)),
            "a later snapshot shows both"
        );
    }

    /// The same for deletes: a snapshot read before the watch saw the pod go
    /// still shows it live, so the delete is still pending.
    #[test]
    fn a_delete_waits_for_a_snapshot_not_for_the_watch_event() {
        let e = fresh();
        e.expect_deleted("k", "u1");
        e.observe_gone("u1");
        assert!(
            !e.satisfied("k", |_| Some(false)),
            "the snapshot shows it live"
        );
        assert!(e.satisfied("k", |_| None));
    }

    /// A reconcile cancelled while its creates were on the wire (its shard
    /// lost): they count as maybe sent, so the next reconcile settles them
    /// by a read instead of waiting 300 s (a soak object waited so).
    #[test]
    fn creates_cancelled_in_flight_are_maybe_sent() {
        let e = fresh();
        {
            let mut in_flight = e.send_creations("k", 3);
            in_flight.answered();
            e.created("k", "u1");
        }
        assert_eq!(e.unknown_outcomes("k"), 2);
        let released = e.settle_by_read("k", [("u1", false)], |uid| uid == "u1");
        assert_eq!(released, 2, "the read shows neither: both released");
        assert!(e.satisfied("k", |uid| (uid == "u1").then_some(false)));
    }

    #[test]
    fn deletes_cancelled_in_flight_are_settled_by_a_read() {
        let e = fresh();
        let live = |uid: &str| (uid == "p1" || uid == "p2").then_some(false);
        // Cancelled with both deletes on the wire: both awaited, unknown.
        drop(e.send_deletion("k", "p1"));
        drop(e.send_deletion("k", "p2"));
        assert_eq!(e.unknown_outcomes("k"), 2);
        assert!(!e.satisfied("k", live), "a cancelled delete still holds");
        // The read: p1 terminating (deleted), p2 live (never deleted).
        let released = e.settle_by_read("k", [("p1", true), ("p2", false)], |_| true);
        assert_eq!(released, 1);
        assert_eq!(e.unknown_outcomes("k"), 0);
        assert_eq!(e.pending("k"), (0, 1), "p1's delete is awaited");
        assert!(e.satisfied("k", |uid| (uid == "p2").then_some(false)));
    }

    #[test]
    fn an_answered_delete_is_awaited_and_a_failed_one_is_not() {
        let e = fresh();
        e.send_deletion("k", "p1").answered();
        e.send_deletion("k", "p2").failed();
        assert_eq!(e.unknown_outcomes("k"), 0);
        assert_eq!(e.pending("k"), (0, 1));
        assert!(!e.satisfied("k", |_| Some(false)));
        assert!(e.satisfied("k", |uid| (uid == "p2").then_some(false)));
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
        e.expect_creations("c", 1);
        e.expect_creations("d", 1);
        e.retain(|owner| owner == "d");
        assert_eq!(e.len(), 1);
        assert!(e.satisfied("c", |_| None), "c was dropped");
        assert!(!e.satisfied("d", |_| None), "d kept its expectation");
    }

    #[test]
    fn a_wait_is_counted_reported_and_released() {
        let e = fresh();
        let waiting = Gauge::default();
        let timeouts = Counter::default();
        e.report_to(&waiting, &timeouts);
        e.expect_creations("k", 2);
        e.created("k", "u1");
        let Check::Waiting(w) = e.check("k", |_| None) else {
            panic!("two creates pending");
        };
        assert_eq!((w.creates, w.unanswered, w.deletes), (2, 1, 0));
        assert!(!w.log, "a fresh wait is not worth an info line");
        assert_eq!((e.waiting(), waiting.get()), (1, 1));
        // Held back again: still one object waiting.
        assert!(matches!(e.check("k", |_| None), Check::Waiting(_)));
        assert_eq!(waiting.get(), 1);
        // The refused create and the pod in the cache release it.
        e.creation_failed("k");
        assert_eq!(e.check("k", |_| Some(false)), Check::Satisfied);
        assert_eq!((e.waiting(), waiting.get(), timeouts.get()), (0, 0, 0));
        // A forgotten object stops waiting too.
        e.expect_deleted("j", "u2");
        assert!(!e.satisfied("j", |_| Some(false)));
        assert_eq!(waiting.get(), 1);
        e.forget("j");
        assert_eq!(waiting.get(), 0);
    }

    #[test]
    fn a_long_wait_is_logged_then_rate_limited_and_a_timeout_counted() {
        let e = Expectations::new(Duration::from_millis(300));
        let waiting = Gauge::default();
        let timeouts = Counter::default();
        e.report_to(&waiting, &timeouts);
        e.expect_creations("k", 1);
        assert!(matches!(e.check("k", |_| None), Check::Waiting(_)));
        // Pretend the wait began long ago.
        e.lock().owners.get_mut("k").expect("pending").waiting_since =
            Some(Instant::now() - LOG_WAITS_AFTER);
        let Check::Waiting(w) = e.check("k", |_| None) else {
            panic!("still waiting");
        };
        assert!(w.log && w.waited >= LOG_WAITS_AFTER, "{w:?}");
        let Check::Waiting(w) = e.check("k", |_| None) else {
            panic!("still waiting");
        };
        assert!(!w.log, "logged once per {LOG_WAITS_EVERY:?}");
        std::thread::sleep(Duration::from_millis(350));
        let Check::TimedOut(w) = e.check("k", |_| None) else {
            panic!("timed out");
        };
        assert_eq!(w.unanswered, 1);
        assert_eq!((timeouts.get(), waiting.get()), (1, 0));
        assert_eq!(e.check("k", |_| None), Check::Satisfied);
    }
}
