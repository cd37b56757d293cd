//! The `Jinghzhu` custom resource (`jinghzhu.io/v1`), defined by Rust types;
//! its CRD is generated from them (`wasm-operator crd`) and
//! `examples/crd.yaml` and its copy in the kustomize base `examples/deploy/crd.yaml`
//! are kept identical by a test. [`incoming`] reads them from the API server
//! one object at a time; [`default_template`] is the pod template of one
//! that has none. [`plugin`] is the `JinghzhuPlugin` resource, [`controller`]
//! the `PluginController` that declares a controller of any kind.

pub mod controller;
pub mod default_template;
pub mod incoming;
pub mod plugin;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::{CustomResource, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A ReplicaSet-like object: keep `desired` pods of a template running.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "jinghzhu.io",
    version = "v1",
    kind = "Jinghzhu",
    plural = "jinghzhus",
    shortname = "jz",
    namespaced,
    status = "JinghzhuStatus",
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.desired"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.current"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Reconciled-By","type":"string","jsonPath":".status.reconciledBy"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct JinghzhuSpec {
    /// How many pods should run (0 or more).
    #[schemars(schema_with = "non_negative_count_schema")]
    pub desired: u32,
    /// The pods to run. When absent, the plugin picks a default (the
    /// example plugin runs a pause container).
    // Boxed: a `PodTemplateSpec` is about 2 KiB inline even when absent, and
    // every cached Jinghzhu would carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pod_template_schema")]
    pub template: Option<Box<PodTemplateSpec>>,
}

/// What the operator observed, written by the host from the plugin's proposal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JinghzhuStatus {
    /// Live (not terminating) pods owned by this object.
    #[serde(default)]
    #[schemars(schema_with = "non_negative_count_schema")]
    pub current: u32,
    /// Their names, sorted.
    #[serde(default)]
    pub pod_list: Vec<String>,
    /// Live pods whose `Ready` condition is `True`. Counted and written by
    /// the wasm-operator host itself, never by a plugin; absent in a
    /// plugin's proposal and until the host first writes the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "non_negative_count_schema")]
    pub ready_replicas: Option<u32>,
    /// The plugin's one-word summary. The example plugin: `Running` when
    /// `desired` pods are live and all of them ready, `Pending` when the
    /// count is right but some are not ready yet, `Scaling` while the count
    /// differs.
    #[serde(default)]
    pub state: String,
    /// A sentence for humans.
    #[serde(default)]
    pub message: String,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The plugin whose proposal this status came from,
    /// `<name>@<version> (sha256:…)`. Written by the host with the rest of
    /// the status (no write of its own), never by a plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled_by: Option<String>,
}

/// A pod template is open-ended (the API server validates pods when they
/// are created), so the CRD does not inline the whole PodSpec schema; but it
/// types what a structural schema can check cheaply at admission: labels and
/// annotations are string maps, `spec.containers` is a non-empty list of
/// objects with a `name`, `initContainers` and `volumes` are lists of named
/// objects. Everything else is kept as written.
///
/// Every object the schema types is bounded in its number of properties
/// (a little above what its Kubernetes type has: `PodTemplateSpec` 2,
/// `ObjectMeta` 15, `PodSpec` about 45, `Container` and `Volume` about 30),
/// lists in their items, names in their length. A structural schema cannot
/// bound the nesting below a field it keeps open: the host does
/// (`crd::incoming`), and a template it still cannot read is reported and
/// skipped per object.
fn pod_template_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let named_list = |min_items: u64, max_items: u64| {
        serde_json::json!({
            "type": "array",
            "minItems": min_items,
            "maxItems": max_items,
            "items": {
                "type": "object",
                "maxProperties": 64,
                "required": ["name"],
                "properties": { "name": { "type": "string", "minLength": 1, "maxLength": 63 } },
                "x-kubernetes-preserve-unknown-fields": true
            }
        })
    };
    let string_map = |max_properties: u64| {
        serde_json::json!({
            "type": "object",
            "maxProperties": max_properties,
            "additionalProperties": { "type": "string" }
        })
    };
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "maxProperties": 2,
        "description": "A pod template (metadata.labels, metadata.annotations, spec).",
        "properties": {
            "metadata": {
                "type": "object",
                "maxProperties": 16,
                "properties": {
                    "labels": string_map(64),
                    "annotations": string_map(128)
                },
                "x-kubernetes-preserve-unknown-fields": true
            },
            "spec": {
                "type": "object",
                "maxProperties": 64,
                "required": ["containers"],
                "properties": {
                    "containers": named_list(1, 64),
                    "initContainers": named_list(0, 64),
                    "volumes": named_list(0, 256)
                },
                "x-kubernetes-preserve-unknown-fields": true
            }
        },
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// A count (`u32` in Rust). Kubernetes knows the integer formats `int32`
/// and `int64` only, so the schema says `int64` bounded to the `u32` range:
/// the API server rejects what the host could not read back.
fn non_negative_count_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "format": "int64",
        "minimum": 0,
        "maximum": u32::MAX,
        "description": "A count, 0 or more."
    })
}

/// The CRDs as YAML, as `wasm-operator crd` prints them: the Jinghzhu's,
/// the JinghzhuPlugin's ([`plugin`]) and the PluginController's
/// ([`controller`]), as three documents.
pub fn crd_yaml() -> anyhow::Result<String> {
    use kube::CustomResourceExt;
    Ok(format!(
        "{}---\n{}---\n{}",
        serde_yaml::to_string(&Jinghzhu::crd())?,
        serde_yaml::to_string(&plugin::JinghzhuPlugin::crd())?,
        serde_yaml::to_string(&controller::PluginController::crd())?
    ))
}

/// The `namespace/name` key of an object, as logs, Events and the workqueue
/// metrics name it.
pub fn object_key<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_crd_yaml_is_the_generated_crd() {
        let generated = crd_yaml().expect("crd yaml");
        // The kustomize base keeps a copy (kustomize loads no file outside its
        // directory), and so does the Helm chart (its crds/ directory).
        for file in [
            "examples/crd.yaml",
            "examples/deploy/crd.yaml",
            "examples/deploy/helm/wasm-operator/crds/crd.yaml",
        ] {
            let path = format!("{}/../../../{file}", env!("CARGO_MANIFEST_DIR"));
            let committed = std::fs::read_to_string(path).unwrap_or_default();
            assert!(
                committed == generated,
                "{file} differs from the CRD generated from host/crates/model/src/crd.rs; regenerate it with \
                 `cargo run -p wasm-operator -- crd > {file}`"
            );
        }
    }

    #[test]
    fn status_round_trips_in_camel_case() {
        let status = JinghzhuStatus {
            current: 1,
            pod_list: vec!["web-abcde".into()],
            ready_replicas: Some(1),
            state: "Running".into(),
            message: "1/1 pods".into(),
            observed_generation: Some(2),
            reconciled_by: Some("replicaset@0.1.0 (sha256:0123456789ab)".into()),
        };
        let json = serde_json::to_value(&status).expect("json");
        assert_eq!(
            json["reconciledBy"],
            "replicaset@0.1.0 (sha256:0123456789ab)"
        );
        assert_eq!(json["podList"][0], "web-abcde");
        assert_eq!(json["observedGeneration"], 2);
        assert_eq!(json["readyReplicas"], 1);
        // A proposal carries no readyReplicas, and a status written before
        // the field existed reads back without it.
        let proposal = JinghzhuStatus::default();
        assert!(serde_json::to_value(&proposal).expect("json")["readyReplicas"].is_null());
        let old: JinghzhuStatus =
            serde_json::from_value(serde_json::json!({"current": 1, "state": "Running"}))
                .expect("old status");
        assert_eq!(old.ready_replicas, None);
        assert_eq!(
            serde_json::from_value::<JinghzhuStatus>(json).expect("back"),
            status
        );
    }
}
