//! `reconcile --compare-with OLD`: the offline twin of shadow mode. Two
//! plugins run on the same inputs (every fixture case, or one input); where
//! their outcomes differ, a diff says how (`-` old, `+` new).
//!
//! Proposals are compared structurally, as shadow mode does
//! ([`crate::slot::shadow::differences_between`] gives the one-line
//! summary shadow mode logs); here the whole YAML diff follows it. A plugin
//! error is an outcome too: two plugins that fail the same way agree.

use std::path::Path;
use std::time::SystemTime;

use anyhow::Result;

use super::diff::diff;
use super::fixtures::{self, case_name, read_case};
use super::input::OfflineInput;
use crate::actions::ProposedActions;
use crate::runtime::{LoadedPlugin, PluginError};
use crate::slot::shadow;

/// How two plugins fared on one case.
#[derive(Debug)]
pub struct Comparison {
    /// The case's name.
    pub name: String,
    /// `None` when they agree; else the differences, as readable text.
    pub difference: Option<String>,
}

/// Compares `new` with `old` on every case under `dir`. A case that cannot
/// be read is reported as a difference (it says why), so nothing is skipped
/// silently.
pub fn compare_cases(
    new: &LoadedPlugin,
    old: &LoadedPlugin,
    dir: &Path,
) -> Result<Vec<Comparison>> {
    Ok(fixtures::cases(dir)?
        .iter()
        .map(|case| Comparison {
            name: case_name(case),
            difference: match read_case(case) {
                Ok((input, now)) => compare_input(new, old, &input, now),
                Err(err) => Some(format!("cannot read the case: {err:#}")),
            },
        })
        .collect())
}

/// Runs both plugins on `input` at `now`; `None` when their outcomes agree.
pub fn compare_input(
    new: &LoadedPlugin,
    old: &LoadedPlugin,
    input: &OfflineInput,
    now: SystemTime,
) -> Option<String> {
    let old_outcome = fixtures::reconcile_outcome(old, input, now);
    let new_outcome = fixtures::reconcile_outcome(new, input, now);
    describe_difference(&old_outcome, &new_outcome)
}

/// The difference between two outcomes, or `None` when they agree.
pub fn describe_difference(
    old: &Result<ProposedActions, PluginError>,
    new: &Result<ProposedActions, PluginError>,
) -> Option<String> {
    match (old, new) {
        (Ok(a), Ok(b)) if a == b => None,
        (Err(a), Err(b)) if a.to_string() == b.to_string() => None,
        (Ok(a), Ok(b)) => Some(format!(
            "{}\n{}",
            shadow::differences_between(a, b, ("old", "new")).join("; "),
            diff(&outcome_text(old), &outcome_text(new)).trim_end()
        )),
        _ => Some(
            diff(&outcome_text(old), &outcome_text(new))
                .trim_end()
                .to_string(),
        ),
    }
}

/// An outcome as the YAML `reconcile` prints, or the error.
fn outcome_text(outcome: &Result<ProposedActions, PluginError>) -> String {
    match outcome {
        Ok(actions) => serde_yaml::to_string(actions)
            .unwrap_or_else(|err| format!("(cannot print the proposal: {err})\n")),
        Err(err) => format!("error: {err}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::JinghzhuStatus;

    fn with_message(message: &str) -> ProposedActions {
        ProposedActions {
            status: Some(JinghzhuStatus {
                current: 1,
                pod_list: vec!["web-a".into()],
                state: "Running".into(),
                message: message.into(),
                observed_generation: Some(1),
                ..JinghzhuStatus::default()
            }),
            ..ProposedActions::default()
        }
    }

    #[test]
    fn equal_outcomes_agree_and_different_ones_show_a_diff() {
        let a = Ok(with_message("1/1 pods"));
        assert_eq!(describe_difference(&a, &Ok(with_message("1/1 pods"))), None);
        let text = describe_difference(&a, &Ok(with_message("[v2] 1/1 pods"))).expect("differs");
        assert!(
            text.contains("- status") || text.contains("-   message: 1/1 pods"),
            "{text}"
        );
        assert!(text.contains("+   message: '[v2] 1/1 pods'"), "{text}");
        let failed = Err(PluginError::Returned {
            message: "boom".into(),
            retryable: true,
        });
        let text = describe_difference(&a, &failed).expect("differs");
        assert!(
            text.contains("+ error: the plugin returned an error (retryable): boom"),
            "{text}"
        );
        let same_failure = Err(PluginError::Returned {
            message: "boom".into(),
            retryable: true,
        });
        assert_eq!(describe_difference(&failed, &same_failure), None);
    }
}
