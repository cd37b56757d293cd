//! The Memcached's `status`: what it should say now (ready replicas from
//! the owned Deployment, the names of its pods, the generation seen).
//! `Output::merge_status` keeps the stored status's other fields and
//! writes only a change.

use serde::Serialize;
use wasm_operator_controller_sdk::{Input, Value};

use crate::deployment::APP_NAME;

/// The fields of `status` the plugin owns. Other fields already in the
/// stored status are kept as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// Names of the memcached pods that are not terminating, sorted.
    pub nodes: Vec<String>,
    /// `status.readyReplicas` of the owned Deployment (0 when absent).
    pub ready_replicas: i64,
    /// The parent's `metadata.generation` this status was computed for.
    pub observed_generation: i64,
}

/// `status.readyReplicas` of a Deployment's body, 0 when absent.
pub fn ready_replicas(deployment: Option<&Value>) -> i64 {
    deployment
        .and_then(|body| body.pointer("/status/readyReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Sorted names of the non-terminating pods of the Memcached `instance`
/// (by its selector labels) among the input's `Pod` children; none when
/// the controller declares no `Pod` kind.
pub fn pod_names(input: &Input, instance: &str) -> Vec<String> {
    let mut names: Vec<String> = input
        .children("v1/Pod")
        .filter(|pod| !pod.is_deleting())
        .filter(|pod| {
            pod.label("app.kubernetes.io/name") == Some(APP_NAME)
                && pod.label("app.kubernetes.io/instance") == Some(instance)
        })
        .map(|pod| pod.name().to_owned())
        .collect();
    names.sort();
    names
}
