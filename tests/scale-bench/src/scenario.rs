//! One measured run: a fresh local control plane, the CRD, one controller
//! process, then N Jinghzhus × P pods, measured from outside:
//!
//! 1. idle: the controller started and settled, no objects yet (RSS idle);
//! 2. convergence: from the first create until every object reports exactly
//!    its live pods (time, API requests by verb and resource, CPU seconds,
//!    RSS and its peak, reconciles);
//! 3. quiet: `idle` seconds with nothing changing (reconciles, CPU);
//! 4. edits: one object at a time scaled by one pod (up, then back down the
//!    next time it is picked), timed from the patch until its status shows
//!    the new count at the new generation;
//! 5. failover (several replicas only): one replica killed with SIGKILL,
//!    then objects spread over every shard scaled, timed from the kill until
//!    each shows its new count (those of the dead replica's shards wait for
//!    its Leases to expire), then every object checked exact again;
//! 6. garbage collection: every Jinghzhu deleted at once, timed until the
//!    last pod is gone (skipped with `gc: false`).
//!
//! With several replicas the host runs as `--shards` replicas of one
//! another: the controller figures (CPU, RSS, reconciles) are the sums over
//! the replicas, and each replica's own are in `per_replica`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, CustomResourceExt, ResourceExt};
use local_control_plane::{ControlPlane, ControlPlaneOptions};
use serde::Serialize;
use wasm_operator::crd::{Jinghzhu, JinghzhuSpec};
use wasm_operator::shards::hash::shard_of;

use crate::apiserver::{self, Requests};
use crate::controllers::{Built, ControllerKind, Running, Sharding};
use crate::observe::Observer;
use crate::procstat;

/// The namespace every run works in.
pub const NAMESPACE: &str = "scale-bench";

/// kube-controller-manager's garbage collector looks for new resource types
/// every 30 s; until it has seen the Jinghzhu CRD it learns of a deleted
/// owner only then. The garbage-collection phase starts at least this long
/// after the CRD was established, so it measures the collector, not that
/// discovery tick (in runs with the 60 s quiet window it never waits).
pub const GC_DISCOVERY_WAIT: Duration = Duration::from_secs(35);

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// N: how many Jinghzhus.
    pub objects: usize,
    /// P: `spec.desired` of each.
    pub pods_per_object: u32,
    /// The controller's `--workers`.
    pub workers: u16,
    /// Each replica's `--workers` when there are several; `None`:
    /// [`RunOptions::workers_per_replica`]'s default.
    pub replica_workers: Option<u16>,
    /// Simulated nodes the pods are spread over.
    pub nodes: usize,
    /// kwok processes sharing the nodes.
    pub kwok_processes: usize,
    /// Creates in flight at once while creating the N objects.
    pub create_concurrency: usize,
    /// At most this many creates started a second (`None`: as fast as
    /// `create_concurrency` allows, which saturates this machine). A paced
    /// run measures the controllers at a load the cluster keeps up with,
    /// where each event is handled as it comes instead of in backlogs.
    pub create_rate: Option<f64>,
    /// How long to watch a converged set for reconciles.
    pub idle: Duration,
    /// How many single-object scale edits to time.
    pub edits: usize,
    /// Give up on convergence after this long.
    pub converge_timeout: Duration,
    /// Wait this long after the controller serves metrics before measuring.
    pub settle: Duration,
    /// Where controller logs go.
    pub log_dir: PathBuf,
    /// How many replicas of the controller (more than 1: the host with `--shards`).
    pub replicas: u32,
    /// The host's `--shards` when `replicas` > 1.
    pub shards: u32,
    /// Objects scaled after a replica is killed (several replicas only).
    pub failover_edits: usize,
    /// Time the garbage collection at the end.
    pub gc: bool,
}

impl RunOptions {
    /// Each replica's `--workers`: all of `workers` for one replica; with
    /// several, `replica_workers`, or else `workers` divided by the replica
    /// count, rounded up, as docs/replicas.md advises (replicas' workers
    /// add up, and more of them reconcile each object more often while its
    /// pods come up).
    pub fn workers_per_replica(&self) -> u16 {
        if self.replicas <= 1 {
            return self.workers;
        }
        self.replica_workers.unwrap_or_else(|| {
            let replicas = u16::try_from(self.replicas).unwrap_or(u16::MAX);
            self.workers.div_ceil(replicas).max(1)
        })
    }
}

/// One replica's own figures in a run of several.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaFigures {
    /// Its CPU seconds during convergence.
    pub cpu_converge_secs: f64,
    /// Its RSS when converged, MiB.
    pub rss_converged_mib: f64,
    /// Its peak RSS when converged, MiB.
    pub rss_peak_mib: f64,
    /// Its reconciles during convergence.
    pub reconciles_converge: u64,
    /// Shards it held when the clock started.
    pub shards_at_start: u64,
}

/// A replica killed and its shards taken over.
#[derive(Debug, Clone, Serialize)]
pub struct Failover {
    /// Objects scaled right after the kill, spread over every shard.
    pub objects: usize,
    /// Kill → the last of them converged at its new count, seconds.
    pub last_secs: f64,
    /// Kill → each converged, seconds, in object order.
    pub latencies_secs: Vec<f64>,
    /// Of them, how many were in the killed replica's shards (waiting for
    /// its Leases to expire and a survivor to take them).
    pub of_dead_replica: usize,
    /// Kill → the last of those converged, seconds (the failover time).
    pub last_of_dead_replica_secs: f64,
    /// Kill → the last of the others converged, seconds.
    pub last_of_others_secs: f64,
    /// Kill → every object of the run exact again, seconds.
    pub all_exact_secs: f64,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The controller.
    pub controller: ControllerKind,
    /// How many replicas of it (1 unless the host ran with `--shards`).
    pub replicas: u32,
    /// Each replica's own figures (several replicas only).
    pub per_replica: Vec<ReplicaFigures>,
    /// The failover phase (several replicas only).
    pub failover: Option<Failover>,
    /// N.
    pub objects: usize,
    /// P.
    pub pods_per_object: u32,
    /// `--workers` (of each replica).
    pub workers: u16,
    /// Simulated nodes.
    pub nodes: usize,
    /// 1-minute load average when the run started, and the CPU count.
    pub load_at_start: (f64, usize),
    /// First create → every object converged, seconds.
    pub converge_secs: f64,
    /// The controller's API requests during convergence by `"VERB resource"`
    /// (Jinghzhus, their status, pods, Events; the harness's own creates taken out).
    pub requests: Requests,
    /// Writes among `requests`.
    pub writes: u64,
    /// Reads among `requests`.
    pub reads: u64,
    /// Requests during convergence on other resources (background: the
    /// API server's leases, the controller manager).
    pub other_requests: u64,
    /// Controller CPU seconds during convergence.
    pub cpu_converge_secs: f64,
    /// CPU seconds during convergence of each control-plane process
    /// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)
    /// and of the harness itself (`scale-bench`: the creates and the watches
    /// that tell convergence): what shares the machine with the controller.
    #[serde(default)]
    pub cpu_others_converge_secs: BTreeMap<String, f64>,
    /// Lines the controller logged during convergence (at its default
    /// level: `RUST_LOG` is not passed on).
    #[serde(default)]
    pub log_lines_converge: u64,
    /// Controller CPU seconds during the quiet window.
    pub cpu_idle_secs: f64,
    /// RSS before any object, MiB.
    pub rss_idle_mib: f64,
    /// RSS when converged, MiB.
    pub rss_converged_mib: f64,
    /// Of `rss_converged_mib`: anonymous memory (heap, stacks), MiB.
    #[serde(default)]
    pub rss_converged_anon_mib: f64,
    /// Of `rss_converged_mib`: pages of mapped files (the executable's
    /// code and read-only data, shared libraries), MiB.
    #[serde(default)]
    pub rss_converged_file_mib: f64,
    /// Peak RSS (VmHWM) when converged, MiB.
    pub rss_peak_mib: f64,
    /// Reconciles during convergence.
    pub reconciles_converge: u64,
    /// Reconciles during the quiet window.
    pub reconciles_idle: u64,
    /// Length of the quiet window, seconds.
    pub idle_secs: f64,
    /// Edit → converged status latencies, milliseconds, in edit order.
    pub edit_latencies_ms: Vec<f64>,
    /// Median of `edit_latencies_ms`.
    pub edit_p50_ms: f64,
    /// 99th percentile of `edit_latencies_ms` (nearest rank).
    pub edit_p99_ms: f64,
    /// The controller's part of each edit ([`EditLatency::controller_ms`]), in edit order.
    #[serde(default)]
    pub edit_controller_ms: Vec<f64>,
    /// Median of `edit_controller_ms`.
    #[serde(default)]
    pub edit_controller_p50_ms: f64,
    /// 99th percentile of `edit_controller_ms` (nearest rank).
    #[serde(default)]
    pub edit_controller_p99_ms: f64,
    /// Delete all Jinghzhus → no pod left, seconds.
    pub gc_secs: f64,
    /// Which round of a repeated sweep (`--repeat`), from 0.
    #[serde(default)]
    pub round: usize,
}

impl RunResult {
    /// The controller's name in tables: [`RunResult::setup`], with
    /// `[round 2]` for the later rounds of a repeated sweep.
    pub fn label(&self) -> String {
        if self.round > 0 {
            format!("{} [round {}]", self.setup(), self.round + 1)
        } else {
            self.setup()
        }
    }

    /// What ran, whatever the round: `host`, or `host ×3` for replicas,
    /// with `(30 nodes)` when the cluster had other than the default 3.
    pub fn setup(&self) -> String {
        let nodes = if self.nodes == local_control_plane::DEFAULT_NODES {
            String::new()
        } else {
            format!(" ({} nodes)", self.nodes)
        };
        if self.replicas > 1 {
            format!(
                "{} ×{} (--workers {}){nodes}",
                self.controller, self.replicas, self.workers
            )
        } else {
            format!("{}{nodes}", self.controller)
        }
    }
}

/// Mebibytes.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The nearest-rank percentile `p` (0–100) of `values`.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs `built` once with `options` on a fresh control plane.
pub async fn run(built: &Built, options: &RunOptions) -> Result<RunResult> {
    let load_at_start = procstat::load();
    eprintln!(
        "scale-bench: {} with N={} x {} pods: starting a fresh control plane (load {:.2} on {} CPUs)",
        built.kind, options.objects, options.pods_per_object, load_at_start.0, load_at_start.1
    );
    let control_plane = ControlPlaneOptions {
        nodes: options.nodes,
        kwok_processes: options.kwok_processes,
        ..ControlPlaneOptions::default()
    };
    let cp = tokio::task::spawn_blocking(move || ControlPlane::start_with(control_plane))
        .await
        .context("control plane start task")??;
    let client = cp.client().await?;
    install_crd(&client).await?;
    let crd_established = Instant::now();
    create_namespace(&client).await?;
    let observer = Observer::start(&client, NAMESPACE).await?;

    std::fs::create_dir_all(&options.log_dir)?;
    let mut replicas = Vec::new();
    for replica in 0..options.replicas.max(1) {
        let sharding = (options.replicas > 1).then_some(Sharding {
            replica,
            shards: options.shards,
        });
        replicas.push(Running::start(
            built,
            cp.kubeconfig_path(),
            NAMESPACE,
            options.workers_per_replica(),
            &options.log_dir,
            sharding,
        )?);
    }
    let mut others = cp.pids();
    others.push(("scale-bench".to_owned(), std::process::id()));
    let result = measure(
        &client,
        &observer,
        &mut replicas,
        options,
        load_at_start,
        crd_established,
        &others,
    )
    .await;
    let result = result.with_context(|| {
        let mut text = format!("{} run with N={} failed", built.kind, options.objects);
        for replica in &replicas {
            text += &format!(
                "; the end of {}:\n{}",
                replica.log.display(),
                replica.log_tail(20)
            );
        }
        text
    });
    for replica in replicas {
        replica.stop(Duration::from_secs(10));
    }
    drop(observer);
    tokio::task::spawn_blocking(move || drop(cp)).await?;
    result
}

async fn measure(
    client: &Client,
    observer: &Observer,
    replicas: &mut [Running],
    options: &RunOptions,
    load_at_start: (f64, usize),
    crd_established: Instant,
    others: &[(String, u32)],
) -> Result<RunResult> {
    let kind = replicas.first().context("no controller process")?.kind;
    let pids: Vec<u32> = replicas.iter().map(Running::pid).collect();
    for replica in replicas.iter_mut() {
        replica.wait_ready(Duration::from_secs(120)).await?;
    }
    let shards_at_start = if replicas.len() > 1 {
        wait_for_shards_spread(replicas, options.shards, Duration::from_secs(120)).await?
    } else {
        vec![0]
    };
    tokio::time::sleep(options.settle).await;
    let rss_idle = total(&memory_each(&pids)?).rss;

    // 2. Convergence.
    let reconciles_before = reconciles_each(replicas).await?;
    let requests_before = apiserver::snapshot(client).await?;
    let cpu_before = cpu_each(&pids)?;
    let others_before = procstat::cpu_seconds_by_name(others);
    let lines_before = log_lines_each(replicas);
    let started = Instant::now();
    let own_requests = create_objects(client, options).await?;
    let converged_at = observer
        .poll_until(
            "convergence",
            Duration::from_millis(50),
            options.converge_timeout,
            |o| o.census().all_converged(options.objects),
        )
        .await?;
    let converge_secs = converged_at.duration_since(started).as_secs_f64();
    let cpu_converged = cpu_each(&pids)?;
    let log_lines_converge: u64 = log_lines_each(replicas)
        .iter()
        .zip(&lines_before)
        .map(|(after, before)| after.saturating_sub(*before))
        .sum();
    let cpu_others_converge_secs =
        procstat::cpu_difference(&others_before, &procstat::cpu_seconds_by_name(others));
    let memories = memory_each(&pids)?;
    let memory = total(&memories);
    let requests_after = apiserver::snapshot(client).await?;
    let reconciles_converged = reconciles_each(replicas).await?;
    let all_requests = apiserver::without(
        &apiserver::diff(&requests_before, &requests_after),
        &own_requests,
    );
    let requests = apiserver::on_controller_resources(&all_requests);
    let other_requests = all_requests.values().sum::<u64>() - requests.values().sum::<u64>();
    eprintln!(
        "scale-bench: {kind} x{} converged N={} in {converge_secs:.2} s",
        replicas.len(),
        options.objects
    );
    let per_replica: Vec<ReplicaFigures> = if replicas.len() > 1 {
        (0..replicas.len())
            .map(|i| ReplicaFigures {
                cpu_converge_secs: cpu_converged[i] - cpu_before[i],
                rss_converged_mib: mib(memories[i].rss),
                rss_peak_mib: mib(memories[i].peak),
                reconciles_converge: reconciles_converged[i] - reconciles_before[i],
                shards_at_start: shards_at_start[i],
            })
            .collect()
    } else {
        Vec::new()
    };

    // 3. Quiet.
    let quiet_started = Instant::now();
    tokio::time::sleep(options.idle).await;
    let idle_secs = quiet_started.elapsed().as_secs_f64();
    let reconciles_idle = reconciles_each(replicas).await?.iter().sum::<u64>()
        - reconciles_converged.iter().sum::<u64>();
    let cpu_idle_secs = cpu_each(&pids)?.iter().sum::<f64>() - cpu_converged.iter().sum::<f64>();

    // 4. Edits.
    let edits = time_edits(client, observer, options).await?;
    let edit_latencies_ms: Vec<f64> = edits.iter().map(|e| e.total_ms).collect();
    let edit_controller_ms: Vec<f64> = edits.iter().map(|e| e.controller_ms).collect();

    // 5. Failover.
    let failover = if replicas.len() > 1 {
        let failover = time_failover(client, observer, &mut replicas[0], options).await?;
        eprintln!(
            "scale-bench: {kind} x{}: killed replica 0; {} objects scaled, {} of them in its shards: converged {:.2} s after the kill (the others {:.2} s); every object exact after {:.2} s",
            replicas.len(),
            failover.objects,
            failover.of_dead_replica,
            failover.last_of_dead_replica_secs,
            failover.last_of_others_secs,
            failover.all_exact_secs
        );
        Some(failover)
    } else {
        None
    };

    // 6. Garbage collection.
    let gc_secs = if options.gc {
        tokio::time::sleep_until((crd_established + GC_DISCOVERY_WAIT).into()).await;
        let pods = options.objects as u64 * u64::from(options.pods_per_object);
        time_garbage_collection(client, observer, gc_timeout(pods)).await?
    } else {
        f64::NAN
    };
    // Replica 0 was killed in a failover; every other one must be alive.
    let first_alive = usize::from(failover.is_some());
    for replica in &mut replicas[first_alive..] {
        replica.check_alive()?;
    }

    Ok(RunResult {
        controller: kind,
        replicas: replicas.len() as u32,
        per_replica,
        failover,
        objects: options.objects,
        nodes: options.nodes,
        pods_per_object: options.pods_per_object,
        workers: options.workers_per_replica(),
        load_at_start,
        converge_secs,
        writes: apiserver::writes(&requests),
        reads: apiserver::reads(&requests),
        requests,
        other_requests,
        cpu_converge_secs: cpu_converged.iter().sum::<f64>() - cpu_before.iter().sum::<f64>(),
        cpu_others_converge_secs,
        log_lines_converge,
        cpu_idle_secs,
        rss_idle_mib: mib(rss_idle),
        rss_converged_mib: mib(memory.rss),
        rss_converged_anon_mib: mib(memory.anon),
        rss_converged_file_mib: mib(memory.file),
        rss_peak_mib: mib(memory.peak),
        reconciles_converge: reconciles_converged.iter().sum::<u64>()
            - reconciles_before.iter().sum::<u64>(),
        reconciles_idle,
        idle_secs,
        edit_p50_ms: percentile(&edit_latencies_ms, 50.0),
        edit_p99_ms: percentile(&edit_latencies_ms, 99.0),
        edit_latencies_ms,
        edit_controller_p50_ms: percentile(&edit_controller_ms, 50.0),
        edit_controller_p99_ms: percentile(&edit_controller_ms, 99.0),
        edit_controller_ms,
        gc_secs,
        round: 0,
    })
}

/// Lines in each replica's log file so far.
fn log_lines_each(replicas: &[Running]) -> Vec<u64> {
    replicas
        .iter()
        .map(|r| {
            std::fs::read(&r.log)
                .map(|bytes| bytes.iter().filter(|b| **b == b'\n').count() as u64)
                .unwrap_or(0)
        })
        .collect()
}

/// Each replica's reconciles so far.
async fn reconciles_each(replicas: &mut [Running]) -> Result<Vec<u64>> {
    let mut counts = Vec::with_capacity(replicas.len());
    for replica in replicas.iter_mut() {
        counts.push(replica.reconciles().await?);
    }
    Ok(counts)
}

/// Each process's CPU seconds so far.
fn cpu_each(pids: &[u32]) -> Result<Vec<f64>> {
    pids.iter().map(|&pid| procstat::cpu_seconds(pid)).collect()
}

/// Each process's memory now.
fn memory_each(pids: &[u32]) -> Result<Vec<procstat::Memory>> {
    pids.iter().map(|&pid| procstat::memory(pid)).collect()
}

/// Several processes' memory added up.
fn total(memories: &[procstat::Memory]) -> procstat::Memory {
    memories
        .iter()
        .fold(procstat::Memory::default(), |sum, m| procstat::Memory {
            rss: sum.rss + m.rss,
            peak: sum.peak + m.peak,
            anon: sum.anon + m.anon,
            file: sum.file + m.file,
        })
}

/// Waits until the replicas hold every one of `shards` between them, each
/// at least one, and returns how many each holds: the work is split before
/// the clock starts, as in a deployment that has run for a while.
async fn wait_for_shards_spread(
    replicas: &mut [Running],
    shards: u32,
    timeout: Duration,
) -> Result<Vec<u64>> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut owned = Vec::with_capacity(replicas.len());
        for replica in replicas.iter_mut() {
            owned.push(replica.shards_owned().await?);
        }
        if owned.iter().sum::<u64>() == u64::from(shards) && owned.iter().all(|&n| n > 0) {
            return Ok(owned);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the replicas did not split the {shards} shards within {timeout:?} (each holds {owned:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Kills `victim` with SIGKILL, scales `failover_edits` objects spread
/// over the whole set by two pods at once, and times each from the kill
/// until it converged; then waits until every object is exact.
async fn time_failover(
    client: &Client,
    observer: &Observer,
    victim: &mut Running,
    options: &RunOptions,
) -> Result<Failover> {
    let count = options.failover_edits.clamp(1, options.objects);
    let stride = options.objects / count;
    let api: Api<Jinghzhu> = Api::namespaced(client.clone(), NAMESPACE);
    let dead_shards = victim.held_shards().await?;
    victim.kill();
    let killed = Instant::now();
    // The edits phase left objects at P or P + 1: P + 2 is new for every one.
    let patch = serde_json::json!({ "spec": { "desired": options.pods_per_object + 2 } });
    let mut pending: Vec<(usize, String, i64)> = Vec::with_capacity(count);
    let mut dead = Vec::with_capacity(count);
    for j in 0..count {
        let name = object_name(j * stride);
        let uid = observer
            .uid_of(&name)
            .with_context(|| format!("{name} is not in the harness's cache"))?;
        dead.push(dead_shards.contains(&shard_of(&uid, options.shards)));
        let patched = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("scaling {name} after the kill"))?;
        pending.push((j, name, patched.metadata.generation.unwrap_or_default()));
    }
    let mut latencies = vec![f64::NAN; count];
    let timeout = Duration::from_secs(180);
    let converged = observer
        .poll_until(
            "the objects scaled after the kill converging",
            Duration::from_millis(50),
            timeout.saturating_sub(killed.elapsed()),
            |o| {
                let now = killed.elapsed().as_secs_f64();
                pending.retain(|(j, name, generation)| {
                    let done = o.object_converged(name, *generation);
                    if done {
                        latencies[*j] = now;
                    }
                    !done
                });
                pending.is_empty()
            },
        )
        .await;
    converged.with_context(|| {
        format!(
            "{} objects scaled after the kill had not converged {timeout:?} later: {:?}",
            pending.len(),
            pending.iter().map(|p| &p.1).take(10).collect::<Vec<_>>()
        )
    })?;
    let desired_total = options.objects;
    observer
        .poll_until(
            "every object exact after the failover",
            Duration::from_millis(200),
            timeout,
            |o| o.census().all_converged(desired_total),
        )
        .await?;
    let all_exact_secs = killed.elapsed().as_secs_f64();
    let last_where = |of_dead: bool| {
        latencies
            .iter()
            .zip(&dead)
            .filter(|(_, d)| **d == of_dead)
            .map(|(l, _)| *l)
            .fold(0.0, f64::max)
    };
    Ok(Failover {
        objects: count,
        last_secs: latencies.iter().copied().fold(0.0, f64::max),
        of_dead_replica: dead.iter().filter(|d| **d).count(),
        last_of_dead_replica_secs: last_where(true),
        last_of_others_secs: last_where(false),
        latencies_secs: latencies,
        all_exact_secs,
    })
}

/// The name of object `i`.
pub fn object_name(i: usize) -> String {
    format!("bench-{i:05}")
}

/// Creates the N Jinghzhus, `create_concurrency` at a time and no faster
/// than `create_rate`; returns the requests it made (to take out of the API
/// server's counts).
async fn create_objects(client: &Client, options: &RunOptions) -> Result<Requests> {
    let api: Api<Jinghzhu> = Api::namespaced(client.clone(), NAMESPACE);
    let attempts = std::sync::atomic::AtomicU64::new(0);
    let started = tokio::time::Instant::now();
    futures::stream::iter(0..options.objects)
        .map(|i| {
            let api = api.clone();
            let attempts = &attempts;
            async move {
                if let Some(rate) = options.create_rate.filter(|r| *r > 0.0) {
                    tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / rate))
                        .await;
                }
                let jz = Jinghzhu::new(
                    &object_name(i),
                    JinghzhuSpec {
                        desired: options.pods_per_object,
                        template: None,
                    },
                );
                attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                api.create(&PostParams::default(), &jz)
                    .await
                    .with_context(|| format!("creating Jinghzhu {}", object_name(i)))
            }
        })
        .buffer_unordered(options.create_concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Ok(Requests::from([(
        "POST jinghzhus".to_owned(),
        attempts.into_inner(),
    )]))
}

/// One edit's latencies, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EditLatency {
    /// From the patch until the status shows the new count.
    pub total_ms: f64,
    /// The controller's part of it: the patch until the new pod appeared,
    /// plus its last pod Running and Ready until the status showed it. The
    /// rest is the scheduler's and the simulated kubelet's (kwok's Stage
    /// waits 200 ms plus up to 800 ms at random, which five edits cannot
    /// average out). An edit that makes no pod is all the controller's.
    pub controller_ms: f64,
}

/// When an edit's milestones were first seen by the harness's watches.
struct EditMilestones {
    started: Instant,
    /// A live pod the object did not have before the patch.
    created: Option<Instant>,
    /// Every live pod of the object Running and Ready again (after `created`).
    ready: Option<Instant>,
    done: Instant,
}

impl EditMilestones {
    fn latency(&self) -> EditLatency {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let total = self.done.duration_since(self.started);
        let controller = match (self.created, self.ready) {
            (Some(created), Some(ready)) => {
                created.duration_since(self.started) + self.done.duration_since(ready)
            }
            _ => total,
        };
        EditLatency {
            total_ms: ms(total),
            controller_ms: ms(controller),
        }
    }
}

/// Scales one object at a time by one pod and times each until converged.
async fn time_edits(
    client: &Client,
    observer: &Observer,
    options: &RunOptions,
) -> Result<Vec<EditLatency>> {
    let api: Api<Jinghzhu> = Api::namespaced(client.clone(), NAMESPACE);
    let mut desired: Vec<u32> = vec![options.pods_per_object; options.objects];
    let mut latencies = Vec::with_capacity(options.edits);
    for edit in 0..options.edits {
        let i = edit % options.objects;
        let name = object_name(i);
        let up = desired[i] == options.pods_per_object;
        desired[i] = if up {
            options.pods_per_object + 1
        } else {
            options.pods_per_object
        };
        let uid = observer.uid_of(&name).unwrap_or_default();
        let before: std::collections::HashSet<String> = observer
            .live_pods_of(&uid)
            .into_iter()
            .map(|(pod, _)| pod)
            .collect();
        let patch = serde_json::json!({ "spec": { "desired": desired[i] } });
        let started = Instant::now();
        let patched = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("scaling {name}"))?;
        let generation = patched.metadata.generation.unwrap_or_default();
        let mut created = None;
        let mut ready = None;
        let done = observer
            .wait_event_until(
                &format!("{name} converging at {} pods", desired[i]),
                Duration::from_secs(60),
                |o| {
                    if up && ready.is_none() {
                        let pods = o.live_pods_of(&uid);
                        if created.is_none() && pods.iter().any(|(pod, _)| !before.contains(pod)) {
                            created = Some(Instant::now());
                        }
                        if created.is_some() && pods.iter().all(|(_, r)| *r) {
                            ready = Some(Instant::now());
                        }
                    }
                    o.object_converged(&name, generation)
                },
            )
            .await?;
        latencies.push(
            EditMilestones {
                started,
                created,
                ready,
                done,
            }
            .latency(),
        );
    }
    Ok(latencies)
}

/// How long the garbage collector gets to remove `pods`: 10 minutes, or
/// 50 ms a pod when that is longer (it removed about 70 pods a second here
/// at N = 1000).
pub fn gc_timeout(pods: u64) -> Duration {
    Duration::from_secs(600).max(Duration::from_millis(pods.saturating_mul(50)))
}

/// Deletes every Jinghzhu and times until the garbage collector removed every pod.
async fn time_garbage_collection(
    client: &Client,
    observer: &Observer,
    timeout: Duration,
) -> Result<f64> {
    let api: Api<Jinghzhu> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    delete_every_jinghzhu(&api).await?;
    let done = observer
        .poll_until(
            "garbage collection of every pod",
            Duration::from_millis(50),
            timeout,
            |o| {
                let census = o.census();
                census.objects == 0 && census.pods == 0
            },
        )
        .await?;
    Ok(done.duration_since(started).as_secs_f64())
}

/// One `deletecollection` of every Jinghzhu, sent again while it fails:
/// at N = 10 000 the API server spends longer than its 60 s request
/// timeout on it here and closes the connection, having deleted part of
/// them (each attempt makes progress; the Jinghzhus have no finalizers).
async fn delete_every_jinghzhu(api: &Api<Jinghzhu>) -> Result<()> {
    const ATTEMPTS: u32 = 20;
    let mut attempt = 1;
    loop {
        match api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
        {
            Ok(_) => return Ok(()),
            Err(error) if attempt < ATTEMPTS => {
                eprintln!(
                    "scale-bench: deleting every Jinghzhu, attempt {attempt} of {ATTEMPTS}: {error}; sending it again"
                );
                attempt += 1;
            }
            Err(error) => {
                return Err(anyhow::Error::new(error)
                    .context(format!("deleting every Jinghzhu failed {ATTEMPTS} times")));
            }
        }
    }
}

/// Applies the Jinghzhu CRD and waits until it is established.
pub async fn install_crd(client: &Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Jinghzhu::crd();
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply("scale-bench").force(),
        &Patch::Apply(&crd),
    )
    .await
    .context("installing the Jinghzhu CRD")?;
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, &crd.name_any(), conditions::is_crd_established()),
    )
    .await
    .context("the CRD was not established within 30 s")??;
    Ok(())
}

/// Creates the benchmark namespace and waits for its default
/// ServiceAccount (pods are admitted only once it exists).
async fn create_namespace(client: &Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NAMESPACE.to_owned()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .context("creating the benchmark namespace")?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(60);
    while accounts.get_opt("default").await?.is_none() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the default ServiceAccount of {NAMESPACE} did not appear within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controllers_part_of_an_edit_leaves_out_the_wait_for_the_pod() {
        let started = Instant::now();
        let at = |ms: u64| started + Duration::from_millis(ms);
        let up = EditMilestones {
            started,
            created: Some(at(40)),
            ready: Some(at(900)),
            done: at(960),
        };
        assert_eq!(
            up.latency(),
            EditLatency {
                total_ms: 960.0,
                controller_ms: 100.0
            }
        );
        // No new pod (a scale down): all of it is the controller's.
        let down = EditMilestones {
            started,
            created: None,
            ready: None,
            done: at(70),
        };
        assert_eq!(down.latency().controller_ms, 70.0);
    }

    #[test]
    fn the_garbage_collector_gets_more_time_for_more_pods() {
        assert_eq!(gc_timeout(3000), Duration::from_secs(600));
        assert_eq!(gc_timeout(30_000), Duration::from_secs(1500));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), 2.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
