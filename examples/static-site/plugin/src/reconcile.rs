//! The reconcile of a StaticSite as a pure function of the input: the
//! desired ConfigMap, Deployment and Service, the children of those kinds
//! with other names to delete, the status when it changed and the Events
//! of a creation, a scale or a content change.

use wasm_operator_controller_sdk::prelude::*;

use crate::children::{self, CONTENT_HASH_ANNOTATION, QUALIFIED_DEPLOYMENT};
use crate::hash::content_hash;
use crate::spec::{SiteSpec, check_name, read_spec};
use crate::status::{SiteStatus, ready_replicas, url};

/// What a StaticSite needs now, from `input` alone (no host calls, so it
/// runs natively in tests). A parent being deleted gets an empty output:
/// its children go with it through their owner references.
pub fn reconcile(input: &Input) -> Result<Output, ReconcileError> {
    let mut out = Output::new();
    if input.is_deleting() {
        return Ok(out);
    }
    let (name, namespace) = (input.name(), input.namespace());
    let context = |message: String| {
        ReconcileError::permanent(format!("StaticSite {namespace}/{name}: {message}"))
    };
    check_name(name).map_err(context)?;
    let spec = read_spec(input.body()).map_err(context)?;
    let hash = content_hash(&spec.content);
    let desired = children::desired(name, &spec, &hash);
    delete_strays(input, &desired, &mut out);
    let deployment = input
        .child(QUALIFIED_DEPLOYMENT, name)
        .map(|d| d.body())
        .transpose()?;
    for child in desired {
        if input.child(&qualified(&child), &child.name).is_none() {
            out.event(Event::normal(
                "Created",
                format!("Created {} {}", child.kind, child.name),
            ));
        }
        out.apply(child);
    }
    for event in deployment_events(name, deployment.as_ref(), &spec, &hash) {
        out.event(event);
    }
    let status = SiteStatus {
        url: url(name, namespace, spec.port),
        ready_replicas: ready_replicas(deployment.as_ref()),
        content_hash: hash,
        observed_generation: input.generation(),
    };
    out.merge_status(input, &status)?;
    Ok(out)
}

/// `apiVersion/Kind` of a child, as `Input::children` takes it.
fn qualified(child: &Desired) -> String {
    format!("{}/{}", child.api_version, child.kind)
}

/// Deletes the listed children of the kinds the site applies whose names
/// it does not apply (renamed, left over, or made by hand with its owner).
fn delete_strays(input: &Input, desired: &[Desired], out: &mut Output) {
    let mut kinds: Vec<(&str, &str)> = Vec::new();
    for child in desired {
        let kind = (child.api_version.as_str(), child.kind.as_str());
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    for (api_version, kind) in kinds {
        let wanted = |name: &str| {
            desired.iter().any(|d| {
                (d.api_version.as_str(), d.kind.as_str(), d.name.as_str())
                    == (api_version, kind, name)
            })
        };
        for stray in input
            .children(&format!("{api_version}/{kind}"))
            .filter(|c| !wanted(c.name()))
        {
            out.delete(api_version, kind, stray.name());
        }
    }
}

/// `Scaled` when the existing Deployment's replicas (1 when absent, the API
/// server's default) differ from `spec.replicas`; `ContentChanged` when its
/// pods carry another content hash.
fn deployment_events(
    name: &str,
    existing: Option<&Value>,
    spec: &SiteSpec,
    hash: &str,
) -> Vec<Event> {
    let Some(body) = existing else {
        return Vec::new();
    };
    let mut events = Vec::new();
    let replicas = body
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if replicas != spec.replicas {
        let message = format!(
            "Deployment {name} scaled from {replicas} to {}",
            spec.replicas
        );
        events.push(Event::normal("Scaled", message));
    }
    let annotation = format!(
        "/spec/template/metadata/annotations/{}",
        CONTENT_HASH_ANNOTATION.replace('/', "~1")
    );
    let served = body
        .pointer(&annotation)
        .and_then(Value::as_str)
        .unwrap_or("none");
    if served != hash {
        let message =
            format!("Content changed from hash {served} to {hash}: rolling out Deployment {name}");
        events.push(Event::normal("ContentChanged", message));
    }
    events
}
