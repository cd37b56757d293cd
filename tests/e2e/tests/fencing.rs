//! Fencing, end to end: a replica stopped (SIGSTOP) well past its lease
//! while it writes, and resumed (SIGCONT) after another replica took over,
//! sends no write after its lease ran out on its own clock.
//!
//! Two `wasm-operator` binaries run as the Deployment runs them (processes
//! with its environment and the plugin ConfigMap), each talking to the API
//! server through its own fault proxy (`e2e_tests::faults::ApiProxy`, in
//! this test process, which is never stopped), so every request replica A
//! sends is seen and timestamped on arrival by A's proxy. A's proxy holds
//! each request 300 ms, so when A is stopped in the middle of scaling, some
//! of its creates are on the wire and their answers wait in its sockets
//! when it resumes — the moment a reconcile could send its next write
//! before the term-end timer cancels it. Leases: 4 s, renew deadline 3 s,
//! retry 1 s.
//!
//! The bound, from A's proxy log alone: A's hold is valid until `t + renew
//! deadline` on A's monotonic clock, where `t` is when A *sent* its last
//! successful renewal (the leader dates it from the start of the renewal
//! attempt, before the read that precedes the write; a shard from the
//! moment the write is handed to the client). That renewal's write arrived
//! at the proxy at `r >= t` (and the proxy's clock runs at the rate of A's:
//! the same machine's CLOCK_MONOTONIC). So A's hold ran out by `r + renew
//! deadline`, and a write arriving after that was sent after the hold ran
//! out — not merely in flight when it did, since a write sent before it
//! arrives within loopback latency, well under the 250 ms of slack the
//! count leaves (A is stopped for 8 s, so every write it makes after
//! resuming arrives seconds after the bound). `r` is the arrival of A's last
//! renewal (a `PUT` of its Lease answered 200) before A *resumed* (one
//! arriving while A was stopped was sent before the stop); for shards, the
//! latest such renewal of any shard Lease (every hold ran out by then +
//! renew deadline). A resumed replica may renew a Lease nobody took
//! meanwhile (the renewal carries the resourceVersion it read) and then
//! holds it again: a write is legitimate from the moment the first answer
//! to such a renewal can have reached A, its arrival at the proxy + the
//! proxy's 300 ms hold. (Before, any renewal arriving after the stop
//! counted, from its arrival: one sent before the stop and delivered late
//! excused everything after it, and a write was excused before A could
//! know its renewal had succeeded; both made the count too lenient, never
//! too strict.) The count must be 0, and every object must converge with
//! exact counts; when it is not 0 the failure prints every time from A's
//! resuming (the bound, the renewals, the late writes) and A's log.
//!
//! What it shows and what it does not (docs/replicas.md, "Fencing"): with
//! the fence on, the leader case passes and A's reconciles that reach a
//! write after the lapse are refused (`wasm_operator_fenced_writes_total`,
//! 5 and 8 in two runs). With the fence switched off it passed too (7 of 7
//! runs): there the term-end timer cancels those reconciles in the same
//! poll, before tower's request buffer hands the write to the connection
//! (the buffer drops a request whose caller went away). The fence removes
//! the dependence on that ordering; this test guards the guarantee, the
//! unit tests of `apply::fence` the check itself.
//!
//! The sharded case adds a write no timer cancels: while A is stopped, one
//! of its objects is relabelled into A's other shard, and A fixes the label
//! when it resumes. With the fence switched off (a local switch, not in the
//! tree) it failed in 2 of 7 runs here (3 of 4 in its author's): the
//! label-fix `PATCH` arrived 14 ms and 1 ms after A resumed, 7.6 s and
//! 5.2 s after the bound, 1.6 s and 1.7 s before A could have held a shard
//! again; in the other runs A
//! sent no label fix between the bound and holding a shard again (not
//! investigated further: the case catches the missing fence about one run
//! in three, never falsely). With the
//! fence on it passed in 7 of 7 runs (5 with the switch compiled in
//! but off, 2 without it; about 25-35 s each). An earlier 1 of 10 fenced
//! failure (a label fix after the bound, logs not kept) was not
//! reproduced; what was found on the way: the labeller wrote shard labels
//! for held shards with no fence at all (now each passes the shard's hold
//! right before it is sent), and the label fix was decided on the copy the
//! reconcile was queued with rather than the cached one (now the cached
//! one, fenced on the shard it is labelled with).
//!
//! Because that timer hides a missing fence most of the time, the last
//! test takes it away: `apply` itself, for a real object through a proxy
//! that holds each request 2 s, under a hold that runs out while the create
//! is on the wire. The create's answer arrives and the status patch must
//! not be sent. With the fence switched off (a local switch) it failed:
//! the patch was sent and nothing counted as fenced (nothing races the
//! write here, so that does not depend on timing).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use axum::http::Method;
use e2e_tests::deploy::{Installed, Kustomization, ProcessHost, host_binary, install};
use e2e_tests::faults::{ApiProxy, Seen};
use e2e_tests::{TestEnv, plugin};
use futures::future::try_join_all;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use wasm_operator::actions::ProposedActions;
use wasm_operator::apply::expectations::Expectations;
use wasm_operator::apply::fence::{Hold, Validity, WriteFence};
use wasm_operator::apply::own_writes::OwnWrites;
use wasm_operator::apply::policy::{PodPolicy, PolicyConfig};
use wasm_operator::apply::{Applied, ApplyError, Target, apply, status_change, validate};
use wasm_operator::ownership::SHARD_LABEL;
use wasm_operator::telemetry::events::EventSink;
use wasm_operator::telemetry::metrics::{FencedLabels, Metrics};

/// One test at a time (each stops a process for seconds).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const LEASE: &str = "4s";
const RENEW: &str = "3s";
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY: &str = "1s";
/// How long A is stopped: twice the lease.
const STOPPED: Duration = Duration::from_secs(8);
/// How long A is stopped first, while the answers to its writes arrive.
const PILE_UP: Duration = Duration::from_millis(500);
/// How long A then runs before it is stopped past its lease.
const FLICKER: Duration = Duration::from_millis(2);
/// How long each of A's requests is held at its proxy.
const LATENCY: Duration = Duration::from_millis(300);
/// Loopback delivery and the proxy's own scheduling (see the module docs).
const SLACK: Duration = Duration::from_millis(250);
const OBJECTS: usize = 10;
const DESIRED: u32 = 24;
const CONVERGE: Duration = Duration::from_secs(90);

fn replicaset() -> std::path::PathBuf {
    plugin("replicaset-plugin", &[])
}

/// A kubeconfig (in `dir`) that reaches the API server through `proxy`.
fn kubeconfig_through(
    proxy: &ApiProxy,
    namespace: &str,
    dir: &std::path::Path,
    name: &str,
) -> Result<std::path::PathBuf> {
    let server = proxy.host_config(namespace)?.cluster_url.to_string();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: {server}\n\
         users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    \
         user: proxy\n    namespace: {namespace}\ncurrent-context: proxy\n"
    );
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A write for an object: a pod create or delete, or any change to a
/// Jinghzhu (status, labels). Events and Leases are not counted.
fn is_object_write(seen: &Seen) -> bool {
    let write = matches!(
        seen.method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let pods = seen.path.ends_with("/pods") || seen.path.contains("/pods/");
    write && (pods || seen.path.contains("/jinghzhus"))
}

/// A successful renewal of a Lease whose name starts with `lease_prefix`.
fn is_renewal(seen: &Seen, lease_prefix: &str) -> bool {
    seen.method == Method::PUT
        && seen.status == 200
        && seen
            .path
            .rsplit_once("/leases/")
            .is_some_and(|(_, name)| name.starts_with(lease_prefix))
}

fn sigstop(host: &ProcessHost) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(host.pid() as libc::pid_t, libc::SIGSTOP) };
}

fn sigcont(host: &ProcessHost) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(host.pid() as libc::pid_t, libc::SIGCONT) };
}

/// Holders of the Leases whose names start with `prefix`.
async fn holders(env: &TestEnv, prefix: &str) -> Result<Vec<String>> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    Ok(leases
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|l| {
            l.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter_map(|l| l.spec?.holder_identity)
        .collect())
}

/// Waits until replica A holds exactly `count` of the Leases named `prefix…`.
async fn wait_held_by_a(env: &TestEnv, prefix: &str, count: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held = holders(env, prefix).await?;
        if held.iter().filter(|h| *h == "replica-a").count() == count {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "A does not hold {count} of the Leases {prefix}…: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sharded, while A is stopped: gives one of A's objects the label of the
/// other shard A holds (as a user copying labels would). A's watch shows the
/// change when A resumes, and A's reconcile of it fixes the label — a write
/// for that shard, sent on no reconcile's timer, so only the fence stops it
/// once A's hold has run out.
async fn relabel_within_a_s_shards(env: &TestEnv, names: &[String]) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut mine = Vec::new();
    for shard in 0..4u32 {
        let lease = leases
            .get(&format!("wasm-operator-shard-{shard:02}"))
            .await?;
        if lease.spec.and_then(|s| s.holder_identity).as_deref() == Some("replica-a") {
            mine.push(format!("{shard}-of-4"));
        }
    }
    ensure!(mine.len() == 2, "A holds {mine:?}");
    for name in names {
        let jz = env.jinghzhus().get(name).await?;
        let label = jz.labels().get(SHARD_LABEL).cloned().unwrap_or_default();
        if let Some(other) = mine.iter().find(|m| mine.contains(&label) && **m != label) {
            let patch = serde_json::json!({ "metadata": { "labels": { SHARD_LABEL: other } } });
            env.jinghzhus()
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            return Ok(());
        }
    }
    bail!("no object of A's shards to relabel")
}

/// How the replicas share the work.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// `--leader-elect`: A leads, B stands by.
    Leader,
    /// `--shards 4`: A holds every shard until B joins.
    Shards,
}

/// What one run saw.
struct Outcome {
    /// A's object writes that arrived after its hold ran out.
    late: Vec<Seen>,
    /// A's object writes between the stop and the bound (in flight).
    in_flight: usize,
    /// The bound: A's last renewal's arrival + renew deadline.
    bound_after_stop: Duration,
    /// `wasm_operator_fenced_writes_total` of A.
    fenced: f64,
    /// A's reconciles cancelled by the end of its term or hold.
    cancelled: usize,
    /// A's object writes in the last second before the stop.
    writing: usize,
    /// When there are late writes: the times and A's log, to explain them.
    detail: String,
}

/// What A's proxy log says of A's writes around the stop.
struct Judged {
    late: Vec<Seen>,
    in_flight: usize,
    bound: Instant,
    /// The times and A's log, when some writes were late.
    detail: String,
}

/// Judges `seen`, A's proxy log, for A stopped at `stopped` and resumed at
/// `resumed` (see the module docs for the bound and what is legitimate).
fn judge(
    seen: &[Seen],
    stopped: Instant,
    resumed: Instant,
    lease_prefix: &str,
    a: &ProcessHost,
) -> Result<Judged> {
    // Whatever arrived before A resumed was sent before it was stopped.
    let last_renewal = seen
        .iter()
        .filter(|s| s.at < resumed && is_renewal(s, lease_prefix))
        .map(|s| s.at)
        .max()
        .with_context(|| {
            let leases: Vec<String> = seen
                .iter()
                .filter(|s| s.path.contains("/leases"))
                .map(|s| format!("{:?} {} {} {}", s.at.saturating_duration_since(stopped), s.method, s.path, s.status))
                .collect();
            format!(
                "A's proxy saw no renewal before the stop; its Lease requests (time from the stop): {leases:#?}\nA:\n{}",
                a.timeline()
            )
        })?;
    let bound = last_renewal + RENEW_DEADLINE;
    // A resumed replica may renew a Lease nobody took meanwhile (the write
    // carries the resourceVersion it read, so it fails if anyone did): it
    // holds it again, legitimately, once the answer reaches it, which the
    // proxy sends no sooner than LATENCY after the renewal arrived.
    let held_again = seen
        .iter()
        .filter(|s| s.at >= resumed && is_renewal(s, lease_prefix))
        .map(|s| s.at + LATENCY)
        .min();
    let late: Vec<Seen> = seen
        .iter()
        .filter(|s| {
            s.at > bound + SLACK
                && held_again.is_none_or(|again| s.at < again)
                && is_object_write(s)
        })
        .cloned()
        .collect();
    let since_resume = |at: Instant| {
        if at >= resumed {
            format!("+{:?}", at - resumed)
        } else {
            format!("-{:?}", resumed - at)
        }
    };
    let lease_log: Vec<String> = seen
        .iter()
        .filter(|s| s.at + STOPPED >= stopped && s.path.contains("/leases"))
        .map(|s| {
            format!(
                "{} {} {} {}",
                since_resume(s.at),
                s.method,
                s.path,
                s.status
            )
        })
        .collect();
    let late_detail = format!(
        "times from A's resuming: bound {}, held again {:?}; late: {:?}; A's Lease requests: {lease_log:#?}\nA:\n{}",
        since_resume(bound),
        held_again.map(since_resume),
        late.iter()
            .map(|s| format!("{} {} {}", since_resume(s.at), s.method, s.path))
            .collect::<Vec<_>>(),
        a.log_tail(60)
    );
    let in_flight = seen
        .iter()
        .filter(|s| s.at >= stopped && s.at <= bound + SLACK && is_object_write(s))
        .count();
    let detail = if late.is_empty() {
        String::new()
    } else {
        late_detail
    };
    Ok(Judged {
        late,
        in_flight,
        bound,
        detail,
    })
}

/// Stops A with writes on the wire, lets it run a moment, stops it past
/// its lease (sharded: relabels one of its objects meanwhile) and resumes
/// it; returns when it was stopped and when resumed.
async fn stop_past_the_lease(
    a: &ProcessHost,
    env: &TestEnv,
    names: &[String],
    mode: Mode,
) -> Result<(Instant, Instant)> {
    sigstop(a);
    // The answers to what A sent pile up in its sockets; then A runs for
    // a moment, long enough to read some and be in the middle of acting on
    // them, and is stopped again, past its lease this time.
    tokio::time::sleep(PILE_UP).await;
    sigcont(a);
    std::thread::sleep(FLICKER);
    sigstop(a);
    let stopped = Instant::now();
    if mode == Mode::Shards {
        relabel_within_a_s_shards(env, names).await?;
    }
    tokio::time::sleep(STOPPED).await;
    sigcont(a);
    Ok((stopped, Instant::now()))
}

/// Every object converges to exactly [`DESIRED`] live pods.
async fn all_exact(env: &TestEnv, names: &[String]) -> Result<()> {
    for name in names {
        env.wait_converged(name, DESIRED, CONVERGE).await?;
    }
    for name in names {
        let live = env.live_pods(name).await?.len();
        ensure!(
            live == DESIRED as usize,
            "{name} has {live} live pods, not {DESIRED}"
        );
    }
    Ok(())
}

/// The scenario, in `mode`: A acts alone, then B joins; everything scales
/// 0 → [`DESIRED`] through A (slowed by its proxy); A is stopped with
/// writes in flight for [`STOPPED`] while B takes over, then resumed.
async fn stop_a_writer_past_its_lease(mode: Mode) -> Result<Outcome> {
    let env = TestEnv::new("fencing").await?;
    let base = Kustomization::with_plugin(&replicaset())?;
    let objects = base.render(env.control_plane)?;
    let installed: Installed = install(&env, &objects).await?;
    let binary = host_binary();
    let upstream = ApiProxy::upstream_client(env.control_plane).await?;
    let proxy_a = ApiProxy::start(upstream.clone()).await?;
    let proxy_b = ApiProxy::start(upstream).await?;
    let dir = tempfile::TempDir::new()?;
    // Leaked: two short strings per run, borrowed by the overrides.
    let path_text = |path: std::path::PathBuf| -> &'static str {
        Box::leak(path.to_string_lossy().into_owned().into_boxed_str())
    };
    let config_a = path_text(kubeconfig_through(
        &proxy_a,
        &env.namespace,
        dir.path(),
        "a",
    )?);
    let config_b = path_text(kubeconfig_through(
        &proxy_b,
        &env.namespace,
        dir.path(),
        "b",
    )?);
    let mut overrides = vec![
        ("WASM_OPERATOR_LEADER_ELECT_LEASE_DURATION", LEASE),
        ("WASM_OPERATOR_LEADER_ELECT_RENEW_DEADLINE", RENEW),
        ("WASM_OPERATOR_LEADER_ELECT_RETRY_PERIOD", RETRY),
        ("WASM_OPERATOR_WORKERS", "16"),
    ];
    if mode == Mode::Shards {
        overrides.push(("WASM_OPERATOR_LEADER_ELECT", ""));
        overrides.push(("WASM_OPERATOR_SHARDS", "4"));
    }
    let with = |config: &'static str| {
        let mut all = overrides.clone();
        all.push(("KUBECONFIG", config));
        all
    };
    // The prefix of the Leases A renews for what it writes.
    let lease_prefix = match mode {
        Mode::Leader => "wasm-operator",
        Mode::Shards => "wasm-operator-shard-",
    };

    let mut a = ProcessHost::start(&binary, &installed, "replica-a", &with(config_a))?;
    a.wait_ready().await?;
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("web-{i}")).collect();
    try_join_all(names.iter().map(|n| env.create(n, 0, &[]))).await?;
    // A holds everything before B starts: B stands by (or, sharded, takes
    // half of the shards, which A hands over, then both act).
    let all = if mode == Mode::Shards { 4 } else { 1 };
    wait_held_by_a(&env, lease_prefix, all).await?;
    for name in &names {
        env.wait_converged(name, 0, CONVERGE).await?;
    }
    let mut b = ProcessHost::start(&binary, &installed, "replica-b", &with(config_b))?;
    b.wait_ready().await?;
    if mode == Mode::Shards {
        // B takes its half: A keeps two shards.
        wait_held_by_a(&env, lease_prefix, 2).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    proxy_a.set_latency(LATENCY);
    let scaled = Instant::now();
    try_join_all(names.iter().map(|n| env.scale(n, DESIRED))).await?;
    // Stop A once it is creating, with requests on the wire.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let creates = proxy_a.count_since(scaled, |s| s.is_create_of("pods"));
        if creates >= 6 && proxy_a.in_flight() >= 2 {
            break;
        }
        ensure!(Instant::now() < deadline, "A never started creating");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (stopped, resumed) = stop_past_the_lease(&a, &env, &names, mode).await?;
    // Whatever A does on resuming, it does within a few seconds.
    tokio::time::sleep(Duration::from_secs(4)).await;
    all_exact(&env, &names).await.with_context(|| {
        format!(
            "after the stop; A:\n{}\nB:\n{}",
            a.log_tail(30),
            b.log_tail(30)
        )
    })?;

    let seen = proxy_a.seen();
    let Judged {
        late,
        in_flight,
        bound,
        detail,
    } = judge(&seen, stopped, resumed, lease_prefix, &a)?;
    let fenced = a.scrape().await?.sum("wasm_operator_fenced_writes");
    let cancelled = a
        .count_logged("leadership lost mid-reconcile; cancelled (the next leader reconciles it)")
        + a.count_logged("shard lost mid-reconcile; cancelled (its holder reconciles it)");
    let writing = seen
        .iter()
        .filter(|s| {
            s.at < stopped && s.at + Duration::from_secs(1) >= stopped && is_object_write(s)
        })
        .count();
    a.sigterm();
    b.sigterm();
    let _ = a.wait_exit(Duration::from_secs(20)).await;
    let _ = b.wait_exit(Duration::from_secs(20)).await;
    Ok(Outcome {
        late,
        in_flight,
        bound_after_stop: bound.saturating_duration_since(stopped),
        fenced,
        cancelled,
        writing,
        detail,
    })
}

fn report(mode: Mode, outcome: &Outcome) -> String {
    let late: Vec<String> = outcome
        .late
        .iter()
        .map(|s| format!("{} {} -> {}", s.method, s.path, s.status))
        .collect();
    format!(
        "{mode:?}: A sent {} writes in the second before the stop; its hold ran out {:?} after the stop; \
         {} of its writes arrived between the stop and then, {} after it {late:?}; \
         A fenced {} writes and {} of its reconciles were cancelled at the end of its hold",
        outcome.writing,
        outcome.bound_after_stop,
        outcome.in_flight,
        outcome.late.len(),
        outcome.fenced.abs(),
        outcome.cancelled
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_past_its_lease_writes_nothing_after_it_ran_out() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let outcome = stop_a_writer_past_its_lease(Mode::Leader).await?;
    println!("{}", report(Mode::Leader, &outcome));
    ensure!(
        outcome.late.is_empty(),
        "{}\n{}",
        report(Mode::Leader, &outcome),
        outcome.detail
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_holder_stopped_past_its_leases_writes_nothing_after_they_ran_out() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let outcome = stop_a_writer_past_its_lease(Mode::Shards).await?;
    println!("{}", report(Mode::Shards, &outcome));
    ensure!(
        outcome.late.is_empty(),
        "{}\n{}",
        report(Mode::Shards, &outcome),
        outcome.detail
    );
    Ok(())
}

/// A hold valid until a fixed instant (the lease a stopped process
/// resumes past).
struct LapsesAt(tokio::time::Instant);

impl Hold for LapsesAt {
    fn kind(&self) -> &'static str {
        "leadership"
    }
    fn validity(&self) -> Validity {
        Validity::Until(self.0)
    }
}

/// Applies, for a fresh object, a proposal of one pod create and a status,
/// through a proxy that holds each request [`APPLY_LATENCY`], under
/// `fence`; returns the outcome and the writes the proxy saw.
async fn apply_through_a_slow_proxy(
    env: &TestEnv,
    name: &str,
    fence: &WriteFence,
    metrics: &Metrics,
) -> Result<(Result<Applied, ApplyError>, Vec<Seen>)> {
    let jz = env.create(name, 1, &[]).await?;
    let proxy = ApiProxy::start(ApiProxy::upstream_client(env.control_plane).await?).await?;
    let client = kube::Client::try_from(proxy.host_config(&env.namespace)?)?;
    proxy.set_latency(APPLY_LATENCY);
    let proposal: ProposedActions = serde_json::from_value(serde_json::json!({
        "createPods": [{
            "generateName": format!("{name}-"),
            "spec": {
                "automountServiceAccountToken": false,
                "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]
            }
        }],
        // What the plugin saw (no pod yet): status/observed-fields holds
        // `current` to it.
        "status": {"current": 0, "state": "Pending", "message": "creating one pod"}
    }))?;
    // The pod's spec is the test's own: `baseline` takes it as it is.
    let policy = PolicyConfig {
        policy: PodPolicy::Baseline,
        ..PolicyConfig::default()
    };
    let validated = validate(&jz, &[], &proposal, &policy)
        .map_err(|rejection| anyhow::anyhow!("the proposal was refused: {rejection:?}"))?;
    let status = status_change(&jz, &[], &proposal, "test");
    ensure!(status.is_some(), "the proposal changes no status");
    let (events, _queued) = EventSink::channel(16, Default::default());
    let expectations = Expectations::new(Duration::from_secs(60));
    let own_writes = OwnWrites::default();
    let uid = jz.uid().context("no uid")?;
    let key = format!("{}/{name}", env.namespace);
    let target = Target {
        client: &client,
        events: &events,
        expectations: &expectations,
        own_writes: &own_writes,
        metrics,
        owner_uid: &uid,
        key: &key,
        plugin: "test",
        fence,
    };
    let outcome = apply(&target, &jz, &[], &proposal, &validated, status.as_ref()).await;
    let writes = proxy.seen().into_iter().filter(is_object_write).collect();
    Ok((outcome, writes))
}

/// How long the proxy of [`apply_through_a_slow_proxy`] holds each request.
const APPLY_LATENCY: Duration = Duration::from_secs(2);

/// The fence where it stands, without the term-end timer around it (which
/// cancels a reconcile in the SIGSTOP cases above and so hides a missing
/// fence there most of the time): a hold that runs out while a create is
/// on the wire lets the create's answer arrive, and the status patch that
/// would follow is not sent. The same apply with a hold that does not run
/// out sends it (so the proxy would have seen it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_that_lapses_while_a_create_is_answered_sends_nothing_after_it() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let env = TestEnv::new("fence-apply").await?;
    let writes_of = |writes: &[Seen]| {
        writes
            .iter()
            .map(|s| format!("{} {} {}", s.method, s.path, s.status))
            .collect::<Vec<_>>()
    };

    // Valid throughout: the create, then the status patch.
    let metrics = Metrics::default();
    let (outcome, writes) =
        apply_through_a_slow_proxy(&env, "held", &WriteFence::open(), &metrics).await?;
    let applied = outcome.context("applying under a fence that holds")?;
    ensure!(
        applied.created.len() == 1 && applied.status_written && writes.len() == 2,
        "under a fence that holds: {applied:?}, writes {:?}",
        writes_of(&writes)
    );

    // Valid for half the time the create's answer takes.
    let metrics = Metrics::default();
    let fence = WriteFence::new(LapsesAt(tokio::time::Instant::now() + APPLY_LATENCY / 2));
    let (outcome, writes) = apply_through_a_slow_proxy(&env, "lapsed", &fence, &metrics).await?;
    let fenced = metrics
        .fenced_writes
        .get_or_create(&FencedLabels {
            verb: "patch_status".into(),
            hold: "leadership".into(),
        })
        .get();
    ensure!(
        matches!(
            outcome,
            Err(ApplyError::Fenced {
                verb: "patch_status",
                ..
            })
        ) && fenced == 1,
        "a hold that lapsed during the create: {outcome:?}, fenced writes counted {fenced}"
    );
    ensure!(
        writes.len() == 1 && writes[0].method == Method::POST && writes[0].path.ends_with("/pods"),
        "after the hold lapsed only the create (sent before) may reach the API server: {:?}",
        writes_of(&writes)
    );
    Ok(())
}
