//! The StaticSite's `status`: what it should say now (the URL, ready
//! replicas from the owned Deployment, the content hash, the generation
//! seen) and whether that differs from what is stored, so that an
//! unchanged status is never written.

use serde::Serialize;
use serde_json::{Map, Value};

/// The fields of `status` the plugin owns. Other fields already in the
/// stored status are kept as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteStatus {
    /// Where the site answers in the cluster:
    /// `http://<name>.<namespace>.svc:<port>`.
    pub url: String,
    /// `status.readyReplicas` of the owned Deployment (0 when absent).
    pub ready_replicas: i64,
    /// The content hash the Deployment's pods serve (see [`crate::hash`]).
    pub content_hash: String,
    /// The parent's `metadata.generation` this status was computed for.
    pub observed_generation: i64,
}

/// The site's URL inside the cluster.
pub fn url(name: &str, namespace: &str, port: i64) -> String {
    format!("http://{name}.{namespace}.svc:{port}")
}

/// `status.readyReplicas` of a Deployment body, 0 when absent.
pub fn ready_replicas(deployment: Option<&Map<String, Value>>) -> i64 {
    deployment
        .and_then(|body| body.get("status"))
        .and_then(|status| status.get("readyReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The new `status` JSON text when `ours` changes the stored `current`
/// status; `None` when it says the same. A field of ours that is absent or
/// null in `current` counts as its zero value (`0`, `""`), so a status
/// whose fields the API server dropped is not rewritten forever.
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
