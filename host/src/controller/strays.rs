//! Controlled pods that lose their labels alive get them back, instead of
//! a replacement.
//!
//! The pod watch selects on the managed-by label (and, sharded, on the
//! shard label). Someone removing that label from a running pod of ours
//! (or moving it to another shard's value) makes the API server send a
//! `DELETED` event: the pod left the selection, it was not deleted. Before
//! this rule the cache dropped it, the owner's next reconcile saw a pod
//! missing and created a replacement while the old one kept running (five
//! live pods for three asked after two removals).
//!
//! **Rule `pods/lost-labels`.** A `DELETED` event for a pod controlled by a
//! Jinghzhu (ownerReference `controller: true`) that was not terminating
//! holds its owner's reconciles ([`crate::apply::expectations::Expectations::stray`],
//! at most [`STRAY_HOLD`]). The owner's next reconcile reads the pod: gone
//! or terminating, the hold ends (a real deletion, e.g. a forced one); alive
//! with the same UID, its labels are written back (the managed-by label,
//! and the owner's shard label when the owner has one) with a patch
//! carrying the pod's UID (a precondition), fenced like every write of the
//! reconcile (leadership or the shard's hold), the
//! `wasm_operator_pods_relabelled_total` counter goes up and a
//! `PodLabelsRestored` Warning Event on the Jinghzhu names the rule. The
//! hold ends when the cache shows the pod again (or after [`STRAY_HOLD`]):
//! in a snapshot read after the pod left, never in one a reconcile read
//! just before (that one still shows the pod, and ended the hold of a pod
//! that left while the reconcile ran, which was then replaced).
//! A cached pod of the object whose labels are wrong but still selected
//! (moved to another shard this replica holds too) is relabelled the same
//! way. A shard label removed is also written back by the shard labeller
//! ([`crate::shards::labeller`]); the hold keeps the owner from replacing
//! the pod meanwhile either way.
//!
//! Not covered: a label removed while no replica watches (a restart in
//! between lists the pods without it; the pod is then an orphan the owner
//! replaces, and the garbage collector removes it with the owner).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

use super::context::Context;
use crate::apply::fence::WriteFence;
use crate::crd::Jinghzhu;
use crate::ownership::{MANAGED_BY, MANAGED_BY_LABEL, SHARD_LABEL, is_controlled_by};

/// The longest a stray pod holds its owner's reconciles.
pub const STRAY_HOLD: Duration = Duration::from_secs(30);

/// The rule id in logs and Events.
pub const RULE: &str = "pods/lost-labels";

/// The labels `pod` is missing (or carries with another value) of those
/// every pod of `jz` must carry for the host's watches to see it.
pub fn missing_labels(jz: &Jinghzhu, pod: &Pod) -> BTreeMap<String, String> {
    let mut wanted = BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())]);
    if let Some(shard) = jz.labels().get(SHARD_LABEL) {
        wanted.insert(SHARD_LABEL.to_string(), shard.clone());
    }
    let has = pod.labels();
    wanted.retain(|k, v| has.get(k) != Some(v));
    wanted
}

/// Looks at the stray pods of `jz` (UID `owner`) the watch reported, and
/// at its cached `pods` whose labels were changed without their leaving
/// the watch (a shard label moved to another shard this replica also
/// holds): writes their labels back (see the module documentation). Ends
/// early when `fence` refuses (a stray's hold stays until [`STRAY_HOLD`]).
pub async fn restore(ctx: &Context, jz: &Jinghzhu, owner: &str, pods: &[Pod], fence: &WriteFence) {
    let expectations = &ctx.objects.expectations;
    let mut found: Vec<Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !missing_labels(jz, p).is_empty())
        .cloned()
        .collect();
    let strays = expectations.take_strays(owner);
    if strays.is_empty() && found.is_empty() {
        return;
    }
    let namespace = jz.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    for (uid, name) in strays {
        match api.get_opt(&name).await {
            Ok(pod) => match pod.filter(|p| {
                p.uid().as_deref() == Some(uid.as_str())
                    && p.metadata.deletion_timestamp.is_none()
                    && is_controlled_by(p, owner)
            }) {
                Some(pod) => found.push(pod),
                None => expectations.stray_settled(owner, &uid),
            },
            Err(err) => {
                tracing::warn!(pod = %name, error = %err, "a controlled pod left the watch; reading it failed (its owner waits at most {STRAY_HOLD:?})");
            }
        }
    }
    for pod in found {
        if !relabel(ctx, &api, jz, &pod, fence).await {
            return;
        }
    }
}

/// Counts and reports one pod that lost its labels and writes them back;
/// false when the fence refused the write.
async fn relabel(
    ctx: &Context,
    api: &Api<Pod>,
    jz: &Jinghzhu,
    pod: &Pod,
    fence: &WriteFence,
) -> bool {
    let name = pod.name_any();
    let missing = missing_labels(jz, pod);
    ctx.metrics.pods_relabelled.inc();
    let shown: Vec<&str> = missing.keys().map(String::as_str).collect();
    tracing::warn!(
        object = %format!("{}/{}", jz.namespace().unwrap_or_default(), jz.name_any()),
        pod = %name,
        labels = ?shown,
        rule = RULE,
        "a controlled pod lost its labels while running; writing them back instead of replacing it"
    );
    ctx.events.publish(
        jz,
        EventType::Warning,
        "PodLabelsRestored",
        &format!(
            "pod {name} lost labels the host selects its pods by ({}) while running; they \
             are written back and the pod is kept, not replaced (rule {RULE})",
            if shown.is_empty() {
                "already restored".to_string()
            } else {
                shown.join(", ")
            }
        ),
    );
    if missing.is_empty() {
        return true; // restored already (the shard labeller, or a person)
    }
    if let Err(lapsed) = fence.check() {
        ctx.metrics.write_fenced("label", lapsed.kind);
        tracing::info!(pod = %name, error = %lapsed, "write fenced: pod labels not restored");
        return false;
    }
    let patch = serde_json::json!({ "metadata": { "labels": missing, "uid": pod.uid() } });
    if let Err(err) = api
        .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(pod = %name, error = %err, "restoring a controlled pod's labels failed (its owner waits at most {STRAY_HOLD:?})");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_labels_a_pod_must_carry_are_its_owners() {
        let mut jz = Jinghzhu::new("web", Default::default());
        let mut pod = Pod::default();
        assert_eq!(
            missing_labels(&jz, &pod),
            BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())])
        );
        jz.labels_mut().insert(SHARD_LABEL.into(), "3-of-8".into());
        pod.labels_mut()
            .insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
        pod.labels_mut().insert(SHARD_LABEL.into(), "5-of-8".into());
        assert_eq!(
            missing_labels(&jz, &pod),
            BTreeMap::from([(SHARD_LABEL.to_string(), "3-of-8".to_string())])
        );
        pod.labels_mut().insert(SHARD_LABEL.into(), "3-of-8".into());
        assert!(missing_labels(&jz, &pod).is_empty());
    }
}
