//! What the bounded directories must keep: the digests (`sha256:<hex>` of a
//! component's bytes) of the plugins each hot-swap slot serves, had before
//! (its rollback target) and runs as a shadow.
//!
//! A process-wide registry, because the slot that knows them
//! (`hotswap::ActivePlugin`) and the directories that need them (the
//! precompiled cache in the runtime, the OCI store in each puller) are made
//! apart: each slot holds a [`PinHolder`] and sets its digests whenever they
//! change; a pruner asks for the union ([`pinned`]). A dropped holder's pins
//! go with it. A process with several slots (tests) keeps what any of them
//! needs: pins only ever keep more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

static PINS: Mutex<BTreeMap<u64, Vec<String>>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// One slot's pins; removed when dropped.
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

    /// Replaces this holder's pins with `digests`.
    pub fn set(&self, digests: impl IntoIterator<Item = String>) {
        let digests: Vec<String> = digests.into_iter().collect();
        PINS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.id, digests);
    }
}

impl Drop for PinHolder {
    fn drop(&mut self) {
        PINS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// Every digest some live holder pins.
pub fn pinned() -> BTreeSet<String> {
    PINS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .flatten()
        .cloned()
        .collect()
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
    }
}
