//! One reconcile, the way a kube-rs operator does it by hand: read the
//! Jinghzhu's pods from the reflector cache, run the replicaset logic
//! natively, then create pods (slow-start batches; one `SuccessfulCreate`
//! Event per reconcile naming up to ten), delete pods (UID precondition; one
//! `SuccessfulDelete` Event), patch the status (with `readyReplicas`) when it
//! changed, record the logic's Events (the replicaset logic proposes none)
//! and the `jinghzhu.io/reconciled-by` annotation — the same writes, in the same
//! order, as the Wasm host with the replicaset plugin.
//!
//! Like a typical hand-written operator it keeps no expectations: it trusts
//! the cache. Events are awaited inside the reconcile, as kube's `Recorder`
//! is usually called.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use jinghzhu_plugin_sdk::types::EventType as SdkEventType;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use replicaset_logic::Variant;
use wasm_operator::crd::Jinghzhu;

use crate::convert;
use crate::metrics::Metrics;
use crate::ready::CacheReady;

/// Label on every pod: who manages it (the pod watch selects on it).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`], the host's, so all three controllers write the same pods.
pub const MANAGED_BY: &str = "wasm-operator";
/// Label naming the pod's Jinghzhu.
pub const OWNER_LABEL: &str = "jinghzhu.io/owner";
/// Annotation naming who reconciled the object last.
pub const RECONCILED_BY_ANNOTATION: &str = "jinghzhu.io/reconciled-by";
/// This peer's stamp in [`RECONCILED_BY_ANNOTATION`].
pub const RECONCILED_BY: &str = "replicaset@0.1.0 (kube-rs peer)";
/// Where Event notes are cut, as the host does.
const MAX_NOTE: usize = 1000;

/// What every reconcile shares.
pub struct Context {
    /// API client.
    pub client: Client,
    /// The pod cache.
    pub pods: Store<Pod>,
    /// Opens once the pod cache has had its initial list.
    pub pods_ready: CacheReady,
    /// Where Events go.
    pub recorder: Recorder,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Run as the floor ([`crate::floor`]).
    pub floor: bool,
    /// The floor's pods created and not yet in the cache.
    pub floor_expected: crate::floor::Expected,
    /// The floor's index of the cached pods by owner (kept only with `floor`).
    pub floor_index: Arc<crate::floor::OwnerIndex>,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Jinghzhu has no namespace or uid.
    #[error("the Jinghzhu has no namespace or uid")]
    NotStored,
    /// The pod cache's watch ended before its first list.
    #[error("the pod cache stopped")]
    CacheGone,
    /// A pod spec the logic proposed does not parse.
    #[error("invalid pod spec: {0}")]
    Spec(#[from] serde_json::Error),
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// The call.
        what: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

/// The controller's reconcile function: the replicaset logic's, or the
/// floor's with `--floor`.
pub async fn reconcile_as_set(jz: Arc<Jinghzhu>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = match stored(&jz, &ctx).await {
        Ok(None) => Ok(Action::await_change()),
        Ok(Some((namespace, uid))) if ctx.floor => {
            crate::floor::reconcile(&jz, &ctx, &namespace, &uid).await
        }
        Ok(Some((namespace, uid))) => reconcile(&jz, &ctx, namespace, uid).await,
        Err(err) => Err(err),
    };
    ctx.metrics.count_reconcile(result.is_ok());
    result
}

/// The namespace and UID of `jz` once the pod cache has had its first
/// list; `None` when it is being deleted (the garbage collector deletes its
/// pods through their ownerReferences).
async fn stored(jz: &Jinghzhu, ctx: &Context) -> Result<Option<(String, String)>, Error> {
    if jz.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    ctx.pods_ready.wait().await.map_err(|_| Error::CacheGone)?;
    let (Some(namespace), Some(uid)) = (jz.namespace(), jz.uid()) else {
        return Err(Error::NotStored);
    };
    Ok(Some((namespace, uid)))
}

/// The replicaset logic's reconcile of `jz`, stored in `namespace` as `uid`.
async fn reconcile(
    jz: &Jinghzhu,
    ctx: &Context,
    namespace: String,
    uid: String,
) -> Result<Action, Error> {
    let key = format!("{namespace}/{}", jz.name_any());
    let cached = ctx.pods.state();
    let owned: Vec<&Pod> = cached
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| {
            p.namespace().as_deref() == Some(namespace.as_str())
                && p.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();

    let input = convert::input(jz, &owned, SystemTime::now());
    let output = replicaset_logic::reconcile_with(&input, Variant::V1);
    forward_logs(&key);

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut owner = jz.controller_owner_ref(&()).ok_or(Error::NotStored)?;
    owner.block_owner_deletion = Some(true);
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (OWNER_LABEL.to_owned(), jz.name_any()),
    ]);

    // Creates, in slow-start batches (1, 2, 4, ...); one failure stops the rest.
    let mut remaining = output.create_pods.as_slice();
    let mut created = Vec::new();
    let mut batch = 1;
    while !remaining.is_empty() {
        let (now, later) = remaining.split_at(batch.min(remaining.len()));
        remaining = later;
        batch *= 2;
        let mut requests = Vec::with_capacity(now.len());
        for create in now {
            let pod = convert::pod_to_create(create, &namespace, &labels, &owner)?;
            let pods = pods.clone();
            requests.push(async move { pods.create(&PostParams::default(), &pod).await });
        }
        let mut failure = None;
        for result in join_all(requests).await {
            match result {
                Ok(pod) => created.push(pod.name_any()),
                Err(err) => failure = Some(err),
            }
        }
        if !created.is_empty() && (failure.is_some() || remaining.is_empty()) {
            let note = format!(
                "Created {} pod(s): {}",
                created.len(),
                wasm_operator::apply::name_list(&created)
            );
            publish(ctx, jz, EventType::Normal, "SuccessfulCreate", &note).await;
        }
        if let Some(source) = failure {
            let note = format!("Error creating pod: {source}");
            publish(ctx, jz, EventType::Warning, "FailedCreate", &note).await;
            return Err(Error::Api {
                what: format!("creating pods in {namespace}"),
                source,
            });
        }
    }

    // Deletes, each guarded by the UID seen in the cache.
    let mut deleted = Vec::new();
    for name in &output.delete_pods {
        let Some(pod_uid) = owned
            .iter()
            .find(|p| p.metadata.name.as_ref() == Some(name))
            .and_then(|p| p.uid())
        else {
            continue;
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(pod_uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(name, &params).await {
            Ok(_) => {}
            // Already gone, or replaced by another pod of the same name: fine.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(source) => {
                publish_deleted(ctx, jz, &deleted).await;
                let note = format!("Error deleting pod {name}: {source}");
                publish(ctx, jz, EventType::Warning, "FailedDelete", &note).await;
                return Err(Error::Api {
                    what: format!("deleting pod {namespace}/{name}"),
                    source,
                });
            }
        }
        deleted.push(name.clone());
    }
    publish_deleted(ctx, jz, &deleted).await;

    let jinghzhus: Api<Jinghzhu> = Api::namespaced(ctx.client.clone(), &namespace);
    // Like the host: the proposed status, else the stored one, always with
    // `readyReplicas` brought up to date.
    let status = match (output.status.as_ref(), jz.status.as_ref()) {
        (Some(proposed), _) => Some(convert::status(proposed, &owned)),
        (None, Some(stored)) => Some(convert::with_ready_replicas(stored, &owned)),
        (None, None) => None,
    };
    if let Some(status) = status
        && jz.status.as_ref() != Some(&status)
    {
        let patch = serde_json::json!({ "status": status });
        jinghzhus
            .patch_status(
                &jz.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|source| Error::Api {
                what: format!("patching the status of {key}"),
                source,
            })?;
    }
    for event in &output.events {
        let type_ = match event.event_type {
            SdkEventType::Normal => EventType::Normal,
            SdkEventType::Warning => EventType::Warning,
        };
        publish(ctx, jz, type_, &event.reason, &event.message).await;
    }
    if jz
        .annotations()
        .get(RECONCILED_BY_ANNOTATION)
        .map(String::as_str)
        != Some(RECONCILED_BY)
    {
        let patch = serde_json::json!({
            "metadata": { "annotations": { RECONCILED_BY_ANNOTATION: RECONCILED_BY } }
        });
        jinghzhus
            .patch(
                &jz.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|source| Error::Api {
                what: format!("annotating {key}"),
                source,
            })?;
    }
    if !output.create_pods.is_empty() || !output.delete_pods.is_empty() {
        tracing::info!(
            object = %key,
            created = output.create_pods.len(),
            deleted = output.delete_pods.len(),
            "reconciled"
        );
    }
    Ok(match output.requeue_after_ms {
        Some(ms) => Action::requeue(Duration::from_millis(ms)),
        None => Action::await_change(),
    })
}

/// Retry a failed reconcile after a second.
pub fn error_policy(jz: Arc<Jinghzhu>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(object = %jz.name_any(), error = %err, "reconcile failed; retrying in 1 s");
    Action::requeue(Duration::from_secs(1))
}

/// The one `SuccessfulDelete` Event of a reconcile, if it deleted anything.
async fn publish_deleted(ctx: &Context, jz: &Jinghzhu, deleted: &[String]) {
    if !deleted.is_empty() {
        let note = format!(
            "Deleted {} pod(s): {}",
            deleted.len(),
            wasm_operator::apply::name_list(deleted)
        );
        publish(ctx, jz, EventType::Normal, "SuccessfulDelete", &note).await;
    }
}

/// Forwards the log lines the logic wrote in this reconcile (the SDK keeps
/// them per thread; `main` turns its stderr copy off) at their levels, with
/// target `plugin`, as the host forwards a plugin's: at the default `info`
/// the logic's debug lines ("scaling up"/"scaling down") are not written.
fn forward_logs(object: &str) {
    use jinghzhu_plugin_sdk::log::Level;
    for record in jinghzhu_plugin_sdk::log::take_captured() {
        let fields = record
            .fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let message = &record.message;
        match record.level {
            Level::Trace => tracing::trace!(target: "plugin", %object, %fields, "{message}"),
            Level::Debug => tracing::debug!(target: "plugin", %object, %fields, "{message}"),
            Level::Info => tracing::info!(target: "plugin", %object, %fields, "{message}"),
            Level::Warn => tracing::warn!(target: "plugin", %object, %fields, "{message}"),
            Level::Error => tracing::error!(target: "plugin", %object, %fields, "{message}"),
        }
    }
}

/// Records an Event on the Jinghzhu; a failure is logged, not fatal.
pub async fn publish(ctx: &Context, jz: &Jinghzhu, type_: EventType, reason: &str, note: &str) {
    let mut note = note.to_owned();
    if note.len() > MAX_NOTE {
        let mut end = MAX_NOTE;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push('…');
    }
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &jz.object_ref(&())).await {
        tracing::warn!(object = %jz.name_any(), %reason, error = %err, "could not record Event");
    }
}
