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
//! So each status patch is sent with the resourceVersion the reconcile read
//! as a precondition (a stale cache gets a conflict, not a blind overwrite),
//! and the host records the status it wrote and the resourceVersion the API
//! server gave the object ([`OwnWrites::wrote`]). The watch event with that
//! resourceVersion is the echo ([`OwnWrites::is_echo`]): it updates the
//! cache, queues nothing and ends the record. Until then a reconcile that
//! would write the same status again skips it ([`OwnWrites::in_flight`]).
//! Any other change (spec, labels, a pod, another writer's status) is its
//! own watch event, with its own resourceVersion, and queues the object as
//! before. A patch that changed nothing leaves the resourceVersion as it was
//! and makes no event, so it is not recorded.
//!
//! A record ends with its echo, a newer write, the object's deletion, a
//! re-list of the watch (which may skip versions; [`OwnWrites::clear`]) or
//! after [`RECORD_TTL`], so a lost echo can never hold back a write for long.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::crd::{Jinghzhu, JinghzhuStatus};

/// How long a status write is trusted to be on its way without the watch
/// showing it.
pub const RECORD_TTL: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Written {
    status: JinghzhuStatus,
    resource_version: String,
    at: Instant,
}

/// The latest status each Jinghzhu was given whose echo has not been seen,
/// by UID.
#[derive(Debug, Default)]
pub struct OwnWrites {
    written: Mutex<HashMap<String, Written>>,
}

impl OwnWrites {
    /// Records that the host wrote `status` to the Jinghzhu `uid`, which
    /// left it at `resource_version`.
    pub fn wrote(&self, uid: &str, status: &JinghzhuStatus, resource_version: String) {
        if let Ok(mut written) = self.written.lock() {
            written.insert(
                uid.to_string(),
                Written {
                    status: status.clone(),
                    resource_version,
                    at: Instant::now(),
                },
            );
        }
    }

    /// True when `jz` is exactly the version the host's last status write
    /// produced (its echo); the record ends.
    pub fn is_echo(&self, jz: &Jinghzhu) -> bool {
        let (Some(uid), Some(version)) = (jz.uid(), jz.resource_version()) else {
            return false;
        };
        let Ok(mut written) = self.written.lock() else {
            return false;
        };
        if written
            .get(&uid)
            .is_some_and(|w| w.resource_version == version)
        {
            written.remove(&uid);
            true
        } else {
            false
        }
    }

    /// True when `status` is what was last written to `uid`, less than
    /// [`RECORD_TTL`] ago, and the watch has not shown it yet: writing it
    /// again would change nothing.
    pub fn in_flight(&self, uid: &str, status: &JinghzhuStatus) -> bool {
        self.written.lock().is_ok_and(|written| {
            written
                .get(uid)
                .is_some_and(|w| &w.status == status && w.at.elapsed() < RECORD_TTL)
        })
    }

    /// Drops what is kept for the Jinghzhu `uid`.
    pub fn forget(&self, uid: &str) {
        if let Ok(mut written) = self.written.lock() {
            written.remove(uid);
        }
    }

    /// Drops every record (the watch re-lists and may skip echoes).
    pub fn clear(&self) {
        if let Ok(mut written) = self.written.lock() {
            written.clear();
        }
    }

    /// How many writes wait for their echo.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.written.lock().map_or(0, |w| w.len())
    }

    /// True when no write waits for its echo.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: &str) -> JinghzhuStatus {
        JinghzhuStatus {
            current: 1,
            state: state.into(),
            ..JinghzhuStatus::default()
        }
    }

    fn seen(uid: &str, version: &str, status: Option<JinghzhuStatus>) -> Jinghzhu {
        let mut jz = wasm_operator_testkit::jinghzhu("web")
            .desired(1)
            .uid(uid)
            .resource_version(version)
            .build();
        jz.status = status;
        jz
    }

    #[test]
    fn only_the_version_our_write_produced_is_an_echo() {
        let writes = OwnWrites::default();
        writes.wrote("u1", &status("Running"), "12".into());
        // Versions before or after ours queue, even with the same status
        // (a spec edit carries the status as it is).
        assert!(!writes.is_echo(&seen("u1", "11", Some(status("Pending")))));
        assert!(!writes.is_echo(&seen("u1", "13", Some(status("Running")))));
        assert!(!writes.is_echo(&seen("u2", "12", Some(status("Running")))));
        assert!(writes.in_flight("u1", &status("Running")));
        assert!(!writes.in_flight("u1", &status("Pending")));
        assert!(writes.is_echo(&seen("u1", "12", Some(status("Running")))));
        // Seen: the same version again (a re-list) queues, and the status
        // is no longer in flight.
        assert!(!writes.is_echo(&seen("u1", "12", Some(status("Running")))));
        assert!(!writes.in_flight("u1", &status("Running")));
        assert!(writes.is_empty());
    }

    #[test]
    fn the_latest_write_wins_and_deletions_and_relists_end_records() {
        let writes = OwnWrites::default();
        writes.wrote("u1", &status("Pending"), "12".into());
        writes.wrote("u1", &status("Running"), "14".into());
        assert!(!writes.in_flight("u1", &status("Pending")));
        assert!(!writes.is_echo(&seen("u1", "12", Some(status("Pending")))));
        writes.forget("u1");
        assert!(!writes.is_echo(&seen("u1", "14", Some(status("Running")))));
        writes.wrote("u1", &status("Running"), "15".into());
        writes.wrote("u2", &status("Running"), "16".into());
        writes.clear();
        assert_eq!(writes.len(), 0);
    }
}
