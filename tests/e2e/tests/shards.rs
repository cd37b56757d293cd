//! Sharding end to end (`--shards`), on the real control plane: three hosts
//! with distinct identities split 12 shards, each caching and reconciling
//! only its own objects; every object converges to its exact pod count and
//! no pod is ever created twice — with all three up, after one is killed
//! (`kill -9`: no release, its shards are taken over once their Leases
//! expire), and while replicas go 1 → 3 → 1 under load (graceful handovers),
//! starting from pods an unsharded host created (the upgrade path: they get
//! their shard label and are not created again).
//!
//! "Never created twice" is checked by a pod watch of the test's own that
//! records every pod UID it ever sees per owner: the objects only scale up
//! and their pods never fail, so the UIDs seen must equal the final count.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use e2e_tests::{
    ControlPlaneSlot, HostOptions, RunningHost, TestEnv, is_running_and_ready, own_control_plane,
    plugin, wait_for,
};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use wasm_operator::controller::ControllerConfig;
use wasm_operator::leader::LeaderElectionConfig;
use wasm_operator::ownership::SHARD_LABEL;
use wasm_operator::shards::coordinator::LEASE_KIND_LABEL;
use wasm_operator::shards::hash::{label_value, shard_of};
use wasm_operator::shards::{Coordinator, ShardConfig, Shards};

const SHARDS: u32 = 12;
const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_secs(1);
const CONVERGE: Duration = Duration::from_secs(120);

/// One sharded host: the controller and its shard coordinator.
struct Replica {
    name: String,
    host: RunningHost,
    coordinator: Coordinator,
    shards: Shards,
}

impl Replica {
    async fn start(env: &TestEnv, name: &str) -> Result<Self> {
        Self::start_on(env, name, &[]).await
    }

    /// A replica serving the replicaset plugin built with `features`.
    async fn start_on(env: &TestEnv, name: &str, features: &[&str]) -> Result<Self> {
        // Built (or found) before taking any shard.
        let plugin = plugin("replicaset-plugin", features);
        let (shards, coordinator) = Coordinator::start(
            env.client.clone(),
            ShardConfig {
                count: SHARDS,
                lease: LeaderElectionConfig {
                    lease_name: "wasm-operator".into(),
                    namespace: env.namespace.clone(),
                    identity: name.to_string(),
                    lease_duration: LEASE,
                    renew_deadline: RENEW,
                    retry_period: RETRY,
                },
            },
        )
        .map_err(anyhow::Error::msg)?;
        let mut options = HostOptions::file(&plugin);
        options.log_name = Some(name.to_string());
        options.controller = ControllerConfig {
            shards: Some(shards.clone()),
            ..ControllerConfig::default()
        };
        let host = RunningHost::start_with(env, options).await?;
        Ok(Self {
            name: name.to_string(),
            host,
            coordinator,
            shards,
        })
    }

    fn active(&self) -> BTreeSet<u32> {
        self.shards.active().into_iter().collect()
    }

    /// `kill -9`: reconciles stop mid-flight, no Lease is released.
    async fn crash(self) {
        self.coordinator.abort();
        self.host.crash().await;
    }

    /// SIGTERM: running reconciles finish, the shards are handed over.
    async fn stop(self) {
        self.host.stop().await;
        self.coordinator.release().await;
    }
}

/// Waits until `replicas` hold every shard between them, each active on
/// exactly one, in fair shares; returns how long that took.
async fn wait_balanced(replicas: &[&Replica], timeout: Duration) -> Result<Duration> {
    let started = Instant::now();
    let n = replicas.len();
    let (lo, hi) = (SHARDS as usize / n, (SHARDS as usize).div_ceil(n));
    let mut last = String::new();
    while started.elapsed() < timeout {
        let sets: Vec<BTreeSet<u32>> = replicas.iter().map(|r| r.active()).collect();
        let all: Vec<u32> = sets.iter().flatten().copied().collect();
        let distinct: BTreeSet<u32> = all.iter().copied().collect();
        if all.len() == SHARDS as usize
            && distinct.len() == SHARDS as usize
            && sets.iter().all(|s| (lo..=hi).contains(&s.len()))
        {
            return Ok(started.elapsed());
        }
        last = replicas
            .iter()
            .zip(&sets)
            .map(|(r, s)| format!("{}: {s:?}", r.name))
            .collect::<Vec<_>>()
            .join("; ");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the shards were not balanced within {timeout:?}: {last}")
}

/// The UIDs of the test namespace's Jinghzhus.
async fn jinghzhu_uids(env: &TestEnv) -> Result<Vec<String>> {
    Ok(env
        .jinghzhus()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|jz| jz.metadata.uid)
        .collect())
}

/// Every pod the test has seen (UID → name), per controlling owner UID.
struct CreatedPods {
    seen: Arc<Mutex<HashMap<String, HashMap<String, String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl CreatedPods {
    fn start(env: &TestEnv) -> Self {
        let seen: Arc<Mutex<HashMap<String, HashMap<String, String>>>> = Arc::default();
        let record = seen.clone();
        let task = tokio::spawn(
            watcher(env.pods(), watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .for_each(move |pod| {
                    if let Ok(pod) = pod
                        && let (Some(uid), Some(owner)) = (
                            pod.uid(),
                            pod.owner_references()
                                .iter()
                                .find(|o| o.controller == Some(true)),
                        )
                    {
                        record
                            .lock()
                            .expect("lock")
                            .entry(owner.uid.clone())
                            .or_default()
                            .insert(uid, pod.name_any());
                    }
                    futures::future::ready(())
                }),
        );
        Self { seen, task }
    }

    fn total(&self) -> usize {
        self.seen
            .lock()
            .expect("lock")
            .values()
            .map(HashMap::len)
            .sum()
    }

    /// Owners (by UID) with more pods ever created than `desired`.
    fn over_created(&self, desired: &HashMap<String, u32>) -> Vec<String> {
        let seen = self.seen.lock().expect("lock");
        seen.iter()
            .filter(|(owner, pods)| pods.len() > desired.get(*owner).copied().unwrap_or(0) as usize)
            .map(|(owner, pods)| {
                let mut names: Vec<&str> = pods.values().map(String::as_str).collect();
                names.sort_unstable();
                format!("{owner}: {} pods ({})", pods.len(), names.join(", "))
            })
            .collect()
    }
}

impl Drop for CreatedPods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Creates `count` objects `web-000…` with `desired` pods each.
async fn create_objects(env: &TestEnv, count: usize, desired: u32) -> Result<()> {
    for i in 0..count {
        env.create(&format!("web-{i:03}"), desired, &[]).await?;
    }
    Ok(())
}

async fn scale_all(env: &TestEnv, desired: u32) -> Result<()> {
    for jz in env.jinghzhus().list(&ListParams::default()).await?.items {
        env.scale(&jz.name_any(), desired).await?;
    }
    Ok(())
}

/// Waits until every Jinghzhu has exactly `desired` live pods, all running
/// and ready, with a status that says so; then checks that no pod was ever
/// created twice and that every pod carries its owner's shard label.
async fn wait_all_converged(env: &TestEnv, desired: u32, created: &CreatedPods) -> Result<()> {
    let started = Instant::now();
    loop {
        let jinghzhus = env.jinghzhus().list(&ListParams::default()).await?.items;
        let pods = env.pods().list(&ListParams::default()).await?.items;
        let mut live: HashMap<String, Vec<&Pod>> = HashMap::new();
        for pod in &pods {
            if wasm_operator::observed::is_live(pod)
                && let Some(owner) = pod
                    .owner_references()
                    .iter()
                    .find(|o| o.controller == Some(true))
            {
                live.entry(owner.uid.clone()).or_default().push(pod);
            }
        }
        let behind: Vec<String> = jinghzhus
            .iter()
            .filter_map(|jz| {
                let uid = jz.uid().unwrap_or_default();
                let pods = live.get(&uid).map(Vec::as_slice).unwrap_or_default();
                let ready = pods.iter().filter(|p| is_running_and_ready(p)).count();
                let status_ok = jz
                    .status
                    .as_ref()
                    .is_some_and(|s| s.current == desired && s.ready_replicas == Some(desired));
                (jz.spec.desired != desired
                    || pods.len() != desired as usize
                    || ready != pods.len()
                    || !status_ok)
                    .then(|| format!("{}: {} live, {ready} ready", jz.name_any(), pods.len()))
            })
            .collect();
        if behind.is_empty() {
            let wanted: HashMap<String, u32> = jinghzhus
                .iter()
                .map(|jz| (jz.uid().unwrap_or_default(), desired))
                .collect();
            // Let the test's own watch catch up with the last creates.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let over = created.over_created(&wanted);
            assert!(over.is_empty(), "pods created more than once: {over:?}");
            assert_eq!(
                created.total(),
                jinghzhus.len() * desired as usize,
                "every pod the test saw is one of the final ones"
            );
            for pod in &pods {
                let owner = pod
                    .owner_references()
                    .iter()
                    .find(|o| o.controller == Some(true))
                    .map(|o| o.uid.clone())
                    .unwrap_or_default();
                assert_eq!(
                    pod.labels().get(SHARD_LABEL),
                    Some(&label_value(shard_of(&owner, SHARDS), SHARDS)),
                    "pod {} carries its owner's shard label",
                    pod.name_any()
                );
            }
            for jz in &jinghzhus {
                assert_eq!(
                    jz.labels().get(SHARD_LABEL),
                    Some(&label_value(
                        shard_of(&jz.uid().unwrap_or_default(), SHARDS),
                        SHARDS
                    )),
                );
            }
            println!(
                "converged: {} objects × {desired} pods in {:?}",
                jinghzhus.len(),
                started.elapsed()
            );
            return Ok(());
        }
        let last = format!(
            "{} behind, e.g. {:?}",
            behind.len(),
            &behind[..behind.len().min(5)]
        );
        if started.elapsed() > CONVERGE {
            bail!("not converged to {desired} within {CONVERGE:?}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The shard Leases: `kubectl get leases` shows who holds each.
async fn shard_holders(client: &Client, namespace: &str) -> Result<BTreeMap<String, String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    Ok(leases
        .list(&ListParams::default().labels(&format!("{LEASE_KIND_LABEL}=shard")))
        .await?
        .items
        .into_iter()
        .map(|l| {
            let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            (l.metadata.name.unwrap_or_default(), holder)
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_split_the_shards_and_converge_without_double_creates() -> Result<()> {
    let env = TestEnv::new("shards-three").await?;
    let created = CreatedPods::start(&env);
    let a = Replica::start(&env, "replica-a").await?;
    let b = Replica::start(&env, "replica-b").await?;
    let c = Replica::start(&env, "replica-c").await?;
    let took = wait_balanced(&[&a, &b, &c], Duration::from_secs(30)).await?;
    println!("3 replicas balanced {SHARDS} shards in {took:?}");

    // The Leases name the holders, and agree with what each replica reconciles.
    let holders = shard_holders(&env.client, &env.namespace).await?;
    assert_eq!(holders.len(), SHARDS as usize, "{holders:?}");
    for replica in [&a, &b, &c] {
        for shard in replica.active() {
            assert_eq!(
                holders.get(&format!("wasm-operator-shard-{shard:02}")),
                Some(&replica.name),
                "{holders:?}"
            );
        }
    }

    // The size: 300 objects, 600 pods.
    const OBJECTS: usize = 300;
    create_objects(&env, OBJECTS, 2).await?;
    wait_all_converged(&env, 2, &created).await?;

    // Each replica cached only the objects of its shards, and reconciled some.
    let uids = jinghzhu_uids(&env).await?;
    wait_for(
        "each replica's per-shard object gauge to match its shards",
        Duration::from_secs(15),
        || async {
            Ok([&a, &b, &c].iter().all(|r| {
                let mine = r.active();
                let expected = uids
                    .iter()
                    .filter(|u| mine.contains(&shard_of(u, SHARDS)))
                    .count() as i64;
                let gauge: i64 = mine
                    .iter()
                    .map(|s| {
                        r.shards
                            .metrics()
                            .objects
                            .get_or_create(&wasm_operator::shards::metrics::ShardLabels {
                                shard: s.to_string(),
                            })
                            .get()
                    })
                    .sum();
                gauge == expected
            }))
        },
    )
    .await?;
    for replica in [&a, &b, &c] {
        assert!(
            replica.host.metrics.reconcile_count("success") > 0,
            "{} reconciled its share",
            replica.name
        );
    }
    // Each new Jinghzhu was labelled by its shard's holder alone: about one
    // label write per object, where every replica writing made it three.
    let label_writes: u64 = [&a, &b, &c]
        .iter()
        .map(|r| {
            r.shards
                .metrics()
                .labels_written
                .get_or_create(&wasm_operator::shards::metrics::KindLabels {
                    kind: "jinghzhu".into(),
                })
                .get()
        })
        .sum();
    println!("shard labels written on {OBJECTS} new Jinghzhus: {label_writes}");
    assert!(
        label_writes >= OBJECTS as u64 && label_writes < 2 * OBJECTS as u64,
        "{label_writes} label writes for {OBJECTS} objects"
    );

    // `/status` lists the replica's shards, `/metrics` the shard series.
    let addr = wasm_operator::serve::spawn(
        "127.0.0.1:0".parse()?,
        wasm_operator::serve::Endpoint {
            metrics: a.host.metrics.clone(),
            active: a.host.plugin.clone(),
            history: a.host.history.clone(),
            health: Arc::default(),
            leadership: wasm_operator::leader::Leadership::always(),
            leader: None,
            shards: Some(a.shards.clone()),
        },
    )
    .await?;
    let (code, body) = e2e_tests::deploy::http_get(addr, "/status").await?;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body)?;
    let owned: BTreeSet<u32> = status["shards"]["owned"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as u32)
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(owned, a.active(), "{body}");
    assert_eq!(status["shards"]["count"], SHARDS, "{body}");
    assert_eq!(
        status["shards"]["members"].as_array().map(Vec::len),
        Some(3),
        "{body}"
    );
    let (_, metrics) = e2e_tests::deploy::http_get(addr, "/metrics").await?;
    assert!(
        metrics.contains(&format!("wasm_operator_shards_owned {}", a.active().len())),
        "{metrics}"
    );
    assert!(metrics.contains("wasm_operator_shard_handovers_total{direction=\"acquired\"}"));
    for replica in [a, b, c] {
        replica.stop().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_replica_s_shards_are_taken_over_within_lease_plus_retry() -> Result<()> {
    let env = TestEnv::new("shards-kill").await?;
    let created = CreatedPods::start(&env);
    let a = Replica::start(&env, "replica-a").await?;
    let b = Replica::start(&env, "replica-b").await?;
    let c = Replica::start(&env, "replica-c").await?;
    wait_balanced(&[&a, &b, &c], Duration::from_secs(30)).await?;
    const OBJECTS: usize = 30;
    create_objects(&env, OBJECTS, 1).await?;
    wait_all_converged(&env, 1, &created).await?;

    // Scale up and kill B while the first new pods are being created.
    let before = created.total();
    scale_all(&env, 4).await?;
    wait_for("the first new pods", Duration::from_secs(30), || async {
        Ok(created.total() > before)
    })
    .await?;
    let b_shards = b.active();
    let killed = Instant::now();
    b.crash().await;
    let took = wait_balanced(&[&a, &c], Duration::from_secs(30)).await?;
    let bound = LEASE + RETRY * 2 + Duration::from_secs(2);
    println!(
        "kill -9: the killed replica's shards {b_shards:?} were active elsewhere {took:?} after the kill \
         (lease {LEASE:?} + retry {RETRY:?}; bound checked {bound:?})"
    );
    assert!(took <= bound, "takeover took {took:?}, more than {bound:?}");
    assert!(killed.elapsed() >= took);
    assert!(
        a.shards.metrics().handovers_of("acquired") + c.shards.metrics().handovers_of("acquired")
            >= SHARDS as u64,
        "every shard was acquired once at the start, B's again after the kill"
    );
    wait_all_converged(&env, 4, &created).await?;
    a.stop().await;
    c.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_go_one_to_three_to_one_under_load_after_an_upgrade_from_unsharded() -> Result<()>
{
    let env = TestEnv::new("shards-scale").await?;
    let created = CreatedPods::start(&env);
    const OBJECTS: usize = 24;
    // An unsharded host created the first pods: they carry no shard label.
    let unsharded = RunningHost::start(&env, &plugin("replicaset-plugin", &[])).await?;
    create_objects(&env, OBJECTS, 1).await?;
    wait_for("the unsharded host's pods", CONVERGE, || async {
        let pods = env.pods().list(&ListParams::default()).await?.items;
        Ok(pods.len() == OBJECTS && pods.iter().all(is_running_and_ready))
    })
    .await?;
    unsharded.stop().await;
    let unlabelled = env.pods().list(&ListParams::default()).await?.items;
    assert!(
        unlabelled
            .iter()
            .all(|p| !p.labels().contains_key(SHARD_LABEL))
    );

    // One sharded replica: labels everything, creates nothing new.
    let a = Replica::start(&env, "replica-a").await?;
    wait_balanced(&[&a], Duration::from_secs(30)).await?;
    wait_all_converged(&env, 1, &created).await?;

    // 1 -> 3 while scaling up.
    scale_all(&env, 2).await?;
    let b = Replica::start(&env, "replica-b").await?;
    let c = Replica::start(&env, "replica-c").await?;
    let took = wait_balanced(&[&a, &b, &c], Duration::from_secs(30)).await?;
    println!("1 -> 3 replicas rebalanced in {took:?}");
    scale_all(&env, 3).await?;
    wait_all_converged(&env, 3, &created).await?;

    // 3 -> 1 while scaling up again: B and C drain and hand over.
    scale_all(&env, 4).await?;
    let stopping = Instant::now();
    b.stop().await;
    c.stop().await;
    let took = wait_balanced(&[&a], Duration::from_secs(30)).await?;
    println!(
        "3 -> 1 replicas: all shards back on one {:?} after the stops began",
        stopping.elapsed()
    );
    let _ = took;
    assert_eq!(a.active().len(), SHARDS as usize);
    wait_all_converged(&env, 4, &created).await?;
    let holders = shard_holders(&env.client, &env.namespace).await?;
    assert!(holders.values().all(|h| h == "replica-a"), "{holders:?}");
    a.stop().await;
    Ok(())
}

/// A rolling update as a Deployment with `maxSurge: 1, maxUnavailable: 0`
/// does it: two old replicas (plugin v1), then a new one (plugin v2, as a
/// new image would bring) joins and an old one leaves, twice, while every
/// object is scaled. The shards rebalance at each step, the objects end
/// exact and reconciled by v2, no pod ever created twice. (Old and new
/// run the same host build here: the protocol between replicas, Leases,
/// labels and the hash, is what a rolling update relies on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_update_of_two_replicas_loses_and_doubles_nothing() -> Result<()> {
    let env = TestEnv::new("shards-rolling").await?;
    let created = CreatedPods::start(&env);
    let a = Replica::start(&env, "old-a").await?;
    let b = Replica::start(&env, "old-b").await?;
    wait_balanced(&[&a, &b], Duration::from_secs(30)).await?;
    create_objects(&env, 20, 1).await?;
    wait_all_converged(&env, 1, &created).await?;

    // Surge: new-c joins; then old-a leaves while the objects scale up.
    let c = Replica::start_on(&env, "new-c", &["v2"]).await?;
    wait_balanced(&[&a, &b, &c], Duration::from_secs(30)).await?;
    scale_all(&env, 2).await?;
    a.stop().await;
    wait_balanced(&[&b, &c], Duration::from_secs(30)).await?;
    wait_all_converged(&env, 2, &created).await?;

    // Again: new-d joins, old-b leaves while they scale up once more.
    let d = Replica::start_on(&env, "new-d", &["v2"]).await?;
    wait_balanced(&[&b, &c, &d], Duration::from_secs(30)).await?;
    scale_all(&env, 3).await?;
    b.stop().await;
    wait_balanced(&[&c, &d], Duration::from_secs(30)).await?;
    wait_all_converged(&env, 3, &created).await?;
    let holders = shard_holders(&env.client, &env.namespace).await?;
    assert!(
        holders.values().all(|h| h == "new-c" || h == "new-d"),
        "{holders:?}"
    );
    for jz in env.jinghzhus().list(&ListParams::default()).await?.items {
        let message = jz.status.map(|s| s.message).unwrap_or_default();
        assert!(message.starts_with("[v2] "), "{message}");
    }
    c.stop().await;
    d.stop().await;
    Ok(())
}

/// A control plane with Kubernetes 1.36's server-side sharded list and
/// watch (KEP-5866, alpha) on.
static SHARDED_LIST: ControlPlaneSlot = ControlPlaneSlot::new();

fn sharded_list_options() -> local_control_plane::ControlPlaneOptions {
    local_control_plane::ControlPlaneOptions {
        apiserver_args: vec!["--feature-gates=ShardedListAndWatch=true".into()],
        nodes: 0,
        ..Default::default()
    }
}

/// What docs/replicas.md says about KEP-5866 ("Not yet"), checked on the
/// local control plane: the server's `shardRange` over a Jinghzhu's UID
/// selects exactly the objects whose FNV-1a 64 ([`fnv1a64`], the hash of our
/// shards) falls in the range, and a custom resource's list does not say it
/// was filtered (no `shardInfo`), so a client cannot tell a server that
/// ignored the parameter. When a Kubernetes release echoes it, this test
/// fails: time to revisit server-side sharding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_s_shard_range_selects_jinghzhus_by_our_hash() -> Result<()> {
    use wasm_operator::shards::hash::fnv1a64;
    let plane = own_control_plane(&SHARDED_LIST, sharded_list_options).await?;
    let env = TestEnv::new_on(plane, "kep5866").await?;
    for i in 0..60 {
        env.create(&format!("o-{i:02}"), 0, &[]).await?;
    }
    let (low, high) = (0u64, u64::MAX / 3);
    let expected: BTreeSet<String> = jinghzhu_uids(&env)
        .await?
        .into_iter()
        .filter(|uid| (low..high).contains(&fnv1a64(uid.as_bytes())))
        .collect();
    let selector = format!("shardRange(object.metadata.uid, '0x{low:016x}', '0x{high:016x}')");
    let path = format!(
        "/apis/jinghzhu.io/v1/namespaces/{}/jinghzhus",
        env.namespace
    );
    let mut request = kube::core::Request::new(path).list(&ListParams::default())?;
    let base = request.uri().to_string();
    let joiner = if base.contains('?') { "&" } else { "?" };
    let uri = format!("{base}{joiner}shardSelector={}", url_escape(&selector));
    *request.uri_mut() = uri.parse()?;
    let list: serde_json::Value = env.client.request(request).await?;
    let got: BTreeSet<String> = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|jz| jz["metadata"]["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !expected.is_empty() && expected.len() < 60,
        "a third of the hash range should hold some but not all of 60 objects: {}",
        expected.len()
    );
    assert_eq!(
        got, expected,
        "the server's shardRange and fnv1a64 disagree"
    );
    assert!(
        list["metadata"].get("shardInfo").is_none(),
        "the list now says it was sharded ({}): a client can tell; revisit KEP-5866 in docs/replicas.md",
        list["metadata"]
    );
    Ok(())
}

/// Percent-encodes what a query value may not hold as is.
fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Issue 40, hazard 11 (in part): Leases anyone with write access to them
/// can forge. 20 ghost membership Leases that never renew and shard 0's
/// Lease rewritten to a holder `ghost`, all with `leaseDurationSeconds:
/// 2147483647`: the replicas count a Lease's duration as at most their own
/// (4 s here), so the ghosts stop counting as members, shard 0 is taken
/// back, every shard is held again and every object converges. Taking the
/// forged duration at its word, the ghosts stayed members for good and the
/// shards assigned to them were held by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_leases_with_endless_durations_expire_after_the_fleets_own() -> Result<()> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use kube::api::PostParams;
    use wasm_operator::shards::hash::member_lease_name;

    let env = TestEnv::new("shards-forged").await?;
    let created = CreatedPods::start(&env);
    let a = Replica::start(&env, "replica-a").await?;
    let b = Replica::start(&env, "replica-b").await?;
    wait_balanced(&[&a, &b], Duration::from_secs(30)).await?;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    let now = || MicroTime(k8s_openapi::jiff::Timestamp::now());
    for i in 0..20 {
        let ghost = format!("ghost-{i}");
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(member_lease_name("wasm-operator", &ghost)),
                labels: Some([(LEASE_KIND_LABEL.to_string(), "member".to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(ghost),
                lease_duration_seconds: Some(i32::MAX),
                renew_time: Some(now()),
                ..Default::default()
            }),
        };
        leases.create(&PostParams::default(), &lease).await?;
    }
    let mut shard0 = leases.get("wasm-operator-shard-00").await?;
    if let Some(spec) = shard0.spec.as_mut() {
        spec.holder_identity = Some("ghost".into());
        spec.lease_duration_seconds = Some(i32::MAX);
        spec.renew_time = Some(now());
    }
    leases
        .replace("wasm-operator-shard-00", &PostParams::default(), &shard0)
        .await?;
    let forged = Instant::now();
    wait_for("the ghosts to be seen", Duration::from_secs(10), || async {
        Ok(a.shards.metrics().members.get() == 22)
    })
    .await?;
    create_objects(&env, 24, 1).await?;
    // The ghosts are assigned shards nobody takes until they expire.
    wait_for(
        "a shard to be held by nobody",
        Duration::from_secs(10),
        || async { Ok(a.active().len() + b.active().len() < SHARDS as usize) },
    )
    .await?;
    wait_balanced(&[&a, &b], Duration::from_secs(60)).await?;
    println!(
        "forged Leases: every shard held again by the two replicas {:?} after the forgery \
         (lease {LEASE:?})",
        forged.elapsed()
    );
    for replica in [&a, &b] {
        assert_eq!(
            replica.shards.metrics().members.get(),
            2,
            "{}: the ghosts are not members",
            replica.name
        );
    }
    let holders = shard_holders(&env.client, &env.namespace).await?;
    assert!(
        holders
            .values()
            .all(|h| h == "replica-a" || h == "replica-b"),
        "{holders:?}"
    );
    wait_all_converged(&env, 1, &created).await?;
    assert!(forged.elapsed() < Duration::from_secs(120));
    a.stop().await;
    b.stop().await;
    Ok(())
}

/// Renews a forged membership Lease for `ghost` every second (a process
/// whose Lease loop alone survives, or someone with write access to
/// Leases), with the fleet's own duration, until aborted.
fn forge_member(env: &TestEnv, ghost: &str) -> tokio::task::JoinHandle<()> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use kube::api::PostParams;
    use wasm_operator::shards::hash::member_lease_name;

    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    let name = member_lease_name("wasm-operator", ghost);
    let ghost = ghost.to_string();
    tokio::spawn(async move {
        loop {
            let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
            let spec = k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(ghost.clone()),
                lease_duration_seconds: Some(LEASE.as_secs() as i32),
                renew_time: Some(now.clone()),
                acquire_time: Some(now),
                ..Default::default()
            };
            match leases.get_opt(&name).await {
                Ok(Some(mut lease)) => {
                    // The same record renewed: only its renewTime moves.
                    if let Some(old) = lease.spec.as_mut() {
                        old.renew_time = spec.renew_time;
                    }
                    let _ = leases.replace(&name, &PostParams::default(), &lease).await;
                }
                Ok(None) => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            labels: Some(
                                [(LEASE_KIND_LABEL.to_string(), "member".to_string())].into(),
                            ),
                            ..ObjectMeta::default()
                        },
                        spec: Some(spec),
                    };
                    let _ = leases.create(&PostParams::default(), &lease).await;
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Issue 40, hazard 11: a membership Lease renewed every second by
/// something that takes no shard is counted as a member at first, so the
/// shards assigned to it are released and held by nobody; after three
/// lease durations of that it is a ghost, left out of the assignment, and
/// the two replicas hold every shard again (before: held by nobody for as
/// long as the forger renews).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ghost_member_that_keeps_renewing_is_left_out_of_the_assignment() -> Result<()> {
    let env = TestEnv::new("shards-ghost").await?;
    let created = CreatedPods::start(&env);
    let a = Replica::start(&env, "replica-a").await?;
    let b = Replica::start(&env, "replica-b").await?;
    wait_balanced(&[&a, &b], Duration::from_secs(30)).await?;
    let forger = forge_member(&env, "ghost");
    wait_for(
        "the ghost to be counted",
        Duration::from_secs(10),
        || async { Ok(a.shards.metrics().members.get() == 3) },
    )
    .await?;
    create_objects(&env, 24, 1).await?;
    wait_for(
        "a shard to be held by nobody",
        Duration::from_secs(20),
        || async { Ok(a.active().len() + b.active().len() < SHARDS as usize) },
    )
    .await?;
    let unheld = Instant::now();
    wait_balanced(&[&a, &b], Duration::from_secs(60)).await?;
    println!(
        "ghost member: every shard held by the two replicas again {:?} after one was \
         first unheld (lease {LEASE:?}, ghost grace {:?})",
        unheld.elapsed(),
        wasm_operator::shards::ghosts::ghost_grace(LEASE)
    );
    for replica in [&a, &b] {
        let metrics = replica.shards.metrics();
        assert_eq!(
            metrics.members.get(),
            2,
            "{}: the ghost is no member",
            replica.name
        );
        assert_eq!(metrics.ghosts.get(), 1, "{}: one ghost", replica.name);
    }
    let holders = shard_holders(&env.client, &env.namespace).await?;
    assert!(
        holders
            .values()
            .all(|h| h == "replica-a" || h == "replica-b"),
        "{holders:?}"
    );
    wait_all_converged(&env, 1, &created).await?;
    // Still renewing, still left out.
    tokio::time::sleep(LEASE * 2).await;
    assert_eq!(a.active().len() + b.active().len(), SHARDS as usize);
    forger.abort();
    a.stop().await;
    b.stop().await;
    Ok(())
}

/// Issue 40, hazard 11: labels removed from running controlled pods (the
/// managed-by label from one, the shard label from another, and a third
/// moved to another shard's value) make the pods leave the holder's
/// label-selected watch; they get their labels back, a `PodLabelsRestored`
/// Warning names the rule, and no replacement pod is created (before: one
/// replacement per removal, more live pods than asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_that_lose_their_labels_are_relabelled_not_replaced() -> Result<()> {
    use kube::api::{Patch, PatchParams};
    use wasm_operator::ownership::MANAGED_BY_LABEL;

    let env = TestEnv::new("shards-relabel").await?;
    let created = CreatedPods::start(&env);
    let a = Replica::start(&env, "replica-a").await?;
    let b = Replica::start(&env, "replica-b").await?;
    wait_balanced(&[&a, &b], Duration::from_secs(30)).await?;
    env.create("web", 3, &[]).await?;
    wait_all_converged(&env, 3, &created).await?;
    let jz = env.jinghzhus().get("web").await?;
    let owner = jz.uid().unwrap_or_default();
    let own = label_value(shard_of(&owner, SHARDS), SHARDS);
    let other = label_value((shard_of(&owner, SHARDS) + 1) % SHARDS, SHARDS);
    let mut pods: Vec<String> = env
        .live_pods("web")
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    pods.sort();
    let edits = [
        (
            &pods[0],
            serde_json::json!({"metadata": {"labels": {MANAGED_BY_LABEL: null}}}),
        ),
        (
            &pods[1],
            serde_json::json!({"metadata": {"labels": {SHARD_LABEL: null}}}),
        ),
        (
            &pods[2],
            serde_json::json!({"metadata": {"labels": {SHARD_LABEL: other}}}),
        ),
    ];
    for (pod, patch) in &edits {
        env.pods()
            .patch(pod, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    let edited = Instant::now();
    wait_for("every label back", Duration::from_secs(30), || async {
        let pods = env.live_pods("web").await?;
        Ok(pods.len() == 3
            && pods.iter().all(|p| {
                p.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some("wasm-operator")
                    && p.labels().get(SHARD_LABEL) == Some(&own)
            }))
    })
    .await?;
    println!(
        "labels removed from 3 pods: all back {:?} later",
        edited.elapsed()
    );
    let warned = env
        .events_of("web")
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PodLabelsRestored"))
        .filter(|e| {
            e.message
                .as_deref()
                .is_some_and(|m| m.contains("pods/lost-labels"))
        })
        .count();
    assert!(warned >= 1, "a PodLabelsRestored Warning names the rule");
    // No replacement was made meanwhile, and none comes later.
    tokio::time::sleep(Duration::from_secs(5)).await;
    wait_all_converged(&env, 3, &created).await?;
    let relabelled: u64 = [&a, &b]
        .iter()
        .map(|r| r.host.metrics.pods_relabelled.get())
        .sum();
    assert!(relabelled >= 3, "each stray counted: {relabelled}");
    a.stop().await;
    b.stop().await;
    Ok(())
}

/// Issue 40, hazard 11: a shard Lease taken over by an identity that is no
/// member and renewed by it every second (with the fleet's own duration)
/// extends nothing: the replica it is assigned to takes it back a lease
/// duration after it first saw that holder (before: never, for as long as
/// the renewals went on).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_lease_renewed_by_a_non_member_is_taken_back() -> Result<()> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::PostParams;

    let env = TestEnv::new("shards-stranger").await?;
    let created = CreatedPods::start(&env);
    let a = Replica::start(&env, "replica-a").await?;
    let b = Replica::start(&env, "replica-b").await?;
    wait_balanced(&[&a, &b], Duration::from_secs(30)).await?;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    let name = "wasm-operator-shard-00";
    // The stranger takes the Lease and renews it every second for as long
    // as it still names it (a process renewing a record it once wrote).
    let forger = {
        let leases = leases.clone();
        tokio::spawn(async move {
            let mut renewals = 0u32;
            loop {
                let Ok(mut lease) = leases.get(name).await else {
                    break;
                };
                let Some(spec) = lease.spec.as_mut() else {
                    break;
                };
                let holder = spec.holder_identity.clone().unwrap_or_default();
                if renewals > 0 && holder != "stranger" {
                    break; // taken back
                }
                spec.holder_identity = Some("stranger".into());
                spec.lease_duration_seconds = Some(LEASE.as_secs() as i32);
                spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
                if leases
                    .replace(name, &PostParams::default(), &lease)
                    .await
                    .is_ok()
                {
                    renewals += 1;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            renewals
        })
    };
    wait_for(
        "shard 0 to be lost to the stranger",
        Duration::from_secs(10),
        || async { Ok(!a.shards.holds(0) && !b.shards.holds(0)) },
    )
    .await?;
    let lost = Instant::now();
    create_objects(&env, 12, 1).await?;
    wait_for(
        "shard 0 held by a replica again",
        Duration::from_secs(30),
        || async {
            let holders = shard_holders(&env.client, &env.namespace).await?;
            Ok(holders
                .get(name)
                .is_some_and(|h| h == "replica-a" || h == "replica-b"))
        },
    )
    .await?;
    println!(
        "non-member holder: shard 0 taken back {:?} after it was lost (lease {LEASE:?})",
        lost.elapsed()
    );
    let renewals = forger.await?;
    assert!(renewals >= 3, "the stranger renewed it ({renewals} writes)");
    wait_balanced(&[&a, &b], Duration::from_secs(30)).await?;
    wait_all_converged(&env, 1, &created).await?;
    a.stop().await;
    b.stop().await;
    Ok(())
}
