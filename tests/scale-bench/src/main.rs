//! `scale-bench`: the command line of the scale benchmark (see the crate docs
//! and docs/performance.md, and the "Scale benchmark" entry of
//! tests/scale-bench/results/log-2026-11.md).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use scale_bench::artifacts::{self, Profile};
use scale_bench::controllers::ControllerKind;
use scale_bench::{Benchmark, default_run_options, report};

/// Runs the Wasm host and its peers on fresh local control planes with N
/// Jinghzhus × P pods and reports convergence time, API requests, CPU, RSS,
/// reconciles, edit latency and garbage-collection time, with SVG plots.
#[derive(Debug, Parser)]
#[command(name = "scale-bench")]
struct Args {
    /// N: how many Jinghzhus (ignored with --sweep).
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// Several Ns, e.g. 100,300,1000,3000; every controller runs at each.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<usize>,
    /// P: `spec.desired` of every Jinghzhu.
    #[arg(long, default_value_t = 3)]
    pods_per_object: u32,
    /// Which controllers, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "host,kube-rs,controller-runtime"
    )]
    controllers: Vec<ControllerKind>,
    /// At the largest N of a sweep, run only these of --controllers (e.g.
    /// `host,controller-runtime`, the pair the goals compare, when a third
    /// run at N = 10 000 would take another half hour).
    #[arg(long, value_delimiter = ',')]
    largest_n_controllers: Vec<ControllerKind>,
    /// Replica counts of the host at each N, e.g. `1,3`: more than one runs
    /// that many replicas with `--shards` (CPU and RSS summed, each one's in
    /// the replicas table) and ends with one replica killed (failover). The
    /// peers run as one.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    replicas: Vec<u32>,
    /// Simulated node counts, e.g. `3,30`: every run is repeated on a
    /// cluster of each size (the pods of a run spread over its nodes).
    #[arg(long, value_delimiter = ',', default_value = "3")]
    nodes: Vec<usize>,
    /// kwok processes sharing the simulated nodes (each manages every n-th
    /// node; at most one per node). Each still reads every pod event: two
    /// did not lower kwok's CPU at N = 10 000 (tests/scale-bench/results/log-2026-11.md).
    #[arg(long, default_value_t = 1)]
    kwok_processes: usize,
    /// Run the whole sweep this many times, round after round (N = 3000,
    /// 10 000, 3000, 10 000, …): each round's ratio between its Ns compares
    /// runs minutes apart, and the rounds show how much that ratio moves on
    /// a shared machine (the linearity table).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// `--shards` of the host's replicas when there are several.
    #[arg(long, default_value_t = 32)]
    shards: u32,
    /// Objects scaled right after a replica is killed (several replicas).
    #[arg(long, default_value_t = 30)]
    failover_edits: usize,
    /// Skip timing the garbage collection at the end (the collector is
    /// kube-controller-manager's; at N = 10 000 it takes minutes).
    #[arg(long)]
    no_gc: bool,
    /// `--workers` of every controller.
    #[arg(long, default_value_t = 4)]
    workers: u16,
    /// `--workers` of each replica when the host runs several (default:
    /// `--workers` divided by the replica count, rounded up, as
    /// docs/replicas.md advises).
    #[arg(long)]
    replica_workers: Option<u16>,
    /// Seconds to watch a converged set for reconciles.
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// Single-object scale edits to time per run.
    #[arg(long, default_value_t = 50)]
    edits: usize,
    /// Creates in flight at once while creating the N objects.
    #[arg(long, default_value_t = 16)]
    create_concurrency: usize,
    /// Start at most this many creates a second (default: as fast as
    /// `--create-concurrency` allows, which saturates a small machine). A
    /// paced run compares the controllers at a load the cluster keeps up
    /// with.
    #[arg(long)]
    create_rate: Option<f64>,
    /// Give up on a run's convergence after this many seconds.
    #[arg(long, default_value_t = 900)]
    converge_timeout_secs: u64,
    /// Cargo profile of the host and the kube-rs peer (default: `dist`, what
    /// the image ships; `dev` when the benchmark itself is a debug build).
    #[arg(long, value_enum)]
    build_profile: Option<Profile>,
    /// Also run `cargo bench -p wasm-operator --bench reconcile` and include its figures.
    #[arg(long)]
    micro_bench: bool,
    /// Where report.md, results.json, the plots and the controllers' logs go.
    #[arg(long, default_value = "tests/scale-bench/results")]
    results: PathBuf,
}

#[tokio::main]
async fn main() -> Result<()> {
    scale_bench::init_logging();
    let args = Args::parse();
    if args.controllers.is_empty() {
        bail!("--controllers needs at least one of host, kube-rs, controller-runtime");
    }
    let mut objects = if args.sweep.is_empty() {
        vec![args.objects]
    } else {
        args.sweep.clone()
    };
    objects.sort_unstable();
    objects.dedup();
    if objects.contains(&0) {
        bail!("N must be at least 1");
    }
    let results = if args.results.is_relative() {
        artifacts::workspace_root().join(&args.results)
    } else {
        args.results.clone()
    };
    let mut run = default_run_options(&results);
    run.pods_per_object = args.pods_per_object;
    run.workers = args.workers;
    run.replica_workers = args.replica_workers;
    run.idle = Duration::from_secs(args.idle_secs);
    run.edits = args.edits;
    run.create_concurrency = args.create_concurrency;
    if args
        .create_rate
        .is_some_and(|r| !(r > 0.0 && r.is_finite()))
    {
        bail!("--create-rate must be a positive number of creates a second");
    }
    run.create_rate = args.create_rate;
    run.converge_timeout = Duration::from_secs(args.converge_timeout_secs);
    run.shards = args.shards;
    run.failover_edits = args.failover_edits;
    run.gc = !args.no_gc;
    if args.kwok_processes == 0 {
        bail!("--kwok-processes must be at least 1");
    }
    run.kwok_processes = args.kwok_processes;
    let max_nodes = local_control_plane::nodes::MAX_NODES;
    if args.nodes.iter().any(|&n| n == 0 || n > max_nodes) {
        bail!("--nodes counts must be 1 to {max_nodes} (pods need a node to run on)");
    }
    if args.replicas.contains(&0) {
        bail!("--replicas counts must be at least 1");
    }
    if args.replicas.iter().any(|&r| r > 1) && args.shards < 2 {
        bail!("several replicas need --shards of at least 2");
    }
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let bench = Benchmark {
        controllers: args.controllers.clone(),
        largest_n_controllers: args.largest_n_controllers.clone(),
        objects,
        replicas: args.replicas.clone(),
        nodes: args.nodes.clone(),
        repeat: args.repeat,
        run,
        profile: args.build_profile.unwrap_or_else(Profile::of_this_build),
        micro_bench: args.micro_bench,
        results_dir: results,
        command: scale_bench::command_line(""),
    };
    let report = scale_bench::run(&bench).await?;
    println!("{}", report::results_table(&report.runs));
    if let Some(ratios) = report::ratios_table(&report.runs) {
        println!("{ratios}");
    }
    if let Some(ratios) = report::floor_table(&report.runs) {
        println!("ratios to the floor:\n{ratios}");
    }
    if let Some(replicas) = report::replicas_table(&report.runs) {
        println!("{replicas}");
    }
    if let Some(linearity) = report::linearity_table(&report.runs) {
        println!("{linearity}");
    }
    Ok(())
}
