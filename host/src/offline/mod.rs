//! Running a plugin without a cluster (`wasm-operator reconcile`): on
//! objects from files, printing the proposal as YAML, or over a directory of
//! golden fixtures with an idempotence check, or comparing two plugins on
//! them; and recording fixture cases from a live cluster
//! (`wasm-operator record`). The fixture format is `plugins/FIXTURES.md`.
//!
//! What it may import: `run.rs` (the runtime flags), `declared/` (the
//! checks of a 0.3 output), `slot/`, `runtime/` and the shared types
//! (`actions`, `crd`, `ownership`); only `cli.rs` sits above it.
//!
//! Stdout carries only the report (or the proposal); the plugins' own log
//! lines are hidden unless `--plugin-logs` shows them on stderr
//! ([`ReconcileArgs::hides_plugin_logs`], applied where `cli` sets up logging).
//!
//! - [`any_kind`]: the same for a contract 0.3 plugin (any parent kind),
//!   with the host's checks of a declared controller.
//! - [`input`]: reading kubectl-style YAML/JSON into one reconcile's input.
//! - [`fixtures`]: golden cases and the idempotence check.
//! - [`compare`]: `--compare-with`, where two plugins' proposals differ.
//! - [`record`]: cases from a live cluster, as the host's cache sees it.
//! - [`simulate`]: what the API server makes of an input after a proposal.
//! - [`diff`]: readable differences between expected and actual proposals.
//! - [`time`]: `--now` and fixture times.

pub mod any_kind;
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

use crate::runtime::{ContractVersion, Runtime, RuntimeArgs};

/// Options of `wasm-operator reconcile`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReconcileArgs {
    /// The plugin (.wasm component).
    #[arg(long)]
    pub plugin: PathBuf,
    /// Files holding the Jinghzhu and its pods (YAML or JSON, one object,
    /// several documents or a `kind: List`; `kubectl get -o yaml` output works);
    /// for a contract 0.3 plugin, the parent and its children and observed objects.
    #[arg(long, num_args = 1.., required_unless_present = "fixtures", conflicts_with = "fixtures")]
    pub input: Vec<PathBuf>,
    /// A directory of golden cases (<case>/input.yaml, <case>/expected.yaml,
    /// optional <case>/now) to check, with an idempotence check each (for a
    /// contract 0.3 plugin also the host's rules of --controller: docs/writing-controllers.md).
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
    /// For a contract 0.3 plugin: the PluginController it serves (its kinds,
    /// bounds and pod policy). Default: controller.yaml in the --fixtures
    /// directory or the one above it.
    #[arg(long, value_name = "FILE")]
    pub controller: Option<PathBuf>,
    /// For a contract 0.3 plugin: a sensitive child kind the admin allows
    /// (`Kind.group`, or `Kind` for the core group), as `run` takes it.
    #[arg(long, value_name = "KIND")]
    pub allow_child_kind: Vec<String>,
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

    if plugin.contract() == ContractVersion::V0_3 {
        return any_kind_run(&args, &plugin);
    }
    if let Some(dir) = &args.fixtures {
        let results = fixtures::run_all(&plugin, dir, mode(&args))?;
        return Ok(report(&results, &args, dir, &plugin.describe()));
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

/// Runs `wasm-operator record`: the parents of `--controller` for a
/// contract 0.3 plugin, else Jinghzhus.
pub fn record_command(args: record::RecordArgs) -> Result<ExitCode> {
    match args.controller.clone() {
        Some(controller) => any_kind::record::run(&args, &controller),
        None => record::run(args),
    }
}

fn mode(args: &ReconcileArgs) -> fixtures::Mode {
    if args.bless {
        fixtures::Mode::Bless
    } else {
        fixtures::Mode::Check
    }
}

/// Prints one line per case and the summary; fails when a case failed.
fn report(
    results: &[fixtures::CaseResult],
    args: &ReconcileArgs,
    dir: &Path,
    what: &str,
) -> ExitCode {
    let failed = results.iter().filter(|r| r.failure.is_some()).count();
    for result in results {
        let how = match result.blessed {
            Some(fixtures::Blessed::Unchanged) => "  (unchanged)",
            Some(fixtures::Blessed::Changed) => "  (blessed: changed)",
            Some(fixtures::Blessed::Created) => "  (blessed: new)",
            None => "",
        };
        match &result.failure {
            None => println!("ok      {}{how}", result.name),
            Some(why) => println!("FAILED  {}{how}\n{}\n", result.name, indent(why)),
        }
    }
    if args.bless {
        println!("{} ({what})", fixtures::bless_summary(results, dir));
    } else {
        println!(
            "{} fixtures in {}: {} passed, {failed} failed ({what})",
            results.len(),
            dir.display(),
            results.len() - failed,
        );
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `reconcile` with a contract 0.3 plugin: the cases, or one input.
fn any_kind_run(args: &ReconcileArgs, plugin: &crate::runtime::LoadedPlugin) -> Result<ExitCode> {
    let declaration = any_kind::find(
        args.controller.as_deref(),
        args.fixtures.as_deref(),
        &args.allow_child_kind,
    )?;
    let what = format!("{}, {}", plugin.describe(), declaration.describe());
    if let Some(dir) = &args.fixtures {
        let results = any_kind::cases::run_all(plugin, &declaration, dir, mode(args))?;
        return Ok(report(&results, args, dir, &what));
    }
    let state = any_kind::input::read(&args.input, &declaration)?;
    let now = match &args.now {
        Some(text) => time::parse_time(text)?,
        None => std::time::SystemTime::now(),
    };
    let output = match any_kind::cases::call(plugin, &declaration, &state, now) {
        Ok(output) => output,
        Err(err) => {
            eprintln!(
                "error: {} on {}: {err:#}",
                plugin.describe(),
                state.parent_key()
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    print!("{}", any_kind::output::Outcome::of(&output).to_yaml());
    match any_kind::cases::check(&declaration, &state, output) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("error: {err:#}");
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
    if [&new, &old]
        .iter()
        .any(|p| p.contract() == ContractVersion::V0_3)
    {
        anyhow::bail!(
            "--compare-with compares contract 0.1/0.2 plugins; for a contract 0.3 plugin run \
             `reconcile --fixtures` with each and compare their outcomes"
        );
    }
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
