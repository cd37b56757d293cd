//! The reconcile of a Memcached as a pure function of the input: the
//! desired Deployment, the stray Deployments to delete, the status when it
//! changed and the Events of a creation or a scale.

use serde_json::{Map, Value};

use crate::spec::{MemcachedSpec, invalid, parse_body, read_spec};
use crate::status::{MemcachedStatus, pod_names, ready_replicas, update};
use crate::{
    ChildRef, Children, Event, EventType, Object, ReconcileError, ReconcileInput, ReconcileOutput,
    deployment,
};

/// What a Memcached needs now, from `input` alone (no host calls, so it
/// runs natively in tests). A parent being deleted gets an empty output:
/// its children go with it through their owner references.
pub fn reconcile(input: &ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
    let parent = &input.parent;
    let mut out = empty_output();
    if parent.metadata.deletion_timestamp.is_some() {
        return Ok(out);
    }
    let context = |message: String| {
        let meta = &parent.metadata;
        invalid(format!(
            "Memcached {}/{}: {message}",
            meta.namespace, meta.name
        ))
    };
    let body = parse_body(parent).map_err(context)?;
    let spec = read_spec(&body).map_err(context)?;
    let name = &parent.metadata.name;
    let deployments = children(input, deployment::API_VERSION, deployment::KIND);
    let owned = deployments.iter().find(|d| &d.metadata.name == name);
    let owned_body = owned.map(parse_body).transpose().map_err(retryable)?;

    out.apply.push(deployment::desired(name, &spec));
    out.delete = deployments
        .iter()
        .filter(|d| &d.metadata.name != name)
        .map(child_ref)
        .collect();
    out.events
        .extend(scale_event(name, owned_body.as_ref(), &spec));
    let status = MemcachedStatus {
        nodes: pod_names(children_entry(input, "v1", "Pod"), name),
        ready_replicas: ready_replicas(owned_body.as_ref()),
        observed_generation: parent.metadata.generation,
    };
    out.status_json = update(body.get("status"), &status).map_err(retryable)?;
    Ok(out)
}

/// An output that changes nothing.
pub fn empty_output() -> ReconcileOutput {
    ReconcileOutput {
        apply: Vec::new(),
        delete: Vec::new(),
        status_json: None,
        requeue_after_ms: None,
        events: Vec::new(),
    }
}

/// `Created` when the Deployment does not exist yet, `Scaled` when its
/// `spec.replicas` (1 when absent, the API server's default) differs from
/// `spec.size`; nothing otherwise.
fn scale_event(
    name: &str,
    owned: Option<&Map<String, Value>>,
    spec: &MemcachedSpec,
) -> Option<Event> {
    let (reason, message) = match owned {
        None => (
            "Created",
            format!("Created Deployment {name} with {} replicas", spec.size),
        ),
        Some(body) => {
            let replicas = body
                .get("spec")
                .and_then(|s| s.get("replicas"))
                .and_then(Value::as_i64)
                .unwrap_or(1);
            if replicas == spec.size {
                return None;
            }
            (
                "Scaled",
                format!("Deployment {name} scaled from {replicas} to {}", spec.size),
            )
        }
    };
    Some(Event {
        event_type: EventType::Normal,
        reason: reason.to_string(),
        message,
    })
}

/// The input's entry for a child kind, if the host lists it.
fn children_entry<'a>(
    input: &'a ReconcileInput,
    api_version: &str,
    kind: &str,
) -> Option<&'a Children> {
    input
        .children
        .iter()
        .find(|c| c.api_version == api_version && c.kind == kind)
}

/// The listed children of a kind (none when the kind is not listed).
fn children<'a>(input: &'a ReconcileInput, api_version: &str, kind: &str) -> &'a [Object] {
    children_entry(input, api_version, kind).map_or(&[], |c| c.objects.as_slice())
}

/// A reference to delete `object`.
fn child_ref(object: &Object) -> ChildRef {
    ChildRef {
        api_version: object.api_version.clone(),
        kind: object.kind.clone(),
        name: object.metadata.name.clone(),
    }
}

/// An error worth retrying (the host's data, not the user's spec, is off).
fn retryable(message: String) -> ReconcileError {
    ReconcileError {
        message,
        retryable: true,
    }
}
