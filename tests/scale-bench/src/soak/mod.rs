//! The chaos soak (`chaos-soak`, issue 43): three (`--replicas`) host
//! replicas with `--shards` against a fresh local control plane, each
//! through its own fault proxy, N Jinghzhus (desired 1–5) under continuous
//! churn and plugin hot swaps ([`churn`]), faults injected at random from
//! a catalogue ([`catalogue`]), and an online invariant checker
//! ([`invariants`]: duplicates, surplus during scale-up, fencing, final
//! convergence, replica exits) fed by the harness's own watches of pods,
//! Jinghzhus and shard Leases. The run:
//!
//! 1. control plane, CRD, namespace, proxies, replicas (lease 4 s, renew
//!    deadline 3 s, retry 1 s); wait until they are ready and hold every shard;
//! 2. N objects created, wait until every one is exact;
//! 3. for `--duration`: churn, hot swaps and faults together; the census
//!    (every 250 ms) marks exact objects and times each fault's convergence;
//! 4. faults and churn stop; every object must be exact within
//!    [`invariants::Bounds::final_convergence`] of the later of the last
//!    fault's end and the churn's end;
//! 5. the replicas' writes (from their proxies' logs) are checked against
//!    the Leases' history for fencing; the report ([`report`]) is printed
//!    and written as JSON, Markdown and an SVG timeline.
//!
//! [`replicas`] owns the processes and proxies, [`rng`] the seeded choices.

pub mod catalogue;
pub mod churn;
pub mod invariants;
pub mod replicas;
pub mod report;
pub mod rng;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use local_control_plane::{ControlPlane, ControlPlaneOptions};
use wasm_operator::crd::Jinghzhu;

use crate::artifacts::{self, Profile};
use crate::controllers::{self, ControllerKind};
use catalogue::{FaultKind, FaultRecord};
use churn::{Churn, Plugins};
use invariants::{Bounds, Checker, LeaseSeen, PodView, Violation};
use replicas::{LeaseTiming, ReplicaSlot, ReplicaSpec};
use rng::Rng;

/// The namespace of the soak's objects and Leases.
pub const NAMESPACE: &str = "chaos-soak";

/// The documented bounds (see [`invariants`]).
pub fn default_bounds(lease: &LeaseTiming) -> Bounds {
    Bounds {
        surplus: 0,
        fence_window: Duration::from_secs(lease.duration_secs),
        final_convergence: Duration::from_secs(60),
    }
}

/// How to run a soak.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// N, the objects kept alive (churn creates and deletes around it).
    pub objects: usize,
    /// How long faults and churn run.
    pub duration: Duration,
    /// Seeds every random choice.
    pub seed: u64,
    /// Host replicas.
    pub replicas: u32,
    /// `--shards`.
    pub shards: u32,
    /// `--workers` of each replica.
    pub workers: u16,
    /// A fault starts about this often.
    pub fault_interval: Duration,
    /// Only these kinds (empty: the whole catalogue).
    pub only_faults: Vec<FaultKind>,
    /// Churn changes a second.
    pub churn_per_sec: f64,
    /// A plugin hot swap this often.
    pub swap_interval: Duration,
    /// Lease timing of the replicas.
    pub lease: LeaseTiming,
    /// The invariants' bounds.
    pub bounds: Bounds,
    /// Where the report and the logs go.
    pub results_dir: PathBuf,
    /// The host's cargo profile.
    pub profile: Profile,
    /// A deliberately broken run: the harness itself adds a pod to a few
    /// exact objects, which the checker must report.
    pub sabotage: bool,
    /// The command line, for the report.
    pub command: String,
}

/// Seconds since the soak started, from an `Instant` or a wall-clock time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    wall_start_us: i64,
}

impl Clock {
    fn now() -> Self {
        Self {
            start: Instant::now(),
            wall_start_us: k8s_openapi::jiff::Timestamp::now().as_microsecond(),
        }
    }

    /// Seconds from the start to `at`.
    pub fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64()
    }

    /// Seconds from the start to the wall-clock time `at` (negative before).
    pub fn wall_secs(&self, at: &k8s_openapi::jiff::Timestamp) -> f64 {
        (at.as_microsecond() - self.wall_start_us) as f64 / 1e6
    }

    /// The wall-clock time (UTC, as the hosts' logs print it) `secs` after the start.
    pub fn wall(&self, secs: f64) -> String {
        let us = self.wall_start_us + (secs * 1e6) as i64;
        k8s_openapi::jiff::Timestamp::from_microsecond(us)
            .map(|t| t.to_string())
            .unwrap_or_default()
    }
}

/// A fault that ended, waiting for the objects not exact then.
#[derive(Debug)]
struct Pending {
    fault: usize,
    ended_secs: f64,
    /// `None` until the next census fills it.
    waiting: Option<HashMap<String, i64>>,
}

/// One point of the timeline plot.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sample {
    /// Seconds since the start.
    pub at_secs: f64,
    /// Objects.
    pub objects: usize,
    /// Objects not exact.
    pub not_exact: usize,
}

/// What the harness's tasks share.
#[derive(Debug, Default)]
pub struct State {
    /// The invariants.
    pub checker: Checker,
    /// Every fault so far.
    pub faults: Vec<FaultRecord>,
    pending: Vec<Pending>,
    /// Each shard's Lease as seen.
    pub leases: BTreeMap<u32, Vec<LeaseSeen>>,
    /// When the harness's Lease watch was down (seconds since the start):
    /// Lease versions written then may never have been seen.
    pub lease_gaps: Vec<(f64, f64)>,
    /// Object name → UID.
    pub uids: HashMap<String, String>,
    /// Objects not exact at the last census, with their generation.
    unexact: HashMap<String, i64>,
    /// Objects at the last census.
    objects_now: usize,
    /// The census, about once a second.
    pub timeline: Vec<Sample>,
    /// How long each SIGTERM took to stop a replica, seconds.
    pub stop_times_secs: Vec<f64>,
}

impl State {
    fn fault_started(&mut self, kind: FaultKind, at_secs: f64) -> usize {
        self.faults.push(FaultRecord {
            kind,
            detail: String::new(),
            start_secs: at_secs,
            end_secs: f64::NAN,
            convergence_secs: None,
            error: None,
        });
        self.faults.len() - 1
    }

    fn fault_ended(&mut self, index: usize, detail: String, error: Option<String>, at: f64) {
        if let Some(fault) = self.faults.get_mut(index) {
            fault.detail = detail;
            fault.error = error;
            fault.end_secs = at;
        }
        self.pending.push(Pending {
            fault: index,
            ended_secs: at,
            waiting: None,
        });
    }

    /// Marks exact objects, times the faults' convergence, samples the timeline.
    fn census(&mut self, jinghzhus: &[Arc<Jinghzhu>], now_secs: f64) {
        let mut unexact = HashMap::new();
        for jz in jinghzhus {
            let name = jz.name_any();
            if let Some(uid) = &jz.metadata.uid {
                self.uids.insert(name.clone(), uid.clone());
            }
            let live = self.checker.live_pods(&name);
            if crate::observe::converged(jz, &live) {
                self.checker.exact(&name, jz.spec.desired);
            } else {
                unexact.insert(name, jz.metadata.generation.unwrap_or_default());
            }
        }
        let present: std::collections::HashSet<String> =
            jinghzhus.iter().map(|jz| jz.name_any()).collect();
        let faults = &mut self.faults;
        self.pending.retain_mut(|p| {
            let waiting = p.waiting.get_or_insert_with(|| unexact.clone());
            // Done with an object once it is exact or gone (one exact
            // between two censuses and edited again counts as waiting).
            waiting.retain(|name, _| present.contains(name) && unexact.contains_key(name));
            if waiting.is_empty() {
                if let Some(fault) = faults.get_mut(p.fault) {
                    fault.convergence_secs = Some(now_secs - p.ended_secs);
                }
                return false;
            }
            true
        });
        self.objects_now = jinghzhus.len();
        if self
            .timeline
            .last()
            .is_none_or(|s| now_secs - s.at_secs >= 1.0)
        {
            self.timeline.push(Sample {
                at_secs: now_secs,
                objects: jinghzhus.len(),
                not_exact: unexact.len(),
            });
        }
        self.unexact = unexact;
    }
}

/// The harness's shared context.
pub struct Ctx {
    state: Mutex<State>,
    /// Seconds since the start.
    pub clock: Clock,
    /// The replicas.
    pub slots: Vec<Arc<tokio::sync::Mutex<ReplicaSlot>>>,
    /// How replicas are (re)started.
    pub spec: ReplicaSpec,
    /// The control plane.
    pub cp: Arc<ControlPlane>,
    /// The plugin builds the churn swaps.
    pub plugins: Plugins,
    /// N.
    pub objects: usize,
    /// Held while a replica is killed, stopped or terminated.
    pub process_fault: tokio::sync::Mutex<()>,
    /// Held while the API server or etcd is disturbed.
    pub control_plane_fault: tokio::sync::Mutex<()>,
    /// One per replica proxy, held while it injects.
    pub proxy_faults: Vec<Arc<tokio::sync::Mutex<()>>>,
}

impl Ctx {
    /// The shared state (a poisoned lock is taken over: the data is counters).
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs a soak and returns its report (written to `results_dir` too).
pub async fn run(options: &SoakOptions) -> Result<report::SoakReport> {
    let started_at = k8s_openapi::jiff::Timestamp::now().to_string();
    let built = build(options)?;
    let plugins = Plugins {
        path: churn::plugin_path(&options.results_dir),
        builds: [
            std::fs::read(artifacts::replicaset_plugin()?)?,
            std::fs::read(
                wasm_artifacts::try_build(
                    "replicaset-plugin",
                    &["v2"],
                    wasm_artifacts::Toolchain::Wasip2,
                )
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            )?,
        ],
    };
    if let Some(dir) = plugins.path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    plugins.install(0)?;
    let mut built = built;
    built.leading_args = vec![
        "run".to_owned(),
        "--plugin".to_owned(),
        plugins.path.display().to_string(),
    ];
    eprintln!("chaos-soak: starting a local control plane");
    let cp = Arc::new(
        tokio::task::spawn_blocking(|| ControlPlane::start_with(ControlPlaneOptions::default()))
            .await??,
    );
    let result = run_on(options, &cp, built, plugins, started_at).await;
    tokio::task::spawn_blocking(move || drop(cp)).await?;
    result
}

/// Builds the host and copies its executable into the results directory
/// (`bin/`): every replica, restarts included, runs that copy, so a build
/// into the shared target directory during the soak (another test, another
/// checkout's edit) cannot change the host under test half-way (it did
/// once: replicas restarted in the middle of a run executed a rebuilt
/// binary).
fn build(options: &SoakOptions) -> Result<controllers::Built> {
    if options.replicas < 1 || options.shards < options.replicas {
        bail!("need at least one replica and as many shards as replicas");
    }
    let mut built = controllers::build(ControllerKind::Host, options.profile)?;
    let dir = options.results_dir.join("bin");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let copy = dir.join("wasm-operator");
    let _ = std::fs::remove_file(&copy);
    std::fs::copy(&built.program, &copy)
        .with_context(|| format!("copying {} to {}", built.program.display(), copy.display()))?;
    eprintln!(
        "chaos-soak: the host under test: {} (copied from {})",
        copy.display(),
        built.program.display()
    );
    // The compile helper the host starts sits beside it, copied too.
    let helper = built.program.with_file_name("wasm-operator-compile");
    let helper_copy = dir.join("wasm-operator-compile");
    let _ = std::fs::remove_file(&helper_copy);
    std::fs::copy(&helper, &helper_copy)
        .with_context(|| format!("copying {} to {}", helper.display(), helper_copy.display()))?;
    built.program = copy;
    Ok(built)
}

async fn run_on(
    options: &SoakOptions,
    cp: &Arc<ControlPlane>,
    built: controllers::Built,
    plugins: Plugins,
    started_at: String,
) -> Result<report::SoakReport> {
    let client = cp.client().await?;
    crate::scenario::install_crd(&client).await?;
    create_namespace(&client).await?;
    let clock = Clock::now();
    let log_dir = options.results_dir.join("logs");
    let _ = std::fs::remove_dir_all(&log_dir);
    let spec = ReplicaSpec {
        built,
        namespace: NAMESPACE.to_owned(),
        shards: options.shards,
        workers: options.workers,
        lease: options.lease,
        log_dir,
    };
    let upstream = e2e_tests::faults::ApiProxy::upstream_client(cp).await?;
    let mut slots = Vec::new();
    for i in 0..options.replicas {
        let mut slot = ReplicaSlot::new(i, upstream.clone(), &spec).await?;
        slot.start(&spec)?;
        slots.push(Arc::new(tokio::sync::Mutex::new(slot)));
    }
    let ctx = Arc::new(Ctx {
        state: Mutex::new(State {
            checker: Checker::new(&options.bounds),
            ..State::default()
        }),
        clock,
        proxy_faults: (0..slots.len())
            .map(|_| Arc::new(tokio::sync::Mutex::new(())))
            .collect(),
        slots,
        spec,
        cp: cp.clone(),
        plugins,
        objects: options.objects,
        process_fault: tokio::sync::Mutex::new(()),
        control_plane_fault: tokio::sync::Mutex::new(()),
    });
    let watches = Watches::start(&client, ctx.clone()).await?;
    let outcome = phases(options, &ctx, &client, &watches).await;
    watches.stop();
    let writes = report::collect_writes(&ctx).await;
    if let Err(err) = report::write_evidence(&ctx, &writes, &ctx.spec.log_dir) {
        eprintln!("chaos-soak: writing the writes' and Leases' logs: {err:#}");
    }
    let mut tails = String::new();
    for slot in &ctx.slots {
        let mut slot = slot.lock().await;
        if outcome.is_err() {
            tails += &format!(
                "\n--- the end of replica {} ({:?}):\n{}",
                slot.index,
                slot.log_path(),
                slot.log_tail(20)
            );
        }
        slot.signal_pause(false);
        if let Some(running) = slot.running.take() {
            tokio::task::spawn_blocking(move || running.stop(Duration::from_secs(10))).await?;
        }
    }
    let (churn_counts, timings) = outcome.with_context(|| format!("the soak failed{tails}"))?;
    let report = report::assemble(options, &ctx, &writes, churn_counts, timings, started_at);
    let written = report::write(&report, &options.results_dir)?;
    eprintln!("{}", report::text(&report));
    eprintln!("chaos-soak: wrote {}", written.display());
    Ok(report)
}

/// How long the phases took, seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Timings {
    /// Replicas started → ready and every shard held.
    pub replicas_ready_secs: f64,
    /// The N creates → every object exact.
    pub initial_convergence_secs: f64,
    /// Faults and churn.
    pub chaos_secs: f64,
    /// The later of the last fault's end and the churn's end → every object exact
    /// (`None`: not within the bound).
    pub final_convergence_secs: Option<f64>,
    /// The whole soak, control plane start to report.
    pub total_secs: f64,
}

async fn phases(
    options: &SoakOptions,
    ctx: &Arc<Ctx>,
    client: &Client,
    watches: &Watches,
) -> Result<(churn::ChurnCounts, Timings)> {
    let mut timings = Timings::default();
    let mut rng = Rng::new(options.seed);
    let started = Instant::now();
    wait_for_replicas(ctx, options.shards).await?;
    timings.replicas_ready_secs = started.elapsed().as_secs_f64();
    eprintln!(
        "chaos-soak: {} replicas ready and holding all {} shards after {:.1} s",
        ctx.slots.len(),
        options.shards,
        timings.replicas_ready_secs
    );
    let mut churn = Churn::new(client.clone(), NAMESPACE);
    let created = Instant::now();
    churn.create_initial(ctx, options.objects, &mut rng).await?;
    let initial_timeout = Duration::from_secs(120 + options.objects as u64 / 5);
    watches
        .wait_all_exact(ctx, options.objects, initial_timeout)
        .await
        .context("the initial objects did not converge")?;
    timings.initial_convergence_secs = created.elapsed().as_secs_f64();
    eprintln!(
        "chaos-soak: {} objects exact after {:.1} s; chaos for {:?}",
        options.objects, timings.initial_convergence_secs, options.duration
    );
    if options.sabotage {
        sabotage(ctx, client, &churn).await?;
    }
    let chaos = Instant::now();
    let until = chaos + options.duration;
    let monitor = tokio::spawn(monitor_exits(ctx.clone()));
    let faults = tokio::spawn(catalogue::inject_until(
        ctx.clone(),
        rng.fork(),
        options.fault_interval,
        until,
        options.only_faults.clone(),
    ));
    churn
        .run_until(
            ctx.clone(),
            rng.fork(),
            options.churn_per_sec,
            options.swap_interval,
            until,
        )
        .await;
    faults.await?;
    let quiet = Instant::now();
    timings.chaos_secs = chaos.elapsed().as_secs_f64();
    eprintln!(
        "chaos-soak: faults and churn over after {:.1} s; waiting for every object to be exact",
        timings.chaos_secs
    );
    let bound = options.bounds.final_convergence;
    match watches.wait_all_exact(ctx, 0, bound).await {
        Ok(()) => timings.final_convergence_secs = Some(quiet.elapsed().as_secs_f64()),
        Err(_) => {
            let mut state = ctx.state();
            let mut objects: Vec<String> = state.unexact.keys().cloned().collect();
            objects.sort();
            state.checker.violations.push(Violation::NotConverged {
                after_secs: bound.as_secs_f64(),
                objects,
            });
        }
    }
    monitor.abort();
    // The exit check once more, now that no fault is running.
    check_exits(ctx).await;
    timings.total_secs = ctx.clock.secs(Instant::now());
    Ok((churn.counts, timings))
}

/// Waits until the replicas are ready and hold every shard between them.
async fn wait_for_replicas(ctx: &Ctx, shards: u32) -> Result<()> {
    for slot in &ctx.slots {
        let mut slot = slot.lock().await;
        if let Some(running) = slot.running.as_mut() {
            running.wait_ready(Duration::from_secs(180)).await?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut held = std::collections::BTreeSet::new();
        for slot in &ctx.slots {
            let mut slot = slot.lock().await;
            if let Some(running) = slot.running.as_mut() {
                held.extend(running.held_shards().await.unwrap_or_default());
            }
        }
        if held.len() as u32 >= shards {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the replicas hold {held:?} of {shards} shards after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every 500 ms: a replica that exited without the harness asking is a
/// violation (with the end of its log), and is started again.
async fn monitor_exits(ctx: Arc<Ctx>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        check_exits(&ctx).await;
    }
}

async fn check_exits(ctx: &Ctx) {
    for slot in &ctx.slots {
        // Busy: a fault has it (a kill or SIGTERM is the harness's).
        let Ok(mut slot) = slot.try_lock() else {
            continue;
        };
        if slot.paused {
            continue;
        }
        let Some(what) = slot.exited_unasked() else {
            continue;
        };
        let at_secs = ctx.clock.secs(Instant::now());
        eprintln!(
            "chaos-soak: replica {} exited on its own: {what}",
            slot.index
        );
        ctx.state().checker.violations.push(Violation::ReplicaExit {
            at_secs,
            replica: slot.index,
            what,
        });
        if let Err(err) = slot.start(&ctx.spec) {
            eprintln!("chaos-soak: restarting replica {}: {err:#}", slot.index);
        }
    }
}

/// The broken run: a pod of the harness's own, controlled by each of three
/// exact objects (created directly, as a second controller's would be).
async fn sabotage(ctx: &Ctx, client: &Client, churn: &Churn) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for (name, _) in churn.alive.iter().take(3) {
        let uid = ctx
            .state()
            .uids
            .get(name)
            .cloned()
            .context("no UID for a sabotaged object")?;
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("{name}-sabotage"),
                "ownerReferences": [{
                    "apiVersion": "jinghzhu.io/v1", "kind": "Jinghzhu", "name": name,
                    "uid": uid, "controller": true,
                }],
            },
            "spec": { "containers": [{ "name": "c", "image": "busybox" }] },
        }))?;
        pods.create(&Default::default(), &pod).await?;
    }
    eprintln!("chaos-soak: sabotage: one extra pod made for each of 3 objects");
    Ok(())
}

async fn create_namespace(client: &Client) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": NAMESPACE } }))?;
    api.create(&Default::default(), &ns)
        .await
        .context("creating the soak's namespace")?;
    // Pods are admitted once the namespace's default ServiceAccount exists.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(60);
    while accounts.get_opt("default").await?.is_none() {
        if Instant::now() > deadline {
            bail!("no default ServiceAccount in {NAMESPACE} after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The harness's watches and census (their tasks end on [`Watches::stop`]).
struct Watches {
    jinghzhus: Store<Jinghzhu>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watches {
    async fn start(client: &Client, ctx: Arc<Ctx>) -> Result<Self> {
        let (jinghzhus, writer) = reflector::store();
        let jz_stream = watcher(
            Api::<Jinghzhu>::namespaced(client.clone(), NAMESPACE),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|jz: &mut Jinghzhu| jz.managed_fields_mut().clear())
        .reflect(writer);
        let mut tasks = vec![tokio::spawn(async move {
            let mut stream = std::pin::pin!(jz_stream);
            while stream.next().await.is_some() {}
        })];
        tasks.push(tokio::spawn(watch_pods(client.clone(), ctx.clone())));
        tasks.push(tokio::spawn(watch_leases(client.clone(), ctx.clone())));
        let store = jinghzhus.clone();
        let census_ctx = ctx.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let objects = store.state();
                let now = census_ctx.clock.secs(Instant::now());
                census_ctx.state().census(&objects, now);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }));
        tokio::time::timeout(Duration::from_secs(60), jinghzhus.wait_until_ready())
            .await
            .context("the harness's Jinghzhu watch did not list within 60 s")??;
        Ok(Self { jinghzhus, tasks })
    }

    /// Waits until at least `objects` Jinghzhus exist and all are exact.
    async fn wait_all_exact(&self, ctx: &Ctx, objects: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        // Two censuses after now, so the state is not older than the call.
        tokio::time::sleep(Duration::from_millis(600)).await;
        loop {
            {
                let state = ctx.state();
                if state.unexact.is_empty()
                    && state.objects_now >= objects
                    && self.jinghzhus.state().len() >= objects
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                let state = ctx.state();
                bail!(
                    "{} of {} objects not exact after {timeout:?}",
                    state.unexact.len(),
                    state.objects_now
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn stop(self) {
        for task in self.tasks {
            task.abort();
        }
    }
}

/// The pod watch, event by event, into the checker.
async fn watch_pods(client: Client, ctx: Arc<Ctx>) {
    let stream = watcher(
        Api::<Pod>::namespaced(client, NAMESPACE),
        watcher::Config::default(),
    )
    .default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut relist: Option<Vec<PodView>> = None;
    while let Some(event) = stream.next().await {
        let Ok(event) = event else { continue };
        let now = ctx.clock.secs(Instant::now());
        match event {
            watcher::Event::Apply(pod) => ctx.state().checker.pod_applied(&view(&pod), now),
            watcher::Event::Delete(pod) => ctx.state().checker.pod_removed(&pod.name_any()),
            watcher::Event::Init => relist = Some(Vec::new()),
            watcher::Event::InitApply(pod) => {
                relist.get_or_insert_with(Vec::new).push(view(&pod));
            }
            watcher::Event::InitDone => {
                let pods = relist.take().unwrap_or_default();
                ctx.state().checker.relisted(&pods, now);
            }
        }
    }
}

fn view(pod: &Pod) -> PodView {
    PodView {
        name: pod.name_any(),
        owner: pod
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == "Jinghzhu")
            .map(|o| o.name.clone()),
        live: wasm_operator::observed::is_live(pod),
    }
}

/// The shard Leases' history (`<prefix>-shard-NN`), and when the watch
/// was down: from its last event before an error or a relist to the end
/// of the relist (a watch resumed at its resourceVersion replays what it
/// missed, so that is no gap).
async fn watch_leases(client: Client, ctx: Arc<Ctx>) {
    let stream = watcher(
        Api::<Lease>::namespaced(client, NAMESPACE),
        watcher::Config::default(),
    )
    .default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut last_event = 0.0;
    let mut down_since: Option<f64> = None;
    let mut relisting = false;
    while let Some(event) = stream.next().await {
        let now = ctx.clock.secs(Instant::now());
        let lease = match event {
            Err(_) => {
                down_since.get_or_insert(last_event);
                continue;
            }
            Ok(watcher::Event::Init) => {
                down_since.get_or_insert(last_event);
                relisting = true;
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(from) = down_since.take() {
                    ctx.state().lease_gaps.push((from, now));
                }
                relisting = false;
                continue;
            }
            Ok(watcher::Event::Delete(_)) => continue,
            Ok(watcher::Event::InitApply(lease)) => lease,
            Ok(watcher::Event::Apply(lease)) => {
                if !relisting {
                    // Resumed at its resourceVersion: nothing was missed.
                    down_since = None;
                }
                lease
            }
        };
        last_event = now;
        let Some(shard) = lease
            .name_any()
            .rsplit_once("-shard-")
            .and_then(|(_, n)| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(spec) = lease.spec else { continue };
        let wall = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
            t.as_ref()
                .map(|t| ctx.clock.wall_secs(&t.0))
                .unwrap_or(f64::NEG_INFINITY)
        };
        let seen = LeaseSeen {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            acquired_secs: wall(&spec.acquire_time),
            renewed_secs: wall(&spec.renew_time),
            duration_secs: f64::from(spec.lease_duration_seconds.unwrap_or(0)),
        };
        ctx.state().leases.entry(shard).or_default().push(seen);
    }
}
