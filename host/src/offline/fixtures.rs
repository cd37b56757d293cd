//! Golden fixtures: `<dir>/<case>/input.yaml` + `expected.yaml` (+ an
//! optional `now`). Each case is reconciled and compared structurally with
//! its expected proposal, then checked for idempotence: applying the
//! proposal as the API server would and reconciling again proposes no pod
//! creates or deletes, and a third round proposes nothing at all.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result, anyhow, bail};

use super::diff::diff;
use super::input::{self, OfflineInput};
use super::simulate::{self, NameSerial};
use super::time::parse_time;
use crate::actions::ProposedActions;
use crate::runtime::{LoadedPlugin, PluginError};

/// The `now` of a fixture without a `now` file.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// Outcome of one case.
#[derive(Debug)]
pub struct CaseResult {
    /// Case directory name.
    pub name: String,
    /// `None` if it passed, else why not.
    pub failure: Option<String>,
}

/// What to do with `expected.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Compare the proposal with it.
    Check,
    /// Rewrite it with the proposal (idempotence is still checked).
    Bless,
}

/// The case directories under `dir` (those with an `input.yaml`), sorted.
pub fn cases(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the fixtures directory {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.join("input.yaml").is_file())
        .collect();
    cases.sort();
    if cases.is_empty() {
        bail!(
            "no fixtures in {} (expected <case>/input.yaml and <case>/expected.yaml)",
            dir.display()
        );
    }
    Ok(cases)
}

/// Runs every case under `dir`.
pub fn run_all(plugin: &LoadedPlugin, dir: &Path, mode: Mode) -> Result<Vec<CaseResult>> {
    Ok(cases(dir)?
        .iter()
        .map(|case| CaseResult {
            name: case_name(case),
            failure: run_case(plugin, case, mode).err().map(|e| format!("{e:#}")),
        })
        .collect())
}

/// The name of a case: its directory's name.
pub fn case_name(case: &Path) -> String {
    case.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A case's input and the time it is reconciled at: its `now` file, else
/// [`DEFAULT_NOW`].
pub fn read_case(case: &Path) -> Result<(OfflineInput, SystemTime)> {
    let input = input::read(&[case.join("input.yaml")])?;
    let now = match std::fs::read_to_string(case.join("now")) {
        Ok(text) => parse_time(text.trim()).context("in the `now` file")?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => parse_time(DEFAULT_NOW)?,
        Err(err) => return Err(err).context("reading the `now` file"),
    };
    Ok((input, now))
}

/// Runs one case directory.
pub fn run_case(plugin: &LoadedPlugin, case: &Path, mode: Mode) -> Result<()> {
    let (input, now) = read_case(case)?;
    let actual = reconcile(plugin, &input, now)?;
    let expected_path = case.join("expected.yaml");
    match mode {
        Mode::Bless => std::fs::write(&expected_path, serde_yaml::to_string(&actual)?)
            .with_context(|| format!("writing {}", expected_path.display()))?,
        Mode::Check => compare(&expected_path, &actual)?,
    }
    check_idempotence(plugin, input, &actual, now)
}

/// Compares `actual` with the proposal in `expected_path`, structurally.
fn compare(expected_path: &Path, actual: &ProposedActions) -> Result<()> {
    let text = std::fs::read_to_string(expected_path).with_context(|| {
        format!(
            "reading {} (create it with --bless)",
            expected_path.display()
        )
    })?;
    let expected: ProposedActions = serde_yaml::from_str(&text).with_context(|| {
        format!(
            "{} is not a proposal in the shape of plugins/FIXTURES.md (`reconcile --bless` writes one)",
            expected_path.display()
        )
    })?;
    if &expected == actual {
        return Ok(());
    }
    Err(anyhow!(
        "the proposal differs from expected.yaml (- expected, + actual):\n{}",
        diff(
            &serde_yaml::to_string(&expected)?,
            &serde_yaml::to_string(actual)?
        )
    ))
}

/// Runs the plugin once on an offline input.
pub fn reconcile(
    plugin: &LoadedPlugin,
    input: &OfflineInput,
    now: SystemTime,
) -> Result<ProposedActions> {
    Ok(reconcile_outcome(plugin, input, now)?)
}

/// [`reconcile`], keeping the plugin's error as it is.
pub fn reconcile_outcome(
    plugin: &LoadedPlugin,
    input: &OfflineInput,
    now: SystemTime,
) -> Result<ProposedActions, PluginError> {
    plugin.reconcile_blocking(&input.jinghzhu, &input.pods, now)
}

/// Applies `first` and reconciles twice more (see the module docs).
pub fn check_idempotence(
    plugin: &LoadedPlugin,
    input: OfflineInput,
    first: &ProposedActions,
    now: SystemTime,
) -> Result<()> {
    let mut serial = NameSerial::default();
    let applied = simulate::apply(input, first, now, &mut serial);
    let second =
        reconcile(plugin, &applied, now).context("second reconcile (after applying the first)")?;
    if !second.create_pods.is_empty() || !second.delete_pods.is_empty() {
        bail!(
            "not idempotent: after applying its proposal, reconciling again still creates or deletes pods:\n{}",
            serde_yaml::to_string(&second)?
        );
    }
    let applied = simulate::apply(applied, &second, now, &mut serial);
    let third = reconcile(plugin, &applied, now).context("third reconcile")?;
    if !third.is_empty() {
        bail!(
            "not idempotent: the third reconcile still proposes something (expected {{}}):\n{}",
            serde_yaml::to_string(&third)?
        );
    }
    Ok(())
}
