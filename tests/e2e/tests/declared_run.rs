//! Declared controllers through the real command line: `wasm-operator run
//! --plugin-controllers` with no Jinghzhu plugin, as its own process,
//! serves the Memcached example from a ConfigMap until its pods run and
//! its status lists them. A binary of its own (and so a control plane of
//! its own, with the workload controllers): the in-process manager of the
//! `declared` tests would otherwise reconcile the same resources.

use std::time::Duration;

use anyhow::Result;
use e2e_tests::declared::{
    apply_crd, crd_file, declare, memcacheds, status_field, wait_ready, wait_state,
    with_workload_controllers,
};
use e2e_tests::watched_host::WatchedHost;
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, plugin_configmap, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::CustomResourceExt;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use wasm_operator::crd::controller::PluginController;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();
const BIN: &str = env!("CARGO_BIN_EXE_wasm-operator-under-test");

#[tokio::test(flavor = "multi_thread")]
async fn run_with_only_declared_controllers_serves_memcached_from_a_configmap() -> Result<()> {
    let plane = own_control_plane(&PLANE, with_workload_controllers).await?;
    let env = TestEnv::new_on(plane, "declared-run").await?;
    apply_crd(&env.client, PluginController::crd()).await?;
    apply_crd(&env.client, crd_file("examples/memcached/crd.yaml")?).await?;
    let bytes = std::fs::read(plugin("memcached-plugin", &[]))?;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    configmaps
        .create(
            &PostParams::default(),
            &plugin_configmap("memcached-plugin", bytes),
        )
        .await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = plane.kubeconfig_path().display().to_string();
    let _host = WatchedHost::start(
        std::path::Path::new(BIN),
        "declared-run",
        dir.path(),
        &["--plugin-controllers".to_string()],
        &[
            ("KUBECONFIG", kubeconfig),
            (
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            ),
        ],
        512 * 1024 * 1024,
    )?;
    declare(
        &env.client,
        "memcached-run",
        json!({
            "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
            "children": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "observe": [{"apiVersion": "v1", "kind": "Pod", "through": [{"apiVersion": "apps/v1", "kind": "ReplicaSet"}]}],
            "source": {"configMap": {"namespace": env.namespace, "name": "memcached-plugin"}},
        }),
    )
    .await?;
    wait_state(&env.client, "memcached-run", "Serving").await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    let cache: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "cache"}, "spec": {"size": 3}
    }))?;
    api.create(&PostParams::default(), &cache).await?;
    wait_ready(&api, "cache", 3).await?;
    // The pods arrive through the host's own client: not left out as pods
    // no Jinghzhu controls.
    wait_for(
        "status.nodes lists 3 pods",
        Duration::from_secs(60),
        || async {
            let nodes = status_field(&api, "cache", "/status/nodes").await?;
            Ok(nodes.as_array().is_some_and(|n| n.len() == 3))
        },
    )
    .await?;
    Ok(())
}
