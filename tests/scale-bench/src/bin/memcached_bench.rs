//! `memcached-bench`: the Memcached example on the Wasm host against a
//! controller-runtime Memcached operator, N Memcacheds, alternating rounds
//! on fresh local control planes (see `scale_bench::memcached` and the
//! Memcached entries of tests/scale-bench/results/log-2026-11.md).
//!
//! `cargo run --release -p scale-bench --bin memcached-bench -- --objects 1000 --rounds 3`
//!
//! `--compare shadow`: the host alone against the host with the same plugin
//! as its shadow (`spec.shadow`), alternating; no peer is built or run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use scale_bench::artifacts::{self, Profile};
use scale_bench::memcached::{self, Comparison, Controllers, Options};

/// What the rounds compare.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Compare {
    /// The host against the controller-runtime peer.
    Peer,
    /// The host with a shadow (the same plugin) against the host alone.
    Shadow,
}

/// Runs the host with the memcached plugin and the controller-runtime peer,
/// host then peer each round (or the host alone then with a shadow), and
/// prints every run, the medians and the ratios host ÷ peer (host+shadow ÷
/// host).
#[derive(Debug, Parser)]
#[command(name = "memcached-bench")]
struct Args {
    /// N: how many Memcacheds.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// `spec.size` of every Memcached.
    #[arg(long, default_value_t = 1)]
    size: u32,
    /// Rounds of host then peer.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// `--workers` of both controllers.
    #[arg(long, default_value_t = 4)]
    workers: u16,
    /// Simulated nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 16)]
    create_concurrency: usize,
    /// Give up on a run's convergence after this many seconds.
    #[arg(long, default_value_t = 900)]
    converge_timeout_secs: u64,
    /// Cargo profile of the host.
    #[arg(long, value_enum, default_value = "release")]
    build_profile: Profile,
    /// Run this host executable (its `wasm-operator-compile` beside it)
    /// instead of building one with --build-profile.
    #[arg(long)]
    host: Option<PathBuf>,
    /// Serve this memcached plugin instead of building one.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Run this controller-runtime peer instead of building one.
    #[arg(long)]
    peer: Option<PathBuf>,
    /// What the rounds compare.
    #[arg(long, value_enum, default_value = "peer")]
    compare: Compare,
    /// Where the runs' logs go; results.json is written beside them.
    #[arg(long, default_value = "tests/scale-bench/results/logs/memcached")]
    logs: PathBuf,
}

#[tokio::main]
async fn main() -> Result<()> {
    scale_bench::init_logging();
    let args = Args::parse();
    if args.objects == 0 || args.rounds == 0 {
        bail!("--objects and --rounds must be at least 1");
    }
    if args.size > 100 {
        bail!("--size must be 0 to 100 (the Memcached CRD's bounds)");
    }
    let logs = if args.logs.is_relative() {
        artifacts::workspace_root().join(&args.logs)
    } else {
        args.logs.clone()
    };
    let profile = args.build_profile;
    let (host, plugin, peer) = (args.host.clone(), args.plugin.clone(), args.peer.clone());
    let comparison = match args.compare {
        Compare::Peer => Comparison::PEER,
        Compare::Shadow => Comparison::SHADOW,
    };
    let with_peer = comparison == Comparison::PEER;
    let controllers = tokio::task::spawn_blocking(move || -> Result<Controllers> {
        let host = match host {
            Some(host) => host,
            None => {
                artifacts::cargo_binary("wasm-operator-compile", "wasm-operator-compile", profile)?;
                artifacts::cargo_binary("wasm-operator", "wasm-operator", profile)?
            }
        };
        Ok(Controllers {
            host,
            plugin: plugin.map_or_else(artifacts::memcached_plugin, Ok)?,
            // Not run when comparing the host with and without a shadow.
            peer: match peer {
                Some(peer) => peer,
                None if with_peer => artifacts::memcached_peer()?,
                None => PathBuf::new(),
            },
        })
    })
    .await??;
    eprintln!("memcached-bench: {controllers:?}");
    let options = Options {
        objects: args.objects,
        size: args.size,
        workers: args.workers,
        nodes: args.nodes,
        create_concurrency: args.create_concurrency,
        converge_timeout: Duration::from_secs(args.converge_timeout_secs),
        settle: Duration::from_secs(3),
        log_dir: logs.clone(),
    };
    let results = memcached::run_rounds(&controllers, &options, args.rounds, comparison).await?;
    std::fs::create_dir_all(&logs)?;
    std::fs::write(
        logs.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    println!("{}", scale_bench::command_line(" --bin memcached-bench"));
    println!("{}", memcached::table(&results));
    println!("{}", memcached::summary(&results, comparison));
    Ok(())
}
