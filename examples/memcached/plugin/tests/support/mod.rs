//! Inputs of the scenario tests on the SDK's testing kit: a Memcached
//! parent with its Deployments and Pods, as the host would list them.

#![allow(dead_code)]

use memcached_plugin::Memcached;
use wasm_operator_controller_sdk::testing::{self, Fixture, NOW};
use wasm_operator_controller_sdk::{Object, Output, ReconcileError, Value, json};

/// The parent's name in every scenario.
pub const NAME: &str = "memcached-sample";

/// The Memcached [`NAME`] at generation 1 with this `spec` and no
/// status, declaring Deployments (and no Pods).
pub fn parent(spec: Value) -> Fixture {
    Fixture::parent("cache.example.com/v1alpha1", "Memcached", NAME)
        .spec(spec)
        .declare("apps/v1", "Deployment")
}

/// [`parent`] of `size` with this stored status.
pub fn sample(size: i64, status: Value) -> Fixture {
    parent(json!({ "size": size })).status(status)
}

/// An existing Deployment `name` with `replicas` and `ready` ready ones.
pub fn deployment(name: &str, replicas: i64, ready: i64) -> Object {
    let body = json!({
        "spec": { "replicas": replicas },
        "status": { "replicas": replicas, "readyReplicas": ready },
    });
    testing::object("apps/v1", "Deployment", name, body)
}

/// A pod `name` of the Memcached `instance`, terminating or not.
pub fn pod(name: &str, instance: &str, terminating: bool) -> Object {
    let manifest = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": { "app.kubernetes.io/instance": instance, "app.kubernetes.io/name": "memcached" },
        },
        "spec": {},
        "status": {},
    });
    let mut pod = testing::from_manifest(&manifest).expect("a Pod manifest");
    pod.metadata.deletion_timestamp = terminating.then_some(NOW);
    pod
}

/// `fixture` with these children.
pub fn with(fixture: Fixture, children: impl IntoIterator<Item = Object>) -> Fixture {
    children.into_iter().fold(fixture, Fixture::child)
}

/// One reconcile of the plugin on `fixture`.
pub fn reconcile(fixture: &Fixture) -> Result<Output, ReconcileError> {
    testing::reconcile::<Memcached>(fixture)
}

/// One reconcile that must succeed.
pub fn run(fixture: &Fixture) -> Output {
    reconcile(fixture).expect("reconcile succeeds")
}

/// The status an output writes.
pub fn status_of(out: &Output) -> Value {
    out.status.clone().expect("a status write")
}
