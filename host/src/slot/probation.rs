//! The probation of a plugin just swapped in: which objects failed under it
//! that did not fail before, and whether that is reason enough to roll back
//! ([`crate::slot::RollbackPolicy`]).
//!
//! Judged per object, not per call: each object counts once (it failed
//! under the new plugin at least once in the window, or it did not), so an
//! object reconciled a hundred times (a tenant editing it twice a second)
//! weighs what an object reconciled once does. And an object whose latest
//! reconcile before the swap had failed under the previous plugin is not
//! judged at all: its failures are its own, not the new plugin's, so no
//! tenant's broken objects can veto an upgrade. [`FailingObjects`] keeps,
//! for every object whose latest reconcile failed, the plugin it failed
//! under.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// Most objects [`FailingObjects`] remembers (a failing object more is not
/// remembered: its failures after a swap are then judged as new ones).
pub const MAX_FAILING_OBJECTS: usize = 100_000;

/// Objects (by UID) whose latest reconcile failed, with the digest of the
/// plugin that failed.
#[derive(Debug, Default)]
pub struct FailingObjects {
    by_object: HashMap<String, String>,
}

impl FailingObjects {
    /// Records the outcome of a reconcile of `object` by plugin `digest`.
    pub fn record(&mut self, object: &str, digest: &str, ok: bool) {
        if ok {
            self.by_object.remove(object);
        } else if self.by_object.len() < MAX_FAILING_OBJECTS || self.by_object.contains_key(object)
        {
            self.by_object
                .insert(object.to_string(), digest.to_string());
        }
    }

    /// Forgets `object` (deleted, or no longer this replica's): a deleted
    /// object's failure would otherwise hold one of the
    /// [`MAX_FAILING_OBJECTS`] places for good.
    pub fn forget(&mut self, object: &str) {
        self.by_object.remove(object);
    }

    /// The objects whose latest reconcile failed under plugin `digest`.
    pub fn failing_under(&self, digest: &str) -> HashSet<String> {
        self.by_object
            .iter()
            .filter(|(_, by)| by.as_str() == digest)
            .map(|(object, _)| object.clone())
            .collect()
    }

    /// The objects whose latest reconcile failed under a plugin other than
    /// `digest`.
    pub fn failing_except(&self, digest: &str) -> HashSet<String> {
        self.by_object
            .iter()
            .filter(|(_, by)| by.as_str() != digest)
            .map(|(object, _)| object.clone())
            .collect()
    }

    /// How many objects are remembered.
    pub fn len(&self) -> usize {
        self.by_object.len()
    }

    /// True when no object is remembered as failing.
    pub fn is_empty(&self) -> bool {
        self.by_object.is_empty()
    }
}

/// The watch on one plugin after it was swapped in.
#[derive(Debug)]
pub struct Probation {
    /// The plugin on probation.
    pub digest: String,
    /// When it was swapped in.
    pub since: Instant,
    /// Objects failing under the previous plugin at the swap: not judged.
    inherited: HashSet<String>,
    /// Objects judged so far, each with whether it failed under this plugin.
    judged: HashMap<String, bool>,
    /// Failures of inherited objects (not charged), for the log.
    excused: u64,
}

/// Where a probation stands after an outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    /// Objects judged (each once).
    pub objects: usize,
    /// Of those, objects that failed under the new plugin.
    pub failed: usize,
    /// Failures of objects that were failing before the swap (not charged).
    pub excused: u64,
}

impl Standing {
    /// Share of judged objects that failed (0 when none was judged).
    pub fn ratio(&self) -> f64 {
        if self.objects == 0 {
            0.0
        } else {
            self.failed as f64 / self.objects as f64
        }
    }
}

impl Probation {
    /// The probation of `digest`, swapped in now; `inherited` are the
    /// objects failing under the previous plugin
    /// ([`FailingObjects::failing_under`]).
    pub fn start(digest: &str, inherited: HashSet<String>) -> Self {
        Self {
            digest: digest.to_string(),
            since: Instant::now(),
            inherited,
            judged: HashMap::new(),
            excused: 0,
        }
    }

    /// Counts the outcome of a reconcile of `object` by the plugin on
    /// probation.
    pub fn record(&mut self, object: &str, ok: bool) -> Standing {
        if self.inherited.contains(object) {
            if !ok {
                self.excused += 1;
            }
        } else {
            let failed = self.judged.entry(object.to_string()).or_insert(false);
            *failed |= !ok;
        }
        self.standing()
    }

    /// Where the probation stands.
    pub fn standing(&self) -> Standing {
        Standing {
            objects: self.judged.len(),
            failed: self.judged.values().filter(|failed| **failed).count(),
            excused: self.excused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_object_is_not_remembered_as_failing() {
        let mut failing = FailingObjects::default();
        failing.record("gone", "sha256:a", false);
        failing.record("kept", "sha256:a", false);
        failing.forget("gone");
        assert_eq!(
            failing.failing_under("sha256:a"),
            HashSet::from(["kept".to_string()])
        );
    }

    #[test]
    fn an_object_counts_once_however_often_it_is_reconciled() {
        let mut p = Probation::start("v2", HashSet::new());
        for _ in 0..100 {
            p.record("busy", false);
        }
        for object in ["a", "b", "c"] {
            p.record(object, true);
        }
        let standing = p.standing();
        assert_eq!((standing.objects, standing.failed), (4, 1));
        assert!((standing.ratio() - 0.25).abs() < f64::EPSILON);
    }

    #[test]
    fn failures_an_object_had_before_the_swap_are_not_charged() {
        let mut failing = FailingObjects::default();
        failing.record("tenant-1", "v1", false);
        failing.record("tenant-2", "v1", false);
        failing.record("fixed", "v1", false);
        failing.record("fixed", "v1", true);
        failing.record("other", "v0", false);
        let inherited = failing.failing_under("v1");
        assert_eq!(
            inherited,
            HashSet::from(["tenant-1".to_string(), "tenant-2".to_string()])
        );
        let mut p = Probation::start("v2", inherited);
        p.record("tenant-1", false);
        p.record("tenant-2", false);
        p.record("healthy", true);
        let standing = p.standing();
        assert_eq!(
            (standing.objects, standing.failed, standing.excused),
            (1, 0, 2)
        );
        // An object that fails for the first time under v2 is charged.
        let standing = p.record("fixed", false);
        assert_eq!((standing.objects, standing.failed), (2, 1));
    }

    #[test]
    fn failing_objects_are_bounded() {
        let mut failing = FailingObjects::default();
        for i in 0..MAX_FAILING_OBJECTS + 10 {
            failing.record(&format!("o{i}"), "v1", false);
        }
        assert_eq!(failing.len(), MAX_FAILING_OBJECTS);
        failing.record("o0", "v2", false);
        assert_eq!(
            failing.failing_under("v2").len(),
            1,
            "a known one is updated"
        );
    }
}
