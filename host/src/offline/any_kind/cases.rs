//! Golden cases for a contract 0.3 plugin: `<dir>/<case>/input.yaml` (the
//! parent and its objects) + `expected.yaml` (the outcome, see
//! [`super::output`]) + an optional `now`, the layout of the 0.1/0.2 cases
//! (`plugins/FIXTURES.md`). Each case is reconciled, its output checked by
//! the host's rules for the declared controller (a refusal names its rule),
//! compared structurally with `expected.yaml` (a line diff on a mismatch),
//! then run on for idempotence: with the plan applied, a second reconcile
//! changes no child, and with that one applied a third writes nothing and
//! records no Event.

use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context, Result, anyhow, bail};
use kube::ResourceExt;

use super::OfflineDeclaration;
use super::input::{self, State};
use super::output::Outcome;
use super::simulate::{self, UidSerial};
use crate::declared::checks::{self, Parent, Plan};
use crate::declared::status_fields;
use crate::offline::diff::diff;
use crate::offline::fixtures::{Blessed, CaseResult, Mode, bless, case_name, case_now, cases};
use crate::refusal::Refusal;
use crate::runtime::bindings::v3;
use crate::runtime::{LoadedPlugin, PluginError};

/// Runs every case under `dir`.
pub fn run_all(
    plugin: &LoadedPlugin,
    declaration: &OfflineDeclaration,
    dir: &Path,
    mode: Mode,
) -> Result<Vec<CaseResult>> {
    Ok(cases(dir)?
        .iter()
        .map(|case| run_case(plugin, declaration, case, mode))
        .collect())
}

/// Runs one case directory.
pub fn run_case(
    plugin: &LoadedPlugin,
    declaration: &OfflineDeclaration,
    case: &Path,
    mode: Mode,
) -> CaseResult {
    let mut blessed = None;
    let failure = check_case(plugin, declaration, case, mode, &mut blessed)
        .err()
        .map(|e| format!("{e:#}"));
    CaseResult {
        name: case_name(case),
        failure,
        blessed,
    }
}

/// A case's objects and the time it is reconciled at.
pub fn read_case(case: &Path, declaration: &OfflineDeclaration) -> Result<(State, SystemTime)> {
    let state = input::read(&[case.join("input.yaml")], declaration)?;
    Ok((state, case_now(case)?))
}

/// Runs the plugin once on `state`.
pub fn call(
    plugin: &LoadedPlugin,
    declaration: &OfflineDeclaration,
    state: &State,
    now: SystemTime,
) -> Result<v3::ReconcileOutput, PluginError> {
    let input = state.input(declaration, now);
    crate::runtime::block_on(plugin.call_generic(&input, &state.parent_key()))?
}

/// The host's checks of `output` for `state`'s parent (the output rules,
/// then whether each existing child is the parent's to write): the plan
/// it would apply, or an error naming the broken rule.
pub fn check(
    declaration: &OfflineDeclaration,
    state: &State,
    output: v3::ReconcileOutput,
) -> Result<Plan> {
    let (name, namespace, uid) = (state.parent.name_any(), state.namespace(), state.uid());
    let owned: Vec<_> = state
        .owned()
        .iter()
        .map(|kind| {
            kind.iter()
                .map(|child| (child.name_any(), child.uid().unwrap_or_default()))
                .collect()
        })
        .collect();
    let about = Parent {
        name: &name,
        namespace: &namespace,
        uid: &uid,
    };
    let refused = |refusal: Refusal| {
        anyhow!(
            "the host refuses this output by the rule `{}`: {}",
            refusal.rule,
            refusal.message
        )
    };
    let plan = checks::check(&declaration.declared(), &about, &owned, output).map_err(refused)?;
    simulate::settle(state, &plan, &declaration.name).map_err(refused)?;
    // As the host: a status equal to the stored one is not written, so
    // not checked.
    if let Some(status) = &plan.status
        && Some(status) != state.parent.data.get("status")
    {
        let fields = &declaration.checked_status;
        let shown =
            status_fields::Snapshot::of(fields, &state.input(declaration, SystemTime::UNIX_EPOCH));
        status_fields::check(fields, &shown, status).map_err(refused)?;
    }
    Ok(plan)
}

/// Reconciles, checks, compares (or blesses) and runs on for idempotence.
fn check_case(
    plugin: &LoadedPlugin,
    declaration: &OfflineDeclaration,
    case: &Path,
    mode: Mode,
    blessed: &mut Option<Blessed>,
) -> Result<()> {
    let (state, now) = read_case(case, declaration)?;
    let (outcome, plan) = match call(plugin, declaration, &state, now) {
        Ok(output) => (
            Outcome::of(&output),
            Some(check(declaration, &state, output)?),
        ),
        Err(err) => (Outcome::failed(&err), None),
    };
    let expected_path = case.join("expected.yaml");
    match mode {
        Mode::Bless => *blessed = Some(bless(&expected_path, &outcome)?),
        Mode::Check => compare(&expected_path, &outcome)?,
    }
    match plan {
        Some(plan) => check_idempotence(plugin, declaration, state, &plan, now),
        None => Ok(()),
    }
}

/// Compares `outcome` with the one in `path`, structurally.
fn compare(path: &Path, outcome: &Outcome) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} (create it with --bless)", path.display()))?;
    let expected: Outcome = serde_yaml::from_str(&text).with_context(|| {
        format!(
            "{} is not an outcome in the shape of docs/writing-controllers.md (apply, delete, status, \
             requeueAfterMs, events, error; `reconcile --bless` writes one)",
            path.display()
        )
    })?;
    if &expected == outcome {
        return Ok(());
    }
    Err(anyhow!(
        "the outcome differs from expected.yaml in {} (- expected, + actual):\n{}",
        expected.differences(outcome).join(", "),
        diff(&expected.to_yaml(), &outcome.to_yaml())
    ))
}

/// Applies `first` and reconciles twice more (see the module docs).
pub fn check_idempotence(
    plugin: &LoadedPlugin,
    declaration: &OfflineDeclaration,
    state: State,
    first: &Plan,
    now: SystemTime,
) -> Result<()> {
    let mut serial = UidSerial::default();
    let state = simulate::apply(state, first, now, &mut serial);
    let output = call(plugin, declaration, &state, now)
        .context("second reconcile (after applying the first)")?;
    let shown = Outcome::of(&output).to_yaml();
    let second = check(declaration, &state, output).context("second reconcile")?;
    let changes = simulate::child_writes(&state, &second);
    if !changes.is_empty() {
        bail!(
            "not idempotent: after applying its output, reconciling again still {}:\n{shown}",
            changes.join(", ")
        );
    }
    let state = simulate::apply(state, &second, now, &mut serial);
    let output = call(plugin, declaration, &state, now).context("third reconcile")?;
    let shown = Outcome::of(&output).to_yaml();
    let third = check(declaration, &state, output).context("third reconcile")?;
    let mut writes = simulate::child_writes(&state, &third);
    if simulate::status_write(&state, &third) {
        writes.push("writes a new status".into());
    }
    if !third.events.is_empty() {
        writes.push(format!("records {} Event(s)", third.events.len()));
    }
    if !writes.is_empty() {
        bail!(
            "not idempotent: the third reconcile still {} (expected no write and no Event):\n{shown}",
            writes.join(", ")
        );
    }
    Ok(())
}
