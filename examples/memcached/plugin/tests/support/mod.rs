//! Builders of reconcile inputs for the scenario tests: a Memcached
//! parent, its Deployments and Pods, as the host would list them.

#![allow(dead_code)]

use memcached_plugin::{Children, KeyValue, Object, ObjectMeta, ReconcileInput, Timestamp};
use serde_json::{Value, json};

/// The parent's name in every scenario.
pub const NAME: &str = "memcached-sample";
/// The parent's namespace in every scenario.
pub const NAMESPACE: &str = "default";

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
pub fn object(api_version: &str, kind: &str, metadata: ObjectMeta, body: &Value) -> Object {
    Object {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        metadata,
        body_json: body.to_string(),
    }
}

/// The Memcached [`NAME`] at generation 1 with this body.
pub fn parent(body: &Value) -> Object {
    object(
        "cache.example.com/v1alpha1",
        "Memcached",
        meta(NAME, 1),
        body,
    )
}

/// An existing Deployment `name` with `replicas` and `ready` ready ones.
pub fn deployment(name: &str, replicas: i64, ready: i64) -> Object {
    let body = json!({
        "spec": { "replicas": replicas },
        "status": { "replicas": replicas, "readyReplicas": ready },
    });
    object("apps/v1", "Deployment", meta(name, 1), &body)
}

/// A pod `name` of the Memcached `instance`, terminating or not.
pub fn pod(name: &str, instance: &str, terminating: bool) -> Object {
    let mut metadata = meta(name, 0);
    metadata.labels = vec![
        kv("app.kubernetes.io/instance", instance),
        kv("app.kubernetes.io/name", "memcached"),
    ];
    metadata.deletion_timestamp = terminating.then(|| at(2_000));
    object("v1", "Pod", metadata, &json!({ "spec": {}, "status": {} }))
}

/// A label or annotation.
pub fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: value.to_string(),
    }
}

/// The `Deployment` entry of an input.
pub fn deployments(objects: Vec<Object>) -> Children {
    children("apps/v1", "Deployment", objects)
}

/// The `Pod` entry of an input.
pub fn pods(objects: Vec<Object>) -> Children {
    children("v1", "Pod", objects)
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
