//! The replicaset example on contract 0.3 (`plugins/replicaset-controller`)
//! under a declared controller: a `PluginController` declares `Jinghzhu`
//! parents owning Pods, and a Jinghzhu converges to `spec.desired` Pods
//! named `<jinghzhu>-<n>` with `status.current` and `status.podList`
//! reporting them; it scales down and replaces a deleted Pod.
//!
//! A control plane of this binary's own: the declared controllers' manager
//! serves every namespace, and a Jinghzhu on the shared control plane
//! belongs to other tests' hosts.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use e2e_tests::declared::{apply_crd, declare, resource, start_manager, status_field, wait_state};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use local_control_plane::ControlPlaneOptions;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use wasm_operator::crd::Jinghzhu;
use wasm_operator::crd::controller::PluginController;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

/// A namespace on this binary's control plane, the CRDs installed and the
/// manager running.
async fn setup(prefix: &str) -> Result<TestEnv> {
    let plane = own_control_plane(&PLANE, ControlPlaneOptions::default).await?;
    let env = TestEnv::new_on(plane, prefix).await?;
    static READY: OnceCell<()> = OnceCell::const_new();
    READY
        .get_or_try_init(|| async {
            apply_crd(&env.client, PluginController::crd()).await?;
            apply_crd(&env.client, Jinghzhu::crd()).await?;
            start_manager(plane)
        })
        .await?;
    Ok(env)
}

/// The names of the live (not terminating) Pods of the Jinghzhu `owner`.
async fn live_pods(pods: &Api<Pod>, owner: &str) -> Result<BTreeSet<String>> {
    Ok(pods
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            pod.owner_references()
                .iter()
                .any(|o| o.kind == "Jinghzhu" && o.name == owner && o.controller == Some(true))
        })
        .map(|pod| pod.name_any())
        .collect())
}

/// Waits until `name` has exactly the live Pods `expected` and its status
/// reports them.
async fn wait_converged(
    env: &TestEnv,
    jinghzhus: &Api<DynamicObject>,
    name: &str,
    expected: &[&str],
) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let expected: BTreeSet<String> = expected.iter().map(|n| n.to_string()).collect();
    let count = expected.len();
    wait_for(
        &format!("{name}: pods {expected:?} in status.podList"),
        Duration::from_secs(90),
        || async {
            let live = live_pods(&pods, name).await?;
            let listed = status_field(jinghzhus, name, "/status/podList").await?;
            Ok(live == expected
                && listed == json!(expected.iter().collect::<Vec<_>>())
                && status_field(jinghzhus, name, "/status/current").await? == json!(count))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jinghzhu_converges_under_a_declared_replicaset_controller() -> Result<()> {
    let env = setup("declared-rs").await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("replicaset-controller.wasm");
    std::fs::copy(plugin("replicaset-controller-plugin", &[]), &path)?;
    let spec = json!({
        "parent": {"apiVersion": "jinghzhu.io/v1", "kind": "Jinghzhu"},
        "children": [{"apiVersion": "v1", "kind": "Pod", "maxCount": 20}],
        "source": {"file": {"path": path.display().to_string()}},
    });
    declare(&env.client, "replicaset", spec).await?;
    let declared = wait_state(&env.client, "replicaset", "Serving").await?;
    let status = declared.status.unwrap_or_default();
    assert!(
        status.plugin.starts_with("replicaset-controller@"),
        "{status:?}"
    );

    let jinghzhus: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &resource("jinghzhu.io", "v1", "Jinghzhu", "jinghzhus"),
    );
    let web: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jinghzhu.io/v1",
        "kind": "Jinghzhu",
        "metadata": {"name": "web"},
        "spec": {"desired": 3},
    }))?;
    jinghzhus.create(&PostParams::default(), &web).await?;
    wait_converged(&env, &jinghzhus, "web", &["web-0", "web-1", "web-2"]).await?;
    let observed = status_field(&jinghzhus, "web", "/status/observedGeneration").await?;
    assert_eq!(observed, json!(1));

    // Scaled down: two Pods go, the status follows.
    jinghzhus
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"desired": 1}})),
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for("web scaled to 1 pod", Duration::from_secs(90), || async {
        Ok(live_pods(&pods, "web").await?.len() == 1
            && status_field(&jinghzhus, "web", "/status/current").await? == json!(1))
    })
    .await?;
    let kept: Vec<String> = live_pods(&pods, "web").await?.into_iter().collect();

    // A deleted Pod is replaced under the smallest free name.
    pods.delete(&kept[0], &DeleteParams::default().grace_period(0))
        .await?;
    wait_for("web's pod replaced", Duration::from_secs(90), || async {
        let live = live_pods(&pods, "web").await?;
        Ok(live.len() == 1
            && status_field(&jinghzhus, "web", "/status/current").await? == json!(1)
            && status_field(&jinghzhus, "web", "/status/podList").await?
                == Value::from(live.into_iter().collect::<Vec<_>>()))
    })
    .await?;
    Ok(())
}
