//! Checks a plugin's whole proposal against the host's rules before any of
//! it is applied. Two passes, cheapest first:
//!
//! 1. [`check_bounds`] on the output exactly as the plugin returned it
//!    (the WIT records), before the host converts or parses anything:
//!    counts (creates within the burst limit and what `spec.desired` can
//!    justify, deletes within the live pods, Events, podList) and sizes
//!    (names, labels, specs, status and Event texts), and the object's
//!    [pod metadata budget](Limits::pod_metadata_budget). A proposal of
//!    200 000 creates is refused here at the cost of reading one length.
//! 2. [`validate`] on the converted proposal: names and labels valid and
//!    free, each distinct pod spec parsed once and checked against the pod
//!    policy ([`super::policy`]), deletes naming live pods this Jinghzhu
//!    controls, Event reasons well-formed, and the status's observable
//!    fields what the host observed ([`super::status_rules`]).
//!
//! Every broken rule is reported with a stable rule id (e.g.
//! `limits/creates-beyond-desired`, `restricted/capabilities`), at most a
//! bounded number at once, so a plugin author sees the list in one Event.

use std::collections::{BTreeMap, HashMap, HashSet};
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
    /// Most bytes of labels and annotations (keys and values) the plugin
    /// may have written on one object's pods together (see
    /// [`MetadataBudget`]): what it makes the host cache for the object grows
    /// with what it writes only up to this (`--pod-metadata-budget-kib`).
    pub pod_metadata_budget: usize,
    /// The label/annotation key prefixes a plugin may write beyond the
    /// template's keys (the pod policy's `--allowed-label-prefix`): on pods
    /// that exist, only keys under them count towards the budget, so
    /// metadata others put on the pods (a mesh injector's) never does.
    pub plugin_key_prefixes: Vec<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_creates: 500,
            max_surge: 0,
            max_pods_per_object: 1000,
            max_events: 20,
            min_requeue: Duration::from_secs(1),
            pod_metadata_budget: DEFAULT_POD_METADATA_BUDGET,
            plugin_key_prefixes: vec![policy::DEFAULT_PLUGIN_KEY_PREFIX.to_string()],
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
/// Most bytes (keys and values) of the labels and annotations a plugin
/// writes on one created pod, beyond the template's own
/// (`limits/pod-metadata-size`). It was 256 KiB of annotations, the API
/// server's own limit; against a budget of 64 KiB per object that bought
/// nothing but pods the cache holds whole.
pub const MAX_POD_METADATA_BYTES: usize = 16 * 1024;
/// The default of [`Limits::pod_metadata_budget`]: 64 KiB per object.
pub const DEFAULT_POD_METADATA_BUDGET: usize = 64 * 1024;
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
    let budget = MetadataBudget::new(jz, &limits.plugin_key_prefixes);
    if let Some(total) = budget.exceeded(out, owned, limits.pod_metadata_budget) {
        broken.push("limits/pod-metadata-budget", || {
            format!(
                "the proposal leaves {total} bytes of plugin-written labels and annotations on \
                 this object's pods, over its budget of {} bytes",
                limits.pod_metadata_budget
            )
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
    check_create_sizes(out, &budget, &mut broken);
    if let Some(status) = &out.status {
        check_status_sizes(status, limits, &mut broken);
    }
    check_events(out, limits, &mut broken);
    broken.finish()
}

/// [`check_bounds`], each create: spec size, label counts, metadata bytes
/// and name length.
fn check_create_sizes(out: &wit::ReconcileOutput, budget: &MetadataBudget, broken: &mut Broken) {
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
        let metadata_bytes = budget.create_bytes(create);
        if metadata_bytes > MAX_POD_METADATA_BYTES {
            broken.push("limits/pod-metadata-size", || {
                format!(
                    "create #{i}: {metadata_bytes} bytes of labels and annotations beyond the \
                     template's, over {MAX_POD_METADATA_BYTES} per pod"
                )
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
}

/// [`check_bounds`], the status: state, message and pod list sizes.
fn check_status_sizes(status: &wit::JinghzhuStatus, limits: &Limits, broken: &mut Broken) {
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

/// [`check_bounds`], the Events: how many, and each one's size.
fn check_events(out: &wit::ReconcileOutput, limits: &Limits, broken: &mut Broken) {
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
}

/// What one object's pods carry of labels and annotations the plugin wrote:
/// the bytes (key and value) of every entry that is not the template's own
/// (the same key with the same value in the template's metadata).
///
/// - On a proposed create: every such entry (entries the pod policy refuses
///   later count too; they never reach a pod).
/// - On a pod that exists (as cached): such entries whose key is under one
///   of the plugin's key prefixes, the only keys beyond the template's a
///   plugin may write; what others add to the pods is not the plugin's to
///   pay for. The host's keys are outside every allowed prefix.
///
/// The budget covers the pods that are not terminating after the proposal
/// (existing ones, minus the deletes, plus the creates). A proposal whose
/// creates add plugin metadata is refused when the total is over the
/// budget; one whose creates add none is never refused by it (so an
/// object over budget, say after the budget was lowered, can still delete
/// pods and write its status).
#[derive(Debug)]
pub struct MetadataBudget<'a> {
    template_labels: Option<&'a BTreeMap<String, String>>,
    template_annotations: Option<&'a BTreeMap<String, String>>,
    prefixes: &'a [String],
}

impl<'a> MetadataBudget<'a> {
    /// The accounting for pods of `jz`, with the plugin's key `prefixes`.
    pub fn new(jz: &'a Jinghzhu, prefixes: &'a [String]) -> Self {
        let meta = jz.spec.template.as_ref().and_then(|t| t.metadata.as_ref());
        Self {
            template_labels: meta.and_then(|m| m.labels.as_ref()),
            template_annotations: meta.and_then(|m| m.annotations.as_ref()),
            prefixes,
        }
    }

    fn entry_bytes(template: Option<&BTreeMap<String, String>>, key: &str, value: &str) -> usize {
        if template
            .and_then(|t| t.get(key))
            .is_some_and(|v| v == value)
        {
            0
        } else {
            key.len().saturating_add(value.len())
        }
    }

    /// The plugin's bytes on one proposed create.
    pub fn create_bytes(&self, create: &wit::PodCreate) -> usize {
        let labels = create
            .labels
            .iter()
            .map(|kv| Self::entry_bytes(self.template_labels, &kv.key, &kv.value));
        let annotations = create
            .annotations
            .iter()
            .map(|kv| Self::entry_bytes(self.template_annotations, &kv.key, &kv.value));
        labels.chain(annotations).fold(0, usize::saturating_add)
    }

    /// The plugin's bytes on one pod that exists.
    pub fn pod_bytes(&self, pod: &Pod) -> usize {
        let plugin_key = |key: &str| self.prefixes.iter().any(|p| key.starts_with(p.as_str()));
        let count = |map: Option<&BTreeMap<String, String>>,
                     template: Option<&BTreeMap<String, String>>| {
            map.into_iter()
                .flatten()
                .filter(|(key, _)| plugin_key(key))
                .map(|(key, value)| Self::entry_bytes(template, key, value))
                .fold(0, usize::saturating_add)
        };
        count(pod.metadata.labels.as_ref(), self.template_labels).saturating_add(count(
            pod.metadata.annotations.as_ref(),
            self.template_annotations,
        ))
    }

    /// The plugin's bytes over the pods `owned` keeps after `out` (the ones
    /// not terminating, less the deletes, plus the creates), when `out`'s
    /// creates add some and the total is over `budget`; `None` otherwise.
    pub fn exceeded(
        &self,
        out: &wit::ReconcileOutput,
        owned: &[Pod],
        budget: usize,
    ) -> Option<usize> {
        let added = out
            .create_pods
            .iter()
            .map(|c| self.create_bytes(c))
            .fold(0, usize::saturating_add);
        if added == 0 || (added <= budget && owned.is_empty()) {
            return None;
        }
        let deleted: HashSet<&str> = out.delete_pods.iter().map(String::as_str).collect();
        let kept = owned
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_none_or(|name| !deleted.contains(name))
            })
            .map(|p| self.pod_bytes(p))
            .fold(0, usize::saturating_add);
        let total = kept.saturating_add(added);
        (total > budget).then_some(total)
    }
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
    let owner = jz.name_any();
    for (i, create) in proposal.create_pods.iter().enumerate() {
        check_names(i, create, &all_names, &mut new_names, &mut broken);
        broken.extend(
            &format!("create #{i}"),
            names::check_pod_prefix(&owner, create).as_slice(),
        );
        broken.extend(
            &format!("create #{i}"),
            &policy::check_metadata(
                &owner,
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
                    crate::plugin_text::escape(&event.reason, 64)
                )
            });
        }
    }
    for message in crate::event_reasons::refused(&proposal.events) {
        broken.push(crate::event_reasons::RULE, || message);
    }
    if let Some(status) = &proposal.status {
        for violation in super::status_rules::check(jz, owned, status) {
            broken.push(violation.rule, || violation.message);
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

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_operator_testkit::jinghzhu;

    const FAT: &str = "plugin.jinghzhu.io/fat";

    fn kv(key: &str, value: &str) -> wit::KeyValue {
        wit::KeyValue {
            key: key.into(),
            value: value.into(),
        }
    }

    /// `web` with `desired` pods and a template labelled `app: web`,
    /// annotated `note: <1000 bytes>`.
    fn web(desired: u32) -> Jinghzhu {
        let note = "n".repeat(1000);
        jinghzhu("web")
            .desired(desired)
            .template_json(serde_json::json!({
                "metadata": {"labels": {"app": "web"}, "annotations": {"note": note}}
            }))
            .build()
    }

    fn create(labels: Vec<wit::KeyValue>, annotations: Vec<wit::KeyValue>) -> wit::PodCreate {
        wit::PodCreate {
            name: None,
            generate_name: Some("web-".into()),
            labels,
            annotations,
            spec_json: String::new(),
        }
    }

    fn fat_create(value_bytes: usize) -> wit::PodCreate {
        create(vec![], vec![kv(FAT, &"x".repeat(value_bytes))])
    }

    fn output(creates: Vec<wit::PodCreate>, deletes: &[&str]) -> wit::ReconcileOutput {
        wit::ReconcileOutput {
            create_pods: creates,
            delete_pods: deletes.iter().map(|d| d.to_string()).collect(),
            status: None,
            requeue_after_ms: None,
            events: vec![],
        }
    }

    fn pod(
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
        terminating: bool,
    ) -> Pod {
        let pod = wasm_operator_testkit::pod(name)
            .labels(labels)
            .annotations(annotations);
        if terminating { pod.terminating() } else { pod }.build()
    }

    fn rules(result: Result<(), Rejection>) -> Vec<&'static str> {
        result.err().map(|r| r.rules()).unwrap_or_default()
    }

    #[test]
    fn the_template_s_own_entries_are_free_and_everything_else_counts() {
        let jz = web(3);
        let prefixes = Limits::default().plugin_key_prefixes;
        let budget = MetadataBudget::new(&jz, &prefixes);
        let note = "n".repeat(1000);
        // The template's entries with its values: nothing; another value or
        // any other key: key + value.
        let copied = create(vec![kv("app", "web")], vec![kv("note", &note)]);
        assert_eq!(budget.create_bytes(&copied), 0);
        let changed = create(vec![kv("app", "db")], vec![kv(FAT, "abc")]);
        assert_eq!(budget.create_bytes(&changed), 3 + 2 + FAT.len() + 3);
        // On a pod that exists, only the plugin's keys count (not the
        // host's, not a mesh injector's, not the template's).
        let existing = pod(
            "web-a",
            &[
                ("app", "web"),
                ("jinghzhu.io/owner", "web"),
                ("plugin.jinghzhu.io/shard", "1"),
            ],
            &[
                ("note", &note),
                ("sidecar.istio.io/status", &"i".repeat(500)),
                (FAT, "abcd"),
            ],
            false,
        );
        assert_eq!(
            budget.pod_bytes(&existing),
            "plugin.jinghzhu.io/shard".len() + 1 + FAT.len() + 4
        );
    }

    #[test]
    fn the_budget_covers_the_pods_left_after_the_proposal() {
        let jz = web(10);
        let limits = Limits {
            pod_metadata_budget: 10_000,
            ..Limits::default()
        };
        let per_pod = 3000 - FAT.len(); // value bytes for 3000 bytes a pod
        let value = "x".repeat(per_pod);
        let fat = [(FAT, value.as_str())];
        let owned = vec![
            pod("web-a", &[], &fat, false),
            pod("web-b", &[], &fat, false),
            // Terminating: on its way out, not counted.
            pod("web-c", &[], &fat, true),
        ];
        let check = |creates: usize, deletes: &[&str]| {
            let out = output((0..creates).map(|_| fat_create(per_pod)).collect(), deletes);
            rules(check_bounds(&out, &jz, &owned, &limits))
        };
        // 2 kept × 3000 + 1 × 3000 = 9000 ≤ 10 000.
        assert!(check(1, &[]).is_empty());
        // 2 × 3000 + 2 × 3000 = 12 000 > 10 000.
        assert_eq!(check(2, &[]), ["limits/pod-metadata-budget"]);
        // Deleting one fat pod makes room for the second create.
        assert!(check(2, &["web-a"]).is_empty());
        // Deleting a pod that is already terminating frees nothing (and is
        // refused on its own later).
        assert_eq!(
            check(2, &["web-c"])
                .into_iter()
                .filter(|r| *r == "limits/pod-metadata-budget")
                .count(),
            1
        );
        // Creates without plugin metadata are never refused by the budget,
        // even when the object is over it.
        let over = Limits {
            pod_metadata_budget: 100,
            ..limits.clone()
        };
        let plain = output(vec![create(vec![], vec![]); 3], &[]);
        assert!(check_bounds(&plain, &jz, &owned, &over).is_ok());
        let one_byte = output(
            vec![create(vec![kv("plugin.jinghzhu.io/a", "")], vec![])],
            &[],
        );
        assert_eq!(
            rules(check_bounds(&one_byte, &jz, &owned, &over)),
            ["limits/pod-metadata-budget"]
        );
        // A budget of 0 refuses any plugin metadata, on no pods at all too.
        let none = Limits {
            pod_metadata_budget: 0,
            ..limits
        };
        assert_eq!(
            rules(check_bounds(&one_byte, &jz, &[], &none)),
            ["limits/pod-metadata-budget"]
        );
    }

    #[test]
    fn one_create_carries_at_most_the_per_pod_cap() {
        let jz = web(1);
        let limits = Limits::default();
        let at_cap = output(vec![fat_create(MAX_POD_METADATA_BYTES - FAT.len())], &[]);
        assert!(check_bounds(&at_cap, &jz, &[], &limits).is_ok());
        let over = output(
            vec![fat_create(MAX_POD_METADATA_BYTES - FAT.len() + 1)],
            &[],
        );
        assert_eq!(
            rules(check_bounds(&over, &jz, &[], &limits)),
            ["limits/pod-metadata-size"]
        );
        // Labels count too.
        let labels = (0..40)
            .map(|i| kv(&format!("plugin.jinghzhu.io/l{i:02}"), &"v".repeat(63)))
            .collect();
        let labelled = output(
            vec![create(labels, vec![kv(FAT, &"x".repeat(13_000))])],
            &[],
        );
        assert_eq!(
            rules(check_bounds(&labelled, &jz, &[], &limits)),
            ["limits/pod-metadata-size"]
        );
        // Four pods at the cap fill the default budget; a fifth is over it.
        let jz = web(5);
        let four = output(
            (0..4)
                .map(|_| fat_create(MAX_POD_METADATA_BYTES - FAT.len()))
                .collect(),
            &[],
        );
        assert!(check_bounds(&four, &jz, &[], &limits).is_ok());
        let five = output(
            (0..5)
                .map(|_| fat_create(MAX_POD_METADATA_BYTES - FAT.len()))
                .collect(),
            &[],
        );
        assert_eq!(
            rules(check_bounds(&five, &jz, &[], &limits)),
            ["limits/pod-metadata-budget"]
        );
    }

    #[test]
    fn sums_saturate() {
        let jz = web(1);
        let limits = Limits {
            pod_metadata_budget: usize::MAX,
            ..Limits::default()
        };
        let out = output(vec![fat_create(10)], &[]);
        assert!(check_bounds(&out, &jz, &[], &limits).is_ok());
    }
}
