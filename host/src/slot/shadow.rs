//! Shadow mode: a candidate plugin runs on the same inputs as the active one;
//! where their proposals differ, the difference is logged and counted.
//! Nothing the shadow proposes is ever applied.
//!
//! The shadow is held to the active plugin's rules (issue 22, hazard 7): it
//! is vetted and may be pinned by digest (`--shadow-plugin-sha256`), its
//! output passes the same bounds check and pod policy before anything is
//! compared (an output that breaks them is reported by rule id and counted,
//! never compared), and every piece of its text in the log goes through
//! [`crate::plugin_text`] (escaped and bounded). It runs off the critical path: a reconcile only
//! *offers* its input to [`ShadowQueue`], a bounded queue worked by one task
//! of its own; when the queue is full the offer is dropped and counted
//! (`wasm_operator_shadow_dropped`), so a slow or spinning shadow never adds
//! latency to active reconciles.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::actions::ProposedActions;
use crate::apply::policy::PolicyConfig;
use crate::apply::{Limits, validate};
use crate::crd::Jinghzhu;
use crate::plugin_text;
use crate::runtime::LoadedPlugin;
use crate::telemetry::metrics::Metrics;

/// Shadow calls that may wait in the queue by default (`--shadow-queue`).
pub const DEFAULT_SHADOW_QUEUE: usize = 8;

/// One reconcile's input and the active plugin's proposal, waiting for the shadow.
struct ShadowCall {
    jz: Arc<Jinghzhu>,
    pods: Vec<Pod>,
    key: String,
    active: ProposedActions,
    limits: Limits,
    policy: PolicyConfig,
}

/// The shadow plugin and its bounded queue of calls, worked one at a time
/// by a task of its own (stopped when this is dropped).
pub struct ShadowQueue {
    plugin: Arc<LoadedPlugin>,
    calls: mpsc::Sender<ShadowCall>,
    metrics: Arc<Metrics>,
    worker: tokio::task::JoinHandle<()>,
}

/// Comparisons a reporting queue keeps for its reader before dropping more.
pub const REPORTED_COMPARISONS: usize = 1024;

impl Drop for ShadowQueue {
    /// Calls still waiting are dropped; one running is abandoned (it ends
    /// at its deadline).
    fn drop(&mut self) {
        self.worker.abort();
    }
}

impl ShadowQueue {
    /// Starts the shadow's worker with room for `capacity` waiting calls (at least one).
    pub fn start(plugin: Arc<LoadedPlugin>, capacity: usize, metrics: Arc<Metrics>) -> Self {
        Self::start_with(plugin, capacity, metrics, None)
    }

    /// [`ShadowQueue::start`], also reporting each comparison (true: the
    /// proposals differed, or the shadow failed) on the returned channel;
    /// its lines are at debug (a canary's judge reads the figures).
    pub fn start_reporting(
        plugin: Arc<LoadedPlugin>,
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> (Self, mpsc::Receiver<bool>) {
        let (report, reports) = mpsc::channel(REPORTED_COMPARISONS);
        (
            Self::start_with(plugin, capacity, metrics, Some(report)),
            reports,
        )
    }

    fn start_with(
        plugin: Arc<LoadedPlugin>,
        capacity: usize,
        metrics: Arc<Metrics>,
        report: Option<mpsc::Sender<bool>>,
    ) -> Self {
        let (calls, mut waiting) = mpsc::channel::<ShadowCall>(capacity.max(1));
        let worker = (plugin.clone(), metrics.clone());
        let worker = tokio::spawn(async move {
            let (plugin, metrics) = worker;
            while let Some(call) = waiting.recv().await {
                if let Some(differed) = compare(&plugin, call, &metrics, report.is_some()).await
                    && let Some(report) = &report
                {
                    // A full channel drops the comparison (its reader lags).
                    let _ = report.try_send(differed);
                }
            }
        });
        Self {
            plugin,
            calls,
            metrics,
            worker,
        }
    }

    /// The shadow plugin.
    pub fn plugin(&self) -> &Arc<LoadedPlugin> {
        &self.plugin
    }

    /// Queues a shadow call for this input unless the queue is full (then
    /// the call is dropped and counted). Never waits; copies the input only
    /// when there is room for it.
    pub fn offer(
        &self,
        jz: &Arc<Jinghzhu>,
        pods: &[Pod],
        key: &str,
        active: &ProposedActions,
        (limits, policy): (&Limits, &PolicyConfig),
    ) {
        match self.calls.try_reserve() {
            Ok(permit) => permit.send(ShadowCall {
                jz: jz.clone(),
                pods: pods.to_vec(),
                key: key.to_string(),
                active: active.clone(),
                limits: limits.clone(),
                policy: policy.clone(),
            }),
            Err(TrySendError::Full(())) => {
                self.metrics.shadow_dropped.inc();
                tracing::debug!(object = key, "shadow queue full; shadow call dropped");
            }
            Err(TrySendError::Closed(())) => {}
        }
    }
}

/// Runs the shadow on one call: its output is checked against the bounds
/// and the pod policy first; only an output that passes is compared with
/// the active plugin's proposal. Returns whether they differed (a failed
/// shadow counts as differing), or `None` when not compared; `quiet` logs
/// the differences at debug.
async fn compare(
    shadow: &Arc<LoadedPlugin>,
    call: ShadowCall,
    metrics: &Metrics,
    quiet: bool,
) -> Option<bool> {
    let ShadowCall {
        jz,
        pods,
        key,
        active,
        limits,
        policy,
    } = call;
    let raw = match shadow.reconcile_raw(&jz, &pods, &key).await {
        Ok(raw) => raw,
        Err(err) => {
            metrics.shadow_differences.inc();
            tracing::warn!(
                object = %key,
                shadow = %shadow.describe(),
                kind = err.kind(),
                error = %plugin_text::shown(&err.to_string()),
                "shadow plugin failed (not applied)"
            );
            return Some(true);
        }
    };
    let checked = validate::check_bounds(&raw.output, &jz, &pods, &limits).and_then(|()| {
        let candidate = raw.into_actions();
        validate::validate(&jz, &pods, &candidate, &policy).map(|_| candidate)
    });
    let candidate = match checked {
        Ok(candidate) => candidate,
        Err(rejection) => {
            metrics.shadow_rejected.inc();
            tracing::warn!(
                object = %key,
                shadow = %shadow.describe(),
                rules = %rejection.rules().join(", "),
                reasons = %plugin_text::shown(&rejection.to_string()),
                "shadow output breaks the rules the active plugin is held to; not compared (not applied)"
            );
            return None;
        }
    };
    let differences = differences(&active, &candidate);
    if differences.is_empty() {
        tracing::debug!(object = %key, shadow = %shadow.describe(), "shadow agrees");
        return Some(false);
    }
    metrics.shadow_differences.inc();
    let differences = differences.join("; ");
    if quiet {
        tracing::debug!(object = %key, shadow = %shadow.describe(), %differences, "shadow plugin proposes something else (not applied)");
    } else {
        tracing::info!(object = %key, shadow = %shadow.describe(), %differences, "shadow plugin proposes something else (not applied)");
    }
    Some(true)
}

/// Bytes of one plugin value (a pod name, a status field) in a difference.
const SHOWN_MAX: usize = 256;

/// Pod names listed in a difference before the rest are counted.
const NAMES_SHOWN: usize = 10;

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
            "deletes: {la} {} vs {lb} {}",
            names(&a.delete_pods),
            names(&b.delete_pods)
        ));
    }
    if a.status != b.status {
        let show = |s: &Option<crate::crd::JinghzhuStatus>| {
            s.as_ref().map_or("none".to_string(), |s| {
                format!(
                    "{}/\"{}\" \"{}\"",
                    s.current,
                    plugin_text::shown(&s.state).within(SHOWN_MAX),
                    plugin_text::shown(&s.message).within(SHOWN_MAX)
                )
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

/// `["a", "b", … and 3 more]`, each name escaped.
fn names(names: &[String]) -> String {
    let mut shown: Vec<String> = names
        .iter()
        .take(NAMES_SHOWN)
        .map(|name| format!("\"{}\"", plugin_text::shown(name).within(SHOWN_MAX)))
        .collect();
    if names.len() > NAMES_SHOWN {
        shown.push(format!("… and {} more", names.len() - NAMES_SHOWN));
    }
    format!("[{}]", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_quote_plugin_values_escaped() {
        let a = ProposedActions {
            delete_pods: vec!["p\n1".into()],
            ..ProposedActions::default()
        };
        let b = ProposedActions {
            delete_pods: (0..12).map(|i| format!("q{i}")).collect(),
            ..ProposedActions::default()
        };
        let text = differences(&a, &b).join("; ");
        assert!(!text.contains('\n'), "{text}");
        assert!(text.contains(r#"["p\n1"]"#), "{text}");
        assert!(text.contains("… and 2 more"), "{text}");
    }
}
