//! The input of one reconcile as a plugin reads it: the parent's metadata,
//! its `spec` and `status` parsed once, and its children by kind.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Object, ObjectMeta, ReconcileError, ReconcileInput, Timestamp};

/// One reconcile's input: the parent and the children it controls.
#[derive(Debug, Clone)]
pub struct Input {
    raw: ReconcileInput,
    body: Value,
}

/// A child the parent controls, as the host's cache has it.
#[derive(Debug, Clone, Copy)]
pub struct Child<'a> {
    object: &'a Object,
}

static NULL: Value = Value::Null;

impl Input {
    /// Reads `raw`: the parent's body must be a JSON object (the host always
    /// sends one).
    pub fn new(raw: ReconcileInput) -> Result<Self, ReconcileError> {
        let body: Value = serde_json::from_str(&raw.parent.body_json).map_err(|err| {
            ReconcileError::permanent(format!("the parent's body is not JSON: {err}"))
        })?;
        if !body.is_object() {
            return Err(ReconcileError::permanent(
                "the parent's body is not a JSON object",
            ));
        }
        Ok(Self { raw, body })
    }

    /// The wire input, as the host sent it.
    pub fn raw(&self) -> &ReconcileInput {
        &self.raw
    }

    /// The parent's metadata.
    pub fn meta(&self) -> &ObjectMeta {
        &self.raw.parent.metadata
    }

    /// The parent's name.
    pub fn name(&self) -> &str {
        &self.raw.parent.metadata.name
    }

    /// The parent's namespace (every child lives there too).
    pub fn namespace(&self) -> &str {
        &self.raw.parent.metadata.namespace
    }

    /// The parent's `metadata.generation` (0 when the kind does not track it).
    pub fn generation(&self) -> i64 {
        self.raw.parent.metadata.generation
    }

    /// Whether the parent is being deleted (its children go with it: the
    /// host's owner references let Kubernetes collect them).
    pub fn is_deleting(&self) -> bool {
        self.raw.parent.metadata.deletion_timestamp.is_some()
    }

    /// The parent's label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        find(&self.raw.parent.metadata.labels, key)
    }

    /// The parent's `apiVersion` and `kind`.
    pub fn parent_kind(&self) -> (&str, &str) {
        (&self.raw.parent.api_version, &self.raw.parent.kind)
    }

    /// Every top-level field of the parent but `apiVersion`, `kind` and
    /// `metadata`, e.g. `{"spec": {...}, "status": {...}}`.
    pub fn body(&self) -> &Value {
        &self.body
    }

    /// The parent's `spec` (`null` when it has none).
    pub fn spec(&self) -> &Value {
        self.body.get("spec").unwrap_or(&NULL)
    }

    /// The parent's stored `status` (`null` when it has none yet).
    pub fn status(&self) -> &Value {
        self.body.get("status").unwrap_or(&NULL)
    }

    /// The parent's `spec` as `T` (an absent spec reads as `{}`, so fields
    /// with `#[serde(default)]` take their defaults). A spec that does not
    /// fit is a permanent error naming the field.
    pub fn spec_as<T: DeserializeOwned>(&self) -> Result<T, ReconcileError> {
        let spec = match self.spec() {
            Value::Null => Value::Object(serde_json::Map::new()),
            spec => spec.clone(),
        };
        serde_json::from_value(spec)
            .map_err(|err| ReconcileError::permanent(format!("invalid spec: {err}")))
    }

    /// The host's clock at the start of this reconcile.
    pub fn now(&self) -> Timestamp {
        self.raw.now
    }

    /// The children of `kind` (`Deployment`, or `apps/v1/Deployment` when
    /// two declared kinds share a name), sorted by name, terminating ones
    /// included. Empty when the controller does not declare the kind.
    pub fn children<'a>(&'a self, kind: &str) -> impl Iterator<Item = Child<'a>> + use<'a> {
        let entries: Vec<&'a crate::Children> = self
            .raw
            .children
            .iter()
            .filter(|entry| names_kind(entry, kind))
            .collect();
        entries
            .into_iter()
            .flat_map(|entry| entry.objects.iter().map(|object| Child { object }))
    }

    /// The child of `kind` named `name`.
    pub fn child(&self, kind: &str, name: &str) -> Option<Child<'_>> {
        self.children(kind).find(|child| child.name() == name)
    }

    /// Whether the controller declares child kind `kind` (the host lists
    /// every declared kind, with children or not).
    pub fn declares(&self, kind: &str) -> bool {
        self.raw
            .children
            .iter()
            .any(|entry| names_kind(entry, kind))
    }
}

impl<'a> Child<'a> {
    /// The wire object.
    pub fn object(&self) -> &'a Object {
        self.object
    }

    /// Its metadata.
    pub fn meta(&self) -> &'a ObjectMeta {
        &self.object.metadata
    }

    /// Its name.
    pub fn name(&self) -> &'a str {
        &self.object.metadata.name
    }

    /// Its `kind`.
    pub fn kind(&self) -> &'a str {
        &self.object.kind
    }

    /// Whether it is being deleted.
    pub fn is_deleting(&self) -> bool {
        self.object.metadata.deletion_timestamp.is_some()
    }

    /// Its label `key`.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        find(&self.object.metadata.labels, key)
    }

    /// Its annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        find(&self.object.metadata.annotations, key)
    }

    /// Every top-level field but `apiVersion`, `kind` and `metadata`
    /// (parsed on each call: keep the value when reading several fields).
    pub fn body(&self) -> Result<Value, ReconcileError> {
        serde_json::from_str(&self.object.body_json).map_err(|err| {
            ReconcileError::permanent(format!(
                "the body of {} {} is not JSON: {err}",
                self.object.kind, self.object.metadata.name
            ))
        })
    }

    /// The field at the JSON pointer `pointer` of its body, e.g.
    /// `/status/readyReplicas` (`None` when absent or unreadable).
    pub fn field(&self, pointer: &str) -> Option<Value> {
        self.body().ok()?.pointer(pointer).cloned()
    }
}

/// Whether `kind` (`Kind` or `apiVersion/Kind`) names the entry's kind.
fn names_kind(entry: &crate::Children, kind: &str) -> bool {
    match kind.rsplit_once('/') {
        Some((api_version, kind)) => entry.api_version == api_version && entry.kind == kind,
        None => entry.kind == kind,
    }
}

fn find<'a>(entries: &'a [crate::KeyValue], key: &str) -> Option<&'a str> {
    entries
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}
