//! The pod owner index: for each controlling owner (by UID), the keys of the
//! cached pods it controls, kept from the same pod watch events as the
//! reflector store, so a reconcile reads its own object's pods instead of
//! scanning every cached pod.
//!
//! It follows the store's rules: `Apply` and `Delete` change the live index
//! at once; a (re)list (`Init`, `InitApply`…, `InitDone`) builds a new index
//! aside and swaps it in whole at `InitDone`, so pods gone during a watch
//! outage drop out and lookups never see a half-listed state. A pod whose
//! controller changes moves to its new owner. The pods themselves are read
//! from the store, which stays the one copy of every pod.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::cached_pod::CachedPod;
use crate::crd::Jinghzhu;
use crate::locks::RwLockExt;
use crate::ownership::is_controlled_by;

/// Owner UID → keys of the pods it controls; cheap to clone (shared).
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

#[derive(Debug, Default)]
struct Entries {
    by_owner: HashMap<String, HashSet<ObjectRef<CachedPod>>>,
    owner_of: HashMap<ObjectRef<CachedPod>, String>,
}

impl Entries {
    /// Records `pod` under its current controller (or under none).
    fn apply(&mut self, pod: &CachedPod) {
        let key = pod_key(pod);
        let owner = pod
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.as_str());
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

    fn remove(&mut self, key: &ObjectRef<CachedPod>) {
        let Some(owner) = self.owner_of.remove(key) else {
            return;
        };
        if let Some(pods) = self.by_owner.get_mut(&owner) {
            pods.remove(key);
            if pods.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }
}

/// The store's key of a pod, without the version and UID it does not hash.
fn pod_key(pod: &CachedPod) -> ObjectRef<CachedPod> {
    let key = ObjectRef::new(&pod.name_any());
    match pod.namespace() {
        Some(namespace) => key.within(&namespace),
        None => key,
    }
}

impl OwnerIndex {
    /// Applies one pod watch event, as the reflector store does.
    pub fn apply_watcher_event(&self, event: &watcher::Event<CachedPod>) {
        let mut state = self.state.write_unpoisoned();
        match event {
            watcher::Event::Apply(pod) => state.live.apply(pod),
            watcher::Event::Delete(pod) => state.live.remove(&pod_key(pod)),
            watcher::Event::Init => state.relist = Some(Entries::default()),
            watcher::Event::InitApply(pod) => state.relist.get_or_insert_default().apply(pod),
            watcher::Event::InitDone => state.live = state.relist.take().unwrap_or_default(),
        }
    }

    /// Keys of the pods controlled by the object with UID `owner_uid`.
    pub fn pods_of(&self, owner_uid: &str) -> Vec<ObjectRef<CachedPod>> {
        let state = self.state.read_unpoisoned();
        state
            .live
            .by_owner
            .get(owner_uid)
            .map(|pods| pods.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The cached pods controlled by `jz` (same namespace, controller
    /// ownerReference with its UID), sorted by name, as `Pod`s: what
    /// [`crate::ownership::owned_pods`] finds in the whole cache.
    pub fn owned_pods(&self, cache: &Store<CachedPod>, jz: &Jinghzhu) -> Vec<Pod> {
        let (Some(uid), namespace) = (jz.meta().uid.as_deref(), jz.meta().namespace.as_deref())
        else {
            return Vec::new();
        };
        let mut owned: Vec<Pod> = self
            .pods_of(uid)
            .iter()
            .filter_map(|key| cache.get(key))
            .filter(|p| p.meta().namespace.as_deref() == namespace && is_controlled_by(&**p, uid))
            .map(|p| p.to_pod())
            .collect();
        owned.sort_by_key(|p| p.name_any());
        owned
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::ownership::owned_pods;

    fn pod(namespace: &str, name: &str, owner: Option<&str>) -> CachedPod {
        let pod = wasm_operator_testkit::pod(name)
            .namespace(namespace)
            .uid(&format!("pod-{name}"));
        match owner {
            Some(uid) => pod.controller(&format!("jz-{uid}"), uid),
            None => pod,
        }
        .cached()
    }

    fn jinghzhu(namespace: &str, uid: &str) -> Jinghzhu {
        wasm_operator_testkit::jinghzhu(&format!("jz-{uid}"))
            .namespace(namespace)
            .uid(uid)
            .build()
    }

    fn names(keys: Vec<ObjectRef<CachedPod>>) -> Vec<String> {
        let mut names: Vec<String> = keys.into_iter().map(|k| k.name).collect();
        names.sort();
        names
    }

    /// The index and a real reflector store fed the same events.
    struct Fed {
        index: OwnerIndex,
        cache: Store<CachedPod>,
        writer: reflector::store::Writer<CachedPod>,
    }

    impl Fed {
        fn new() -> Self {
            let (cache, writer) = reflector::store();
            Self {
                index: OwnerIndex::default(),
                cache,
                writer,
            }
        }

        fn send(&mut self, event: Event<CachedPod>) {
            self.index.apply_watcher_event(&event);
            self.writer.apply_watcher_event(&event);
        }

        /// The index's answer, checked against a scan of the whole cache.
        fn owned(&self, namespace: &str, uid: &str) -> Vec<String> {
            let jz = jinghzhu(namespace, uid);
            let indexed = self.index.owned_pods(&self.cache, &jz);
            let all: Vec<Pod> = self.cache.state().iter().map(|p| p.to_pod()).collect();
            let scanned = owned_pods(&all, &jz);
            assert_eq!(indexed, scanned, "index and full scan disagree for {uid}");
            indexed.iter().map(|p| p.name_any()).collect()
        }
    }

    #[test]
    fn added_pods_are_found_by_owner_sorted_by_name() {
        let mut fed = Fed::new();
        fed.send(Event::Init);
        fed.send(Event::InitDone);
        fed.send(Event::Apply(pod("ns", "web-c", Some("a"))));
        fed.send(Event::Apply(pod("ns", "web-a", Some("a"))));
        fed.send(Event::Apply(pod("ns", "db-1", Some("b"))));
        fed.send(Event::Apply(pod("ns", "orphan", None)));
        assert_eq!(fed.owned("ns", "a"), ["web-a", "web-c"]);
        assert_eq!(fed.owned("ns", "b"), ["db-1"]);
        assert!(fed.index.pods_of("nobody").is_empty());
        // Another namespace's object with the same UID gets nothing.
        assert!(fed.owned("other", "a").is_empty());
    }

    #[test]
    fn an_update_keeps_the_pod_once_and_reads_the_new_version() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(pod("ns", "web-a", Some("a"))));
        let mut updated = pod("ns", "web-a", Some("a"));
        updated.metadata.labels = Some([("v".to_string(), "2".to_string())].into());
        fed.send(Event::Apply(updated));
        assert_eq!(fed.index.pods_of("a").len(), 1);
        let owned = fed.index.owned_pods(&fed.cache, &jinghzhu("ns", "a"));
        assert_eq!(owned.len(), 1);
        assert_eq!(owned[0].labels().get("v").map(String::as_str), Some("2"));
    }

    #[test]
    fn a_pod_whose_controller_changes_moves_to_its_new_owner() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(pod("ns", "web-a", Some("a"))));
        fed.send(Event::Apply(pod("ns", "web-a", Some("b"))));
        assert!(fed.owned("ns", "a").is_empty());
        assert_eq!(fed.owned("ns", "b"), ["web-a"]);
        // Released (no controller any more): nobody's.
        fed.send(Event::Apply(pod("ns", "web-a", None)));
        assert!(fed.owned("ns", "b").is_empty());
        assert!(fed.index.state.read().unwrap().live.owner_of.is_empty());
        assert!(fed.index.state.read().unwrap().live.by_owner.is_empty());
    }

    #[test]
    fn a_deleted_pod_leaves_the_index() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(pod("ns", "web-a", Some("a"))));
        fed.send(Event::Apply(pod("ns", "web-b", Some("a"))));
        fed.send(Event::Delete(pod("ns", "web-a", Some("a"))));
        assert_eq!(fed.owned("ns", "a"), ["web-b"]);
        fed.send(Event::Delete(pod("ns", "web-b", Some("a"))));
        assert!(fed.owned("ns", "a").is_empty());
        assert!(fed.index.state.read().unwrap().live.by_owner.is_empty());
    }

    #[test]
    fn a_relist_replaces_the_index_whole_at_init_done() {
        let mut fed = Fed::new();
        fed.send(Event::Apply(pod("ns", "web-a", Some("a"))));
        fed.send(Event::Apply(pod("ns", "web-b", Some("a"))));
        fed.send(Event::Apply(pod("ns", "moved", Some("a"))));
        // The watch broke; while it was down web-a was deleted, `moved`
        // changed controller and web-c appeared.
        fed.send(Event::Init);
        fed.send(Event::InitApply(pod("ns", "web-b", Some("a"))));
        fed.send(Event::InitApply(pod("ns", "moved", Some("b"))));
        // Mid-relist, lookups still see the last complete state.
        assert_eq!(fed.owned("ns", "a"), ["moved", "web-a", "web-b"]);
        assert!(fed.owned("ns", "b").is_empty());
        fed.send(Event::InitApply(pod("ns", "web-c", Some("a"))));
        fed.send(Event::InitDone);
        assert_eq!(fed.owned("ns", "a"), ["web-b", "web-c"]);
        assert_eq!(fed.owned("ns", "b"), ["moved"]);
        assert_eq!(names(fed.index.pods_of("a")), ["web-b", "web-c"]);
        // A second, empty relist empties it.
        fed.send(Event::Init);
        fed.send(Event::InitDone);
        assert!(fed.owned("ns", "a").is_empty());
        assert!(fed.index.pods_of("b").is_empty());
    }
}
