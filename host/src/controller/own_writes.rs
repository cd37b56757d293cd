//! The host's own status writes, so their echo on the watch does not queue
//! the object again.
//!
//! Every `/status` patch comes back as a watch event. Reconciling on it
//! would do nothing new (the host wrote exactly that), but it costs a plugin
//! call, and a plugin whose status changes on every call would feed itself:
//! write → event → reconcile → write. So after a status patch the host
//! remembers the resourceVersion the API server gave the object; the watch
//! event carrying that version still updates the cache but queues nothing.
//! Any other change (the spec, labels, another writer's status, a pod) has
//! a resourceVersion of its own and queues the object as before.
//!
//! One entry per Jinghzhu UID: the latest write replaces the one before,
//! the echo removes it, and [`OwnWrites::forget`] drops it with the object.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::crd::Jinghzhu;

/// The resourceVersion of each Jinghzhu's latest status write whose echo
/// has not been seen yet, by UID.
#[derive(Debug, Default)]
pub struct OwnWrites {
    pending: Mutex<HashMap<String, String>>,
}

impl OwnWrites {
    /// Remembers that the host's status write left the object `uid` at
    /// `resource_version`.
    pub fn wrote(&self, uid: &str, resource_version: String) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(uid.to_string(), resource_version);
        }
    }

    /// True when `jz` is exactly the version the host's last status write
    /// produced (its echo); the entry is used up.
    pub fn is_echo(&self, jz: &Jinghzhu) -> bool {
        let (Some(uid), Some(version)) = (jz.uid(), jz.resource_version()) else {
            return false;
        };
        let Ok(mut pending) = self.pending.lock() else {
            return false;
        };
        if pending.get(&uid) == Some(&version) {
            pending.remove(&uid);
            true
        } else {
            false
        }
    }

    /// Drops what is kept for the Jinghzhu `uid`.
    pub fn forget(&self, uid: &str) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(uid);
        }
    }

    /// How many writes wait for their echo.
    pub fn len(&self) -> usize {
        self.pending.lock().map_or(0, |p| p.len())
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

    fn at(uid: &str, version: &str) -> Jinghzhu {
        let mut jz = Jinghzhu::new(
            "web",
            JinghzhuSpec {
                desired: 1,
                template: None,
            },
        );
        jz.metadata.uid = Some(uid.into());
        jz.metadata.resource_version = Some(version.into());
        jz
    }

    #[test]
    fn only_the_version_our_write_produced_is_an_echo() {
        let writes = OwnWrites::default();
        writes.wrote("u1", "12".into());
        // A change made by someone else before or after ours queues.
        assert!(!writes.is_echo(&at("u1", "11")));
        assert!(!writes.is_echo(&at("u1", "13")));
        // Another object at that version is not ours.
        assert!(!writes.is_echo(&at("u2", "12")));
        assert!(writes.is_echo(&at("u1", "12")));
        // Used up: the same version seen again (a relist) queues.
        assert!(!writes.is_echo(&at("u1", "12")));
        assert!(writes.is_empty());
    }

    #[test]
    fn the_latest_write_wins_and_forget_drops_it() {
        let writes = OwnWrites::default();
        writes.wrote("u1", "12".into());
        writes.wrote("u1", "14".into());
        assert!(!writes.is_echo(&at("u1", "12")));
        writes.forget("u1");
        assert!(!writes.is_echo(&at("u1", "14")));
        assert!(!writes.is_echo(&Jinghzhu::new(
            "no-uid",
            JinghzhuSpec {
                desired: 1,
                template: None
            }
        )));
    }
}
