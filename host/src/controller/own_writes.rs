//! The host's own status writes that the watch has not shown yet: their
//! echo queues nothing, and they are not sent twice.
//!
//! Every `/status` patch comes back as a watch event. Reconciling on it
//! would do nothing new (the host wrote exactly that), but it costs a
//! plugin call, and a plugin whose status changes on every call would feed
//! itself: write → event → reconcile → write. And a reconcile that starts
//! (on a pod event) before the echo has reached the cache compares against
//! the old status and would send the same patch again.
//!
//! So before each status patch the host records the status it sends, per
//! Jinghzhu UID ([`OwnWrites::sending`]). The first watch event whose status
//! is exactly that one is the echo ([`OwnWrites::is_echo`]): it updates the
//! cache, queues nothing and ends the record. Until then a reconcile that
//! would write the same status again skips it ([`OwnWrites::in_flight`]).
//! Any other change (spec, labels, a pod, another writer's status) is its
//! own watch event and queues the object as before.
//!
//! A record ends with its echo, a failed patch ([`OwnWrites::failed`]), a
//! newer write, the object's deletion, a re-list of the watch (which may
//! skip versions; [`OwnWrites::clear`]) or after [`RECORD_TTL`], so a lost
//! echo can never hold back a write for long.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::crd::{Jinghzhu, JinghzhuStatus};

/// How long a status write is trusted to be on its way without the watch
/// showing it.
pub const RECORD_TTL: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Sent {
    status: JinghzhuStatus,
    at: Instant,
}

/// The latest status each Jinghzhu was sent whose echo has not been seen,
/// by UID.
#[derive(Debug, Default)]
pub struct OwnWrites {
    sent: Mutex<HashMap<String, Sent>>,
}

impl OwnWrites {
    /// Records that `status` is being sent to the Jinghzhu `uid` (call it
    /// before the patch, so an echo that beats the response is recognised).
    pub fn sending(&self, uid: &str, status: &JinghzhuStatus) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.insert(
                uid.to_string(),
                Sent {
                    status: status.clone(),
                    at: Instant::now(),
                },
            );
        }
    }

    /// The patch for `uid` failed: nothing is on its way.
    pub fn failed(&self, uid: &str) {
        self.forget(uid);
    }

    /// True when `jz` carries exactly the status last sent to it and not
    /// seen since (its echo); the record ends.
    pub fn is_echo(&self, jz: &Jinghzhu) -> bool {
        let (Some(uid), Some(status)) = (jz.uid(), jz.status.as_ref()) else {
            return false;
        };
        let Ok(mut sent) = self.sent.lock() else {
            return false;
        };
        if sent.get(&uid).is_some_and(|s| &s.status == status) {
            sent.remove(&uid);
            true
        } else {
            false
        }
    }

    /// True when `status` is what was last sent to `uid`, less than
    /// [`RECORD_TTL`] ago, and the watch has not shown it yet: sending it
    /// again would change nothing.
    pub fn in_flight(&self, uid: &str, status: &JinghzhuStatus) -> bool {
        self.sent.lock().is_ok_and(|sent| {
            sent.get(uid)
                .is_some_and(|s| &s.status == status && s.at.elapsed() < RECORD_TTL)
        })
    }

    /// Drops what is kept for the Jinghzhu `uid`.
    pub fn forget(&self, uid: &str) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.remove(uid);
        }
    }

    /// Drops every record (the watch re-lists and may skip echoes).
    pub fn clear(&self) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.clear();
        }
    }

    /// How many writes wait for their echo.
    pub fn len(&self) -> usize {
        self.sent.lock().map_or(0, |s| s.len())
    }

    /// True when no write waits for its echo.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::JinghzhuSpec;

    fn status(state: &str) -> JinghzhuStatus {
        JinghzhuStatus {
            current: 1,
            state: state.into(),
            ..JinghzhuStatus::default()
        }
    }

    fn seen(uid: &str, status: Option<JinghzhuStatus>) -> Jinghzhu {
        let mut jz = Jinghzhu::new(
            "web",
            JinghzhuSpec {
                desired: 1,
                template: None,
            },
        );
        jz.metadata.uid = Some(uid.into());
        jz.status = status;
        jz
    }

    #[test]
    fn the_echo_of_a_sent_status_queues_nothing_once() {
        let writes = OwnWrites::default();
        writes.sending("u1", &status("Running"));
        // Versions before ours (another status, none yet) and other objects queue.
        assert!(!writes.is_echo(&seen("u1", Some(status("Pending")))));
        assert!(!writes.is_echo(&seen("u1", None)));
        assert!(!writes.is_echo(&seen("u2", Some(status("Running")))));
        assert!(writes.in_flight("u1", &status("Running")));
        assert!(writes.is_echo(&seen("u1", Some(status("Running")))));
        // Seen: a later event with the same status (a spec change) queues,
        // and the status is no longer in flight.
        assert!(!writes.is_echo(&seen("u1", Some(status("Running")))));
        assert!(!writes.in_flight("u1", &status("Running")));
        assert!(writes.is_empty());
    }

    #[test]
    fn only_the_latest_sent_status_is_in_flight() {
        let writes = OwnWrites::default();
        writes.sending("u1", &status("Pending"));
        writes.sending("u1", &status("Running"));
        assert!(!writes.in_flight("u1", &status("Pending")));
        assert!(writes.in_flight("u1", &status("Running")));
        // The first write's echo is not the latest's.
        assert!(!writes.is_echo(&seen("u1", Some(status("Pending")))));
        assert!(writes.in_flight("u1", &status("Running")));
    }

    #[test]
    fn failures_deletions_and_relists_end_the_record() {
        let writes = OwnWrites::default();
        writes.sending("u1", &status("Running"));
        writes.failed("u1");
        assert!(!writes.in_flight("u1", &status("Running")));
        writes.sending("u1", &status("Running"));
        writes.forget("u1");
        assert!(!writes.is_echo(&seen("u1", Some(status("Running")))));
        writes.sending("u1", &status("Running"));
        writes.sending("u2", &status("Running"));
        writes.clear();
        assert_eq!(writes.len(), 0);
    }
}
