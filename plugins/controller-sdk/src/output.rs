//! What one reconcile proposes: the children as they should be, the
//! children to delete, the parent's new status, Events and a requeue.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::bindings::wasm_operator::controller::types as wire;
use crate::{Event, Input, KeyValue, ReconcileError, ReconcileOutput};

/// A child as the plugin wants it. The host adds the namespace, the owner
/// reference to the parent and its own label; never set those.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// e.g. `apps/v1`, or `v1` for the core group.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Its exact name (server-side apply needs one: derive it from the
    /// parent's, so every reconcile proposes the same child).
    pub name: String,
    /// Labels besides the host's own.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Every top-level field but `apiVersion`, `kind` and `metadata`, e.g.
    /// `{"spec": {...}}` or `{"data": {...}}`.
    pub body: Value,
}

impl Desired {
    /// A child of `kind` (in `api_version`) named `name`, with an empty body.
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            body: Value::Object(serde_json::Map::new()),
        }
    }

    /// With label `key` = `value`.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// With every label of `labels`.
    pub fn labels<K: Into<String>, V: Into<String>>(
        mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        for (key, value) in labels {
            self.labels.insert(key.into(), value.into());
        }
        self
    }

    /// With annotation `key` = `value`.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// With every annotation of `annotations`.
    pub fn annotations<K: Into<String>, V: Into<String>>(
        mut self,
        annotations: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        for (key, value) in annotations {
            self.annotations.insert(key.into(), value.into());
        }
        self
    }

    /// With this body (a JSON object: `{"spec": ...}`, `{"data": ...}`).
    pub fn body(mut self, body: Value) -> Self {
        self.body = body;
        self
    }

    /// The field at the JSON pointer `pointer` of its body (for tests).
    pub fn field(&self, pointer: &str) -> Option<&Value> {
        self.body.pointer(pointer)
    }

    fn into_wire(self) -> Result<wire::DesiredChild, ReconcileError> {
        if !self.body.is_object() {
            return Err(ReconcileError::permanent(format!(
                "the body of {} {} is not a JSON object",
                self.kind, self.name
            )));
        }
        Ok(wire::DesiredChild {
            api_version: self.api_version,
            kind: self.kind,
            name: self.name,
            labels: pairs(self.labels),
            annotations: pairs(self.annotations),
            body_json: self.body.to_string(),
        })
    }
}

/// A reconcile's output, built up by the plugin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    /// Children to create or update (server-side applied).
    pub apply: Vec<Desired>,
    /// Children to delete: `(apiVersion, kind, name)`.
    pub delete: Vec<(String, String, String)>,
    /// The parent's new `status`; `None`: no write.
    pub status: Option<Value>,
    /// Reconcile again after this long.
    pub requeue_after: Option<Duration>,
    /// Events to record on the parent.
    pub events: Vec<Event>,
}

impl Output {
    /// Nothing to do.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wants `child` to exist as given.
    pub fn apply(&mut self, child: Desired) -> &mut Self {
        self.apply.push(child);
        self
    }

    /// Deletes the child of `kind` named `name` (only a child the parent
    /// controls is deleted).
    pub fn delete(
        &mut self,
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> &mut Self {
        self.delete
            .push((api_version.into(), kind.into(), name.into()));
        self
    }

    /// Sets the parent's status to `status`, unless the stored one is
    /// already equal (then nothing is written).
    pub fn set_status(&mut self, input: &Input, status: Value) -> &mut Self {
        self.status = (input.status() != &status).then_some(status);
        self
    }

    /// Sets the fields of `fields` (a struct that serializes to a JSON
    /// object, or a [`json!`](crate::json) object) in the parent's status,
    /// keeping the stored status's other fields (another controller's, a
    /// human's), and writes it only when one of `fields` changes. A field
    /// absent or null in the stored status counts as its zero value (`0`,
    /// `""`, `false`, `[]`, `{}`), so a status whose empty fields were never
    /// stored is not rewritten on every reconcile. Use [`Self::set_status`]
    /// to own the whole status instead.
    ///
    /// Fails (permanently) when `fields` is not a JSON object.
    pub fn merge_status(
        &mut self,
        input: &Input,
        fields: &impl Serialize,
    ) -> Result<&mut Self, ReconcileError> {
        self.status = crate::status::merged(input.status(), fields)?;
        Ok(self)
    }

    /// Records `event` on the parent.
    pub fn event(&mut self, event: Event) -> &mut Self {
        self.events.push(event);
        self
    }

    /// Reconciles again after `after` (e.g. to poll something that sends no
    /// watch event).
    pub fn requeue_after(&mut self, after: Duration) -> &mut Self {
        self.requeue_after = Some(after);
        self
    }

    /// The children of `kind` it applies (for tests).
    pub fn applied<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Desired> + 'a {
        self.apply.iter().filter(move |child| child.kind == kind)
    }

    /// The wire output.
    pub fn into_wire(self) -> Result<ReconcileOutput, ReconcileError> {
        let status_json = match self.status {
            None => None,
            Some(status) if status.is_object() => Some(status.to_string()),
            Some(_) => {
                return Err(ReconcileError::permanent("the status is not a JSON object"));
            }
        };
        Ok(ReconcileOutput {
            apply: self
                .apply
                .into_iter()
                .map(Desired::into_wire)
                .collect::<Result<_, _>>()?,
            delete: self
                .delete
                .into_iter()
                .map(|(api_version, kind, name)| wire::ChildRef {
                    api_version,
                    kind,
                    name,
                })
                .collect(),
            status_json,
            requeue_after_ms: self
                .requeue_after
                .map(|after| u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
            events: self.events,
        })
    }
}

fn pairs(map: BTreeMap<String, String>) -> Vec<KeyValue> {
    map.into_iter()
        .map(|(key, value)| KeyValue { key, value })
        .collect()
}
