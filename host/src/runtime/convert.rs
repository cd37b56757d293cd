//! Between Kubernetes objects and the WIT records: the input a plugin sees
//! (its Jinghzhu, the pods it owns, the time) and the output it returns
//! (as the host's [`ProposedActions`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::bindings as wit;
use crate::actions::{EventType, PluginEvent, PodToCreate, ProposedActions};
use crate::crd::{Jinghzhu, JinghzhuStatus};

/// The WIT input for `jz` and its owned `pods` at `now`.
pub fn input(jz: &Jinghzhu, pods: &[Pod], now: std::time::SystemTime) -> wit::ReconcileInput {
    wit::ReconcileInput {
        jinghzhu: wit::Jinghzhu {
            metadata: meta(&jz.metadata),
            spec: wit::JinghzhuSpec {
                desired: jz.spec.desired,
                template: jz.spec.template.as_ref().map(|t| wit::PodTemplate {
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
            status: jz.status.as_ref().map(status_to_wit),
        },
        pods: pods.iter().map(pod).collect(),
        now: timestamp(now),
    }
}

fn pod(pod: &Pod) -> wit::Pod {
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => wit::PodPhase::Running,
        Some("Succeeded") => wit::PodPhase::Succeeded,
        Some("Failed") => wit::PodPhase::Failed,
        Some("Unknown") => wit::PodPhase::Unknown,
        _ => wit::PodPhase::Pending,
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    wit::Pod {
        metadata: meta(&pod.metadata),
        phase,
        ready,
    }
}

fn meta(m: &ObjectMeta) -> wit::ObjectMeta {
    wit::ObjectMeta {
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
            .map(|o| wit::OwnerReference {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller.unwrap_or(false),
            })
            .collect(),
    }
}

fn kvs(map: &Option<BTreeMap<String, String>>) -> Vec<wit::KeyValue> {
    map.iter()
        .flatten()
        .map(|(k, v)| wit::KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

fn time(t: &Time) -> wit::Timestamp {
    let ts = t.0.as_second();
    wit::Timestamp {
        seconds: ts,
        nanoseconds: t.0.subsec_nanosecond().max(0) as u32,
    }
}

fn timestamp(t: std::time::SystemTime) -> wit::Timestamp {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    wit::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanoseconds: d.subsec_nanos(),
    }
}

fn status_to_wit(s: &JinghzhuStatus) -> wit::JinghzhuStatus {
    wit::JinghzhuStatus {
        current: s.current,
        pod_list: s.pod_list.clone(),
        state: s.state.clone(),
        message: s.message.clone(),
        observed_generation: s.observed_generation,
    }
}

/// The host's view of a WIT output. A pod spec that is not JSON becomes a
/// string value, which validation then rejects with a clear message.
pub fn output(out: wit::ReconcileOutput) -> ProposedActions {
    ProposedActions {
        create_pods: out
            .create_pods
            .into_iter()
            .map(|c| PodToCreate {
                name: c.name,
                generate_name: c.generate_name,
                labels: c.labels.into_iter().map(|kv| (kv.key, kv.value)).collect(),
                annotations: c
                    .annotations
                    .into_iter()
                    .map(|kv| (kv.key, kv.value))
                    .collect(),
                spec: serde_json::from_str(&c.spec_json)
                    .unwrap_or(serde_json::Value::String(c.spec_json)),
            })
            .collect(),
        delete_pods: out.delete_pods,
        status: out.status.map(|s| JinghzhuStatus {
            current: s.current,
            pod_list: s.pod_list,
            state: s.state,
            message: s.message,
            observed_generation: s.observed_generation,
        }),
        requeue_after: out.requeue_after_ms.map(std::time::Duration::from_millis),
        events: out
            .events
            .into_iter()
            .map(|e| PluginEvent {
                type_: match e.event_type {
                    wit::EventType::Normal => EventType::Normal,
                    wit::EventType::Warning => EventType::Warning,
                },
                reason: e.reason,
                message: e.message,
            })
            .collect(),
    }
}
