//! Declared controllers with `--shards`, end to end, through the real
//! command line: three `wasm-operator run --plugin-controllers --shards 6`
//! processes (no Jinghzhu plugin) split the shards, every one runs the
//! Memcached example's controller and reconciles only the parents of its
//! shards. Parents spread over the shards all converge; each shard's
//! writes (children applied, statuses) come from exactly one replica (its
//! `wasm_operator_shard_declared_writes_total{controller,shard}`), the one
//! holding it; a replica stopped (SIGTERM) hands its shards over and its
//! parents keep converging on the others; one killed (`kill -9`) keeps its
//! Leases until they expire, and the changes made meanwhile converge once
//! the last replica takes its shards (taking a shard re-queues every
//! parent). Canary rollouts under shards are `declared_rollouts`'.
//!
//! A binary of its own (a control plane of its own, with the workload
//! controllers): the in-process manager of the `declared` tests would
//! otherwise reconcile the same resources.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use e2e_tests::declared::{
    apply_crd, crd_file, declare, memcacheds, wait_state, with_workload_controllers,
};
use e2e_tests::sharded::{Replica, check_one_writer_per_shard, wait_balanced};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, plugin_configmap, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use serde_json::json;
use wasm_operator::crd::controller::PluginController;
use wasm_operator::shards::hash::shard_of;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();
const BIN: &str = env!("CARGO_BIN_EXE_wasm-operator-under-test");
const SHARDS: u32 = 6;
const CONTROLLER: &str = "memcached-sharded";
const PARENTS: usize = 8;
const CONVERGE: Duration = Duration::from_secs(180);

/// A Memcached of `size`.
fn memcached(name: &str, size: i64) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": name}, "spec": {"size": size}
    }))?)
}

/// Waits until every parent's Deployment has `size` replicas, all ready,
/// and its status says so.
async fn wait_converged(env: &TestEnv, names: &[String], size: i64) -> Result<()> {
    let parents: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for(
        &format!("{} Memcacheds converged at size {size}", names.len()),
        CONVERGE,
        || async {
            for name in names {
                let Some(deployment) = deployments.get_opt(name).await? else {
                    return Ok(false);
                };
                let replicas = deployment.spec.and_then(|s| s.replicas);
                let parent = parents.get(name).await?;
                let ready = parent.data.pointer("/status/readyReplicas").cloned();
                if replicas != Some(size as i32) || ready != Some(json!(size)) {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await
}

/// The shard of each parent.
async fn parent_shards(env: &TestEnv, names: &[String]) -> Result<BTreeMap<String, u32>> {
    let parents: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    let mut shards = BTreeMap::new();
    for name in names {
        let uid = parents.get(name).await?.uid().context("a parent's uid")?;
        shards.insert(name.clone(), shard_of(&uid, SHARDS));
    }
    Ok(shards)
}

#[tokio::test(flavor = "multi_thread")]
async fn sharded_replicas_split_the_declared_parents_and_hand_them_over() -> Result<()> {
    let plane = own_control_plane(&PLANE, with_workload_controllers).await?;
    let env = TestEnv::new_on(plane, "declared-shards").await?;
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
    let a = Replica::start(BIN.as_ref(), &env, dir.path(), "replica-a", SHARDS)?;
    let b = Replica::start(BIN.as_ref(), &env, dir.path(), "replica-b", SHARDS)?;
    let c = Replica::start(BIN.as_ref(), &env, dir.path(), "replica-c", SHARDS)?;
    let owned = wait_balanced(&[&a, &b, &c]).await?;
    let source = json!({"configMap": {"namespace": env.namespace, "name": "memcached-plugin"}});
    declare(
        &env.client,
        CONTROLLER,
        json!({
            "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
            "children": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "observe": [{"apiVersion": "v1", "kind": "Pod", "through": [{"apiVersion": "apps/v1", "kind": "ReplicaSet"}]}],
            "source": source,
        }),
    )
    .await?;
    wait_state(&env.client, CONTROLLER, "Serving").await?;

    // Parents spread over the shards all converge, each shard written by
    // its holder only.
    let parents: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    let mut names: Vec<String> = (0..PARENTS).map(|i| format!("cache-{i}")).collect();
    for name in &names {
        parents
            .create(&PostParams::default(), &memcached(name, 1)?)
            .await?;
    }
    // UIDs are random: a few more parents until they fall in at least three
    // shards held by at least two replicas (8 nearly always do).
    let spread_of = |shards: &BTreeMap<String, u32>| {
        let spread: BTreeSet<u32> = shards.values().copied().collect();
        let used = owned
            .iter()
            .filter(|o| spread.iter().any(|s| o.contains(s)))
            .count();
        (spread, used)
    };
    loop {
        let (spread, used) = spread_of(&parent_shards(&env, &names).await?);
        if (spread.len() >= 3 && used >= 2) || names.len() >= 3 * PARENTS {
            break;
        }
        let name = format!("cache-{}", names.len());
        parents
            .create(&PostParams::default(), &memcached(&name, 1)?)
            .await?;
        names.push(name);
    }
    wait_converged(&env, &names, 1).await?;
    let shards = parent_shards(&env, &names).await?;
    let (spread, replicas_used) = spread_of(&shards);
    assert!(
        spread.len() >= 3 && replicas_used >= 2,
        "the parents fall in shards {spread:?}: too few to test the split ({owned:?})"
    );
    check_one_writer_per_shard(CONTROLLER, &[&a, &b, &c], &owned, &shards).await?;
    for replica in [&a, &b, &c] {
        assert!(
            replica.skipped().await > 0,
            "{} skipped no parent of another replica's shards",
            replica.name
        );
    }

    // The replica holding the most parents stops: its shards go to the
    // others, and its parents keep converging (a new size, new parents).
    let load = |o: &BTreeSet<u32>| shards.values().filter(|s| o.contains(s)).count();
    let mut replicas = vec![
        (a, owned[0].clone()),
        (b, owned[1].clone()),
        (c, owned[2].clone()),
    ];
    replicas.sort_by_key(|(_, o)| std::cmp::Reverse(load(o)));
    let (stopped, stopped_shards) = replicas.remove(0);
    let stopped_name = stopped.name.clone();
    let status = stopped.host.terminate(Duration::from_secs(60)).await?;
    assert!(status.success(), "{stopped_name} exited with {status}");
    let [(first, _), (second, _)] =
        <[_; 2]>::try_from(replicas).map_err(|_| anyhow::anyhow!("two replicas left"))?;
    let before = [
        first.writes(CONTROLLER).await?,
        second.writes(CONTROLLER).await?,
    ];
    let owned = wait_balanced(&[&first, &second]).await?;
    for name in &names {
        parents
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"size": 2}})),
            )
            .await?;
    }
    let first_new = names.len();
    for i in first_new..first_new + 2 {
        let name = format!("cache-{i}");
        parents
            .create(&PostParams::default(), &memcached(&name, 2)?)
            .await?;
        names.push(name);
    }
    wait_converged(&env, &names, 2).await?;
    let shards = parent_shards(&env, &names).await?;
    let after = [
        first.writes(CONTROLLER).await?,
        second.writes(CONTROLLER).await?,
    ];
    for (parent, shard) in &shards {
        if !stopped_shards.contains(shard) {
            continue;
        }
        let took_over = [&first, &second]
            .iter()
            .zip(&owned)
            .zip(before.iter().zip(&after))
            .find(|((_, o), _)| o.contains(shard))
            .map(|((r, _), (b, a))| (r.name.clone(), b.get(shard), a.get(shard)));
        match took_over {
            Some((_, before, Some(after))) if before.is_none_or(|b| after > b) => {}
            other => bail!(
                "{parent} (shard {shard}, {stopped_name}'s): not written by its new holder: {other:?}"
            ),
        }
    }

    // `kill -9` of one more: its Leases are not released, so the changes
    // made right after are skipped by the last replica until its Leases
    // expire and it takes the shards; taking a shard re-queues every parent,
    // and so they converge.
    first.host.kill().await;
    for name in &names {
        parents
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"size": 1}})),
            )
            .await?;
    }
    wait_converged(&env, &names, 1).await?;
    assert_eq!(
        second.owned().await.len(),
        SHARDS as usize,
        "the last replica holds every shard"
    );
    second.host.terminate(Duration::from_secs(60)).await?;
    Ok(())
}
