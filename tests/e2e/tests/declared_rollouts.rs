//! Canary rollouts of a declared controller (`PluginController.spec.rollout`)
//! end to end: a new Memcached plugin serves a cohort of the parents, step by
//! step, and is promoted; a plugin whose proposals the host refuses is
//! aborted by the judge, every parent stays on the stable plugin, and after
//! a restart of the host the stable plugin serves again while the aborted
//! canary stays refused; a person's abort through `wasm-operator rollout
//! --controller` ends a rollout too. Under `--shards`, three replicas
//! judge a canary on their summed figures: the holder of shard 0 (which
//! reconciles no parent here) promotes a canary that behaves and aborts
//! one whose proposals are refused, and every replica serves the verdict's
//! plugin.
//!
//! A control plane of this binary's own (no other declared controllers
//! compete for its parents), and one test at a time.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use e2e_tests::declared::{
    Manager, apply_crd, crd_file, declare, memcached_controller, memcacheds, wait_state,
};
use e2e_tests::sharded::{Replica, wait_balanced};
use e2e_tests::{
    ControlPlaneSlot, TestEnv, own_control_plane, plugin, plugin_configmap, refusal_events,
    wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use local_control_plane::ControlPlaneOptions;
use serde_json::{Value, json};
use wasm_operator::crd::controller::PluginController;
use wasm_operator::crd::plugin::{ReplicaRollout, ReplicaStatus, RolloutFigures, RolloutStatus};
use wasm_operator::delivery::resource::rollout_cli::{RolloutAction, apply_to_controller};
use wasm_operator::judging::plan::in_cohort;
use wasm_operator::runtime::digest_of;
use wasm_operator::shards::hash::shard_of;

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

/// `promoted`'s history is the two steps of the test's rollout: 50 %
/// passed, then 100 % promoted.
fn assert_promoted_in_two_steps(promoted: &RolloutStatus) {
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
    assert_promoted_in_two_steps(&promoted);
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

const HOST_BIN: &str = env!("CARGO_BIN_EXE_wasm-operator-under-test");

/// Shards of the sharded test: one per replica.
const SHARDS: u32 = 3;

/// Waits until each of `replicas` holds one shard; the index of the one
/// holding shard 0 (the judge).
async fn judge_of(replicas: &[&Replica]) -> Result<usize> {
    let owned = wait_balanced(replicas).await?;
    owned
        .iter()
        .position(|shards| shards.contains(&0))
        .context("no replica holds shard 0")
}

/// Memcacheds of shards other than 0 (whose holder judges), at least two
/// in the canary's cohort at 50% and two out of it; their names.
async fn parents_off_the_judge(env: &TestEnv) -> Result<Vec<String>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    let (mut kept, mut cohort) = (Vec::new(), 0);
    for i in 0..60 {
        if cohort >= 2 && kept.len() - cohort >= 2 {
            return Ok(kept);
        }
        let name = format!("p{i}");
        create_memcacheds(env, &[&name]).await?;
        let uid = api.get(&name).await?.uid().context("a parent's uid")?;
        if shard_of(&uid, SHARDS) == 0 {
            api.delete(&name, &DeleteParams::default()).await?;
            continue;
        }
        cohort += usize::from(in_cohort(&uid, 50));
        kept.push(name);
    }
    bail!("60 parents never gave two in and two out of the cohort off shard 0")
}

/// Waits until every replica of `names` has an entry in the status that
/// serves `digest` with no rollout going on.
async fn every_replica_serves(
    client: &Client,
    name: &str,
    names: &[&str],
    digest: &str,
) -> Result<()> {
    let api: Api<PluginController> = Api::all(client.clone());
    wait_for(
        &format!("{names:?} serving {digest}"),
        Duration::from_secs(60),
        || async {
            let entries = api.get(name).await?.status.unwrap_or_default().replicas;
            Ok(names.iter().all(|replica| {
                entries
                    .iter()
                    .any(|e| e.name == *replica && e.digest == digest && e.rollout.is_none())
            }))
        },
    )
    .await
}

/// The name of the entry [`plant_entry`] writes.
const PLANTED: &str = "planted";

/// Writes a `status.replicas` entry of `name` under a field manager that
/// is no replica's, claiming that every reconcile of the canary `digest`
/// at its first step was refused.
async fn plant_entry(client: &Client, name: &str, digest: &str) -> Result<()> {
    let entry = ReplicaStatus {
        name: PLANTED.into(),
        digest: "sha256:planted".into(),
        state: "Serving".into(),
        rollout: Some(ReplicaRollout {
            canary: digest.into(),
            step: 1,
            canary_figures: RolloutFigures {
                reconciles: 50,
                objects: 2,
                rejected: 50,
                ..RolloutFigures::default()
            },
            stable_figures: RolloutFigures::default(),
        }),
        ..ReplicaStatus::default()
    };
    let body = json!({
        "apiVersion": "wasm-operator.io/v1alpha1", "kind": "PluginController",
        "metadata": {"name": name},
        "status": {"replicas": [entry]},
    });
    let params = PatchParams::apply("e2e-planter").force();
    Api::<PluginController>::all(client.clone())
        .patch_status(name, &params, &Patch::Apply(&body))
        .await?;
    Ok(())
}

/// Puts `bytes` in the ConfigMap `name` (the plugin source).
async fn publish(configmaps: &Api<ConfigMap>, name: &str, bytes: Vec<u8>) -> Result<String> {
    let digest = digest_of(&bytes);
    let body = plugin_configmap(name, bytes);
    configmaps
        .patch(
            name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(digest)
}

#[tokio::test(flavor = "multi_thread")]
async fn sharded_replicas_judge_a_canary_on_their_summed_figures() -> Result<()> {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (env, _plane) = setup("sharded").await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let source = "memcached-plugin";
    let v1 = publish(
        &configmaps,
        source,
        std::fs::read(plugin("memcached-plugin", &[]))?,
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let names = ["replica-a", "replica-b", "replica-c"];
    let start = |name: &str| Replica::start(Path::new(HOST_BIN), &env, dir.path(), name, SHARDS);
    let hosts = [start(names[0])?, start(names[1])?, start(names[2])?];
    let judge = judge_of(&hosts.iter().collect::<Vec<_>>()).await?;
    let name = format!("{}-memcached", env.namespace);
    let mut spec = with_rollout(Path::new("/unused"));
    spec["source"] = json!({"configMap": {"namespace": env.namespace, "name": source}});
    declare(&env.client, &name, spec).await?;
    wait_state(&env.client, &name, "Serving").await?;
    // The judge holds shard 0 and reconciles none of these: a step can
    // pass (or fail) only on the figures the other replicas publish.
    let parents = parents_off_the_judge(&env).await?;
    let parents: Vec<&str> = parents.iter().map(String::as_str).collect();
    deployments_by(&env, &parents, None).await?;
    every_replica_serves(&env.client, &name, &names, &v1).await?;

    let v2_bytes = std::fs::read(plugin("memcached-plugin", &["v2"]))?;
    // An entry no replica wrote, claiming the canary's cohort refused
    // everything: were it counted, v2 would be aborted.
    plant_entry(&env.client, &name, &digest_of(&v2_bytes)).await?;
    let v2 = publish(&configmaps, source, v2_bytes).await?;
    let promoted = phase_is(&env.client, &name, "Promoted", &v2).await;
    let promoted = match promoted {
        Ok(promoted) => promoted,
        Err(err) => bail!(
            "{err:#}\n--- judge {}:\n{}",
            names[judge],
            hosts[judge].host.log_tail(30)
        ),
    };
    println!("promoted: {:?}", promoted.history);
    assert_promoted_in_two_steps(&promoted);
    assert_eq!(promoted.judge.as_deref(), Some(names[judge]));
    deployments_by(&env, &parents, Some("v2")).await?;
    every_replica_serves(&env.client, &name, &names, &v2).await?;
    let api: Api<PluginController> = Api::all(env.client.clone());
    let entries = api.get(&name).await?.status.unwrap_or_default().replicas;
    assert!(
        entries.iter().all(|e| e.name != PLANTED),
        "the judge removes the planted entry: {entries:?}"
    );
    let warnings = refusal_events(&env.client, "default", "PluginController", &name).await?;
    assert!(
        warnings
            .iter()
            .any(|m| m.contains("rollout/figures-not-counted") && m.contains(PLANTED)),
        "{warnings:?}"
    );

    // Proposals refused on the other replicas' cohort abort the canary.
    let refused = publish(
        &configmaps,
        source,
        std::fs::read(plugin("misbehaving-controller-plugin", &[]))?,
    )
    .await?;
    let aborted = phase_is(&env.client, &name, "Aborted", &refused).await?;
    assert_eq!(
        aborted.rule.as_deref(),
        Some("rollout/rejected-proposals"),
        "{aborted:?}"
    );
    every_replica_serves(&env.client, &name, &names, &v2).await?;
    deployments_by(&env, &parents, Some("v2")).await?;
    assert_eq!(serving_digest(&env.client, &name).await?, v2);
    for replica in hosts {
        replica.host.terminate(Duration::from_secs(30)).await?;
    }
    // A replica stopping gracefully takes its entry out of the status.
    let api: Api<PluginController> = Api::all(env.client.clone());
    let left = api.get(&name).await?.status.unwrap_or_default().replicas;
    let left: Vec<&str> = left.iter().map(|e| e.name.as_str()).collect();
    assert!(
        left.iter().all(|entry| !names.contains(entry)),
        "stopped replicas' entries are left in status.replicas: {left:?}"
    );
    Ok(())
}
