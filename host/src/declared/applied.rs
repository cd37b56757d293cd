//! What a controller last applied to each child, as a digest of the desired
//! object per parent: a child is left unwritten only when the host applied
//! this same desired state to it before and the cache shows every field
//! of it. The cache alone cannot tell a field the plugin stopped setting
//! (a rolled-back plugin's annotation): server-side apply removes such a
//! field only when the host applies again. After a restart each child is
//! applied once more (an apply that changes nothing is not stored as a
//! change by the API server).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use serde_json::Value;

use crate::locks::MutexExt;

/// The digest of each desired child applied for one parent, by kind index
/// and name.
type ChildDigests = HashMap<(usize, String), u64>;

/// Digests of the desired children applied, by parent uid.
#[derive(Debug, Default)]
pub struct AppliedMemory {
    by_parent: Mutex<HashMap<String, ChildDigests>>,
}

impl AppliedMemory {
    /// Whether `desired` is what was last applied to the child `name` of
    /// kind `kind` of the parent `parent`.
    pub fn same(&self, parent: &str, kind: usize, name: &str, desired: &Value) -> bool {
        let digest = digest(desired);
        self.by_parent
            .lock_unpoisoned()
            .get(parent)
            .and_then(|children| children.get(&(kind, name.to_string())))
            == Some(&digest)
    }

    /// Remembers that `desired` was applied to that child.
    pub fn remember(&self, parent: &str, kind: usize, name: &str, desired: &Value) {
        self.by_parent
            .lock_unpoisoned()
            .entry(parent.to_string())
            .or_default()
            .insert((kind, name.to_string()), digest(desired));
    }

    /// Forgets the child (deleted).
    pub fn forget_child(&self, parent: &str, kind: usize, name: &str) {
        if let Some(children) = self.by_parent.lock_unpoisoned().get_mut(parent) {
            children.remove(&(kind, name.to_string()));
        }
    }

    /// Forgets every child of the parent (deleted).
    pub fn forget_parent(&self, parent: &str) {
        self.by_parent.lock_unpoisoned().remove(parent);
    }

    /// Keeps only the parents (uids) `keep` answers true for.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.by_parent
            .lock_unpoisoned()
            .retain(|parent, _| keep(parent));
    }

    /// How many parents have children remembered.
    pub fn len(&self) -> usize {
        self.by_parent.lock_unpoisoned().len()
    }

    /// True when no parent has.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn digest(value: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_child_is_the_same_only_as_last_applied() {
        let memory = AppliedMemory::default();
        let v1 = json!({"spec": {"replicas": 1}});
        let v2 = json!({"metadata": {"annotations": {"build": "v2"}}, "spec": {"replicas": 1}});
        assert!(!memory.same("p", 0, "a", &v1), "never applied");
        memory.remember("p", 0, "a", &v2);
        assert!(memory.same("p", 0, "a", &v2));
        assert!(
            !memory.same("p", 0, "a", &v1),
            "a field dropped is a change"
        );
        assert!(!memory.same("p", 1, "a", &v2), "another kind");
        memory.forget_child("p", 0, "a");
        assert!(!memory.same("p", 0, "a", &v2));
        memory.remember("p", 0, "a", &v2);
        memory.forget_parent("p");
        assert!(!memory.same("p", 0, "a", &v2));
        memory.remember("p", 0, "a", &v2);
        memory.remember("q", 0, "a", &v2);
        assert_eq!(memory.len(), 2);
        memory.retain(|parent| parent == "q");
        assert_eq!(memory.len(), 1);
        assert!(
            memory.same("q", 0, "a", &v2),
            "a kept parent keeps its memory"
        );
    }
}
