//! The Event reasons the host reserves for itself, and the rule that keeps
//! plugins from using them.
//!
//! This module owns the list of every reason the host records an Event
//! with ([`HOST_REASONS`]; a test reads the host's source and fails when a
//! reason the host emits is missing here) and the output rule
//! [`RULE`] (`events/reserved-reason`): a proposal with a plugin Event that
//! uses one of these reasons (compared ignoring ASCII case) is rejected
//! whole, like any other broken proposal rule, so a plugin can never speak
//! with the host's voice (a plugin `SuccessfulCreate` folding into the
//! host's own, or a harmless plugin `RejectedOutput` hiding the host's).
//! The plugin Events the host does record are marked as the plugin's (see
//! [`crate::telemetry::events::PLUGIN_ACTION`]).

use crate::actions::PluginEvent;

/// Every Event reason the host itself records. Reserved: no plugin Event
/// may use one.
pub const HOST_REASONS: &[&str] = &[
    // Applying a proposal (apply).
    "SuccessfulCreate",
    "FailedCreate",
    "SuccessfulDelete",
    "FailedDelete",
    // Refusing a proposal or a call (controller::reconcile).
    "RejectedOutput",
    "PluginFailed",
    "InvalidTemplate",
    "WriteBudgetExceeded",
    // A declared controller's plan the API server failed, and a child
    // released for losing its label (declared).
    "FailedApply",
    "ReleasedChild",
    // A declared controller's shadow output refused by a rule (declared::shadow).
    "ShadowOutputRefused",
    // A declared controller's shadow calls dropped for a full queue (declared::shadow).
    "ShadowCallsDropped",
    // Objects the host cannot read (controller::watch).
    "InvalidObject",
    // A controlled pod that lost its labels alive (controller::strays).
    "PodLabelsRestored",
    // Plugins the host refuses to load (delivery).
    "PluginRefused",
    // A plugin source moving too often: its moves held (hotswap::damper).
    "PluginSourceFlapping",
];

/// The rule id of a plugin Event that uses a host reason.
pub const RULE: &str = "events/reserved-reason";

/// True when `reason` is one of [`HOST_REASONS`] (ignoring ASCII case).
pub fn is_reserved(reason: &str) -> bool {
    HOST_REASONS.iter().any(|r| r.eq_ignore_ascii_case(reason))
}

/// What is wrong with `events` under [`RULE`]: one message per distinct
/// reserved reason used (for the proposal's rejection, under [`RULE`]).
pub fn refused(events: &[PluginEvent]) -> Vec<String> {
    let mut used: Vec<&str> = Vec::new();
    for event in events {
        if is_reserved(&event.reason) && !used.contains(&event.reason.as_str()) {
            used.push(&event.reason);
        }
    }
    used.into_iter()
        .map(|reason| {
            format!(
                "event reason {reason:?} is reserved for the host's own Events; choose another reason"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;
    use crate::actions::EventType;

    fn event(reason: &str) -> PluginEvent {
        PluginEvent {
            type_: EventType::Normal,
            reason: reason.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn host_reasons_are_refused_once_each_and_others_pass() {
        let events = [
            event("Scaled"),
            event("SuccessfulCreate"),
            event("RejectedOutput"),
            event("SuccessfulCreate"),
            event("successfulcreate"),
        ];
        let found = refused(&events);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("\"SuccessfulCreate\""));
        assert!(refused(&[event("Scaled"), event("SandboxProbe")]).is_empty());
    }

    /// The reasons the host's own (non-test) code passes with a literal
    /// `EventType::Normal`/`Warning`: `publish(jz, EventType::Warning,
    /// "Reason", …)` or `Event { type_: EventType::Warning, reason:
    /// "Reason".into(), … }`.
    fn emitted_reasons(dir: &Path, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).expect("source directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                emitted_reasons(&path, found);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let source = std::fs::read_to_string(&path).expect("source file");
            let code = source
                .find("#[cfg(test)]\nmod ")
                .map_or(source.as_str(), |at| &source[..at]);
            for marker in ["EventType::Normal", "EventType::Warning"] {
                for (at, _) in code.match_indices(marker) {
                    let rest = code[at + marker.len()..]
                        .trim_start_matches(',')
                        .trim_start();
                    let rest = rest.strip_prefix("reason:").unwrap_or(rest).trim_start();
                    let Some(literal) = rest.strip_prefix('"') else {
                        continue;
                    };
                    let reason: String = literal.chars().take_while(|c| *c != '"').collect();
                    if crate::apply::names::is_event_reason(&reason) {
                        found.insert(reason);
                    }
                }
            }
        }
    }

    #[test]
    fn every_reason_the_host_emits_is_reserved() {
        let mut found = BTreeSet::new();
        emitted_reasons(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        // The scan sees the host's calls (else it proves nothing).
        for known in ["SuccessfulCreate", "RejectedOutput", "PluginFailed"] {
            assert!(found.contains(known), "{known} not found in {found:?}");
        }
        let missing: Vec<&String> = found.iter().filter(|r| !is_reserved(r)).collect();
        assert!(
            missing.is_empty(),
            "the host emits {missing:?}: add them to HOST_REASONS"
        );
    }
}
