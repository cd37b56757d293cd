//! A declared kind resolved through API discovery, and which kinds a
//! controller may own: never a cluster-scoped kind; RBAC, admission
//! webhooks, CRDs, Secrets and the host's own resources only when the
//! admin names them (`--allow-child-kind`).

use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};

use crate::crd::controller::KindRef;
use crate::refusal::Refusal;

/// The rules a declaration is refused by.
pub mod rules {
    /// A declared kind the API server does not serve.
    pub const UNKNOWN_KIND: &str = "controller/unknown-kind";
    /// A parent or child kind that is cluster-scoped.
    pub const CLUSTER_SCOPED: &str = "controller/cluster-scoped";
    /// A child kind that carries authority, not named by the admin.
    pub const SENSITIVE_KIND: &str = "controller/sensitive-kind";
    /// The same child kind declared twice, or more than the host allows.
    pub const CHILD_KINDS: &str = "controller/child-kinds";
}

/// Groups whose kinds carry authority over the cluster.
const SENSITIVE_GROUPS: [&str; 5] = [
    "rbac.authorization.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "wasm-operator.io",
    "jinghzhu.io",
];

/// Core kinds that carry authority (credentials, identities).
const SENSITIVE_CORE_KINDS: [&str; 2] = ["Secret", "ServiceAccount"];

/// A kind the API server serves, as the host watches and writes it.
#[derive(Clone, Debug)]
pub struct ResolvedKind {
    /// What was declared.
    pub declared: KindRef,
    /// Its resource (plural, group, version).
    pub resource: ApiResource,
}

impl ResolvedKind {
    /// `kind` with its resource named by Kubernetes' convention (the plural
    /// from the kind), without asking the API server: for tools that print
    /// what a declaration needs, and for tests.
    pub fn by_convention(kind: &KindRef) -> Self {
        let (group, version) = kind.group_version();
        Self {
            declared: kind.clone(),
            resource: ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &kind.kind)),
        }
    }

    /// `plural.group/version` (`plural/version` for the core group).
    pub fn resource_name(&self) -> String {
        let ar = &self.resource;
        if ar.group.is_empty() {
            format!("{}/{}", ar.plural, ar.version)
        } else {
            format!("{}.{}/{}", ar.plural, ar.group, ar.version)
        }
    }
}

/// Whether `kind` needs the admin's `--allow-child-kind` to be a child:
/// `Kind.group` (or `Kind` for the core group) as the flag names it.
pub fn sensitive(kind: &KindRef) -> Option<String> {
    let (group, _) = kind.group_version();
    let name = if group.is_empty() {
        kind.kind.clone()
    } else {
        format!("{}.{group}", kind.kind)
    };
    let is_sensitive = SENSITIVE_GROUPS.contains(&group)
        || (group.is_empty() && SENSITIVE_CORE_KINDS.contains(&kind.kind.as_str()));
    is_sensitive.then_some(name)
}

/// Resolves `kind` through discovery; it must be namespaced.
pub async fn resolve(client: &Client, kind: &KindRef) -> Result<ResolvedKind, Refusal> {
    let (group, version) = kind.group_version();
    let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
    let (resource, capabilities) = pinned_kind(client, &gvk).await.map_err(|err| {
        Refusal::new(
            rules::UNKNOWN_KIND,
            format!(
                "{kind} is not served by the API server ({err}); install its CRD, or correct \
                 apiVersion and kind"
            ),
        )
    })?;
    if capabilities.scope == Scope::Cluster {
        return Err(Refusal::new(
            rules::CLUSTER_SCOPED,
            format!("{kind} is cluster-scoped: a controller's parent and children are namespaced"),
        ));
    }
    Ok(ResolvedKind {
        declared: kind.clone(),
        resource,
    })
}

/// Checks the declared child kinds before any is resolved: no duplicate,
/// none sensitive unless `allowed` names it (`Kind.group`).
pub fn check_children(children: &[KindRef], allowed: &[String]) -> Result<(), Refusal> {
    for (i, kind) in children.iter().enumerate() {
        if children[..i].contains(kind) {
            return Err(Refusal::new(
                rules::CHILD_KINDS,
                format!("{kind} is declared twice"),
            ));
        }
        if let Some(name) = sensitive(kind)
            && !allowed.iter().any(|a| a == &name)
        {
            return Err(Refusal::new(
                rules::SENSITIVE_KIND,
                format!(
                    "{kind} carries authority (RBAC, webhooks, CRDs, Secrets, service accounts, \
                     the host's own resources): the host owns it only when started with \
                     --allow-child-kind {name}"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(api_version: &str, kind: &str) -> KindRef {
        KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn authority_needs_the_admin() {
        assert_eq!(sensitive(&kind("v1", "Secret")).as_deref(), Some("Secret"));
        assert_eq!(
            sensitive(&kind("rbac.authorization.k8s.io/v1", "Role")).as_deref(),
            Some("Role.rbac.authorization.k8s.io")
        );
        assert_eq!(sensitive(&kind("apps/v1", "Deployment")), None);
        assert_eq!(sensitive(&kind("v1", "ConfigMap")), None);
        let refused = check_children(&[kind("v1", "Secret")], &[]).expect_err("secret");
        assert_eq!(refused.rule, rules::SENSITIVE_KIND);
        assert!(check_children(&[kind("v1", "Secret")], &["Secret".into()]).is_ok());
        let twice = [kind("apps/v1", "Deployment"), kind("apps/v1", "Deployment")];
        assert_eq!(
            check_children(&twice, &[]).expect_err("twice").rule,
            rules::CHILD_KINDS
        );
    }
}
