//! The scale benchmark in a small configuration, so it cannot rot: a real
//! run end to end (fresh control plane, the controller as a process, every
//! phase) with N = 20, asserting that it converged with exact pod counts and
//! that every figure was actually collected.
//!
//! `host_smoke_run` runs under `cargo test --workspace` (CI). The peers'
//! run needs the Go build of the controller-runtime peer (minutes on a cold
//! Go cache), so it is `#[ignore]`d: `cargo test -p scale-bench --test smoke -- --ignored`.

use std::path::Path;
use std::time::{Duration, Instant};

use scale_bench::artifacts::{self, Profile};
use scale_bench::controllers::ControllerKind;
use scale_bench::report::Report;
use scale_bench::scenario::{RunOptions, RunResult};
use scale_bench::{Benchmark, scenario};

const OBJECTS: usize = 20;
const PODS: u32 = 3;
const EDITS: usize = 4;
const SHARDS: u32 = 8;
const FAILOVER_EDITS: usize = 6;

fn bench(controllers: &[ControllerKind], dir: &Path) -> Benchmark {
    Benchmark {
        controllers: controllers.to_vec(),
        largest_n_controllers: Vec::new(),
        objects: vec![OBJECTS],
        run: RunOptions {
            objects: OBJECTS,
            pods_per_object: PODS,
            workers: 4,
            replica_workers: None,
            nodes: local_control_plane::DEFAULT_NODES,
            // Two kwok processes share the nodes: the smoke run checks the
            // split (`--kwok-processes`) converges like one.
            kwok_processes: 2,
            create_concurrency: 8,
            // Paced (N = 20 in about 0.4 s): the `--create-rate` path runs too.
            create_rate: Some(50.0),
            idle: Duration::from_secs(2),
            edits: EDITS,
            converge_timeout: Duration::from_secs(120),
            settle: Duration::from_secs(1),
            log_dir: dir.join("logs"),
            replicas: 1,
            shards: SHARDS,
            failover_edits: FAILOVER_EDITS,
            gc: true,
        },
        replicas: vec![1],
        nodes: vec![local_control_plane::DEFAULT_NODES],
        repeat: 1,
        profile: Profile::of_this_build(),
        micro_bench: false,
        results_dir: dir.to_path_buf(),
        command: "scale-bench smoke test".to_owned(),
    }
}

/// Every figure of a converged run is there and plausible.
fn assert_collected(r: &RunResult) {
    let what = format!("{} run: {r:#?}", r.controller);
    let pods = OBJECTS as u64 * u64::from(PODS);
    assert!(r.converge_secs > 0.0, "{what}");
    // At least one create per pod, and the pods' Events, status writes and
    // annotations; the harness's own Jinghzhu creates are not counted.
    assert!(
        r.requests.get("POST pods").copied().unwrap_or(0) >= pods,
        "{what}"
    );
    assert!(!r.requests.contains_key("POST jinghzhus"), "{what}");
    assert!(
        r.requests
            .get("PATCH jinghzhus/status")
            .copied()
            .unwrap_or(0)
            >= OBJECTS as u64,
        "{what}"
    );
    assert!(
        r.writes >= 2 * pods + OBJECTS as u64,
        "pods, their Events and statuses: {what}"
    );
    assert_eq!(
        r.writes + r.reads,
        r.requests.values().sum::<u64>(),
        "{what}"
    );
    assert!(r.cpu_converge_secs > 0.0, "{what}");
    assert!(r.cpu_idle_secs >= 0.0, "{what}");
    assert!(r.rss_idle_mib > 1.0 && r.rss_converged_mib > 1.0, "{what}");
    assert!(r.rss_peak_mib >= r.rss_converged_mib, "{what}");
    assert!(
        r.rss_converged_anon_mib > 0.0
            && r.rss_converged_file_mib > 0.0
            && r.rss_converged_anon_mib + r.rss_converged_file_mib <= r.rss_converged_mib + 0.01,
        "{what}"
    );
    for process in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "scale-bench",
    ] {
        assert!(
            r.cpu_others_converge_secs
                .get(process)
                .is_some_and(|secs| *secs >= 0.0),
            "{process}: {what}"
        );
    }
    assert!(
        r.cpu_others_converge_secs["kube-apiserver"] > 0.0,
        "the API server served the run: {what}"
    );
    assert!(r.reconciles_converge >= OBJECTS as u64, "{what}");
    assert!(r.idle_secs >= 2.0, "{what}");
    assert_eq!(r.edit_latencies_ms.len(), EDITS, "{what}");
    assert!(r.edit_latencies_ms.iter().all(|&ms| ms > 0.0), "{what}");
    assert!(
        r.edit_p50_ms > 0.0 && r.edit_p99_ms >= r.edit_p50_ms,
        "{what}"
    );
    // The controller's part of each edit is part of it, and never nothing.
    assert_eq!(r.edit_controller_ms.len(), EDITS, "{what}");
    assert!(
        r.edit_controller_ms
            .iter()
            .zip(&r.edit_latencies_ms)
            .all(|(&part, &total)| part > 0.0 && part <= total),
        "{what}: {:?} of {:?}",
        r.edit_controller_ms,
        r.edit_latencies_ms
    );
    assert!(r.load_at_start.1 > 0, "{what}");
}

/// A run of three replicas: each held shards, did its part, and after one
/// was killed every object scaled then converged and all were exact again.
fn assert_replicas_measured(r: &RunResult) {
    let what = format!("{} ×{} run: {r:#?}", r.controller, r.replicas);
    assert_eq!(r.replicas, 3, "{what}");
    assert_eq!(r.per_replica.len(), 3, "{what}");
    assert_eq!(
        r.per_replica.iter().map(|p| p.shards_at_start).sum::<u64>(),
        u64::from(SHARDS),
        "{what}"
    );
    for replica in &r.per_replica {
        assert!(replica.shards_at_start > 0, "{what}");
        assert!(replica.cpu_converge_secs > 0.0, "{what}");
        assert!(replica.rss_converged_mib > 1.0, "{what}");
    }
    let summed: f64 = r.per_replica.iter().map(|p| p.rss_converged_mib).sum();
    assert!((summed - r.rss_converged_mib).abs() < 0.01, "{what}");
    let failover = r.failover.as_ref().expect("a failover phase");
    assert_eq!(failover.objects, FAILOVER_EDITS, "{what}");
    assert_eq!(failover.latencies_secs.len(), FAILOVER_EDITS, "{what}");
    assert!(
        failover
            .latencies_secs
            .iter()
            .all(|s| s.is_finite() && *s > 0.0),
        "{what}"
    );
    assert!(
        failover.all_exact_secs >= failover.last_secs && failover.last_secs > 0.0,
        "{what}"
    );
    // The killed replica held shards; whether a scaled object fell in one
    // depends on the UIDs, but then it waited for the Leases to expire.
    if failover.of_dead_replica > 0 {
        assert!(failover.last_of_dead_replica_secs > 5.0, "{what}");
    }
}

fn assert_report_written(report: &Report, dir: &Path) {
    let markdown = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    if report.runs.iter().any(|r| r.replicas > 1) {
        assert!(markdown.contains("## Several replicas"), "{markdown}");
    }
    for run in &report.runs {
        let row = format!("| {} | {} |", run.label(), run.objects);
        assert!(markdown.contains(&row), "no row {row} in:\n{markdown}");
    }
    let plotted = report.runs.iter().any(|r| r.replicas == 1);
    for plot in ["convergence.svg", "rss.svg"]
        .into_iter()
        .filter(|_| plotted)
    {
        let svg = std::fs::read_to_string(dir.join(plot)).expect(plot);
        assert!(
            svg.starts_with("<svg") && svg.contains("N (Jinghzhus)"),
            "{plot}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).expect("json"))
            .expect("results.json parses");
    assert_eq!(
        json["runs"].as_array().map(Vec::len),
        Some(report.runs.len())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_smoke_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Build first, so the time limit below is about the run.
    let plugin = artifacts::replicaset_plugin().expect("plugin");
    assert!(plugin.is_file());
    let bench = bench(&[ControllerKind::Host], dir.path());
    let started = Instant::now();
    let report = scale_bench::run(&bench).await.expect("the smoke run");
    eprintln!("host smoke run took {:?}", started.elapsed());
    assert_eq!(report.runs.len(), 1);
    let run = &report.runs[0];
    assert_eq!(run.controller, ControllerKind::Host);
    assert_eq!(run.objects, OBJECTS);
    assert_eq!(run.replicas, 1);
    assert!(run.per_replica.is_empty() && run.failover.is_none());
    assert_collected(run);
    assert!(run.gc_secs > 0.0, "{run:#?}");
    // The host remembers its creates (expectations): never a pod too many.
    assert_eq!(
        run.requests.get("DELETE pods").copied().unwrap_or(0),
        0,
        "the host deleted pods while only scaling up: {run:#?}"
    );
    assert_report_written(&report, dir.path());
    assert!(scenario::GC_DISCOVERY_WAIT < Duration::from_secs(60));
    // Each host run starts with an empty precompiled cache, as a pod with
    // an emptyDir does: it compiled the plugin (in its child compiler) and
    // stored it there.
    let run_dir = dir.path().join("logs").join(format!("host-{OBJECTS}"));
    let log = std::fs::read_to_string(run_dir.join("host.log")).expect("host log");
    assert!(
        log.lines()
            .any(|l| l.contains("plugin loaded") && l.contains("outcome=Compiled")),
        "the host did not compile the plugin at start"
    );
    let stored = std::fs::read_dir(run_dir.join("precompiled"))
        .expect("the run's precompiled cache")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .count();
    assert_eq!(stored, 1, "one precompiled plugin in the run's own cache");
}

/// Three replicas of the host splitting the shards, one of them killed
/// (beside `host_smoke_run`: its own control plane; no garbage collection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_replicas_smoke_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bench = bench(&[ControllerKind::Host], dir.path());
    bench.replicas = vec![3];
    bench.run.gc = false;
    let report = scale_bench::run(&bench)
        .await
        .expect("the replicas' smoke run");
    assert_eq!(report.runs.len(), 1);
    let run = &report.runs[0];
    assert_collected(run);
    assert!(run.gc_secs.is_nan(), "not timed: {run:#?}");
    assert_replicas_measured(run);
    assert_report_written(&report, dir.path());
    for replica in 0..3 {
        let log = dir
            .path()
            .join("logs")
            .join(format!("host-{OBJECTS}-x3"))
            .join(format!("host-replica-{replica}.log"));
        assert!(log.is_file(), "{}", log.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "builds the Go controller-runtime peer (minutes on a cold Go cache); run with --ignored"]
async fn peers_smoke_run() {
    let go_test = std::process::Command::new(std::env::var_os("GO").unwrap_or_else(|| "go".into()))
        .current_dir(artifacts::go_peer_dir())
        .args(["test", "./..."])
        .env("GOFLAGS", "-mod=readonly")
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("running go test");
    assert!(
        go_test.status.success(),
        "go test of the controller-runtime peer failed:\n{}{}",
        String::from_utf8_lossy(&go_test.stdout),
        String::from_utf8_lossy(&go_test.stderr)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let bench = bench(
        &[ControllerKind::KubeRs, ControllerKind::ControllerRuntime],
        dir.path(),
    );
    let report = scale_bench::run(&bench)
        .await
        .expect("the peers' smoke run");
    assert_eq!(report.runs.len(), 2);
    for run in &report.runs {
        assert_collected(run);
    }
    assert_report_written(&report, dir.path());
    let markdown = std::fs::read_to_string(dir.path().join("report.md")).expect("report.md");
    assert!(markdown.contains("Ratios to the controller-runtime peer"));
}
