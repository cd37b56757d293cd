//! kubectl-style YAML (multi-document, `kind: List`, or one object) to a
//! [`ReconcileInput`], as the host builds it from its cache.

use std::path::Path;

use jinghzhu_plugin_sdk::types::{
    Jinghzhu, JinghzhuSpec, JinghzhuStatus, ObjectMeta, OwnerReference, Pod, PodPhase, PodTemplate,
    ReconcileInput, Timestamp,
};
use jinghzhu_plugin_sdk::{kv, pod};
use serde::Deserialize;
use serde_json::Value;

use super::time::parse_rfc3339;

/// `now` when a case has no `now` file.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// Every object in a YAML text, `kind: List` items flattened.
pub fn objects(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = Value::deserialize(doc).map_err(|e| e.to_string())?;
        match value {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind") == Some(&Value::from("List")) => {
                let items = o
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                out.extend(items);
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

fn string(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn string_map(v: Option<&Value>) -> Vec<jinghzhu_plugin_sdk::types::KeyValue> {
    let Some(Value::Object(map)) = v else {
        return Vec::new();
    };
    kv::from_pairs(map.iter().map(|(k, v)| {
        (
            k.clone(),
            v.as_str().map_or_else(|| v.to_string(), str::to_owned),
        )
    }))
}

fn timestamp(v: Option<&Value>) -> Result<Option<Timestamp>, String> {
    match v.and_then(Value::as_str) {
        Some(t) => parse_rfc3339(t).map(Some),
        None => Ok(None),
    }
}

fn metadata(object: &Value, default_namespace: &str) -> Result<ObjectMeta, String> {
    let m = object.get("metadata").cloned().unwrap_or(Value::Null);
    let namespace = match string(&m, "namespace") {
        ns if ns.is_empty() => default_namespace.to_owned(),
        ns => ns,
    };
    let owner_references = m
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .map(|r| OwnerReference {
                    api_version: string(r, "apiVersion"),
                    kind: string(r, "kind"),
                    name: string(r, "name"),
                    uid: string(r, "uid"),
                    controller: r
                        .get("controller")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ObjectMeta {
        name: string(&m, "name"),
        namespace,
        uid: string(&m, "uid"),
        resource_version: string(&m, "resourceVersion"),
        generation: m.get("generation").and_then(Value::as_i64).unwrap_or(0),
        labels: string_map(m.get("labels")),
        annotations: string_map(m.get("annotations")),
        creation_timestamp: timestamp(m.get("creationTimestamp"))?,
        deletion_timestamp: timestamp(m.get("deletionTimestamp"))?,
        owner_references,
    })
}

fn parse_jinghzhu(object: &Value) -> Result<Jinghzhu, String> {
    let metadata = metadata(object, "default")?;
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    let desired = spec.get("desired").and_then(Value::as_u64).unwrap_or(0);
    let template = spec
        .get("template")
        .filter(|t| t.is_object())
        .map(|t| PodTemplate {
            labels: string_map(t.pointer("/metadata/labels")),
            annotations: string_map(t.pointer("/metadata/annotations")),
            spec_json: t.get("spec").map(Value::to_string).unwrap_or_default(),
        });
    let status = object
        .get("status")
        .filter(|s| s.is_object())
        .map(|s| JinghzhuStatus {
            current: s.get("current").and_then(Value::as_u64).unwrap_or(0) as u32,
            pod_list: s
                .get("podList")
                .and_then(Value::as_array)
                .map(|l| {
                    l.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            state: string(s, "state"),
            message: string(s, "message"),
            observed_generation: s.get("observedGeneration").and_then(Value::as_i64),
        });
    Ok(Jinghzhu {
        metadata,
        spec: JinghzhuSpec {
            desired: u32::try_from(desired).map_err(|e| format!("spec.desired: {e}"))?,
            template,
        },
        status,
    })
}

fn parse_phase(name: &str) -> Result<PodPhase, String> {
    Ok(match name {
        "" | "Pending" => PodPhase::Pending,
        "Running" => PodPhase::Running,
        "Succeeded" => PodPhase::Succeeded,
        "Failed" => PodPhase::Failed,
        "Unknown" => PodPhase::Unknown,
        other => return Err(format!("unknown pod phase {other:?}")),
    })
}

fn parse_pod(object: &Value, default_namespace: &str) -> Result<Pod, String> {
    let status = object.get("status").cloned().unwrap_or(Value::Null);
    let ready = status
        .get("conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type") == Some(&Value::from("Ready"))
                    && c.get("status") == Some(&Value::from("True"))
            })
        });
    Ok(Pod {
        metadata: metadata(object, default_namespace)?,
        phase: parse_phase(&string(&status, "phase"))?,
        ready,
    })
}

/// Which Pods go into the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodSelection {
    /// Only Pods controlled by the Jinghzhu, as the host sends them.
    ControlledOnly,
    /// Every Pod in the file (to exercise the plugin's own filter).
    All,
}

/// The input a case directory describes.
pub fn load_case(dir: &Path, selection: PodSelection) -> Result<ReconcileInput, String> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name));
    let text = read("input.yaml").map_err(|e| format!("input.yaml: {e}"))?;
    let objects = objects(&text)?;
    let kind = |o: &Value| {
        o.get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let jinghzhus: Vec<&Value> = objects.iter().filter(|o| kind(o) == "Jinghzhu").collect();
    let [jz] = jinghzhus.as_slice() else {
        return Err(format!(
            "expected exactly one Jinghzhu, found {}",
            jinghzhus.len()
        ));
    };
    let jz = parse_jinghzhu(jz)?;
    let mut pods = Vec::new();
    for object in objects.iter().filter(|o| kind(o) == "Pod") {
        let pod = parse_pod(object, &jz.metadata.namespace)?;
        let controlled = pod::is_controlled_by(&pod, &jz);
        if controlled || selection == PodSelection::All {
            pods.push(pod);
        }
    }
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let now = match read("now") {
        Ok(t) => t,
        Err(_) => DEFAULT_NOW.to_owned(),
    };
    Ok(ReconcileInput {
        jinghzhu: jz,
        pods,
        now: parse_rfc3339(&now)?,
    })
}
