//! The owner index of one watched kind: for each controlling owner (by
//! uid), the keys (namespace, name) of the cached objects it controls, kept
//! from the same watch events as the kind's reflector store, so a reconcile
//! reads its parent's objects instead of scanning the whole cache. One type
//! serves every kind: pods, a declared controller's children, the kinds it
//! observes (metadata only).
//!
//! It follows the store's rules: `Apply` and `Delete` change the live index
//! at once; a (re)list (`Init`, `InitApply`…, `InitDone`) builds a new index
//! aside and swaps it in whole at `InitDone`, so objects gone during a
//! watch outage drop out and lookups never see a half-listed state. An
//! object whose controller changes moves to its new owner. The objects
//! themselves are read from the store, the one copy of each.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::locks::RwLockExt;

/// Owner uid → keys of the objects it controls; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct OwnerIndex {
    state: Arc<RwLock<State>>,
}

#[derive(Debug, Default)]
struct State {
    live: Entries,
    /// The index being rebuilt by a (re)list, swapped in at `InitDone`.
    relist: Option<Entries>,
}

/// An object's key: namespace (empty for none) and name.
type Key = (String, String);

#[derive(Debug, Default)]
struct Entries {
    by_owner: HashMap<String, HashSet<Key>>,
    owner_of: HashMap<Key, String>,
}

impl Entries {
    /// Records `obj` under its current controller (or under none).
    fn apply<K: Resource>(&mut self, obj: &K) {
        let key = key_of(obj);
        let owner = controller_uid(obj);
        if let Some(previous) = self.owner_of.get(&key) {
            if Some(previous.as_str()) == owner {
                return;
            }
            self.remove(&key);
        }
        if let Some(owner) = owner {
            self.by_owner
                .entry(owner.to_string())
                .or_default()
                .insert(key.clone());
            self.owner_of.insert(key, owner.to_string());
        }
    }

    fn remove(&mut self, key: &Key) {
        let Some(owner) = self.owner_of.remove(key) else {
            return;
        };
        if let Some(owned) = self.by_owner.get_mut(&owner) {
            owned.remove(key);
            if owned.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }
}

/// The uid of `obj`'s controlling owner (the owner reference with
/// `controller: true`).
pub fn controller_uid<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
}

fn key_of<K: Resource>(obj: &K) -> Key {
    let meta = obj.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl OwnerIndex {
    /// Applies one watch event of the kind, as the reflector store does.
    pub fn apply_watcher_event<K: Resource>(&self, event: &watcher::Event<K>) {
        let mut state = self.state.write_unpoisoned();
        match event {
            watcher::Event::Apply(obj) => state.live.apply(obj),
            watcher::Event::Delete(obj) => state.live.remove(&key_of(obj)),
            watcher::Event::Init => state.relist = Some(Entries::default()),
            watcher::Event::InitApply(obj) => state.relist.get_or_insert_default().apply(obj),
            watcher::Event::InitDone => state.live = state.relist.take().unwrap_or_default(),
        }
    }

    /// The names of the objects in `namespace` the index holds under the
    /// owner with uid `owner`.
    fn names_of(&self, owner: &str, namespace: &str) -> Vec<String> {
        let state = self.state.read_unpoisoned();
        state
            .live
            .by_owner
            .get(owner)
            .into_iter()
            .flatten()
            .filter(|(ns, _)| ns == namespace)
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// The objects of the kind controlled by the object with uid `owner`
    /// in `namespace`, as `store` (the kind's cache, whose kind is `dyntype`)
    /// holds them now; each checked against its cached controller, so an
    /// index a moment behind the store never answers wrong.
    pub fn owned<K>(
        &self,
        store: &Store<K>,
        dyntype: &K::DynamicType,
        owner: &str,
        namespace: &str,
    ) -> Vec<Arc<K>>
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Clone + Eq + std::hash::Hash,
    {
        self.names_of(owner, namespace)
            .iter()
            .filter_map(|name| {
                let key = ObjectRef::new_with(name, dyntype.clone());
                let key = if namespace.is_empty() {
                    key
                } else {
                    key.within(namespace)
                };
                store.get(&key)
            })
            .filter(|obj| controller_uid(obj.as_ref()) == Some(owner))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::ResourceExt;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    fn object(namespace: &str, name: &str, owner: Option<&str>) -> ConfigMap {
        let mut obj = ConfigMap::default();
        obj.metadata.namespace = Some(namespace.into());
        obj.metadata.name = Some(name.into());
        obj.metadata.uid = Some(format!("uid-{name}"));
        obj.metadata.owner_references = owner.map(|uid| {
            vec![OwnerReference {
                api_version: "example.com/v1".into(),
                kind: "Parent".into(),
                name: format!("p-{uid}"),
                uid: uid.into(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        obj
    }

    /// The index and a real reflector store fed the same events.
    struct Fed {
        index: OwnerIndex,
        store: Store<ConfigMap>,
        writer: reflector::store::Writer<ConfigMap>,
    }

    impl Fed {
        fn new() -> Self {
            let writer = reflector::store::Writer::default();
            Self {
                index: OwnerIndex::default(),
                store: writer.as_reader(),
                writer,
            }
        }

        fn send(&mut self, event: Event<ConfigMap>) {
            self.writer.apply_watcher_event(&event);
            self.index.apply_watcher_event(&event);
        }

        /// The index's answer, sorted, checked against a scan of the store.
        fn owned(&self, namespace: &str, owner: &str) -> Vec<String> {
            let mut indexed: Vec<String> = self
                .index
                .owned(&self.store, &(), owner, namespace)
                .iter()
                .map(|c| c.name_any())
                .collect();
            indexed.sort();
            let mut scanned: Vec<String> = self
                .store
                .state()
                .iter()
                .filter(|c| {
                    c.namespace().as_deref() == Some(namespace)
                        && controller_uid(c.as_ref()) == Some(owner)
                })
                .map(|c| c.name_any())
                .collect();
            scanned.sort();
            assert_eq!(indexed, scanned, "index and scan disagree for {owner}");
            indexed
        }
    }

    #[test]
    fn objects_are_found_by_owner_and_namespace() {
        let mut fed = Fed::new();
        fed.send(Event::Init);
        fed.send(Event::InitDone);
        fed.send(Event::Apply(object("ns", "c", Some("a"))));
        fed.send(Event::Apply(object("ns", "a", Some("a"))));
        fed.send(Event::Apply(object("ns", "d", Some("b"))));
        fed.send(Event::Apply(object("ns", "orphan", None)));
        assert_eq!(fed.owned("ns", "a"), ["a", "c"]);
        assert_eq!(fed.owned("ns", "b"), ["d"]);
        assert!(fed.owned("other", "a").is_empty());
        assert!(fed.owned("ns", "nobody").is_empty());
    }

    #[test]
    fn an_object_moves_with_its_controller_and_leaves_when_deleted() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(object("ns", "x", Some("a"))));
        fed.send(Event::Apply(object("ns", "x", Some("a"))));
        assert_eq!(fed.owned("ns", "a"), ["x"]);
        fed.send(Event::Apply(object("ns", "x", Some("b"))));
        assert!(fed.owned("ns", "a").is_empty());
        assert_eq!(fed.owned("ns", "b"), ["x"]);
        // Released: nobody's.
        fed.send(Event::Apply(object("ns", "x", None)));
        assert!(fed.owned("ns", "b").is_empty());
        fed.send(Event::Apply(object("ns", "y", Some("b"))));
        fed.send(Event::Delete(object("ns", "y", Some("b"))));
        assert!(fed.owned("ns", "b").is_empty());
        let state = fed.index.state.read_unpoisoned();
        assert!(state.live.by_owner.is_empty() && state.live.owner_of.is_empty());
    }

    #[test]
    fn a_relist_replaces_the_index_whole_at_init_done() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(object("ns", "a", Some("p"))));
        fed.send(Event::Apply(object("ns", "b", Some("p"))));
        fed.send(Event::Init);
        fed.send(Event::InitApply(object("ns", "b", Some("p"))));
        fed.send(Event::InitApply(object("ns", "c", Some("q"))));
        // Mid-relist the last complete state holds.
        assert_eq!(fed.index.owned(&fed.store, &(), "p", "ns").len(), 2);
        fed.send(Event::InitDone);
        assert_eq!(fed.owned("ns", "p"), ["b"]);
        assert_eq!(fed.owned("ns", "q"), ["c"]);
    }

    #[test]
    fn an_index_a_moment_ahead_of_the_store_answers_from_the_store() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(object("ns", "x", Some("a"))));
        // The index learns that x moved to b before the store does.
        fed.index
            .apply_watcher_event(&Event::Apply(object("ns", "x", Some("b"))));
        assert!(fed.index.owned(&fed.store, &(), "b", "ns").is_empty());
    }
}
