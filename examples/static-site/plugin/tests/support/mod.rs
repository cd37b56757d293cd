//! Inputs of the scenario tests on the SDK's testing kit: a StaticSite
//! parent and its ConfigMaps, Deployments and Services, as the host would
//! list them.

#![allow(dead_code)]

use static_site_plugin::StaticSite;
use wasm_operator_controller_sdk::testing::{self, Fixture};
use wasm_operator_controller_sdk::{Desired, Object, Output, ReconcileError, Value, json};

/// The parent's name in every scenario.
pub const NAME: &str = "hello";
/// The parent's namespace in every scenario.
pub const NAMESPACE: &str = "web";
/// The hash of [`index_only`] (computed independently, with Python).
pub const INDEX_HASH: &str = "56a20617fe44fcc1";

/// One page: `index.html` saying hello.
pub fn index_only() -> Value {
    json!({ "index.html": "<h1>Hello</h1>" })
}

/// The StaticSite `name` in [`NAMESPACE`] at generation 1 with this body
/// (`spec`, `status`), declaring its three child kinds in order.
pub fn named(name: &str, body: Value) -> Fixture {
    let fixture = Fixture::parent("web.example.com/v1alpha1", "StaticSite", name)
        .namespace(NAMESPACE)
        .declare("v1", "ConfigMap")
        .declare("apps/v1", "Deployment")
        .declare("v1", "Service");
    let Value::Object(fields) = body else {
        return fixture;
    };
    fields
        .into_iter()
        .fold(fixture, |fixture, (key, value)| fixture.field(&key, value))
}

/// The StaticSite [`NAME`] with this `spec` and stored `status`.
pub fn site(spec: Value, status: Value) -> Fixture {
    named(NAME, json!({ "spec": spec, "status": status }))
}

/// The site's ConfigMap as stored.
pub fn config_map(name: &str, content: &Value) -> Object {
    testing::object("v1", "ConfigMap", name, json!({ "data": content }))
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
    testing::object("apps/v1", "Deployment", name, body)
}

/// An existing Service `name`.
pub fn service(name: &str) -> Object {
    testing::object(
        "v1",
        "Service",
        name,
        json!({ "spec": { "type": "ClusterIP" } }),
    )
}

/// All three children of the site as the plugin made them, at `replicas`
/// with `ready` ready, serving `hash`.
pub fn converged(replicas: i64, ready: i64, hash: &str) -> Vec<Object> {
    vec![
        config_map("hello-content", &index_only()),
        deployment(NAME, replicas, ready, hash),
        service(NAME),
    ]
}

/// `fixture` with these children.
pub fn with(fixture: Fixture, children: impl IntoIterator<Item = Object>) -> Fixture {
    children.into_iter().fold(fixture, Fixture::child)
}

/// One reconcile of the plugin on `fixture`.
pub fn reconcile(fixture: &Fixture) -> Result<Output, ReconcileError> {
    testing::reconcile::<StaticSite>(fixture)
}

/// One reconcile that must succeed.
pub fn run(fixture: &Fixture) -> Output {
    reconcile(fixture).expect("reconcile succeeds")
}

/// The status an output writes.
pub fn status_of(out: &Output) -> Value {
    out.status.clone().expect("a status write")
}

/// The applied child of `kind`.
pub fn applied<'a>(out: &'a Output, kind: &'a str) -> &'a Desired {
    out.applied(kind).next().expect("a child of that kind")
}

/// The body of the applied child of `kind`.
pub fn body(out: &Output, kind: &str) -> Value {
    applied(out, kind).body.clone()
}
