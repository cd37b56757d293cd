//! The owner index of one child kind: for each controlling owner (by uid),
//! the keys of the cached children it controls, kept from the same watch
//! events as the kind's reflector store, so a reconcile reads its parent's
//! children instead of scanning every child of the controller.
//!
//! It follows the store's rules: `Apply` and `Delete` change the live index
//! at once; a (re)list (`Init`, `InitApply`…, `InitDone`) builds a new index
//! aside and swaps it in whole at `InitDone`, so children gone during a
//! watch outage drop out and lookups never see a half-listed state. A child
//! whose controller changes moves to its new owner. The objects themselves
//! are read from the store, the one copy of every child.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::locks::RwLockExt;

/// Owner uid → keys of the children it controls; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct OwnerIndex {
    resource: ApiResource,
    state: Arc<RwLock<State>>,
}

#[derive(Debug, Default)]
struct State {
    live: Entries,
    /// The index being rebuilt by a (re)list, swapped in at `InitDone`.
    relist: Option<Entries>,
}

/// A child's key: namespace and name (the store's key without its kind,
/// which is the same for every entry of one index).
type Key = (String, String);

#[derive(Debug, Default)]
struct Entries {
    by_owner: HashMap<String, HashSet<Key>>,
    owner_of: HashMap<Key, String>,
}

impl Entries {
    /// Records `child` under its current controller (or under none).
    fn apply(&mut self, child: &DynamicObject) {
        let key = key_of(child);
        let owner = controller_uid(child);
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
        if let Some(children) = self.by_owner.get_mut(&owner) {
            children.remove(key);
            if children.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }
}

/// The uid of `child`'s controlling owner.
pub fn controller_uid(child: &DynamicObject) -> Option<&str> {
    child
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
}

fn key_of(child: &DynamicObject) -> Key {
    (child.namespace().unwrap_or_default(), child.name_any())
}

impl OwnerIndex {
    /// An empty index of the kind `resource`.
    pub fn new(resource: ApiResource) -> Self {
        Self {
            resource,
            state: Arc::default(),
        }
    }

    /// Applies one watch event of the kind, as the reflector store does.
    pub fn apply_watcher_event(&self, event: &watcher::Event<DynamicObject>) {
        let mut state = self.state.write_unpoisoned();
        match event {
            watcher::Event::Apply(child) => state.live.apply(child),
            watcher::Event::Delete(child) => state.live.remove(&key_of(child)),
            watcher::Event::Init => state.relist = Some(Entries::default()),
            watcher::Event::InitApply(child) => {
                state.relist.get_or_insert_default().apply(child);
            }
            watcher::Event::InitDone => state.live = state.relist.take().unwrap_or_default(),
        }
    }

    /// The children of the index's kind controlled by the object with uid
    /// `owner` in `namespace`, as `store` (the kind's cache) holds them now.
    pub fn children_of(
        &self,
        store: &Store<DynamicObject>,
        owner: &str,
        namespace: &str,
    ) -> Vec<Arc<DynamicObject>> {
        let names: Vec<String> = {
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
        };
        names
            .iter()
            .filter_map(|name| {
                store.get(&ObjectRef::new_with(name, self.resource.clone()).within(namespace))
            })
            .filter(|child| controller_uid(child) == Some(owner))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    fn resource() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    fn child(namespace: &str, name: &str, owner: Option<&str>) -> DynamicObject {
        let mut obj = DynamicObject::new(name, &resource()).within(namespace);
        obj.metadata.uid = Some(format!("uid-{name}"));
        obj.metadata.owner_references = owner.map(|uid| {
            vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "example.com/v1".into(),
                    kind: "Parent".into(),
                    name: format!("p-{uid}"),
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]
        });
        obj
    }

    /// The index and a real reflector store fed the same events.
    struct Fed {
        index: OwnerIndex,
        store: Store<DynamicObject>,
        writer: reflector::store::Writer<DynamicObject>,
    }

    impl Fed {
        fn new() -> Self {
            let writer = reflector::store::Writer::new(resource());
            Self {
                index: OwnerIndex::new(resource()),
                store: writer.as_reader(),
                writer,
            }
        }

        fn send(&mut self, event: Event<DynamicObject>) {
            self.writer.apply_watcher_event(&event);
            self.index.apply_watcher_event(&event);
        }

        /// The index's answer, sorted, checked against a scan of the store.
        fn owned(&self, namespace: &str, owner: &str) -> Vec<String> {
            let mut indexed: Vec<String> = self
                .index
                .children_of(&self.store, owner, namespace)
                .iter()
                .map(|c| c.name_any())
                .collect();
            indexed.sort();
            let mut scanned: Vec<String> = self
                .store
                .state()
                .iter()
                .filter(|c| {
                    c.namespace().as_deref() == Some(namespace) && controller_uid(c) == Some(owner)
                })
                .map(|c| c.name_any())
                .collect();
            scanned.sort();
            assert_eq!(indexed, scanned, "index and scan disagree for {owner}");
            indexed
        }
    }

    #[test]
    fn children_are_found_by_owner_and_namespace() {
        let mut fed = Fed::new();
        fed.send(Event::Init);
        fed.send(Event::InitDone);
        fed.send(Event::Apply(child("ns", "c", Some("a"))));
        fed.send(Event::Apply(child("ns", "a", Some("a"))));
        fed.send(Event::Apply(child("ns", "d", Some("b"))));
        fed.send(Event::Apply(child("ns", "orphan", None)));
        assert_eq!(fed.owned("ns", "a"), ["a", "c"]);
        assert_eq!(fed.owned("ns", "b"), ["d"]);
        assert!(fed.owned("other", "a").is_empty());
        assert!(fed.owned("ns", "nobody").is_empty());
    }

    #[test]
    fn a_child_moves_with_its_controller_and_leaves_when_deleted() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(child("ns", "x", Some("a"))));
        fed.send(Event::Apply(child("ns", "x", Some("a"))));
        assert_eq!(fed.owned("ns", "a"), ["x"]);
        fed.send(Event::Apply(child("ns", "x", Some("b"))));
        assert!(fed.owned("ns", "a").is_empty());
        assert_eq!(fed.owned("ns", "b"), ["x"]);
        // Released: nobody's.
        fed.send(Event::Apply(child("ns", "x", None)));
        assert!(fed.owned("ns", "b").is_empty());
        fed.send(Event::Apply(child("ns", "y", Some("b"))));
        fed.send(Event::Delete(child("ns", "y", Some("b"))));
        assert!(fed.owned("ns", "b").is_empty());
        let state = fed.index.state.read_unpoisoned();
        assert!(state.live.by_owner.is_empty() && state.live.owner_of.is_empty());
    }

    #[test]
    fn a_relist_replaces_the_index_whole_at_init_done() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(child("ns", "a", Some("p"))));
        fed.send(Event::Apply(child("ns", "b", Some("p"))));
        fed.send(Event::Init);
        fed.send(Event::InitApply(child("ns", "b", Some("p"))));
        fed.send(Event::InitApply(child("ns", "c", Some("q"))));
        // Mid-relist the last complete state holds.
        assert_eq!(fed.index.children_of(&fed.store, "p", "ns").len(), 2);
        fed.send(Event::InitDone);
        assert_eq!(fed.owned("ns", "p"), ["b"]);
        assert_eq!(fed.owned("ns", "q"), ["c"]);
    }
}
