//! Applies a checked [`Plan`]: first every child's ownership is settled
//! (nothing is written if one is not the parent's to write), then each
//! child by server-side apply under the controller's field manager
//! (skipped when the host applied the same desired child before and the
//! cached child has every field of it; see [`super::applied`]),
//! deletes with the child's uid as a precondition, and the parent's status
//! by server-side apply on its status subresource. Writes stop at the
//! first failure; what was written is idempotent, so the retry makes the
//! same plan again.
//!
//! Whose a child of the desired name is: absent (it is created), controlled
//! by the parent (it is updated), an orphan carrying this controller's
//! label (it is adopted, as a ReplicaSet adopts its pods), or anything else
//! (refused by `child/not-owned`: a plugin never takes over an object by
//! naming it).

use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::DynamicObject;
use serde_json::{Value, json};

use std::sync::Arc;

use crate::refusal::Refusal;

use super::applied::AppliedMemory;
use super::checks::{CONTROLLER_LABEL, Plan, rules};
use super::kinds::ResolvedKind;

/// Why a plan was not (wholly) applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A child of the plan is not the parent's to write; nothing written.
    #[error("{0}")]
    Refused(Refusal),
    /// The API server failed a request.
    #[error("{0}")]
    Api(#[from] kube::Error),
}

/// What one apply wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Children applied (created or changed).
    pub applied: u32,
    /// Children already as desired (no request).
    pub unchanged: u32,
    /// Children deleted.
    pub deleted: u32,
    /// Whether the status was written.
    pub status: bool,
}

/// Where a plan goes: the client, the controller's field manager, the
/// kinds by index.
pub struct Target<'a> {
    /// The host's client.
    pub client: &'a Client,
    /// `wasm-operator/<controller>`.
    pub field_manager: &'a str,
    /// The parent's kind.
    pub parent: &'a ResolvedKind,
    /// The child kinds, in declaration order.
    pub children: &'a [ResolvedKind],
    /// The controller's name (the value of its children's label).
    pub controller: &'a str,
    /// What it applied last to each child.
    pub applied: &'a AppliedMemory,
}

/// The parent a plan is applied for.
pub struct ParentRef<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its uid.
    pub uid: &'a str,
}

/// Applies `plan` for `parent`; `cached` finds a child in the cache (this
/// controller's labelled objects) by kind index and name.
pub async fn apply(
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    plan: &Plan,
    cached: impl Fn(usize, &str) -> Option<Arc<DynamicObject>>,
) -> Result<Written, ApplyError> {
    let namespace = parent.namespace;
    let mut live = Vec::with_capacity(plan.applies.len());
    for child in &plan.applies {
        let found = match cached(child.kind, &child.name) {
            Some(obj) => Some(obj),
            None => children_api(target, child.kind, namespace)
                .get_opt(&child.name)
                .await?
                .map(Arc::new),
        };
        if let Some(obj) = &found {
            may_write(target, parent, obj)?;
        }
        live.push(found);
    }
    let mut written = Written::default();
    let params = PatchParams::apply(target.field_manager).force();
    for (child, live) in plan.applies.iter().zip(&live) {
        let applied = target.applied;
        if live.as_ref().is_some_and(|obj| already(obj, &child.object))
            && applied.same(parent.uid, child.kind, &child.name, &child.object)
        {
            written.unchanged += 1;
            continue;
        }
        let api = children_api(target, child.kind, namespace);
        api.patch(&child.name, &params, &Patch::Apply(&child.object))
            .await?;
        applied.remember(parent.uid, child.kind, &child.name, &child.object);
        written.applied += 1;
    }
    for gone in &plan.deletes {
        let api = children_api(target, gone.kind, namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(gone.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        target
            .applied
            .forget_child(parent.uid, gone.kind, &gone.name);
        match api.delete(&gone.name, &params).await {
            Ok(_) => written.deleted += 1,
            // Gone already, or a new object of that name: not ours to delete.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(err) => return Err(err.into()),
        }
    }
    if let Some(status) = &plan.status {
        let kind = &target.parent.resource;
        let api: Api<DynamicObject> = Api::namespaced_with(target.client.clone(), namespace, kind);
        let body = json!({
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "status": status,
        });
        api.patch_status(parent.name, &params, &Patch::Apply(&body))
            .await?;
        written.status = true;
    }
    Ok(written)
}

/// Whether the existing child `obj` is the parent's to write: controlled
/// by it, or an orphan with this controller's label (adopted).
fn may_write(
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    obj: &DynamicObject,
) -> Result<(), ApplyError> {
    let controller = obj
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true));
    let labelled = obj
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(CONTROLLER_LABEL))
        .is_some_and(|value| value == target.controller);
    let ok = match controller {
        Some(owner) => owner.uid == parent.uid,
        None => labelled,
    };
    if ok {
        return Ok(());
    }
    let whose = match controller {
        Some(owner) => format!("is controlled by {} {}", owner.kind, owner.name),
        None => format!(
            "exists without the {CONTROLLER_LABEL}={} label",
            target.controller
        ),
    };
    Err(ApplyError::Refused(Refusal::new(
        rules::NOT_OWNED,
        format!(
            "{} {}/{} {whose}: only the parent's own children (or orphans labelled for this \
             controller) are written",
            obj.types.as_ref().map_or("object", |t| t.kind.as_str()),
            parent.namespace,
            obj.metadata.name.as_deref().unwrap_or_default()
        ),
    )))
}

fn children_api(target: &Target<'_>, kind: usize, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        target.client.clone(),
        namespace,
        &target.children[kind].resource,
    )
}

/// Whether `live` already has every field of `desired` as desired (the
/// API server's defaults may add more): then an apply would change nothing.
pub fn already(live: &DynamicObject, desired: &Value) -> bool {
    let Ok(live) = serde_json::to_value(live) else {
        return false;
    };
    contains(&live, desired)
}

/// `desired` ⊆ `live`: objects by key, arrays element by element (of the
/// same length), scalars equal.
pub fn contains(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => desired
            .iter()
            .all(|(key, want)| live.get(key).is_some_and(|have| contains(have, want))),
        (Value::Array(live), Value::Array(desired)) => {
            live.len() == desired.len()
                && live
                    .iter()
                    .zip(desired)
                    .all(|(have, want)| contains(have, want))
        }
        (Value::Number(have), Value::Number(want)) => have.as_f64() == want.as_f64(),
        (have, want) => have == want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_added_by_the_server_do_not_count_as_a_change() {
        let live = json!({
            "metadata": {"name": "a", "labels": {"x": "1"}, "resourceVersion": "7"},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "m", "image": "memcached", "imagePullPolicy": "IfNotPresent"}
            ]}}}
        });
        let same = json!({
            "metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "m", "image": "memcached"}]}}}
        });
        assert!(contains(&live, &same));
        let scaled = json!({"spec": {"replicas": 4}});
        assert!(!contains(&live, &scaled));
        let another_container = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "m"}, {"name": "n"}
        ]}}}});
        assert!(!contains(&live, &another_container));
        assert!(!contains(
            &live,
            &json!({"metadata": {"labels": {"y": "2"}}})
        ));
    }
}
