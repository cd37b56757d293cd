//! What the bounded directories must keep, as the live parts of the host
//! say:
//!
//! - **pinned digests** (`sha256:<hex>` of a component's bytes): the
//!   plugins each hot-swap slot serves, had before (its rollback target),
//!   runs as a shadow or rolls out as a canary, and the plugins being vetted
//!   (a candidate staged between its pull and its swap). Each holder (a
//!   slot, a staged candidate) keeps a [`PinHolder`] and sets its digests
//!   whenever they change; a pruner asks for the union ([`pinned`]).
//! - **followed references** (`oci://…` as the OCI source prints it): the
//!   references some live OCI source follows now. The OCI store keeps the
//!   last known good of these only (what each one last resolved to); a
//!   reference no source follows any more is evictable like anything else.
//!   Each source holds a [`Following`] while it lives ([`followed`]).
//!
//! Process-wide registries, because who knows them (`slot`'s slots and
//! sources) and the directories that need them (the precompiled cache in
//! the runtime, the OCI store in each puller) are made apart. A dropped
//! holder's pins go with it. A process with several slots (tests) keeps
//! what any of them needs: pins only ever keep more.

use crate::locks::MutexExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

static PINS: Mutex<BTreeMap<u64, Vec<String>>> = Mutex::new(BTreeMap::new());
static FOLLOWED: Mutex<BTreeMap<u64, String>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// One holder's pinned digests (a slot's, a staged candidate's); removed
/// when dropped.
#[derive(Debug)]
pub struct PinHolder {
    id: u64,
}

impl Default for PinHolder {
    fn default() -> Self {
        Self::new()
    }
}

impl PinHolder {
    /// A holder with no pins yet.
    pub fn new() -> Self {
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A holder pinning `digests` from now on.
    pub fn of(digests: impl IntoIterator<Item = String>) -> Self {
        let holder = Self::new();
        holder.set(digests);
        holder
    }

    /// Replaces this holder's pins with `digests`.
    pub fn set(&self, digests: impl IntoIterator<Item = String>) {
        let digests: Vec<String> = digests.into_iter().collect();
        PINS.lock_unpoisoned().insert(self.id, digests);
    }
}

impl Drop for PinHolder {
    fn drop(&mut self) {
        PINS.lock_unpoisoned().remove(&self.id);
    }
}

/// Every digest some live holder pins.
pub fn pinned() -> BTreeSet<String> {
    PINS.lock_unpoisoned().values().flatten().cloned().collect()
}

/// A reference one live source follows; no longer followed once dropped
/// (unless another holder follows it too).
#[derive(Debug)]
pub struct Following {
    id: u64,
}

impl Following {
    /// Follows `reference` (as the source prints it) until dropped.
    pub fn new(reference: String) -> Self {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        FOLLOWED.lock_unpoisoned().insert(id, reference);
        Self { id }
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        FOLLOWED.lock_unpoisoned().remove(&self.id);
    }
}

/// Every reference some live source follows.
pub fn followed() -> BTreeSet<String> {
    FOLLOWED.lock_unpoisoned().values().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_the_union_of_live_holders() {
        let a = PinHolder::new();
        let b = PinHolder::new();
        a.set(["sha256:test-a1".to_string(), "sha256:test-a2".to_string()]);
        b.set(["sha256:test-b".to_string()]);
        let all = pinned();
        assert!(all.contains("sha256:test-a1") && all.contains("sha256:test-b"));
        a.set(["sha256:test-a2".to_string()]);
        assert!(!pinned().contains("sha256:test-a1"));
        drop(b);
        assert!(!pinned().contains("sha256:test-b"));
        assert!(pinned().contains("sha256:test-a2"));
        let staged = PinHolder::of(["sha256:test-staged".to_string()]);
        assert!(pinned().contains("sha256:test-staged"));
        drop(staged);
        assert!(!pinned().contains("sha256:test-staged"));
    }

    #[test]
    fn a_reference_is_followed_while_some_holder_lives() {
        let reference = "oci://pins.test/p:followed".to_string();
        let first = Following::new(reference.clone());
        let second = Following::new(reference.clone());
        assert!(followed().contains(&reference));
        drop(first);
        assert!(followed().contains(&reference), "the second still follows");
        drop(second);
        assert!(!followed().contains(&reference));
    }
}
