//! `wasm-operator record --controller` against the real control plane,
//! through the command line (in-process): a Memcached with its Deployment,
//! the Deployment's ReplicaSet and that ReplicaSet's Pods is recorded as a
//! case for a contract 0.3 plugin (the children the host's caches would
//! hold, the Pods through the declared chain; a Deployment and a Pod that
//! are not the Memcached's left out), its `expected.yaml` comes from the
//! Memcached plugin (its status lists the two Pods), and the case replays
//! with `reconcile --fixtures`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, ensure};
use e2e_tests::declared::{apply_crd, crd_file, memcacheds};
use e2e_tests::{TestEnv, plugin};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use wasm_operator::cli::execute_args;
use wasm_operator::offline::any_kind::output::Outcome;

/// Runs `wasm-operator ARGS...` in-process on a blocking thread (`record`
/// starts its own runtime) with a private precompiled cache.
async fn wasm_operator(args: Vec<String>, cache: &Path) -> Result<ExitCode> {
    let mut argv = vec!["wasm-operator".to_string()];
    argv.extend(args);
    argv.extend(["--cache-dir".to_string(), cache.display().to_string()]);
    tokio::task::spawn_blocking(move || execute_args(argv)).await?
}

fn owned_by(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true}])
}

const SELECTOR: &str =
    r#"{"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": "cache"}"#;

fn pod_template() -> Result<Value> {
    Ok(json!({
        "metadata": {"labels": serde_json::from_str::<Value>(SELECTOR)?},
        "spec": {"containers": [{"name": "memcached", "image": "memcached:1.6.26-alpine"}]}
    }))
}

async fn create<K>(client: &Client, namespace: &str, object: Value) -> Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?)
}

/// The Memcached `cache` (size 2), its Deployment, ReplicaSet and two
/// Pods, plus a Deployment and a Pod that are not its own.
async fn objects(client: &Client, namespace: &str) -> Result<()> {
    let parents = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &memcacheds());
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "cache"}, "spec": {"size": 2}
    }))?;
    let parent = parents.create(&PostParams::default(), &parent).await?;
    let uid = parent.uid().context("the Memcached's uid")?;
    let selector: Value = serde_json::from_str(SELECTOR)?;
    let mut labels = selector.clone();
    labels["wasm-operator.io/controller"] = json!("memcached");
    let deployment: Deployment = create(client, namespace, json!({
        "metadata": {"name": "cache", "labels": labels,
                     "ownerReferences": owned_by("cache.example.com/v1alpha1", "Memcached", "cache", &uid)},
        "spec": {"replicas": 2, "selector": {"matchLabels": selector}, "template": pod_template()?}
    }))
    .await?;
    let _: Deployment = create(client, namespace, json!({
        "metadata": {"name": "someone-elses"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}},
                              "spec": {"containers": [{"name": "x", "image": "registry.k8s.io/pause:3.10"}]}}}
    }))
    .await?;
    let replicaset: ReplicaSet = create(client, namespace, json!({
        "metadata": {"name": "cache-7d9f8b6c4d", "labels": selector,
                     "ownerReferences": owned_by("apps/v1", "Deployment", "cache", &deployment.uid().context("uid")?)},
        "spec": {"replicas": 2, "selector": {"matchLabels": selector}, "template": pod_template()?}
    }))
    .await?;
    let rs_uid = replicaset.uid().context("the ReplicaSet's uid")?;
    for name in ["cache-7d9f8b6c4d-b2x4k", "cache-7d9f8b6c4d-a9z7q"] {
        let _: Pod = create(client, namespace, json!({
            "metadata": {"name": name, "labels": selector,
                         "ownerReferences": owned_by("apps/v1", "ReplicaSet", "cache-7d9f8b6c4d", &rs_uid)},
            "spec": pod_template()?["spec"]
        }))
        .await?;
    }
    let _: Pod = create(
        client,
        namespace,
        json!({
            "metadata": {"name": "stray", "labels": selector},
            "spec": pod_template()?["spec"]
        }),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recorded_memcached_replays_offline_with_its_pods_in_the_status() -> Result<()> {
    let env = TestEnv::new("declared-record").await?;
    apply_crd(&env.client, crd_file("examples/memcached/crd.yaml")?).await?;
    objects(&env.client, &env.namespace).await?;
    let work = tempfile::TempDir::new()?;
    let cache = work.path().join("cache");
    let out = work.path().join("fixtures");
    let controller = wasm_artifacts::workspace_root().join("examples/memcached/controller.yaml");
    let memcached = plugin("memcached-plugin", &[]);
    let text = |p: &Path| p.display().to_string();
    let code = wasm_operator(
        vec![
            "record".into(),
            "--controller".into(),
            text(&controller),
            "--kubeconfig".into(),
            text(env.control_plane.kubeconfig_path()),
            "-n".into(),
            env.namespace.clone(),
            "cache".into(),
            "--out".into(),
            text(&out),
            "--plugin".into(),
            text(&memcached),
        ],
        &cache,
    )
    .await?;
    ensure!(code == ExitCode::SUCCESS, "record failed");
    let case = out.join(format!("{}_cache", env.namespace));
    let input = std::fs::read_to_string(case.join("input.yaml"))?;
    for wanted in [
        "kind: Memcached",
        "kind: Deployment",
        "kind: ReplicaSet",
        "name: cache-7d9f8b6c4d-a9z7q",
        "name: cache-7d9f8b6c4d-b2x4k",
    ] {
        ensure!(input.contains(wanted), "{wanted} missing from:\n{input}");
    }
    for unwanted in ["someone-elses", "name: stray", "managedFields:"] {
        ensure!(!input.contains(unwanted), "{unwanted} in:\n{input}");
    }
    let expected: Outcome =
        serde_yaml::from_str(&std::fs::read_to_string(case.join("expected.yaml"))?)?;
    let nodes = expected
        .status
        .as_ref()
        .and_then(|s| s.get("nodes"))
        .cloned()
        .unwrap_or(Value::Null);
    ensure!(
        nodes == json!(["cache-7d9f8b6c4d-a9z7q", "cache-7d9f8b6c4d-b2x4k"]),
        "status.nodes: {nodes}"
    );
    let replay = wasm_operator(
        vec![
            "reconcile".into(),
            "--plugin".into(),
            text(&memcached),
            "--controller".into(),
            text(&controller),
            "--fixtures".into(),
            text(&out),
        ],
        &cache,
    )
    .await?;
    ensure!(
        replay == ExitCode::SUCCESS,
        "the recorded case does not replay"
    );
    Ok(())
}
