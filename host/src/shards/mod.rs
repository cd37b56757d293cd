//! Sharding (`--shards N`): the objects are split into `N` virtual shards,
//! each with its own `coordination.k8s.io/v1` Lease; every replica holds
//! the Leases of a fair share of the shards and caches and reconciles only
//! their objects. With `--shards 0` (the default) there is no sharding and
//! [`crate::leader`]'s single Lease decides which replica reconciles
//! everything (or, without `--leader-elect`, the one host does).
//!
//! What it may import: [`crate::leader`] (the Lease timing rules and
//! helpers it reuses), `telemetry/` and the shared types. The controller
//! asks it which shards it may reconcile; it never calls back up.
//!
//! - [`hash`]: the shard of an object (FNV-1a 64 of its UID, mod N), the
//!   label, Lease names and selectors.
//! - [`assign`]: which replica should hold which shard (fair, stable).
//! - [`ghosts`]: which live members are left out of the assignment (they
//!   never take the shards they are given).
//! - [`coordinator`]: the loop on the Leases: membership, acquiring,
//!   renewing, draining and releasing shards.
//! - [`labeller`]: writes the shard label on Jinghzhus and on pods that lack
//!   it (new objects, pods of an unsharded host before an upgrade).
//! - [`metrics`]: the per-shard metrics.
//!
//! # A shard's life on one replica
//!
//! `acquired` (its Lease is ours) → [`Phase::Syncing`]: the controller
//! restarts its label-selected watches to include the shard, with a quorum
//! list taken after the acquisition, and once both caches show that list it
//! marks the shard [`Phase::Active`] ([`Shards::mark_active`]) and re-queues
//! everything. Only then may reconciles of the shard start
//! ([`Shards::enter`]). When the assignment gives the shard to another
//! replica (or this one stops), it turns [`Phase::Draining`]: no reconcile
//! starts, the running ones finish (each holds a [`ShardGuard`]), and only
//! then is the Lease released (`holderIdentity: ""`), so the next holder may
//! take it at once. A shard whose Lease cannot be renewed within the renew
//! deadline is dropped at once and its running reconciles are cancelled
//! ([`ShardGuard::lost`]); another replica takes it only after seeing the
//! Lease unchanged for the lease duration, the argument of
//! [`crate::leader`] shard by shard. Every write a reconcile sends for the
//! shard also passes the write fence ([`crate::apply::fence`]), which
//! reads the hold's validity ([`ShardHold::valid_until`]) right before the
//! write, so a replica resumed after a stop past the renew deadline sends
//! nothing more for the shard even before the coordinator has noticed.

pub mod assign;
pub mod coordinator;
pub mod ghosts;
pub mod hash;
pub mod labeller;
pub mod metrics;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::locks::MutexExt;
use tokio::sync::watch;
use tokio::time::Instant;

pub use coordinator::{Coordinator, ShardConfig};
pub use metrics::ShardMetrics;

/// Where a held shard is in its life (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// The Lease is ours; the caches are being filled for it.
    Syncing,
    /// Reconciles of the shard run here.
    Active,
    /// Handing over: no new reconciles; the Lease is released once the
    /// running ones finish.
    Draining,
}

impl Phase {
    /// Lower-case name (metrics, logs).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Syncing => "syncing",
            Phase::Active => "active",
            Phase::Draining => "draining",
        }
    }
}

#[derive(Debug, Clone)]
struct Held {
    phase: Phase,
    /// Acquisition number (a new one each time the shard is taken).
    term: u64,
    acquired_at: Instant,
    /// When the hold ends unless renewed.
    valid_until: Instant,
    /// Reconciles of the shard running now.
    inflight: usize,
    drain_started: Option<Instant>,
    /// The hold was ended early: running reconciles are cancelled, renewals
    /// no longer extend it.
    cut: bool,
}

/// A held shard as shown on `/status`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldShard {
    /// Shard number.
    pub shard: u32,
    /// Its phase here.
    pub phase: Phase,
    /// Its Lease (`namespace/name`).
    pub lease: String,
    /// Reconciles of it running now.
    pub inflight: usize,
}

struct Inner {
    count: u32,
    identity: String,
    namespace: String,
    lease_prefix: String,
    held: Mutex<BTreeMap<u32, Held>>,
    /// Bumped on every change of the held shards or their phases.
    changed: watch::Sender<u64>,
    /// Bumped each time a shard turns active.
    activated: watch::Sender<u64>,
    members: Mutex<Vec<String>>,
    next_term: std::sync::atomic::AtomicU64,
    metrics: ShardMetrics,
}

/// This replica's view of its shards; cheap to clone.
#[derive(Clone)]
pub struct Shards(Arc<Inner>);

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards")
            .field("count", &self.0.count)
            .field("identity", &self.0.identity)
            .finish_non_exhaustive()
    }
}

impl Shards {
    /// No shard held yet.
    pub fn new(count: u32, identity: &str, namespace: &str, lease_prefix: &str) -> Self {
        Self(Arc::new(Inner {
            count,
            identity: identity.to_string(),
            namespace: namespace.to_string(),
            lease_prefix: lease_prefix.to_string(),
            held: Mutex::new(BTreeMap::new()),
            changed: watch::Sender::new(0),
            activated: watch::Sender::new(0),
            members: Mutex::new(Vec::new()),
            next_term: std::sync::atomic::AtomicU64::new(1),
            metrics: ShardMetrics::default(),
        }))
    }

    /// The number of shards.
    pub fn count(&self) -> u32 {
        self.0.count
    }

    /// This replica's identity in the Leases.
    pub fn identity(&self) -> &str {
        &self.0.identity
    }

    /// The shard metrics.
    pub fn metrics(&self) -> &ShardMetrics {
        &self.0.metrics
    }

    /// The shard of the object with this UID.
    pub fn shard_of(&self, uid: &str) -> u32 {
        hash::shard_of(uid, self.0.count)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Held>> {
        self.0.held.lock_unpoisoned()
    }

    fn bump(&self) {
        self.0.changed.send_modify(|n| *n += 1);
        let held = self.lock();
        let active = held.values().filter(|h| h.phase == Phase::Active).count();
        self.0.metrics.owned.set(active as i64);
        for shard in 0..self.0.count {
            for phase in [Phase::Syncing, Phase::Active, Phase::Draining] {
                let on = held.get(&shard).is_some_and(|h| h.phase == phase);
                let labels = metrics::ShardPhaseLabels {
                    shard: shard.to_string(),
                    phase: phase.name().to_string(),
                };
                if on {
                    self.0.metrics.phase.get_or_create(&labels).set(1);
                } else {
                    self.0.metrics.phase.remove(&labels);
                }
            }
        }
    }

    /// Subscribes to changes of the held shards (the value counts changes).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.changed.subscribe()
    }

    /// Yields once each time a shard turns active (the controller re-queues
    /// every object then).
    pub fn activations(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        let rx = self.0.activated.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            rx.borrow_and_update();
            Some(((), rx))
        })
    }

    /// Held shards (any phase) with their phase and acquisition term.
    pub fn held(&self) -> BTreeMap<u32, (Phase, u64, Instant)> {
        self.lock()
            .iter()
            .map(|(s, h)| (*s, (h.phase, h.term, h.acquired_at)))
            .collect()
    }

    /// The members the assignment was last computed over (live
    /// membership Leases, ghosts left out; this replica included).
    pub fn members(&self) -> Vec<String> {
        self.0.members.lock_unpoisoned().clone()
    }

    /// Whether this replica holds `shard` (any phase).
    pub fn holds(&self, shard: u32) -> bool {
        self.lock().contains_key(&shard)
    }

    /// Active shards.
    pub fn active(&self) -> Vec<u32> {
        self.lock()
            .iter()
            .filter(|(_, h)| h.phase == Phase::Active)
            .map(|(s, _)| *s)
            .collect()
    }

    /// What `/status` shows.
    pub fn status(&self) -> (Vec<HeldShard>, Vec<String>) {
        let shards = self
            .lock()
            .iter()
            .map(|(s, h)| HeldShard {
                shard: *s,
                phase: h.phase,
                lease: format!(
                    "{}/{}",
                    self.0.namespace,
                    hash::shard_lease_name(&self.0.lease_prefix, *s)
                ),
                inflight: h.inflight,
            })
            .collect();
        let members = self.0.members.lock_unpoisoned().clone();
        (shards, members)
    }

    /// Whether `shard` is active here even if its hold lapsed for a moment
    /// (a renewal that came back late): a reconcile refused or cancelled
    /// for that is retried shortly, as no other replica can have it.
    pub fn is_active_here(&self, shard: u32) -> bool {
        self.lock()
            .get(&shard)
            .is_some_and(|h| h.phase == Phase::Active && !h.cut)
    }

    /// The hold of `shard` (any phase, whichever acquisition is current),
    /// for a write made on its behalf outside a reconcile (the shard label
    /// fix); its validity is `None` while the shard is not held here.
    pub fn hold_of(&self, shard: u32) -> ShardHold {
        ShardHold {
            shards: self.clone(),
            shard,
            term: None,
        }
    }

    /// Starts a reconcile of an object of `shard`, if the shard is active
    /// here; the guard keeps the shard from being handed over until it drops.
    pub fn enter(&self, shard: u32) -> Option<ShardGuard> {
        let mut held = self.lock();
        let h = held.get_mut(&shard)?;
        if h.phase != Phase::Active || h.cut || Instant::now() >= h.valid_until {
            return None;
        }
        h.inflight += 1;
        Some(ShardGuard {
            shards: self.clone(),
            shard,
            term: h.term,
        })
    }

    /// The controller's caches show the shard (acquired as `term`): it may
    /// be reconciled now.
    pub fn mark_active(&self, shard: u32, term: u64) -> bool {
        let done = {
            let mut held = self.lock();
            match held.get_mut(&shard) {
                Some(h) if h.term == term && h.phase == Phase::Syncing => {
                    h.phase = Phase::Active;
                    let waited = h.acquired_at.elapsed();
                    tracing::info!(
                        shard,
                        waited_ms = waited.as_millis() as u64,
                        "shard active: caches synced; reconciling its objects"
                    );
                    true
                }
                _ => false,
            }
        };
        if done {
            self.bump();
            self.0.activated.send_modify(|n| *n += 1);
        }
        done
    }

    /// Marks `shard` held until `valid_until`, as the coordinator does on
    /// taking its Lease (for the tests of rooms that gate on a hold).
    #[cfg(test)]
    pub(crate) fn hold_for_test(&self, shard: u32, valid_until: Instant) {
        self.acquired(shard, valid_until);
    }

    // --- for the coordinator ---

    fn set_members(&self, members: Vec<String>) {
        self.0.metrics.members.set(members.len() as i64);
        *self.0.members.lock_unpoisoned() = members;
    }

    fn acquired(&self, shard: u32, valid_until: Instant) {
        let term = self
            .0
            .next_term
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().insert(
            shard,
            Held {
                phase: Phase::Syncing,
                term,
                acquired_at: Instant::now(),
                valid_until,
                inflight: 0,
                drain_started: None,
                cut: false,
            },
        );
        self.0.metrics.handover("acquired");
        self.bump();
    }

    fn renewed(&self, shard: u32, valid_until: Instant) {
        if let Some(h) = self.lock().get_mut(&shard)
            && !h.cut
        {
            h.valid_until = h.valid_until.max(valid_until);
        }
    }

    fn phase(&self, shard: u32) -> Option<Phase> {
        self.lock().get(&shard).map(|h| h.phase)
    }

    /// Starts draining; returns how long it has been draining.
    fn drain(&self, shard: u32) -> Option<(Duration, usize)> {
        let (since, inflight, changed) = {
            let mut held = self.lock();
            let h = held.get_mut(&shard)?;
            let changed = h.phase != Phase::Draining;
            h.phase = Phase::Draining;
            let started = *h.drain_started.get_or_insert_with(Instant::now);
            (started.elapsed(), h.inflight, changed)
        };
        if changed {
            tracing::info!(
                shard,
                inflight,
                "shard draining: no new reconciles; handing over once the running ones finish"
            );
            self.bump();
        }
        Some((since, inflight))
    }

    /// Ends the hold now: running reconciles of the shard are cancelled.
    fn cut(&self, shard: u32) {
        if let Some(h) = self.lock().get_mut(&shard) {
            h.cut = true;
            h.valid_until = Instant::now();
        }
        self.bump();
    }

    fn remove(&self, shard: u32, direction: &str) {
        if self.lock().remove(&shard).is_some() {
            self.0.metrics.handover(direction);
            self.0.metrics.objects.remove(&metrics::ShardLabels {
                shard: shard.to_string(),
            });
            self.bump();
        }
    }
}

/// A running reconcile of an object of one shard.
pub struct ShardGuard {
    shards: Shards,
    shard: u32,
    term: u64,
}

impl ShardGuard {
    /// The shard.
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// A handle that says, whenever asked, until when this hold is valid
    /// (for the write fence).
    pub fn hold(&self) -> ShardHold {
        ShardHold {
            shards: self.shards.clone(),
            shard: self.shard,
            term: Some(self.term),
        }
    }

    /// Resolves when this replica's hold on the shard ends (Lease lost, not
    /// renewed within the renew deadline, or cut after a drain timed out).
    /// A draining shard's running reconciles go on.
    pub async fn lost(&self) {
        let mut changes = self.shards.subscribe();
        loop {
            let until = {
                let held = self.shards.lock();
                match held.get(&self.shard) {
                    Some(h) if h.term == self.term && !h.cut => h.valid_until,
                    _ => return,
                }
            };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return; },
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }
}

/// One hold of a shard, read at each write (see [`ShardGuard::hold`] and
/// [`Shards::hold_of`]).
#[derive(Clone)]
pub struct ShardHold {
    shards: Shards,
    shard: u32,
    /// The acquisition it belongs to (`None`: whichever is current).
    term: Option<u64>,
}

impl ShardHold {
    /// The shard.
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// When the hold runs out unless renewed (from when its last
    /// successful renewal was sent); `None` once it ended (lost, released,
    /// cut, or taken again as a new acquisition). A draining shard is still
    /// held: its running reconciles finish before the Lease is released.
    pub fn valid_until(&self) -> Option<Instant> {
        let held = self.shards.lock();
        let h = held.get(&self.shard)?;
        (self.term.is_none_or(|term| term == h.term) && !h.cut).then_some(h.valid_until)
    }

    /// Whether the hold is valid now on this host's monotonic clock: the
    /// check a write for the shard passes right before it is sent.
    pub fn valid_now(&self) -> bool {
        self.valid_until()
            .is_some_and(|until| Instant::now() < until)
    }
}

impl Drop for ShardGuard {
    fn drop(&mut self) {
        let mut held = self.shards.lock();
        if let Some(h) = held.get_mut(&self.shard)
            && h.term == self.term
        {
            h.inflight = h.inflight.saturating_sub(1);
        }
        drop(held);
        // Wake a coordinator waiting for the drain.
        self.shards.0.changed.send_modify(|n| *n += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_shard_is_entered_only_while_active_and_drains_before_release() {
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        let far = Instant::now() + Duration::from_secs(60);
        assert!(shards.enter(1).is_none(), "not held");
        shards.acquired(1, far);
        assert!(shards.enter(1).is_none(), "syncing: caches not filled yet");
        let (_, term, _) = shards.held()[&1];
        assert!(shards.mark_active(1, term));
        let guard = shards.enter(1).expect("active");
        assert_eq!(shards.drain(1).map(|(_, n)| n), Some(1));
        assert!(shards.enter(1).is_none(), "draining: nothing new starts");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), guard.lost())
                .await
                .is_err(),
            "a draining shard lets its running reconciles finish"
        );
        drop(guard);
        assert_eq!(shards.drain(1).map(|(_, n)| n), Some(0));
        shards.remove(1, "released");
        assert!(shards.held().is_empty());
        assert_eq!(shards.metrics().handovers_of("released"), 1);
    }

    #[tokio::test]
    async fn a_cut_or_expired_hold_cancels_running_reconciles() {
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        shards.acquired(2, Instant::now() + Duration::from_millis(100));
        let (_, term, _) = shards.held()[&2];
        shards.mark_active(2, term);
        let guard = shards.enter(2).expect("active");
        tokio::time::timeout(Duration::from_secs(2), guard.lost())
            .await
            .expect("the hold ends at its deadline");
        assert!(shards.enter(2).is_none());

        shards.acquired(3, Instant::now() + Duration::from_secs(60));
        let (_, term, _) = shards.held()[&3];
        shards.mark_active(3, term);
        let guard = shards.enter(3).expect("active");
        let waiter = tokio::spawn(async move { guard.lost().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        shards.cut(3);
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("cut cancels")
            .expect("task");
    }

    #[tokio::test]
    async fn a_shard_hold_follows_renewals_and_ends_with_the_acquisition() {
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        let first = Instant::now() + Duration::from_secs(10);
        shards.acquired(1, first);
        let (_, term, _) = shards.held()[&1];
        shards.mark_active(1, term);
        let hold = shards.enter(1).expect("active").hold();
        assert_eq!(hold.valid_until(), Some(first));
        shards.renewed(1, first + Duration::from_secs(3));
        assert_eq!(hold.valid_until(), Some(first + Duration::from_secs(3)));
        shards.drain(1);
        assert!(hold.valid_until().is_some(), "draining is still held");
        shards.cut(1);
        assert_eq!(hold.valid_until(), None, "cut");
        shards.remove(1, "lost");
        shards.acquired(1, first);
        assert_eq!(
            hold.valid_until(),
            None,
            "a new acquisition is another hold"
        );
        assert_eq!(shards.hold_of(1).valid_until(), Some(first));
        assert_eq!(shards.hold_of(2).valid_until(), None, "not held");
    }

    #[tokio::test]
    async fn a_hold_is_valid_now_only_before_its_deadline_and_until_it_ends() {
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        assert!(!shards.hold_of(0).valid_now(), "not held");
        shards.acquired(0, Instant::now() + Duration::from_millis(40));
        let hold = shards.hold_of(0);
        assert!(hold.valid_now(), "held, even while syncing");
        // A stop of the process past the deadline: nothing ran meanwhile.
        std::thread::sleep(Duration::from_millis(60));
        assert!(!hold.valid_now(), "ran out on this host's clock");
        assert!(
            shards.holds(0),
            "still listed as held until the coordinator notices"
        );
        // A renewal that comes back (nobody took the Lease) makes it valid again.
        shards.renewed(0, Instant::now() + Duration::from_secs(5));
        assert!(hold.valid_now());
        shards.cut(0);
        assert!(!hold.valid_now(), "cut");
    }

    #[test]
    fn a_reacquired_shard_needs_a_new_sync() {
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        let far = Instant::now() + Duration::from_secs(60);
        shards.acquired(0, far);
        let (_, old, _) = shards.held()[&0];
        shards.remove(0, "lost");
        shards.acquired(0, far);
        assert!(
            !shards.mark_active(0, old),
            "a sync of the old term does not count"
        );
        let (_, new, _) = shards.held()[&0];
        assert!(shards.mark_active(0, new));
    }
}
