//! The scale benchmark: the Wasm host and its two peers (a native kube-rs
//! operator and a Go controller-runtime operator, same logic and writes),
//! each on a fresh local control plane, N Jinghzhus × P pods, measured from
//! outside the controller process.
//!
//! `cargo run --release -p scale-bench -- --objects 1000 --pods-per-object 3 --controllers host,kube-rs,controller-runtime`
//!
//! - [`artifacts`]: building the controllers (cargo, wasm32-wasip2, Go with a cache).
//! - [`controllers`]: the three controllers and their processes.
//! - [`observe`]: the harness's watches and convergence checks.
//! - [`scenario`]: one measured run.
//! - [`apiserver`]: API requests from `apiserver_request_total`.
//! - [`metrics`]: a controller's `/metrics` (reconcile counts).
//! - [`procstat`]: CPU and memory from `/proc`.
//! - [`report`] and [`plots`]: Markdown, JSON and SVG output.
//! - [`memcached`]: the Memcached benchmark (`memcached-bench`): the
//!   host with the memcached plugin against a controller-runtime peer.
//! - [`soak`]: the chaos soak (`chaos-soak`): replicas, faults, churn and
//!   an invariant checker over a long run.

pub mod apiserver;
pub mod artifacts;
pub mod controllers;
pub mod memcached;
pub mod metrics;
pub mod observe;
pub mod plots;
pub mod procstat;
pub mod report;
pub mod scenario;
pub mod soak;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::artifacts::Profile;
use crate::controllers::ControllerKind;
use crate::report::Report;
use crate::scenario::RunOptions;

/// A whole benchmark: which controllers, which Ns, and how.
#[derive(Debug, Clone)]
pub struct Benchmark {
    /// The controllers, run in this order for each N.
    pub controllers: Vec<ControllerKind>,
    /// When not empty, the only controllers run at the largest N.
    pub largest_n_controllers: Vec<ControllerKind>,
    /// The Ns, smallest first.
    pub objects: Vec<usize>,
    /// Replica counts the host runs with at each N (1: unsharded; more:
    /// `--shards`); the peers always run as one.
    pub replicas: Vec<u32>,
    /// Simulated node counts each run is repeated with (e.g. `3,30`, to
    /// tell what the cluster's shape costs from what the controller does).
    pub nodes: Vec<usize>,
    /// How many times the whole sweep runs, one round after the other
    /// (`--repeat`): runs of different N close in time, and a spread.
    pub repeat: usize,
    /// Everything else about a run (its `objects` is replaced per N).
    pub run: RunOptions,
    /// The cargo profile of the host and the kube-rs peer.
    pub profile: Profile,
    /// Also run `cargo bench -p wasm-operator --bench reconcile`.
    pub micro_bench: bool,
    /// Write the report here.
    pub results_dir: PathBuf,
    /// The command line, for the report.
    pub command: String,
}

/// Builds every controller, runs every (N, controller) pair, writes the
/// report and returns it.
pub async fn run(bench: &Benchmark) -> Result<Report> {
    let started = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut built = Vec::new();
    for kind in &bench.controllers {
        let profile = bench.profile;
        let kind = *kind;
        built.push(tokio::task::spawn_blocking(move || controllers::build(kind, profile)).await??);
    }
    let mut report = Report {
        command: bench.command.clone(),
        started,
        profile: bench.profile,
        pods_per_object: bench.run.pods_per_object,
        workers: bench.run.workers,
        idle_secs: bench.run.idle.as_secs(),
        edits: bench.run.edits,
        create_concurrency: bench.run.create_concurrency,
        create_rate: bench.run.create_rate,
        runs: Vec::new(),
        micro_bench: None,
    };
    let largest = bench.objects.iter().copied().max();
    for (round, objects) in schedule(&bench.objects, bench.repeat) {
        for b in &built {
            if Some(objects) == largest
                && !bench.largest_n_controllers.is_empty()
                && !bench.largest_n_controllers.contains(&b.kind)
            {
                continue;
            }
            let replica_counts = if b.kind.is_host() && !bench.replicas.is_empty() {
                bench.replicas.clone()
            } else {
                vec![1]
            };
            let node_counts = if bench.nodes.is_empty() {
                vec![local_control_plane::DEFAULT_NODES]
            } else {
                bench.nodes.clone()
            };
            for (replicas, nodes) in replica_counts
                .iter()
                .flat_map(|&r| node_counts.iter().map(move |&n| (r, n)))
            {
                let mut suffix = if replicas > 1 {
                    format!("-x{replicas}")
                } else {
                    String::new()
                };
                if nodes != local_control_plane::DEFAULT_NODES {
                    suffix.push_str(&format!("-{nodes}nodes"));
                }
                if bench.repeat > 1 {
                    suffix.push_str(&format!("-round{}", round + 1));
                }
                let options = RunOptions {
                    objects,
                    replicas,
                    nodes,
                    log_dir: bench
                        .results_dir
                        .join("logs")
                        .join(format!("{}-{objects}{suffix}", b.kind)),
                    ..bench.run.clone()
                };
                let mut result = scenario::run(b, &options).await?;
                result.round = round;
                eprintln!("{}", report::results_table(std::slice::from_ref(&result)));
                report.runs.push(result);
                // Written after every run, so a long sweep that fails late
                // keeps what it measured.
                report::write(&report, &bench.results_dir)?;
            }
        }
    }
    if bench.micro_bench {
        report.micro_bench = Some(tokio::task::spawn_blocking(report::run_micro_bench).await??);
    }
    let written = report::write(&report, &bench.results_dir)?;
    eprintln!(
        "scale-bench: wrote {}, {} and {} plots",
        written.markdown.display(),
        written.json.display(),
        written.plots.len()
    );
    Ok(report)
}

/// The order of the runs: every N of the sweep, smallest first, then all
/// of them again for each further round (`(round, N)` pairs).
pub fn schedule(objects: &[usize], repeat: usize) -> Vec<(usize, usize)> {
    (0..repeat.max(1))
        .flat_map(|round| objects.iter().map(move |&n| (round, n)))
        .collect()
}

/// The defaults of a run (N = 1000 × 3 pods, 4 workers, 60 s quiet, 50
/// edits, one replica; replicas split 32 shards, 30 objects scaled after
/// the kill).
pub fn default_run_options(results_dir: &std::path::Path) -> RunOptions {
    RunOptions {
        objects: 1000,
        pods_per_object: 3,
        workers: 4,
        replica_workers: None,
        nodes: local_control_plane::DEFAULT_NODES,
        kwok_processes: 1,
        create_concurrency: 16,
        create_rate: None,
        idle: Duration::from_secs(60),
        edits: 50,
        converge_timeout: Duration::from_secs(900),
        settle: Duration::from_secs(3),
        log_dir: results_dir.join("logs"),
        replicas: 1,
        shards: 32,
        failover_edits: 30,
        gc: true,
    }
}

/// Logs of the benchmark binaries to stderr: warnings (and `RUST_LOG`),
/// without kube's line per failed request (the binaries report those).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off")
            }),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// How a benchmark binary was invoked, as `cargo run [--release] -p
/// scale-bench <bin_args> -- <args>` (`bin_args`: empty, or `--bin NAME`).
pub fn command_line(bin_args: &str) -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let release = if cfg!(debug_assertions) {
        ""
    } else {
        " --release"
    };
    format!(
        "cargo run{release} -p scale-bench{bin_args} -- {}",
        args.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::default_run_options;

    #[test]
    fn rounds_interleave_the_ns() {
        assert_eq!(
            super::schedule(&[3000, 10000], 2),
            [(0, 3000), (0, 10000), (1, 3000), (1, 10000)]
        );
        assert_eq!(super::schedule(&[5], 1), [(0, 5)]);
    }

    #[test]
    fn replicas_share_the_workers_unless_told() {
        let mut run = default_run_options(std::path::Path::new("/tmp"));
        run.workers = 4;
        assert_eq!(run.workers_per_replica(), 4, "one replica: all of them");
        run.replicas = 3;
        assert_eq!(run.workers_per_replica(), 2, "4 / 3, rounded up");
        run.replicas = 8;
        assert_eq!(run.workers_per_replica(), 1);
        run.replica_workers = Some(4);
        assert_eq!(run.workers_per_replica(), 4, "as told");
    }
}
