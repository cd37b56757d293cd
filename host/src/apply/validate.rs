//! Checks a plugin's whole proposal against the host's rules before any of
//! it is applied. Two passes, cheapest first:
//!
//! 1. [`check_bounds`] on the output exactly as the plugin returned it
//!    (the WIT records), before the host converts or parses anything:
//!    counts (creates within the burst limit and what `spec.desired` can
//!    justify, deletes within the live pods, Events, podList) and sizes
//!    (names, labels, specs, status and Event texts). A proposal of 200 000
//!    creates is refused here at the cost of reading one length.
//! 2. [`validate`] on the converted proposal: names and labels valid and
//!    free, each distinct pod spec parsed once and checked against the pod
//!    policy ([`super::policy`]), deletes naming live pods this Jinghzhu
//!    controls, Event reasons well-formed.
//!
//! Every broken rule is reported with a stable rule id (e.g.
//! `limits/creates-beyond-desired`, `restricted/capabilities`), at most a
//! bounded number at once, so a plugin author sees the list in one Event.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::ResourceExt;

use super::names;
use super::policy::{self, PolicyConfig, Violation};
use crate::actions::{PodToCreate, ProposedActions};
use crate::crd::Jinghzhu;
use crate::runtime::bindings as wit;

/// What a plugin may propose in one reconcile.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most pods created by one reconcile (the ReplicaSet controller's burst is 500).
    pub max_creates: usize,
    /// Pods a reconcile may create beyond what `spec.desired` justifies
    /// (`desired - live pods it keeps`), e.g. to replace a pod before
    /// deleting it.
    pub max_surge: usize,
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
            max_surge: 0,
            max_pods_per_object: 1000,
            max_events: 20,
            min_requeue: Duration::from_secs(1),
        }
    }
}

/// Longest `status.state`.
pub const MAX_STATE_LEN: usize = 64;
/// Longest `status.message` and Event message.
pub const MAX_MESSAGE_LEN: usize = 4096;
/// Longest Event message a plugin may ask for.
pub const MAX_EVENT_MESSAGE_LEN: usize = 1024;
/// Longest pod spec (JSON) of one create.
pub const MAX_SPEC_BYTES: usize = 64 * 1024;
/// Most labels, and most annotations, on one created pod.
pub const MAX_LABELS: usize = 64;
/// Most bytes of one created pod's annotations.
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;
/// Most violations listed in one rejection (the rest are counted).
pub const MAX_LISTED: usize = 12;

/// The rules a proposal broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection(pub Vec<Violation>);

impl Rejection {
    /// The distinct rule ids broken, in order of first appearance.
    pub fn rules(&self) -> Vec<&'static str> {
        let mut seen = HashSet::new();
        self.0
            .iter()
            .map(|v| v.rule)
            .filter(|rule| seen.insert(*rule))
            .collect()
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let listed: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&listed.join("; "))
    }
}

impl std::error::Error for Rejection {}

/// Collects violations, listing at most [`MAX_LISTED`].
#[derive(Default)]
struct Broken {
    listed: Vec<Violation>,
    more: usize,
}

impl Broken {
    fn push(&mut self, rule: &'static str, message: impl FnOnce() -> String) {
        if self.listed.len() < MAX_LISTED {
            self.listed.push(Violation {
                rule,
                message: message(),
            });
        } else {
            self.more += 1;
        }
    }

    fn extend(&mut self, context: &str, violations: &[Violation]) {
        for v in violations {
            self.push(v.rule, || format!("{context}: {}", v.message));
        }
    }

    fn finish(mut self) -> Result<(), Rejection> {
        if self.listed.is_empty() {
            return Ok(());
        }
        if self.more > 0 {
            self.listed.push(Violation {
                rule: "limits/more",
                message: format!("…and {} more", self.more),
            });
        }
        Err(Rejection(self.listed))
    }
}

/// True for a pod that counts towards `desired`: not terminating and not
/// finished (`Succeeded` or `Failed`).
pub fn is_live(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// The first pass: counts and sizes of the output as the plugin returned
/// it, before any per-create work. `owned` are the pods `jz` controls.
pub fn check_bounds(
    out: &wit::ReconcileOutput,
    jz: &Jinghzhu,
    owned: &[Pod],
    limits: &Limits,
) -> Result<(), Rejection> {
    let mut broken = Broken::default();
    let live = owned.iter().filter(|p| is_live(p)).count();
    let not_terminating = owned
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count();
    let creates = out.create_pods.len();
    let deletes = out.delete_pods.len();

    if creates > limits.max_creates {
        broken.push("limits/creates-per-reconcile", || {
            format!(
                "{creates} pod creates exceed the limit of {} per reconcile",
                limits.max_creates
            )
        });
    }
    // What `desired` can justify: the pods missing once the deletes are
    // done, plus the surge.
    let kept = live.saturating_sub(deletes);
    let desired = usize::try_from(jz.spec.desired).unwrap_or(usize::MAX);
    let justified = desired
        .saturating_sub(kept)
        .saturating_add(limits.max_surge);
    if creates > justified {
        broken.push("limits/creates-beyond-desired", || {
            format!(
                "{creates} pod creates, but desired {desired} with {kept} live pods kept justifies \
                 at most {justified} (surge {})",
                limits.max_surge
            )
        });
    }
    if deletes > not_terminating {
        broken.push("limits/deletes-beyond-live", || {
            format!("{deletes} pod deletes, but only {not_terminating} pods are not terminating")
        });
    }
    let after = not_terminating
        .saturating_add(creates)
        .saturating_sub(deletes);
    if after > limits.max_pods_per_object {
        broken.push("limits/pods-per-object", || {
            format!(
                "the proposal leaves {after} pods, more than the limit of {} per object",
                limits.max_pods_per_object
            )
        });
    }
    for (i, create) in out.create_pods.iter().enumerate() {
        if create.spec_json.len() > MAX_SPEC_BYTES {
            broken.push("limits/spec-size", || {
                format!(
                    "create #{i}: the pod spec is {} bytes, over {MAX_SPEC_BYTES}",
                    create.spec_json.len()
                )
            });
        }
        if create.labels.len() > MAX_LABELS || create.annotations.len() > MAX_LABELS {
            broken.push("limits/labels", || {
                format!("create #{i}: more than {MAX_LABELS} labels or annotations")
            });
        }
        let annotation_bytes: usize = create
            .annotations
            .iter()
            .map(|kv| kv.key.len() + kv.value.len())
            .sum();
        if annotation_bytes > MAX_ANNOTATION_BYTES {
            broken.push("limits/annotations-size", || {
                format!("create #{i}: annotations exceed {MAX_ANNOTATION_BYTES} bytes")
            });
        }
        let name_len = create.name.as_ref().map_or(0, String::len)
            + create.generate_name.as_ref().map_or(0, String::len);
        if name_len > names::MAX_NAME_LEN {
            broken.push("names/pod-name", || {
                format!(
                    "create #{i}: name or generateName longer than {}",
                    names::MAX_NAME_LEN
                )
            });
        }
    }
    if let Some(status) = &out.status {
        if status.state.len() > MAX_STATE_LEN {
            broken.push("limits/status-size", || {
                format!("status.state is longer than {MAX_STATE_LEN} bytes")
            });
        }
        if status.message.len() > MAX_MESSAGE_LEN {
            broken.push("limits/status-size", || {
                format!("status.message is longer than {MAX_MESSAGE_LEN} bytes")
            });
        }
        if status.pod_list.len() > limits.max_pods_per_object {
            broken.push("limits/status-size", || {
                format!(
                    "status.podList has {} entries, more than the pod limit of {}",
                    status.pod_list.len(),
                    limits.max_pods_per_object
                )
            });
        }
        if status
            .pod_list
            .iter()
            .any(|n| n.len() > names::MAX_NAME_LEN)
        {
            broken.push("limits/status-size", || {
                format!(
                    "status.podList has a name longer than {}",
                    names::MAX_NAME_LEN
                )
            });
        }
    }
    if out.events.len() > limits.max_events {
        broken.push("limits/events", || {
            format!(
                "{} events exceed the limit of {} per reconcile",
                out.events.len(),
                limits.max_events
            )
        });
    }
    for event in &out.events {
        if event.message.len() > MAX_EVENT_MESSAGE_LEN || event.reason.len() > 128 {
            broken.push("limits/event-size", || {
                format!(
                    "an event's reason is over 128 bytes or its message over {MAX_EVENT_MESSAGE_LEN} bytes"
                )
            });
        }
    }
    broken.finish()
}

/// A proposal that passed [`validate`]: the parsed spec of each create, in
/// order (creates sharing one spec share one parse).
#[derive(Debug, Clone, Default)]
pub struct Validated {
    /// The pod spec of `create_pods[i]`.
    pub specs: Vec<Arc<PodSpec>>,
}

/// The pod spec pods of `jz` are made from: its template's, or the host's
/// default template.
pub fn template_spec(jz: &Jinghzhu) -> &PodSpec {
    jz.spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .unwrap_or_else(|| policy::default_template())
}

/// The second pass: checks `proposal` for `jz`, whose owned pods are
/// `owned`, under the pod policy `config`.
pub fn validate(
    jz: &Jinghzhu,
    owned: &[Pod],
    proposal: &ProposedActions,
    config: &PolicyConfig,
) -> Result<Validated, Rejection> {
    let mut broken = Broken::default();

    let all_names: HashSet<String> = owned.iter().map(|p| p.name_any()).collect();
    let live_names: HashSet<String> = owned
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    let template = template_spec(jz);
    let empty = std::collections::BTreeMap::new();
    let template_meta = jz.spec.template.as_ref().and_then(|t| t.metadata.as_ref());
    let template_labels = template_meta
        .and_then(|m| m.labels.as_ref())
        .unwrap_or(&empty);
    let template_annotations = template_meta
        .and_then(|m| m.annotations.as_ref())
        .unwrap_or(&empty);

    // Each distinct spec (by identity: the conversion shares one value
    // between creates with the same spec text) is parsed and checked once.
    let mut parsed: HashMap<*const serde_json::Value, Result<Arc<PodSpec>, Vec<Violation>>> =
        HashMap::new();
    let mut specs = Vec::with_capacity(proposal.create_pods.len());
    let mut new_names = HashSet::new();
    for (i, create) in proposal.create_pods.iter().enumerate() {
        check_names(i, create, &all_names, &mut new_names, &mut broken);
        broken.extend(
            &format!("create #{i}"),
            &policy::check_metadata(
                &create.labels,
                &create.annotations,
                template_labels,
                template_annotations,
                config,
            ),
        );
        let key = Arc::as_ptr(&create.spec);
        let spec = parsed.entry(key).or_insert_with(|| {
            match serde_json::from_value::<PodSpec>((*create.spec).clone()) {
                Ok(spec) => {
                    let violations = policy::check_spec(&spec, template, config);
                    if violations.is_empty() {
                        Ok(Arc::new(spec))
                    } else {
                        Err(violations)
                    }
                }
                Err(err) => Err(vec![Violation {
                    rule: "spec/invalid",
                    message: format!("the pod spec is not a valid PodSpec: {err}"),
                }]),
            }
        });
        match spec {
            Ok(spec) => specs.push(Arc::clone(spec)),
            Err(violations) => {
                // The same spec's problems are listed once, for its first create.
                let first = proposal.create_pods[..i]
                    .iter()
                    .all(|c| Arc::as_ptr(&c.spec) != key);
                if first {
                    broken.extend(&format!("create #{i}"), violations);
                }
            }
        }
    }

    let mut seen = HashSet::new();
    for name in &proposal.delete_pods {
        if !seen.insert(name.as_str()) {
            broken.push("deletes/twice", || format!("pod {name:?} is deleted twice"));
        } else if !all_names.contains(name) {
            broken.push("deletes/not-owned", || {
                format!(
                    "delete of pod {name:?}, which {} does not own",
                    jz.name_any()
                )
            });
        } else if !live_names.contains(name) {
            broken.push("deletes/terminating", || {
                format!("delete of pod {name:?}, which is already terminating")
            });
        }
    }

    for event in &proposal.events {
        if !names::is_event_reason(&event.reason) {
            broken.push("events/reason", || {
                format!(
                    "event reason {:?} is not UpperCamelCase letters and digits (max 128)",
                    crate::runtime::state::escape_control(&event.reason, 64)
                )
            });
        }
    }
    broken.finish()?;
    Ok(Validated { specs })
}

fn check_names(
    i: usize,
    create: &PodToCreate,
    existing: &HashSet<String>,
    new_names: &mut HashSet<String>,
    broken: &mut Broken,
) {
    match (&create.name, &create.generate_name) {
        (Some(name), None) => {
            if !names::is_pod_name(name) {
                broken.push("names/pod-name", || {
                    format!(
                        "create #{i}: pod name {name:?} is not a DNS-1123 label (lowercase letters, digits, '-', max 63)"
                    )
                });
            } else if existing.contains(name) || !new_names.insert(name.clone()) {
                broken.push("names/taken", || {
                    format!("create #{i}: pod name {name:?} is already taken")
                });
            }
        }
        (None, Some(prefix)) => {
            if !names::is_pod_generate_name(prefix) {
                broken.push("names/generate-name", || {
                    format!(
                        "create #{i}: generateName {prefix:?} is not a valid pod name prefix (lowercase letters, digits, '-', max 58)"
                    )
                });
            }
        }
        _ => broken.push("names/pod-name", || {
            format!("create #{i}: exactly one of name and generateName must be set")
        }),
    }
    for (key, value) in &create.labels {
        if !names::is_qualified_key(key) || !names::is_label_value(value) {
            broken.push("names/label", || {
                format!("create #{i}: label {key:?}={value:?} is not a valid label")
            });
        }
    }
    for key in create.annotations.keys() {
        if !names::is_qualified_key(key) {
            broken.push("names/annotation", || {
                format!("create #{i}: annotation key {key:?} is invalid")
            });
        }
    }
}
