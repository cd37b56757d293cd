//! The informers: watch streams of Jinghzhus and of the Pods this operator
//! manages, each feeding a cache (reflector store).
//!
//! Jinghzhus are watched as [`Incoming`] and so decoded one by one (see
//! [`crate::crd::incoming`]): an object the host cannot read (a template
//! nested thousands of levels deep, or whose `containers` is a string, both
//! of which the CRD's open template schema lets through) is reported once
//! per version (an `InvalidObject` Warning Event naming the rule, and a log
//! line) and left out of the cache, and every other object keeps
//! converging. A typed watch (or one into `DynamicObject`, whose
//! `serde_json::Value` has serde_json's depth limit too; kube's
//! `DeserializeGuard` buffers the same way) would fail the whole list on
//! that one object and stop the operator for the cluster.
//!
//! Only our own pods are watched (label `app.kubernetes.io/managed-by=wasm-operator`),
//! and each is decoded straight into what reconciles and plugins read
//! ([`CachedPod`]): its metadata without `managedFields`, its phase and its
//! `Ready` condition. The spec and the rest of the status are most of a
//! pod's size and nothing here reads them. Every pod event updates the
//! [`OwnerIndex`], then the pod cache next to it, then the expectations of its
//! controlling Jinghzhu (a pod seen for the first time, one gone), in that
//! order (see [`PodEvents`]); a pod that leaves the selection alive (a label
//! removed) holds its owner first ([`super::strays`]); a deleted
//! Jinghzhu's bookkeeping is dropped. The echo of the host's own status
//! write updates the Jinghzhu cache but queues nothing (see
//! [`crate::apply::own_writes`]).
//!
//! Sharded (`--shards N`), both watches select on the shard label as well
//! (`jinghzhu.io/shard in (3-of-N,7-of-N)`, see [`crate::shards`]) and are
//! restarted with a new selector whenever the set of held shards changes
//! ([`selected`]): the new watch's quorum list replaces the cache whole at
//! its `InitDone` (objects of dropped shards leave, those of new ones come
//! in), and [`Synced`] says which selection the caches show.
//!
//! Each list is bounded ([`crate::kube_api::list_bounds`]: pages, bytes and repeated
//! `continue` tokens in the client, items on these streams) and a failed
//! or refused one is tried again after a backoff that the next list's
//! start does not reset; on its failure each cache drops what it had
//! buffered of it, so an abandoned list holds no memory while it waits.
//! Pod lists are sized to the Jinghzhus served ([`crate::kube_api::list_bounds`],
//! rule `list/sized-to-work`): the pod watch lists only once the Jinghzhu
//! cache holds a list of the same selection, so the count is known. The
//! pods no Jinghzhu controls never reach these streams: the client leaves
//! them out ([`crate::kube_api::list_bounds::pods`]), and a pod that stops being
//! controlled arrives as a `DELETED` event without an owner.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::kube_api::list_bounds::ListBounds;
use crate::kube_api::list_bounds::stream::bounded_watcher;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::PerObject;
use super::owner_index::OwnerIndex;
use crate::cached_pod::CachedPod;
use crate::crd::Jinghzhu;
use crate::crd::incoming::{Incoming, Unreadable};
use crate::locks::MutexExt;
use crate::ownership::MANAGED_BY_SELECTOR;
use crate::shards::hash::selector_in;
use crate::telemetry::events::{EventSink, QueuedEvent};
use crate::telemetry::metrics::WatchLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// A watch stream of `K`s, boxed.
pub type ObjectStream<K> = std::pin::Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// The two watch streams (to hand to the controller) and their caches.
pub struct Watches {
    /// Jinghzhus, as triggers (added or modified).
    pub jinghzhus: ObjectStream<Jinghzhu>,
    /// The Jinghzhu cache.
    pub jinghzhu_cache: Store<Jinghzhu>,
    /// Our pods, as triggers for their owners (added, modified or deleted).
    pub pods: ObjectStream<CachedPod>,
    /// The pod cache.
    pub pod_cache: Store<CachedPod>,
    /// Which cached pods each owner UID controls.
    pub pod_owners: OwnerIndex,
    /// Sharded: which selection each cache shows.
    pub synced: Option<Synced>,
}

/// The shards the watches select (sharded mode); a new `generation`
/// restarts them even when the set is unchanged (a shard taken again needs
/// a fresh list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSelection {
    /// Counts restarts.
    pub generation: u64,
    /// Held shards.
    pub shards: BTreeSet<u32>,
    /// The shard count.
    pub count: u32,
}

impl ShardSelection {
    /// The label selector of this selection.
    pub fn selector(&self) -> String {
        selector_in(&self.shards, self.count)
    }
}

/// The generation of the last [`ShardSelection`] whose initial list each cache
/// holds (updated right after the cache swapped it in).
#[derive(Debug, Clone)]
pub struct Synced {
    /// The Jinghzhu cache.
    pub jinghzhus: tokio::sync::watch::Receiver<u64>,
    /// The pod cache.
    pub pods: tokio::sync::watch::Receiver<u64>,
}

type EventStream<K> =
    std::pin::Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send>>;

/// The selection generation whose Jinghzhu list the cache last took in
/// (`None` before the first).
pub type JinghzhusListed = tokio::sync::watch::Receiver<Option<u64>>;

/// `watch`, polled only once `listed` shows a Jinghzhu list of selection
/// `generation` or a later one (at once without `listed`).
fn after_jinghzhus_listed<K: Send + 'static>(
    listed: Option<JinghzhusListed>,
    generation: u64,
    watch: EventStream<K>,
) -> EventStream<K> {
    let Some(mut listed) = listed else {
        return watch;
    };
    Box::pin(
        futures::stream::once(async move {
            // A closed channel (the Jinghzhu stream ended) waits no more.
            let _ = listed
                .wait_for(|l| l.is_some_and(|l| l >= generation))
                .await;
            watch
        })
        .flatten(),
    )
}

/// A watch of `api` with `config` (plus the selection's label selector
/// when sharded) that restarts with the new selector whenever `selection`
/// changes. `started` is set to the generation of the watch now running.
/// With `listed`, each watch (the first, and each for a new selection)
/// starts only once the Jinghzhu cache holds that selection's list.
pub fn selected<K>(
    api: Api<K>,
    config: watcher::Config,
    selection: Option<tokio::sync::watch::Receiver<ShardSelection>>,
    started: Arc<AtomicU64>,
    (bounds, listed): (ListBounds, Option<JinghzhusListed>),
) -> EventStream<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let Some(mut selection) = selection else {
        return after_jinghzhus_listed(listed, 0, bounded_watcher(api, config, bounds));
    };
    let make = move |sel: &ShardSelection| -> EventStream<K> {
        let labels = match &config.label_selector {
            Some(base) => format!("{base},{}", sel.selector()),
            None => sel.selector(),
        };
        started.store(sel.generation, Ordering::SeqCst);
        tracing::info!(kind = %K::kind(&K::DynamicType::default()), selector = %labels, generation = sel.generation,
            "sharding: (re)starting the watch for the shards held");
        after_jinghzhus_listed(
            listed.clone(),
            sel.generation,
            bounded_watcher(api.clone(), config.clone().labels(&labels), bounds.clone()),
        )
    };
    let first = make(&selection.borrow_and_update());
    Box::pin(futures::stream::unfold(
        (selection, first, make, true),
        |(mut selection, mut current, make, mut open)| async move {
            loop {
                tokio::select! {
                    biased;
                    changed = selection.changed(), if open => {
                        if changed.is_err() {
                            open = false;
                            continue;
                        }
                        let next = selection.borrow_and_update().clone();
                        current = make(&next);
                    }
                    item = current.next() => {
                        return item.map(|item| (item, (selection, current, make, open)));
                    }
                }
            }
        },
    ))
}

/// Counts each list a watch of `kind` starts (`Init`: the first, or a
/// relist) in `wasm_operator_watch_lists_total`, and logs it: a relist
/// after a watch outage is otherwise silent.
fn count_lists<K>(
    lists: &Family<WatchLabels, Counter>,
    kind: &'static str,
) -> impl FnMut(&watcher::Event<K>) + use<K> {
    let counter = lists
        .get_or_create(&WatchLabels { kind: kind.into() })
        .clone();
    move |event| {
        if matches!(event, watcher::Event::Init) {
            counter.inc();
            tracing::info!(
                kind,
                lists = counter.get(),
                "watch: listing (its first list, or a relist)"
            );
        }
    }
}

/// kube's `reflect(writer)`, that also drops what a failed or refused list
/// had buffered (see [`crate::kube_api::list_bounds`]; outside a list the buffer is
/// empty).
fn reflect_abandoning<K>(
    mut writer: reflector::store::Writer<K>,
) -> impl FnMut(Result<watcher::Event<K>, watcher::Error>) -> Result<watcher::Event<K>, watcher::Error>
where
    K: kube::runtime::reflector::Lookup + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    move |event| {
        match &event {
            Ok(event) => writer.apply_watcher_event(event),
            Err(_) => writer.apply_watcher_event(&watcher::Event::Init),
        }
        event
    }
}

/// At each `InitDone` of the Jinghzhu watch (the cache has swapped the
/// list in): pod lists are sized to `cache` from now on, and `listed`
/// says which selection's list it holds.
fn size_pod_lists(
    bounds: ListBounds,
    cache: Store<Jinghzhu>,
    started: Arc<AtomicU64>,
    listed: tokio::sync::watch::Sender<Option<u64>>,
) -> impl FnMut(&watcher::Event<Jinghzhu>) {
    move |event| {
        if matches!(event, watcher::Event::InitDone) {
            bounds.pods.serve(cache.clone());
            listed.send_replace(Some(started.load(Ordering::SeqCst)));
        }
    }
}

/// Publishes `started` into `synced` at each `InitDone` (after the cache
/// swapped the list in).
fn publish_synced<K>(
    started: Arc<AtomicU64>,
    synced: tokio::sync::watch::Sender<u64>,
) -> impl FnMut(&watcher::Event<K>) {
    move |event| {
        if matches!(event, watcher::Event::InitDone) {
            synced.send_replace(started.load(Ordering::SeqCst));
        }
    }
}

/// Keeps a Jinghzhu event unless it is the echo of our own status write.
fn not_our_own_write(
    objects: Arc<PerObject>,
) -> impl FnMut(&Jinghzhu) -> futures::future::Ready<bool> {
    move |jz| {
        let echo = objects.own_writes.is_echo(jz);
        if echo {
            tracing::debug!(
                object = %object_key(jz),
                resource_version = jz.resource_version().unwrap_or_default(),
                "event seen: our own status write; not queued"
            );
        }
        futures::future::ready(!echo)
    }
}

fn log_queued_jinghzhu(jz: &Jinghzhu) {
    tracing::debug!(
        object = %object_key(jz),
        generation = jz.metadata.generation.unwrap_or_default(),
        desired = jz.spec.desired,
        resource_version = jz.resource_version().unwrap_or_default(),
        "event seen: Jinghzhu changed; queued"
    );
}

fn log_queued_pod(pod: &CachedPod) {
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{}/{}", pod.namespace().unwrap_or_default(), o.name));
    tracing::debug!(
        pod = %object_key(pod),
        owner = owner.as_deref().unwrap_or("-"),
        phase = pod.phase.as_deref().unwrap_or("-"),
        terminating = pod.metadata.deletion_timestamp.is_some(),
        "event seen: Pod changed; owner queued"
    );
}

impl Watches {
    /// Builds the streams (they start when polled by the controller).
    pub fn start(
        client: &Client,
        namespace: Option<&str>,
        objects: Arc<PerObject>,
        events: EventSink,
        selection: Option<tokio::sync::watch::Receiver<ShardSelection>>,
        lists: Family<WatchLabels, Counter>,
        bounds: ListBounds,
    ) -> Self {
        let jz_started = Arc::new(AtomicU64::new(0));
        let pod_started = Arc::new(AtomicU64::new(0));
        let (jz_synced_tx, jz_synced) = tokio::sync::watch::channel(0);
        let (pod_synced_tx, pod_synced) = tokio::sync::watch::channel(0);
        let synced = selection.as_ref().map(|_| Synced {
            jinghzhus: jz_synced,
            pods: pod_synced,
        });
        let (jinghzhu_api, pod_api): (Api<Incoming>, Api<CachedPod>) = match namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };

        let (jinghzhu_cache, jinghzhu_writer) = reflector::store();
        let (listed_tx, listed) = tokio::sync::watch::channel(None);
        let pods_wait_for_jinghzhus = bounds.pods.sized_to_work().then_some(listed);
        let decoder = Decoder {
            objects: objects.clone(),
            events,
            reported: Arc::new(Mutex::new(HashSet::new())),
        };
        let jinghzhus = selected(
            jinghzhu_api,
            watcher::Config::default(),
            selection.clone(),
            jz_started.clone(),
            (bounds.clone(), None),
        )
        .filter_map(move |event| futures::future::ready(decoder.decode(event)))
        .inspect_ok(count_lists(&lists, "jinghzhu"))
        .map(reflect_abandoning(jinghzhu_writer))
        .inspect_ok(size_pod_lists(
            bounds.clone(),
            jinghzhu_cache.clone(),
            jz_started.clone(),
            listed_tx,
        ))
        .inspect_ok(publish_synced(jz_started, jz_synced_tx))
        .applied_objects()
        .try_filter(not_our_own_write(objects.clone()))
        .inspect_ok(log_queued_jinghzhu);

        let (pod_cache, pod_writer) = reflector::store();
        let pod_owners = OwnerIndex::default();
        let mut pod_events = PodEvents {
            writer: pod_writer,
            cache: pod_cache.clone(),
            owners: pod_owners.clone(),
            objects,
            listed: Vec::new(),
        };
        let pods = selected(
            pod_api,
            watcher::Config::default().labels(MANAGED_BY_SELECTOR),
            selection,
            pod_started.clone(),
            (bounds, pods_wait_for_jinghzhus),
        )
        .inspect_ok(count_lists(&lists, "pod"))
        .map(move |event| match event {
            Ok(event) => {
                let released = pod_events.released(&event);
                pod_events.apply(&event);
                Ok(released.unwrap_or(event))
            }
            Err(err) => {
                pod_events.abandon_list();
                Err(err)
            }
        })
        .inspect_ok(publish_synced(pod_started, pod_synced_tx))
        .touched_objects()
        .inspect_ok(log_queued_pod);

        Self {
            jinghzhus: Box::pin(jinghzhus),
            jinghzhu_cache,
            pods: Box::pin(pods),
            pod_cache,
            pod_owners,
            synced,
        }
    }
}

/// Applies each pod watch event to the owner index, then the pod cache,
/// then the expectations, in that order. A reconcile reads the index, then
/// the cache, then checks its expectations; so an expectation may be
/// released only once the index and the cache show the pod that releases
/// it. The cache comes after the index because the cache's first `InitDone`
/// makes it ready: with the cache first, a reconcile that had waited for
/// it read the index still empty, saw no pods and created all of them
/// again (a restart test caught 38 pods for 30). Between the two, a
/// reconcile sees only the pods both show, in either order. (Released first, as when this ran before the cache's update, a
/// reconcile in between found its expectations met but not the new pod,
/// and created it again: a double create the sharded kill test caught.)
/// An answered create is released only by a reconcile whose snapshot
/// shows its pod ([`crate::apply::expectations`]), never by this event.
/// A pod that a (re)list shows is in the cache only from the list's
/// `InitDone`, so its arrival is told then.
struct PodEvents {
    writer: reflector::store::Writer<CachedPod>,
    cache: Store<CachedPod>,
    owners: OwnerIndex,
    objects: Arc<PerObject>,
    /// (owner UID, pod UID) of the pods first seen in the list under way.
    listed: Vec<(String, String)>,
}

impl PodEvents {
    fn apply(&mut self, event: &watcher::Event<CachedPod>) {
        use watcher::Event as E;
        let arrived = match event {
            E::Apply(pod) | E::InitApply(pod) => self.first_seen(pod),
            _ => None,
        };
        let expectations = &self.objects.expectations;
        // Gone while not terminating: most likely a label removed (the
        // watch's selector no longer matches it). Its owner is held until
        // a read tells ([`super::strays`]); held before the cache drops
        // the pod, so no reconcile sees it missing without the hold.
        if let E::Delete(pod) = event
            && pod.metadata.deletion_timestamp.is_none()
            && let (Some(uid), Some(owner)) = (pod.uid(), controller_uid(pod))
        {
            expectations.stray(owner, &uid, &pod.name_any(), super::strays::STRAY_HOLD);
        }
        // The index first: the writer's first `InitDone` marks the cache
        // ready, and a reconcile waiting for that must find the index
        // holding the list too.
        self.owners.apply_watcher_event(event);
        self.writer.apply_watcher_event(event);
        match event {
            E::Apply(_) => {
                if let Some((owner, uid)) = arrived {
                    expectations.observe_added(&owner, &uid);
                }
            }
            E::InitApply(_) => self.listed.extend(arrived),
            E::Init => self.listed.clear(),
            E::InitDone => {
                for (owner, uid) in self.listed.drain(..) {
                    expectations.observe_added(&owner, &uid);
                }
            }
            E::Delete(pod) => {
                if let Some(uid) = pod.uid() {
                    expectations.observe_gone(&uid);
                }
            }
        }
        expectations.pod_event_applied();
    }

    /// A pod whose event takes it out of the cache with no controller (what
    /// the client sends in place of a pod a Jinghzhu no longer controls,
    /// see [`crate::kube_api::list_bounds::pods`]) while its cached version had one:
    /// that version, for the triggers downstream, so its former owner is
    /// queued and replaces it. Asked before the event is applied; the
    /// event itself (no owner) holds nobody as a stray.
    fn released(&self, event: &watcher::Event<CachedPod>) -> Option<watcher::Event<CachedPod>> {
        let watcher::Event::Delete(pod) = event else {
            return None;
        };
        if controller_uid(pod).is_some() {
            return None;
        }
        let cached = self.cache.get(&ObjectRef::from_obj(pod))?;
        (cached.uid() == pod.uid() && controller_uid(&cached).is_some())
            .then(|| watcher::Event::Delete((*cached).clone()))
    }

    /// Drops what the list under way had buffered (a failed or refused list,
    /// see [`crate::kube_api::list_bounds`]: the watcher starts the next one afresh);
    /// nothing is buffered outside a list.
    fn abandon_list(&mut self) {
        self.writer.apply_watcher_event(&watcher::Event::Init);
        self.owners
            .apply_watcher_event(&watcher::Event::<CachedPod>::Init);
        self.listed = Vec::new();
    }

    /// (owner UID, pod UID) of a controlled pod the cache does not hold
    /// yet (or holds under another UID); asked before the event is applied.
    fn first_seen(&self, pod: &CachedPod) -> Option<(String, String)> {
        let uid = pod.uid()?;
        let owner = controller_uid(pod)?;
        self.cache
            .get(&ObjectRef::from_obj(pod))
            .is_none_or(|cached| cached.uid().as_deref() != Some(uid.as_str()))
            .then(|| (owner.to_string(), uid))
    }
}

/// UID of a pod's controlling owner.
fn controller_uid(pod: &CachedPod) -> Option<&str> {
    pod.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Turns Jinghzhu watch events into typed ones, reporting each object that
/// cannot be read.
struct Decoder {
    objects: Arc<PerObject>,
    events: EventSink,
    /// `uid/resourceVersion` of unreadable objects already reported.
    reported: Arc<Mutex<HashSet<String>>>,
}

impl Decoder {
    fn decode(
        &self,
        event: Result<watcher::Event<Incoming>, watcher::Error>,
    ) -> Option<Result<watcher::Event<Jinghzhu>, watcher::Error>> {
        use watcher::Event as E;
        let event = match event {
            Ok(event) => event,
            Err(err) => return Some(Err(err)),
        };
        Some(Ok(match event {
            E::Init => {
                // A re-list may skip the echo of a write on its way.
                self.objects.own_writes.clear();
                E::Init
            }
            E::InitDone => E::InitDone,
            E::InitApply(obj) => E::InitApply(self.typed(obj)?),
            E::Apply(obj) => match self.typed_or_gone(obj) {
                Ok(jz) => E::Apply(jz),
                // Unreadable now: drop any older, readable version from the
                // cache, so nothing acts on a spec the user has replaced.
                Err(placeholder) => E::Delete(*placeholder),
            },
            E::Delete(obj) => {
                if let Some(uid) = obj.uid() {
                    self.objects.forget(&uid);
                    let prefix = format!("{uid}/");
                    self.reported
                        .lock_unpoisoned()
                        .retain(|key| !key.starts_with(&prefix));
                }
                // Gone: nothing to report, whatever its shape.
                E::Delete(match obj.into_result() {
                    Ok(jz) => jz,
                    Err(unreadable) => unreadable.placeholder(),
                })
            }
        }))
    }

    fn typed(&self, obj: Incoming) -> Option<Jinghzhu> {
        self.typed_or_gone(obj).ok()
    }

    /// The typed object, or (when it cannot be read) an empty Jinghzhu with
    /// its identity, after reporting why.
    fn typed_or_gone(&self, obj: Incoming) -> Result<Jinghzhu, Box<Jinghzhu>> {
        obj.into_result().map_err(|unreadable| {
            self.report(&unreadable);
            Box::new(unreadable.placeholder())
        })
    }

    fn report(&self, obj: &Unreadable) {
        let key = format!(
            "{}/{}",
            obj.metadata.uid.as_deref().unwrap_or_default(),
            obj.metadata.resource_version.as_deref().unwrap_or_default()
        );
        if !self.reported.lock_unpoisoned().insert(key) {
            return;
        }
        let object = format!(
            "{}/{}",
            obj.metadata.namespace.as_deref().unwrap_or_default(),
            obj.metadata.name.as_deref().unwrap_or_default()
        );
        let note = obj.note();
        tracing::warn!(%object, rule = obj.rule, reason = %obj.reason, "skipping a Jinghzhu the host cannot read");
        let reference = ObjectReference {
            api_version: Some(Jinghzhu::api_version(&()).into_owned()),
            kind: Some(Jinghzhu::kind(&()).into_owned()),
            name: obj.metadata.name.clone(),
            namespace: obj.metadata.namespace.clone(),
            uid: obj.metadata.uid.clone(),
            resource_version: obj.metadata.resource_version.clone(),
            ..ObjectReference::default()
        };
        self.events.send(QueuedEvent {
            event: Event {
                type_: EventType::Warning,
                reason: "InvalidObject".into(),
                note: Some(note),
                action: "Decode".into(),
                secondary: None,
            },
            regarding: reference,
            object,
        });
    }
}

pub use crate::crd::object_key;

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn owned_pod(name: &str, owner: &str) -> CachedPod {
        wasm_operator_testkit::pod(name)
            .namespace("ns")
            .uid(&format!("uid-{name}"))
            .controller("web", owner)
            .cached()
    }

    fn pod_events() -> PodEvents {
        let (cache, writer) = reflector::store();
        PodEvents {
            writer,
            cache,
            owners: OwnerIndex::default(),
            objects: Arc::new(PerObject::new(
                std::time::Duration::from_secs(300),
                crate::controller::budget::BudgetConfig {
                    burst: 10,
                    per_minute: 60,
                },
                std::time::Duration::ZERO,
            )),
            listed: Vec::new(),
        }
    }

    /// What a reconcile of `owner` would find: its expectations checked
    /// against the pods the index and the cache show it.
    fn reconcile_would_act(events: &PodEvents, owner: &str) -> bool {
        let jz: Jinghzhu = serde_json::from_value(serde_json::json!({
            "apiVersion": "jinghzhu.io/v1", "kind": "Jinghzhu",
            "metadata": {"name": "web", "namespace": "ns", "uid": owner},
            "spec": {"desired": 1}
        }))
        .expect("jinghzhu");
        let pods = crate::controller::owner_index::owned_pods(&events.owners, &events.cache, &jz);
        let seen: HashSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        events
            .objects
            .expectations
            .satisfied(owner, |uid| seen.contains(uid).then_some(false))
    }

    #[test]
    fn an_expectation_is_released_only_once_the_cache_shows_its_pod() {
        // A pod we created shows up in a watch event.
        let mut events = pod_events();
        events.apply(&watcher::Event::InitDone);
        events.objects.expectations.expect_creations("j1", 1);
        events.objects.expectations.created("j1", "uid-web-a");
        assert!(!reconcile_would_act(&events, "j1"));
        events.apply(&watcher::Event::Apply(owned_pod("web-a", "j1")));
        assert!(reconcile_would_act(&events, "j1"));

        // One whose create answer was lost, shown by a relist (a watch
        // restarted for new shards): the cache takes the list in at its
        // end, and until then a reconcile must still wait, or it would
        // create the pod again.
        let mut events = pod_events();
        events.apply(&watcher::Event::InitDone);
        events.objects.expectations.expect_creations("j1", 1);
        events.apply(&watcher::Event::Init);
        events.apply(&watcher::Event::InitApply(owned_pod("web-b", "j1")));
        assert!(
            !reconcile_would_act(&events, "j1"),
            "released before the cache shows the pod"
        );
        events.apply(&watcher::Event::InitDone);
        assert!(reconcile_would_act(&events, "j1"));
        assert_eq!(events.cache.state().len(), 1);

        // A deleted pod (its last state says so): released once the cache
        // no longer shows it live.
        let mut pod = owned_pod("web-b", "j1");
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        events
            .objects
            .expectations
            .expect_deleted("j1", "uid-web-b");
        assert!(!reconcile_would_act(&events, "j1"));
        events.apply(&watcher::Event::Delete(pod));
        assert!(events.cache.state().is_empty());
        assert!(reconcile_would_act(&events, "j1"));

        // One that left the selection alive (a label removed): its owner
        // is held until the cache shows it again.
        events.apply(&watcher::Event::Apply(owned_pod("web-c", "j1")));
        events.apply(&watcher::Event::Delete(owned_pod("web-c", "j1")));
        assert!(
            !reconcile_would_act(&events, "j1"),
            "a stray holds its owner"
        );
        events.apply(&watcher::Event::Apply(owned_pod("web-c", "j1")));
        assert!(reconcile_would_act(&events, "j1"));
    }

    #[test]
    fn a_pod_released_by_its_owner_leaves_the_cache_and_names_the_owner_it_left() {
        let mut events = pod_events();
        events.apply(&watcher::Event::InitDone);
        let pod = owned_pod("web-a", "j1");
        events.apply(&watcher::Event::Apply(pod.clone()));
        // What the client sends once the pod has no controller: its
        // identity alone.
        let mut stub = CachedPod::default();
        stub.metadata.name = pod.metadata.name.clone();
        stub.metadata.namespace = pod.metadata.namespace.clone();
        stub.metadata.uid = pod.metadata.uid.clone();
        let gone = watcher::Event::Delete(stub.clone());
        let released = events.released(&gone);
        events.apply(&gone);
        assert!(events.cache.state().is_empty());
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        assert!(
            events
                .owners
                .owned(&events.cache, &(), "j1", &namespace)
                .is_empty()
        );
        // Its former owner is told (the cached version carries it), and
        // not held as if the pod had strayed.
        let Some(watcher::Event::Delete(told)) = released else {
            panic!("the released pod's cached version")
        };
        assert_eq!(controller_uid(&told), Some("j1"));
        assert!(events.objects.expectations.take_strays("j1").is_empty());
        // A deletion the cache cannot match (another uid, or not cached) is left as it is.
        events.apply(&watcher::Event::Apply(pod.clone()));
        stub.metadata.uid = Some("another".into());
        assert!(
            events
                .released(&watcher::Event::Delete(stub.clone()))
                .is_none()
        );
        stub.metadata.name = Some("web-z".into());
        assert!(events.released(&watcher::Event::Delete(stub)).is_none());
        assert!(events.released(&watcher::Event::Delete(pod)).is_none());
    }

    #[test]
    fn a_cached_pod_gives_plugins_and_counts_what_the_full_pod_does() {
        let json = serde_json::json!({
            "metadata": {
                "name": "web-abcde", "namespace": "default", "uid": "p1",
                "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "jinghzhu.io/v1", "kind": "Jinghzhu",
                                     "name": "web", "uid": "j1", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]
            },
            "spec": {"containers": [{"name": "app", "image": "pause"}], "nodeName": "node-0"},
            "status": {
                "phase": "Running", "podIP": "10.0.0.7", "hostIP": "10.0.0.1",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T00:00:00Z"}
                ],
                "containerStatuses": [{"name": "app", "image": "pause", "imageID": "",
                                       "ready": true, "restartCount": 0}]
            }
        });
        let pod: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(json.clone()).expect("pod");
        let cached: CachedPod = serde_json::from_value(json).expect("cached pod");
        let seen = cached.to_pod();
        let jz = crate::crd::Jinghzhu::new("web", Default::default());

        assert!(seen.spec.is_none());
        assert!(seen.metadata.managed_fields.is_none());
        let status = seen.status.clone().expect("status");
        assert!(status.pod_ip.is_none() && status.container_statuses.is_none());
        assert_eq!(
            seen.metadata.owner_references,
            pod.metadata.owner_references
        );
        // What a plugin is given and what the host counts are unchanged.
        let before = crate::runtime::convert::input(&jz, std::slice::from_ref(&pod), UNIX_EPOCH);
        let after = crate::runtime::convert::input(&jz, std::slice::from_ref(&seen), UNIX_EPOCH);
        assert_eq!(format!("{:?}", after.pods), format!("{:?}", before.pods));
        assert_eq!(crate::observed::ready_replicas([&seen]), 1);
        assert_eq!(crate::observed::ready_replicas([&pod]), 1);
    }
}
