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
//! 5. garbage collection: every Jinghzhu deleted at once, timed until the
//!    last pod is gone.

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

use crate::apiserver::{self, Requests};
use crate::controllers::{Built, ControllerKind, Running};
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
    /// Creates in flight at once while creating the N objects.
    pub create_concurrency: usize,
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
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The controller.
    pub controller: ControllerKind,
    /// N.
    pub objects: usize,
    /// P.
    pub pods_per_object: u32,
    /// `--workers`.
    pub workers: u16,
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
    /// Delete all Jinghzhus → no pod left, seconds.
    pub gc_secs: f64,
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
    let cp =
        tokio::task::spawn_blocking(|| ControlPlane::start_with(ControlPlaneOptions::default()))
            .await
            .context("control plane start task")??;
    let client = cp.client().await?;
    install_crd(&client).await?;
    let crd_established = Instant::now();
    create_namespace(&client).await?;
    let observer = Observer::start(&client, NAMESPACE).await?;

    std::fs::create_dir_all(&options.log_dir)?;
    let mut controller = Running::start(
        built,
        cp.kubeconfig_path(),
        NAMESPACE,
        options.workers,
        &options.log_dir,
    )?;
    let mut others = cp.pids();
    others.push(("scale-bench".to_owned(), std::process::id()));
    let result = measure(
        &client,
        &observer,
        &mut controller,
        options,
        load_at_start,
        crd_established,
        &others,
    )
    .await;
    let result = result.with_context(|| {
        format!(
            "{} run with N={} failed; the end of its log ({}):\n{}",
            controller.kind,
            options.objects,
            controller.log.display(),
            controller.log_tail(20)
        )
    });
    controller.stop(Duration::from_secs(10));
    drop(observer);
    tokio::task::spawn_blocking(move || drop(cp)).await?;
    result
}

async fn measure(
    client: &Client,
    observer: &Observer,
    controller: &mut Running,
    options: &RunOptions,
    load_at_start: (f64, usize),
    crd_established: Instant,
    others: &[(String, u32)],
) -> Result<RunResult> {
    let pid = controller.pid();
    controller.wait_ready(Duration::from_secs(120)).await?;
    tokio::time::sleep(options.settle).await;
    let rss_idle = procstat::memory(pid)?.rss;

    // 2. Convergence.
    let reconciles_before = controller.reconciles().await?;
    let requests_before = apiserver::snapshot(client).await?;
    let cpu_before = procstat::cpu_seconds(pid)?;
    let others_before = procstat::cpu_seconds_by_name(others);
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
    let cpu_converged = procstat::cpu_seconds(pid)?;
    let cpu_others_converge_secs =
        procstat::cpu_difference(&others_before, &procstat::cpu_seconds_by_name(others));
    let memory = procstat::memory(pid)?;
    let requests_after = apiserver::snapshot(client).await?;
    let reconciles_converged = controller.reconciles().await?;
    let all_requests = apiserver::without(
        &apiserver::diff(&requests_before, &requests_after),
        &own_requests,
    );
    let requests = apiserver::on_controller_resources(&all_requests);
    let other_requests = all_requests.values().sum::<u64>() - requests.values().sum::<u64>();
    eprintln!(
        "scale-bench: {} converged N={} in {converge_secs:.2} s",
        controller.kind, options.objects
    );

    // 3. Quiet.
    let quiet_started = Instant::now();
    tokio::time::sleep(options.idle).await;
    let idle_secs = quiet_started.elapsed().as_secs_f64();
    let reconciles_idle = controller.reconciles().await? - reconciles_converged;
    let cpu_idle_secs = procstat::cpu_seconds(pid)? - cpu_converged;

    // 4. Edits.
    let edit_latencies_ms = time_edits(client, observer, options).await?;

    // 5. Garbage collection.
    tokio::time::sleep_until((crd_established + GC_DISCOVERY_WAIT).into()).await;
    let pods = options.objects as u64 * u64::from(options.pods_per_object);
    let gc_secs = time_garbage_collection(client, observer, gc_timeout(pods)).await?;
    controller.check_alive()?;

    Ok(RunResult {
        controller: controller.kind,
        objects: options.objects,
        pods_per_object: options.pods_per_object,
        workers: options.workers,
        load_at_start,
        converge_secs,
        writes: apiserver::writes(&requests),
        reads: apiserver::reads(&requests),
        requests,
        other_requests,
        cpu_converge_secs: cpu_converged - cpu_before,
        cpu_others_converge_secs,
        cpu_idle_secs,
        rss_idle_mib: mib(rss_idle),
        rss_converged_mib: mib(memory.rss),
        rss_converged_anon_mib: mib(memory.anon),
        rss_converged_file_mib: mib(memory.file),
        rss_peak_mib: mib(memory.peak),
        reconciles_converge: reconciles_converged - reconciles_before,
        reconciles_idle,
        idle_secs,
        edit_p50_ms: percentile(&edit_latencies_ms, 50.0),
        edit_p99_ms: percentile(&edit_latencies_ms, 99.0),
        edit_latencies_ms,
        gc_secs,
    })
}

/// The name of object `i`.
pub fn object_name(i: usize) -> String {
    format!("bench-{i:05}")
}

/// Creates the N Jinghzhus, `create_concurrency` at a time; returns the
/// requests it made (to take out of the API server's counts).
async fn create_objects(client: &Client, options: &RunOptions) -> Result<Requests> {
    let api: Api<Jinghzhu> = Api::namespaced(client.clone(), NAMESPACE);
    let attempts = std::sync::atomic::AtomicU64::new(0);
    futures::stream::iter(0..options.objects)
        .map(|i| {
            let api = api.clone();
            let attempts = &attempts;
            async move {
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

/// Scales one object at a time by one pod and times each until converged.
async fn time_edits(
    client: &Client,
    observer: &Observer,
    options: &RunOptions,
) -> Result<Vec<f64>> {
    let api: Api<Jinghzhu> = Api::namespaced(client.clone(), NAMESPACE);
    let mut desired: Vec<u32> = vec![options.pods_per_object; options.objects];
    let mut latencies = Vec::with_capacity(options.edits);
    for edit in 0..options.edits {
        let i = edit % options.objects;
        let name = object_name(i);
        desired[i] = if desired[i] == options.pods_per_object {
            options.pods_per_object + 1
        } else {
            options.pods_per_object
        };
        let patch = serde_json::json!({ "spec": { "desired": desired[i] } });
        let started = Instant::now();
        let patched = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("scaling {name}"))?;
        let generation = patched.metadata.generation.unwrap_or_default();
        let done = observer
            .wait_event_until(
                &format!("{name} converging at {} pods", desired[i]),
                Duration::from_secs(60),
                |o| o.object_converged(&name, generation),
            )
            .await?;
        latencies.push(done.duration_since(started).as_secs_f64() * 1000.0);
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

async fn install_crd(client: &Client) -> Result<()> {
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
