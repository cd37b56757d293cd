//! The pods a `Jinghzhu` controls, read through the pod cache's owner
//! index ([`OwnerIndex`], kept from the pod watch's events) instead of a
//! scan of every cached pod.

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use crate::cached_pod::CachedPod;
use crate::crd::Jinghzhu;
pub use crate::kube_api::owner_index::OwnerIndex;

/// The cached pods controlled by `jz` (same namespace, controller
/// ownerReference with its UID), as the reflector store holds them now.
pub fn controlled_by(
    index: &OwnerIndex,
    cache: &Store<CachedPod>,
    jz: &Jinghzhu,
) -> Vec<std::sync::Arc<CachedPod>> {
    let (Some(uid), Some(namespace)) = (jz.meta().uid.as_deref(), jz.meta().namespace.as_deref())
    else {
        return Vec::new();
    };
    index.owned(cache, &(), uid, namespace)
}

/// The cached pods controlled by `jz`, sorted by name, as `Pod`s: what
/// [`crate::ownership::owned_pods`] finds in the whole cache.
pub fn owned_pods(index: &OwnerIndex, cache: &Store<CachedPod>, jz: &Jinghzhu) -> Vec<Pod> {
    let mut owned: Vec<Pod> = controlled_by(index, cache, jz)
        .iter()
        .map(|p| p.to_pod())
        .collect();
    owned.sort_by_key(|p| p.name_any());
    owned
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

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

    /// The names of the pods the index holds under `uid` in "ns".
    fn names(fed: &Fed, uid: &str) -> Vec<String> {
        controlled_by(&fed.index, &fed.cache, &jinghzhu("ns", uid))
            .iter()
            .map(|p| p.name_any())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
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
            let indexed = owned_pods(&self.index, &self.cache, &jz);
            let all: Vec<Pod> = self.cache.state().iter().map(|p| p.to_pod()).collect();
            let scanned = crate::ownership::owned_pods(&all, &jz);
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
        assert!(names(&fed, "nobody").is_empty());
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
        assert_eq!(names(&fed, "a").len(), 1);
        let owned = owned_pods(&fed.index, &fed.cache, &jinghzhu("ns", "a"));
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
        assert_eq!(names(&fed, "a"), ["web-b", "web-c"]);
        // A second, empty relist empties it.
        fed.send(Event::Init);
        fed.send(Event::InitDone);
        assert!(fed.owned("ns", "a").is_empty());
        assert!(names(&fed, "b").is_empty());
    }
}
