//! Running a plugin without a cluster (`wasm-operator reconcile`): on
//! objects from files, printing the proposal as YAML, or over a directory of
//! golden fixtures with an idempotence check, or comparing two plugins on
//! them; and recording fixture cases from a live cluster
//! (`wasm-operator record`). The fixture format is `plugins/FIXTURES.md`.
//!
//! What it may import: `run.rs` (the runtime flags), `slot/`,
//! `runtime/` and the shared types (`actions`, `crd`, `ownership`); only
//! `cli.rs` sits above it.
//!
//! Stdout carries only the report (or the proposal); the plugins' own log
//! lines are hidden unless `--plugin-logs` shows them on stderr
//! ([`ReconcileArgs::hides_plugin_logs`], applied where `cli` sets up logging).
//!
//! - [`input`]: reading kubectl-style YAML/JSON into one reconcile's input.
//! - [`fixtures`]: golden cases and the idempotence check.
//! - [`compare`]: `--compare-with`, where two plugins' proposals differ.
//! - [`record`]: cases from a live cluster, as the host's cache sees it.
//! - [`simulate`]: what the API server makes of an input after a proposal.
//! - [`diff`]: readable differences between expected and actual proposals.
//! - [`time`]: `--now` and fixture times.

pub mod compare;
pub mod diff;
pub mod fixtures;
pub mod input;
pub mod record;
pub mod sample;
pub mod simulate;
pub mod time;

use std::path::{Path, PathBuf};
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
    /// Run this (older) plugin too and show where --plugin proposes something
    /// else, per case (expected.yaml is not read). Exit status: 0 when they
    /// agree everywhere, 1 when some case differs, 2 when they cannot be compared.
    #[arg(long, value_name = "OLD", conflicts_with = "bless")]
    pub compare_with: Option<PathBuf>,
    /// The time the plugin is told it is (RFC 3339). Default: the current time
    /// (with --fixtures: each case's `now` file, else 2026-01-01T00:00:00Z).
    #[arg(long, value_name = "RFC3339", conflicts_with = "fixtures")]
    pub now: Option<String>,
    /// Show the plugins' own log lines (their `log` calls, stdout and stderr)
    /// on stderr. Without it they are hidden, so the terminal shows only the
    /// report (stdout) and the host's own warnings and errors.
    #[arg(long)]
    pub plugin_logs: bool,
    /// Plugin limits and the precompiled cache.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

impl ReconcileArgs {
    /// Whether logging should drop the `plugin` target (see `--plugin-logs`).
    pub fn hides_plugin_logs(&self) -> bool {
        !self.plugin_logs
    }
}

/// Runs the subcommand: loads the plugin, then one input or all fixtures.
pub fn run(args: ReconcileArgs) -> Result<ExitCode> {
    if args.compare_with.is_some() {
        return Ok(compare_plugins(&args).unwrap_or_else(|err| {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }));
    }
    let runtime = Runtime::new(args.runtime.config())?;
    let plugin = load(&runtime, &args.plugin)?;

    if let Some(dir) = &args.fixtures {
        let mode = if args.bless {
            fixtures::Mode::Bless
        } else {
            fixtures::Mode::Check
        };
        let results = fixtures::run_all(&plugin, dir, mode)?;
        let failed = results.iter().filter(|r| r.failure.is_some()).count();
        for result in &results {
            let what = match result.blessed {
                Some(fixtures::Blessed::Unchanged) => "  (unchanged)",
                Some(fixtures::Blessed::Changed) => "  (blessed: changed)",
                Some(fixtures::Blessed::Created) => "  (blessed: new)",
                None => "",
            };
            match &result.failure {
                None => println!("ok      {}{what}", result.name),
                Some(why) => println!("FAILED  {}{what}\n{}\n", result.name, indent(why)),
            }
        }
        if args.bless {
            println!(
                "{} ({})",
                fixtures::bless_summary(&results, dir),
                plugin.describe()
            );
        } else {
            println!(
                "{} fixtures in {}: {} passed, {failed} failed ({})",
                results.len(),
                dir.display(),
                results.len() - failed,
                plugin.describe()
            );
        }
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

fn load(runtime: &Runtime, path: &Path) -> Result<std::sync::Arc<crate::runtime::LoadedPlugin>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(runtime.load(&bytes, &path.display().to_string())?)
}

/// `--compare-with`: both plugins on every case (or the one input).
fn compare_plugins(args: &ReconcileArgs) -> Result<ExitCode> {
    let runtime = Runtime::new(args.runtime.config())?;
    let new = load(&runtime, &args.plugin)?;
    let old_path = args.compare_with.as_deref().context("--compare-with")?;
    let old = load(&runtime, old_path)?;
    let (results, place) = match &args.fixtures {
        Some(dir) => (
            compare::compare_cases(&new, &old, dir)?,
            dir.display().to_string(),
        ),
        None => {
            let input = input::read(&args.input)?;
            let now = match &args.now {
                Some(text) => time::parse_time(text)?,
                None => std::time::SystemTime::now(),
            };
            let name = crate::runtime::object_key(&input.jinghzhu);
            let difference = compare::compare_input(&new, &old, &input, now);
            (
                vec![compare::Comparison { name, difference }],
                "the input".to_string(),
            )
        }
    };
    let differing = results.iter().filter(|r| r.difference.is_some()).count();
    for result in &results {
        match &result.difference {
            None => println!("same     {}", result.name),
            Some(text) => println!(
                "DIFFERS  {}  (- old, + new)\n{}\n",
                result.name,
                indent(text)
            ),
        }
    }
    println!(
        "{} case(s) in {place}: {differing} differ, {} the same (new: {}, old: {})",
        results.len(),
        results.len() - differing,
        new.describe(),
        old.describe()
    );
    Ok(if differing == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}
