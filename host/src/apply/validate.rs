//! Checks a plugin's whole proposal against the host's rules before any of
//! it is applied. Every broken rule is reported at once, so a plugin author
//! sees the full list in one Event.
//!
//! The rules: creates within the burst and per-object limits, each with a
//! valid name or generateName, valid labels and annotations, and a pod spec
//! that parses and passes the pod policy (no host namespaces, no privileged
//! containers, no hostPath volumes, no pinning to a node); deletes name only
//! live pods this Jinghzhu controls, each once; status and Events within the
//! API's size limits.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::ResourceExt;

use super::names;
use crate::actions::{PodToCreate, ProposedActions};
use crate::crd::Jinghzhu;

/// What a plugin may propose in one reconcile.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most pods created by one reconcile (the ReplicaSet controller's burst is 500).
    pub max_creates: usize,
    /// Most pods one Jinghzhu may have after the proposal is applied.
    pub max_pods_per_object: usize,
    /// Most Events one reconcile may record.
    pub max_events: usize,
    /// Shortest requeue-after honoured (shorter ones are raised to it).
    pub min_requeue: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_creates: 500,
            max_pods_per_object: 1000,
            max_events: 20,
            min_requeue: Duration::from_secs(1),
        }
    }
}

/// The rules a proposal broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection(pub Vec<String>);

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

impl std::error::Error for Rejection {}

/// Checks `proposal` for `jz`, whose owned pods are `owned`.
pub fn validate(
    jz: &Jinghzhu,
    owned: &[Pod],
    proposal: &ProposedActions,
    limits: &Limits,
) -> Result<(), Rejection> {
    let mut broken = Vec::new();

    let live: Vec<&Pod> = owned
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let live_names: HashSet<String> = live.iter().map(|p| p.name_any()).collect();
    let all_names: HashSet<String> = owned.iter().map(|p| p.name_any()).collect();

    if proposal.create_pods.len() > limits.max_creates {
        broken.push(format!(
            "{} pod creates exceed the limit of {} per reconcile",
            proposal.create_pods.len(),
            limits.max_creates
        ));
    }
    let after =
        (live.len() + proposal.create_pods.len()).saturating_sub(proposal.delete_pods.len());
    if after > limits.max_pods_per_object {
        broken.push(format!(
            "the proposal leaves {after} pods, more than the limit of {} per object",
            limits.max_pods_per_object
        ));
    }
    let mut new_names = HashSet::new();
    // Report at most a few bad creates: a plugin creating 10 000 bad pods
    // should not produce a 10 000-line Event.
    let mut create_problems = Vec::new();
    for (i, create) in proposal.create_pods.iter().enumerate() {
        for problem in check_create(create, &all_names, &mut new_names) {
            create_problems.push(format!("create #{i}: {problem}"));
        }
    }
    let more = create_problems.len().saturating_sub(5);
    broken.extend(create_problems.into_iter().take(5));
    if more > 0 {
        broken.push(format!("…and {more} more problems with creates"));
    }

    let mut seen = HashSet::new();
    for name in &proposal.delete_pods {
        if !seen.insert(name.as_str()) {
            broken.push(format!("pod {name:?} is deleted twice"));
        } else if !all_names.contains(name) {
            broken.push(format!(
                "delete of pod {name:?}, which {} does not own",
                jz.name_any()
            ));
        } else if !live_names.contains(name) {
            broken.push(format!(
                "delete of pod {name:?}, which is already terminating"
            ));
        }
    }

    if let Some(status) = &proposal.status {
        if status.state.len() > 64 {
            broken.push("status.state is longer than 64 characters".into());
        }
        if status.message.len() > 4096 {
            broken.push("status.message is longer than 4096 bytes".into());
        }
        if status.pod_list.len() > limits.max_pods_per_object {
            broken.push("status.podList is longer than the pod limit".into());
        }
    }

    if proposal.events.len() > limits.max_events {
        broken.push(format!(
            "{} events exceed the limit of {} per reconcile",
            proposal.events.len(),
            limits.max_events
        ));
    }
    for event in &proposal.events {
        if !names::is_event_reason(&event.reason) {
            broken.push(format!(
                "event reason {:?} is not UpperCamelCase letters and digits (max 128)",
                event.reason
            ));
        }
        if event.message.len() > 1024 {
            broken.push(format!(
                "event {:?} has a message over 1024 bytes",
                event.reason
            ));
        }
    }

    if broken.is_empty() {
        Ok(())
    } else {
        Err(Rejection(broken))
    }
}

fn check_create(
    create: &PodToCreate,
    existing: &HashSet<String>,
    new_names: &mut HashSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    match (&create.name, &create.generate_name) {
        (Some(name), None) => {
            if !names::is_pod_name(name) {
                problems.push(format!(
                    "pod name {name:?} is not a DNS-1123 label (lowercase letters, digits, '-', max 63)"
                ));
            } else if existing.contains(name) || !new_names.insert(name.clone()) {
                problems.push(format!("pod name {name:?} is already taken"));
            }
        }
        (None, Some(prefix)) => {
            if !names::is_pod_generate_name(prefix) {
                problems.push(format!(
                    "generateName {prefix:?} is not a valid pod name prefix (lowercase letters, digits, '-', max 58)"
                ));
            }
        }
        _ => problems.push("exactly one of name and generateName must be set".into()),
    }
    for (key, value) in &create.labels {
        if !names::is_qualified_key(key) {
            problems.push(format!("label key {key:?} is invalid"));
        }
        if !names::is_label_value(value) {
            problems.push(format!("label {key}={value:?}: invalid value"));
        }
    }
    let mut annotation_bytes = 0;
    for (key, value) in &create.annotations {
        annotation_bytes += key.len() + value.len();
        if !names::is_qualified_key(key) {
            problems.push(format!("annotation key {key:?} is invalid"));
        }
    }
    if annotation_bytes > 256 * 1024 {
        problems.push("annotations exceed 256 KiB".into());
    }
    match serde_json::from_value::<PodSpec>(create.spec.clone()) {
        Ok(spec) => problems.extend(pod_policy(&spec)),
        Err(err) => problems.push(format!("the pod spec is not a valid PodSpec: {err}")),
    }
    problems
}

/// The pod policy: what no plugin may ask for, whatever its template says.
fn pod_policy(spec: &PodSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if spec.containers.is_empty() {
        problems.push("the pod spec has no containers".into());
    }
    for (flag, set) in [
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ] {
        if set == Some(true) {
            problems.push(format!("{flag} is not allowed"));
        }
    }
    if spec.node_name.is_some() {
        problems.push("nodeName is not allowed (the scheduler places pods)".into());
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        let sc = c.security_context.as_ref();
        if sc.and_then(|s| s.privileged) == Some(true) {
            problems.push(format!("container {:?} is privileged", c.name));
        }
        if sc.and_then(|s| s.allow_privilege_escalation) == Some(true) {
            problems.push(format!(
                "container {:?} allows privilege escalation",
                c.name
            ));
        }
    }
    for v in spec.volumes.iter().flatten() {
        if v.host_path.is_some() {
            problems.push(format!("volume {:?} is a hostPath", v.name));
        }
    }
    problems
}
