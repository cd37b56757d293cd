//! What the host's caches cost per entry:
//! - a cached pod: 3000 pods as the API server sends them (spec, conditions,
//!   IP, managedFields), decoded into `CachedPod` as the watch does, in a
//!   kube reflector store;
//! - a remembered Event: 5000 Events as the event writer remembers them for
//!   series, against what kube's `Recorder` kept for each (its key and the
//!   whole Event, rebuilt here field by field).
//!
//! Heap bytes in use are read from glibc before and after. The tests take a
//! lock, so no other test allocates meanwhile.
//!
//! `cargo test -p wasm-operator --test cache_footprint -- --nocapture`

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event as EventToWrite, EventType};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use wasm_operator::cached_pod::{CachedPod, MAX_CACHED_METADATA_BYTES, OMITTED_ANNOTATION};
use wasm_operator::telemetry::event_writer::{
    RECENT_CAPACITY, RecentEvents, RepeatKey, SERIES_WINDOW,
};

/// One measurement at a time.
static MEASURING: Mutex<()> = Mutex::new(());

/// Heap bytes in use: all arenas, plus the large blocks glibc maps on their
/// own (a big hash table's).
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads glibc's own statistics.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

fn pod_json(i: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web-{i:05}-x7k2q","generateName":"web-{i:05}-","namespace":"scale-bench","uid":"6f1c1a52-3b0e-4f57-9d3a-{i:012}","resourceVersion":"{rv}","creationTimestamp":"2026-11-23T23:00:00Z","labels":{{"app.kubernetes.io/managed-by":"wasm-operator","jinghzhu.io/owner":"web-{i:05}"}},"ownerReferences":[{{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","name":"web-{i:05}","uid":"7a1c1a52-3b0e-4f57-9d3a-{i:012}","controller":true,"blockOwnerDeletion":true}}],"managedFields":[{{"manager":"wasm-operator","operation":"Update","apiVersion":"v1","time":"2026-11-23T23:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:generateName":{{}},"f:labels":{{".":{{}},"f:app.kubernetes.io/managed-by":{{}}}}}}}}}}]}},"spec":{{"containers":[{{"name":"pause","image":"registry.k8s.io/pause:3.10","resources":{{}},"securityContext":{{"allowPrivilegeEscalation":false,"capabilities":{{"drop":["ALL"]}}}}}}],"nodeName":"kwok-node-0","restartPolicy":"Always","securityContext":{{"runAsNonRoot":true,"seccompProfile":{{"type":"RuntimeDefault"}}}}}},"status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True"}},{{"type":"Ready","status":"True","lastTransitionTime":"2026-11-23T23:00:01Z"}},{{"type":"ContainersReady","status":"True"}},{{"type":"PodScheduled","status":"True"}}],"podIP":"10.0.0.1","hostIP":"10.0.0.2","startTime":"2026-11-23T23:00:01Z"}}}}"#,
        rv = 100_000 + i
    )
}

#[test]
fn a_cached_pod_costs_less_than_2_kib() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    const PODS: usize = 3000;
    let (store, mut writer): (_, Writer<CachedPod>) = reflector::store();
    let before = heap_in_use();
    for i in 0..PODS {
        let pod: CachedPod = serde_json::from_str(&pod_json(i)).expect("pod JSON");
        writer.apply_watcher_event(&Event::Apply(pod));
    }
    let per_pod = heap_in_use().saturating_sub(before) / PODS;
    assert_eq!(store.state().len(), PODS);
    eprintln!(
        "a cached pod: {per_pod} bytes on the heap (the CachedPod struct alone: {} bytes, a k8s-openapi Pod: {} bytes)",
        std::mem::size_of::<CachedPod>(),
        std::mem::size_of::<Pod>()
    );
    // The same pods as k8s-openapi `Pod`s took 9378 bytes each, and 3826
    // with the spec, managedFields and all but the Ready condition dropped.
    assert!(per_pod < 2048, "{per_pod} bytes per cached pod");
}

#[test]
fn a_pod_someone_annotated_with_250_kib_costs_at_most_the_per_pod_cap() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    const PODS: usize = 200;
    const BLOB: usize = 250 * 1024;
    let blob = "y".repeat(BLOB);
    let (store, mut writer): (_, Writer<CachedPod>) = reflector::store();
    let before = heap_in_use();
    for i in 0..PODS {
        // As the API server sends it: the pod, annotated by someone else
        // (a 250 KiB value) and by its plugin (16 KiB, the most it may).
        let mut json: serde_json::Value = serde_json::from_str(&pod_json(i)).expect("pod JSON");
        json["metadata"]["annotations"] = serde_json::json!({
            "example.com/blob": blob,
            "plugin.jinghzhu.io/fat": "x".repeat(16 * 1024 - 22),
        });
        let text = json.to_string();
        drop(json);
        let pod: CachedPod = serde_json::from_str(&text).expect("pod JSON");
        drop(text);
        writer.apply_watcher_event(&Event::Apply(pod));
    }
    let per_pod = heap_in_use().saturating_sub(before) / PODS;
    assert_eq!(store.state().len(), PODS);
    let kept = store.state()[0]
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert!(kept.contains_key("plugin.jinghzhu.io/fat"));
    assert!(kept.contains_key(OMITTED_ANNOTATION));
    assert!(!kept.contains_key("example.com/blob"));
    eprintln!(
        "a cached pod annotated with {} KiB by someone else and 16 KiB by its plugin: {per_pod} bytes \
         on the heap (all of it kept would be over {} bytes)",
        BLOB / 1024,
        BLOB + 16 * 1024
    );
    assert!(
        per_pod < 2048 + MAX_CACHED_METADATA_BYTES,
        "{per_pod} bytes per cached pod"
    );
}

/// The Jinghzhu an Event is about, as `object_ref` makes it.
fn regarding(i: usize) -> ObjectReference {
    ObjectReference {
        api_version: Some("jinghzhu.io/v1".into()),
        kind: Some("Jinghzhu".into()),
        namespace: Some("scale-bench".into()),
        name: Some(format!("bench-{i:05}")),
        uid: Some(format!("7a1c1a52-3b0e-4f57-9d3a-{i:012}")),
        resource_version: Some(format!("{}", 100_000 + i)),
        ..ObjectReference::default()
    }
}

fn event(i: usize) -> EventToWrite {
    EventToWrite {
        type_: EventType::Normal,
        reason: "SuccessfulCreate".into(),
        note: Some(format!(
            "Created 3 pod(s): bench-{i:05}-x7k2q, bench-{i:05}-b9d4m, bench-{i:05}-p3z8w"
        )),
        action: "Reconcile".into(),
        secondary: None,
    }
}

/// kube's `Reference`: an `ObjectReference` hashed on its identity.
#[derive(PartialEq)]
struct KubeReference(ObjectReference);

impl Eq for KubeReference {}

impl std::hash::Hash for KubeReference {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.api_version.hash(state);
        self.0.kind.hash(state);
        self.0.name.hash(state);
        self.0.namespace.hash(state);
        self.0.uid.hash(state);
    }
}

/// kube's `Recorder` cache key: its `EventKey`'s fields.
type KubeEventKey = (
    EventType,
    String,
    String,
    String,
    Option<String>,
    KubeReference,
    Option<KubeReference>,
);

/// What kube's `Recorder` kept per Event: the key and the Event it created.
fn kube_recorder_entry(i: usize) -> (KubeEventKey, K8sEvent) {
    let ev = event(i);
    let regarding = regarding(i);
    let now = Timestamp::now();
    let key = (
        ev.type_,
        ev.action.clone(),
        ev.reason.clone(),
        "wasm-operator".to_string(),
        None,
        KubeReference(regarding.clone()),
        None,
    );
    let event = K8sEvent {
        action: Some(ev.action),
        reason: Some(ev.reason),
        event_time: Some(MicroTime(now)),
        note: ev.note,
        metadata: ObjectMeta {
            namespace: regarding.namespace.clone(),
            name: Some(format!(
                "{}.{:x}",
                regarding.name.clone().unwrap_or_default(),
                now.as_nanosecond()
            )),
            ..ObjectMeta::default()
        },
        regarding: Some(regarding),
        reporting_controller: Some("wasm-operator".into()),
        reporting_instance: Some("wasm-operator".into()),
        type_: Some("Normal".into()),
        ..K8sEvent::default()
    };
    (key, event)
}

#[test]
fn a_remembered_event_costs_less_than_a_tenth_of_what_kube_s_recorder_kept() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    const EVENTS: usize = 4000;
    const { assert!(EVENTS <= RECENT_CAPACITY, "measure without evictions") };

    let before = heap_in_use();
    let mut recent = RecentEvents::new(RECENT_CAPACITY, SERIES_WINDOW);
    let now = Instant::now();
    for i in 0..EVENTS {
        let name = format!("bench-{i:05}.{:x}", 1_790_000_000_000_000_000u64 + i as u64);
        recent.remember(RepeatKey::new(&event(i), &regarding(i)), name.into(), now);
    }
    let ours = heap_in_use().saturating_sub(before) / EVENTS;
    assert_eq!(recent.len(), EVENTS);

    let before = heap_in_use();
    let mut kube_cache: HashMap<KubeEventKey, K8sEvent> = HashMap::new();
    for i in 0..EVENTS {
        let (key, event) = kube_recorder_entry(i);
        kube_cache.insert(key, event);
    }
    let kube = heap_in_use().saturating_sub(before) / EVENTS;
    assert_eq!(kube_cache.len(), EVENTS);

    eprintln!(
        "a remembered Event: {ours} bytes on the heap; kube's Recorder kept {kube} bytes for each"
    );
    assert!(ours < 512, "{ours} bytes per remembered Event");
    assert!(ours * 10 < kube, "{ours} against kube's {kube}");
}
