//! The Deployment a Memcached owns: its name (the parent's), labels and
//! body (replicas, selector and a restricted pod template running
//! memcached), as the Operator SDK tutorial builds it.

use wasm_operator_controller_sdk::{Desired, Value, json};

use crate::spec::MemcachedSpec;

/// API version of the owned Deployment.
pub const API_VERSION: &str = "apps/v1";
/// Kind of the owned Deployment.
pub const KIND: &str = "Deployment";
/// The owned Deployment's kind as [`Input::children`] takes it.
///
/// [`Input::children`]: wasm_operator_controller_sdk::Input::children
pub const QUALIFIED_KIND: &str = "apps/v1/Deployment";
/// The memcached image the tutorial runs.
pub const IMAGE: &str = "memcached:1.6.26-alpine";
/// `app.kubernetes.io/name` of everything the plugin creates.
pub const APP_NAME: &str = "memcached";
/// `app.kubernetes.io/managed-by` of the Deployment.
pub const MANAGED_BY: &str = "memcached-plugin";
/// The non-root user memcached runs as.
pub const RUN_AS_USER: i64 = 1001;
/// The annotation the `v2` build (hot-swap tests) puts on its Deployments.
pub const BUILD_ANNOTATION: &str = "cache.example.com/plugin-build";

/// The labels that select the pods of the Memcached `instance` (the
/// Deployment's selector and its pod template's labels).
pub fn selector_labels(instance: &str) -> Value {
    json!({
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": instance,
    })
}

/// The Deployment the Memcached `name` should own for `spec`: labelled
/// with the selector's labels plus `managed-by`.
pub fn desired(name: &str, spec: &MemcachedSpec) -> Desired {
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
    let deployment = Desired::new(API_VERSION, KIND, name)
        .label("app.kubernetes.io/name", APP_NAME)
        .label("app.kubernetes.io/instance", name)
        .label("app.kubernetes.io/managed-by", MANAGED_BY)
        .body(body);
    if cfg!(feature = "v2") {
        deployment.annotation(BUILD_ANNOTATION, "v2")
    } else {
        deployment
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
