//! One reconcile of one Jinghzhu: read its pods from the cache (through the
//! owner index), check our expectations, call the plugin, validate its whole
//! proposal, apply it.
//!
//! Level-triggered: nothing here depends on which event queued the object.
//! The error policy is per-object exponential backoff; a plugin error it
//! calls not retryable, or a template that breaks the pod policy's floor,
//! waits for the object to change instead. Before anything is applied the
//! output's bounds, the whole proposal and the object's write budget are
//! checked; a requeue-after is never shorter than the configured minimum.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};

use super::PerObject;
use super::events::EventSink;
use super::metrics::{Metrics, PluginLabels, PluginOutcome};
use super::owner_index::OwnerIndex;
use super::readiness::CacheReady;
use super::watch::object_key;
use crate::apply::policy::{self, PolicyConfig};
use crate::apply::{self, Limits, validate};
use crate::cached_pod::CachedPod;
use crate::crd::Jinghzhu;
use crate::hotswap::ActivePlugin;
use crate::plugin_text::shown;

/// Everything a reconcile needs, shared by all workers.
pub struct Context {
    /// API client (the host's identity).
    pub client: Client,
    /// The Jinghzhu cache (the one the controller dispatches from).
    pub jinghzhus: Store<Jinghzhu>,
    /// The pod cache.
    pub pods: Store<CachedPod>,
    /// Which cached pods each Jinghzhu controls.
    pub pod_owners: OwnerIndex,
    /// Opens once the pod cache has had its initial list.
    pub pods_ready: CacheReady,
    /// The plugin reconciles run with (swappable).
    pub plugin: Arc<ActivePlugin>,
    /// Expectations, backoff and write budget, per Jinghzhu UID.
    pub objects: Arc<PerObject>,
    /// Where Events go (queued; never waited for).
    pub events: EventSink,
    /// What a plugin may propose.
    pub limits: Limits,
    /// Which pod specs a plugin may propose.
    pub policy: PolicyConfig,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

/// Why a reconcile failed; the error policy turns it into a retry delay.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The plugin trapped, ran out of time or memory, or returned an error.
    #[error("plugin {plugin} failed: {}", shown(.message))]
    Plugin {
        /// Digest of the plugin.
        plugin: String,
        /// What went wrong.
        message: String,
        /// Whether retrying can help.
        retryable: bool,
    },
    /// The plugin's output broke the rules and was rejected whole.
    #[error("plugin output rejected: {}", shown(.0))]
    Rejected(String),
    /// The Jinghzhu's own template breaks the pod policy's floor; only a
    /// change to the object can fix it.
    #[error("the Jinghzhu's template is not allowed: {}", shown(.0))]
    InvalidTemplate(String),
    /// Talking to the API server failed part-way; the rest is retried.
    #[error("applying failed: {}", shown(.0))]
    Apply(String),
    /// The pod cache is gone (the watch stream ended).
    #[error("the pod cache stopped")]
    CacheGone,
}

/// How soon a reconcile whose status write met a newer version runs again.
const STALE_STATUS_RETRY: Duration = Duration::from_millis(200);

/// The object as cached now, in place of the copy the controller handed
/// over when it dispatched the reconcile. A reconcile can wait long before
/// it runs (on a standby until it leads, at start until the pod cache is
/// listed), and acting on the spec it was handed then would undo what was
/// changed meanwhile: a new leader deleting pods for a `desired` raised
/// minutes ago. `None` when the object is gone, or when a namesake with
/// another UID took its place (that one has a reconcile of its own).
fn current(cache: &Store<Jinghzhu>, dispatched: Arc<Jinghzhu>) -> Option<Arc<Jinghzhu>> {
    if dispatched.uid().is_none() {
        return Some(dispatched); // not from the API server (tests); nothing newer exists
    }
    cache
        .get(&ObjectRef::from_obj(dispatched.as_ref()))
        .filter(|now| now.uid() == dispatched.uid())
}

/// The controller's reconcile function.
pub async fn reconcile(
    dispatched: Arc<Jinghzhu>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let key = object_key(dispatched.as_ref());
    ctx.metrics.reconciles.inc();
    // Never act on a partial pod list: that is how restarts over-create.
    ctx.pods_ready
        .wait()
        .await
        .map_err(|_| ReconcileError::CacheGone)?;
    let Some(jz) = current(&ctx.jinghzhus, dispatched) else {
        tracing::debug!(object = %key, "gone since it was queued; nothing to do");
        return Ok(Action::await_change());
    };
    let Some(uid) = jz.uid() else {
        return Ok(Action::await_change()); // not from the API server
    };
    if jz.meta().deletion_timestamp.is_some() {
        // The garbage collector deletes its pods through their ownerReferences.
        tracing::debug!(object = %key, "being deleted; nothing to do");
        ctx.objects.forget(&uid);
        return Ok(Action::await_change());
    }
    let pods = ctx.pod_owners.owned_pods(&ctx.pods, jz.as_ref());

    let uid_state: std::collections::HashMap<String, bool> = pods
        .iter()
        .filter_map(|p| Some((p.uid()?, p.metadata.deletion_timestamp.is_some())))
        .collect();
    if !ctx
        .objects
        .expectations
        .satisfied(&uid, |pod| uid_state.get(pod).copied())
    {
        let (creates, deletes) = ctx.objects.expectations.pending(&uid);
        ctx.metrics.waited_for_cache.inc();
        tracing::debug!(
            object = %key,
            pending_creates = creates,
            pending_deletes = deletes,
            "waiting for the cache to show our own changes"
        );
        return Ok(Action::requeue(Duration::from_secs(2)));
    }

    // The user's own template must pass the floor of every mode before any
    // plugin may make pods of it.
    if jz.spec.template.as_ref().is_some_and(|t| t.spec.is_some()) {
        let violations = policy::check_template(validate::template_spec(&jz));
        if !violations.is_empty() {
            let reasons = validate::Rejection(violations).to_string();
            tracing::error!(object = %key, reasons = %shown(&reasons), "the Jinghzhu's template is not allowed; nothing done");
            ctx.events.publish(
                &jz,
                EventType::Warning,
                "InvalidTemplate",
                &format!("spec.template is not allowed by the pod policy; no pods are made until it is fixed: {reasons}"),
            );
            return Err(ReconcileError::InvalidTemplate(reasons));
        }
    }

    let started = Instant::now();
    let Some(plugin) = ctx.plugin.serving() else {
        // The plugin offered at start was refused: the host is unready and
        // reconciles nothing; the first good plugin re-queues every object.
        tracing::debug!(object = %key, "no plugin serves yet; waiting for a good one");
        return Ok(Action::await_change());
    };
    let digest = plugin.digest().to_string();
    let status = jz.status.clone().unwrap_or_default();
    tracing::info!(
        object = %key,
        generation = jz.meta().generation.unwrap_or_default(),
        desired = jz.spec.desired,
        pods = pods.len(),
        current = status.current,
        state = %shown(&status.state),
        plugin = %plugin.describe(),
        "reconcile start"
    );

    let labels = PluginLabels {
        plugin: digest.clone(),
    };
    ctx.metrics.plugin_calls.get_or_create(&labels).inc();
    let mut call = ctx.metrics.plugin_call(&plugin);
    let raw = plugin.reconcile_raw(jz.as_ref(), &pods, &key).await;
    call.returned();
    ctx.plugin.record_outcome(&digest, raw.is_ok());
    let raw = match raw {
        Ok(raw) => raw,
        Err(err) => {
            if matches!(err, crate::runtime::PluginError::OutputTooLarge(_)) {
                crate::runtime::reclaim::release_free_memory();
            }
            call.outcome(PluginOutcome::from(&err));
            ctx.metrics.plugin_errors.get_or_create(&labels).inc();
            let retryable = err.retryable();
            let message = err.to_string();
            let kind = err.kind();
            tracing::error!(object = %key, plugin = %digest, retryable, kind, error = %shown(&message), "plugin failed");
            ctx.events.publish(
                &jz,
                EventType::Warning,
                "PluginFailed",
                &format!("plugin {digest} failed (rule limits/{kind}): {message}"),
            );
            return Err(ReconcileError::Plugin {
                plugin: digest,
                message,
                retryable,
            });
        }
    };

    // Counts and sizes first, before any per-create work.
    let large = crate::runtime::reclaim::is_large(&raw.output);
    let checked = validate::check_bounds(&raw.output, &jz, &pods, &ctx.limits).and_then(|()| {
        let proposal = raw.into_actions();
        let validated = validate::validate(&jz, &pods, &proposal, &ctx.policy)?;
        Ok((proposal, validated))
    });
    let (proposal, validated) = match checked {
        Ok(checked) => checked,
        Err(rejection) => {
            // The output is dropped by now: give its memory back.
            if large {
                crate::runtime::reclaim::release_free_memory();
            }
            call.outcome(PluginOutcome::Rejected);
            return Err(reject(&ctx, &jz, &key, &digest, &rejection));
        }
    };
    call.outcome(PluginOutcome::Ok);
    // The shadow gets a copy of the input in its own bounded queue and is
    // held to the same rules there; it never delays this reconcile.
    ctx.plugin
        .offer_shadow(&jz, &pods, &key, &proposal, (&ctx.limits, &ctx.policy));

    // The object's write budget covers every write of the proposal.
    let status = apply::status_change(&jz, &pods, &proposal, &plugin.describe());
    let cost = apply::write_cost(&proposal, status.as_ref());
    if let Err(wait) = ctx.objects.budget.try_spend(&uid, cost) {
        ctx.metrics.budget_exceeded.inc();
        let wait = wait.max(ctx.limits.min_requeue);
        tracing::warn!(object = %key, writes = cost, retry_in_ms = wait.as_millis() as u64, "write budget exceeded; nothing applied");
        if ctx.objects.budget.should_warn(&uid) {
            let budget = ctx.objects.budget.config();
            ctx.events.publish(
                &jz,
                EventType::Warning,
                "WriteBudgetExceeded",
                &format!(
                    "the plugin's changes to this object need {cost} writes, more than its write budget \
                     ({} per minute, bursts of {}) has left (rule limits/write-budget); nothing applied, \
                     retrying in {}s",
                    budget.per_minute,
                    budget.burst,
                    wait.as_secs().max(1)
                ),
            );
        }
        return Ok(Action::requeue(wait));
    }

    let applied = apply::apply(
        &apply::Target {
            client: &ctx.client,
            events: &ctx.events,
            expectations: &ctx.objects.expectations,
            own_writes: &ctx.objects.own_writes,
            metrics: &ctx.metrics,
            owner_uid: &uid,
            key: &key,
            plugin: &plugin.describe(),
        },
        jz.as_ref(),
        &pods,
        &proposal,
        &validated,
        status.as_ref(),
    )
    .await;
    match applied {
        Ok(summary) => {
            ctx.objects.backoff.succeeded(&uid);
            if !summary.created.is_empty() || !summary.deleted.is_empty() || summary.status_written
            {
                tracing::info!(
                    object = %key,
                    created = %apply::name_list(&summary.created),
                    deleted = %apply::name_list(&summary.deleted),
                    status_written = summary.status_written,
                    "actions applied"
                );
            }
            let requeue = proposal
                .requeue_after
                .map(|after| after.max(ctx.limits.min_requeue));
            // A status refused as stale: the newer version may be our own
            // write's echo, which queues nothing, so come back for it.
            let requeue = if summary.stale {
                Some(requeue.map_or(STALE_STATUS_RETRY, |r| r.min(STALE_STATUS_RETRY)))
            } else {
                requeue
            };
            tracing::info!(
                object = %key,
                events = summary.events,
                requeue_after = ?requeue,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "reconcile done"
            );
            Ok(requeue.map_or_else(Action::await_change, Action::requeue))
        }
        Err(err) => {
            ctx.metrics.apply_errors.inc();
            tracing::error!(object = %key, error = %shown(&err.to_string()), "applying failed part-way; will retry");
            Err(ReconcileError::Apply(err.to_string()))
        }
    }
}

/// Reports a rejected proposal: a log line and a `RejectedOutput` Warning
/// Event naming every broken rule.
fn reject(
    ctx: &Context,
    jz: &Jinghzhu,
    key: &str,
    digest: &str,
    rejection: &validate::Rejection,
) -> ReconcileError {
    ctx.metrics.rejected_outputs.inc();
    let reasons = rejection.to_string();
    let rules = rejection.rules().join(", ");
    tracing::error!(object = %key, plugin = %digest, %rules, reasons = %shown(&reasons), "plugin output rejected; nothing applied");
    ctx.events.publish(
        jz,
        EventType::Warning,
        "RejectedOutput",
        &format!(
            "plugin {digest} proposed a change that breaks {rules}; nothing applied: {reasons}"
        ),
    );
    ReconcileError::Rejected(reasons)
}

/// Per-object exponential backoff; non-retryable plugin errors wait for a change.
pub fn error_policy(jz: Arc<Jinghzhu>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    let key = object_key(jz.as_ref());
    if matches!(
        err,
        ReconcileError::Plugin {
            retryable: false,
            ..
        } | ReconcileError::InvalidTemplate(_)
    ) {
        tracing::warn!(object = %key, "not retrying until the object or the plugin changes");
        return Action::await_change();
    }
    let delay = ctx.objects.backoff.failed(&jz.uid().unwrap_or(key.clone()));
    tracing::warn!(object = %key, error = %shown(&err.to_string()), retry_in_ms = delay.as_millis() as u64, "reconcile failed; requeued with backoff");
    Action::requeue(delay)
}

/// Logs an error the controller machinery reports. A pod event whose owner
/// is gone (a deleted Jinghzhu's pods being collected) is expected, and a
/// failed reconcile was logged by [`error_policy`] already: both at debug;
/// the rest are warnings. Error texts go through [`shown`].
pub fn log_controller_error<E: std::fmt::Debug>(
    err: &kube::runtime::controller::Error<E, kube::runtime::watcher::Error>,
) {
    match err {
        kube::runtime::controller::Error::ObjectNotFound(object) => {
            tracing::debug!(object = %object, "owner not in the cache (deleted); event ignored");
        }
        // Already logged by the error policy, with the object's backoff.
        kube::runtime::controller::Error::ReconcilerFailed(err, object) => tracing::debug!(
            object = %format!("{}/{}", object.namespace.as_deref().unwrap_or_default(), object.name),
            error = %shown(&format!("{err:?}")),
            "reconcile failed"
        ),
        other => tracing::warn!(error = %shown(&format!("{other:?}")), "controller"),
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::crd::JinghzhuSpec;

    fn web(uid: &str, desired: u32) -> Jinghzhu {
        let mut jz = Jinghzhu::new(
            "web",
            JinghzhuSpec {
                desired,
                template: None,
            },
        );
        jz.metadata.namespace = Some("ns".into());
        jz.metadata.uid = Some(uid.into());
        jz
    }

    #[test]
    fn a_reconcile_acts_on_the_object_as_cached_when_it_runs() {
        let (cache, mut writer) = reflector::store();
        // Dispatched at desired 3 (say, to a standby that waits to lead)…
        let dispatched = Arc::new(web("uid-1", 3));
        writer.apply_watcher_event(&Event::Apply(web("uid-1", 3)));
        // …and scaled to 50 before it runs.
        writer.apply_watcher_event(&Event::Apply(web("uid-1", 50)));
        let now = current(&cache, dispatched.clone()).expect("still there");
        assert_eq!(now.spec.desired, 50);

        // Deleted and made again under the same name: not this reconcile's object.
        writer.apply_watcher_event(&Event::Delete(web("uid-1", 50)));
        assert!(current(&cache, dispatched.clone()).is_none());
        writer.apply_watcher_event(&Event::Apply(web("uid-2", 1)));
        assert!(current(&cache, dispatched).is_none());
    }
}
