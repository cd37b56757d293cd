//! How a declared controller writes its children, end to end: a child the
//! plugin's desired state drops is deleted once (the API server's own
//! request count says so, while a finalizer keeps the child terminating
//! and the plugin asks for its delete on every call), and a child that
//! loses the controller's label while still controlled by its parent is
//! released: its owner reference is removed, the object is left in place,
//! and the plugin can no longer write it.
//!
//! The plugin is `tests/plugins/listed-children`: one ConfigMap per name in
//! the parent's `spec.names`, every other controlled ConfigMap deleted.
//! One test in this binary, so the API server's count of ConfigMap deletes
//! (this binary's own control plane) is this test's alone.

use std::time::Duration;

use anyhow::{Context as _, Result};
use e2e_tests::declared::{apply_crd, declare, resource, start_manager, status_field, wait_state};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::{Client, CustomResourceExt, ResourceExt};
use local_control_plane::ControlPlaneOptions;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use wasm_operator::crd::controller::PluginController;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

const LABEL: &str = "wasm-operator.io/controller";
const HOLD: &str = "e2e.wasm-operator.io/hold";

/// A namespace, the CRDs installed and the manager running.
async fn setup(prefix: &str) -> Result<TestEnv> {
    let plane = own_control_plane(&PLANE, ControlPlaneOptions::default).await?;
    let env = TestEnv::new_on(plane, prefix).await?;
    static READY: OnceCell<()> = OnceCell::const_new();
    READY
        .get_or_try_init(|| async {
            apply_crd(&env.client, PluginController::crd()).await?;
            apply_crd(&env.client, lister_crd()).await?;
            start_manager(plane)
        })
        .await?;
    Ok(env)
}

/// `Lister` (`e2e.wasm-operator.io/v1`): the listed-children plugin's parent.
fn lister_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "listers.e2e.wasm-operator.io"},
        "spec": {
            "group": "e2e.wasm-operator.io",
            "scope": "Namespaced",
            "names": {"plural": "listers", "singular": "lister", "kind": "Lister"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .expect("the Lister CRD")
}

fn listers() -> ApiResource {
    resource("e2e.wasm-operator.io", "v1", "Lister", "listers")
}

/// ConfigMap deletes the API server has served so far (every answer).
async fn configmap_deletes(client: &Client) -> Result<u64> {
    let request = axum::http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut total = 0.0;
    for line in text.lines() {
        if line.starts_with("apiserver_request_total{")
            && line.contains("resource=\"configmaps\"")
            && line.contains("verb=\"DELETE\"")
        {
            let value = line
                .rsplit(' ')
                .next()
                .context("a sample without a value")?;
            total += value.parse::<f64>()?;
        }
    }
    Ok(total as u64)
}

async fn wait_status(api: &Api<DynamicObject>, pointer: &str, want: Value) -> Result<()> {
    wait_for(
        &format!("{pointer} = {want}"),
        Duration::from_secs(60),
        || async { Ok(status_field(api, "one", pointer).await? == want) },
    )
    .await
}

async fn set_names(api: &Api<DynamicObject>, names: &[&str]) -> Result<()> {
    api.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"names": names}})),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_child_is_deleted_once_and_an_unlabelled_one_is_released() -> Result<()> {
    let env = setup("writes").await?;
    let path = plugin("listed-children-plugin", &[]);
    declare(
        &env.client,
        "listers",
        json!({
            "parent": {"apiVersion": "e2e.wasm-operator.io/v1", "kind": "Lister"},
            "children": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "source": {"file": {"path": path.display().to_string()}},
        }),
    )
    .await?;
    wait_state(&env.client, "listers", "Serving").await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &listers());
    let lister: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "e2e.wasm-operator.io/v1", "kind": "Lister",
        "metadata": {"name": "one"}, "spec": {"names": ["drop", "free", "keep"]}
    }))?;
    api.create(&PostParams::default(), &lister).await?;
    wait_status(&api, "/status/children", json!(["drop", "free", "keep"])).await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);

    // Dropped from the desired state while a finalizer holds it: one
    // delete, though the plugin asks for it on every call after.
    configmaps
        .patch(
            "drop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
        )
        .await?;
    let deletes_before = configmap_deletes(&env.client).await?;
    set_names(&api, &["free", "keep"]).await?;
    wait_status(&api, "/status/terminating", json!(["drop"])).await?;
    // The status write wakes the parent again; give its reconciles time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let deletes = configmap_deletes(&env.client).await? - deletes_before;
    assert_eq!(
        deletes, 1,
        "ConfigMap deletes served while `drop` terminated"
    );
    configmaps
        .patch(
            "drop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    wait_status(&api, "/status/children", json!(["free", "keep"])).await?;
    assert!(configmaps.get_opt("drop").await?.is_none());

    // `free` loses the controller's label: released, left in place.
    configmaps
        .patch(
            "free",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL: null}}})),
        )
        .await?;
    wait_for(
        "free released (no owner reference)",
        Duration::from_secs(60),
        || async {
            let free = configmaps.get("free").await?;
            Ok(free.owner_references().is_empty() && free.metadata.deletion_timestamp.is_none())
        },
    )
    .await?;
    wait_for(
        "a ReleasedChild Event naming free",
        Duration::from_secs(60),
        || async {
            let events = e2e_tests::events_on(&env.client, &env.namespace, "Lister", "one").await?;
            Ok(events.iter().any(|e| {
                e.reason.as_deref() == Some("ReleasedChild")
                    && e.message.as_deref().is_some_and(|m| m.contains("free"))
            }))
        },
    )
    .await?;
    // Still listed, it is no longer the parent's to write: refused by name.
    wait_for(
        "a Warning naming child/not-owned",
        Duration::from_secs(60),
        || async {
            let events = e2e_tests::events_on(&env.client, &env.namespace, "Lister", "one").await?;
            Ok(events.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("[child/not-owned]"))
            }))
        },
    )
    .await?;
    set_names(&api, &["keep"]).await?;
    wait_status(&api, "/status/children", json!(["keep"])).await?;
    let free = configmaps.get("free").await?;
    assert!(free.owner_references().is_empty());
    assert_eq!(
        free.data
            .unwrap_or_default()
            .get("parent")
            .map(String::as_str),
        Some("one"),
        "the released child was left as it was"
    );
    assert_eq!(
        configmap_deletes(&env.client).await? - deletes_before,
        1,
        "the released child was not deleted"
    );
    Ok(())
}
