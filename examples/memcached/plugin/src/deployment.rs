//! The Deployment a Memcached owns: its name (the parent's), labels and
//! body (replicas, selector and a restricted pod template running
//! memcached), as the Operator SDK tutorial builds it.

use serde_json::{Value, json};

use crate::spec::MemcachedSpec;
use crate::{DesiredChild, KeyValue};

/// API version of the owned Deployment.
pub const API_VERSION: &str = "apps/v1";
/// Kind of the owned Deployment.
pub const KIND: &str = "Deployment";
/// The memcached image the tutorial runs.
pub const IMAGE: &str = "memcached:1.6.26-alpine";
/// `app.kubernetes.io/name` of everything the plugin creates.
pub const APP_NAME: &str = "memcached";
/// `app.kubernetes.io/managed-by` of the Deployment.
pub const MANAGED_BY: &str = "memcached-plugin";
/// The non-root user memcached runs as.
pub const RUN_AS_USER: i64 = 1001;

/// The labels that select the pods of the Memcached `instance` (the
/// Deployment's selector and its pod template's labels).
pub fn selector_labels(instance: &str) -> Value {
    json!({
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": instance,
    })
}

/// The Deployment's own labels: the selector's plus `managed-by`.
pub fn labels(instance: &str) -> Vec<KeyValue> {
    [
        ("app.kubernetes.io/name", APP_NAME),
        ("app.kubernetes.io/instance", instance),
        ("app.kubernetes.io/managed-by", MANAGED_BY),
    ]
    .into_iter()
    .map(|(key, value)| KeyValue {
        key: key.to_string(),
        value: value.to_string(),
    })
    .collect()
}

/// The Deployment the Memcached `name` should own for `spec`.
pub fn desired(name: &str, spec: &MemcachedSpec) -> DesiredChild {
    let body = json!({
        "spec": {
            "replicas": spec.size,
            "selector": { "matchLabels": selector_labels(name) },
            "template": {
                "metadata": { "labels": selector_labels(name) },
                "spec": pod_spec(spec.container_port),
            },
        },
    });
    DesiredChild {
        api_version: API_VERSION.to_string(),
        kind: KIND.to_string(),
        name: name.to_string(),
        labels: labels(name),
        annotations: build_annotations(),
        body_json: body.to_string(),
    }
}

/// The `v2` build (hot-swap tests) marks its Deployments.
fn build_annotations() -> Vec<KeyValue> {
    if cfg!(feature = "v2") {
        vec![KeyValue {
            key: "cache.example.com/plugin-build".to_string(),
            value: "v2".to_string(),
        }]
    } else {
        Vec::new()
    }
}

/// One memcached container on `port`, under the restricted Pod Security
/// Standard (non-root, no privilege escalation, no capabilities, the
/// runtime's default seccomp profile).
fn pod_spec(port: i64) -> Value {
    json!({
        "securityContext": {
            "runAsNonRoot": true,
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "containers": [{
            "name": "memcached",
            "image": IMAGE,
            "imagePullPolicy": "Always",
            "command": ["memcached", "--memory-limit=64", "-o", "modern", "-v"],
            "ports": [{ "containerPort": port, "name": "memcached", "protocol": "TCP" }],
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": RUN_AS_USER,
                "allowPrivilegeEscalation": false,
                "capabilities": { "drop": ["ALL"] },
            },
        }],
    })
}
