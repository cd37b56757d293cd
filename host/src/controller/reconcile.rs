//! One reconcile of one Jinghzhu: read its pods from the cache, check our
//! expectations, call the plugin, validate its whole proposal, apply it.
//!
//! Level-triggered: nothing here depends on which event queued the object.
//! The error policy is per-object exponential backoff; a plugin error it
//! calls not retryable waits for the object to change instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};

use super::backoff::PerObjectBackoff;
use super::expectations::Expectations;
use super::metrics::{Metrics, PluginLabels, PluginOutcome};
use super::readiness::CacheReady;
use super::watch::object_key;
use crate::apply::{self, Limits};
use crate::crd::Jinghzhu;
use crate::hotswap::ActivePlugin;
use crate::ownership::owned_pods;

/// Everything a reconcile needs, shared by all workers.
pub struct Context {
    /// API client (the host's identity).
    pub client: Client,
    /// The pod cache.
    pub pods: Store<Pod>,
    /// Opens once the pod cache has had its initial list.
    pub pods_ready: CacheReady,
    /// The plugin reconciles run with (swappable).
    pub plugin: Arc<ActivePlugin>,
    /// Pods we created or deleted and wait to see in the cache.
    pub expectations: Arc<Expectations>,
    /// Failures per object.
    pub backoff: PerObjectBackoff,
    /// Where Events go.
    pub recorder: Recorder,
    /// What a plugin may propose.
    pub limits: Limits,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

/// Why a reconcile failed; the error policy turns it into a retry delay.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The plugin trapped, ran out of time or memory, or returned an error.
    #[error("plugin {plugin} failed: {message}")]
    Plugin {
        /// Digest of the plugin.
        plugin: String,
        /// What went wrong.
        message: String,
        /// Whether retrying can help.
        retryable: bool,
    },
    /// The plugin's output broke the rules and was rejected whole.
    #[error("plugin output rejected: {0}")]
    Rejected(String),
    /// Talking to the API server failed part-way; the rest is retried.
    #[error("applying failed: {0}")]
    Apply(String),
    /// The pod cache is gone (the watch stream ended).
    #[error("the pod cache stopped")]
    CacheGone,
}

/// The controller's reconcile function.
pub async fn reconcile(jz: Arc<Jinghzhu>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let key = object_key(jz.as_ref());
    ctx.metrics.reconciles.inc();
    if jz.meta().deletion_timestamp.is_some() {
        // The garbage collector deletes its pods through their ownerReferences.
        tracing::debug!(object = %key, "being deleted; nothing to do");
        ctx.expectations.forget(&key);
        ctx.backoff.succeeded(&key);
        return Ok(Action::await_change());
    }
    // Never act on a partial pod list: that is how restarts over-create.
    ctx.pods_ready
        .wait()
        .await
        .map_err(|_| ReconcileError::CacheGone)?;
    let pods = owned_pods(&ctx.pods.state(), jz.as_ref());

    let uid_state: std::collections::HashMap<String, bool> = pods
        .iter()
        .filter_map(|p| Some((p.uid()?, p.metadata.deletion_timestamp.is_some())))
        .collect();
    if !ctx
        .expectations
        .satisfied(&key, |uid| uid_state.get(uid).copied())
    {
        let (creates, deletes) = ctx.expectations.pending(&key);
        ctx.metrics.waited_for_cache.inc();
        tracing::debug!(
            object = %key,
            pending_creates = creates,
            pending_deletes = deletes,
            "waiting for the cache to show our own changes"
        );
        return Ok(Action::requeue(Duration::from_secs(2)));
    }

    let started = Instant::now();
    let plugin = ctx.plugin.current();
    let digest = plugin.digest().to_string();
    let status = jz.status.clone().unwrap_or_default();
    tracing::info!(
        object = %key,
        generation = jz.meta().generation.unwrap_or_default(),
        desired = jz.spec.desired,
        pods = pods.len(),
        current = status.current,
        state = %status.state,
        plugin = %plugin.describe(),
        "reconcile start"
    );

    let labels = PluginLabels {
        plugin: digest.clone(),
    };
    ctx.metrics.plugin_calls.get_or_create(&labels).inc();
    let mut call = ctx.metrics.plugin_call(&plugin);
    let proposal = plugin.reconcile(jz.as_ref(), &pods, &key).await;
    call.returned();
    ctx.plugin.record_outcome(&digest, proposal.is_ok());
    let proposal = match proposal {
        Ok(proposal) => proposal,
        Err(err) => {
            call.outcome(PluginOutcome::from(&err));
            ctx.metrics.plugin_errors.get_or_create(&labels).inc();
            let retryable = err.retryable();
            let message = err.to_string();
            tracing::error!(object = %key, plugin = %digest, retryable, error = %message, "plugin failed");
            publish(
                &ctx.recorder,
                &jz,
                EventType::Warning,
                "PluginFailed",
                &format!("plugin {digest} failed: {message}"),
            )
            .await;
            return Err(ReconcileError::Plugin {
                plugin: digest,
                message,
                retryable,
            });
        }
    };
    ctx.plugin
        .shadow_compare(jz.as_ref(), &pods, &key, &proposal, &ctx.metrics)
        .await;

    if let Err(rejection) = apply::validate(jz.as_ref(), &pods, &proposal, &ctx.limits) {
        call.outcome(PluginOutcome::Rejected);
        ctx.metrics.rejected_outputs.inc();
        let reasons = rejection.to_string();
        tracing::error!(object = %key, plugin = %digest, %reasons, "plugin output rejected; nothing applied");
        publish(
            &ctx.recorder,
            &jz,
            EventType::Warning,
            "RejectedOutput",
            &format!("plugin {digest} proposed an invalid change, nothing applied: {reasons}"),
        )
        .await;
        return Err(ReconcileError::Rejected(reasons));
    }
    call.outcome(PluginOutcome::Ok);

    let applied = apply::apply(
        &apply::Target {
            client: &ctx.client,
            recorder: &ctx.recorder,
            expectations: &ctx.expectations,
            metrics: &ctx.metrics,
            key: &key,
            plugin: plugin.as_ref(),
        },
        jz.as_ref(),
        &pods,
        &proposal,
    )
    .await;
    match applied {
        Ok(summary) => {
            ctx.backoff.succeeded(&key);
            if !summary.created.is_empty() || !summary.deleted.is_empty() || summary.status_written
            {
                tracing::info!(
                    object = %key,
                    created = ?summary.created,
                    deleted = ?summary.deleted,
                    status_written = summary.status_written,
                    "actions applied"
                );
            }
            let action = match proposal.requeue_after {
                Some(after) => Action::requeue(after),
                None => Action::await_change(),
            };
            tracing::info!(
                object = %key,
                events = summary.events,
                requeue_after = ?proposal.requeue_after,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "reconcile done"
            );
            Ok(action)
        }
        Err(err) => {
            ctx.metrics.apply_errors.inc();
            tracing::error!(object = %key, error = %err, "applying failed part-way; will retry");
            Err(ReconcileError::Apply(err.to_string()))
        }
    }
}

/// Per-object exponential backoff; non-retryable plugin errors wait for a change.
pub fn error_policy(jz: Arc<Jinghzhu>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    let key = object_key(jz.as_ref());
    if let ReconcileError::Plugin {
        retryable: false, ..
    } = err
    {
        tracing::warn!(object = %key, "not retrying until the object or the plugin changes");
        return Action::await_change();
    }
    let delay = ctx.backoff.failed(&key);
    tracing::warn!(object = %key, error = %err, retry_in_ms = delay.as_millis() as u64, "reconcile failed; requeued with backoff");
    Action::requeue(delay)
}

/// Records an Event on the Jinghzhu; a failure to record is logged, not fatal.
pub async fn publish(
    recorder: &Recorder,
    jz: &Jinghzhu,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, &jz.object_ref(&())).await {
        tracing::warn!(object = %object_key(jz), %reason, error = %err, "could not record Event");
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Logs an error the controller machinery reports (not a reconcile's own).
pub fn log_controller_error<E: std::fmt::Debug>(err: &E) {
    tracing::warn!(error = ?err, "controller");
}
