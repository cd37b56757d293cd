//! Inputs as the host builds them, for native tests: a parent with its
//! declared child kinds and children, made in code or read from
//! Kubernetes manifests (JSON), and [`reconcile`] to run a [`Controller`]
//! on one.
//!
//! ```
//! use wasm_operator_controller_sdk::testing::{self, Fixture};
//! use wasm_operator_controller_sdk::json;
//!
//! let input = Fixture::parent("cache.example.com/v1alpha1", "Memcached", "web")
//!     .spec(json!({"size": 3}))
//!     .declare("apps/v1", "Deployment")
//!     .child(testing::object("apps/v1", "Deployment", "web", json!({"spec": {"replicas": 3}})))
//!     .input();
//! assert_eq!(input.children(), 1);
//! ```

use serde_json::{Map, Value};

use crate::{
    Children, Controller, Input, KeyValue, Object, ObjectMeta, Output, OwnerReference,
    ReconcileError, ReconcileInput, Timestamp,
};

/// The namespace of fixtures unless set.
pub const NAMESPACE: &str = "default";

/// The host's clock in fixtures unless set: 2026-01-01T00:00:00Z.
pub const NOW: Timestamp = Timestamp {
    seconds: 1_767_225_600,
    nanoseconds: 0,
};

/// A parent, its declared child kinds and its children.
#[derive(Debug, Clone)]
pub struct Fixture {
    parent: Object,
    body: Map<String, Value>,
    children: Vec<Children>,
    now: Timestamp,
}

/// A built input: the wire record, and its [`Input`] view.
#[derive(Debug, Clone)]
pub struct Built {
    raw: ReconcileInput,
}

impl Built {
    /// The wire record the host would send.
    pub fn raw(&self) -> &ReconcileInput {
        &self.raw
    }

    /// How many children it holds, over every kind.
    pub fn children(&self) -> usize {
        self.raw.children.iter().map(|c| c.objects.len()).sum()
    }

    /// The plugin's view of it.
    pub fn view(&self) -> Input {
        Input::new(self.raw.clone()).expect("a fixture's parent body is a JSON object")
    }
}

impl Fixture {
    /// A parent of `kind` named `name` in [`NAMESPACE`], generation 1, with
    /// no spec.
    pub fn parent(api_version: &str, kind: &str, name: &str) -> Self {
        Self {
            parent: Object {
                api_version: api_version.into(),
                kind: kind.into(),
                metadata: meta(name),
                body_json: String::new(),
            },
            body: Map::new(),
            children: Vec::new(),
            now: NOW,
        }
    }

    /// A parent read from a Kubernetes manifest (`apiVersion`, `kind`,
    /// `metadata`, the rest as its body).
    pub fn from_manifest(manifest: &Value) -> Result<Self, String> {
        let object = from_manifest(manifest)?;
        let body = match serde_json::from_str(&object.body_json) {
            Ok(Value::Object(body)) => body,
            _ => Map::new(),
        };
        Ok(Self {
            parent: object,
            body,
            children: Vec::new(),
            now: NOW,
        })
    }

    /// With this `spec`.
    pub fn spec(self, spec: Value) -> Self {
        self.field("spec", spec)
    }

    /// With this stored `status`.
    pub fn status(self, status: Value) -> Self {
        self.field("status", status)
    }

    /// With the top-level field `key` (e.g. `data`).
    pub fn field(mut self, key: &str, value: Value) -> Self {
        self.body.insert(key.into(), value);
        self
    }

    /// In namespace `namespace` (its children too).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.parent.metadata.namespace = namespace.into();
        for entry in &mut self.children {
            for object in &mut entry.objects {
                object.metadata.namespace = namespace.into();
            }
        }
        self
    }

    /// At `metadata.generation` `generation`.
    pub fn generation(mut self, generation: i64) -> Self {
        self.parent.metadata.generation = generation;
        self
    }

    /// Being deleted.
    pub fn deleting(mut self) -> Self {
        self.parent.metadata.deletion_timestamp = Some(self.now);
        self
    }

    /// With the host's clock at `now`.
    pub fn now(mut self, now: Timestamp) -> Self {
        self.now = now;
        self
    }

    /// Declares a child kind (listed even with no children, as the host
    /// lists every kind the controller declares, in declaration order).
    pub fn declare(mut self, api_version: &str, kind: &str) -> Self {
        self.entry(api_version, kind);
        self
    }

    /// With `child` (its kind declared if it was not), controlled by the
    /// parent, sorted by name among its kind.
    pub fn child(mut self, mut child: Object) -> Self {
        child.metadata.namespace = self.parent.metadata.namespace.clone();
        child.metadata.owner_references = vec![OwnerReference {
            api_version: self.parent.api_version.clone(),
            kind: self.parent.kind.clone(),
            name: self.parent.metadata.name.clone(),
            uid: self.parent.metadata.uid.clone(),
            controller: true,
        }];
        let entry = self.entry(&child.api_version.clone(), &child.kind.clone());
        entry
            .objects
            .retain(|o| o.metadata.name != child.metadata.name);
        entry.objects.push(child);
        entry
            .objects
            .sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        self
    }

    fn entry(&mut self, api_version: &str, kind: &str) -> &mut Children {
        let at = match self
            .children
            .iter()
            .position(|c| c.api_version == api_version && c.kind == kind)
        {
            Some(at) => at,
            None => {
                self.children.push(Children {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    objects: Vec::new(),
                });
                self.children.len() - 1
            }
        };
        &mut self.children[at]
    }

    /// The input the host would send.
    pub fn input(&self) -> Built {
        let mut parent = self.parent.clone();
        parent.body_json = Value::Object(self.body.clone()).to_string();
        Built {
            raw: ReconcileInput {
                parent,
                children: self.children.clone(),
                now: self.now,
            },
        }
    }
}

/// One reconcile of `C` on `fixture`, natively.
pub fn reconcile<C: Controller>(fixture: &Fixture) -> Result<Output, ReconcileError> {
    C::reconcile(&Input::new(fixture.input().raw)?)
}

/// An object of `kind` named `name` in [`NAMESPACE`] with this body (e.g.
/// `{"spec": ..., "status": ...}`).
pub fn object(api_version: &str, kind: &str, name: &str, body: Value) -> Object {
    Object {
        api_version: api_version.into(),
        kind: kind.into(),
        metadata: meta(name),
        body_json: body.to_string(),
    }
}

/// An object from a Kubernetes manifest: `apiVersion`, `kind`,
/// `metadata` (`name`, `namespace`, `uid`, `generation`, `labels`,
/// `annotations`), every other field as its body.
pub fn from_manifest(manifest: &Value) -> Result<Object, String> {
    let Value::Object(fields) = manifest else {
        return Err("a manifest is a JSON object".into());
    };
    let text = |key: &str| fields.get(key).and_then(Value::as_str).map(str::to_owned);
    let api_version = text("apiVersion").ok_or("the manifest has no apiVersion")?;
    let kind = text("kind").ok_or("the manifest has no kind")?;
    let metadata = fields
        .get("metadata")
        .ok_or("the manifest has no metadata")?;
    let name = metadata
        .get("name")
        .and_then(Value::as_str)
        .ok_or("the manifest has no metadata.name")?;
    let mut meta = meta(name);
    if let Some(namespace) = metadata.get("namespace").and_then(Value::as_str) {
        meta.namespace = namespace.into();
    }
    if let Some(uid) = metadata.get("uid").and_then(Value::as_str) {
        meta.uid = uid.into();
    }
    if let Some(generation) = metadata.get("generation").and_then(Value::as_i64) {
        meta.generation = generation;
    }
    meta.labels = pairs(metadata.get("labels"));
    meta.annotations = pairs(metadata.get("annotations"));
    let body: Map<String, Value> = fields
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    Ok(Object {
        api_version,
        kind,
        metadata: meta,
        body_json: Value::Object(body).to_string(),
    })
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: name.into(),
        namespace: NAMESPACE.into(),
        uid: format!("uid-{name}"),
        resource_version: "1".into(),
        generation: 1,
        labels: Vec::new(),
        annotations: Vec::new(),
        creation_timestamp: Some(NOW),
        deletion_timestamp: None,
        owner_references: Vec::new(),
    }
}

/// A string map's entries, sorted by key (as the host sends them).
fn pairs(map: Option<&Value>) -> Vec<KeyValue> {
    let mut pairs: Vec<KeyValue> = map
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| {
            Some(KeyValue {
                key: key.clone(),
                value: value.as_str()?.to_owned(),
            })
        })
        .collect();
    pairs.sort_by(|a, b| a.key.cmp(&b.key));
    pairs
}
