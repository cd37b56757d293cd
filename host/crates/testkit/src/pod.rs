//! The `Pod` builder, and the `CachedPod` the host's cache would hold of it.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use wasm_operator_model::cached_pod::CachedPod;
use wasm_operator_model::crd::Jinghzhu;
use wasm_operator_model::ownership::{MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL, SHARD_LABEL};

use crate::{at_second, string_map};

/// A pod named `name`: no namespace, uid, owner, labels or status until told.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        phase: None,
        ready: None,
    }
}

/// A controller ownerReference to the Jinghzhu `name` with `uid`, as a test
/// or another writer puts it (no `blockOwnerDeletion`): change a field of
/// it for another kind or a reference that does not control.
pub fn controller_of(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "jinghzhu.io/v1".into(),
        kind: "Jinghzhu".into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// Builds a `Pod` or a `CachedPod` (see [`pod`]).
#[derive(Clone, Debug)]
#[must_use]
pub struct PodBuilder {
    metadata: ObjectMeta,
    phase: Option<String>,
    /// The `Ready` condition's status (`True` or `False`), if it has one.
    ready: Option<bool>,
}

impl PodBuilder {
    fn meta(mut self, set: impl FnOnce(&mut ObjectMeta)) -> Self {
        set(&mut self.metadata);
        self
    }

    pub fn namespace(self, namespace: &str) -> Self {
        self.meta(|m| m.namespace = Some(namespace.into()))
    }

    pub fn uid(self, uid: &str) -> Self {
        self.meta(|m| m.uid = Some(uid.into()))
    }

    pub fn resource_version(self, version: &str) -> Self {
        self.meta(|m| m.resource_version = Some(version.into()))
    }

    /// Created `secs` seconds after the epoch.
    pub fn created_at(self, secs: i64) -> Self {
        self.meta(|m| m.creation_timestamp = Some(at_second(secs)))
    }

    /// Terminating: a `deletionTimestamp` (the epoch).
    pub fn terminating(self) -> Self {
        self.meta(|m| m.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH)))
    }

    /// Terminating since `secs` seconds after the epoch.
    pub fn deleted_at(self, secs: i64) -> Self {
        self.meta(|m| m.deletion_timestamp = Some(at_second(secs)))
    }

    /// Adds these labels (an empty list still sets an empty map).
    pub fn labels(self, labels: &[(&str, &str)]) -> Self {
        self.meta(|m| m.labels.get_or_insert_default().extend(string_map(labels)))
    }

    /// Adds these annotations (an empty list still sets an empty map).
    pub fn annotations(self, annotations: &[(&str, &str)]) -> Self {
        self.meta(|m| {
            m.annotations
                .get_or_insert_default()
                .extend(string_map(annotations))
        })
    }

    /// Adds an ownerReference (see [`controller_of`]).
    pub fn owner_reference(self, reference: OwnerReference) -> Self {
        self.meta(|m| m.owner_references.get_or_insert_default().push(reference))
    }

    /// A bare controller ownerReference to the Jinghzhu `name` with `uid`
    /// ([`controller_of`]).
    pub fn controller(self, name: &str, uid: &str) -> Self {
        self.owner_reference(controller_of(name, uid))
    }

    /// Controlled by `owner` as the host makes its pods: in its namespace,
    /// with the controller ownerReference the host writes (with
    /// `blockOwnerDeletion`); no labels (see [`Self::created_by_host`]).
    ///
    /// # Panics
    /// When `owner` has no name or uid (a test's mistake).
    pub fn controlled_by(self, owner: &Jinghzhu) -> Self {
        let reference = OwnerReference {
            block_owner_deletion: Some(true),
            ..controller_of(
                owner
                    .metadata
                    .name
                    .as_deref()
                    .expect("an owner with a name"),
                owner.metadata.uid.as_deref().expect("an owner with a uid"),
            )
        };
        let namespace = owner.metadata.namespace.clone();
        self.meta(|m| {
            if m.namespace.is_none() {
                m.namespace = namespace;
            }
        })
        .owner_reference(reference)
    }

    /// A pod as the host creates it for `owner`: [`Self::controlled_by`]
    /// and the host's labels (managed-by, the owner's name, and its shard
    /// label when it has one).
    pub fn created_by_host(self, owner: &Jinghzhu) -> Self {
        let name = owner.metadata.name.clone().unwrap_or_default();
        let shard = owner
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SHARD_LABEL))
            .cloned();
        self.controlled_by(owner)
            .labels(&[(MANAGED_BY_LABEL, MANAGED_BY), (OWNER_LABEL, &name)])
            .meta(|m| {
                if let Some(shard) = shard {
                    m.labels
                        .get_or_insert_default()
                        .insert(SHARD_LABEL.into(), shard);
                }
            })
    }

    /// `status.phase`.
    pub fn phase(mut self, phase: &str) -> Self {
        self.phase = Some(phase.into());
        self
    }

    /// A `Ready` condition, `True` or `False`.
    pub fn ready(mut self, ready: bool) -> Self {
        self.ready = Some(ready);
        self
    }

    /// The pod: a status only when a phase or a `Ready` condition was set;
    /// no spec.
    pub fn build(self) -> Pod {
        let conditions = self.ready.map(|ready| {
            vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]
        });
        let status = (self.phase.is_some() || conditions.is_some()).then(|| PodStatus {
            phase: self.phase,
            conditions,
            ..PodStatus::default()
        });
        Pod {
            metadata: self.metadata,
            spec: None,
            status,
        }
    }

    /// What the host's cache keeps of the pod: its metadata as set here (not
    /// cut to the cache's cap: decode one for that), phase and readiness.
    pub fn cached(self) -> CachedPod {
        CachedPod {
            metadata: self.metadata,
            phase: self.phase,
            ready: self.ready,
        }
    }
}

impl From<PodBuilder> for Pod {
    fn from(builder: PodBuilder) -> Self {
        builder.build()
    }
}

impl From<PodBuilder> for CachedPod {
    fn from(builder: PodBuilder) -> Self {
        builder.cached()
    }
}
