//! The pod as the host caches it: the metadata reconciles and plugins read,
//! `status.phase` and whether the `Ready` condition is `True`, decoded
//! straight from the watch's JSON.
//!
//! The pod watch deserializes into [`CachedPod`] instead of k8s-openapi's
//! `Pod`, so the spec, the other status fields and `managedFields` are
//! skipped while parsing instead of being built and then thrown away, and a
//! cached pod is a few hundred bytes inline instead of the 2.2 KiB of a
//! `Pod` (most of it the inline `PodSpec`). A reconcile still gets `Pod`s
//! ([`CachedPod::to_pod`]): everything past the cache reads the same
//! fields from the same types as before.
//!
//! A cached pod keeps at most [`MAX_CACHED_METADATA_BYTES`] of labels and
//! annotations (keys and values). Whoever may patch pods can put 256 KiB of
//! annotations on each (the API server's limit), and the cache would hold
//! it for every pod and copy it into every reconcile. A pod over the cap
//! is cached with its smallest entries that fit (the largest are left
//! out, so a fat annotation goes first and small labels stay) and the
//! annotation [`OMITTED_ANNOTATION`] saying how much was left out; the host
//! logs a warning (at most once a minute). What a plugin may write on one
//! pod (`limits/pod-metadata-size`, 16 KiB) fits well within the cap.
//!
//! The host's client hands kube each pod of a pod list or watch already cut
//! this way ([`ListedPod::to_json`], see the host's `list_bounds::pods`): the
//! bytes a list's bounds count are those the cache can keep. Decoding such
//! a pod again keeps it as it is (the marker annotation, when it is the
//! host's, is not counted against the cap).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::locks::MutexExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::{Deserialize, Serialize};

/// Most bytes (keys and values) of labels and annotations one cached pod
/// keeps, besides [`OMITTED_ANNOTATION`].
pub const MAX_CACHED_METADATA_BYTES: usize = 32 * 1024;

/// The annotation a cached pod carries when some of its labels or
/// annotations were left out of the cache (a host key: plugins cannot
/// write it). Its value says how many entries and bytes.
pub const OMITTED_ANNOTATION: &str = "jinghzhu.io/omitted-metadata";

/// Longest value of [`OMITTED_ANNOTATION`] the host writes; a longer one
/// is not the host's and counts against the cap like any other entry.
const OMITTED_NOTE_MAX: usize = 128;

/// Bytes of one label or annotation entry against the cap: the host's own
/// note of what it left out counts nothing, so a pod decoded twice is cut
/// once.
fn entry_size((key, value): (&String, &String)) -> usize {
    if key == OMITTED_ANNOTATION && value.len() <= OMITTED_NOTE_MAX {
        return 0;
    }
    key.len().saturating_add(value.len())
}

/// Pods cut to the cap since the last warning.
static CUT_SINCE_WARNING: AtomicU64 = AtomicU64::new(0);
/// When the last warning was logged.
static LAST_WARNING: Mutex<Option<Instant>> = Mutex::new(None);
/// Least time between two warnings about cut pods.
const WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Cuts `labels` and `annotations` of the pod `namespace/name` to
/// [`MAX_CACHED_METADATA_BYTES`] (see the module doc).
fn bound_metadata(
    labels: &mut Option<BTreeMap<String, String>>,
    annotations: &mut Option<BTreeMap<String, String>>,
    namespace: Option<&str>,
    name: Option<&str>,
) {
    let size = entry_size;
    let total = labels
        .iter()
        .flatten()
        .chain(annotations.iter().flatten())
        .map(size)
        .fold(0, usize::saturating_add);
    if total <= MAX_CACHED_METADATA_BYTES {
        return;
    }
    // Smallest first (labels before annotations of one size, then by key):
    // keep while they fit.
    let mut entries: Vec<(usize, bool, &String)> = labels
        .iter()
        .flatten()
        .map(|e| (size(e), false, e.0))
        .chain(annotations.iter().flatten().map(|e| (size(e), true, e.0)))
        .collect();
    entries.sort_unstable();
    let mut kept = 0usize;
    let fits = entries
        .iter()
        .take_while(|(bytes, ..)| {
            kept = kept.saturating_add(*bytes);
            kept <= MAX_CACHED_METADATA_BYTES
        })
        .count();
    let left_out: Vec<(bool, String)> = entries[fits..]
        .iter()
        .map(|(_, annotation, key)| (*annotation, (*key).clone()))
        .collect();
    for (annotation, key) in &left_out {
        let map = if *annotation {
            &mut *annotations
        } else {
            &mut *labels
        };
        if let Some(map) = map.as_mut() {
            map.remove(key);
        }
    }
    let omitted_bytes = total.saturating_sub(
        labels
            .iter()
            .flatten()
            .chain(annotations.iter().flatten())
            .map(size)
            .fold(0, usize::saturating_add),
    );
    annotations.get_or_insert_default().insert(
        OMITTED_ANNOTATION.to_string(),
        format!(
            "{} labels and annotations ({omitted_bytes} bytes) left out of the operator's cache",
            left_out.len()
        ),
    );
    warn_cut(namespace, name, left_out.len(), omitted_bytes);
}

/// Logs that a pod was cut, at most once per [`WARNING_INTERVAL`].
fn warn_cut(namespace: Option<&str>, name: Option<&str>, entries: usize, bytes: usize) {
    let cut = CUT_SINCE_WARNING.fetch_add(1, Ordering::Relaxed) + 1;
    let mut last = LAST_WARNING.lock_unpoisoned();
    if last.is_some_and(|at| at.elapsed() < WARNING_INTERVAL) {
        return;
    }
    *last = Some(Instant::now());
    CUT_SINCE_WARNING.fetch_sub(cut, Ordering::Relaxed);
    tracing::warn!(
        pod = %format!("{}/{}", namespace.unwrap_or_default(), name.unwrap_or_default()),
        omitted_entries = entries,
        omitted_bytes = bytes,
        pods_cut_since_last_warning = cut,
        limit_bytes = MAX_CACHED_METADATA_BYTES,
        "a pod's labels and annotations are larger than the cache keeps per pod; the largest \
         were left out (annotation {OMITTED_ANNOTATION} on the cached pod)"
    );
}

/// One cached pod (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "wire::Pod")]
pub struct CachedPod {
    /// The pod's metadata without `managedFields`, `finalizers`, `selfLink`
    /// and `deletionGracePeriodSeconds`.
    pub metadata: ObjectMeta,
    /// `status.phase`, if the pod has one.
    pub phase: Option<String>,
    /// The `Ready` condition's status: `None` without one, `Some(true)` when
    /// it is `True`.
    pub ready: Option<bool>,
}

impl CachedPod {
    /// The pod as the rest of the host reads it: this metadata, the phase and
    /// the `Ready` condition (`True` or `False`); no spec.
    pub fn to_pod(&self) -> Pod {
        let conditions = self.ready.map(|ready| {
            vec![PodCondition {
                type_: "Ready".to_string(),
                status: if ready { "True" } else { "False" }.to_string(),
                ..Default::default()
            }]
        });
        let status = (self.phase.is_some() || conditions.is_some()).then(|| PodStatus {
            phase: self.phase.clone(),
            conditions,
            ..Default::default()
        });
        Pod {
            metadata: self.metadata.clone(),
            spec: None,
            status,
        }
    }
}

impl From<&Pod> for CachedPod {
    /// What the cache would hold for `pod` (used where pods come from files
    /// or tests rather than from the watch).
    fn from(pod: &Pod) -> Self {
        let status = pod.status.as_ref();
        let metadata = &pod.metadata;
        let mut labels = metadata.labels.clone();
        let mut annotations = metadata.annotations.clone();
        bound_metadata(
            &mut labels,
            &mut annotations,
            metadata.namespace.as_deref(),
            metadata.name.as_deref(),
        );
        Self {
            metadata: ObjectMeta {
                name: metadata.name.clone(),
                generate_name: metadata.generate_name.clone(),
                namespace: metadata.namespace.clone(),
                uid: metadata.uid.clone(),
                resource_version: metadata.resource_version.clone(),
                generation: metadata.generation,
                labels,
                annotations,
                creation_timestamp: metadata.creation_timestamp.clone(),
                deletion_timestamp: metadata.deletion_timestamp.clone(),
                owner_references: metadata.owner_references.clone(),
                ..Default::default()
            },
            phase: status.and_then(|s| s.phase.clone()),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status == "True"),
        }
    }
}

/// A pod as a list or watch answer carries it: what the cache keeps
/// ([`CachedPod`]), and the `kind` and `apiVersion` the answer gave it
/// (watch events and metadata lists carry them, a typed list's items not).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "wire::Pod")]
pub struct ListedPod {
    /// `kind`, if the answer gave one.
    pub kind: Option<String>,
    /// `apiVersion`, if the answer gave one.
    pub api_version: Option<String>,
    /// What the cache keeps of it.
    pub pod: CachedPod,
}

impl ListedPod {
    /// Leaves out every label and annotation but the labels the host
    /// selects and relabels its pods by (managed-by, owner, shard), with
    /// the marker annotation saying so: for a pod whose labels and
    /// annotations, within the cap as counted, are much larger as JSON
    /// (escaped control characters, thousands of tiny labels).
    pub fn keep_only_host_labels(&mut self) {
        use crate::ownership::{MANAGED_BY_LABEL, OWNER_LABEL, SHARD_LABEL};
        let meta = &mut self.pod.metadata;
        let (mut entries, mut bytes) = (0usize, 0usize);
        let mut count = |(k, v): (&String, &String)| {
            entries += 1;
            bytes = bytes.saturating_add(k.len()).saturating_add(v.len());
        };
        if let Some(labels) = &mut meta.labels {
            labels.retain(|k, v| {
                let host = [MANAGED_BY_LABEL, OWNER_LABEL, SHARD_LABEL].contains(&k.as_str());
                if !host {
                    count((k, v));
                }
                host
            });
        }
        for entry in meta.annotations.iter().flatten() {
            count(entry);
        }
        meta.annotations = Some(BTreeMap::from([(
            OMITTED_ANNOTATION.to_string(),
            format!(
                "{entries} labels and annotations ({bytes} bytes) left out of the operator's cache"
            ),
        )]));
        warn_cut(
            meta.namespace.as_deref(),
            meta.name.as_deref(),
            entries,
            bytes,
        );
    }

    /// The pod as JSON with only what [`CachedPod`] keeps: decoding it
    /// gives the same [`CachedPod`] (and the same `kind` and `apiVersion`).
    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        let pod = &self.pod;
        let status = (pod.phase.is_some() || pod.ready.is_some()).then(|| wire::SlimStatus {
            phase: pod.phase.as_deref(),
            conditions: pod.ready.map(|ready| {
                [wire::SlimCondition {
                    type_: "Ready",
                    status: if ready { "True" } else { "False" },
                }]
            }),
        });
        serde_json::to_vec(&wire::Slim {
            kind: self.kind.as_deref(),
            api_version: self.api_version.as_deref(),
            metadata: &pod.metadata,
            status,
        })
    }
}

impl Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The JSON shape of a pod, cut to what [`CachedPod`] keeps. Unknown fields
/// (the spec, `managedFields`, container statuses…) are skipped by the
/// parser without being built.
mod wire {
    use super::*;

    #[derive(Deserialize)]
    pub struct Pod {
        kind: Option<String>,
        #[serde(rename = "apiVersion")]
        api_version: Option<String>,
        #[serde(default)]
        metadata: Metadata,
        #[serde(default)]
        status: Option<Status>,
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Metadata {
        name: Option<String>,
        generate_name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        generation: Option<i64>,
        labels: Option<BTreeMap<String, String>>,
        annotations: Option<BTreeMap<String, String>>,
        creation_timestamp: Option<Time>,
        deletion_timestamp: Option<Time>,
        owner_references: Option<Vec<OwnerReference>>,
    }

    #[derive(Deserialize)]
    struct Status {
        phase: Option<String>,
        #[serde(default)]
        conditions: Option<Vec<Condition>>,
    }

    #[derive(Deserialize)]
    struct Condition {
        #[serde(rename = "type")]
        type_: String,
        status: String,
    }

    /// A pod cut to what [`super::CachedPod`] keeps, as JSON.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Slim<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub kind: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub api_version: Option<&'a str>,
        pub metadata: &'a ObjectMeta,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub status: Option<SlimStatus<'a>>,
    }

    #[derive(Serialize)]
    pub struct SlimStatus<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub phase: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub conditions: Option<[SlimCondition; 1]>,
    }

    #[derive(Serialize)]
    pub struct SlimCondition {
        #[serde(rename = "type")]
        pub type_: &'static str,
        pub status: &'static str,
    }

    impl From<Pod> for super::CachedPod {
        fn from(pod: Pod) -> Self {
            super::ListedPod::from(pod).pod
        }
    }

    impl From<Pod> for super::ListedPod {
        fn from(pod: Pod) -> Self {
            let (kind, api_version) = (pod.kind, pod.api_version);
            let Metadata {
                name,
                generate_name,
                namespace,
                uid,
                resource_version,
                generation,
                mut labels,
                mut annotations,
                creation_timestamp,
                deletion_timestamp,
                owner_references,
            } = pod.metadata;
            super::bound_metadata(
                &mut labels,
                &mut annotations,
                namespace.as_deref(),
                name.as_deref(),
            );
            let (phase, ready) = match pod.status {
                Some(status) => (
                    status.phase,
                    status
                        .conditions
                        .into_iter()
                        .flatten()
                        .find(|c| c.type_ == "Ready")
                        .map(|c| c.status == "True"),
                ),
                None => (None, None),
            };
            let pod = super::CachedPod {
                metadata: ObjectMeta {
                    name,
                    generate_name,
                    namespace,
                    uid,
                    resource_version,
                    generation,
                    labels,
                    annotations,
                    creation_timestamp,
                    deletion_timestamp,
                    owner_references,
                    ..Default::default()
                },
                phase,
                ready,
            };
            Self {
                kind,
                api_version,
                pod,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed;

    fn full_pod() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-abc",
                "generateName": "web-",
                "namespace": "default",
                "uid": "u-1",
                "resourceVersion": "42",
                "labels": {"app": "web"},
                "annotations": {"note": "x"},
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": ["example.com/keep"],
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}],
                "ownerReferences": [{"apiVersion": "jinghzhu.io/v1", "kind": "Jinghzhu",
                                     "name": "web", "uid": "owner-1", "controller": true}]
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.1",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"}
                ],
                "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0,
                                       "image": "nginx", "imageID": "", "started": true}]
            }
        })
    }

    #[test]
    fn decodes_what_reconciles_read_and_skips_the_rest() {
        let cached: CachedPod = serde_json::from_value(full_pod()).expect("decodes");
        assert_eq!(cached.metadata.name.as_deref(), Some("web-abc"));
        assert_eq!(cached.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            cached.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        assert!(cached.metadata.managed_fields.is_none());
        assert!(cached.metadata.finalizers.is_none());
        assert_eq!(cached.phase.as_deref(), Some("Running"));
        assert_eq!(cached.ready, Some(true));
    }

    #[test]
    fn decoding_and_converting_a_pod_agree() {
        let pod: Pod = serde_json::from_value(full_pod()).expect("a Pod");
        let decoded: CachedPod = serde_json::from_value(full_pod()).expect("a CachedPod");
        assert_eq!(CachedPod::from(&pod), decoded);
    }

    #[test]
    fn to_pod_keeps_what_observations_read() {
        let pod: Pod = serde_json::from_value(full_pod()).expect("a Pod");
        let round_trip = CachedPod::from(&pod).to_pod();
        assert!(round_trip.spec.is_none());
        assert_eq!(
            round_trip.metadata.owner_references,
            pod.metadata.owner_references
        );
        assert_eq!(round_trip.metadata.labels, pod.metadata.labels);
        assert_eq!(observed::is_ready(&round_trip), observed::is_ready(&pod));
        assert_eq!(observed::is_live(&round_trip), observed::is_live(&pod));

        let not_ready = CachedPod {
            ready: Some(false),
            ..CachedPod::from(&pod)
        }
        .to_pod();
        assert!(!observed::is_ready(&not_ready));
        let bare = CachedPod::default().to_pod();
        assert!(bare.status.is_none());
    }

    #[test]
    fn a_pod_without_status_or_metadata_still_decodes() {
        let cached: CachedPod =
            serde_json::from_value(serde_json::json!({"kind": "Pod"})).expect("decodes");
        assert_eq!(cached, CachedPod::default());
    }

    #[test]
    fn a_pod_keeps_at_most_the_cap_of_labels_and_annotations() {
        let mut pod = full_pod();
        let metadata = &mut pod["metadata"];
        metadata["annotations"]["example.com/blob"] = "y".repeat(250 * 1024).into();
        metadata["annotations"]["plugin.jinghzhu.io/fat"] = "x".repeat(16 * 1024).into();
        metadata["labels"]["plugin.jinghzhu.io/shard"] = "7".into();
        let cached: CachedPod = serde_json::from_value(pod.clone()).expect("decodes");
        let labels = cached.metadata.labels.as_ref().expect("labels");
        let annotations = cached.metadata.annotations.as_ref().expect("annotations");
        // The fat foreign annotation is left out; the plugin's 16 KiB, the
        // small ones and every label stay.
        assert!(!annotations.contains_key("example.com/blob"));
        assert_eq!(annotations["plugin.jinghzhu.io/fat"].len(), 16 * 1024);
        assert_eq!(annotations["note"], "x");
        assert_eq!(labels["app"], "web");
        assert_eq!(labels["plugin.jinghzhu.io/shard"], "7");
        assert!(
            annotations[OMITTED_ANNOTATION].starts_with("1 labels and annotations (256016 bytes)"),
            "{}",
            annotations[OMITTED_ANNOTATION]
        );
        let kept: usize = labels
            .iter()
            .chain(annotations)
            .filter(|(k, _)| k.as_str() != OMITTED_ANNOTATION)
            .map(|(k, v)| k.len() + v.len())
            .sum();
        assert!(kept <= MAX_CACHED_METADATA_BYTES, "{kept}");
        // Converting a Pod cuts the same way.
        let full: Pod = serde_json::from_value(pod).expect("a Pod");
        assert_eq!(CachedPod::from(&full), cached);

        // Many entries of one size: kept in key order up to the cap.
        let mut many = full_pod();
        for i in 0..100 {
            many["metadata"]["annotations"][format!("a{i:03}")] = "z".repeat(996).into();
        }
        let cached: CachedPod = serde_json::from_value(many).expect("decodes");
        let annotations = cached.metadata.annotations.expect("annotations");
        assert!(annotations.contains_key("note"));
        assert!(annotations.contains_key("a000"));
        assert!(!annotations.contains_key("a099"));
        // Besides note=x (5 bytes), the marker and the label app=web (6 bytes).
        let kept = annotations.len() - 2;
        assert_eq!(kept, (MAX_CACHED_METADATA_BYTES - 5 - 6) / 1000);

        // Under the cap nothing changes.
        let plain: CachedPod = serde_json::from_value(full_pod()).expect("decodes");
        assert!(
            !plain
                .metadata
                .annotations
                .expect("annotations")
                .contains_key(OMITTED_ANNOTATION)
        );
    }

    #[test]
    fn a_listed_pod_cut_to_json_decodes_to_the_same_cached_pod() {
        let mut fat = full_pod();
        fat["metadata"]["annotations"]["example.com/blob"] = "y".repeat(40 * 1024).into();
        for json in [
            full_pod(),
            fat,
            serde_json::json!({"kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "m"}}),
            serde_json::json!({}),
        ] {
            let listed: ListedPod = serde_json::from_value(json.clone()).expect("decodes");
            let cut = listed.to_json().expect("encodes");
            let again: ListedPod = serde_json::from_slice(&cut).expect("decodes again");
            assert_eq!(again, listed, "{}", String::from_utf8_lossy(&cut));
            let cached: CachedPod = serde_json::from_value(json).expect("decodes");
            assert_eq!(again.pod, cached);
            let text = String::from_utf8_lossy(&cut);
            assert!(
                !text.contains("managedFields") && !text.contains("spec"),
                "{text}"
            );
        }
        // A marker annotation that is not the host's counts like any other.
        let mut forged = full_pod();
        forged["metadata"]["annotations"][OMITTED_ANNOTATION] = "z".repeat(40 * 1024).into();
        let cached: CachedPod = serde_json::from_value(forged).expect("decodes");
        let note = &cached.metadata.annotations.expect("annotations")[OMITTED_ANNOTATION];
        assert!(note.len() <= OMITTED_NOTE_MAX, "{note}");
    }

    #[test]
    fn is_much_smaller_than_a_pod() {
        // The point of the type: no inline PodSpec.
        assert!(
            std::mem::size_of::<CachedPod>() * 4 < std::mem::size_of::<Pod>(),
            "CachedPod {} B, Pod {} B",
            std::mem::size_of::<CachedPod>(),
            std::mem::size_of::<Pod>()
        );
    }
}
