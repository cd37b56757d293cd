//! The caches of one child kind of a declared controller, all kept from
//! the kind's one watch (this controller's labelled objects,
//! `managedFields` stripped): the reflector store, the owner index (parent
//! uid → children), the children's input records kept per
//! `resourceVersion`, and the children that left the watch alive (their
//! controller label removed or changed), to be looked at by their parent's
//! next reconcile.
//!
//! A child leaves a label-selected watch as a `Delete` event whether it was
//! deleted or merely unlabelled; those the host deleted itself, and those
//! the event shows terminating, are deleted. The rest are remembered under
//! their controlling parent (at most [`DEPARTED_KEPT`], for at most
//! [`DEPARTED_HELD`]) until the parent's reconcile reads them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::apply::expectations::Expectations;
use crate::locks::MutexExt;
use crate::runtime::convert_v3::Records;

use super::kinds::ResolvedKind;
use crate::kube_api::owner_index::{OwnerIndex, controller_uid};

/// Most departed children remembered per kind.
pub const DEPARTED_KEPT: usize = 4096;
/// How long a departed child is remembered when its parent does not
/// reconcile.
pub const DEPARTED_HELD: Duration = Duration::from_secs(600);
/// Most input records kept per kind.
const RECORDS_KEPT: usize = 65_536;

/// A child that left the watch alive, as it was when it left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departed {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

/// The caches of one child kind.
pub struct ChildKind {
    /// The kind.
    pub kind: ResolvedKind,
    /// Its cache.
    pub store: Store<DynamicObject>,
    /// Its children by controlling owner.
    pub owners: OwnerIndex,
    /// Its children's input records.
    pub records: Records,
    expectations: Arc<Expectations>,
    departures: Mutex<Departures>,
}

#[derive(Default)]
struct Departures {
    /// By the parent's uid.
    by_parent: HashMap<String, Vec<(Departed, Instant)>>,
    /// Uids the host is deleting (their `Delete` event is no departure).
    deleting: HashMap<String, Instant>,
}

impl Departures {
    fn count(&self) -> usize {
        self.by_parent.values().map(Vec::len).sum()
    }

    fn purge(&mut self, now: Instant) {
        self.by_parent.retain(|_, gone| {
            gone.retain(|(_, at)| now.duration_since(*at) < DEPARTED_HELD);
            !gone.is_empty()
        });
        self.deleting
            .retain(|_, at| now.duration_since(*at) < DEPARTED_HELD);
    }
}

impl ChildKind {
    /// The caches of `kind` (empty until its watch runs) and that watch:
    /// the objects labelled `selector`, every event applied to the caches;
    /// the stream yields the objects touched.
    pub fn watch(
        client: &Client,
        kind: &ResolvedKind,
        selector: &str,
        expectations: Arc<Expectations>,
    ) -> (
        Arc<Self>,
        impl Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
    ) {
        let writer = Writer::new(kind.resource.clone());
        let caches = Arc::new(Self::new(kind, writer.as_reader(), expectations));
        let api = Api::<DynamicObject>::all_with(client.clone(), &kind.resource);
        let observer = caches.clone();
        let changes = watcher(api, watcher::Config::default().labels(selector))
            .default_backoff()
            .modify(|obj| obj.managed_fields_mut().clear())
            .reflect(writer)
            .inspect(move |event| {
                if let Ok(event) = event {
                    observer.observe(event);
                }
            })
            .touched_objects();
        (caches, changes)
    }

    /// The caches of `kind` over `store`, kept by [`ChildKind::observe`].
    pub fn new(
        kind: &ResolvedKind,
        store: Store<DynamicObject>,
        expectations: Arc<Expectations>,
    ) -> Self {
        Self {
            kind: kind.clone(),
            store,
            owners: OwnerIndex::default(),
            records: Records::new(
                &kind.declared.api_version,
                &kind.declared.kind,
                RECORDS_KEPT,
            ),
            expectations,
            departures: Mutex::default(),
        }
    }

    /// Applies one watch event (already applied to the store).
    pub fn observe(&self, event: &watcher::Event<DynamicObject>) {
        self.owners.apply_watcher_event(event);
        match event {
            watcher::Event::Delete(child) => self.gone(child),
            watcher::Event::InitDone => {
                let listed: HashSet<String> =
                    self.store.state().iter().filter_map(|c| c.uid()).collect();
                self.records.retain(|uid| listed.contains(uid));
            }
            _ => {}
        }
    }

    fn gone(&self, child: &DynamicObject) {
        let Some(uid) = child.uid() else {
            return;
        };
        self.records.forget(&uid);
        self.expectations.observe_gone(&uid);
        let mut departures = self.departures.lock_unpoisoned();
        let deleted_by_host = departures.deleting.remove(&uid).is_some();
        let Some(parent) = controller_uid(child) else {
            return;
        };
        if deleted_by_host || child.metadata.deletion_timestamp.is_some() {
            return;
        }
        let now = Instant::now();
        if departures.count() >= DEPARTED_KEPT {
            departures.purge(now);
            if departures.count() >= DEPARTED_KEPT {
                return;
            }
        }
        let departed = Departed {
            namespace: child.namespace().unwrap_or_default(),
            name: child.name_any(),
            uid,
        };
        departures
            .by_parent
            .entry(parent.to_string())
            .or_default()
            .push((departed, now));
    }

    /// Notes that the host is deleting the child `uid`: when it leaves the
    /// watch it is not looked at as departed.
    pub fn deleting(&self, uid: &str) {
        let mut departures = self.departures.lock_unpoisoned();
        if departures.deleting.len() >= DEPARTED_KEPT {
            departures.purge(Instant::now());
        }
        if departures.deleting.len() < DEPARTED_KEPT {
            departures.deleting.insert(uid.to_string(), Instant::now());
        }
    }

    /// The children of the parent `parent` that left the watch alive since
    /// the last call (each returned once).
    pub fn take_departed(&self, parent: &str) -> Vec<Departed> {
        self.departures
            .lock_unpoisoned()
            .by_parent
            .remove(parent)
            .map(|gone| gone.into_iter().map(|(departed, _)| departed).collect())
            .unwrap_or_default()
    }

    /// Remembers `departed` under `parent` again (a release that failed,
    /// to be retried).
    pub fn departed_again(&self, parent: &str, departed: &[Departed]) {
        let now = Instant::now();
        self.departures
            .lock_unpoisoned()
            .by_parent
            .entry(parent.to_string())
            .or_default()
            .extend(departed.iter().cloned().map(|d| (d, now)));
    }

    /// The cached children of `kind` the object `parent` in `namespace`
    /// controls.
    pub fn children_of(&self, parent: &str, namespace: &str) -> Vec<Arc<DynamicObject>> {
        self.owners
            .owned(&self.store, &self.kind.resource, parent, namespace)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::crd::controller::KindRef;

    fn kind() -> ResolvedKind {
        ResolvedKind::by_convention(&KindRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        })
    }

    fn child(name: &str, owner: &str, version: &str) -> DynamicObject {
        let mut obj = DynamicObject::new(name, &kind().resource).within("ns");
        obj.metadata.uid = Some(format!("uid-{name}"));
        obj.metadata.resource_version = Some(version.into());
        obj.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "Parent".into(),
            name: "p".into(),
            uid: owner.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        obj
    }

    /// The caches and their store's writer, fed the same events as the
    /// watch feeds them.
    fn fed() -> (ChildKind, Writer<DynamicObject>) {
        let writer = Writer::new(kind().resource);
        let expectations = Arc::new(Expectations::new(Duration::from_secs(60)));
        (
            ChildKind::new(&kind(), writer.as_reader(), expectations),
            writer,
        )
    }

    fn send(caches: &ChildKind, writer: &mut Writer<DynamicObject>, event: Event<DynamicObject>) {
        writer.apply_watcher_event(&event);
        caches.observe(&event);
    }

    #[test]
    fn a_child_leaving_alive_is_departed_once_and_deletions_are_not() {
        let (caches, mut writer) = fed();
        for name in ["kept", "unlabelled", "ours", "terminating"] {
            send(&caches, &mut writer, Event::Apply(child(name, "p", "1")));
        }
        assert_eq!(caches.children_of("p", "ns").len(), 4);
        caches.deleting("uid-ours");
        send(&caches, &mut writer, Event::Delete(child("ours", "p", "2")));
        let mut terminating = child("terminating", "p", "2");
        terminating.metadata.deletion_timestamp = Some(
            serde_json::from_value::<Time>(serde_json::json!("2026-11-29T00:00:00Z"))
                .expect("time"),
        );
        send(&caches, &mut writer, Event::Delete(terminating));
        send(
            &caches,
            &mut writer,
            Event::Delete(child("unlabelled", "p", "2")),
        );
        assert_eq!(
            caches.take_departed("p"),
            [Departed {
                namespace: "ns".into(),
                name: "unlabelled".into(),
                uid: "uid-unlabelled".into(),
            }]
        );
        assert!(caches.take_departed("p").is_empty(), "returned once");
        assert_eq!(caches.children_of("p", "ns").len(), 1);
    }

    #[test]
    fn records_are_forgotten_with_their_object_and_after_a_relist() {
        let (caches, mut writer) = fed();
        send(&caches, &mut writer, Event::Apply(child("a", "p", "1")));
        send(&caches, &mut writer, Event::Apply(child("b", "p", "1")));
        let owned = caches.children_of("p", "ns");
        caches.records.put_back(
            caches
                .records
                .take_children(owned.iter().map(AsRef::as_ref)),
        );
        assert_eq!(caches.records.len(), 2);
        send(&caches, &mut writer, Event::Delete(child("a", "p", "2")));
        assert_eq!(caches.records.len(), 1);
        send(&caches, &mut writer, Event::Init);
        send(&caches, &mut writer, Event::InitDone);
        assert!(caches.records.is_empty(), "b was not listed again");
    }
}
