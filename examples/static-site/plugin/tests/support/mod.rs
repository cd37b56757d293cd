//! Builders of reconcile inputs for the scenario tests: a StaticSite
//! parent and its ConfigMaps, Deployments and Services, as the host would
//! list them.

#![allow(dead_code)]

use serde_json::{Value, json};
use static_site_plugin::{Children, Object, ObjectMeta, ReconcileInput, Timestamp};

/// The parent's name in every scenario.
pub const NAME: &str = "hello";
/// The parent's namespace in every scenario.
pub const NAMESPACE: &str = "web";
/// The hash of [`index_only`] (computed independently, with Python).
pub const INDEX_HASH: &str = "56a20617fe44fcc1";

/// A timestamp `seconds` after the epoch.
pub fn at(seconds: i64) -> Timestamp {
    Timestamp {
        seconds,
        nanoseconds: 0,
    }
}

/// Metadata of an object `name` in [`NAMESPACE`] at `generation`.
pub fn meta(name: &str, generation: i64) -> ObjectMeta {
    ObjectMeta {
        name: name.to_string(),
        namespace: NAMESPACE.to_string(),
        uid: format!("uid-{name}"),
        resource_version: "1".to_string(),
        generation,
        labels: Vec::new(),
        annotations: Vec::new(),
        creation_timestamp: Some(at(1_000)),
        deletion_timestamp: None,
        owner_references: Vec::new(),
    }
}

/// An object of any kind with a JSON body.
pub fn object(api_version: &str, kind: &str, name: &str, body: &Value) -> Object {
    Object {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        metadata: meta(name, 1),
        body_json: body.to_string(),
    }
}

/// One page: `index.html` saying hello.
pub fn index_only() -> Value {
    json!({ "index.html": "<h1>Hello</h1>" })
}

/// The StaticSite [`NAME`] at generation 1 with this body.
pub fn parent(body: &Value) -> Object {
    object("web.example.com/v1alpha1", "StaticSite", NAME, body)
}

/// The site's ConfigMap as stored.
pub fn config_map(name: &str, content: &Value) -> Object {
    object("v1", "ConfigMap", name, &json!({ "data": content }))
}

/// An existing Deployment `name` with `replicas`, `ready` ready ones and
/// pods carrying the content hash `hash`.
pub fn deployment(name: &str, replicas: i64, ready: i64, hash: &str) -> Object {
    let body = json!({
        "spec": {
            "replicas": replicas,
            "template": { "metadata": { "annotations": { "web.example.com/content-hash": hash } } },
        },
        "status": { "replicas": replicas, "readyReplicas": ready },
    });
    object("apps/v1", "Deployment", name, &body)
}

/// An existing Service `name`.
pub fn service(name: &str) -> Object {
    object(
        "v1",
        "Service",
        name,
        &json!({ "spec": { "type": "ClusterIP" } }),
    )
}

/// The three declared child kinds with these objects, in declaration order.
pub fn listed(
    config_maps: Vec<Object>,
    deployments: Vec<Object>,
    services: Vec<Object>,
) -> Vec<Children> {
    vec![
        children("v1", "ConfigMap", config_maps),
        children("apps/v1", "Deployment", deployments),
        children("v1", "Service", services),
    ]
}

/// All three children of the site as the plugin made them, at `replicas`
/// with `ready` ready, serving `hash`.
pub fn converged(replicas: i64, ready: i64, hash: &str) -> Vec<Children> {
    listed(
        vec![config_map("hello-content", &index_only())],
        vec![deployment(NAME, replicas, ready, hash)],
        vec![service(NAME)],
    )
}

/// One declared child kind and its objects.
pub fn children(api_version: &str, kind: &str, objects: Vec<Object>) -> Children {
    Children {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        objects,
    }
}

/// An input of `parent` and `children`.
pub fn input(parent: Object, children: Vec<Children>) -> ReconcileInput {
    ReconcileInput {
        parent,
        children,
        now: at(3_000),
    }
}

/// A JSON text parsed (test data and outputs are always JSON).
pub fn json_of(text: &str) -> Value {
    serde_json::from_str(text).expect("JSON text")
}
