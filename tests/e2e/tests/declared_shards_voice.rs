//! One replica speaks for a `PluginController` under `--shards`, and
//! tenants are sharded, end to end through the real command line: three
//! `wasm-operator run --plugin-controllers --shards 3` processes, each
//! holding one shard.
//!
//! - A base Memcached controller serves one namespace and its tenant
//!   another (labelled for it); each parent is reconciled by the holder of
//!   its shard only (`wasm_operator_shard_declared_writes_total` of the
//!   base and of the tenant), and the tenant's plugin made the tenant
//!   namespace's Deployments.
//! - The tenant also asks for a namespace not labelled for it, and a second
//!   controller asks for a cluster-scoped child kind (refused): each
//!   `PluginRefused` Warning comes once, from the holder of shard 0
//!   (`reportingInstance`, the replica's `POD_NAME`), though every replica
//!   comes to the same refusal.
//! - The holder of shard 0 stops (SIGTERM): the replica taking shard 0
//!   says each refusal again, once; the third never speaks. The tenant's
//!   parents keep converging on the two replicas left.
//!
//! A binary of its own: the replicas supervise every `PluginController` of
//! the control plane, so they must not meet another test's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use e2e_tests::declared::{
    apply_crd, crd_file, declare, memcached_controller, memcacheds, wait_state,
    with_workload_controllers,
};
use e2e_tests::sharded::{Replica, check_one_writer_per_shard, wait_balanced};
use e2e_tests::{
    ControlPlaneSlot, TestEnv, events_on, own_control_plane, plugin, plugin_configmap, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::json;
use wasm_operator::crd::controller::{PluginController, TENANT_LABEL_PREFIX};
use wasm_operator::declared::kinds::rules::CLUSTER_SCOPED;
use wasm_operator::declared::sharding::STATUS_SHARD;
use wasm_operator::declared::tenants::NAMESPACE_RULE;
use wasm_operator::shards::hash::shard_of;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();
const BIN: &str = env!("CARGO_BIN_EXE_wasm-operator-under-test");
const SHARDS: u32 = 3;
const BASE: &str = "memcached-base";
const TENANT: &str = "memcached-team";
const CLUSTER_SCOPED_CHILD: &str = "memcached-priority-class";
/// The annotation the Memcached plugin built with `v2` (the tenant's)
/// sets on its Deployments.
const BUILD_ANNOTATION: &str = "cache.example.com/plugin-build";
const CONVERGE: Duration = Duration::from_secs(180);
/// How long after the first Warning the others would have come: every
/// replica comes to a refusal within a second of the others.
const SETTLE: Duration = Duration::from_secs(6);

/// A ConfigMap source in `env`'s namespace named `name`, holding the
/// Memcached plugin built with `features` (the replicas take no file
/// sources).
async fn plugin_source(env: &TestEnv, name: &str, features: &[&str]) -> Result<serde_json::Value> {
    let bytes = std::fs::read(plugin("memcached-plugin", features))?;
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &plugin_configmap(name, bytes))
        .await?;
    Ok(json!({"configMap": {"namespace": env.namespace, "name": name}}))
}

/// The `PluginRefused` Warnings on the `PluginController` `name` by
/// reporting instance, each with its count (a series counts its repeats).
async fn refusals_by_replica(client: &Client, name: &str) -> Result<BTreeMap<String, i32>> {
    let mut by = BTreeMap::new();
    for event in events_on(client, "default", "PluginController", name).await? {
        if event.type_.as_deref() != Some("Warning")
            || event.reason.as_deref() != Some("PluginRefused")
        {
            continue;
        }
        let count = [
            event.series.as_ref().and_then(|s| s.count),
            event.count,
            Some(1),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(1);
        *by.entry(event.reporting_instance.unwrap_or_default())
            .or_insert(0) += count;
    }
    Ok(by)
}

/// Waits until the `PluginRefused` Warnings on `name` are `expected` (by
/// reporting instance), then for [`SETTLE`] that no more come.
async fn refused_once_by(
    client: &Client,
    name: &str,
    expected: &BTreeMap<String, i32>,
) -> Result<()> {
    let reached = wait_for(
        &format!("the PluginRefused Warnings on {name} to be {expected:?}"),
        Duration::from_secs(60),
        || async {
            let seen = refusals_by_replica(client, name).await?;
            Ok(seen.values().sum::<i32>() >= expected.values().sum::<i32>())
        },
    )
    .await;
    if let Err(err) = reached {
        let seen = refusals_by_replica(client, name).await?;
        bail!("{err:#}; last seen {seen:?}");
    }
    tokio::time::sleep(SETTLE).await;
    let settled = refusals_by_replica(client, name).await?;
    if &settled != expected {
        bail!("the PluginRefused Warnings on {name} by replica: {settled:?}, not {expected:?}");
    }
    Ok(())
}

/// The replica of `replicas` holding [`STATUS_SHARD`] in `owned`.
fn speaker<'a>(replicas: &[&'a Replica], owned: &[BTreeSet<u32>]) -> Result<&'a Replica> {
    replicas
        .iter()
        .zip(owned)
        .find(|(_, o)| o.contains(&STATUS_SHARD))
        .map(|(r, _)| *r)
        .context("no replica holds shard 0")
}

/// Creates `count` Memcacheds of size 1 in `namespace` (more until they
/// fall in at least two shards); their shards by name.
async fn parents_over_shards(
    client: &Client,
    namespace: &str,
    count: usize,
) -> Result<BTreeMap<String, u32>> {
    let parents: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &memcacheds());
    let mut shards = BTreeMap::new();
    for i in 0..count * 3 {
        let name = format!("cache-{i}");
        let body = json!({
            "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": name}, "spec": {"size": 1}
        });
        let created = parents
            .create(&PostParams::default(), &serde_json::from_value(body)?)
            .await?;
        let uid = created.uid().context("a parent's uid")?;
        shards.insert(name, shard_of(&uid, SHARDS));
        let spread: BTreeSet<u32> = shards.values().copied().collect();
        if shards.len() >= count && spread.len() >= 2 {
            break;
        }
    }
    Ok(shards)
}

/// Waits until every parent of `names` in `namespace` has a Deployment of
/// `size` replicas, all ready, said on its status, made by `build` (the
/// plugin build's annotation; `None`: none).
async fn wait_converged(
    client: &Client,
    namespace: &str,
    names: &BTreeMap<String, u32>,
    size: i64,
    build: Option<&str>,
) -> Result<()> {
    let parents: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &memcacheds());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    wait_for(
        &format!(
            "{} Memcacheds of {namespace} at size {size} by {build:?}",
            names.len()
        ),
        CONVERGE,
        || async {
            for name in names.keys() {
                let Some(deployment) = deployments.get_opt(name).await? else {
                    return Ok(false);
                };
                let made_by = deployment.annotations().get(BUILD_ANNOTATION).cloned();
                let replicas = deployment.spec.and_then(|s| s.replicas);
                let ready = parents
                    .get(name)
                    .await?
                    .data
                    .pointer("/status/readyReplicas")
                    .cloned();
                if replicas != Some(size as i32)
                    || ready != Some(json!(size))
                    || made_by.as_deref() != build
                {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn one_replica_speaks_for_a_plugin_controller_and_tenants_are_sharded() -> Result<()> {
    let plane = own_control_plane(&PLANE, with_workload_controllers).await?;
    let env = TestEnv::new_on(plane, "shards-voice").await?;
    let team = TestEnv::new_on(plane, "shards-voice-team").await?;
    let client = &env.client;
    apply_crd(client, PluginController::crd()).await?;
    apply_crd(client, crd_file("examples/memcached/crd.yaml")?).await?;
    let label = json!({"metadata": {"labels": {format!("{TENANT_LABEL_PREFIX}{BASE}"): TENANT}}});
    Api::<Namespace>::all(client.clone())
        .patch(
            &team.namespace,
            &PatchParams::default(),
            &Patch::Merge(&label),
        )
        .await?;
    let not_labelled = format!("{}-not-labelled", team.namespace);

    let dir = tempfile::tempdir()?;
    let mut replicas = Vec::new();
    for name in ["replica-a", "replica-b", "replica-c"] {
        replicas.push(Replica::start(
            BIN.as_ref(),
            &env,
            dir.path(),
            name,
            SHARDS,
        )?);
    }
    let all: Vec<&Replica> = replicas.iter().collect();
    let owned = wait_balanced(&all).await?;
    let first_speaker = speaker(&all, &owned)?.name.clone();

    // A base and its tenant: each parent written by its shard's holder only.
    let v1 = plugin_source(&env, "memcached-plugin", &[]).await?;
    let v2 = plugin_source(&env, "memcached-plugin-v2", &["v2"]).await?;
    let mut base = memcached_controller(&plugin("memcached-plugin", &[]));
    base["source"] = v1.clone();
    declare(client, BASE, base).await?;
    wait_state(client, BASE, "Serving").await?;
    let mut tenant = memcached_controller(&plugin("memcached-plugin", &["v2"]));
    tenant["source"] = v2;
    tenant["tenant"] = json!({"of": BASE, "namespaces": [team.namespace, not_labelled]});
    declare(client, TENANT, tenant).await?;
    wait_state(client, TENANT, "Serving").await?;
    let base_parents = parents_over_shards(client, &env.namespace, 4).await?;
    let team_parents = parents_over_shards(client, &team.namespace, 4).await?;
    wait_converged(client, &env.namespace, &base_parents, 1, None).await?;
    wait_converged(client, &team.namespace, &team_parents, 1, Some("v2")).await?;
    check_one_writer_per_shard(BASE, &all, &owned, &base_parents).await?;
    check_one_writer_per_shard(TENANT, &all, &owned, &team_parents).await?;
    let controllers = Api::<PluginController>::all(client.clone());
    wait_for(
        "the tenant's status.tenant",
        Duration::from_secs(30),
        || async {
            let shown = controllers.get(TENANT).await?.status.and_then(|s| s.tenant);
            Ok(shown.is_some_and(|t| {
                t.refused == [not_labelled.clone()]
                    && t.serving == [team.namespace.clone()]
                    && t.rule.as_deref() == Some(NAMESPACE_RULE)
            }))
        },
    )
    .await?;

    // Every replica refuses a controller asking for a cluster-scoped child
    // kind and the tenant's unlabelled namespace; the holder of shard 0
    // alone says so.
    declare(
        client,
        CLUSTER_SCOPED_CHILD,
        json!({
            "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
            "children": [
                {"apiVersion": "apps/v1", "kind": "Deployment"},
                {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"},
            ],
            "source": v1,
        }),
    )
    .await?;
    let refused = wait_state(client, CLUSTER_SCOPED_CHILD, "Refused").await?;
    let rule = refused.status.and_then(|s| s.last_refusal).map(|r| r.rule);
    assert_eq!(rule.as_deref(), Some(CLUSTER_SCOPED));
    let once = BTreeMap::from([(first_speaker.clone(), 1)]);
    refused_once_by(client, CLUSTER_SCOPED_CHILD, &once).await?;
    refused_once_by(client, TENANT, &once).await?;

    // The holder of shard 0 stops: the replica taking shard 0 says each
    // refusal again, once; the tenant's parents keep converging.
    let at = replicas
        .iter()
        .position(|r| r.name == first_speaker)
        .context("the speaker")?;
    let stopped = replicas.remove(at);
    let status = stopped.host.terminate(Duration::from_secs(60)).await?;
    assert!(status.success(), "{first_speaker} exited with {status}");
    let left: Vec<&Replica> = replicas.iter().collect();
    let owned = wait_balanced(&left).await?;
    let next_speaker = speaker(&left, &owned)?.name.clone();
    let twice = BTreeMap::from([(first_speaker, 1), (next_speaker, 1)]);
    refused_once_by(client, CLUSTER_SCOPED_CHILD, &twice).await?;
    refused_once_by(client, TENANT, &twice).await?;
    let parents: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &team.namespace, &memcacheds());
    for name in team_parents.keys() {
        let size = json!({"spec": {"size": 2}});
        parents
            .patch(name, &PatchParams::default(), &Patch::Merge(size))
            .await?;
    }
    wait_converged(client, &team.namespace, &team_parents, 2, Some("v2")).await?;
    for replica in replicas {
        replica.host.terminate(Duration::from_secs(60)).await?;
    }
    Ok(())
}
