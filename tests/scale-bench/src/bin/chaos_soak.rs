//! `chaos-soak`: the chaos soak's command line (see `scale_bench::soak` and
//! docs/development.md, "Faults and guarantees"). Exits 1 when any invariant
//! was violated.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use scale_bench::artifacts::{self, Profile};
use scale_bench::soak::catalogue::FaultKind;
use scale_bench::soak::replicas::LEASE;
use scale_bench::soak::{self, SoakOptions};

/// Runs host replicas with shards on a local control plane under churn
/// and random faults, checking invariants the whole time.
#[derive(Debug, Parser)]
#[command(name = "chaos-soak")]
struct Args {
    /// N: objects kept alive (desired 1–5 each).
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// How long faults and churn run (e.g. 30m, 90s).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    duration: Duration,
    /// Seeds every random choice.
    #[arg(long, default_value_t = 43)]
    seed: u64,
    /// Host replicas.
    #[arg(long, default_value_t = 3)]
    replicas: u32,
    /// The host's `--shards`.
    #[arg(long, default_value_t = 12)]
    shards: u32,
    /// `--workers` of each replica.
    #[arg(long, default_value_t = 2)]
    workers: u16,
    /// A fault starts about this often (± 25%).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    fault_interval: Duration,
    /// Only these fault kinds (default: the whole catalogue).
    #[arg(long, value_delimiter = ',')]
    faults: Vec<FaultKind>,
    /// Churn changes a second (default: N / 100, at least 1).
    #[arg(long)]
    churn_per_sec: Option<f64>,
    /// A plugin hot swap this often.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    swap_interval: Duration,
    /// Where soak.json, soak.md, soak.svg and the logs go.
    #[arg(long, default_value = "tests/scale-bench/results/soak")]
    results_dir: PathBuf,
    /// The host's cargo profile (default: `dist`; `dev` for a debug build of this tool).
    #[arg(long, value_enum)]
    build_profile: Option<Profile>,
    /// A deliberately broken run: the harness adds a pod to three exact
    /// objects, which the checker must report (the run fails).
    #[arg(long)]
    sabotage: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text}"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("not a duration (use ms, s, m or h): {text}")),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    scale_bench::init_logging();
    let args = Args::parse();
    if args.objects == 0 || args.replicas == 0 {
        bail!("--objects and --replicas must be at least 1");
    }
    let results_dir = if args.results_dir.is_relative() {
        artifacts::workspace_root().join(&args.results_dir)
    } else {
        args.results_dir.clone()
    };
    let options = SoakOptions {
        objects: args.objects,
        duration: args.duration,
        seed: args.seed,
        replicas: args.replicas,
        shards: args.shards,
        workers: args.workers,
        fault_interval: args.fault_interval,
        only_faults: args.faults.clone(),
        churn_per_sec: args
            .churn_per_sec
            .unwrap_or_else(|| (args.objects as f64 / 100.0).max(1.0)),
        swap_interval: args.swap_interval,
        lease: LEASE,
        bounds: soak::default_bounds(&LEASE),
        results_dir,
        profile: args.build_profile.unwrap_or_else(Profile::of_this_build),
        sabotage: args.sabotage,
        command: scale_bench::command_line(" --bin chaos-soak"),
    };
    let report = soak::run(&options).await?;
    if !report.passed {
        eprintln!("chaos-soak: {} violation(s)", report.violations.len());
        std::process::exit(1);
    }
    Ok(())
}
