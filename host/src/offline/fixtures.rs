//! Golden fixtures: `<dir>/<case>/input.yaml` + `expected.yaml` (+ an
//! optional `now`). Each case is reconciled and compared structurally with
//! its expected proposal, then checked for idempotence: applying the
//! proposal as the API server would and reconciling again proposes no pod
//! creates or deletes, and a third round proposes nothing at all.
//!
//! `--bless` rewrites only the `expected.yaml` files whose proposal changed
//! (structurally) and says which ([`Blessed`], [`bless_summary`]), so an
//! unchanged case keeps its file byte for byte.

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
    /// With [`Mode::Bless`]: what happened to its `expected.yaml` (`None`
    /// when the plugin failed before there was a proposal to write).
    pub blessed: Option<Blessed>,
}

/// What `--bless` did to a case's `expected.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blessed {
    /// It already held this proposal: left as it was.
    Unchanged,
    /// It held another proposal (or no readable one): rewritten.
    Changed,
    /// There was none: written.
    Created,
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
        .map(|case| run_case(plugin, case, mode))
        .collect())
}

/// The last line of `reconcile --fixtures --bless`, e.g. `blessed 2 of 5
/// cases in fixtures (changed: a, b; new: c); 3 unchanged, 0 failed`.
pub fn bless_summary(results: &[CaseResult], dir: &Path) -> String {
    let named = |kind: Blessed| -> Vec<&str> {
        results
            .iter()
            .filter(|r| r.blessed == Some(kind))
            .map(|r| r.name.as_str())
            .collect()
    };
    let (changed, created) = (named(Blessed::Changed), named(Blessed::Created));
    let mut which = Vec::new();
    if !changed.is_empty() {
        which.push(format!("changed: {}", changed.join(", ")));
    }
    if !created.is_empty() {
        which.push(format!("new: {}", created.join(", ")));
    }
    let which = if which.is_empty() {
        String::new()
    } else {
        format!(" ({})", which.join("; "))
    };
    format!(
        "blessed {} of {} cases in {}{which}; {} unchanged, {} failed",
        changed.len() + created.len(),
        results.len(),
        dir.display(),
        named(Blessed::Unchanged).len(),
        results.iter().filter(|r| r.failure.is_some()).count()
    )
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
    Ok((input, case_now(case)?))
}

/// A case's time: its `now` file, else [`DEFAULT_NOW`].
pub fn case_now(case: &Path) -> Result<SystemTime> {
    match std::fs::read_to_string(case.join("now")) {
        Ok(text) => parse_time(text.trim()).context("in the `now` file"),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => parse_time(DEFAULT_NOW),
        Err(err) => Err(err).context("reading the `now` file"),
    }
}

/// Runs one case directory.
pub fn run_case(plugin: &LoadedPlugin, case: &Path, mode: Mode) -> CaseResult {
    let mut blessed = None;
    let failure = check_case(plugin, case, mode, &mut blessed)
        .err()
        .map(|e| format!("{e:#}"));
    CaseResult {
        name: case_name(case),
        failure,
        blessed,
    }
}

/// Reconciles the case, compares (or blesses) and checks idempotence;
/// `blessed` says what happened to `expected.yaml` even when a later step fails.
fn check_case(
    plugin: &LoadedPlugin,
    case: &Path,
    mode: Mode,
    blessed: &mut Option<Blessed>,
) -> Result<()> {
    let (input, now) = read_case(case)?;
    let actual = reconcile(plugin, &input, now)?;
    let expected_path = case.join("expected.yaml");
    match mode {
        Mode::Bless => *blessed = Some(bless(&expected_path, &actual)?),
        Mode::Check => compare(&expected_path, &actual)?,
    }
    check_idempotence(plugin, input, &actual, now)
}

/// Writes `actual` (a proposal, or a 0.3 outcome) to `expected_path`
/// unless the file already holds it, structurally.
pub fn bless<T>(expected_path: &Path, actual: &T) -> Result<Blessed>
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq,
{
    let previous = match std::fs::read_to_string(expected_path) {
        Ok(text) => Some(text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => {
            return Err(err).with_context(|| format!("reading {}", expected_path.display()));
        }
    };
    if let Some(text) = &previous
        && serde_yaml::from_str::<T>(text).is_ok_and(|old| &old == actual)
    {
        return Ok(Blessed::Unchanged);
    }
    std::fs::write(expected_path, serde_yaml::to_string(actual)?)
        .with_context(|| format!("writing {}", expected_path.display()))?;
    Ok(if previous.is_some() {
        Blessed::Changed
    } else {
        Blessed::Created
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str, blessed: Option<Blessed>, failed: bool) -> CaseResult {
        CaseResult {
            name: name.into(),
            failure: failed.then(|| "boom".to_string()),
            blessed,
        }
    }

    #[test]
    fn the_bless_summary_names_the_cases_that_changed() {
        let dir = Path::new("fixtures");
        let results = [
            result("a", Some(Blessed::Changed), false),
            result("b", Some(Blessed::Unchanged), false),
            result("c", Some(Blessed::Created), false),
            result("d", Some(Blessed::Changed), false),
            result("e", None, true),
        ];
        assert_eq!(
            bless_summary(&results, dir),
            "blessed 3 of 5 cases in fixtures (changed: a, d; new: c); 1 unchanged, 1 failed"
        );
        let unchanged = [result("a", Some(Blessed::Unchanged), false)];
        assert_eq!(
            bless_summary(&unchanged, dir),
            "blessed 0 of 1 cases in fixtures; 1 unchanged, 0 failed"
        );
    }
}
