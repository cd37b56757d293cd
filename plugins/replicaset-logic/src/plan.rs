//! The reconcile itself: compare `spec.desired` with the live Pods, propose
//! creates or deletes, and describe the observed Pods in the status.

use jinghzhu_plugin_sdk::types::{
    Event, Jinghzhu, JinghzhuStatus, Pod, PodCreate, ReconcileInput, ReconcileOutput,
};
use jinghzhu_plugin_sdk::{log, pod, status};

use crate::deletion;
use crate::message::{self, Activity, Variant};

/// At most this many Pods are created (or deleted) per reconcile, as in
/// Kubernetes' ReplicaSet controller (`burstReplicas`); the next reconcile,
/// triggered by the new Pods, does the rest.
pub const BURST_REPLICAS: usize = 500;

/// The live Pods of `jinghzhu` among `pods`: controlled by it (checked by
/// uid even though the host already filters), not terminating, not finished.
pub fn live_pods<'a>(jinghzhu: &Jinghzhu, pods: &'a [Pod]) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| pod::is_controlled_by(p, jinghzhu) && pod::is_live(p))
        .collect()
}

/// The one-word state: `Running` when the live count is the desired one,
/// `Pending` when there are none yet but some are desired, else `Scaling`.
pub fn state(current: usize, desired: u32) -> &'static str {
    let desired = usize::try_from(desired).unwrap_or(usize::MAX);
    if current == desired {
        status::RUNNING
    } else if current == 0 {
        status::PENDING
    } else {
        status::SCALING
    }
}

/// Decides what to do about the Pods. No creates or deletes while the
/// Jinghzhu itself is being deleted (its Pods go with it).
fn activity(jinghzhu: &Jinghzhu, current: usize) -> Activity {
    let desired = usize::try_from(jinghzhu.spec.desired).unwrap_or(usize::MAX);
    if jinghzhu.metadata.deletion_timestamp.is_some() {
        Activity::OwnerDeleting
    } else if desired > current {
        Activity::Creating((desired - current).min(BURST_REPLICAS))
    } else if current > desired {
        Activity::Deleting((current - desired).min(BURST_REPLICAS))
    } else {
        Activity::Steady
    }
}

/// The status describing `live`; `observed-generation` is
/// `metadata.generation` when the API server tracks it (non-zero).
pub fn observed_status(
    jinghzhu: &Jinghzhu,
    live: &[&Pod],
    activity: Activity,
    variant: Variant,
) -> JinghzhuStatus {
    let desired = jinghzhu.spec.desired;
    let generation = jinghzhu.metadata.generation;
    status::build(
        pod::sorted_names(live.iter().copied()),
        state(live.len(), desired),
        message::status_message(live.len(), desired, activity, variant),
        (generation != 0).then_some(generation),
    )
}

/// Computes the output for `input`, with status messages in `variant`'s
/// style. A pure function of its arguments (apart from log lines).
pub fn reconcile_with(input: &ReconcileInput, variant: Variant) -> ReconcileOutput {
    let jz = &input.jinghzhu;
    let name = jz.metadata.name.as_str();
    let live = live_pods(jz, &input.pods);
    let activity = activity(jz, live.len());
    let mut output = ReconcileOutput::empty();

    match activity {
        Activity::Creating(count) => {
            let create: PodCreate = pod::from_template(jz);
            output.create_pods = vec![create; count];
            output
                .events
                .push(Event::normal("ScalingUp", message::scaling_up_event(count)));
            log::info(
                "scaling up",
                &[
                    ("jinghzhu", name),
                    ("live", &live.len().to_string()),
                    ("desired", &jz.spec.desired.to_string()),
                    ("creating", &count.to_string()),
                ],
            );
        }
        Activity::Deleting(count) => {
            output.delete_pods = deletion::pick(&live, count)
                .into_iter()
                .map(|p| p.metadata.name.clone())
                .collect();
            output.events.push(Event::normal(
                "ScalingDown",
                message::scaling_down_event(&output.delete_pods),
            ));
            log::info(
                "scaling down",
                &[
                    ("jinghzhu", name),
                    ("live", &live.len().to_string()),
                    ("desired", &jz.spec.desired.to_string()),
                    ("deleting", &output.delete_pods.join(",")),
                ],
            );
        }
        Activity::Steady | Activity::OwnerDeleting => {}
    }

    output.status = status::patch_for(jz, observed_status(jz, &live, activity, variant));
    output
}
