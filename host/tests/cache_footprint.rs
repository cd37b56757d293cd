//! What a cached pod costs the host: 3000 pods as the API server sends them
//! (spec, conditions, IP, managedFields), decoded into `CachedPod` as the
//! watch does, in a kube reflector store. Heap bytes in use are read from glibc before and
//! after. One test in its own binary, so no other test allocates meanwhile.
//!
//! `cargo test -p wasm-operator --test cache_footprint -- --nocapture`

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use wasm_operator::cached_pod::CachedPod;

/// Heap bytes in use (all arenas).
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads glibc's own statistics.
    unsafe { libc::mallinfo2().uordblks }
}

fn pod_json(i: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web-{i:05}-x7k2q","generateName":"web-{i:05}-","namespace":"scale-bench","uid":"6f1c1a52-3b0e-4f57-9d3a-{i:012}","resourceVersion":"{rv}","creationTimestamp":"2026-11-23T23:00:00Z","labels":{{"app.kubernetes.io/managed-by":"wasm-operator","jinghzhu.io/owner":"web-{i:05}"}},"ownerReferences":[{{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","name":"web-{i:05}","uid":"7a1c1a52-3b0e-4f57-9d3a-{i:012}","controller":true,"blockOwnerDeletion":true}}],"managedFields":[{{"manager":"wasm-operator","operation":"Update","apiVersion":"v1","time":"2026-11-23T23:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:generateName":{{}},"f:labels":{{".":{{}},"f:app.kubernetes.io/managed-by":{{}}}}}}}}}}]}},"spec":{{"containers":[{{"name":"pause","image":"registry.k8s.io/pause:3.10","resources":{{}},"securityContext":{{"allowPrivilegeEscalation":false,"capabilities":{{"drop":["ALL"]}}}}}}],"nodeName":"kwok-node-0","restartPolicy":"Always","securityContext":{{"runAsNonRoot":true,"seccompProfile":{{"type":"RuntimeDefault"}}}}}},"status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True"}},{{"type":"Ready","status":"True","lastTransitionTime":"2026-11-23T23:00:01Z"}},{{"type":"ContainersReady","status":"True"}},{{"type":"PodScheduled","status":"True"}}],"podIP":"10.0.0.1","hostIP":"10.0.0.2","startTime":"2026-11-23T23:00:01Z"}}}}"#,
        rv = 100_000 + i
    )
}

#[test]
fn a_cached_pod_costs_less_than_2_kib() {
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
