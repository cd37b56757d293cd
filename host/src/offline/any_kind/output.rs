//! A contract 0.3 plugin's outcome in the readable form `expected.yaml`
//! holds and `reconcile` prints: the output's records with every JSON text
//! (`body-json`, `status-json`) parsed, labels and annotations as maps, or
//! the error the plugin returned. Every key is optional; `{}` is an output
//! that changes nothing. Unknown keys are an error, so a typo cannot pass.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::PluginError;
use crate::runtime::bindings::v3;

/// What one reconcile came to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Outcome {
    /// Children as the plugin wants them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apply: Vec<Child>,
    /// Children to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<ChildRef>,
    /// The parent's new status; absent: no status write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// Reconcile again after this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    /// Events on the parent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// The error the plugin returned (then nothing else is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Error>,
}

/// A desired child.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Child {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The plugin's labels (the host adds its own).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The plugin's annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Every other top-level field (`spec`, `data`, ...).
    #[serde(default)]
    pub body: Value,
}

/// A child to delete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChildRef {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Its name.
    pub name: String,
}

/// An Event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// e.g. `Scaled`.
    pub reason: String,
    /// A sentence.
    pub message: String,
}

/// The plugin's error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Error {
    /// What it said (or what the host said went wrong with the call).
    pub message: String,
    /// Whether the host would retry (`false` for a host-side failure).
    pub retryable: bool,
}

impl Outcome {
    /// The readable form of `output`.
    pub fn of(output: &v3::ReconcileOutput) -> Self {
        Self {
            apply: output
                .apply
                .iter()
                .map(|child| Child {
                    api_version: child.api_version.clone(),
                    kind: child.kind.clone(),
                    name: child.name.clone(),
                    labels: map(&child.labels),
                    annotations: map(&child.annotations),
                    body: json(&child.body_json),
                })
                .collect(),
            delete: output
                .delete
                .iter()
                .map(|gone| ChildRef {
                    api_version: gone.api_version.clone(),
                    kind: gone.kind.clone(),
                    name: gone.name.clone(),
                })
                .collect(),
            status: output.status_json.as_deref().map(json),
            requeue_after_ms: output.requeue_after_ms,
            events: output
                .events
                .iter()
                .map(|event| Event {
                    event_type: match event.event_type {
                        v3::EventType::Normal => "Normal",
                        v3::EventType::Warning => "Warning",
                    }
                    .into(),
                    reason: event.reason.clone(),
                    message: event.message.clone(),
                })
                .collect(),
            error: None,
        }
    }

    /// The outcome of a call that failed.
    pub fn failed(error: &PluginError) -> Self {
        let (message, retryable) = match error {
            PluginError::Returned { message, retryable } => (message.clone(), *retryable),
            other => (other.to_string(), false),
        };
        Self {
            error: Some(Error { message, retryable }),
            ..Self::default()
        }
    }

    /// Where `actual` differs from `self`, one short phrase per part
    /// (`apply Deployment cache`, `status`, ...), for the line above a diff.
    pub fn differences(&self, actual: &Outcome) -> Vec<String> {
        let mut out = Vec::new();
        if self.apply.len() != actual.apply.len() {
            out.push(format!(
                "apply: {} children expected, {} proposed",
                self.apply.len(),
                actual.apply.len()
            ));
        }
        for (expected, proposed) in self.apply.iter().zip(&actual.apply) {
            if expected != proposed {
                out.push(format!("apply {} {}", proposed.kind, proposed.name));
            }
        }
        let parts = [
            ("delete", self.delete != actual.delete),
            ("status", self.status != actual.status),
            (
                "requeueAfterMs",
                self.requeue_after_ms != actual.requeue_after_ms,
            ),
            ("events", self.events != actual.events),
            ("error", self.error != actual.error),
        ];
        out.extend(
            parts
                .iter()
                .filter(|(_, differs)| *differs)
                .map(|(part, _)| (*part).to_string()),
        );
        out
    }

    /// As YAML (a failure to print is said in the text).
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self)
            .unwrap_or_else(|err| format!("(cannot print the outcome: {err})\n"))
    }
}

/// Later keys win, as the host reads a list of pairs.
fn map(pairs: &[v3::KeyValue]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|pair| (pair.key.clone(), pair.value.clone()))
        .collect()
}

/// A JSON text parsed; one that is not JSON stays a string (the host's
/// checks refuse it before it is shown).
fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readable_form_parses_json_texts_and_reads_back() {
        let output = v3::ReconcileOutput {
            apply: vec![v3::DesiredChild {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "site".into(),
                labels: vec![
                    v3::KeyValue {
                        key: "app".into(),
                        value: "old".into(),
                    },
                    v3::KeyValue {
                        key: "app".into(),
                        value: "site".into(),
                    },
                ],
                annotations: Vec::new(),
                body_json: r#"{"data":{"index.html":"hi"}}"#.into(),
            }],
            delete: Vec::new(),
            status_json: Some(r#"{"ready":true}"#.into()),
            requeue_after_ms: None,
            events: vec![v3::Event {
                event_type: v3::EventType::Warning,
                reason: "Odd".into(),
                message: "m".into(),
            }],
        };
        let outcome = Outcome::of(&output);
        assert_eq!(outcome.apply[0].labels["app"], "site");
        assert_eq!(outcome.apply[0].body["data"]["index.html"], "hi");
        assert_eq!(outcome.status, Some(serde_json::json!({"ready": true})));
        let text = outcome.to_yaml();
        assert!(text.contains("type: Warning"), "{text}");
        let back: Outcome = serde_yaml::from_str(&text).expect("reads back");
        assert_eq!(back, outcome);
        assert!(serde_yaml::from_str::<Outcome>("applies: []").is_err());
        assert_eq!(
            serde_yaml::from_str::<Outcome>("{}").ok(),
            Some(Outcome::default())
        );
    }
}
