//! The children a StaticSite owns, as it wants them: a ConfigMap
//! `<name>-content` with the files, a Deployment `<name>` of nginx serving
//! them (restricted pod security; a content-hash annotation on the pod
//! template, so that a content change rolls the pods) and a Service
//! `<name>` in front of it.

use wasm_operator_controller_sdk::{Desired, Value, json};

use crate::spec::SiteSpec;

/// The unprivileged nginx image (listens on 8080, runs as user 101).
pub const IMAGE: &str = "nginxinc/nginx-unprivileged:1.27-alpine";
/// The port nginx listens on in the pod.
pub const CONTAINER_PORT: i64 = 8080;
/// The user nginx runs as.
pub const RUN_AS_USER: i64 = 101;
/// Where nginx serves files from (the ConfigMap is mounted there).
pub const HTML_DIR: &str = "/usr/share/nginx/html";
/// The pod template annotation carrying the content hash.
pub const CONTENT_HASH_ANNOTATION: &str = "web.example.com/content-hash";
/// `app.kubernetes.io/name` of everything the plugin creates.
pub const APP_NAME: &str = "static-site";
/// `app.kubernetes.io/managed-by` of the children.
pub const MANAGED_BY: &str = "static-site-plugin";

/// (api version, kind) of the ConfigMap, Deployment and Service.
pub const CONFIG_MAP: (&str, &str) = ("v1", "ConfigMap");
/// See [`CONFIG_MAP`].
pub const DEPLOYMENT: (&str, &str) = ("apps/v1", "Deployment");
/// See [`CONFIG_MAP`].
pub const SERVICE: (&str, &str) = ("v1", "Service");
/// The Deployment's kind as `Input::child` takes it.
pub const QUALIFIED_DEPLOYMENT: &str = "apps/v1/Deployment";

/// The name of the site's ConfigMap.
pub fn config_map_name(site: &str) -> String {
    format!("{site}-content")
}

/// The labels that select the site's pods.
pub fn selector_labels(site: &str) -> Value {
    json!({
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": site,
    })
}

/// The three children of the site `name`: ConfigMap, Deployment, Service.
pub fn desired(name: &str, spec: &SiteSpec, hash: &str) -> Vec<Desired> {
    let config_map = json!({ "data": spec.content });
    let service = json!({ "spec": {
        "type": "ClusterIP",
        "selector": selector_labels(name),
        "ports": [{ "name": "http", "port": spec.port, "targetPort": CONTAINER_PORT, "protocol": "TCP" }],
    }});
    vec![
        child(CONFIG_MAP, &config_map_name(name), name, &config_map),
        child(
            DEPLOYMENT,
            name,
            name,
            &deployment_body(name, spec.replicas, hash),
        ),
        child(SERVICE, name, name, &service),
    ]
}

/// A child of `kind` named `name`, labelled for the site `site` (the
/// selector's labels plus `managed-by`).
fn child((api_version, kind): (&str, &str), name: &str, site: &str, body: &Value) -> Desired {
    Desired::new(api_version, kind, name)
        .label("app.kubernetes.io/name", APP_NAME)
        .label("app.kubernetes.io/instance", site)
        .label("app.kubernetes.io/managed-by", MANAGED_BY)
        .body(body.clone())
}

/// The Deployment's body: `replicas` nginx pods mounting the ConfigMap.
fn deployment_body(name: &str, replicas: i64, hash: &str) -> Value {
    json!({ "spec": {
        "replicas": replicas,
        "selector": { "matchLabels": selector_labels(name) },
        "template": {
            "metadata": {
                "labels": selector_labels(name),
                "annotations": { CONTENT_HASH_ANNOTATION: hash },
            },
            "spec": pod_spec(&config_map_name(name)),
        },
    }})
}

/// One nginx container under the restricted Pod Security Standard
/// (non-root, no privilege escalation, no capabilities, the runtime's
/// default seccomp profile), the ConfigMap mounted read-only.
fn pod_spec(config_map: &str) -> Value {
    json!({
        "securityContext": {
            "runAsNonRoot": true,
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "containers": [{
            "name": "nginx",
            "image": IMAGE,
            "imagePullPolicy": "Always",
            "ports": [{ "containerPort": CONTAINER_PORT, "name": "http", "protocol": "TCP" }],
            "volumeMounts": [{ "name": "content", "mountPath": HTML_DIR, "readOnly": true }],
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": RUN_AS_USER,
                "allowPrivilegeEscalation": false,
                "capabilities": { "drop": ["ALL"] },
            },
        }],
        "volumes": [{ "name": "content", "configMap": { "name": config_map } }],
    })
}
