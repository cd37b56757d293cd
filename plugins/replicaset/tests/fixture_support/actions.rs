//! The proposed-actions shape of a [`ReconcileOutput`] (what
//! `wasm-operator reconcile` prints and `expected.yaml` holds), and applying
//! an output to an input as the API server would.

use jinghzhu_plugin_sdk::kv;
use jinghzhu_plugin_sdk::testing::controller_reference;
use jinghzhu_plugin_sdk::types::{
    EventType, KeyValue, Pod, PodPhase, ReconcileInput, ReconcileOutput,
};
use serde_json::{Map, Value, json};

fn string_map(list: &[KeyValue]) -> Value {
    Value::Object(
        list.iter()
            .map(|kv| (kv.key.clone(), Value::from(kv.value.clone())))
            .collect(),
    )
}

/// The spec the host gives a create whose `spec-json` is empty and whose
/// Jinghzhu has no template spec (the WIT contract's default; the host's
/// tests check it matches `default_template_spec()`).
const HOST_DEFAULT_SPEC_JSON: &str = include_str!("../../../../wit/default-pod-spec.json");

/// `output` (of a call on `input`) in the proposed-actions shape, as the
/// host shows it: an empty `spec-json` becomes the template's spec or the
/// host's default; empty parts are omitted.
pub fn to_actions(input: &ReconcileInput, output: &ReconcileOutput) -> Result<Value, String> {
    let template_spec = input
        .jinghzhu
        .spec
        .template
        .as_ref()
        .map(|t| t.spec_json.as_str())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or(HOST_DEFAULT_SPEC_JSON);
    let mut actions = Map::new();
    if !output.create_pods.is_empty() {
        let mut creates = Vec::new();
        for c in &output.create_pods {
            let mut create = Map::new();
            if let Some(name) = &c.name {
                create.insert("name".into(), json!(name));
            }
            if let Some(prefix) = &c.generate_name {
                create.insert("generateName".into(), json!(prefix));
            }
            if !c.labels.is_empty() {
                create.insert("labels".into(), string_map(&c.labels));
            }
            if !c.annotations.is_empty() {
                create.insert("annotations".into(), string_map(&c.annotations));
            }
            let spec_json = if c.spec_json.trim().is_empty() {
                template_spec
            } else {
                c.spec_json.as_str()
            };
            let spec: Value = serde_json::from_str(spec_json)
                .map_err(|e| format!("spec-json is not JSON: {e}"))?;
            create.insert("spec".into(), spec);
            creates.push(Value::Object(create));
        }
        actions.insert("createPods".into(), Value::Array(creates));
    }
    if !output.delete_pods.is_empty() {
        actions.insert("deletePods".into(), json!(output.delete_pods));
    }
    if let Some(s) = &output.status {
        let mut status = Map::new();
        status.insert("current".into(), json!(s.current));
        status.insert("podList".into(), json!(s.pod_list));
        status.insert("state".into(), json!(s.state));
        status.insert("message".into(), json!(s.message));
        if let Some(g) = s.observed_generation {
            status.insert("observedGeneration".into(), json!(g));
        }
        actions.insert("status".into(), Value::Object(status));
    }
    if let Some(ms) = output.requeue_after_ms {
        actions.insert("requeueAfterMs".into(), json!(ms));
    }
    if !output.events.is_empty() {
        let events = output
            .events
            .iter()
            .map(|e| {
                let kind = match e.event_type {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                };
                json!({"type": kind, "reason": e.reason, "message": e.message})
            })
            .collect();
        actions.insert("events".into(), Value::Array(events));
    }
    Ok(Value::Object(actions))
}

/// The deterministic 5-character suffix of the `n`th generated name.
fn suffix(mut n: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| {
            let c = ALPHABET[n % ALPHABET.len()];
            n /= ALPHABET.len();
            char::from(c)
        })
        .collect()
}

/// `input` after the API server carried out `output`: created Pods exist
/// (generated names, labels, controller reference, pending, not ready),
/// deleted Pods are gone, the status is replaced. `serial` numbers the
/// generated names across calls.
pub fn apply(
    input: &ReconcileInput,
    output: &ReconcileOutput,
    serial: &mut usize,
) -> ReconcileInput {
    let mut next = input.clone();
    let jz = &next.jinghzhu;
    next.pods
        .retain(|p| !output.delete_pods.contains(&p.metadata.name));
    let mut created = Vec::new();
    for c in &output.create_pods {
        *serial += 1;
        let name = match (&c.name, &c.generate_name) {
            (Some(name), _) => name.clone(),
            (None, Some(prefix)) => format!("{prefix}{}", suffix(*serial)),
            (None, None) => format!("unnamed-{}", suffix(*serial)),
        };
        let mut labels = c.labels.clone();
        kv::set(&mut labels, "app.kubernetes.io/managed-by", "wasm-operator");
        kv::set(&mut labels, "jinghzhu.io/owner", jz.metadata.name.clone());
        let mut pod = Pod {
            metadata: Default::default(),
            phase: PodPhase::Pending,
            ready: false,
        };
        pod.metadata.name = name;
        pod.metadata.namespace.clone_from(&jz.metadata.namespace);
        pod.metadata.uid = format!("generated-uid-{serial}");
        pod.metadata.labels = labels;
        pod.metadata.annotations = c.annotations.clone();
        pod.metadata.creation_timestamp = Some(input.now);
        pod.metadata.owner_references = vec![controller_reference(jz)];
        created.push(pod);
    }
    next.pods.extend(created);
    next.pods
        .sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    if let Some(status) = &output.status {
        next.jinghzhu.status = Some(status.clone());
    }
    next
}
