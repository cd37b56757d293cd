//! Merging the fields a plugin owns into the parent's stored `status`, and
//! deciding whether that changes anything worth a write.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::ReconcileError;

/// The stored status with `fields` set over it, or `None` when that says
/// nothing new. A field of `fields` absent or null in `stored` counts as
/// its zero value, so a status whose empty fields were never stored (or
/// were dropped) is not rewritten on every reconcile.
pub(crate) fn merged(
    stored: &Value,
    fields: &impl Serialize,
) -> Result<Option<Value>, ReconcileError> {
    let fields = match serde_json::to_value(fields) {
        Ok(Value::Object(fields)) => fields,
        Ok(other) => {
            return Err(ReconcileError::permanent(format!(
                "the status is not a JSON object: {other}"
            )));
        }
        Err(err) => {
            return Err(ReconcileError::permanent(format!(
                "the status does not serialize: {err}"
            )));
        }
    };
    let stored = stored.as_object().cloned().unwrap_or_default();
    let mut as_stored = stored.clone();
    for (key, value) in &fields {
        if as_stored.get(key).is_none_or(Value::is_null) {
            as_stored.insert(key.clone(), zero_like(value));
        }
    }
    let mut new = stored;
    new.extend(fields);
    Ok((new != as_stored).then_some(Value::Object(new)))
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
