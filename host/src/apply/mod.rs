//! Applying a plugin's proposal: first [`validate`] the whole of it (all or
//! nothing), then create pods with the host's labels and a controller
//! ownerReference, delete owned pods with a UID precondition, patch
//! `/status` when it changed, and record Events — remembering expectations
//! for every create and delete so a lagging cache cannot double them.
//!
//! Creates go out in slow-start batches (1, 2, 4, …) like the ReplicaSet
//! controller's: if the API server rejects pods (quota, admission), one
//! failure stops the rest instead of hundreds of doomed calls. What was
//! created before a failure stays created and is recorded in expectations;
//! the next reconcile sees it and proposes only the remainder.

pub mod names;
pub mod validate;

use std::collections::BTreeMap;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{EventType, Recorder};
use kube::{Client, ResourceExt};

pub use validate::{Limits, Rejection, validate};

use crate::actions::{self, PodToCreate, ProposedActions};
use crate::controller::expectations::Expectations;
use crate::controller::metrics::Metrics;
use crate::controller::reconcile::publish;
use crate::crd::Jinghzhu;
use crate::ownership::{controller_reference, operator_labels};
use crate::runtime::LoadedPlugin;

/// Annotation on each Jinghzhu naming the plugin (name, version, digest)
/// that last reconciled it.
pub const RECONCILED_BY_ANNOTATION: &str = "jinghzhu.io/reconciled-by";

/// Where and as whom a proposal is applied.
pub struct Target<'a> {
    /// API client.
    pub client: &'a Client,
    /// Event recorder.
    pub recorder: &'a Recorder,
    /// Expectations to record creates and deletes in.
    pub expectations: &'a Expectations,
    /// Counters.
    pub metrics: &'a Metrics,
    /// `namespace/name` of the Jinghzhu.
    pub key: &'a str,
    /// The plugin that proposed it (named in Events and annotations).
    pub plugin: &'a LoadedPlugin,
}

/// What was applied.
#[derive(Debug, Default)]
pub struct Applied {
    /// Names of the pods created.
    pub created: Vec<String>,
    /// Names of the pods deleted.
    pub deleted: Vec<String>,
    /// Whether `/status` was patched.
    pub status_written: bool,
    /// Events recorded.
    pub events: usize,
}

/// Why applying stopped part-way.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The Jinghzhu has no namespace or UID (it is not from the API server).
    #[error("the Jinghzhu has no namespace or uid")]
    NotStored,
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

/// Applies a validated proposal.
pub async fn apply(
    target: &Target<'_>,
    jz: &Jinghzhu,
    owned: &[Pod],
    proposal: &ProposedActions,
) -> Result<Applied, ApplyError> {
    let namespace = jz.namespace().ok_or(ApplyError::NotStored)?;
    let owner = controller_reference(jz).ok_or(ApplyError::NotStored)?;
    let pods: Api<Pod> = Api::namespaced(target.client.clone(), &namespace);
    let mut applied = Applied::default();

    // Creates, in slow-start batches.
    let mut remaining: &[PodToCreate] = &proposal.create_pods;
    let mut batch = 1;
    while !remaining.is_empty() {
        let (now, later) = remaining.split_at(batch.min(remaining.len()));
        remaining = later;
        batch *= 2;
        let results = join_all(now.iter().map(|create| {
            let pod = pod_to_create(create, jz, &namespace, &owner);
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &pod).await }
        }))
        .await;
        let mut failure = None;
        for result in results {
            match result {
                Ok(pod) => {
                    if let Some(uid) = pod.uid() {
                        target.expectations.expect_created(target.key, &uid);
                    }
                    target.metrics.pods_created.inc();
                    let name = pod.name_any();
                    publish(
                        target.recorder,
                        jz,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {name}"),
                    )
                    .await;
                    applied.created.push(name);
                }
                Err(err) => failure = Some(err),
            }
        }
        if let Some(source) = failure {
            publish(
                target.recorder,
                jz,
                EventType::Warning,
                "FailedCreate",
                &format!("Error creating pod: {source}"),
            )
            .await;
            return Err(ApplyError::Api {
                what: format!("creating pods in {namespace}"),
                source,
            });
        }
    }

    // Deletes, each guarded by the UID we saw (never a same-named newcomer).
    for name in &proposal.delete_pods {
        let Some(uid) = owned
            .iter()
            .find(|p| &p.name_any() == name)
            .and_then(|p| p.uid())
        else {
            continue; // validation guarantees it is owned; nothing to do otherwise
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(name, &params).await {
            Ok(_) => {}
            // Already gone, or replaced by another pod of the same name: fine.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(source) => {
                publish(
                    target.recorder,
                    jz,
                    EventType::Warning,
                    "FailedDelete",
                    &format!("Error deleting pod {name}: {source}"),
                )
                .await;
                return Err(ApplyError::Api {
                    what: format!("deleting pod {namespace}/{name}"),
                    source,
                });
            }
        }
        target.expectations.expect_deleted(target.key, &uid);
        target.metrics.pods_deleted.inc();
        publish(
            target.recorder,
            jz,
            EventType::Normal,
            "SuccessfulDelete",
            &format!("Deleted pod: {name}"),
        )
        .await;
        applied.deleted.push(name.clone());
    }

    // Status (the plugin's, with the host's readyReplicas), only when it
    // differs from what is stored.
    if let Some(status) =
        crate::observed::status_to_write(jz.status.as_ref(), proposal.status.as_ref(), owned)
        && jz.status.as_ref() != Some(&status)
    {
        let jinghzhus: Api<Jinghzhu> = Api::namespaced(target.client.clone(), &namespace);
        let patch = serde_json::json!({ "status": status });
        jinghzhus
            .patch_status(
                &jz.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|source| ApplyError::Api {
                what: format!("patching the status of {}", target.key),
                source,
            })?;
        target.metrics.status_patches.inc();
        applied.status_written = true;
    }

    // The plugin's own Events.
    for event in &proposal.events {
        let type_ = match event.type_ {
            actions::EventType::Normal => EventType::Normal,
            actions::EventType::Warning => EventType::Warning,
        };
        publish(target.recorder, jz, type_, &event.reason, &event.message).await;
        applied.events += 1;
    }
    // Which plugin reconciled this object, for whoever runs the cluster.
    let stamp = target.plugin.describe();
    if jz.annotations().get(RECONCILED_BY_ANNOTATION) != Some(&stamp) {
        let jinghzhus: Api<Jinghzhu> = Api::namespaced(target.client.clone(), &namespace);
        let patch = serde_json::json!({
            "metadata": { "annotations": { RECONCILED_BY_ANNOTATION: stamp } }
        });
        jinghzhus
            .patch(
                &jz.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|source| ApplyError::Api {
                what: format!("annotating {}", target.key),
                source,
            })?;
    }
    Ok(applied)
}

/// The Pod to send for `create`: the plugin's name, labels, annotations and
/// spec, in the Jinghzhu's namespace, with the host's labels (which win)
/// and the controller ownerReference.
pub fn pod_to_create(
    create: &PodToCreate,
    jz: &Jinghzhu,
    namespace: &str,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Pod {
    let mut labels: BTreeMap<String, String> = create.labels.clone();
    labels.extend(operator_labels(jz));
    // Validation has parsed the spec already; an unparsable one cannot get here.
    let spec: Option<PodSpec> = serde_json::from_value(create.spec.clone()).ok();
    Pod {
        metadata: ObjectMeta {
            name: create.name.clone(),
            generate_name: create.generate_name.clone(),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: (!create.annotations.is_empty()).then(|| create.annotations.clone()),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}
