//! The reconcile of a StaticSite as a pure function of the input: the
//! desired ConfigMap, Deployment and Service, the children of those kinds
//! with other names to delete, the status when it changed and the Events
//! of a creation, a scale or a content change.

use serde_json::{Map, Value};

use crate::children::{self, CONTENT_HASH_ANNOTATION, DEPLOYMENT};
use crate::hash::content_hash;
use crate::spec::{SiteSpec, check_name, invalid, parse_body, read_spec};
use crate::status::{SiteStatus, ready_replicas, update, url};
use crate::{
    ChildRef, DesiredChild, Event, EventType, Object, ReconcileError, ReconcileInput,
    ReconcileOutput,
};

/// What a StaticSite needs now, from `input` alone (no host calls, so it
/// runs natively in tests). A parent being deleted gets an empty output:
/// its children go with it through their owner references.
pub fn reconcile(input: &ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
    let parent = &input.parent;
    let mut out = empty_output();
    if parent.metadata.deletion_timestamp.is_some() {
        return Ok(out);
    }
    let meta = &parent.metadata;
    let context = |message: String| {
        invalid(format!(
            "StaticSite {}/{}: {message}",
            meta.namespace, meta.name
        ))
    };
    let body = parse_body(parent).map_err(context)?;
    check_name(&meta.name).map_err(context)?;
    let spec = read_spec(&body).map_err(context)?;
    let hash = content_hash(&spec.content);
    out.apply = children::desired(&meta.name, &spec, &hash);
    out.delete = strays(input, &out.apply);
    let deployment = find(input, DEPLOYMENT, &meta.name);
    let deployment_body = deployment.map(parse_body).transpose().map_err(retryable)?;
    out.events = created_events(input, &out.apply);
    out.events.extend(deployment_events(
        &meta.name,
        deployment_body.as_ref(),
        &spec,
        &hash,
    ));
    let status = SiteStatus {
        url: url(&meta.name, &meta.namespace, spec.port),
        ready_replicas: ready_replicas(deployment_body.as_ref()),
        content_hash: hash,
        observed_generation: meta.generation,
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

/// The listed child `(api_version, kind)` named `name`, if any.
fn find<'a>(
    input: &'a ReconcileInput,
    (api_version, kind): (&str, &str),
    name: &str,
) -> Option<&'a Object> {
    input
        .children
        .iter()
        .filter(|c| c.api_version == api_version && c.kind == kind)
        .flat_map(|c| &c.objects)
        .find(|o| o.metadata.name == name)
}

/// The listed children of the kinds the site applies whose names it does
/// not apply (renamed, left over, or made by hand with its owner).
fn strays(input: &ReconcileInput, desired: &[DesiredChild]) -> Vec<ChildRef> {
    let same_kind =
        |o: &Object, d: &DesiredChild| o.api_version == d.api_version && o.kind == d.kind;
    input
        .children
        .iter()
        .flat_map(|c| &c.objects)
        .filter(|o| desired.iter().any(|d| same_kind(o, d)))
        .filter(|o| {
            !desired
                .iter()
                .any(|d| same_kind(o, d) && o.metadata.name == d.name)
        })
        .map(|o| ChildRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.metadata.name.clone(),
        })
        .collect()
}

/// `Created` for every desired child that is not listed yet.
fn created_events(input: &ReconcileInput, desired: &[DesiredChild]) -> Vec<Event> {
    desired
        .iter()
        .filter(|d| find(input, (&d.api_version, &d.kind), &d.name).is_none())
        .map(|d| normal("Created", format!("Created {} {}", d.kind, d.name)))
        .collect()
}

/// `Scaled` when the existing Deployment's replicas (1 when absent, the API
/// server's default) differ from `spec.replicas`; `ContentChanged` when its
/// pods carry another content hash.
fn deployment_events(
    name: &str,
    existing: Option<&Map<String, Value>>,
    spec: &SiteSpec,
    hash: &str,
) -> Vec<Event> {
    let Some(body) = existing else {
        return Vec::new();
    };
    let spec_field = |pointer: &str| body.get("spec").and_then(|s| s.pointer(pointer));
    let mut events = Vec::new();
    let replicas = spec_field("/replicas").and_then(Value::as_i64).unwrap_or(1);
    if replicas != spec.replicas {
        let message = format!(
            "Deployment {name} scaled from {replicas} to {}",
            spec.replicas
        );
        events.push(normal("Scaled", message));
    }
    let annotation = format!(
        "/template/metadata/annotations/{}",
        CONTENT_HASH_ANNOTATION.replace('/', "~1")
    );
    let served = spec_field(&annotation)
        .and_then(Value::as_str)
        .unwrap_or("none");
    if served != hash {
        let message =
            format!("Content changed from hash {served} to {hash}: rolling out Deployment {name}");
        events.push(normal("ContentChanged", message));
    }
    events
}

/// A `Normal` Event.
fn normal(reason: &str, message: String) -> Event {
    Event {
        event_type: EventType::Normal,
        reason: reason.to_string(),
        message,
    }
}

/// An error worth retrying (the host's data, not the user's spec, is off).
fn retryable(message: String) -> ReconcileError {
    ReconcileError {
        message,
        retryable: true,
    }
}
