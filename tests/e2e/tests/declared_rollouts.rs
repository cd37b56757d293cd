//! Canary rollouts of a declared controller (`PluginController.spec.rollout`)
//! end to end: a new Memcached plugin serves a cohort of the parents, step by
//! step, and is promoted; a plugin whose proposals the host refuses is
//! aborted by the judge, every parent stays on the stable plugin, and after
//! a restart of the host the stable plugin serves again while the aborted
//! canary stays refused; a person's abort through `wasm-operator rollout
//! --controller` ends a rollout too.
//!
//! A control plane of this binary's own (no other declared controllers
//! compete for its parents), and one test at a time.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use e2e_tests::declared::{
    Manager, apply_crd, crd_file, declare, memcached_controller, memcacheds, wait_state,
};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, refusal_events, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use local_control_plane::ControlPlaneOptions;
use serde_json::{Value, json};
use wasm_operator::crd::controller::PluginController;
use wasm_operator::crd::plugin::RolloutStatus;
use wasm_operator::delivery::resource::rollout_cli::{RolloutAction, apply_to_controller};
use wasm_operator::runtime::digest_of;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

/// One test at a time: each runs a manager of its own (the first restarts
/// its), and a manager serves every `PluginController` there is.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const BUILD_ANNOTATION: &str = "cache.example.com/plugin-build";

async fn setup(prefix: &str) -> Result<(TestEnv, &'static local_control_plane::ControlPlane)> {
    let plane = own_control_plane(&PLANE, ControlPlaneOptions::default).await?;
    let env = TestEnv::new_on(plane, prefix).await?;
    apply_crd(&env.client, PluginController::crd()).await?;
    apply_crd(&env.client, crd_file("examples/memcached/crd.yaml")?).await?;
    // The previous test's Memcached controller would keep the kind
    // (`controller/parent-taken`): one controller of a parent kind at a time.
    Api::<PluginController>::all(env.client.clone())
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Ok((env, plane))
}

/// The Memcached controller with a quick rollout: one step at 50%, held
/// 2 s, judged after one canary reconcile; latency is not judged (a busy
/// test machine's figures say nothing about the plugins).
fn with_rollout(path: &Path) -> Value {
    let mut spec = memcached_controller(path);
    spec["rollout"] = json!({
        "steps": [50],
        "stepSeconds": 2,
        "minReconciles": 1,
        "maxLatencyIncreasePercent": 10000,
        "maxWritesIncreasePercent": 10000,
    });
    spec
}

/// Puts `from`'s bytes at `path` in one rename (the file source sees
/// whole files only).
fn place(from: &Path, path: &Path) -> Result<String> {
    let bytes = std::fs::read(from)?;
    let staged = path.with_extension("new");
    std::fs::write(&staged, &bytes)?;
    std::fs::rename(&staged, path)?;
    Ok(digest_of(&bytes))
}

async fn rollout_of(client: &Client, name: &str) -> Result<Option<RolloutStatus>> {
    let api: Api<PluginController> = Api::all(client.clone());
    Ok(api.get(name).await?.status.and_then(|s| s.rollout))
}

/// Waits until the rollout of `canary` reaches `phase`; returns its status.
async fn phase_is(client: &Client, name: &str, phase: &str, canary: &str) -> Result<RolloutStatus> {
    wait_for(
        &format!("{name}'s rollout of {canary} {phase}"),
        Duration::from_secs(90),
        || async {
            Ok(rollout_of(client, name)
                .await?
                .is_some_and(|r| r.phase == phase && r.canary.as_deref() == Some(canary)))
        },
    )
    .await?;
    Ok(rollout_of(client, name).await?.unwrap_or_default())
}

async fn serving_digest(client: &Client, name: &str) -> Result<String> {
    let api: Api<PluginController> = Api::all(client.clone());
    Ok(api.get(name).await?.status.unwrap_or_default().digest)
}

async fn create_memcacheds(env: &TestEnv, names: &[&str]) -> Result<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    for name in names {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": name}, "spec": {"size": 1}
        }))?;
        api.create(&PostParams::default(), &object).await?;
    }
    Ok(())
}

/// Waits until every Memcached in `names` has its Deployment, each made
/// by the build `build` (`None`: the v1 plugin, which sets no annotation).
async fn deployments_by(env: &TestEnv, names: &[&str], build: Option<&str>) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for(
        &format!("the Deployments of {names:?} made by {build:?}"),
        Duration::from_secs(90),
        || async {
            for name in names {
                let Some(deployment) = api.get_opt(name).await? else {
                    return Ok(false);
                };
                let annotation = deployment.annotations().get(BUILD_ANNOTATION);
                if annotation.map(String::as_str) != build {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_is_promoted_and_a_refused_one_is_aborted_and_stays_aborted_after_a_restart()
-> Result<()> {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (env, plane) = setup("canary").await?;
    let cache = tempfile::tempdir()?;
    let manager = Manager::start(plane, Some(cache.path().to_path_buf()))?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memcached.wasm");
    let v1 = place(&plugin("memcached-plugin", &[]), &path)?;
    let name = format!("{}-memcached", env.namespace);
    declare(&env.client, &name, with_rollout(&path)).await?;
    wait_state(&env.client, &name, "Serving").await?;
    let names = ["m0", "m1", "m2", "m3", "m4", "m5"];
    create_memcacheds(&env, &names).await?;
    deployments_by(&env, &names, None).await?;

    // A new plugin is a canary first, then serves every parent.
    let v2 = place(&plugin("memcached-plugin", &["v2"]), &path)?;
    let started = phase_is(&env.client, &name, "Progressing", &v2).await?;
    assert_eq!(started.stable.as_deref(), Some(v1.as_str()));
    let promoted = phase_is(&env.client, &name, "Promoted", &v2).await?;
    println!("promoted: {:?}", promoted.message);
    let steps: Vec<(&str, u32, &str)> = promoted
        .history
        .iter()
        .map(|h| (h.step.as_str(), h.weight, h.verdict.as_str()))
        .collect();
    assert_eq!(
        steps,
        [("1/2", 50, "Passed"), ("2/2", 100, "Promoted")],
        "{promoted:?}"
    );
    deployments_by(&env, &names, Some("v2")).await?;
    assert_eq!(serving_digest(&env.client, &name).await?, v2);

    // A plugin whose proposals are refused (a ConfigMap the declaration
    // does not allow) is aborted by the judge; every parent stays on v2.
    let refused = place(&plugin("misbehaving-controller-plugin", &[]), &path)?;
    let aborted = phase_is(&env.client, &name, "Aborted", &refused).await?;
    assert_eq!(
        aborted.rule.as_deref(),
        Some("rollout/rejected-proposals"),
        "{aborted:?}"
    );
    wait_for(
        "a PluginRefused Warning naming rollout/rejected-proposals",
        Duration::from_secs(30),
        || async {
            Ok(
                refusal_events(&env.client, "default", "PluginController", &name)
                    .await?
                    .iter()
                    .any(|m| m.contains("rollout/rejected-proposals")),
            )
        },
    )
    .await?;
    assert_eq!(serving_digest(&env.client, &name).await?, v2);
    deployments_by(&env, &names, Some("v2")).await?;

    // A restart: v2 serves again from the precompiled cache and the
    // aborted canary, still at the source, is refused by name.
    drop(manager);
    let _manager = Manager::start(plane, Some(cache.path().to_path_buf()))?;
    wait_for(
        "the aborted canary refused after the restart (rollout/aborted)",
        Duration::from_secs(60),
        || async {
            Ok(
                refusal_events(&env.client, "default", "PluginController", &name)
                    .await?
                    .iter()
                    .any(|m| m.contains("rollout/aborted")),
            )
        },
    )
    .await?;
    create_memcacheds(&env, &["after-restart"]).await?;
    deployments_by(&env, &["after-restart"], Some("v2")).await?;
    assert_eq!(serving_digest(&env.client, &name).await?, v2);
    assert_eq!(
        rollout_of(&env.client, &name).await?.map(|r| r.phase),
        Some("Aborted".to_string())
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_aborts_a_declared_controllers_canary() -> Result<()> {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (env, plane) = setup("manual").await?;
    let _manager = Manager::start(plane, None)?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memcached.wasm");
    place(&plugin("memcached-plugin", &[]), &path)?;
    let name = format!("{}-memcached", env.namespace);
    let mut spec = with_rollout(&path);
    // Held at its step until a person decides.
    spec["rollout"]["paused"] = json!(true);
    declare(&env.client, &name, spec).await?;
    wait_state(&env.client, &name, "Serving").await?;
    create_memcacheds(&env, &["a", "b"]).await?;
    deployments_by(&env, &["a", "b"], None).await?;
    let v2 = place(&plugin("memcached-plugin", &["v2"]), &path)?;
    phase_is(&env.client, &name, "Paused", &v2).await?;
    let done = apply_to_controller(&env.client, &name, RolloutAction::Abort).await?;
    println!("{done}");
    let aborted = phase_is(&env.client, &name, "Aborted", &v2).await?;
    assert_eq!(aborted.rule.as_deref(), Some("rollout/manual-abort"));
    deployments_by(&env, &["a", "b"], None).await?;
    Ok(())
}
