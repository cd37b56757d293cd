//! Helpers of the declared controllers' end-to-end tests: a control plane
//! with the workload controllers, CRDs from files, `PluginController`s and
//! the status of their parents, the declared controllers' manager run in
//! the test process, and the misbehaving plugin's parent kinds.

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
use wasm_operator::declared::{self, Settings, Shared, WriteRate};
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
        "checkedStatus": [{"field": "nodes", "namesOf": {"apiVersion": "v1", "kind": "Pod"}}],
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

/// Starts the declared controllers' manager for the rest of the test
/// binary's life: each test has its own runtime, which ends with the test,
/// and the manager serves them all (one manager per test binary: two would
/// reconcile the same resources).
pub fn start_manager(plane: &'static local_control_plane::ControlPlane) -> Result<()> {
    std::mem::forget(Manager::start(plane, None)?);
    Ok(())
}

/// A declared controllers' manager (`declared::run`) on a runtime of its
/// own thread: each test has its own runtime, which ends with the test,
/// and one manager serves them all. Dropping it stops the manager and every
/// controller it runs (a host's restart, as far as the cluster sees).
pub struct Manager {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    metrics: Arc<Metrics>,
}

impl Manager {
    /// Starts a manager on `plane` whose runtime keeps precompiled plugins
    /// in `cache_dir` (`None`: no cache).
    pub fn start(
        plane: &'static local_control_plane::ControlPlane,
        cache_dir: Option<std::path::PathBuf>,
    ) -> Result<Self> {
        Self::start_with(
            plane,
            cache_dir,
            WriteRate::default(),
            Arc::new(Metrics::default()),
        )
    }

    /// [`Manager::start`] with each controller's write budget `write_budget`
    /// (`run --controller-writes-per-second`, `--controller-write-burst`),
    /// counting in `metrics`.
    pub fn start_with(
        plane: &'static local_control_plane::ControlPlane,
        cache_dir: Option<std::path::PathBuf>,
        write_budget: WriteRate,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let theirs = metrics.clone();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let client = match plane.client().await {
                    Ok(client) => client,
                    Err(err) => return eprintln!("the manager's client: {err:#}"),
                };
                tokio::select! {
                    () = run_manager(client, cache_dir, write_budget, theirs) => {}
                    _ = stopped => {}
                }
            });
            runtime.shutdown_timeout(Duration::from_secs(5));
        });
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
            metrics,
        })
    }

    /// The manager's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `declared::run` as `run --plugin-controllers` sets it up: Events, the
/// host's policy, plugin files from any path (the file-root rule has tests
/// of its own).
async fn run_manager(
    client: Client,
    cache_dir: Option<std::path::PathBuf>,
    write_budget: WriteRate,
    metrics: Arc<Metrics>,
) {
    let writer = EventWriter::new(
        client.clone(),
        Reporter {
            controller: "wasm-operator".into(),
            instance: None,
        },
    );
    let (events, worker) = EventSink::start(writer, QUEUE_CAPACITY, metrics.events_dropped.clone());
    let runtime = match Runtime::new(RuntimeConfig {
        cache_dir,
        ..RuntimeConfig::default()
    }) {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("the manager's plugin runtime: {err:#}");
            return;
        }
    };
    let settings = Settings {
        shared: Shared {
            client: client.clone(),
            events,
            metrics,
            shards: None,
        },
        runtime: Arc::new(runtime),
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
        write_budget,
    };
    let _worker = worker;
    declared::run(settings).await;
}

/// A namespaced kind `kind` (`e2e.wasm-operator.io/v1`, plural `plural`)
/// with a status subresource and any fields: the misbehaving plugin's
/// parents (`Trial`).
pub fn trial_crd(kind: &str, plural: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.e2e.wasm-operator.io")},
        "spec": {
            "group": "e2e.wasm-operator.io",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .expect("a CRD of fixed fields")
}

/// The resource of a [`trial_crd`] kind.
pub fn trials(kind: &str, plural: &str) -> ApiResource {
    resource("e2e.wasm-operator.io", "v1", kind, plural)
}
