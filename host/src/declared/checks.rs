//! Checks a contract 0.3 output against the controller's declaration and
//! the host's rules, all before anything is written, and turns it into a
//! [`Plan`]: the children as the host applies them (namespace, owner
//! reference and host labels set by the host), the deletes with their
//! uids, the parent's status. One broken rule refuses the whole output.
//!
//! Sizes and counts are checked before a body is parsed; a body may not
//! carry `apiVersion`, `kind` or `metadata` (the host writes those); every
//! pod template inside a child (Pod, Deployment, StatefulSet, DaemonSet,
//! ReplicaSet, Job, CronJob) is held to the pod policy as a Pod is.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::{Map, Value, json};

use crate::apply::policy::{self, PodPolicy, PolicyConfig};
use crate::refusal::Refusal;
use crate::runtime::bindings::v3;

use super::kinds::ResolvedKind;

/// The rules an output is refused by.
pub mod rules {
    /// A child of a kind the controller does not declare.
    pub const KIND: &str = "child/kind";
    /// A child name that is not a DNS subdomain name.
    pub const NAME: &str = "child/name";
    /// The same child twice in one output.
    pub const DUPLICATE: &str = "child/duplicate";
    /// More children of a kind than its `maxCount`.
    pub const COUNT: &str = "child/count";
    /// A child body larger than its kind's `maxBytes`.
    pub const SIZE: &str = "child/size";
    /// A child body that is not a JSON object of the kind's fields only.
    pub const BODY: &str = "child/body";
    /// A label or annotation the host owns, or one that is not valid.
    pub const LABELS: &str = "child/labels";
    /// A delete of an object the parent does not control.
    pub const NOT_OWNED: &str = "child/not-owned";
    /// A status that is not a JSON object within the size limit.
    pub const STATUS: &str = "status/body";
    /// More Events than one reconcile may record.
    pub const EVENTS: &str = "events/count";
}

/// The label every child carries: which controller owns it (the children's
/// watches select on it).
pub const CONTROLLER_LABEL: &str = "wasm-operator.io/controller";
/// Label and annotation keys under this prefix are the host's.
const HOST_PREFIX: &str = "wasm-operator.io/";
/// Most bytes of the parent's status.
pub const MAX_STATUS_BYTES: usize = 64 * 1024;
/// Most Events one reconcile records.
pub const MAX_EVENTS: usize = 8;

/// What the host needs to know to check one output.
pub struct Declared<'a> {
    /// The controller's name (its children's label value).
    pub controller: &'a str,
    /// The parent's kind.
    pub parent: &'a ResolvedKind,
    /// Each child kind with its bounds: (kind, most children, most bytes).
    pub children: &'a [(ResolvedKind, u32, u32)],
    /// The pod policy pod templates are held to.
    pub policy: &'a PolicyConfig,
}

/// The parent a plan is for.
pub struct Parent<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its uid.
    pub uid: &'a str,
}

/// A child as the host applies it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildApply {
    /// Index of its kind in the declaration.
    pub kind: usize,
    /// Its name.
    pub name: String,
    /// The whole object to apply.
    pub object: Value,
}

/// A child to delete.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildDelete {
    /// Index of its kind in the declaration.
    pub kind: usize,
    /// Its name.
    pub name: String,
    /// Its uid (the delete's precondition).
    pub uid: String,
}

/// A checked output, ready to apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Children to apply.
    pub applies: Vec<ChildApply>,
    /// Children to delete.
    pub deletes: Vec<ChildDelete>,
    /// The parent's new status.
    pub status: Option<Value>,
    /// Events to record on the parent: (warning?, reason, message).
    pub events: Vec<(bool, String, String)>,
    /// Reconcile again after this long.
    pub requeue_after: Option<Duration>,
}

/// Checks `output` for `parent`, whose controlled children of each kind
/// are `owned` (name → uid, per declared kind).
pub fn check(
    declared: &Declared<'_>,
    parent: &Parent<'_>,
    owned: &[BTreeMap<String, String>],
    output: v3::ReconcileOutput,
) -> Result<Plan, Refusal> {
    check_counts(declared, &output)?;
    if output.events.len() > MAX_EVENTS {
        return Err(Refusal::new(
            rules::EVENTS,
            format!(
                "{} Events; at most {MAX_EVENTS} per reconcile",
                output.events.len()
            ),
        ));
    }
    if let Some(event) = output
        .events
        .iter()
        .find(|event| crate::event_reasons::is_reserved(&event.reason))
    {
        return Err(Refusal::new(
            crate::event_reasons::RULE,
            format!(
                "event reason {:?} is reserved for the host's own Events; choose another reason",
                policy_text(&event.reason)
            ),
        ));
    }
    let mut plan = Plan {
        status: status(output.status_json.as_deref())?,
        requeue_after: output.requeue_after_ms.map(Duration::from_millis),
        events: output
            .events
            .into_iter()
            .map(|e| (e.event_type == v3::EventType::Warning, e.reason, e.message))
            .collect(),
        ..Plan::default()
    };
    let mut seen = HashSet::new();
    for child in output.apply {
        let kind = kind_index(declared, &child.api_version, &child.kind)?;
        if !seen.insert((kind, child.name.clone())) {
            return Err(Refusal::new(
                rules::DUPLICATE,
                format!(
                    "{}/{} {} is applied twice",
                    child.api_version, child.kind, child.name
                ),
            ));
        }
        plan.applies
            .push(child_apply(declared, parent, kind, child)?);
    }
    for gone in output.delete {
        let kind = kind_index(declared, &gone.api_version, &gone.kind)?;
        let Some(uid) = owned.get(kind).and_then(|names| names.get(&gone.name)) else {
            return Err(Refusal::new(
                rules::NOT_OWNED,
                format!(
                    "{}/{} {} is not a child of {}/{}: only controlled children are deleted",
                    gone.api_version, gone.kind, gone.name, parent.namespace, parent.name
                ),
            ));
        };
        plan.deletes.push(ChildDelete {
            kind,
            name: gone.name,
            uid: uid.clone(),
        });
    }
    Ok(plan)
}

/// Counts per kind and sizes, before any body is parsed.
fn check_counts(declared: &Declared<'_>, output: &v3::ReconcileOutput) -> Result<(), Refusal> {
    let mut counts = vec![0u32; declared.children.len()];
    for child in &output.apply {
        let kind = kind_index(declared, &child.api_version, &child.kind)?;
        let (resolved, max_count, max_bytes) = &declared.children[kind];
        counts[kind] += 1;
        if counts[kind] > *max_count {
            return Err(Refusal::new(
                rules::COUNT,
                format!(
                    "more than {max_count} {} children (maxCount)",
                    resolved.declared
                ),
            ));
        }
        if child.body_json.len() > *max_bytes as usize {
            return Err(Refusal::new(
                rules::SIZE,
                format!(
                    "{} {}: body of {} bytes, over its kind's maxBytes of {max_bytes}",
                    resolved.declared,
                    child.name,
                    child.body_json.len()
                ),
            ));
        }
    }
    Ok(())
}

fn kind_index(declared: &Declared<'_>, api_version: &str, kind: &str) -> Result<usize, Refusal> {
    declared
        .children
        .iter()
        .position(|(k, ..)| k.declared.api_version == api_version && k.declared.kind == kind)
        .ok_or_else(|| {
            let allowed: Vec<String> = declared
                .children
                .iter()
                .map(|(k, ..)| k.declared.to_string())
                .collect();
            Refusal::new(
                rules::KIND,
                format!(
                    "{api_version}/{kind} is not a child kind of controller {} (it declares: {})",
                    declared.controller,
                    if allowed.is_empty() {
                        "none".into()
                    } else {
                        allowed.join(", ")
                    }
                ),
            )
        })
}

/// The status as a JSON object, within [`MAX_STATUS_BYTES`].
fn status(status_json: Option<&str>) -> Result<Option<Value>, Refusal> {
    let Some(text) = status_json else {
        return Ok(None);
    };
    if text.len() > MAX_STATUS_BYTES {
        return Err(Refusal::new(
            rules::STATUS,
            format!("status of {} bytes, over {MAX_STATUS_BYTES}", text.len()),
        ));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => Ok(Some(value)),
        Ok(_) => Err(Refusal::new(
            rules::STATUS,
            "status-json is not a JSON object",
        )),
        Err(err) => Err(Refusal::new(
            rules::STATUS,
            format!("status-json is not JSON: {err}"),
        )),
    }
}

/// One desired child as the host applies it.
fn child_apply(
    declared: &Declared<'_>,
    parent: &Parent<'_>,
    kind: usize,
    child: v3::DesiredChild,
) -> Result<ChildApply, Refusal> {
    check_name(&child.name)?;
    let body = body(&child)?;
    check_pod_templates(&child.kind, &child.name, &body, declared.policy)?;
    let labels = labels(declared.controller, &child.labels, &child.name)?;
    let annotations = own_keys(&child.annotations, &child.name, "annotation")?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!(child.api_version));
    object.insert("kind".into(), json!(child.kind));
    object.insert(
        "metadata".into(),
        json!({
            "name": child.name,
            "namespace": parent.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": declared.parent.declared.api_version,
                "kind": declared.parent.declared.kind,
                "name": parent.name,
                "uid": parent.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        }),
    );
    object.extend(body);
    Ok(ChildApply {
        kind,
        name: child.name,
        object: Value::Object(object),
    })
}

/// A DNS subdomain name (RFC 1123), as most kinds need.
fn check_name(name: &str) -> Result<(), Refusal> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if valid {
        Ok(())
    } else {
        Err(Refusal::new(
            rules::NAME,
            format!(
                "{:?} is not a DNS subdomain name (lower-case letters, digits, '-' and '.', at most 253)",
                policy_text(name)
            ),
        ))
    }
}

/// The body's fields; none of them the host's.
fn body(child: &v3::DesiredChild) -> Result<Map<String, Value>, Refusal> {
    let parsed: Value = serde_json::from_str(&child.body_json).map_err(|err| {
        Refusal::new(
            rules::BODY,
            format!(
                "{} {}: body-json is not JSON: {err}",
                child.kind, child.name
            ),
        )
    })?;
    let Value::Object(fields) = parsed else {
        return Err(Refusal::new(
            rules::BODY,
            format!(
                "{} {}: body-json is not a JSON object",
                child.kind, child.name
            ),
        ));
    };
    for reserved in ["apiVersion", "kind", "metadata"] {
        if fields.contains_key(reserved) {
            return Err(Refusal::new(
                rules::BODY,
                format!(
                    "{} {}: body-json has `{reserved}`; the host writes it (name, labels and \
                     annotations go in the desired-child record)",
                    child.kind, child.name
                ),
            ));
        }
    }
    Ok(fields)
}

/// The plugin's labels plus the host's; keys under the host's prefix are
/// the host's alone.
fn labels(controller: &str, asked: &[v3::KeyValue], child: &str) -> Result<Value, Refusal> {
    let mut labels = own_keys(asked, child, "label")?;
    if let Value::Object(map) = &mut labels {
        map.insert(CONTROLLER_LABEL.into(), json!(controller));
    }
    Ok(labels)
}

fn own_keys(asked: &[v3::KeyValue], child: &str, what: &str) -> Result<Value, Refusal> {
    let mut map = Map::new();
    for pair in asked {
        if pair.key.starts_with(HOST_PREFIX) || pair.key.is_empty() || pair.key.len() > 316 {
            return Err(Refusal::new(
                rules::LABELS,
                format!(
                    "{child}: {what} {:?} is not the plugin's to write (empty, too long, or under {HOST_PREFIX})",
                    policy_text(&pair.key)
                ),
            ));
        }
        map.insert(pair.key.clone(), json!(pair.value));
    }
    Ok(Value::Object(map))
}

/// Where each workload kind keeps its pod template's spec.
fn pod_spec_paths(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &["/spec"],
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "ReplicationController" => &["/spec/template/spec"],
        "CronJob" => &["/spec/jobTemplate/spec/template/spec"],
        _ => &[],
    }
}

/// Every pod template in the body, held to the pod policy. Without a
/// user's template to compare with, `template` mode is held to
/// `restricted`.
fn check_pod_templates(
    kind: &str,
    name: &str,
    body: &Map<String, Value>,
    config: &PolicyConfig,
) -> Result<(), Refusal> {
    let body = Value::Object(body.clone());
    for path in pod_spec_paths(kind) {
        let Some(spec) = body.pointer(path) else {
            continue;
        };
        let spec: PodSpec = serde_json::from_value(spec.clone()).map_err(|err| {
            Refusal::new(
                rules::BODY,
                format!("{kind} {name}: {path} is not a pod spec: {err}"),
            )
        })?;
        let mut config = config.clone();
        if config.policy == PodPolicy::Template {
            config.policy = PodPolicy::Restricted;
        }
        let violations = policy::check_spec(&spec, granting_nothing(), &config);
        if let Some(first) = violations.first() {
            let all: Vec<String> = violations.iter().map(ToString::to_string).collect();
            return Err(Refusal::new(
                first.rule,
                format!(
                    "{kind} {name}: the pod template at {path} breaks the pod policy ({}): {}",
                    config.policy,
                    all.join("; ")
                ),
            ));
        }
    }
    Ok(())
}

/// What the host rules compare a plugin's pod spec with when there is no
/// user's template: one that grants nothing beyond the namespace's default
/// service account (no token mounted, no secret, volume claim, toleration,
/// node selector, affinity or priority), leaving identity and confinement
/// to the Pod Security profile.
fn granting_nothing() -> &'static PodSpec {
    static TEMPLATE: std::sync::LazyLock<PodSpec> = std::sync::LazyLock::new(|| PodSpec {
        containers: vec![k8s_openapi::api::core::v1::Container {
            name: "app".into(),
            ..Default::default()
        }],
        ..PodSpec::default()
    });
    &TEMPLATE
}

/// Plugin text as it may appear in a message (escaped and bounded).
fn policy_text(text: &str) -> String {
    crate::plugin_text::escape_within(text, 80)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::controller::KindRef;

    fn kind(api_version: &str, kind: &str) -> ResolvedKind {
        ResolvedKind::by_convention(&KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        })
    }

    fn child(api_version: &str, kind: &str, name: &str, body: Value) -> v3::DesiredChild {
        v3::DesiredChild {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            labels: vec![v3::KeyValue {
                key: "app".into(),
                value: name.into(),
            }],
            annotations: Vec::new(),
            body_json: body.to_string(),
        }
    }

    fn output(apply: Vec<v3::DesiredChild>) -> v3::ReconcileOutput {
        v3::ReconcileOutput {
            apply,
            delete: Vec::new(),
            status_json: None,
            requeue_after_ms: None,
            events: Vec::new(),
        }
    }

    /// Checks `out` for the parent `shop/cache` of a controller owning
    /// Deployments (at most 2, 4 KiB) and ConfigMaps.
    fn checked(out: v3::ReconcileOutput) -> Result<Plan, Refusal> {
        let parent = kind("cache.example.com/v1alpha1", "Memcached");
        let children = [
            (kind("apps/v1", "Deployment"), 2, 4096),
            (kind("v1", "ConfigMap"), 16, 65536),
        ];
        let policy = PolicyConfig::default();
        let declared = Declared {
            controller: "memcached",
            parent: &parent,
            children: &children,
            policy: &policy,
        };
        let about = Parent {
            name: "cache",
            namespace: "shop",
            uid: "u-1",
        };
        let owned = [
            BTreeMap::new(),
            BTreeMap::from([("old".to_string(), "u-9".to_string())]),
        ];
        check(&declared, &about, &owned, out)
    }

    fn restricted_deployment(privileged: bool) -> Value {
        json!({"spec": {"replicas": 2, "selector": {"matchLabels": {"app": "cache"}}, "template": {
        "metadata": {"labels": {"app": "cache"}},
        "spec": {
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "memcached", "image": "memcached:1.6.26-alpine", "imagePullPolicy": "Always",
                "securityContext": {"allowPrivilegeEscalation": false, "privileged": privileged,
                    "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true, "runAsUser": 1001}}]
        }}}})
    }

    #[test]
    fn a_good_child_is_applied_in_the_parents_namespace_owned_and_labelled() {
        let plan = checked(output(vec![child(
            "apps/v1",
            "Deployment",
            "cache",
            restricted_deployment(false),
        )]))
        .expect("a restricted Deployment passes");
        let object = &plan.applies[0].object;
        assert_eq!(object["metadata"]["namespace"], "shop");
        assert_eq!(object["metadata"]["labels"][CONTROLLER_LABEL], "memcached");
        assert_eq!(object["metadata"]["labels"]["app"], "cache");
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(object["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(object["spec"]["replicas"], 2);
    }

    #[test]
    fn each_rule_refuses_what_it_names() {
        let rule = |out| checked(out).map(|_| ()).expect_err("refused").rule;
        assert_eq!(
            rule(output(vec![child("v1", "Secret", "s", json!({}))])),
            rules::KIND
        );
        assert_eq!(
            rule(output(vec![child(
                "v1",
                "ConfigMap",
                "c",
                json!({"metadata": {"namespace": "kube-system"}})
            )])),
            rules::BODY
        );
        assert_eq!(
            rule(output(vec![child("v1", "ConfigMap", "c", json!([1]))])),
            rules::BODY
        );
        assert_eq!(
            rule(output(vec![child(
                "v1",
                "ConfigMap",
                "Bad_Name",
                json!({})
            )])),
            rules::NAME
        );
        let big = json!({"spec": {"x": "y".repeat(5000)}});
        assert_eq!(
            rule(output(vec![child("apps/v1", "Deployment", "d", big)])),
            rules::SIZE
        );
        let three = (0..3)
            .map(|i| child("apps/v1", "Deployment", &format!("d{i}"), json!({})))
            .collect();
        assert_eq!(rule(output(three)), rules::COUNT);
        let twice = vec![
            child("v1", "ConfigMap", "c", json!({})),
            child("v1", "ConfigMap", "c", json!({})),
        ];
        assert_eq!(rule(output(twice)), rules::DUPLICATE);
        assert_eq!(
            rule(output(vec![child(
                "apps/v1",
                "Deployment",
                "cache",
                restricted_deployment(true)
            )])),
            "baseline/privileged"
        );
        let mut labelled = child("v1", "ConfigMap", "c", json!({}));
        labelled.labels.push(v3::KeyValue {
            key: CONTROLLER_LABEL.into(),
            value: "other".into(),
        });
        assert_eq!(rule(output(vec![labelled])), rules::LABELS);
        let mut foreign = output(Vec::new());
        foreign.delete.push(v3::ChildRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "not-ours".into(),
        });
        assert_eq!(rule(foreign), rules::NOT_OWNED);
        let mut status = output(Vec::new());
        status.status_json = Some("[]".into());
        assert_eq!(rule(status), rules::STATUS);
        let mut reserved = output(Vec::new());
        reserved.events.push(v3::Event {
            event_type: v3::EventType::Normal,
            reason: "SuccessfulCreate".into(),
            message: "x".into(),
        });
        assert_eq!(rule(reserved), crate::event_reasons::RULE);
    }

    #[test]
    fn an_owned_child_is_deleted_with_its_uid() {
        let mut out = output(Vec::new());
        out.delete.push(v3::ChildRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "old".into(),
        });
        let plan = checked(out).expect("an owned child may go");
        assert_eq!(
            plan.deletes,
            [ChildDelete {
                kind: 1,
                name: "old".into(),
                uid: "u-9".into()
            }]
        );
    }
}
