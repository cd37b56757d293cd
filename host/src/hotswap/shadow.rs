//! Shadow mode: a candidate plugin runs on the same inputs as the active one;
//! where their proposals differ, the difference is logged and counted.
//! Nothing the shadow proposes is ever applied.

use k8s_openapi::api::core::v1::Pod;

use crate::actions::ProposedActions;
use crate::controller::metrics::Metrics;
use crate::crd::Jinghzhu;
use crate::runtime::LoadedPlugin;

/// Runs `shadow` and logs how its proposal differs from `active`'s.
pub async fn compare(
    shadow: &std::sync::Arc<LoadedPlugin>,
    jz: &Jinghzhu,
    pods: &[Pod],
    key: &str,
    active: &ProposedActions,
    metrics: &Metrics,
) {
    match shadow.reconcile(jz, pods, key).await {
        Ok(candidate) => {
            let differences = differences(active, &candidate);
            if differences.is_empty() {
                tracing::debug!(object = key, shadow = %shadow.describe(), "shadow agrees");
            } else {
                metrics.shadow_differences.inc();
                tracing::info!(
                    object = key,
                    shadow = %shadow.describe(),
                    differences = %differences.join("; "),
                    "shadow plugin proposes something else (not applied)"
                );
            }
        }
        Err(err) => {
            metrics.shadow_differences.inc();
            tracing::warn!(object = key, shadow = %shadow.describe(), error = %err, "shadow plugin failed (not applied)");
        }
    }
}

/// Human-readable differences between two proposals (empty when equal).
/// Generated pod names cannot be compared, so creates compare by count.
pub fn differences(active: &ProposedActions, shadow: &ProposedActions) -> Vec<String> {
    differences_between(active, shadow, ("active", "shadow"))
}

/// [`differences`] with the two sides named `labels` (e.g. `("old", "new")`
/// for `reconcile --compare-with`).
pub fn differences_between(
    a: &ProposedActions,
    b: &ProposedActions,
    labels: (&str, &str),
) -> Vec<String> {
    let (la, lb) = labels;
    let mut out = Vec::new();
    if a.create_pods.len() != b.create_pods.len() {
        out.push(format!(
            "creates: {la} {} vs {lb} {}",
            a.create_pods.len(),
            b.create_pods.len()
        ));
    } else if a.create_pods != b.create_pods {
        out.push("creates: same count, different pods".to_string());
    }
    if a.delete_pods != b.delete_pods {
        out.push(format!(
            "deletes: {la} {:?} vs {lb} {:?}",
            a.delete_pods, b.delete_pods
        ));
    }
    if a.status != b.status {
        let show = |s: &Option<crate::crd::JinghzhuStatus>| {
            s.as_ref().map_or("none".to_string(), |s| {
                format!("{}/{:?} {:?}", s.current, s.state, s.message)
            })
        };
        out.push(format!(
            "status: {la} {} vs {lb} {}",
            show(&a.status),
            show(&b.status)
        ));
    }
    if a.requeue_after != b.requeue_after {
        out.push(format!(
            "requeue-after: {la} {:?} vs {lb} {:?}",
            a.requeue_after, b.requeue_after
        ));
    }
    if a.events != b.events {
        out.push("events differ".to_string());
    }
    out
}
