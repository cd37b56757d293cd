//! `wasm-operator reconcile` for a contract 0.3 plugin (any parent kind,
//! any child kinds): the controller's declaration read from a
//! `PluginController` file (`controller.yaml`), one input printed as the
//! plugin's output, or a directory of golden cases checked as the host
//! would check the output in a cluster (`declared::checks`, the rule named
//! on a refusal), compared with `expected.yaml`, then run on for
//! idempotence. The format is `docs/writing-controllers.md`, "Test a 0.3 plugin
//! without a cluster".
//!
//! - [`input`]: reading objects into the state a reconcile sees.
//! - [`output`]: the plugin's output in the readable form of `expected.yaml`.
//! - [`cases`]: golden cases, `--bless` and the idempotence check.
//! - [`simulate`]: what the API server makes of the state after a plan.
//! - [`record`]: cases from a live cluster (`record --controller`).

pub mod cases;
pub mod input;
pub mod output;
pub mod record;
pub mod simulate;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::apply::policy::PolicyConfig;
use crate::crd::controller::PluginController;
use crate::declared::checks::Declared;
use crate::declared::kinds::{self, ResolvedKind};
use crate::declared::status_fields::{self, CheckedField};

/// The file a fixtures directory (or the directory above it) holds the
/// declaration in, when `--controller` is not given.
pub const CONTROLLER_FILE: &str = "controller.yaml";

/// A `PluginController` read from a file, its kinds named by Kubernetes'
/// convention (no API server to ask).
#[derive(Debug, Clone)]
pub struct OfflineDeclaration {
    /// Where it was read from.
    pub file: PathBuf,
    /// The controller's name.
    pub name: String,
    /// The parent kind.
    pub parent: ResolvedKind,
    /// Each child kind with its most children and most bytes.
    pub children: Vec<(ResolvedKind, u32, u32)>,
    /// Each observed kind with the kinds between a child and it.
    pub observed: Vec<(ResolvedKind, Vec<ResolvedKind>)>,
    /// The pod policy pod templates in children are held to.
    pub policy: PolicyConfig,
    /// The status fields the host checks (`spec.checkedStatus`).
    pub checked_status: Vec<CheckedField>,
}

impl OfflineDeclaration {
    /// What `declared::checks` needs.
    pub fn declared(&self) -> Declared<'_> {
        Declared {
            controller: &self.name,
            parent: &self.parent,
            children: &self.children,
            policy: &self.policy,
        }
    }

    /// `controller <name> from <file>`, for reports.
    pub fn describe(&self) -> String {
        format!("controller {} from {}", self.name, self.file.display())
    }
}

/// The declaration: `explicit` if given, else `controller.yaml` in
/// `fixtures` or the directory above it.
pub fn find(
    explicit: Option<&Path>,
    fixtures: Option<&Path>,
    allowed: &[String],
) -> Result<OfflineDeclaration> {
    if let Some(file) = explicit {
        return read(file, allowed);
    }
    let candidates: Vec<PathBuf> = fixtures
        .into_iter()
        .flat_map(|dir| [Some(dir.to_path_buf()), dir.parent().map(Path::to_path_buf)])
        .flatten()
        .map(|dir| dir.join(CONTROLLER_FILE))
        .collect();
    match candidates.iter().find(|file| file.is_file()) {
        Some(file) => read(file, allowed),
        None => bail!(
            "a contract 0.3 plugin needs its controller's declaration: pass --controller \
             controller.yaml (a PluginController), or put {CONTROLLER_FILE} in the fixtures \
             directory or the one above it{}",
            if candidates.is_empty() {
                String::new()
            } else {
                format!(
                    " (looked for {})",
                    candidates
                        .iter()
                        .map(|c| c.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
    }
}

/// Reads the one `PluginController` in `file` and checks its child kinds
/// as the host does (`allowed`: the admin's `--allow-child-kind`).
pub fn read(file: &Path, allowed: &[String]) -> Result<OfflineDeclaration> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut found = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(document)
            .with_context(|| format!("parsing {}", file.display()))?;
        if !value.is_null() {
            found.push(value);
        }
    }
    let value = match found.len() {
        1 => found.remove(0),
        n => bail!(
            "{} holds {n} documents; give exactly one PluginController",
            file.display()
        ),
    };
    let resource: PluginController = serde_yaml::from_value(value).with_context(|| {
        format!(
            "{} is not a PluginController (apiVersion: wasm-operator.io/v1alpha1)",
            file.display()
        )
    })?;
    from_resource(&resource, file, allowed)
}

/// The declaration of `resource`, checked as the host checks it before
/// asking the API server anything.
pub fn from_resource(
    resource: &PluginController,
    file: &Path,
    allowed: &[String],
) -> Result<OfflineDeclaration> {
    let spec = &resource.spec;
    let declared: Vec<_> = spec.children.iter().map(|c| c.kind_ref()).collect();
    kinds::check_children(&declared, allowed).map_err(|refusal| {
        anyhow::anyhow!(
            "the host would refuse the declaration in {}: {refusal}",
            file.display()
        )
    })?;
    let name = resource
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .with_context(|| format!("{} has no metadata.name", file.display()))?;
    let observed: Vec<_> = spec.observe.iter().map(|o| o.kind_ref()).collect();
    let checked_status = status_fields::resolve(&spec.checked_status, &declared, &observed)
        .map_err(|refusal| {
            anyhow::anyhow!(
                "the host would refuse the declaration in {}: {refusal}",
                file.display()
            )
        })?;
    let mut policy = PolicyConfig::default();
    if let Some(asked) = &spec.pod_policy {
        policy.policy = crate::delivery::resource::pod_policy_of(asked).stricter_of(policy.policy);
    }
    Ok(OfflineDeclaration {
        file: file.to_path_buf(),
        name,
        parent: ResolvedKind::by_convention(&spec.parent),
        children: spec
            .children
            .iter()
            .map(|c| {
                (
                    ResolvedKind::by_convention(&c.kind_ref()),
                    c.max_count(),
                    c.max_bytes(),
                )
            })
            .collect(),
        observed: spec
            .observe
            .iter()
            .map(|o| {
                (
                    ResolvedKind::by_convention(&o.kind_ref()),
                    o.through.iter().map(ResolvedKind::by_convention).collect(),
                )
            })
            .collect(),
        policy,
        checked_status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declared::checks::{ChildApply, Plan};
    use serde_json::json;

    const CONTROLLER: &str = r"
apiVersion: wasm-operator.io/v1alpha1
kind: PluginController
metadata: {name: memcached}
spec:
  parent: {apiVersion: cache.example.com/v1alpha1, kind: Memcached}
  children: [{apiVersion: apps/v1, kind: Deployment}]
  observe:
  - {apiVersion: v1, kind: Pod, through: [{apiVersion: apps/v1, kind: ReplicaSet}]}
  source: {file: {path: memcached.wasm}}
";

    fn declaration() -> OfflineDeclaration {
        let resource: PluginController = serde_yaml::from_str(CONTROLLER).expect("controller");
        from_resource(&resource, Path::new("controller.yaml"), &[]).expect("declaration")
    }

    fn owned_by(uid: &str) -> serde_json::Value {
        json!([{"apiVersion": "x/v1", "kind": "X", "name": "x", "uid": uid, "controller": true}])
    }

    fn objects() -> Vec<serde_json::Value> {
        vec![
            json!({"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                   "metadata": {"name": "cache", "namespace": "shop", "uid": "p"}, "spec": {"size": 1}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "cache", "uid": "d", "ownerReferences": owned_by("p")},
                   "status": {"readyReplicas": 1}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "theirs", "uid": "t", "ownerReferences": owned_by("q")}}),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "cache-1", "uid": "r", "ownerReferences": owned_by("d")}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "cache-1-b", "uid": "p2", "ownerReferences": owned_by("r")}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "cache-1-a", "uid": "p1", "ownerReferences": owned_by("r")}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "stray", "uid": "p3", "ownerReferences": owned_by("t")}}),
        ]
    }

    #[test]
    fn the_input_holds_the_owned_children_and_the_pods_below_them() {
        let declaration = declaration();
        let state = input::from_objects(objects(), &declaration).expect("state");
        let input = state.input(&declaration, std::time::SystemTime::UNIX_EPOCH);
        let names = |i: usize| -> Vec<&str> {
            input.children[i]
                .objects
                .iter()
                .map(|o| o.metadata.name.as_str())
                .collect()
        };
        assert_eq!(input.children.len(), 2);
        assert_eq!(names(0), ["cache"]);
        assert_eq!(input.children[1].kind, "Pod");
        assert_eq!(names(1), ["cache-1-a", "cache-1-b"]);
        assert_eq!(input.children[1].objects[0].body_json, "{}");
        assert_eq!(input.children[0].objects[0].metadata.namespace, "shop");
    }

    #[test]
    fn an_undeclared_kind_or_a_missing_parent_is_an_error_that_says_so() {
        let declaration = declaration();
        let mut with_secret = objects();
        with_secret.push(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}));
        let err = format!(
            "{:#}",
            input::from_objects(with_secret, &declaration).expect_err("undeclared")
        );
        assert!(
            err.contains("v1/Secret s") && err.contains("declares no such kind"),
            "{err}"
        );
        let err = format!(
            "{:#}",
            input::from_objects(objects()[1..].to_vec(), &declaration).expect_err("no parent")
        );
        assert!(
            err.contains("no cache.example.com/v1alpha1/Memcached"),
            "{err}"
        );
    }

    fn plan_for(name: &str, replicas: i64) -> Plan {
        Plan {
            applies: vec![ChildApply {
                kind: 0,
                name: name.into(),
                object: json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name, "namespace": "shop", "ownerReferences": owned_by("p"),
                                 "labels": {"wasm-operator.io/controller": "memcached"}},
                    "spec": {"replicas": replicas}}),
            }],
            status: Some(json!({"ready": true})),
            ..Plan::default()
        }
    }

    #[test]
    fn an_applied_plan_keeps_uids_and_status_and_then_writes_nothing() {
        let declaration = declaration();
        let state = input::from_objects(objects(), &declaration).expect("state");
        let plan = plan_for("cache", 3);
        assert_eq!(
            simulate::child_writes(&state, &plan),
            ["changes Deployment cache"]
        );
        assert!(simulate::status_write(&state, &plan));
        let mut serial = simulate::UidSerial::default();
        let now = std::time::SystemTime::UNIX_EPOCH;
        let after = simulate::apply(state, &plan, now, &mut serial);
        let cache = &after.children[0][0];
        assert_eq!(cache.metadata.uid.as_deref(), Some("d"));
        assert_eq!(cache.data["status"]["readyReplicas"], 1);
        assert!(simulate::child_writes(&after, &plan).is_empty());
        assert!(!simulate::status_write(&after, &plan));
        let fresh = simulate::apply(after, &plan_for("new", 1), now, &mut serial);
        let new = fresh.children[0]
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some("new"));
        assert_eq!(
            new.and_then(|c| c.metadata.uid.as_deref()),
            Some("offline-uid-1")
        );
    }

    #[test]
    fn a_child_of_someone_else_is_not_the_plugins_to_write() {
        let declaration = declaration();
        let state = input::from_objects(objects(), &declaration).expect("state");
        assert!(simulate::settle(&state, &plan_for("cache", 1), "memcached").is_ok());
        let refusal =
            simulate::settle(&state, &plan_for("theirs", 1), "memcached").expect_err("foreign");
        assert_eq!(refusal.rule, "child/not-owned");
        assert!(
            refusal.message.contains("controlled by X x"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_status_naming_pods_it_was_not_given_is_refused_offline_too() {
        let mut resource: PluginController = serde_yaml::from_str(CONTROLLER).expect("controller");
        resource.spec.checked_status = vec![crate::crd::controller::CheckedStatusSpec {
            field: "nodes".into(),
            names_of: Some(crate::crd::controller::KindRef {
                api_version: "v1".into(),
                kind: "Pod".into(),
            }),
            ..Default::default()
        }];
        let declaration =
            from_resource(&resource, Path::new("controller.yaml"), &[]).expect("declaration");
        let state = input::from_objects(objects(), &declaration).expect("state");
        let output = |nodes: serde_json::Value| crate::runtime::bindings::v3::ReconcileOutput {
            apply: Vec::new(),
            delete: Vec::new(),
            status_json: Some(json!({"nodes": nodes}).to_string()),
            requeue_after_ms: None,
            events: Vec::new(),
        };
        assert!(
            cases::check(
                &declaration,
                &state,
                output(json!(["cache-1-b", "cache-1-a"]))
            )
            .is_ok()
        );
        let refused = cases::check(&declaration, &state, output(json!(["cache-1-a", "stray"])))
            .expect_err("a pod of someone else's");
        assert!(
            refused.to_string().contains("`status/observed-fields`"),
            "{refused}"
        );
    }
}
