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
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use e2e_tests::declared::{
    apply_crd, crd_file, declare, memcacheds, wait_state, with_workload_controllers,
};
use e2e_tests::watched_host::WatchedHost;
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, plugin_configmap, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use serde_json::{Value, json};
use wasm_operator::crd::controller::PluginController;
use wasm_operator::shards::hash::shard_of;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();
const BIN: &str = env!("CARGO_BIN_EXE_wasm-operator-under-test");
const SHARDS: u32 = 6;
const CONTROLLER: &str = "memcached-sharded";
const PARENTS: usize = 8;
const CONVERGE: Duration = Duration::from_secs(180);

/// One replica: the process and its name.
struct Replica {
    name: String,
    host: WatchedHost,
}

impl Replica {
    fn start(env: &TestEnv, dir: &std::path::Path, name: &str) -> Result<Self> {
        let kubeconfig = env.control_plane.kubeconfig_path().display().to_string();
        let args: Vec<String> = [
            "--plugin-controllers",
            "--shards",
            &SHARDS.to_string(),
            "--leader-elect-identity",
            name,
            "--leader-elect-namespace",
            &env.namespace,
            "--leader-elect-lease-duration",
            "4s",
            "--leader-elect-renew-deadline",
            "3s",
            "--leader-elect-retry-period",
            "1s",
            "--shutdown-timeout-secs",
            "30",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        let host = WatchedHost::start(
            std::path::Path::new(BIN),
            name,
            dir,
            &args,
            &[
                ("KUBECONFIG", kubeconfig),
                (
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
                ),
            ],
            512 * 1024 * 1024,
        )?;
        Ok(Self {
            name: name.to_string(),
            host,
        })
    }

    /// The shards active here (`/status`'s `shards.owned`).
    async fn owned(&self) -> BTreeSet<u32> {
        let Some((200, body)) = self.host.get("/status").await else {
            return BTreeSet::new();
        };
        serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|status| status.pointer("/shards/owned").cloned())
            .and_then(|owned| serde_json::from_value(owned).ok())
            .unwrap_or_default()
    }

    /// This replica's declared writes by shard, for [`CONTROLLER`].
    async fn writes(&self) -> Result<BTreeMap<u32, u64>> {
        let Some((200, body)) = self.host.get("/metrics").await else {
            bail!("{}: /metrics did not answer", self.name);
        };
        Ok(declared_writes(&body, CONTROLLER))
    }

    /// Reconciles it skipped for a shard it does not hold.
    async fn skipped(&self) -> u64 {
        let Some((200, body)) = self.host.get("/metrics").await else {
            return 0;
        };
        body.lines()
            .find_map(|line| line.strip_prefix("wasm_operator_shard_skipped_reconciles_total "))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .map_or(0, |value| value as u64)
    }
}

/// `wasm_operator_shard_declared_writes_total{controller,shard}` of one
/// controller, from a Prometheus text page.
fn declared_writes(page: &str, controller: &str) -> BTreeMap<u32, u64> {
    let mut writes = BTreeMap::new();
    for line in page.lines() {
        let Some(rest) = line.strip_prefix("wasm_operator_shard_declared_writes_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                (key == name).then(|| value.trim_matches('"').to_string())
            })
        };
        if label("controller").as_deref() != Some(controller) {
            continue;
        }
        if let (Some(shard), Ok(count)) = (
            label("shard").and_then(|s| s.parse::<u32>().ok()),
            value.trim().parse::<f64>(),
        ) {
            writes.insert(shard, count as u64);
        }
    }
    writes
}

/// Waits until `replicas` hold every shard between them, each active on
/// exactly one, in fair shares; their owned sets.
async fn wait_balanced(replicas: &[&Replica]) -> Result<Vec<BTreeSet<u32>>> {
    let n = replicas.len();
    let (lo, hi) = (SHARDS as usize / n, (SHARDS as usize).div_ceil(n));
    let started = Instant::now();
    let mut last = Vec::new();
    while started.elapsed() < Duration::from_secs(90) {
        let mut sets = Vec::new();
        for replica in replicas {
            sets.push(replica.owned().await);
        }
        let all: usize = sets.iter().map(BTreeSet::len).sum();
        let distinct: BTreeSet<u32> = sets.iter().flatten().copied().collect();
        if all == SHARDS as usize
            && distinct.len() == SHARDS as usize
            && sets.iter().all(|s| (lo..=hi).contains(&s.len()))
        {
            return Ok(sets);
        }
        last = sets;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let tails: Vec<String> = replicas
        .iter()
        .map(|r| format!("--- {}:\n{}", r.name, r.host.log_tail(15)))
        .collect();
    bail!(
        "the shards never balanced over {n} replicas: last {last:?}\n{}",
        tails.join("\n")
    )
}

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

/// Checks that every shard of `parents` was written by exactly one of
/// `replicas`, the one whose `owned` set holds it.
async fn check_one_writer_per_shard(
    replicas: &[&Replica],
    owned: &[BTreeSet<u32>],
    parents: &BTreeMap<String, u32>,
) -> Result<()> {
    let mut writes = Vec::new();
    for replica in replicas {
        writes.push(replica.writes().await?);
    }
    for (parent, shard) in parents {
        let writers: Vec<&str> = replicas
            .iter()
            .zip(&writes)
            .filter(|(_, w)| w.get(shard).is_some_and(|n| *n > 0))
            .map(|(r, _)| r.name.as_str())
            .collect();
        let holder: Vec<&str> = replicas
            .iter()
            .zip(owned)
            .filter(|(_, o)| o.contains(shard))
            .map(|(r, _)| r.name.as_str())
            .collect();
        if writers.len() != 1 || writers != holder {
            bail!(
                "{parent} (shard {shard}): written by {writers:?}, held by {holder:?}; writes {writes:?}"
            );
        }
    }
    Ok(())
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
    let a = Replica::start(&env, dir.path(), "replica-a")?;
    let b = Replica::start(&env, dir.path(), "replica-b")?;
    let c = Replica::start(&env, dir.path(), "replica-c")?;
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
    check_one_writer_per_shard(&[&a, &b, &c], &owned, &shards).await?;
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
    let before = [first.writes().await?, second.writes().await?];
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
    let after = [first.writes().await?, second.writes().await?];
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

#[test]
fn declared_writes_are_read_by_controller_and_shard() {
    let page = "# TYPE wasm_operator_shard_declared_writes counter\n\
        wasm_operator_shard_declared_writes_total{controller=\"x\",shard=\"2\"} 5\n\
        wasm_operator_shard_declared_writes_total{controller=\"y\",shard=\"3\"} 1\n\
        wasm_operator_shard_declared_writes_total{controller=\"x\",shard=\"4\"} 0\n";
    assert_eq!(declared_writes(page, "x"), BTreeMap::from([(2, 5), (4, 0)]));
}
