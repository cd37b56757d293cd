//! What the API server (with the host's apply) makes of a [`State`] after a
//! checked plan, for the idempotence check: each applied child becomes the
//! object the host applied (its namespace, owner reference and label set),
//! keeping the uid, creation time and `status` of the object it replaces
//! (a new one gets uid `offline-uid-N` and `now` as its creation time);
//! deleted children vanish; the status, if any, replaces the parent's.
//! Nothing else moves: no Deployment makes Pods, no status is filled in by
//! another controller. Before that, [`settle`] refuses a plan as the
//! host's apply does when a child of a desired name exists and is not the
//! parent's to write (`child/not-owned`).

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::core::DynamicObject;
use serde_json::Value;

use super::input::State;
use crate::declared::apply::contains;
use crate::declared::checks::{CONTROLLER_LABEL, Plan, rules};
use crate::refusal::Refusal;

/// Counts created children across rounds, so uids never repeat.
#[derive(Debug, Default)]
pub struct UidSerial(usize);

/// `state` after `plan`.
pub fn apply(mut state: State, plan: &Plan, now: SystemTime, serial: &mut UidSerial) -> State {
    for gone in &plan.deletes {
        if let Some(kind) = state.children.get_mut(gone.kind) {
            kind.retain(|child| child.name_any() != gone.name);
        }
    }
    for applied in &plan.applies {
        let Ok(mut object) = serde_json::from_value::<DynamicObject>(applied.object.clone()) else {
            continue;
        };
        let Some(kind) = state.children.get_mut(applied.kind) else {
            continue;
        };
        match kind.iter().position(|c| c.name_any() == applied.name) {
            Some(at) => {
                let old = kind.remove(at);
                object.metadata.uid = old.metadata.uid;
                object.metadata.creation_timestamp = old.metadata.creation_timestamp;
                if object.data.get("status").is_none()
                    && let (Some(status), Value::Object(fields)) =
                        (old.data.get("status"), &mut object.data)
                {
                    fields.insert("status".into(), status.clone());
                }
                kind.push(object);
            }
            None => {
                serial.0 += 1;
                object.metadata.uid = Some(format!("offline-uid-{}", serial.0));
                object.metadata.creation_timestamp = Timestamp::try_from(now).ok().map(Time);
                kind.push(object);
            }
        }
        kind.sort_by_key(ResourceExt::name_any);
    }
    if let (Some(status), Value::Object(fields)) = (&plan.status, &mut state.parent.data) {
        fields.insert("status".into(), status.clone());
    }
    state
}

/// Whether every existing child `plan` applies is the parent's to write:
/// controlled by it, or an orphan carrying the controller's label (then
/// adopted), as `declared::apply` settles ownership before any write.
pub fn settle(state: &State, plan: &Plan, controller: &str) -> Result<(), Refusal> {
    let uid = state.uid();
    for applied in &plan.applies {
        let Some(existing) = state
            .children
            .get(applied.kind)
            .and_then(|kind| kind.iter().find(|c| c.name_any() == applied.name))
        else {
            continue;
        };
        let owner = existing
            .owner_references()
            .iter()
            .find(|owner| owner.controller == Some(true));
        let labelled =
            existing.labels().get(CONTROLLER_LABEL).map(String::as_str) == Some(controller);
        let whose = match owner {
            Some(owner) if owner.uid == uid => continue,
            None if labelled => continue,
            Some(owner) => format!("is controlled by {} {}", owner.kind, owner.name),
            None => format!("exists without the {CONTROLLER_LABEL}={controller} label"),
        };
        return Err(Refusal::new(
            rules::NOT_OWNED,
            format!(
                "{} {}/{} {whose}: only the parent's own children (or orphans labelled for this \
                 controller) are written",
                existing
                    .types
                    .as_ref()
                    .map_or("object", |t| t.kind.as_str()),
                state.namespace(),
                applied.name
            ),
        ));
    }
    Ok(())
}

/// The children `plan` would still create, change or delete in `state`.
pub fn child_writes(state: &State, plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    for applied in &plan.applies {
        let live = state.children.get(applied.kind).and_then(|kind| {
            kind.iter()
                .find(|c| c.name_any() == applied.name)
                .and_then(|c| serde_json::to_value(c).ok())
        });
        match live {
            None => out.push(format!("creates {}", describe(&applied.object))),
            Some(live) if !contains(&live, &applied.object) => {
                out.push(format!("changes {}", describe(&applied.object)));
            }
            Some(_) => {}
        }
    }
    for gone in &plan.deletes {
        out.push(format!("deletes {}", gone.name));
    }
    out
}

/// Whether `plan` writes a status other than the stored one.
pub fn status_write(state: &State, plan: &Plan) -> bool {
    plan.status
        .as_ref()
        .is_some_and(|status| state.parent.data.get("status") != Some(status))
}

fn describe(object: &Value) -> String {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("?")
    };
    format!("{} {}", text("/kind"), text("/metadata/name"))
}
