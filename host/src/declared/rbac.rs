//! `wasm-operator rbac`: the permissions a host needs to run the declared
//! controllers of some `PluginController` files, for exactly their kinds
//! (never a wildcard): read on each parent and write on its status, full
//! use of each child kind, read on each observed kind and the kinds it is
//! reached through, the PluginControllers themselves and Events,
//! cluster-wide; the ConfigMaps a source names and the Secrets a
//! verification key names, by name, in their namespaces.
//!
//! Printed as manifests (a ClusterRole, a Role per namespace, and their
//! bindings to a ServiceAccount when one is named) or as values of the Helm
//! chart (`examples/deploy/helm/wasm-operator`), which then installs a host
//! of exactly these controllers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use kube::core::ApiResource;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::crd::controller::{KindRef, PluginController};

/// Arguments of `wasm-operator rbac`.
#[derive(Debug, clap::Args)]
pub struct RbacArgs {
    /// PluginController manifests (YAML, several documents each allowed).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The roles' (and bindings') name.
    #[arg(long, default_value = "wasm-operator-controllers")]
    pub name: String,
    /// Also bind the roles to this ServiceAccount, `NAMESPACE/NAME`
    /// (manifests only: the chart binds its own).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub service_account: Option<String>,
    /// What to print.
    #[arg(long, value_enum, default_value_t = Format::Manifests)]
    pub format: Format,
}

/// What `wasm-operator rbac` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A ClusterRole and a Role per namespace that holds a plugin source or
    /// key (and their bindings with `--service-account`).
    Manifests,
    /// Values for the Helm chart: a host of these declared controllers only,
    /// its RBAC these rules, the PluginControllers installed with it.
    HelmValues,
}

/// The permissions of a set of declared controllers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Permissions {
    /// Rules granted in every namespace (a ClusterRole's).
    pub cluster: Vec<Value>,
    /// Rules granted in one namespace only (a Role's there), by namespace.
    pub namespaced: BTreeMap<String, Vec<Value>>,
}

/// Prints the permissions for `args.files` in `args.format`.
pub fn run(args: &RbacArgs) -> Result<ExitCode> {
    let mut controllers = Vec::new();
    let mut documents = Vec::new();
    for file in &args.files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(document)
                .with_context(|| format!("{} is not YAML", file.display()))?;
            if value.is_null() {
                continue;
            }
            let controller: PluginController =
                serde_yaml::from_value(value.clone()).with_context(|| {
                    format!(
                        "{} holds something that is not a PluginController",
                        file.display()
                    )
                })?;
            controllers.push(controller);
            documents.push(value);
        }
    }
    if controllers.is_empty() {
        bail!("no PluginController in the files given");
    }
    let permissions = permissions(&controllers);
    match args.format {
        Format::Manifests => {
            let subject = args
                .service_account
                .as_deref()
                .map(service_account)
                .transpose()?;
            let objects = manifests(&args.name, &permissions, subject);
            let texts: Vec<String> = objects
                .iter()
                .map(serde_yaml::to_string)
                .collect::<Result<_, _>>()?;
            print!("{}", texts.join("---\n"));
        }
        Format::HelmValues => {
            if args.service_account.is_some() {
                bail!(
                    "--service-account binds the printed roles; the chart binds its own \
                     ServiceAccount (drop one of --service-account and --format helm-values)"
                );
            }
            print!("{}", helm_values(&args.files, &permissions, documents)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `NAMESPACE/NAME` of a ServiceAccount.
fn service_account(text: &str) -> Result<(String, String)> {
    match text.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok((namespace.to_string(), name.to_string()))
        }
        _ => bail!("--service-account takes NAMESPACE/NAME, e.g. wasm-operator/wasm-operator"),
    }
}

const READ: &[&str] = &["get", "list", "watch"];
const STATUS: &[&str] = &["get", "patch", "update"];
const WRITE: &[&str] = &[
    "get", "list", "watch", "create", "patch", "update", "delete",
];

/// Verbs of a rule.
type Verbs = &'static [&'static str];

/// What the resources of one rule share: API group, verbs, names (none:
/// every object).
type RuleKey = (String, Verbs, Vec<String>);

/// Rules merged per [`RuleKey`].
#[derive(Default)]
struct Rules(BTreeMap<RuleKey, Vec<String>>);

impl Rules {
    fn add(&mut self, group: &str, resource: String, verbs: Verbs) {
        self.add_named(group, resource, verbs, Vec::new());
    }

    fn add_named(&mut self, group: &str, resource: String, verbs: Verbs, names: Vec<String>) {
        self.0
            .entry((group.to_string(), verbs, names))
            .or_default()
            .push(resource);
    }

    fn into_rules(self) -> Vec<Value> {
        // Names granted one by one, a rule per resource (RBAC grants the
        // names for every resource of the rule).
        let mut named: BTreeMap<(String, Verbs, String), Vec<String>> = BTreeMap::new();
        let mut rules = Vec::new();
        for ((group, verbs, names), mut resources) in self.0 {
            resources.sort();
            resources.dedup();
            if names.is_empty() {
                rules.push(json!({"apiGroups": [group], "resources": resources, "verbs": verbs}));
            } else {
                for resource in resources {
                    named
                        .entry((group.clone(), verbs, resource))
                        .or_default()
                        .extend(names.iter().cloned());
                }
            }
        }
        for ((group, verbs, resource), mut names) in named {
            names.sort();
            names.dedup();
            rules.push(json!({
                "apiGroups": [group], "resources": [resource], "resourceNames": names, "verbs": verbs
            }));
        }
        rules
    }
}

/// The permissions `controllers` need.
pub fn permissions(controllers: &[PluginController]) -> Permissions {
    let mut cluster = Rules::default();
    let mut namespaced: BTreeMap<String, Rules> = BTreeMap::new();
    cluster.add("wasm-operator.io", "plugincontrollers".into(), READ);
    cluster.add(
        "wasm-operator.io",
        "plugincontrollers/status".into(),
        STATUS,
    );
    cluster.add("events.k8s.io", "events".into(), &["create", "patch"]);
    for controller in controllers {
        let spec = &controller.spec;
        let parent = resource(&spec.parent);
        cluster.add(&parent.group, parent.plural.clone(), READ);
        cluster.add(&parent.group, format!("{}/status", parent.plural), STATUS);
        for child in &spec.children {
            let child = resource(&child.kind_ref());
            cluster.add(&child.group, child.plural, WRITE);
        }
        for observed in &spec.observe {
            for kind in std::iter::once(&observed.kind_ref()).chain(&observed.through) {
                let read = resource(kind);
                cluster.add(&read.group, read.plural, READ);
            }
        }
        if spec.tenant.is_some() {
            // A tenant's namespaces are opted in by their labels.
            cluster.add("", "namespaces".into(), READ);
        }
        if let Some(source) = &spec.source.config_map {
            namespaced
                .entry(source.namespace.clone())
                .or_default()
                .add_named("", "configmaps".into(), READ, vec![source.name.clone()]);
        }
        for key in spec.verification.iter().flat_map(|v| &v.keys) {
            let secret = &key.secret_ref;
            namespaced
                .entry(secret.namespace.clone())
                .or_default()
                .add_named("", "secrets".into(), &["get"], vec![secret.name.clone()]);
        }
    }
    Permissions {
        cluster: cluster.into_rules(),
        namespaced: namespaced
            .into_iter()
            .map(|(namespace, rules)| (namespace, rules.into_rules()))
            .collect(),
    }
}

/// The ClusterRole and Roles `name`, bound to `subject` when given.
pub fn manifests(
    name: &str,
    permissions: &Permissions,
    subject: Option<(String, String)>,
) -> Vec<Value> {
    let mut objects = vec![json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": permissions.cluster,
    })];
    let subjects = subject.map(|(namespace, account)| {
        json!([{"kind": "ServiceAccount", "namespace": namespace, "name": account}])
    });
    if let Some(subjects) = &subjects {
        objects.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        }));
    }
    for (namespace, rules) in &permissions.namespaced {
        objects.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace},
            "rules": rules,
        }));
        if let Some(subjects) = &subjects {
            objects.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": subjects,
            }));
        }
    }
    objects
}

/// The chart's values for a host of exactly these controllers.
fn helm_values(
    files: &[PathBuf],
    permissions: &Permissions,
    controllers: Vec<serde_yaml::Value>,
) -> Result<String> {
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let values = json!({
        "plugin": {"enabled": false},
        "pluginControllers": {
            "enabled": true,
            "rules": permissions.cluster,
            "namespaceRules": permissions
                .namespaced
                .iter()
                .map(|(namespace, rules)| json!({"namespace": namespace, "rules": rules}))
                .collect::<Vec<_>>(),
            "manifests": controllers,
        },
    });
    Ok(format!(
        "# Values of the wasm-operator chart for the PluginControllers in\n\
         # {}\n\
         # (`wasm-operator rbac --format helm-values`): the host runs these\n\
         # declared controllers only (plugin.enabled: false; drop it to serve a\n\
         # JinghzhuPlugin too), with RBAC for exactly their kinds.\n{}",
        files.join(", "),
        serde_yaml::to_string(&values)?
    ))
}

/// The resource of a kind, its plural by Kubernetes' naming convention.
fn resource(kind: &KindRef) -> ApiResource {
    super::kinds::ResolvedKind::by_convention(kind).resource
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memcached() -> PluginController {
        serde_json::from_value(json!({
            "apiVersion": "wasm-operator.io/v1alpha1", "kind": "PluginController",
            "metadata": {"name": "memcached"},
            "spec": {
                "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
                "children": [{"apiVersion": "apps/v1", "kind": "Deployment"}, {"apiVersion": "v1", "kind": "Service"}],
                "observe": [{"apiVersion": "v1", "kind": "Pod", "through": [{"apiVersion": "apps/v1", "kind": "ReplicaSet"}]}],
                "source": {"configMap": {"namespace": "ops", "name": "memcached"}}
            }
        }))
        .expect("controller")
    }

    /// The verbs of the rule granting `resource` of `group` (and its names).
    fn find(rules: &[Value], group: &str, resource: &str) -> Option<(Value, Value)> {
        rules
            .iter()
            .filter(|r| r["apiGroups"][0] == group)
            .find(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == resource))
            })
            .map(|r| (r["verbs"].clone(), r["resourceNames"].clone()))
    }

    #[test]
    fn the_role_names_exactly_the_declared_kinds() {
        let permissions = permissions(&[memcached()]);
        let rules = &permissions.cluster;
        let verbs = |group, resource| find(rules, group, resource).map(|(verbs, _)| verbs);
        assert_eq!(
            verbs("cache.example.com", "memcacheds"),
            Some(json!(["get", "list", "watch"]))
        );
        assert_eq!(
            verbs("cache.example.com", "memcacheds/status"),
            Some(json!(["get", "patch", "update"]))
        );
        assert!(
            verbs("apps", "deployments")
                .is_some_and(|v| v.as_array().is_some_and(|v| v.contains(&json!("delete"))))
        );
        assert!(verbs("", "services").is_some());
        // Observed kinds and the chain to them: read only.
        assert_eq!(verbs("", "pods"), Some(json!(["get", "list", "watch"])));
        assert_eq!(
            verbs("apps", "replicasets"),
            Some(json!(["get", "list", "watch"]))
        );
        assert_eq!(
            verbs("wasm-operator.io", "plugincontrollers"),
            Some(json!(["get", "list", "watch"]))
        );
        assert!(verbs("events.k8s.io", "events").is_some());
        // The source ConfigMap by name, in its namespace only.
        assert!(verbs("", "configmaps").is_none());
        assert_eq!(
            find(&permissions.namespaced["ops"], "", "configmaps"),
            Some((json!(["get", "list", "watch"]), json!(["memcached"])))
        );
        let all = serde_json::to_string(&permissions.cluster).expect("json");
        assert!(!all.contains("\"*\""), "no wildcard: {all}");
        assert!(verbs("", "secrets").is_none());
        assert!(verbs("rbac.authorization.k8s.io", "roles").is_none());
    }

    #[test]
    fn namespaces_are_read_only_with_a_tenant() {
        let verbs = |controllers: &[PluginController]| {
            find(&permissions(controllers).cluster, "", "namespaces").map(|(verbs, _)| verbs)
        };
        assert_eq!(verbs(&[memcached()]), None, "no tenant: no Namespaces");
        let mut tenant = memcached();
        tenant.metadata.name = Some("team-a".into());
        tenant.spec.tenant = Some(crate::crd::controller::TenantSpec {
            of: "memcached".into(),
            namespaces: vec!["team-a".into()],
        });
        assert_eq!(
            verbs(&[memcached(), tenant]),
            Some(json!(["get", "list", "watch"]))
        );
    }

    #[test]
    fn key_secrets_are_granted_by_name_and_rules_merge_across_controllers() {
        let mut signed = memcached();
        signed.spec.source.config_map = None;
        signed.spec.verification = Some(
            serde_json::from_value(json!({"keys": [
                {"name": "release", "secretRef": {"namespace": "keys", "name": "cosign", "key": "cosign.pub"}}
            ]}))
            .expect("verification"),
        );
        let permissions = permissions(&[memcached(), signed]);
        assert_eq!(
            find(&permissions.namespaced["keys"], "", "secrets"),
            Some((json!(["get"]), json!(["cosign"])))
        );
        // One rule per group and verbs: the second controller adds nothing.
        let reads: Vec<&Value> = permissions
            .cluster
            .iter()
            .filter(|r| r["apiGroups"][0] == "cache.example.com")
            .collect();
        assert_eq!(reads.len(), 2, "{reads:?}");
        assert_eq!(
            permissions.namespaced.keys().collect::<Vec<_>>(),
            ["keys", "ops"]
        );
    }

    #[test]
    fn manifests_bind_every_role_to_the_service_account_named() {
        let permissions = permissions(&[memcached()]);
        let objects = manifests(
            "ctl",
            &permissions,
            Some(("wasm-operator".into(), "host".into())),
        );
        let kinds: Vec<(&str, &str)> = objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["namespace"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("ClusterRole", ""),
                ("ClusterRoleBinding", ""),
                ("Role", "ops"),
                ("RoleBinding", "ops")
            ]
        );
        for binding in objects.iter().filter(|o| {
            o["kind"]
                .as_str()
                .is_some_and(|kind| kind.ends_with("Binding"))
        }) {
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "namespace": "wasm-operator", "name": "host"}])
            );
        }
        assert_eq!(manifests("ctl", &permissions, None).len(), 2);
        assert!(service_account("no-slash").is_err());
        assert!(service_account("a/b/c").is_err());
    }

    #[test]
    fn helm_values_turn_the_jinghzhu_plugin_off_and_carry_the_controllers() {
        let permissions = permissions(&[memcached()]);
        let document = serde_yaml::to_value(memcached()).expect("yaml");
        let text =
            helm_values(&[PathBuf::from("c.yaml")], &permissions, vec![document]).expect("values");
        let values: Value = serde_yaml::from_str(&text).expect("parses");
        assert_eq!(values["plugin"]["enabled"], json!(false));
        let declared = &values["pluginControllers"];
        assert_eq!(declared["enabled"], json!(true));
        assert_eq!(declared["rules"], json!(permissions.cluster));
        assert_eq!(declared["namespaceRules"][0]["namespace"], json!("ops"));
        assert_eq!(
            declared["manifests"][0]["metadata"]["name"],
            json!("memcached")
        );
    }
}
