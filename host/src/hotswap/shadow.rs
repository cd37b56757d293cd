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
    let mut out = Vec::new();
    if active.create_pods.len() != shadow.create_pods.len() {
        out.push(format!(
            "creates: active {} vs shadow {}",
            active.create_pods.len(),
            shadow.create_pods.len()
        ));
    } else if active.create_pods != shadow.create_pods {
        out.push("creates: same count, different pods".to_string());
    }
    if active.delete_pods != shadow.delete_pods {
        out.push(format!(
            "deletes: active {:?} vs shadow {:?}",
            active.delete_pods, shadow.delete_pods
        ));
    }
    if active.status != shadow.status {
        let show = |s: &Option<crate::crd::JinghzhuStatus>| {
            s.as_ref().map_or("none".to_string(), |s| {
                format!("{}/{:?} {:?}", s.current, s.state, s.message)
            })
        };
        out.push(format!(
            "status: active {} vs shadow {}",
            show(&active.status),
            show(&shadow.status)
        ));
    }
    if active.requeue_after != shadow.requeue_after {
        out.push(format!(
            "requeue-after: active {:?} vs shadow {:?}",
            active.requeue_after, shadow.requeue_after
        ));
    }
    if active.events != shadow.events {
        out.push("events differ".to_string());
    }
    out
}
