//! Helpers of the declared controllers' end-to-end tests: a control plane
//! with the workload controllers, CRDs from files, `PluginController`s and
//! the status of their parents.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use local_control_plane::ControlPlaneOptions;
use serde_json::{Value, json};
use wasm_operator::apply::policy::PolicyConfig;
use wasm_operator::crd::controller::PluginController;
use wasm_operator::declared::{self, Settings, Shared};
use wasm_operator::delivery::resource::opener::SourceOpener;
use wasm_operator::registry::bounded::FileRules;
use wasm_operator::runtime::{Runtime, RuntimeConfig};
use wasm_operator::telemetry::event_writer::{EventWriter, Reporter};
use wasm_operator::telemetry::events::{EventSink, QUEUE_CAPACITY};
use wasm_operator::telemetry::metrics::Metrics;

use crate::wait_for;

/// The default control plane plus kube-controller-manager's Deployment and
/// ReplicaSet controllers (children that are Deployments get pods).
pub fn with_workload_controllers() -> ControlPlaneOptions {
    let mut options = ControlPlaneOptions::default();
    options
        .controllers
        .extend(local_control_plane::WORKLOAD_CONTROLLERS.map(String::from));
    options
}

/// The CRD in the repository file `path`.
pub fn crd_file(path: &str) -> Result<CustomResourceDefinition> {
    let path = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    Ok(serde_yaml::from_str(&text)?)
}

/// Applies `crd` and waits until it is established.
pub async fn apply_crd(client: &Client, crd: CustomResourceDefinition) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply("e2e-tests").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    wait_for(
        &format!("CRD {name} established"),
        Duration::from_secs(30),
        || async {
            let crd = crds.get(&name).await?;
            Ok(crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"))
        },
    )
    .await
}

/// The resource of a kind by its plural.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The Memcached example's resource.
pub fn memcacheds() -> ApiResource {
    resource("cache.example.com", "v1alpha1", "Memcached", "memcacheds")
}

/// Declares the controller `name` (replacing one of that name).
pub async fn declare(client: &Client, name: &str, spec: Value) -> Result<()> {
    let api: Api<PluginController> = Api::all(client.clone());
    let object = json!({
        "apiVersion": "wasm-operator.io/v1alpha1",
        "kind": "PluginController",
        "metadata": {"name": name},
        "spec": spec,
    });
    api.patch(
        name,
        &PatchParams::apply("e2e-tests").force(),
        &Patch::Apply(&object),
    )
    .await?;
    Ok(())
}

/// Waits until the `PluginController` `name` reports `state`; returns it.
pub async fn wait_state(client: &Client, name: &str, state: &str) -> Result<PluginController> {
    let api: Api<PluginController> = Api::all(client.clone());
    wait_for(
        &format!("PluginController {name} {state}"),
        Duration::from_secs(90),
        || async {
            Ok(api
                .get_opt(name)
                .await?
                .and_then(|c| c.status)
                .is_some_and(|s| s.state == state))
        },
    )
    .await?;
    Ok(api.get(name).await?)
}

/// The Memcached controller's spec with its plugin at `plugin_path`.
pub fn memcached_controller(plugin_path: &std::path::Path) -> Value {
    json!({
        "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
        "children": [{"apiVersion": "apps/v1", "kind": "Deployment", "maxCount": 2}],
        "observe": [{"apiVersion": "v1", "kind": "Pod", "through": [{"apiVersion": "apps/v1", "kind": "ReplicaSet"}]}],
        "source": {"file": {"path": plugin_path.display().to_string()}},
    })
}

/// The field at `pointer` of the object `name` (`null` when absent).
pub async fn status_field(api: &Api<DynamicObject>, name: &str, pointer: &str) -> Result<Value> {
    Ok(api
        .get(name)
        .await?
        .data
        .pointer(pointer)
        .cloned()
        .unwrap_or(Value::Null))
}

/// Waits until `name`'s `status.readyReplicas` is `ready`.
pub async fn wait_ready(api: &Api<DynamicObject>, name: &str, ready: i64) -> Result<()> {
    wait_for(
        &format!("{name} status.readyReplicas = {ready}"),
        Duration::from_secs(120),
        || async { Ok(status_field(api, name, "/status/readyReplicas").await? == json!(ready)) },
    )
    .await
}

/// Starts the declared controllers' manager (`declared::run`) on `plane`,
/// on a runtime of its own: each test has its own runtime, which ends with
/// the test, and the manager serves them all. Once per test binary.
pub fn start_manager(plane: &'static local_control_plane::ControlPlane) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        runtime.block_on(async move {
            match plane.client().await {
                Ok(client) => run_manager(client).await,
                Err(err) => eprintln!("the manager's client: {err:#}"),
            }
        })
    });
    Ok(())
}

async fn run_manager(client: Client) {
    let metrics = Arc::new(Metrics::default());
    let writer = EventWriter::new(
        client.clone(),
        Reporter {
            controller: "wasm-operator".into(),
            instance: None,
        },
    );
    let (events, worker) = EventSink::start(writer, QUEUE_CAPACITY, metrics.events_dropped.clone());
    let settings = Settings {
        shared: Shared {
            client: client.clone(),
            events,
            metrics,
        },
        runtime: Arc::new(Runtime::new(RuntimeConfig::default()).expect("a plugin runtime")),
        // Plugin files come from the build and temporary directories (the
        // file-root rule has tests of its own).
        opener: SourceOpener::new(
            &client,
            None,
            FileRules {
                any_path: true,
                ..FileRules::default()
            },
        ),
        policy: PolicyConfig::default(),
        allowed_child_kinds: Vec::new(),
        workers: 4,
    };
    let _worker = worker;
    declared::run(settings).await;
}
