//! Applies a checked [`Plan`]: first every child's ownership is settled
//! (nothing is written if one is not the parent's to write), then each
//! child by server-side apply under the controller's field manager
//! (skipped when the host applied the same desired child before and the
//! cached child has every field of it; see [`super::applied`]),
//! deletes with the child's uid as a precondition (none for a child the
//! cache shows terminating: it was deleted already), and the parent's status
//! by server-side apply on its status subresource. Writes stop at the
//! first failure; what was written is idempotent, so the retry makes the
//! same plan again.
//!
//! Whose a child of the desired name is: absent (it is created), controlled
//! by the parent (it is updated), an orphan carrying this controller's
//! label (it is adopted, as a ReplicaSet adopts its pods), or anything else
//! (refused by `child/not-owned`: a plugin never takes over an object by
//! naming it). An adoption is a JSON patch that first tests the orphan's
//! uid and `resourceVersion`, so an orphan changed since it was read is
//! not taken over (the reconcile fails and is retried on a fresh read).
//!
//! Creates and deletes are recorded in the controller's expectations
//! before they are sent, so the parent's next reconcile waits for its
//! cache to show them. A child still controlled by the parent that lost
//! the controller's label is released ([`release`]): its owner reference is
//! removed by a JSON patch that tests its uid and `resourceVersion`.
//!
//! Every write passes the target's write fence ([`Target::fence`]) right
//! before it is sent: sharded, a write for a parent goes out only while
//! this replica's hold on the parent's shard is valid on its own clock.

use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::DynamicObject;
use serde_json::{Value, json};

use std::sync::Arc;

use crate::apply::expectations::Expectations;
use crate::apply::fence::{Lapsed, WriteFence};
use crate::refusal::Refusal;

use super::applied::AppliedMemory;
use super::budget::WriteBudget;
use super::checks::{CONTROLLER_LABEL, ChildApply, ChildDelete, Plan, rules};
use super::children::Departed;
use super::kinds::ResolvedKind;
use crate::kube_api::owner_index::controller_uid;

/// Why a plan was not (wholly) applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A child of the plan is not the parent's to write; nothing written.
    #[error("{0}")]
    Refused(Refusal),
    /// The API server failed a request.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// The plan's writes are over the controller's budget; nothing written.
    #[error(
        "[{rule}] this plan's {writes} writes are over the controller's budget of {per_second} \
         writes per second (bursts of {burst}); written in {wait:?}",
        rule = super::budget::RULE
    )]
    OverBudget {
        /// The plan's writes.
        writes: u32,
        /// The budget's rate.
        per_second: u32,
        /// The budget's burst.
        burst: u32,
        /// How long until the budget holds them.
        wait: std::time::Duration,
    },
    /// The hold the write was for (the parent's shard) lapsed; not sent.
    #[error("{verb} not sent: {lapsed}")]
    Fenced {
        /// `apply`, `adopt`, `release`, `delete` or `patch_status`.
        verb: &'static str,
        /// Why.
        lapsed: Lapsed,
    },
    /// The plan's writes are over its namespace's share of the budget;
    /// nothing written.
    #[error(
        "[{rule}] this plan's {writes} writes are over namespace {namespace}'s share of the \
         controller's budget: no namespace may spend its last {reserve} writes but {share_per_second} \
         writes per second of its own; written in {wait:?}",
        rule = super::budget::NAMESPACE_RULE
    )]
    OverNamespaceShare {
        /// The plan's writes.
        writes: u32,
        /// The parent's namespace.
        namespace: String,
        /// The reserve of the controller's bucket.
        reserve: u32,
        /// The rate of a namespace's share.
        share_per_second: f64,
        /// How long until the share holds them.
        wait: std::time::Duration,
    },
}

/// Takes the plan's `writes` from the budget, fairly between namespaces.
fn spend(budget: &WriteBudget, namespace: &str, writes: u32) -> Result<(), ApplyError> {
    budget.try_spend_in(namespace, writes).map_err(|denied| {
        if denied.namespace_share {
            ApplyError::OverNamespaceShare {
                writes,
                namespace: namespace.to_string(),
                reserve: budget.reserve() as u32,
                share_per_second: budget.share().0,
                wait: denied.wait,
            }
        } else {
            ApplyError::OverBudget {
                writes,
                per_second: budget.per_second(),
                burst: budget.burst(),
                wait: denied.wait,
            }
        }
    })
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
    /// Where creates and deletes are awaited, by the parent's uid.
    pub expectations: &'a Expectations,
    /// Told the kind index and uid of each child before it is deleted.
    pub deleting: &'a (dyn Fn(usize, &str) + Sync),
    /// The controller's write budget.
    pub budget: &'a WriteBudget,
    /// Checked right before each write ([`WriteFence::open`] unsharded).
    pub fence: &'a WriteFence,
}

/// Checks the fence right before a `verb` write.
fn fenced(target: &Target<'_>, verb: &'static str) -> Result<(), ApplyError> {
    target
        .fence
        .check()
        .map_err(|lapsed| ApplyError::Fenced { verb, lapsed })
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
    let live = settle_ownership(target, parent, plan, &cached).await?;
    let unchanged: Vec<bool> = plan
        .applies
        .iter()
        .zip(&live)
        .map(|(child, live)| {
            live.as_ref().is_some_and(|obj| already(obj, &child.object))
                && target
                    .applied
                    .same(parent.uid, child.kind, &child.name, &child.object)
        })
        .collect();
    let deletes: Vec<&ChildDelete> = plan
        .deletes
        .iter()
        .filter(|gone| !terminating(&cached, gone))
        .collect();
    let writes = unchanged.iter().filter(|same| !**same).count() + deletes.len();
    let writes = u32::try_from(writes).unwrap_or(u32::MAX) + u32::from(plan.status.is_some());
    spend(target.budget, parent.namespace, writes)?;
    let mut written = Written::default();
    let params = PatchParams::apply(target.field_manager).force();
    for ((child, live), unchanged) in plan.applies.iter().zip(&live).zip(unchanged) {
        if unchanged {
            written.unchanged += 1;
            continue;
        }
        apply_child(target, parent, child, live.as_ref(), &params).await?;
        written.applied += 1;
    }
    for gone in deletes {
        if delete_child(target, parent, gone).await? {
            written.deleted += 1;
        }
    }
    if let Some(status) = &plan.status {
        apply_status(target, parent, status, &params).await?;
        written.status = true;
    }
    Ok(written)
}

/// Each desired child as it is now (the cache's copy, else a read), once
/// every one that exists is known to be the parent's to write.
async fn settle_ownership(
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    plan: &Plan,
    cached: &impl Fn(usize, &str) -> Option<Arc<DynamicObject>>,
) -> Result<Vec<Option<Arc<DynamicObject>>>, ApplyError> {
    let mut live = Vec::with_capacity(plan.applies.len());
    for child in &plan.applies {
        let found = match cached(child.kind, &child.name) {
            Some(obj) => Some(obj),
            None => children_api(target, child.kind, parent.namespace)
                .get_opt(&child.name)
                .await?
                .map(Arc::new),
        };
        if let Some(obj) = &found {
            may_write(target, parent, obj)?;
        }
        live.push(found);
    }
    Ok(live)
}

/// Server-side applies one child (adopting it first if it is an orphan),
/// with a create recorded in the expectations before it is sent.
async fn apply_child(
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    child: &ChildApply,
    live: Option<&Arc<DynamicObject>>,
    params: &PatchParams,
) -> Result<(), ApplyError> {
    if let Some(orphan) = live.filter(|obj| controller_uid(obj.as_ref()).is_none()) {
        adopt(target, parent, child, orphan).await?;
    }
    let api = children_api(target, child.kind, parent.namespace);
    let creating = live.is_none();
    fenced(target, "apply")?;
    if creating {
        target.expectations.expect_creations(parent.uid, 1);
    }
    let made = api
        .patch(&child.name, params, &Patch::Apply(&child.object))
        .await;
    if made.is_ok() {
        target
            .applied
            .remember(parent.uid, child.kind, &child.name, &child.object);
    }
    match made {
        Ok(made) => match (creating, made.metadata.uid) {
            (true, Some(uid)) => target.expectations.created(parent.uid, &uid),
            (true, None) => target.expectations.creation_failed(parent.uid),
            (false, _) => {}
        },
        Err(err) => {
            if creating {
                // An apply is idempotent: a create of unknown outcome
                // is safe to send again, nothing to wait for.
                target.expectations.creation_failed(parent.uid);
            }
            return Err(err.into());
        }
    }
    Ok(())
}

/// Deletes one child with its uid as a precondition, recorded in the
/// expectations before it is sent; `false` when it was gone already or
/// is another object of that name now.
async fn delete_child(
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    gone: &ChildDelete,
) -> Result<bool, ApplyError> {
    let api = children_api(target, gone.kind, parent.namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(gone.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    fenced(target, "delete")?;
    target
        .applied
        .forget_child(parent.uid, gone.kind, &gone.name);
    (target.deleting)(gone.kind, &gone.uid);
    let sending = target.expectations.send_deletion(parent.uid, &gone.uid);
    match api.delete(&gone.name, &params).await {
        Ok(_) => {
            sending.answered();
            Ok(true)
        }
        // Gone already, or a new object of that name: not ours to delete.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            sending.answered();
            Ok(false)
        }
        Err(err) => {
            sending.failed();
            Err(err.into())
        }
    }
}

/// Server-side applies the parent's status on its status subresource.
async fn apply_status(
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    status: &Value,
    params: &PatchParams,
) -> Result<(), ApplyError> {
    let kind = &target.parent.resource;
    let api: Api<DynamicObject> =
        Api::namespaced_with(target.client.clone(), parent.namespace, kind);
    let body = json!({
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "status": status,
    });
    fenced(target, "patch_status")?;
    api.patch_status(parent.name, params, &Patch::Apply(&body))
        .await?;
    Ok(())
}

/// Whether the cache shows `gone` terminating: deleted already (held by a
/// finalizer), so not deleted again.
fn terminating(
    cached: &impl Fn(usize, &str) -> Option<Arc<DynamicObject>>,
    gone: &ChildDelete,
) -> bool {
    cached(gone.kind, &gone.name).is_some_and(|obj| {
        obj.metadata.uid.as_deref() == Some(gone.uid.as_str())
            && obj.metadata.deletion_timestamp.is_some()
    })
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
    let labelled = labelled(obj, target.controller);
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

/// Takes the labelled orphan `orphan` as `child`'s object: adds the
/// parent's controller reference, if the orphan still has the uid and
/// `resourceVersion` it was read with.
async fn adopt(
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    child: &ChildApply,
    orphan: &DynamicObject,
) -> Result<(), ApplyError> {
    let ours = child
        .object
        .pointer("/metadata/ownerReferences/0")
        .cloned()
        .unwrap_or(Value::Null);
    let patch = adopt_patch(orphan, ours)?;
    fenced(target, "adopt")?;
    children_api(target, child.kind, parent.namespace)
        .patch(
            &child.name,
            &PatchParams {
                field_manager: Some(target.field_manager.to_string()),
                ..PatchParams::default()
            },
            &Patch::Json::<()>(patch),
        )
        .await?;
    Ok(())
}

/// The JSON patch adopting `orphan`: its uid and `resourceVersion` tested,
/// `ours` added to its owner references.
pub fn adopt_patch(orphan: &DynamicObject, ours: Value) -> Result<json_patch::Patch, ApplyError> {
    let mut owners: Vec<Value> = orphan
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter_map(|owner| serde_json::to_value(owner).ok())
        .collect();
    owners.push(ours);
    preconditioned(
        orphan,
        json!({"op": "add", "path": "/metadata/ownerReferences", "value": owners}),
    )
}

/// The JSON patch releasing `child` from the parent `parent_uid`: its uid
/// and `resourceVersion` tested, the parent's reference removed (others
/// kept).
pub fn release_patch(
    child: &DynamicObject,
    parent_uid: &str,
) -> Result<json_patch::Patch, ApplyError> {
    let owners: Vec<Value> = child
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|owner| owner.uid != parent_uid)
        .filter_map(|owner| serde_json::to_value(owner).ok())
        .collect();
    preconditioned(
        child,
        json!({"op": "replace", "path": "/metadata/ownerReferences", "value": owners}),
    )
}

/// `change` after tests of `obj`'s uid and `resourceVersion`.
fn preconditioned(obj: &DynamicObject, change: Value) -> Result<json_patch::Patch, ApplyError> {
    let (Some(uid), Some(version)) = (&obj.metadata.uid, &obj.metadata.resource_version) else {
        return Err(ApplyError::Refused(Refusal::new(
            rules::NOT_OWNED,
            format!(
                "{} has no uid or resourceVersion to write it on condition of",
                obj.metadata.name.as_deref().unwrap_or_default()
            ),
        )));
    };
    let patch = json!([
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        change,
    ]);
    serde_json::from_value(patch).map_err(|err| {
        ApplyError::Refused(Refusal::new(rules::NOT_OWNED, format!("a patch: {err}")))
    })
}

/// Looks at a child of kind `kind` that left the controller's watch alive:
/// if it is still controlled by `parent` and lacks the controller's label,
/// its owner reference to the parent is removed (on condition of its uid
/// and `resourceVersion`; another change in between fails the patch and
/// the reconcile is retried). True when it was released.
pub async fn release(
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    kind: usize,
    departed: &Departed,
) -> Result<bool, ApplyError> {
    let api = children_api(target, kind, parent.namespace);
    let Some(child) = api.get_opt(&departed.name).await? else {
        return Ok(false);
    };
    if !to_release(target.controller, parent.uid, departed, &child) {
        return Ok(false);
    }
    let patch = release_patch(&child, parent.uid)?;
    fenced(target, "release")?;
    api.patch(
        &departed.name,
        &PatchParams {
            field_manager: Some(target.field_manager.to_string()),
            ..PatchParams::default()
        },
        &Patch::Json::<()>(patch),
    )
    .await?;
    Ok(true)
}

/// Whether `child`, read after it left the watch as `departed`, is to be
/// released from the parent `parent_uid`: the same object, not being
/// deleted, controlled by the parent, without `controller`'s label.
pub fn to_release(
    controller: &str,
    parent_uid: &str,
    departed: &Departed,
    child: &DynamicObject,
) -> bool {
    child.metadata.uid.as_deref() == Some(departed.uid.as_str())
        && child.metadata.deletion_timestamp.is_none()
        && controller_uid(child) == Some(parent_uid)
        && !labelled(child, controller)
}

fn labelled(obj: &DynamicObject, controller: &str) -> bool {
    obj.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(CONTROLLER_LABEL))
        .is_some_and(|value| value == controller)
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
        // An empty object or list asks for nothing: the API server drops
        // `annotations: {}` and the like, so an absent field has it.
        (Value::Object(live), Value::Object(desired)) => desired.iter().all(|(key, want)| {
            live.get(key)
                .map_or_else(|| asks_nothing(want), |have| contains(have, want))
        }),
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

/// An empty object or list (what the API server stores as no field).
fn asks_nothing(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_map_or_list_asks_for_nothing() {
        let live = json!({"metadata": {"name": "a"}, "spec": {"replicas": 1}});
        assert!(contains(
            &live,
            &json!({"metadata": {"name": "a", "annotations": {}}, "spec": {"args": []}})
        ));
        assert!(!contains(
            &live,
            &json!({"metadata": {"annotations": {"x": "1"}}})
        ));
        assert!(!contains(&live, &json!({"spec": {"paused": null}})));
    }

    fn child(labels: Value, owners: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u-c", "resourceVersion": "41",
                "labels": labels, "ownerReferences": owners}
        }))
        .expect("object")
    }

    fn owner(uid: &str, controller: bool) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Parent", "name": uid, "uid": uid,
            "controller": controller})
    }

    fn departed() -> Departed {
        Departed {
            namespace: "ns".into(),
            name: "c".into(),
            uid: "u-c".into(),
        }
    }

    #[test]
    fn a_release_tests_uid_and_version_and_keeps_other_owners() {
        let obj = child(json!({}), json!([owner("p", true), owner("other", false)]));
        let patch = serde_json::to_value(release_patch(&obj, "p").expect("patch")).expect("json");
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-c"},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                {"op": "replace", "path": "/metadata/ownerReferences", "value": [owner("other", false)]},
            ])
        );
        let mut unversioned = obj.clone();
        unversioned.metadata.resource_version = None;
        assert!(
            release_patch(&unversioned, "p").is_err(),
            "no unconditional release"
        );
    }

    #[test]
    fn an_adoption_tests_uid_and_version_and_adds_the_parent() {
        let orphan = child(
            json!({CONTROLLER_LABEL: "memcached"}),
            json!([owner("other", false)]),
        );
        let patch = serde_json::to_value(adopt_patch(&orphan, owner("p", true)).expect("patch"))
            .expect("json");
        assert_eq!(patch[0]["path"], "/metadata/uid");
        assert_eq!(
            patch[1],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "41"})
        );
        assert_eq!(patch[2]["op"], "add");
        assert_eq!(
            patch[2]["value"],
            json!([owner("other", false), owner("p", true)])
        );
    }

    #[test]
    fn only_a_controlled_live_unlabelled_child_is_released() {
        let unlabelled = child(json!({"app": "x"}), json!([owner("p", true)]));
        assert!(to_release("memcached", "p", &departed(), &unlabelled));
        let relabelled = child(
            json!({CONTROLLER_LABEL: "memcached"}),
            json!([owner("p", true)]),
        );
        assert!(
            !to_release("memcached", "p", &departed(), &relabelled),
            "label back"
        );
        let other_label = child(
            json!({CONTROLLER_LABEL: "other"}),
            json!([owner("p", true)]),
        );
        assert!(to_release("memcached", "p", &departed(), &other_label));
        let elsewhere = child(json!({}), json!([owner("q", true)]));
        assert!(
            !to_release("memcached", "p", &departed(), &elsewhere),
            "not the parent's"
        );
        let free = child(json!({}), json!([owner("p", false)]));
        assert!(
            !to_release("memcached", "p", &departed(), &free),
            "no controller reference"
        );
        let mut replaced = unlabelled.clone();
        replaced.metadata.uid = Some("u-new".into());
        assert!(
            !to_release("memcached", "p", &departed(), &replaced),
            "another object"
        );
        let mut terminating = unlabelled;
        terminating.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-11-29T00:00:00Z")).expect("time"));
        assert!(
            !to_release("memcached", "p", &departed(), &terminating),
            "being deleted"
        );
    }

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
