//! Between contract 0.3's records and the 0.2 records `replicaset-logic`
//! decides on: the Jinghzhu and its Pods in, the proposal out as a desired
//! state.

use std::collections::BTreeSet;

use jinghzhu_plugin_sdk::pod;
use jinghzhu_plugin_sdk::types as legacy;
use wasm_operator_controller_sdk::prelude::*;
use wasm_operator_controller_sdk::{KeyValue, ObjectMeta, Timestamp, serde_json};

/// The pod spec of a Jinghzhu without a template: the 0.2 host's default
/// (`wit/default-pod-spec.json`: one pause container passing the restricted
/// profile) as the pod policy a declared controller gets by default
/// (`template`) admits it: no `runAsGroup` (the policy grants none) and the
/// image pulled `Always`.
pub const DEFAULT_POD_SPEC: &str = r#"{
  "automountServiceAccountToken": false,
  "containers": [{
    "name": "app",
    "image": "registry.k8s.io/pause:3.10",
    "imagePullPolicy": "Always",
    "securityContext": {
      "allowPrivilegeEscalation": false,
      "capabilities": {"drop": ["ALL"]},
      "readOnlyRootFilesystem": true
    }
  }],
  "securityContext": {
    "runAsNonRoot": true,
    "runAsUser": 65535,
    "seccompProfile": {"type": "RuntimeDefault"}
  }
}"#;

/// The Jinghzhu and its Pods as `replicaset-logic` reads them. A spec
/// without a whole `desired` count is a permanent error.
pub fn input(input: &Input) -> Result<legacy::ReconcileInput, ReconcileError> {
    let spec = input.spec();
    let desired = spec
        .get("desired")
        .and_then(Value::as_u64)
        .and_then(|d| u32::try_from(d).ok())
        .ok_or_else(|| {
            ReconcileError::permanent("spec.desired is missing or not a count (0 or more)")
        })?;
    let jinghzhu = legacy::Jinghzhu {
        metadata: meta(input.meta()),
        spec: legacy::JinghzhuSpec {
            desired,
            template: spec.get("template").map(template),
        },
        status: stored_status(input.status()),
    };
    let pods = input
        .children("Pod")
        .map(|child| {
            let body = child.body()?;
            Ok(legacy::Pod {
                metadata: meta(child.meta()),
                phase: phase(body.pointer("/status/phase").and_then(Value::as_str)),
                ready: is_ready(&body),
            })
        })
        .collect::<Result<_, ReconcileError>>()?;
    Ok(legacy::ReconcileInput {
        jinghzhu,
        pods,
        now: timestamp(input.now()),
    })
}

/// The proposal as a desired state: each Pod to create under the smallest
/// free `<jinghzhu>-<n>` name, each surplus Pod deleted, the status whole.
pub fn output(
    input: &Input,
    legacy: &legacy::ReconcileInput,
    proposal: legacy::ReconcileOutput,
) -> Result<Output, ReconcileError> {
    let mut out = Output::new();
    let taken: BTreeSet<&str> = input.children("Pod").map(|c| c.name()).collect();
    let mut free_names = (0u64..)
        .map(|n| format!("{}-{n}", input.name()))
        .filter(|name| !taken.contains(name.as_str()));
    for create in proposal.create_pods {
        let name = free_names.next().unwrap_or_default();
        out.apply(
            Desired::new("v1", "Pod", name)
                .labels(create.labels.into_iter().map(|kv| (kv.key, kv.value)))
                .annotations(create.annotations.into_iter().map(|kv| (kv.key, kv.value)))
                .body(json!({ "spec": pod_spec(&create.spec_json)? })),
        );
    }
    for name in proposal.delete_pods {
        out.delete("v1", "Pod", name);
    }
    if let Some(status) = proposal.status {
        let ready = pod::count_ready(pod::live_pods(&legacy.pods));
        out.set_status(
            input,
            json!({
                "current": status.current,
                "podList": status.pod_list,
                "readyReplicas": ready,
                "state": status.state,
                "message": status.message,
                "observedGeneration": status.observed_generation,
            }),
        );
    }
    out.requeue_after = proposal
        .requeue_after_ms
        .map(std::time::Duration::from_millis);
    for event in proposal.events {
        out.event(match event.event_type {
            legacy::EventType::Normal => Event::normal(event.reason, event.message),
            legacy::EventType::Warning => Event::warning(event.reason, event.message),
        });
    }
    Ok(out)
}

/// A template's pod spec, or the host's default when it has none.
fn pod_spec(spec_json: &str) -> Result<Value, ReconcileError> {
    let text = if spec_json.trim().is_empty() {
        DEFAULT_POD_SPEC
    } else {
        spec_json
    };
    serde_json::from_str(text)
        .map_err(|err| ReconcileError::permanent(format!("spec.template.spec is not JSON: {err}")))
}

/// `spec.template` as the logic's record: labels, annotations, the pod spec.
fn template(template: &Value) -> legacy::PodTemplate {
    let pairs = |pointer: &str| -> Vec<legacy::KeyValue> {
        template
            .pointer(pointer)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(key, value)| {
                Some(legacy::KeyValue {
                    key: key.clone(),
                    value: value.as_str()?.to_owned(),
                })
            })
            .collect()
    };
    legacy::PodTemplate {
        labels: pairs("/metadata/labels"),
        annotations: pairs("/metadata/annotations"),
        spec_json: template
            .get("spec")
            .map(Value::to_string)
            .unwrap_or_default(),
    }
}

/// The stored status, when there is one.
fn stored_status(status: &Value) -> Option<legacy::JinghzhuStatus> {
    let fields = status.as_object()?;
    let text = |key: &str| {
        fields
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some(legacy::JinghzhuStatus {
        current: fields
            .get("current")
            .and_then(Value::as_u64)
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(0),
        pod_list: fields
            .get("podList")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|name| name.as_str().map(str::to_owned))
            .collect(),
        state: text("state"),
        message: text("message"),
        observed_generation: fields.get("observedGeneration").and_then(Value::as_i64),
    })
}

/// A pod's phase (`Unknown` when absent or unrecognised).
fn phase(phase: Option<&str>) -> legacy::PodPhase {
    match phase {
        Some("Pending") => legacy::PodPhase::Pending,
        Some("Running") => legacy::PodPhase::Running,
        Some("Succeeded") => legacy::PodPhase::Succeeded,
        Some("Failed") => legacy::PodPhase::Failed,
        _ => legacy::PodPhase::Unknown,
    }
}

/// Whether the pod's `Ready` condition is `True`.
fn is_ready(body: &Value) -> bool {
    body.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True")))
}

fn meta(meta: &ObjectMeta) -> legacy::ObjectMeta {
    let pairs = |entries: &[KeyValue]| -> Vec<legacy::KeyValue> {
        entries
            .iter()
            .map(|kv| legacy::KeyValue {
                key: kv.key.clone(),
                value: kv.value.clone(),
            })
            .collect()
    };
    legacy::ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        generation: meta.generation,
        labels: pairs(&meta.labels),
        annotations: pairs(&meta.annotations),
        creation_timestamp: meta.creation_timestamp.map(timestamp),
        deletion_timestamp: meta.deletion_timestamp.map(timestamp),
        owner_references: meta
            .owner_references
            .iter()
            .map(|o| legacy::OwnerReference {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller,
            })
            .collect(),
    }
}

fn timestamp(at: Timestamp) -> legacy::Timestamp {
    legacy::Timestamp {
        seconds: at.seconds,
        nanoseconds: at.nanoseconds,
    }
}
