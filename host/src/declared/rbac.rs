//! `wasm-operator rbac`: the ClusterRole a host needs to run the declared
//! controllers of some `PluginController` files, for exactly their kinds
//! (never a wildcard): read on each parent and write on its status, full
//! use of each child kind, the PluginControllers themselves, Events, and
//! the ConfigMaps a source names.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
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
    /// The ClusterRole's name.
    #[arg(long, default_value = "wasm-operator-controllers")]
    pub name: String,
}

/// Prints the ClusterRole for `args.files`.
pub fn run(args: &RbacArgs) -> Result<ExitCode> {
    let mut controllers = Vec::new();
    for file in &args.files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(document)?;
            if value.is_null() {
                continue;
            }
            let controller: PluginController =
                serde_yaml::from_value(value).with_context(|| {
                    format!(
                        "{} holds something that is not a PluginController",
                        file.display()
                    )
                })?;
            controllers.push(controller);
        }
    }
    print!(
        "{}",
        serde_yaml::to_string(&cluster_role(&args.name, &controllers))?
    );
    Ok(ExitCode::SUCCESS)
}

/// The ClusterRole for `controllers`, rules merged per API group.
pub fn cluster_role(name: &str, controllers: &[PluginController]) -> Value {
    const READ: &[&str] = &["get", "list", "watch"];
    const STATUS: &[&str] = &["get", "patch", "update"];
    const WRITE: &[&str] = &[
        "get", "list", "watch", "create", "patch", "update", "delete",
    ];
    let mut rules: BTreeMap<(String, &[&str]), Vec<String>> = BTreeMap::new();
    let mut add = |group: &str, resource: String, verbs: &'static [&'static str]| {
        rules
            .entry((group.to_string(), verbs))
            .or_default()
            .push(resource);
    };
    add("wasm-operator.io", "plugincontrollers".into(), READ);
    add(
        "wasm-operator.io",
        "plugincontrollers/status".into(),
        STATUS,
    );
    add("events.k8s.io", "events".into(), &["create", "patch"]);
    for controller in controllers {
        let parent = resource(&controller.spec.parent);
        add(&parent.group, parent.plural.clone(), READ);
        add(&parent.group, format!("{}/status", parent.plural), STATUS);
        for child in &controller.spec.children {
            let child = resource(&child.kind_ref());
            add(&child.group, child.plural, WRITE);
        }
        if controller.spec.source.config_map.is_some() {
            add("", "configmaps".into(), READ);
        }
    }
    let rules: Vec<Value> = rules
        .into_iter()
        .map(|((group, verbs), mut resources)| {
            resources.sort();
            resources.dedup();
            json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
        })
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    })
}

/// The resource of a kind, its plural by Kubernetes' naming convention.
fn resource(kind: &KindRef) -> ApiResource {
    super::kinds::ResolvedKind::by_convention(kind).resource
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_names_exactly_the_declared_kinds() {
        let memcached: PluginController = serde_json::from_value(json!({
            "apiVersion": "wasm-operator.io/v1alpha1", "kind": "PluginController",
            "metadata": {"name": "memcached"},
            "spec": {
                "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
                "children": [{"apiVersion": "apps/v1", "kind": "Deployment"}, {"apiVersion": "v1", "kind": "Service"}],
                "source": {"configMap": {"namespace": "ops", "name": "memcached"}}
            }
        }))
        .expect("controller");
        let role = cluster_role("r", &[memcached]);
        let rules = role["rules"].as_array().expect("rules");
        let find = |group: &str, resource: &str| {
            rules
                .iter()
                .filter(|r| r["apiGroups"][0] == group)
                .find(|r| {
                    r["resources"]
                        .as_array()
                        .is_some_and(|rs| rs.iter().any(|x| x == resource))
                })
                .map(|r| r["verbs"].clone())
        };
        assert_eq!(
            find("cache.example.com", "memcacheds"),
            Some(json!(["get", "list", "watch"]))
        );
        assert_eq!(
            find("cache.example.com", "memcacheds/status"),
            Some(json!(["get", "patch", "update"]))
        );
        assert!(
            find("apps", "deployments")
                .is_some_and(|v| v.as_array().is_some_and(|v| v.contains(&json!("delete"))))
        );
        assert!(find("", "services").is_some());
        assert!(find("", "configmaps").is_some());
        assert!(!role.to_string().contains("\"*\""), "no wildcard: {role}");
        assert!(find("", "secrets").is_none());
    }
}
