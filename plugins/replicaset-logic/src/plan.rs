//! The reconcile itself: compare `spec.desired` with the live Pods, propose
//! creates or deletes, and describe the observed Pods in the status.
//!
//! Pods that finished (`Failed`, `Succeeded`) or are terminating are not
//! live: they are replaced at once, as the ReplicaSet controller does, and
//! never deleted by the plugin (a finished Pod stays for `kubectl` to show
//! until the pod garbage collector or a user removes it; a terminating one
//! is already going). A terminating Pod's replacement is created once: from
//! the next reconcile on, the replacement is live and the count is met.
//!
//! The logic reads the input through the SDK's borrowed view
//! ([`InputView`]): in the component that is the wire input read in place
//! (no string is copied unless it goes into the output), natively and for
//! other callers an owned input ([`reconcile_with`]).
//!
//! The plugin proposes no Event of its own: the host records one
//! `SuccessfulCreate` or `SuccessfulDelete` per reconcile naming the Pods it
//! created or deleted (as Kubernetes' ReplicaSet controller does), so a
//! plugin Event for the same scale would only be a second write saying less.
//! Its "scaling up"/"scaling down" line is at debug for the same reason: the
//! host's `actions applied` line already tells it at info.

use jinghzhu_plugin_sdk::types::{JinghzhuStatus, ReconcileInput, ReconcileOutput};
use jinghzhu_plugin_sdk::view::{InputView, JinghzhuView, PodView, Pods};
use jinghzhu_plugin_sdk::{log, status};

use crate::deletion;
use crate::message::{self, Activity, Variant};

/// At most this many Pods are created (or deleted) per reconcile, as in
/// Kubernetes' ReplicaSet controller (`burstReplicas`); the next reconcile,
/// triggered by the new Pods, does the rest.
pub const BURST_REPLICAS: usize = 500;

/// The live Pods of `jinghzhu` among `pods`: controlled by it (checked by
/// uid even though the host already filters), not terminating, not finished.
pub fn live_pods<'a>(jinghzhu: &JinghzhuView<'_>, pods: Pods<'a>) -> Vec<PodView<'a>> {
    let uid = jinghzhu.metadata().uid();
    pods.iter()
        .filter(|p| p.is_controlled_by(uid) && p.is_live())
        .collect()
}

/// How many of `live` are live and running and ready (as
/// [`jinghzhu_plugin_sdk::pod::count_ready`]).
fn count_ready(live: &[PodView<'_>]) -> usize {
    live.iter()
        .filter(|p| p.is_live() && p.is_running_and_ready())
        .count()
}

/// The one-word state (see [`status::state`]): `Scaling` while the live
/// count differs from `desired`, `Pending` while it is right but some live
/// Pods are not running and ready, `Running` when all of them are.
pub fn state(live: &[PodView<'_>], desired: u32) -> &'static str {
    status::state(live.len(), count_ready(live), desired)
}

/// Decides what to do about the Pods. No creates or deletes while the
/// Jinghzhu itself is being deleted (its Pods go with it).
fn activity(jinghzhu: &JinghzhuView<'_>, current: usize) -> Activity {
    let desired = usize::try_from(jinghzhu.desired()).unwrap_or(usize::MAX);
    if jinghzhu.metadata().deletion_timestamp().is_some() {
        Activity::OwnerDeleting
    } else if desired > current {
        Activity::Creating((desired - current).min(BURST_REPLICAS))
    } else if current > desired {
        Activity::Deleting((current - desired).min(BURST_REPLICAS))
    } else {
        Activity::Steady
    }
}

/// The status describing `live` (how many, which, how many running and
/// ready); `observed-generation` is `metadata.generation` when the API
/// server tracks it (non-zero).
pub fn observed_status(
    jinghzhu: &JinghzhuView<'_>,
    live: &[PodView<'_>],
    activity: Activity,
    variant: Variant,
) -> JinghzhuStatus {
    let desired = jinghzhu.desired();
    let generation = jinghzhu.metadata().generation();
    let ready = count_ready(live);
    status::build(
        live.iter().map(|p| p.metadata().name()),
        state(live, desired),
        message::status_message(live.len(), ready, desired, activity, variant),
        (generation != 0).then_some(generation),
    )
}

/// The status to return: [`observed_status`] when it differs from the
/// status the Jinghzhu has (see [`status::status_patch`]), else none. The
/// comparison reads the names in place: an unchanged status (the steady
/// state) copies none of them.
fn status_patch(
    jinghzhu: &JinghzhuView<'_>,
    live: &[PodView<'_>],
    activity: Activity,
    variant: Variant,
) -> Option<JinghzhuStatus> {
    let desired = jinghzhu.desired();
    let generation = jinghzhu.metadata().generation();
    let ready = count_ready(live);
    status::patch_from_view(
        jinghzhu.status(),
        live.iter().map(|p| p.metadata().name()).collect(),
        state(live, desired),
        message::status_message(live.len(), ready, desired, activity, variant),
        (generation != 0).then_some(generation),
    )
}

/// Computes the output for `input`, with status messages in `variant`'s
/// style. A pure function of its arguments (apart from log lines).
pub fn reconcile_with(input: &ReconcileInput, variant: Variant) -> ReconcileOutput {
    reconcile_view(&InputView::of(input), variant)
}

/// [`reconcile_with`] on a view of the input (what the component calls on
/// the wire input of contract 0.2).
pub fn reconcile_view(input: &InputView<'_>, variant: Variant) -> ReconcileOutput {
    let output = propose_view(input, variant);
    log_scaling(input, &output);
    output
}

/// [`reconcile_with`] without its log lines: for a plugin of another
/// contract, which must not import this SDK's `log` (contract 0.2's).
pub fn propose_with(input: &ReconcileInput, variant: Variant) -> ReconcileOutput {
    propose_view(&InputView::of(input), variant)
}

/// [`reconcile_view`] without its log lines.
pub fn propose_view(input: &InputView<'_>, variant: Variant) -> ReconcileOutput {
    let jz = input.jinghzhu();
    let live = live_pods(&jz, input.pods());
    let activity = activity(&jz, live.len());
    let mut output = ReconcileOutput::empty();

    match activity {
        Activity::Creating(count) => output.create_pods = vec![jz.pod_from_template(); count],
        Activity::Deleting(count) => {
            output.delete_pods = deletion::pick(&live, count)
                .into_iter()
                .map(|p| p.metadata().name().to_owned())
                .collect();
        }
        Activity::Steady | Activity::OwnerDeleting => {}
    }

    output.status = status_patch(&jz, &live, activity, variant);
    output
}

/// The debug line of a proposal that scales up or down.
fn log_scaling(input: &InputView<'_>, output: &ReconcileOutput) {
    if output.create_pods.is_empty() && output.delete_pods.is_empty() {
        return;
    }
    let jz = input.jinghzhu();
    let live = live_pods(&jz, input.pods()).len().to_string();
    let desired = jz.desired().to_string();
    let mut fields = vec![
        ("jinghzhu", jz.metadata().name()),
        ("live", live.as_str()),
        ("desired", desired.as_str()),
    ];
    let creating = output.create_pods.len().to_string();
    let deleting = output.delete_pods.join(",");
    if output.create_pods.is_empty() {
        fields.push(("deleting", &deleting));
        log::debug("scaling down", &fields);
    } else {
        fields.push(("creating", &creating));
        log::debug("scaling up", &fields);
    }
}
