//! What a plugin proposes, in the host's own types: pods to create, pods to
//! delete, a status, a requeue-after and Events. The runtime converts the
//! WIT output into a [`ProposedActions`]; the controller validates and
//! applies it; `wasm-operator reconcile` prints it as YAML (and golden
//! fixtures store it in the same shape).
//!
//! ```yaml
//! createPods:
//! - generateName: web-
//!   labels: {app: web}
//!   spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}
//! deletePods: [web-abc12]
//! status: {current: 1, podList: [web-abc12], state: Running, message: "1/1 pods"}
//! requeueAfterMs: 30000
//! events:
//! - {type: Normal, reason: ScalingUp, message: Creating 1 pod}
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::crd::JinghzhuStatus;

/// A plugin's whole proposal for one object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProposedActions {
    /// Pods to create.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create_pods: Vec<PodToCreate>,
    /// Names of owned pods to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete_pods: Vec<String>,
    /// The status to write; `None` means leave it as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<JinghzhuStatus>,
    /// Reconcile again after this long even if nothing changes.
    #[serde(
        default,
        rename = "requeueAfterMs",
        with = "millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub requeue_after: Option<Duration>,
    /// Events to record on the object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<PluginEvent>,
}

impl ProposedActions {
    /// True when nothing would be done.
    pub fn is_empty(&self) -> bool {
        self.create_pods.is_empty()
            && self.delete_pods.is_empty()
            && self.status.is_none()
            && self.requeue_after.is_none()
            && self.events.is_empty()
    }
}

/// One pod to create. Exactly one of `name` and `generate_name` is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodToCreate {
    /// A fixed name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A prefix the API server completes with a random suffix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    /// The plugin's labels (the host adds its own on top).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The pod spec (a Kubernetes PodSpec as JSON). Creates with the same
    /// spec text share one value.
    #[serde(default, with = "shared_value")]
    pub spec: std::sync::Arc<serde_json::Value>,
}

/// An Event a plugin asks to record on its object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEvent {
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub type_: EventType,
    /// UpperCamelCase reason.
    pub reason: String,
    /// Human message.
    pub message: String,
}

/// Severity of a [`PluginEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    /// Nothing to worry about.
    Normal,
    /// Worth a look.
    Warning,
}

/// (De)serializes an `Arc<Value>` as the value (serde's `rc` feature
/// would rebuild the world for one field).
mod shared_value {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(value: &Arc<Value>, s: S) -> Result<S::Ok, S::Error> {
        value.as_ref().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Value>, D::Error> {
        Ok(Arc::new(Value::deserialize(d)?))
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_shape_round_trips() {
        let yaml = r#"
createPods:
- generateName: web-
  labels: {app: web}
  spec: {containers: [{name: app, image: "registry.k8s.io/pause:3.10"}]}
deletePods: [web-abc12]
status: {current: 1, podList: [web-abc12], state: Running, message: "1/1 pods", observedGeneration: 2}
requeueAfterMs: 30000
events:
- {type: Normal, reason: ScalingUp, message: Creating 1 pod}
"#;
        let actions: ProposedActions = serde_yaml::from_str(yaml).expect("parse");
        assert_eq!(actions.requeue_after, Some(Duration::from_secs(30)));
        assert_eq!(
            actions.create_pods[0].generate_name.as_deref(),
            Some("web-")
        );
        assert_eq!(actions.status.as_ref().map(|s| s.current), Some(1));
        let back: ProposedActions =
            serde_yaml::from_str(&serde_yaml::to_string(&actions).expect("print"))
                .expect("reparse");
        assert_eq!(back, actions);
        assert_eq!(
            serde_yaml::to_string(&ProposedActions::default())
                .expect("print")
                .trim(),
            "{}"
        );
    }
}
