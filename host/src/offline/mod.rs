//! Running a plugin without a cluster (`wasm-operator reconcile`): on
//! objects from files, printing the proposal as YAML, or over a directory of
//! golden fixtures with an idempotence check.
//!
//! - [`input`]: reading kubectl-style YAML/JSON into one reconcile's input.
//! - [`fixtures`]: golden cases and the idempotence check.
//! - [`simulate`]: what the API server makes of an input after a proposal.
//! - [`diff`]: readable differences between expected and actual proposals.
//! - [`time`]: `--now` and fixture times.

pub mod diff;
pub mod fixtures;
pub mod input;
pub mod simulate;
pub mod time;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::runtime::{Runtime, RuntimeArgs};

/// Options of `wasm-operator reconcile`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReconcileArgs {
    /// The plugin (.wasm component).
    #[arg(long)]
    pub plugin: PathBuf,
    /// Files holding the Jinghzhu and its pods (YAML or JSON, one object,
    /// several documents or a `kind: List`; `kubectl get -o yaml` output works).
    #[arg(long, num_args = 1.., required_unless_present = "fixtures", conflicts_with = "fixtures")]
    pub input: Vec<PathBuf>,
    /// A directory of golden cases (<case>/input.yaml, <case>/expected.yaml,
    /// optional <case>/now) to check, with an idempotence check each.
    #[arg(long, value_name = "DIR")]
    pub fixtures: Option<PathBuf>,
    /// With --fixtures: write the plugin's proposals to expected.yaml instead of comparing.
    #[arg(long, requires = "fixtures")]
    pub bless: bool,
    /// The time the plugin is told it is (RFC 3339). Default: the current time
    /// (with --fixtures: each case's `now` file, else 2026-01-01T00:00:00Z).
    #[arg(long, value_name = "RFC3339", conflicts_with = "fixtures")]
    pub now: Option<String>,
    /// Plugin limits and the precompiled cache.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Runs the subcommand: loads the plugin, then one input or all fixtures.
pub fn run(args: ReconcileArgs) -> Result<ExitCode> {
    let runtime = Runtime::new(args.runtime.config())?;
    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("reading {}", args.plugin.display()))?;
    let plugin = runtime.load(&bytes, &args.plugin.display().to_string())?;

    if let Some(dir) = &args.fixtures {
        let mode = if args.bless {
            fixtures::Mode::Bless
        } else {
            fixtures::Mode::Check
        };
        let results = fixtures::run_all(&plugin, dir, mode)?;
        let failed = results.iter().filter(|r| r.failure.is_some()).count();
        for result in &results {
            match &result.failure {
                None => println!("ok      {}", result.name),
                Some(why) => println!("FAILED  {}\n{}\n", result.name, indent(why)),
            }
        }
        let verb = if args.bless { "blessed" } else { "passed" };
        println!(
            "{} fixtures in {}: {} {verb}, {failed} failed ({})",
            results.len(),
            dir.display(),
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
        Some(text) => time::parse_time(text)?,
        None => std::time::SystemTime::now(),
    };
    match fixtures::reconcile(&plugin, &input, now) {
        Ok(actions) => {
            print!("{}", serde_yaml::to_string(&actions)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!(
                "error: {} on {}: {err:#}",
                plugin.describe(),
                crate::runtime::object_key(&input.jinghzhu)
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}
