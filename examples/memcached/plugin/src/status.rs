//! The Memcached's `status`: what it should say now (ready replicas from
//! the owned Deployment, the names of its pods, the generation seen) and
//! whether that differs from what is stored, so that an unchanged status
//! is never written.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::Children;
use crate::deployment::APP_NAME;

/// The fields of `status` the plugin owns. Other fields already in the
/// stored status are kept as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// Names of the memcached pods that are not terminating, sorted.
    pub nodes: Vec<String>,
    /// `status.readyReplicas` of the owned Deployment (0 when absent).
    pub ready_replicas: i64,
    /// The parent's `metadata.generation` this status was computed for.
    pub observed_generation: i64,
}

/// `status.readyReplicas` of a Deployment body, 0 when absent.
pub fn ready_replicas(deployment: Option<&Map<String, Value>>) -> i64 {
    deployment
        .and_then(|body| body.get("status"))
        .and_then(|status| status.get("readyReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Sorted names of the non-terminating pods of the Memcached `instance`
/// (by its selector labels) among `pods`, the input's `Pod` entry if the
/// host lists one; none without it.
pub fn pod_names(pods: Option<&Children>, instance: &str) -> Vec<String> {
    let Some(pods) = pods else {
        return Vec::new();
    };
    let mut names: Vec<String> = pods
        .objects
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            let label = |key: &str| {
                pod.metadata
                    .labels
                    .iter()
                    .find(|kv| kv.key == key)
                    .map(|kv| kv.value.as_str())
            };
            label("app.kubernetes.io/name") == Some(APP_NAME)
                && label("app.kubernetes.io/instance") == Some(instance)
        })
        .map(|pod| pod.metadata.name.clone())
        .collect();
    names.sort();
    names
}

/// The new `status` JSON text when `ours` changes the stored `current`
/// status; `None` when it says the same. A field of ours that is absent or
/// null in `current` counts as its zero value (`0`, `[]`, `""`), so a
/// status whose fields the API server dropped is not rewritten forever.
pub fn update(current: Option<&Value>, ours: &impl Serialize) -> Result<Option<String>, String> {
    let ours = match serde_json::to_value(ours) {
        Ok(Value::Object(ours)) => ours,
        Ok(other) => return Err(format!("status is not an object: {other}")),
        Err(error) => return Err(format!("status does not serialize: {error}")),
    };
    let current = match current {
        Some(Value::Object(current)) => current.clone(),
        _ => Map::new(),
    };
    let mut normalized = current.clone();
    for (key, value) in &ours {
        if normalized.get(key).is_none_or(Value::is_null) {
            normalized.insert(key.clone(), zero_like(value));
        }
    }
    let mut new = current;
    new.extend(ours);
    if new == normalized {
        return Ok(None);
    }
    Ok(Some(Value::Object(new).to_string()))
}

/// The zero value of `value`'s JSON type.
fn zero_like(value: &Value) -> Value {
    match value {
        Value::Null => Value::Null,
        Value::Bool(_) => Value::Bool(false),
        Value::Number(_) => Value::from(0),
        Value::String(_) => Value::String(String::new()),
        Value::Array(_) => Value::Array(Vec::new()),
        Value::Object(_) => Value::Object(Map::new()),
    }
}
