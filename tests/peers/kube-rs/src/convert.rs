//! Between Kubernetes objects and the plugin SDK's records: the input the
//! replicaset logic reads (the Jinghzhu, its pods, the time) and the pods
//! and status it proposes, as Kubernetes objects again. The same mapping the
//! host's Wasm runtime makes, done natively.

use std::collections::BTreeMap;
use std::time::SystemTime;

use jinghzhu_plugin_sdk::types as sdk;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use wasm_operator::crd::{Jinghzhu, JinghzhuStatus};

/// The pod spec when a create carries none: the host's default (a pause
/// container that passes the restricted Pod Security Standard).
fn default_pod_spec_json() -> &'static str {
    wasm_operator::runtime::convert::default_pod_spec_json()
}

/// The logic's input for `jz` and its owned `pods` at `now`, pods sorted by name.
pub fn input(jz: &Jinghzhu, pods: &[&Pod], now: SystemTime) -> sdk::ReconcileInput {
    let mut pods: Vec<sdk::Pod> = pods.iter().map(|p| pod(p)).collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    sdk::ReconcileInput {
        jinghzhu: sdk::Jinghzhu {
            metadata: meta(&jz.metadata),
            spec: sdk::JinghzhuSpec {
                desired: jz.spec.desired,
                template: jz.spec.template.as_ref().map(|t| sdk::PodTemplate {
                    labels: t
                        .metadata
                        .as_ref()
                        .map(|m| kvs(&m.labels))
                        .unwrap_or_default(),
                    annotations: t
                        .metadata
                        .as_ref()
                        .map(|m| kvs(&m.annotations))
                        .unwrap_or_default(),
                    spec_json: t
                        .spec
                        .as_ref()
                        .and_then(|s| serde_json::to_string(s).ok())
                        .unwrap_or_default(),
                }),
            },
            status: jz.status.as_ref().map(|s| sdk::JinghzhuStatus {
                current: s.current,
                pod_list: s.pod_list.clone(),
                state: s.state.clone(),
                message: s.message.clone(),
                observed_generation: s.observed_generation,
            }),
        },
        pods,
        now: timestamp(now),
    }
}

fn pod(pod: &Pod) -> sdk::Pod {
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => sdk::PodPhase::Running,
        Some("Succeeded") => sdk::PodPhase::Succeeded,
        Some("Failed") => sdk::PodPhase::Failed,
        Some("Unknown") => sdk::PodPhase::Unknown,
        _ => sdk::PodPhase::Pending,
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    sdk::Pod {
        metadata: meta(&pod.metadata),
        phase,
        ready,
    }
}

fn meta(m: &ObjectMeta) -> sdk::ObjectMeta {
    sdk::ObjectMeta {
        name: m.name.clone().unwrap_or_default(),
        namespace: m.namespace.clone().unwrap_or_default(),
        uid: m.uid.clone().unwrap_or_default(),
        resource_version: m.resource_version.clone().unwrap_or_default(),
        generation: m.generation.unwrap_or_default(),
        labels: kvs(&m.labels),
        annotations: kvs(&m.annotations),
        creation_timestamp: m.creation_timestamp.as_ref().map(time),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(time),
        owner_references: m
            .owner_references
            .iter()
            .flatten()
            .map(|o| sdk::OwnerReference {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller.unwrap_or(false),
            })
            .collect(),
    }
}

fn kvs(map: &Option<BTreeMap<String, String>>) -> Vec<sdk::KeyValue> {
    map.iter()
        .flatten()
        .map(|(k, v)| sdk::KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

fn time(t: &Time) -> sdk::Timestamp {
    sdk::Timestamp {
        seconds: t.0.as_second(),
        nanoseconds: u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0),
    }
}

fn timestamp(t: SystemTime) -> sdk::Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    sdk::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanoseconds: d.subsec_nanos(),
    }
}

/// The `stored` status with `readyReplicas` counted from the `owned` pods.
pub fn with_ready_replicas(stored: &JinghzhuStatus, owned: &[&Pod]) -> JinghzhuStatus {
    JinghzhuStatus {
        ready_replicas: Some(ready_replicas(owned)),
        ..stored.clone()
    }
}

fn ready_replicas(owned: &[&Pod]) -> u32 {
    wasm_operator::observed::ready_replicas(owned.iter().copied())
}

/// The status the logic proposes, as the CRD's type, with `readyReplicas`
/// counted from the `owned` pods as the host counts it.
pub fn status(s: &sdk::JinghzhuStatus, owned: &[&Pod]) -> JinghzhuStatus {
    JinghzhuStatus {
        current: s.current,
        pod_list: s.pod_list.clone(),
        state: s.state.clone(),
        message: s.message.clone(),
        observed_generation: s.observed_generation,
        ready_replicas: Some(ready_replicas(owned)),
        // This peer stamps itself in an annotation (a write of its own), as
        // the benchmark's peers do.
        reconciled_by: None,
    }
}

/// The Pod to create for `create`: its name, labels, annotations and spec in
/// `namespace`, with `labels` on top (they win) and the controller `owner`.
pub fn pod_to_create(
    create: &sdk::PodCreate,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    owner: &OwnerReference,
) -> Result<Pod, serde_json::Error> {
    let mut all_labels: BTreeMap<String, String> = create
        .labels
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    all_labels.extend(labels.clone());
    let spec_json = if create.spec_json.trim().is_empty() {
        default_pod_spec_json()
    } else {
        create.spec_json.as_str()
    };
    let spec: PodSpec = serde_json::from_str(spec_json)?;
    Ok(Pod {
        metadata: ObjectMeta {
            name: create.name.clone(),
            generate_name: create.generate_name.clone(),
            namespace: Some(namespace.to_owned()),
            labels: Some(all_labels),
            annotations: (!create.annotations.is_empty()).then(|| {
                create
                    .annotations
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect()
            }),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use wasm_operator_testkit as testkit;

    use super::*;

    fn owned_pod(name: &str, phase: &str, ready: bool) -> Pod {
        testkit::pod(name)
            .namespace("ns")
            .controller("web", "uid-web")
            .phase(phase)
            .ready(ready)
            .build()
    }

    #[test]
    fn the_logic_sees_what_the_plugin_would_and_its_output_becomes_pods() {
        let jz = testkit::jinghzhu("web")
            .desired(3)
            .namespace("ns")
            .uid("uid-web")
            .generation(2)
            .build();
        let pods = [
            owned_pod("web-b", "Running", true),
            owned_pod("web-a", "Pending", false),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let input = input(&jz, &refs, SystemTime::UNIX_EPOCH);
        assert_eq!(input.pods[0].metadata.name, "web-a");
        assert_eq!(input.pods[1].phase, sdk::PodPhase::Running);
        assert!(input.pods[1].ready && !input.pods[0].ready);

        let out = replicaset_logic::reconcile_with(&input, replicaset_logic::Variant::V1);
        jinghzhu_plugin_sdk::log::take_captured();
        assert_eq!(out.create_pods.len(), 1);
        let status = status(out.status.as_ref().expect("a status"), &refs);
        assert_eq!(status.ready_replicas, Some(1));
        assert_eq!(status.pod_list, ["web-a", "web-b"]);
        assert_eq!(status.message, "2/3 pods, 1/3 ready; creating 1");
        assert_eq!(status.observed_generation, Some(2));

        let owner = OwnerReference {
            uid: "uid-web".into(),
            ..OwnerReference::default()
        };
        let labels = BTreeMap::from([("app.kubernetes.io/managed-by".to_owned(), "x".to_owned())]);
        let pod = pod_to_create(&out.create_pods[0], "ns", &labels, &owner).expect("pod");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(pod.metadata.labels, Some(labels));
        let spec = pod.spec.expect("spec");
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some("registry.k8s.io/pause:3.10")
        );
    }
}
