//! The StaticSite's `status`: what it should say now (the URL, ready
//! replicas from the owned Deployment, the content hash, the generation
//! seen). `Output::merge_status` keeps the stored status's other fields
//! and writes only a change.

use serde::Serialize;
use wasm_operator_controller_sdk::Value;

/// The fields of `status` the plugin owns. Other fields already in the
/// stored status are kept as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteStatus {
    /// Where the site answers in the cluster:
    /// `http://<name>.<namespace>.svc:<port>`.
    pub url: String,
    /// `status.readyReplicas` of the owned Deployment (0 when absent).
    pub ready_replicas: i64,
    /// The content hash the Deployment's pods serve (see [`crate::hash`]).
    pub content_hash: String,
    /// The parent's `metadata.generation` this status was computed for.
    pub observed_generation: i64,
}

/// The site's URL inside the cluster.
pub fn url(name: &str, namespace: &str, port: i64) -> String {
    format!("http://{name}.{namespace}.svc:{port}")
}

/// `status.readyReplicas` of a Deployment's body, 0 when absent.
pub fn ready_replicas(deployment: Option<&Value>) -> i64 {
    deployment
        .and_then(|body| body.pointer("/status/readyReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}
