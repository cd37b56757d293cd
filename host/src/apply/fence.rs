//! The write fence: a write sent on behalf of leadership or a shard goes
//! out only while this host's own monotonic clock says the hold it acts for
//! (the leader's term, the shard's Lease) is still valid.
//!
//! It owns the check and nothing else: [`WriteFence::check`] compares
//! [`Instant::now`] with the validity its [`Hold`] reports, synchronously,
//! right before each pod create batch, pod delete, status patch and shard
//! label fix; a lapsed hold refuses the write ([`Lapsed`]) and the caller
//! ends the reconcile without sending it. The holds themselves are
//! implemented above this room (the controller adapts the leader's term
//! and a shard guard), so `apply/` knows nothing of Leases.
//!
//! Why this is needed besides the term-end timer that cancels running
//! reconciles: a process stopped (SIGSTOP, a long GC-like stall, a starved
//! CPU) past its lease and then resumed may find an API answer waiting in
//! its socket and the term-end timer due at the same time; which future
//! tokio polls first is not defined, and the reconcile could send its next
//! write before it is cancelled. The fence makes that write impossible: the
//! clock is read right before it. What it cannot cover: a write that passed
//! the check and was handed to the HTTP client an instant before the stop
//! (microseconds of CPU work between the check and the socket), and a clock
//! that stops with the process (see docs/replicas.md, "Fencing").

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// How long a hold is valid, as its owner last established it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// No expiry (no election, no shards: the only host).
    Unbounded,
    /// Valid until this instant on this host's monotonic clock.
    Until(Instant),
    /// Over: lost, released, cut, or replaced by a newer term.
    Ended,
}

/// Something a write is sent on behalf of: the leader's term or a shard's hold.
pub trait Hold: Send + Sync {
    /// What it is (`leadership` or `shard`): the metric label and the log.
    fn kind(&self) -> &'static str;
    /// Its validity now.
    fn validity(&self) -> Validity;
}

/// Why a write was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the {kind} this write was for is no longer held (lapsed {})", late(.late_by))]
pub struct Lapsed {
    /// `leadership` or `shard`.
    pub kind: &'static str,
    /// How long ago the validity ran out (`None`: the hold ended outright).
    pub late_by: Option<Duration>,
}

fn late(late_by: &Option<Duration>) -> String {
    late_by.map_or_else(|| "outright".to_string(), |d| format!("{d:?} ago"))
}

/// A fence checked before each write; cheap to clone. Without a hold
/// ([`WriteFence::open`]) every check passes and reads no clock.
#[derive(Clone, Default)]
pub struct WriteFence {
    hold: Option<Arc<dyn Hold>>,
}

impl std::fmt::Debug for WriteFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteFence")
            .field("hold", &self.hold.as_ref().map(|h| h.kind()))
            .finish()
    }
}

impl WriteFence {
    /// No hold to check: a single host without election or shards.
    pub fn open() -> Self {
        Self { hold: None }
    }

    /// Writes go out only while `hold` is valid.
    pub fn new(hold: impl Hold + 'static) -> Self {
        Self {
            hold: Some(Arc::new(hold)),
        }
    }

    /// Whether this fence has anything to check.
    pub fn is_open(&self) -> bool {
        self.hold.is_none()
    }

    /// Call right before sending a write: `Ok` while the hold is valid on
    /// this host's monotonic clock now, else why not (and the write must
    /// not be sent).
    pub fn check(&self) -> Result<(), Lapsed> {
        let Some(hold) = &self.hold else {
            return Ok(());
        };
        check_at(hold.kind(), hold.validity(), Instant::now())
    }
}

/// The check itself: `validity` judged at `now`.
fn check_at(kind: &'static str, validity: Validity, now: Instant) -> Result<(), Lapsed> {
    match validity {
        Validity::Unbounded => Ok(()),
        Validity::Until(until) if now < until => Ok(()),
        Validity::Until(until) => Err(Lapsed {
            kind,
            late_by: Some(now.saturating_duration_since(until)),
        }),
        Validity::Ended => Err(Lapsed {
            kind,
            late_by: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    struct Fixed(Mutex<Validity>);

    impl Hold for Arc<Fixed> {
        fn kind(&self) -> &'static str {
            "leadership"
        }
        fn validity(&self) -> Validity {
            *self.0.lock().expect("lock")
        }
    }

    #[test]
    fn an_open_fence_always_passes() {
        let fence = WriteFence::open();
        assert!(fence.is_open());
        assert_eq!(fence.check(), Ok(()));
        assert_eq!(WriteFence::default().check(), Ok(()));
    }

    #[test]
    fn a_hold_passes_strictly_before_its_deadline_only() {
        let now = Instant::now();
        let until = now + Duration::from_millis(10);
        assert_eq!(check_at("shard", Validity::Until(until), now), Ok(()));
        let at_deadline = check_at("shard", Validity::Until(until), until);
        assert_eq!(
            at_deadline,
            Err(Lapsed {
                kind: "shard",
                late_by: Some(Duration::ZERO)
            }),
            "the deadline itself is already too late"
        );
        let later = check_at(
            "shard",
            Validity::Until(until),
            until + Duration::from_secs(5),
        );
        assert_eq!(
            later.expect_err("lapsed").late_by,
            Some(Duration::from_secs(5))
        );
        assert_eq!(check_at("shard", Validity::Unbounded, until), Ok(()));
        assert_eq!(
            check_at("leadership", Validity::Ended, now),
            Err(Lapsed {
                kind: "leadership",
                late_by: None
            })
        );
    }

    #[test]
    fn the_fence_reads_the_hold_each_time_it_is_checked() {
        let hold = Arc::new(Fixed(Mutex::new(Validity::Until(
            Instant::now() + Duration::from_secs(60),
        ))));
        let fence = WriteFence::new(hold.clone());
        let copy = fence.clone();
        assert!(!fence.is_open());
        assert_eq!(fence.check(), Ok(()));
        // The owner renews, then the hold runs out: no write passes any more.
        *hold.0.lock().expect("lock") = Validity::Until(Instant::now());
        let lapsed = copy.check().expect_err("ran out");
        assert_eq!(lapsed.kind, "leadership");
        assert!(lapsed.to_string().contains("no longer held"), "{lapsed}");
        *hold.0.lock().expect("lock") = Validity::Ended;
        assert_eq!(copy.check().expect_err("ended").late_by, None);
    }

    #[tokio::test]
    async fn a_hold_that_runs_out_while_the_host_waits_refuses_the_next_write() {
        let hold = Arc::new(Fixed(Mutex::new(Validity::Until(
            Instant::now() + Duration::from_millis(50),
        ))));
        let fence = WriteFence::new(hold);
        assert_eq!(fence.check(), Ok(()));
        // A stop of the process looks like this to it: time passed, nothing ran.
        std::thread::sleep(Duration::from_millis(80));
        let lapsed = fence.check().expect_err("lapsed while stopped");
        assert!(lapsed.late_by.expect("a deadline") >= Duration::from_millis(30));
    }
}
