//! The kinds of `wasm-operator new --kind GROUP/VERSION/KIND --owns KINDS`:
//! the parent (a custom resource of the author's, namespaced) and its child
//! kinds. A child is a common built-in kind by its name (`Deployment`,
//! `Service`, ... resolved to its `apiVersion`) or any kind as
//! `group/version/Kind` (`version/Kind` for the core group). A kind the host
//! never lets a controller own (cluster-scoped) is refused, and so is one it
//! owns only when the admin names it (`Secret`, RBAC, ...) unless the author
//! names it too, with the host's own flag, `--allow-child-kind`.

use anyhow::{Result, bail};

use crate::crd::controller::KindRef;
use crate::declared::kinds::sensitive;

/// What a scaffolded child kind starts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A Deployment, StatefulSet, DaemonSet or ReplicaSet: replicas (not a
    /// DaemonSet), a selector and a pod template.
    Workload,
    /// A Job: a pod template that runs to completion.
    Job,
    /// A CronJob: a schedule and a Job template.
    CronJob,
    /// A Pod.
    Pod,
    /// A Service selecting the workload's pods.
    Service,
    /// A ConfigMap with one key.
    ConfigMap,
    /// A Secret with one key.
    Secret,
    /// A PersistentVolumeClaim of 1 GiB.
    Claim,
    /// An Ingress to the Service of the parent's name.
    Ingress,
    /// Any other kind: an empty `spec` to fill in.
    Other,
}

/// A child kind to scaffold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildKind {
    /// Its `apiVersion` and `kind`.
    pub kind: KindRef,
    /// What it starts as.
    pub shape: Shape,
}

/// The common built-in namespaced kinds, by name: `(kind, apiVersion, shape)`.
const BUILT_IN: &[(&str, &str, Shape)] = &[
    ("Deployment", "apps/v1", Shape::Workload),
    ("StatefulSet", "apps/v1", Shape::Workload),
    ("DaemonSet", "apps/v1", Shape::Workload),
    ("ReplicaSet", "apps/v1", Shape::Workload),
    ("Job", "batch/v1", Shape::Job),
    ("CronJob", "batch/v1", Shape::CronJob),
    ("Pod", "v1", Shape::Pod),
    ("Service", "v1", Shape::Service),
    ("ConfigMap", "v1", Shape::ConfigMap),
    ("Secret", "v1", Shape::Secret),
    ("PersistentVolumeClaim", "v1", Shape::Claim),
    ("ServiceAccount", "v1", Shape::Other),
    ("Ingress", "networking.k8s.io/v1", Shape::Ingress),
    ("NetworkPolicy", "networking.k8s.io/v1", Shape::Other),
    ("PodDisruptionBudget", "policy/v1", Shape::Other),
    ("HorizontalPodAutoscaler", "autoscaling/v2", Shape::Other),
    ("Role", "rbac.authorization.k8s.io/v1", Shape::Other),
    ("RoleBinding", "rbac.authorization.k8s.io/v1", Shape::Other),
];

/// Built-in kinds that are cluster-scoped: never a controller's child.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "StorageClass",
    "CustomResourceDefinition",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
    "CertificateSigningRequest",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "PluginController",
    "JinghzhuPlugin",
];

/// Reads `--kind`: `GROUP/VERSION/KIND` of a custom resource.
pub fn parse_parent(text: &str) -> Result<KindRef> {
    let example = "e.g. --kind cache.example.com/v1alpha1/Memcached";
    let parts: Vec<&str> = text.split('/').collect();
    let [group, version, kind] = parts.as_slice() else {
        bail!("--kind {text}: give GROUP/VERSION/KIND of your custom resource ({example})");
    };
    if !is_group(group) {
        bail!(
            "--kind {text}: `{group}` is not a custom resource's API group: use a DNS name with \
             a dot that you own ({example})"
        );
    }
    check_version_and_kind(text, "--kind", version, kind, example)?;
    if CLUSTER_SCOPED.contains(kind) {
        bail!("--kind {text}: the parent must be namespaced (its children live in its namespace)");
    }
    Ok(KindRef {
        api_version: format!("{group}/{version}"),
        kind: (*kind).to_string(),
    })
}

/// Reads `--owns`: each a built-in kind's name or `group/version/Kind`.
/// `allowed` are the `--allow-child-kind` names (`Kind` or `Kind.group`).
pub fn parse_children(items: &[String], allowed: &[String]) -> Result<Vec<ChildKind>> {
    if items.is_empty() {
        bail!("--owns: name the kinds the controller creates, e.g. --owns Deployment,Service");
    }
    let mut children: Vec<ChildKind> = Vec::new();
    for item in items {
        let child = parse_child(item.trim())?;
        if children.iter().any(|c| c.kind == child.kind) {
            bail!("--owns: {} is named twice", child.kind);
        }
        if let Some(name) = sensitive(&child.kind)
            && !allowed.iter().any(|a| a == &name)
        {
            bail!(
                "--owns {item}: {} carries authority (credentials, identities, RBAC, webhooks, \
                 CRDs): the host owns it only when its admin starts it with --allow-child-kind \
                 {name}. If the controller really needs it, say so here too: add \
                 --allow-child-kind {name}",
                child.kind
            );
        }
        children.push(child);
    }
    Ok(children)
}

fn parse_child(item: &str) -> Result<ChildKind> {
    let example = "e.g. Deployment, or example.com/v1/Widget";
    if CLUSTER_SCOPED.iter().any(|k| k.eq_ignore_ascii_case(item)) {
        bail!(
            "--owns {item}: a {item} is cluster-scoped, and a controller's children live in its \
             parent's namespace: the host never lets a controller own one"
        );
    }
    let parts: Vec<&str> = item.split('/').collect();
    let (api_version, kind) = match parts.as_slice() {
        [name] => {
            let Some((kind, api_version, shape)) = BUILT_IN
                .iter()
                .find(|(k, _, _)| k.eq_ignore_ascii_case(name))
            else {
                bail!(
                    "--owns {item}: not a built-in kind this knows ({}); name any other kind as \
                     group/version/Kind ({example})",
                    BUILT_IN
                        .iter()
                        .map(|(k, _, _)| *k)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            };
            return Ok(ChildKind {
                kind: KindRef {
                    api_version: (*api_version).to_string(),
                    kind: (*kind).to_string(),
                },
                shape: *shape,
            });
        }
        [version, kind] => {
            check_version_and_kind(item, "--owns", version, kind, example)?;
            ((*version).to_string(), *kind)
        }
        [group, version, kind] => {
            if !is_group(group) {
                bail!("--owns {item}: `{group}` is not an API group ({example})");
            }
            check_version_and_kind(item, "--owns", version, kind, example)?;
            (format!("{group}/{version}"), *kind)
        }
        _ => bail!("--owns {item}: give a kind's name or group/version/Kind ({example})"),
    };
    if CLUSTER_SCOPED.contains(&kind) {
        bail!(
            "--owns {item}: a {kind} is cluster-scoped: the host never lets a controller own one"
        );
    }
    let built_in = BUILT_IN
        .iter()
        .find(|(k, v, _)| *k == kind && *v == api_version);
    Ok(ChildKind {
        kind: KindRef {
            api_version,
            kind: kind.to_string(),
        },
        shape: built_in.map_or(Shape::Other, |(_, _, shape)| *shape),
    })
}

fn check_version_and_kind(
    text: &str,
    flag: &str,
    version: &str,
    kind: &str,
    example: &str,
) -> Result<()> {
    let version_ok = version.starts_with('v')
        && version.len() > 1
        && version
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && version.chars().nth(1).is_some_and(|c| c.is_ascii_digit());
    if !version_ok {
        bail!(
            "{flag} {text}: `{version}` is not an API version such as v1 or v1alpha1 ({example})"
        );
    }
    let kind_ok = kind.len() <= 63
        && kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !kind_ok {
        bail!(
            "{flag} {text}: `{kind}` is not a kind: UpperCamelCase letters and digits ({example})"
        );
    }
    Ok(())
}

/// A DNS subdomain with at least one dot, as a CRD's group must be (and as
/// every built-in group but the core one is).
fn is_group(group: &str) -> bool {
    group.contains('.')
        && group.len() <= 253
        && group.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The plural of `kind` by Kubernetes' convention (lowercase, `s`, `es`
/// after s/x/z/ch/sh, `ies` after a consonant and `y`).
pub fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with('z')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owns(items: &[&str]) -> Result<Vec<ChildKind>> {
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        parse_children(&items, &[])
    }

    #[test]
    fn the_parent_is_a_custom_resource() {
        let parent = parse_parent("cache.example.com/v1alpha1/Memcached").expect("parent");
        assert_eq!(parent.api_version, "cache.example.com/v1alpha1");
        assert_eq!(parent.kind, "Memcached");
        for (bad, says) in [
            ("Memcached", "GROUP/VERSION/KIND"),
            ("apps/v1/Deployment", "API group"),
            ("cache.example.com/1/Memcached", "API version"),
            ("cache.example.com/v1/memcached", "UpperCamelCase"),
            ("cache.example.com/v1/Memcached/x", "GROUP/VERSION/KIND"),
        ] {
            let err = parse_parent(bad).expect_err(bad).to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn built_in_children_resolve_by_name() {
        let children = owns(&["Deployment", "service", "Ingress", "CronJob"]).expect("kinds");
        let resolved: Vec<String> = children.iter().map(|c| c.kind.to_string()).collect();
        assert_eq!(
            resolved,
            [
                "apps/v1/Deployment",
                "v1/Service",
                "networking.k8s.io/v1/Ingress",
                "batch/v1/CronJob"
            ]
        );
        assert_eq!(children[0].shape, Shape::Workload);
        let custom = owns(&["example.com/v1/Widget", "v1/ConfigMap"]).expect("kinds");
        assert_eq!(custom[0].kind.api_version, "example.com/v1");
        assert_eq!(custom[0].shape, Shape::Other);
        assert_eq!(custom[1].shape, Shape::ConfigMap);
    }

    #[test]
    fn bad_children_say_what_to_do() {
        for (bad, says) in [
            (vec!["Namespace"], "cluster-scoped"),
            (vec!["v1/Namespace"], "cluster-scoped"),
            (vec!["Widget"], "group/version/Kind"),
            (vec!["Secret"], "--allow-child-kind Secret"),
            (
                vec!["rbac.authorization.k8s.io/v1/Role"],
                "--allow-child-kind Role.rbac.authorization.k8s.io",
            ),
            (vec!["Deployment", "Deployment"], "twice"),
            (vec![], "--owns Deployment,Service"),
        ] {
            let err = owns(&bad).expect_err(&bad.join(",")).to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        let allowed = parse_children(&["Secret".into()], &["Secret".into()]).expect("allowed");
        assert_eq!(allowed[0].shape, Shape::Secret);
    }

    #[test]
    fn plurals_follow_the_convention() {
        for (kind, plural_form) in [
            ("Memcached", "memcacheds"),
            ("Policy", "policies"),
            ("Gateway", "gateways"),
            ("Ingress", "ingresses"),
            ("Box", "boxes"),
        ] {
            assert_eq!(plural(kind), plural_form);
        }
    }
}
