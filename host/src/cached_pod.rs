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

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::Deserialize;

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
        Self {
            metadata: ObjectMeta {
                name: metadata.name.clone(),
                generate_name: metadata.generate_name.clone(),
                namespace: metadata.namespace.clone(),
                uid: metadata.uid.clone(),
                resource_version: metadata.resource_version.clone(),
                generation: metadata.generation,
                labels: metadata.labels.clone(),
                annotations: metadata.annotations.clone(),
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

    impl From<Pod> for super::CachedPod {
        fn from(pod: Pod) -> Self {
            let Metadata {
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
            } = pod.metadata;
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
            Self {
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
