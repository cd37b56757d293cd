//! Running a plugin without a cluster (`wasm-operator reconcile`): on
//! objects from files, printing the proposal as YAML, or over a directory of
//! golden fixtures with an idempotence check.
//!
//! - [`input`]: reading kubectl-style YAML/JSON into one reconcile's input.
//! - [`fixtures`]: golden cases and the idempotence check.

pub mod fixtures;
pub mod input;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::runtime::{Runtime, RuntimeConfig};

/// Options of `wasm-operator reconcile`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReconcileArgs {
    /// The plugin (.wasm component).
    #[arg(long)]
    pub plugin: PathBuf,
    /// Files holding the Jinghzhu and its pods (YAML or JSON; kubectl output works).
    #[arg(
        long,
        required_unless_present = "fixtures",
        conflicts_with = "fixtures"
    )]
    pub input: Vec<PathBuf>,
    /// A directory of golden cases (<case>/input.yaml, <case>/expected.yaml) to check.
    #[arg(long)]
    pub fixtures: Option<PathBuf>,
    /// With --fixtures: write the plugin's output to expected.yaml instead of comparing.
    #[arg(long, requires = "fixtures")]
    pub bless: bool,
    /// The time the plugin is told it is (RFC 3339). Default: now.
    #[arg(long)]
    pub now: Option<String>,
    /// CPU deadline of the call, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub plugin_timeout_ms: u64,
}

/// Runs the subcommand.
pub fn run(args: ReconcileArgs) -> Result<ExitCode> {
    let runtime = Runtime::new(RuntimeConfig {
        deadline: std::time::Duration::from_millis(args.plugin_timeout_ms),
        ..RuntimeConfig::default()
    })?;
    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("reading {}", args.plugin.display()))?;
    let plugin = runtime.load(&bytes, &args.plugin.display().to_string())?;

    if let Some(dir) = &args.fixtures {
        let results = fixtures::run_all(&plugin, dir, args.bless)?;
        let failed = results.iter().filter(|r| r.failure.is_some()).count();
        for result in &results {
            match &result.failure {
                None => println!("ok      {}", result.name),
                Some(why) => println!("FAILED  {}\n{}\n", result.name, indent(why)),
            }
        }
        println!(
            "{} fixtures: {} passed, {failed} failed ({})",
            results.len(),
            results.len() - failed,
            plugin.describe()
        );
        return Ok(if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }

    let input = input::read(&args.input)?;
    let now = match &args.now {
        Some(text) => fixtures::parse_time(text)?,
        None => std::time::SystemTime::now(),
    };
    match fixtures::reconcile(&plugin, &input, now) {
        Ok(actions) => {
            print!("{}", serde_yaml::to_string(&actions)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
