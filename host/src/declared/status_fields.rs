//! The fields of a declared parent's status the host can observe itself,
//! checked against what it observed before the status is written, as the
//! `Jinghzhu` path checks its own ([`crate::apply::status_rules`]), under
//! the same rule id, [`RULE`]. A plugin may say what it likes in its own
//! words (a phase, a message), but not that its parent has children or
//! pods it has not, someone else's, or a generation nobody wrote.
//!
//! "Observed" is the snapshot the plugin was given ([`Snapshot::of`]): the
//! parent as cached when the reconcile started, its children and the
//! observed objects below them. A status describes that snapshot, not what
//! the output's own applies and deletes will make (the names a new
//! Deployment's pods will get are not known yet); the writes' watch events
//! wake the next reconcile, which reports them.
//!
//! What is checked:
//! - always: `status.observedGeneration` is absent, the value already
//!   stored, or the parent's `metadata.generation` (never a generation the
//!   plugin was not shown);
//! - the fields the `PluginController` declares in `spec.checkedStatus`:
//!   `namesOf` a kind is a list naming exactly the objects of that kind the
//!   plugin was given (each once, any order), `countOf` a kind is their
//!   number; terminating objects left out unless `includeTerminating`.
//!   A declared field that is absent claims nothing and passes.
//!
//! Only a status that would be written is checked: one equal to the stored
//! status is not written, and so not refused.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::apply::status_rules::quoted;
use crate::crd::controller::{CheckedStatusSpec, KindRef};
use crate::refusal::Refusal;
use crate::runtime::bindings::v3;

/// The rule id of a status whose observable fields are not what the host
/// observed (the `Jinghzhu` path's, [`crate::apply::status_rules::RULE`]).
pub const RULE: &str = crate::apply::status_rules::RULE;
/// The rule id of a `spec.checkedStatus` the host cannot check.
pub const DECLARATION_RULE: &str = "controller/checked-status";

/// Most keys in a declared field's path.
const MAX_DEPTH: usize = 8;

/// One declared field, resolved against the declaration's kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedField {
    /// The path under `status`, as declared (`nodes`).
    pub field: String,
    /// Its keys.
    path: Vec<String>,
    /// Names or a count.
    measure: Measure,
    /// Index of the kind among the input's entries (declared children,
    /// then observed kinds).
    entry: usize,
    /// The kind, for messages.
    kind: KindRef,
    /// Terminating objects count too.
    include_terminating: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    Names,
    Count,
}

/// Resolves `spec.checkedStatus` against the child kinds and the observed
/// kinds, in the input's order; refuses a field that names no such kind,
/// has not exactly one of `namesOf` and `countOf`, an empty key, or is
/// declared twice.
pub fn resolve(
    declared: &[CheckedStatusSpec],
    children: &[KindRef],
    observed: &[KindRef],
) -> Result<Vec<CheckedField>, Refusal> {
    let mut resolved: Vec<CheckedField> = Vec::new();
    for spec in declared {
        let refuse = |why: String| {
            Refusal::new(
                DECLARATION_RULE,
                format!("spec.checkedStatus field {:?}: {why}", spec.field),
            )
        };
        let (measure, kind) = match (&spec.names_of, &spec.count_of) {
            (Some(kind), None) => (Measure::Names, kind),
            (None, Some(kind)) => (Measure::Count, kind),
            _ => return Err(refuse("give exactly one of namesOf and countOf".into())),
        };
        let path: Vec<String> = spec.field.split('.').map(String::from).collect();
        if path.iter().any(String::is_empty) || path.len() > MAX_DEPTH {
            return Err(refuse(format!(
                "a path under status is 1 to {MAX_DEPTH} non-empty keys joined by dots"
            )));
        }
        if path == ["observedGeneration"] {
            return Err(refuse(
                "status.observedGeneration is always checked; remove it".into(),
            ));
        }
        if resolved.iter().any(|f| f.path == path) {
            return Err(refuse("declared twice".into()));
        }
        let entry = children
            .iter()
            .chain(observed)
            .position(|k| k == kind)
            .ok_or_else(|| {
                refuse(format!(
                    "{kind} is neither a child kind nor an observed kind of this controller: the \
                     host observes only those"
                ))
            })?;
        resolved.push(CheckedField {
            field: spec.field.clone(),
            path,
            measure,
            entry,
            kind: kind.clone(),
            include_terminating: spec.include_terminating,
        });
    }
    Ok(resolved)
}

/// What the plugin was shown, as far as the checks need it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The parent's `metadata.generation`.
    generation: i64,
    /// `status.observedGeneration` as stored.
    stored_generation: Option<Value>,
    /// Per input entry a field names: the names counted.
    names: BTreeMap<(usize, bool), BTreeSet<String>>,
}

impl Snapshot {
    /// The snapshot of `input` (taken before the call) that `fields` need.
    pub fn of(fields: &[CheckedField], input: &v3::ReconcileInput) -> Self {
        let stored_generation = serde_json::from_str::<Value>(&input.parent.body_json)
            .ok()
            .and_then(|body| body.pointer("/status/observedGeneration").cloned());
        let mut names = BTreeMap::new();
        for field in fields {
            let key = (field.entry, field.include_terminating);
            if names.contains_key(&key) {
                continue;
            }
            let objects = input
                .children
                .get(field.entry)
                .filter(|entry| {
                    entry.api_version == field.kind.api_version && entry.kind == field.kind.kind
                })
                .map_or(&[][..], |entry| entry.objects.as_slice());
            let counted = objects
                .iter()
                .filter(|obj| {
                    field.include_terminating || obj.metadata.deletion_timestamp.is_none()
                })
                .map(|obj| obj.metadata.name.clone())
                .collect();
            names.insert(key, counted);
        }
        Self {
            generation: input.parent.metadata.generation,
            stored_generation,
            names,
        }
    }
}

/// Checks the `status` about to be written against `snapshot`.
pub fn check(fields: &[CheckedField], snapshot: &Snapshot, status: &Value) -> Result<(), Refusal> {
    let mut broken = Vec::new();
    if let Some(claimed) = status.get("observedGeneration")
        && Some(claimed) != snapshot.stored_generation.as_ref()
        && claimed.as_i64() != Some(snapshot.generation)
    {
        broken.push(format!(
            "status.observedGeneration is {claimed}, but the parent's generation is {}",
            snapshot.generation
        ));
    }
    for field in fields {
        let Some(claimed) = field.path.iter().try_fold(status, |at, key| at.get(key)) else {
            continue;
        };
        let observed = snapshot
            .names
            .get(&(field.entry, field.include_terminating))
            .cloned()
            .unwrap_or_default();
        if let Some(why) = differs(field, claimed, &observed) {
            broken.push(format!("status.{} {why}", field.field));
        }
    }
    if broken.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(
        RULE,
        format!(
            "the status says what the host did not observe: {}",
            broken.join("; ")
        ),
    ))
}

/// What is wrong with `claimed` as `field` of the `observed` names.
fn differs(field: &CheckedField, claimed: &Value, observed: &BTreeSet<String>) -> Option<String> {
    let kind = &field.kind.kind;
    match field.measure {
        Measure::Count => (claimed.as_u64() != Some(observed.len() as u64)).then(|| {
            format!(
                "is {claimed}, but the parent has {} {kind} object(s)",
                observed.len()
            )
        }),
        Measure::Names => {
            let Some(listed) = claimed.as_array() else {
                return Some(format!(
                    "is {}, not a list of {kind} names",
                    type_of(claimed)
                ));
            };
            let listed: Vec<&str> = listed.iter().filter_map(Value::as_str).collect();
            if listed.len() != claimed.as_array().map_or(0, Vec::len) {
                return Some(format!("holds something other than {kind} names"));
            }
            names_differ(&listed, observed, kind)
        }
    }
}

/// Names listed twice, names of objects not observed, observed ones left
/// out; `None` when `listed` names each observed object once.
fn names_differ(listed: &[&str], observed: &BTreeSet<String>, kind: &str) -> Option<String> {
    let mut seen = BTreeSet::new();
    let twice: Vec<&str> = listed
        .iter()
        .copied()
        .filter(|name| !seen.insert(*name))
        .collect();
    let mut quoted_once = BTreeSet::new();
    let foreign: Vec<&str> = listed
        .iter()
        .copied()
        .filter(|name| !observed.contains(*name) && quoted_once.insert(*name))
        .collect();
    let missing: Vec<&str> = observed
        .iter()
        .map(String::as_str)
        .filter(|name| !seen.contains(name))
        .collect();
    let mut parts = Vec::new();
    if !foreign.is_empty() {
        parts.push(format!(
            "names {} that the parent has no {kind} of",
            quoted(&foreign)
        ));
    }
    if !missing.is_empty() {
        parts.push(format!("leaves out the {kind} {}", quoted(&missing)));
    }
    if !twice.is_empty() {
        parts.push(format!("lists {} more than once", quoted(&twice)));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(api_version: &str, kind: &str) -> KindRef {
        KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    fn pods() -> KindRef {
        kind("v1", "Pod")
    }

    fn deployments() -> KindRef {
        kind("apps/v1", "Deployment")
    }

    fn spec(field: &str, names: Option<KindRef>, count: Option<KindRef>) -> CheckedStatusSpec {
        CheckedStatusSpec {
            field: field.into(),
            names_of: names,
            count_of: count,
            include_terminating: false,
        }
    }

    fn object(kind: &KindRef, name: &str, terminating: bool) -> v3::Object {
        v3::Object {
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
            metadata: v3::ObjectMeta {
                name: name.into(),
                namespace: "shop".into(),
                uid: format!("uid-{name}"),
                resource_version: "1".into(),
                generation: 1,
                labels: Vec::new(),
                annotations: Vec::new(),
                creation_timestamp: None,
                deletion_timestamp: terminating.then_some(v3::Timestamp {
                    seconds: 1,
                    nanoseconds: 0,
                }),
                owner_references: Vec::new(),
            },
            body_json: "{}".into(),
        }
    }

    /// A Memcached at generation 3 (stored observedGeneration 2) with one
    /// Deployment and the pods `a`, `b` and the terminating `c`.
    fn input() -> v3::ReconcileInput {
        let mut parent = object(
            &kind("cache.example.com/v1alpha1", "Memcached"),
            "cache",
            false,
        );
        parent.metadata.generation = 3;
        parent.body_json = json!({"status": {"observedGeneration": 2}}).to_string();
        v3::ReconcileInput {
            parent,
            children: vec![
                v3::Children {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    objects: vec![object(&deployments(), "cache", false)],
                },
                v3::Children {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    objects: vec![
                        object(&pods(), "a", false),
                        object(&pods(), "b", false),
                        object(&pods(), "c", true),
                    ],
                },
            ],
            now: v3::Timestamp {
                seconds: 0,
                nanoseconds: 0,
            },
        }
    }

    fn fields() -> Vec<CheckedField> {
        resolve(
            &[
                spec("nodes", Some(pods()), None),
                spec("children.deployments", None, Some(deployments())),
            ],
            &[deployments()],
            &[pods()],
        )
        .expect("resolves")
    }

    fn verdict(status: Value) -> Result<(), Refusal> {
        let fields = fields();
        check(&fields, &Snapshot::of(&fields, &input()), &status)
    }

    #[test]
    fn the_truth_passes_and_an_absent_field_claims_nothing() {
        for status in [
            json!({"nodes": ["b", "a"], "children": {"deployments": 1}, "observedGeneration": 3}),
            json!({"phase": "Ready", "observedGeneration": 2}),
            json!({}),
        ] {
            assert_eq!(verdict(status.clone()), Ok(()), "{status}");
        }
    }

    #[test]
    fn each_lie_is_refused_by_the_rule_naming_the_field() {
        let cases = [
            (
                json!({"nodes": ["a", "b", "x"]}),
                "names \"x\" that the parent has no Pod of",
            ),
            (json!({"nodes": ["a"]}), "leaves out the Pod \"b\""),
            (
                json!({"nodes": ["a", "b", "b"]}),
                "lists \"b\" more than once",
            ),
            (
                json!({"nodes": ["a", "b", "c"]}),
                "\"c\" that the parent has no Pod",
            ),
            (json!({"nodes": "a,b"}), "is a string, not a list"),
            (
                json!({"nodes": ["a", "b", 7]}),
                "holds something other than Pod names",
            ),
            (
                json!({"children": {"deployments": 3}}),
                "status.children.deployments is 3",
            ),
            (
                json!({"observedGeneration": 9_223_372_036_854_775_807_i64}),
                "generation is 3",
            ),
            (json!({"observedGeneration": 4}), "observedGeneration is 4"),
        ];
        for (status, says) in cases {
            let refusal = verdict(status.clone()).expect_err("a lie");
            assert_eq!(refusal.rule, "status/observed-fields");
            assert!(
                refusal.message.contains(says),
                "{status}: {}",
                refusal.message
            );
        }
    }

    #[test]
    fn terminating_objects_count_when_asked() {
        let mut with = spec("nodes", Some(pods()), None);
        with.include_terminating = true;
        let fields = resolve(&[with], &[deployments()], &[pods()]).expect("resolves");
        let snapshot = Snapshot::of(&fields, &input());
        assert_eq!(
            check(&fields, &snapshot, &json!({"nodes": ["a", "b", "c"]})),
            Ok(())
        );
        assert!(check(&fields, &snapshot, &json!({"nodes": ["a", "b"]})).is_err());
    }

    #[test]
    fn a_declaration_the_host_cannot_check_is_refused() {
        let children = [deployments()];
        let observed = [pods()];
        for (bad, says) in [
            (spec("nodes", None, None), "exactly one of"),
            (spec("nodes", Some(pods()), Some(pods())), "exactly one of"),
            (spec("a..b", Some(pods()), None), "non-empty keys"),
            (
                spec("observedGeneration", None, Some(pods())),
                "always checked",
            ),
            (
                spec("secrets", Some(kind("v1", "Secret")), None),
                "neither a child kind nor an observed kind",
            ),
        ] {
            let refusal = resolve(&[bad], &children, &observed).expect_err("refused");
            assert_eq!(refusal.rule, DECLARATION_RULE);
            assert!(refusal.message.contains(says), "{}", refusal.message);
        }
        let twice = [spec("n", Some(pods()), None), spec("n", None, Some(pods()))];
        assert!(resolve(&twice, &children, &observed).is_err());
    }
}
