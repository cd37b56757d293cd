//! Reading the parent's `spec`: the fields the plugin uses (`size`,
//! `containerPort`), checked, with error messages that say what to fix
//! (hand-written rather than `Input::spec_as`, so that each names the
//! field, its range and the value found). The CRD's schema already bounds them; the plugin checks again
//! so that it never proposes a Deployment from a spec it does not
//! understand (a CRD installed without the schema, an older version).

use wasm_operator_controller_sdk::Value;
use wasm_operator_controller_sdk::serde_json::Map;

/// The largest `spec.size` accepted (the CRD's `maximum`).
pub const MAX_SIZE: i64 = 100;

/// `spec.containerPort` when absent (the CRD's `default`).
pub const DEFAULT_CONTAINER_PORT: i64 = 11211;

/// What the plugin reads from a Memcached's `spec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemcachedSpec {
    /// Replicas of the memcached Deployment (0..=[`MAX_SIZE`]).
    pub size: i64,
    /// The port memcached listens on (1..=65535).
    pub container_port: i64,
}

/// Reads and checks `spec.size` and `spec.containerPort` of the parent's
/// body (`Input::body`).
pub fn read_spec(body: &Value) -> Result<MemcachedSpec, String> {
    let spec = match body.get("spec") {
        Some(Value::Object(spec)) => spec,
        Some(other) => return Err(format!("spec must be an object, got {other}")),
        None => return Err("spec is missing: set spec.size (0 to 100)".to_string()),
    };
    let size = integer(spec, "size", None, 0..=MAX_SIZE)?;
    let container_port = integer(
        spec,
        "containerPort",
        Some(DEFAULT_CONTAINER_PORT),
        1..=65535,
    )?;
    Ok(MemcachedSpec {
        size,
        container_port,
    })
}

/// `spec.<field>` as an integer within `range`; `default` when absent or
/// null (an error when there is no default).
fn integer(
    spec: &Map<String, Value>,
    field: &str,
    default: Option<i64>,
    range: std::ops::RangeInclusive<i64>,
) -> Result<i64, String> {
    let (low, high) = (range.start(), range.end());
    let value = match (spec.get(field), default) {
        (None | Some(Value::Null), Some(default)) => return Ok(default),
        (None | Some(Value::Null), None) => {
            return Err(format!(
                "spec.{field} is missing: set it to an integer from {low} to {high}"
            ));
        }
        (Some(value), _) => value,
    };
    match value.as_i64() {
        Some(n) if range.contains(&n) => Ok(n),
        _ => Err(format!(
            "spec.{field} must be an integer from {low} to {high}, got {value}: change spec.{field}"
        )),
    }
}
