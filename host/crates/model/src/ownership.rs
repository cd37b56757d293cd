//! What makes a Pod ours: the labels the host puts on every pod it creates
//! and the controller ownerReference to its Jinghzhu. The host alone sets
//! them (plugins cannot), and only pods controlled by a Jinghzhu's UID are
//! ever shown to its plugin or deleted for it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::crd::Jinghzhu;

/// Label on every pod the host creates: who manages it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "wasm-operator";
/// Label naming the pod's Jinghzhu (informational; ownership is the ownerReference).
pub const OWNER_LABEL: &str = "jinghzhu.io/owner";
/// Shard label (`<shard>-of-<count>`, see `shards::hash`): the host keeps it
/// on Jinghzhus when sharding, and a pod copies its owner's at create.
pub const SHARD_LABEL: &str = "jinghzhu.io/shard";
/// The label selector of the pod watch.
pub const MANAGED_BY_SELECTOR: &str = "app.kubernetes.io/managed-by=wasm-operator";

/// The labels the host adds to a pod of `jz` (they win over the plugin's).
pub fn operator_labels(jz: &Jinghzhu) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (OWNER_LABEL.to_string(), jz.name_any()),
    ]);
    // A sharded host reconciles only objects whose shard label it has
    // checked, so the pod lands in its owner's shard from the start.
    if let Some(shard) = jz.labels().get(SHARD_LABEL) {
        labels.insert(SHARD_LABEL.to_string(), shard.clone());
    }
    labels
}

/// The controller ownerReference of a pod of `jz`: the garbage collector
/// deletes the pod with its owner, and no other controller adopts it.
pub fn controller_reference(jz: &Jinghzhu) -> Option<OwnerReference> {
    let mut reference = jz.controller_owner_ref(&())?;
    reference.block_owner_deletion = Some(true);
    Some(reference)
}

/// True if `pod` is controlled by the object with this UID.
pub fn is_controlled_by<R: Resource>(pod: &R, owner_uid: &str) -> bool {
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

/// The pods among `pods` controlled by `jz` (same namespace, controller
/// ownerReference with its UID), sorted by name.
pub fn owned_pods<P>(pods: &[P], jz: &Jinghzhu) -> Vec<Pod>
where
    P: std::borrow::Borrow<Pod>,
{
    let (Some(uid), namespace) = (jz.meta().uid.as_deref(), jz.meta().namespace.as_deref()) else {
        return Vec::new();
    };
    let mut owned: Vec<Pod> = pods
        .iter()
        .map(|p| p.borrow())
        .filter(|p| p.meta().namespace.as_deref() == namespace && is_controlled_by(*p, uid))
        .cloned()
        .collect();
    owned.sort_by_key(|p| p.name_any());
    owned
}
