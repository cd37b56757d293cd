//! The reconcile of a Memcached as a pure function of the input: the
//! desired Deployment, the stray Deployments to delete, the status when it
//! changed and the Events of a creation or a scale.

use wasm_operator_controller_sdk::prelude::*;

use crate::deployment::{self, QUALIFIED_KIND};
use crate::spec::{MemcachedSpec, read_spec};
use crate::status::{MemcachedStatus, pod_names, ready_replicas};

/// What a Memcached needs now, from `input` alone (no host calls, so it
/// runs natively in tests). A parent being deleted gets an empty output:
/// its children go with it through their owner references.
pub fn reconcile(input: &Input) -> Result<Output, ReconcileError> {
    let mut out = Output::new();
    if input.is_deleting() {
        return Ok(out);
    }
    let spec = read_spec(input.body()).map_err(|message| {
        ReconcileError::permanent(format!(
            "Memcached {}/{}: {message}",
            input.namespace(),
            input.name()
        ))
    })?;
    let name = input.name();
    let owned = input
        .child(QUALIFIED_KIND, name)
        .map(|d| d.body())
        .transpose()?;

    out.apply(deployment::desired(name, &spec));
    for stray in input.children(QUALIFIED_KIND).filter(|d| d.name() != name) {
        out.delete(deployment::API_VERSION, deployment::KIND, stray.name());
    }
    if let Some(event) = scale_event(name, owned.as_ref(), &spec) {
        out.event(event);
    }
    let status = MemcachedStatus {
        nodes: pod_names(input, name),
        ready_replicas: ready_replicas(owned.as_ref()),
        observed_generation: input.generation(),
    };
    out.merge_status(input, &status)?;
    Ok(out)
}

/// `Created` when the Deployment does not exist yet, `Scaled` when its
/// `spec.replicas` (1 when absent, the API server's default) differs from
/// `spec.size`; nothing otherwise.
fn scale_event(name: &str, owned: Option<&Value>, spec: &MemcachedSpec) -> Option<Event> {
    let Some(body) = owned else {
        let message = format!("Created Deployment {name} with {} replicas", spec.size);
        return Some(Event::normal("Created", message));
    };
    let replicas = body
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    (replicas != spec.size).then(|| {
        let message = format!("Deployment {name} scaled from {replicas} to {}", spec.size);
        Event::normal("Scaled", message)
    })
}
