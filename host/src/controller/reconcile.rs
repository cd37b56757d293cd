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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};

pub use super::context::Context;
use super::status_window::Admit;
use super::watch::object_key;
use crate::actions::ProposedActions;
use crate::apply::expectations::{Check, Expectations};
use crate::apply::fence::WriteFence;
use crate::apply::policy;
use crate::apply::{self, Applied, ApplyError, Validated, validate};
use crate::crd::{Jinghzhu, JinghzhuStatus};
use crate::judging::tally::Sample;
use crate::ownership::{MANAGED_BY_SELECTOR, OWNER_LABEL, is_controlled_by};
use crate::plugin_text::shown;
use crate::runtime::{LoadedPlugin, PluginError, RawProposal, reclaim};
use crate::slot::ActivePlugin;
use crate::telemetry::log_limit::Verdict;
use crate::telemetry::metrics::{PluginCall, PluginLabels, PluginOutcome};

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
    #[error("applying failed: {}", shown(.message))]
    Apply {
        /// What failed.
        message: String,
        /// The API server could not be reached (no HTTP answer): retried
        /// as soon as it answers again.
        unreachable: bool,
    },
    /// The pod cache is gone (the watch stream ended).
    #[error("the pod cache stopped")]
    CacheGone,
}

/// How soon a reconcile ended by the write fence is tried again.
const FENCED_RETRY: Duration = Duration::from_secs(1);

/// How soon a reconcile whose status write met a newer version runs again.
const STALE_STATUS_RETRY: Duration = Duration::from_millis(200);

/// The object as cached now, in place of the copy the controller handed
/// over when it dispatched the reconcile. A reconcile can wait long before
/// it runs (on a standby until it leads, at start until the pod cache is
/// listed), and acting on the spec it was handed then would undo what was
/// changed meanwhile: a new leader deleting pods for a `desired` raised
/// minutes ago. `None` when the object is gone, or when a namesake with
/// another UID took its place (that one has a reconcile of its own).
pub(crate) fn current(cache: &Store<Jinghzhu>, dispatched: Arc<Jinghzhu>) -> Option<Arc<Jinghzhu>> {
    if dispatched.uid().is_none() {
        return Some(dispatched); // not from the API server (tests); nothing newer exists
    }
    cache
        .get(&ObjectRef::from_obj(dispatched.as_ref()))
        .filter(|now| now.uid() == dispatched.uid())
}

/// The controller's reconcile function: the steps of one reconcile, in the
/// order of the architecture's flow (cache → plugin → validate → apply),
/// for a host that holds everything for good (no fence).
pub async fn reconcile(
    dispatched: Arc<Jinghzhu>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    reconcile_fenced(dispatched, ctx, WriteFence::open()).await
}

/// [`reconcile`] on behalf of a hold that can lapse: each write is sent
/// only after `fence` passed (see [`crate::apply::fence`]); a refused write
/// ends the reconcile, requeued shortly (not a failure).
pub async fn reconcile_fenced(
    dispatched: Arc<Jinghzhu>,
    ctx: Arc<Context>,
    fence: WriteFence,
) -> Result<Action, ReconcileError> {
    ctx.metrics.reconciles.inc();
    // 1. Read the object and its pods from the cache.
    let Some(object) = read_object(&ctx, dispatched).await? else {
        return Ok(Action::await_change());
    };
    settle_unknown_outcomes(&ctx, &object).await;
    // Pods that left the watch alive get their labels back, not a replacement.
    super::strays::restore(&ctx, &object.jz, &object.uid, &object.pods, &fence).await;
    if let Some(wait) = wait_for_own_changes(&ctx, &object) {
        return Ok(wait);
    }
    check_own_template(&ctx, &object)?;
    let started = Instant::now();
    let route = ctx.plugin.route(&object.jz);
    let slot = &route.slot;
    // A canary rollout's cohort gets the canary, the rest the stable plugin.
    let Some(plugin) = slot.plugin_for(&object.uid) else {
        // The plugin offered at start was refused: the slot serves nothing
        // (the host is unready if it is the default's); the first good
        // plugin re-queues every object.
        tracing::debug!(object = %object.key, tenant = ?route.tenant, "no plugin serves yet; waiting for a good one");
        return Ok(Action::await_change());
    };
    // 2. Call the plugin.
    let (raw, call) = call_plugin(&ctx, slot, &plugin, &object).await?;
    // 3. Check its whole proposal, then the object's write budget.
    let (proposal, validated, latency) =
        check_proposal(&ctx, slot, &object, plugin.digest(), raw, call)?;
    // The shadow gets a copy of the input in its own bounded queue and is
    // held to the same rules there; it never delays this reconcile.
    slot.offer_shadow(
        &object.jz,
        &object.pods,
        (&object.key, plugin.digest()),
        &proposal,
        (&ctx.limits, &ctx.policy),
    );
    let stamp = plugin.describe();
    let status = apply::status_change(&object.jz, &object.pods, &proposal, &stamp);
    let writes = apply::write_cost(&proposal, status.as_ref());
    if writes > 0 {
        let labels = PluginLabels {
            plugin: plugin.digest().to_string(),
        };
        ctx.metrics
            .plugin_writes
            .get_or_create(&labels)
            .inc_by(u64::from(writes));
    }
    let accepted = Sample::Accepted {
        writes,
        converged: leaves_converged(&object, &proposal),
    };
    slot.canary()
        .record(&object.uid, plugin.digest(), accepted, latency);
    let (status, held_for) = coalesce_status(&ctx, &object, status);
    if let Some(wait) = spend_write_budget(&ctx, &object, &proposal, status.as_ref()) {
        return Ok(wait);
    }
    // 4. Apply it.
    let applied = apply::apply(
        &apply::Target {
            client: &ctx.client,
            events: &ctx.events,
            expectations: &ctx.objects.expectations,
            own_writes: &ctx.objects.own_writes,
            metrics: &ctx.metrics,
            owner_uid: &object.uid,
            key: &object.key,
            plugin: &stamp,
            fence: &fence,
        },
        object.jz.as_ref(),
        &object.pods,
        &proposal,
        &validated,
        status.as_ref(),
    )
    .await;
    // 5. Record what was done and say when to come back.
    let requeue_after = earliest(proposal.requeue_after, held_for);
    record(&ctx, &object, requeue_after, applied, started)
}

/// Step 3, continued: a status change on its way is held for the object's
/// window ([`super::status_window`]); returns the status to write now, or
/// how soon to come back and write what there is then.
fn coalesce_status(
    ctx: &Context,
    object: &Object,
    status: Option<JinghzhuStatus>,
) -> (Option<JinghzhuStatus>, Option<Duration>) {
    let window = &ctx.objects.status_window;
    let Some(status) = status else {
        // Nothing to write: the cached status is what the object needs.
        window.forget(&object.uid);
        return (None, None);
    };
    match window.admit(&object.uid, &status, object.jz.spec.desired) {
        Admit::Write => (Some(status), None),
        Admit::Hold(wait) => {
            ctx.metrics.status_held.inc();
            tracing::debug!(object = %object.key, wait_ms = wait.as_millis() as u64, "status change held for the object's window");
            (None, Some(wait))
        }
    }
}

/// The sooner of two optional waits.
fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The object one reconcile works on, read from the cache.
struct Object {
    /// The Jinghzhu as cached when the reconcile runs.
    jz: Arc<Jinghzhu>,
    /// Its UID (the key of everything kept per object).
    uid: String,
    /// `namespace/name`.
    key: String,
    /// The pods it controls, from the owner index.
    pods: Vec<Pod>,
    /// Pod watch events the cache had applied before `pods` was read.
    pod_events: u64,
}

/// Step 1: the object as cached now and the pods it owns, once the pod
/// cache has had its initial list; `None` when there is nothing to do (the
/// object is gone, replaced, not from the API server, or being deleted).
async fn read_object(
    ctx: &Context,
    dispatched: Arc<Jinghzhu>,
) -> Result<Option<Object>, ReconcileError> {
    let key = object_key(dispatched.as_ref());
    // Never act on a partial pod list: that is how restarts over-create.
    ctx.pods_ready
        .wait()
        .await
        .map_err(|_| ReconcileError::CacheGone)?;
    let Some(jz) = current(&ctx.jinghzhus, dispatched) else {
        tracing::debug!(object = %key, "gone since it was queued; nothing to do");
        return Ok(None);
    };
    let Some(uid) = jz.uid() else {
        return Ok(None); // not from the API server
    };
    if jz.meta().deletion_timestamp.is_some() {
        // The garbage collector deletes its pods through their ownerReferences.
        tracing::debug!(object = %key, "being deleted; nothing to do");
        ctx.objects.forget(&uid);
        return Ok(None);
    }
    let pod_events = ctx.objects.expectations.pod_events_applied();
    let pods = super::owner_index::owned_pods(&ctx.pod_owners, &ctx.pods, jz.as_ref());
    Ok(Some(Object {
        jz,
        uid,
        key,
        pods,
        pod_events,
    }))
}

/// Step 1, continued: creates and deletes of this object whose outcome is
/// unknown (maybe sent) are settled by a read of the API server (its pods,
/// by the owner label, controlled by its UID): creates it shows no pod for
/// were not made, deletes of pods it shows live were not made, and neither
/// holds the object any more (see
/// [`Expectations::settle_by_read`]). When the read fails too, the object
/// keeps waiting; if the server could not be reached it is stranded
/// ([`super::recovery`]): queued again as soon as the server answers.
async fn settle_unknown_outcomes(ctx: &Context, object: &Object) {
    let expectations = &ctx.objects.expectations;
    let unknown = expectations.unknown_outcomes(&object.uid);
    if unknown == 0 {
        return;
    }
    let Some(namespace) = object.jz.namespace() else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = format!(
        "{MANAGED_BY_SELECTOR},{OWNER_LABEL}={}",
        object.jz.name_any()
    );
    let listed = match api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
    {
        Ok(listed) => listed,
        Err(err) => {
            tracing::debug!(object = %object.key, error = %shown(&err.to_string()), "could not read the pods to settle creates or deletes with an unknown outcome");
            if !matches!(err, kube::Error::Api(_)) {
                ctx.recovery
                    .strand(&object.uid, ObjectRef::from_obj(object.jz.as_ref()));
            }
            return;
        }
    };
    let cached: std::collections::HashSet<&str> = object
        .pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let owned = listed
        .items
        .iter()
        .filter(|p| is_controlled_by(*p, &object.uid))
        .filter_map(|p| {
            let terminating = p.metadata.deletion_timestamp.is_some();
            p.metadata.uid.as_deref().map(|uid| (uid, terminating))
        });
    let released = expectations.settle_by_read(&object.uid, owned, |uid| cached.contains(uid));
    if released > 0 {
        tracing::info!(object = %object.key, unknown, not_made = released, "creates or deletes with an unknown outcome were not made (a read of the API server shows no such pod, or the pod live); proposing them again");
    } else {
        tracing::debug!(object = %object.key, unknown, "creates or deletes with an unknown outcome may have been made; waiting for the watch to show them");
    }
}

/// How soon a reconcile waiting for the cache to show our own changes runs again.
const OWN_CHANGES_RETRY: Duration = Duration::from_secs(2);

/// Step 1, continued: a requeue when the cache does not show yet every pod
/// we created or deleted (acting now could double them). A wait of more
/// than a few seconds is logged at info (then every 30 s), and the
/// `wasm_operator_expectations_waiting` gauge counts the objects waiting.
fn wait_for_own_changes(ctx: &Context, object: &Object) -> Option<Action> {
    let expectations = &ctx.objects.expectations;
    expectations.report_to(
        &ctx.metrics.expectations_waiting,
        &ctx.metrics.expectation_timeouts,
    );
    let waiting = match pending_own_changes(expectations, object) {
        Check::Satisfied => return None,
        Check::TimedOut(waiting) => {
            tracing::warn!(
                object = %object.key,
                pending_creates = waiting.creates,
                unanswered_creates = waiting.unanswered,
                pending_deletes = waiting.deletes,
                waited_s = waiting.waited.as_secs(),
                "expectations timed out; reconciling with the cache as it is"
            );
            return None;
        }
        Check::Waiting(waiting) => waiting,
    };
    ctx.metrics.waited_for_cache.inc();
    if waiting.log {
        tracing::info!(
            object = %object.key,
            pending_creates = waiting.creates,
            unanswered_creates = waiting.unanswered,
            pending_deletes = waiting.deletes,
            waited_s = waiting.waited.as_secs(),
            "still waiting for the cache to show our own changes (creates with an unknown outcome wait for their pod or the expectations timeout)"
        );
    } else {
        tracing::debug!(
            object = %object.key,
            pending_creates = waiting.creates,
            pending_deletes = waiting.deletes,
            "waiting for the cache to show our own changes"
        );
    }
    Some(Action::requeue(OWN_CHANGES_RETRY))
}

/// Whether `pods` (the object `uid`'s pods as cached) show every create and
/// delete we made for it.
fn pending_own_changes(expectations: &Expectations, object: &Object) -> Check {
    let uid_state: HashMap<String, bool> = object
        .pods
        .iter()
        .filter_map(|p| Some((p.uid()?, p.metadata.deletion_timestamp.is_some())))
        .collect();
    expectations.check_as_of(&object.uid, object.pod_events, |pod| {
        uid_state.get(pod).copied()
    })
}

/// Step 1, last: the user's own template must pass the floor of every mode
/// before any plugin may make pods of it.
fn check_own_template(ctx: &Context, object: &Object) -> Result<(), ReconcileError> {
    let Err(reasons) = template_allowed(&object.jz) else {
        return Ok(());
    };
    tracing::error!(object = %object.key, reasons = %shown(&reasons), "the Jinghzhu's template is not allowed; nothing done");
    ctx.events.publish(
        &object.jz,
        EventType::Warning,
        "InvalidTemplate",
        &format!("spec.template is not allowed by the pod policy; no pods are made until it is fixed: {reasons}"),
    );
    Err(ReconcileError::InvalidTemplate(reasons))
}

/// Whether `jz`'s own template spec (when it has one) passes the pod
/// policy's floor; the broken rules when not.
fn template_allowed(jz: &Jinghzhu) -> Result<(), String> {
    if jz.spec.template.as_ref().is_none_or(|t| t.spec.is_none()) {
        return Ok(());
    }
    let violations = policy::check_template(validate::template_spec(jz));
    if violations.is_empty() {
        Ok(())
    } else {
        Err(validate::Rejection(violations).to_string())
    }
}

/// Step 2: calls `plugin` on the object and its pods, measured; a failed
/// call is logged, reported in a `PluginFailed` Event and returned.
async fn call_plugin<'m>(
    ctx: &'m Context,
    slot: &ActivePlugin,
    plugin: &Arc<LoadedPlugin>,
    object: &Object,
) -> Result<(RawProposal, PluginCall<'m>), ReconcileError> {
    let digest = plugin.digest().to_string();
    let status = object.jz.status.clone().unwrap_or_default();
    tracing::debug!(
        object = %object.key,
        generation = object.jz.meta().generation.unwrap_or_default(),
        desired = object.jz.spec.desired,
        pods = object.pods.len(),
        current = status.current,
        state = %shown(&status.state),
        plugin = %plugin.describe(),
        "reconcile start"
    );
    let labels = PluginLabels {
        plugin: digest.clone(),
    };
    ctx.metrics.plugin_calls.get_or_create(&labels).inc();
    let mut call = ctx.metrics.plugin_call(plugin);
    let raw = plugin
        .reconcile_raw(object.jz.as_ref(), &object.pods, &object.key)
        .await;
    call.returned();
    slot.record_outcome(&object.uid, &digest, raw.is_ok());
    let err = match raw {
        Ok(raw) => return Ok((raw, call)),
        Err(err) => err,
    };
    slot.canary()
        .record(&object.uid, &digest, Sample::Failed, call.latency());
    check_with_stable(ctx, slot, object, &digest, false);
    if matches!(err, PluginError::OutputTooLarge(_)) {
        reclaim::release_free_memory();
    }
    call.outcome(PluginOutcome::from(&err));
    ctx.metrics.plugin_errors.get_or_create(&labels).inc();
    let retryable = err.retryable();
    let message = err.to_string();
    let kind = err.kind();
    tracing::error!(object = %object.key, plugin = %digest, retryable, kind, error = %shown(&message), "plugin failed");
    ctx.events.publish(
        &object.jz,
        EventType::Warning,
        "PluginFailed",
        &format!("plugin {digest} failed (rule limits/{kind}): {message}"),
    );
    Err(ReconcileError::Plugin {
        plugin: digest,
        message,
        retryable,
    })
}

/// Step 3: the output's counts and sizes first (before any per-create
/// work), then the whole proposal; a rejection is reported ([`reject`])
/// and nothing of it is applied.
fn check_proposal(
    ctx: &Context,
    slot: &ActivePlugin,
    object: &Object,
    digest: &str,
    raw: RawProposal,
    call: PluginCall<'_>,
) -> Result<(ProposedActions, Validated, Duration), ReconcileError> {
    let large = reclaim::is_large(&raw.output);
    let checked = validate::check_bounds(&raw.output, &object.jz, &object.pods, &ctx.limits)
        .and_then(|()| {
            let proposal = raw.into_actions();
            let policy = slot.policy_for(digest, &ctx.policy);
            let validated = validate::validate(&object.jz, &object.pods, &proposal, &policy)?;
            Ok((proposal, validated))
        });
    match checked {
        Ok((proposal, validated)) => {
            let latency = call.latency();
            call.outcome(PluginOutcome::Ok);
            Ok((proposal, validated, latency))
        }
        Err(rejection) => {
            // The output is dropped by now: give its memory back.
            if large {
                reclaim::release_free_memory();
            }
            slot.canary()
                .record(&object.uid, digest, Sample::Rejected, call.latency());
            check_with_stable(ctx, slot, object, digest, true);
            call.outcome(PluginOutcome::Rejected);
            Err(reject(ctx, &object.jz, &object.key, digest, &rejection))
        }
    }
}

/// A canary's failure (`refused`: its refused proposal) on `object` goes
/// to the stable plugin on the same input, so the rollout's judge charges
/// the canary only with failures that are its own.
fn check_with_stable(
    ctx: &Context,
    slot: &ActivePlugin,
    object: &Object,
    digest: &str,
    refused: bool,
) {
    slot.canary().check_with_stable(
        (&object.jz, &object.pods),
        (&object.key, &object.uid, digest),
        refused,
        (&ctx.limits, &ctx.policy),
    );
}

/// Whether `proposal` leaves the object converged: nothing to create or
/// delete, and as many live pods as desired (a canary criterion).
fn leaves_converged(object: &Object, proposal: &ProposedActions) -> bool {
    let live = object
        .pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count();
    proposal.create_pods.is_empty()
        && proposal.delete_pods.is_empty()
        && u32::try_from(live).is_ok_and(|live| live == object.jz.spec.desired)
}

/// Step 3, last: the object's write budget covers every write of the
/// proposal, or nothing is applied and the reconcile is requeued (with a
/// `WriteBudgetExceeded` Warning, at most once per window).
fn spend_write_budget(
    ctx: &Context,
    object: &Object,
    proposal: &ProposedActions,
    status: Option<&JinghzhuStatus>,
) -> Option<Action> {
    let cost = apply::write_cost(proposal, status);
    let wait = ctx.objects.budget.try_spend(&object.uid, cost).err()?;
    ctx.metrics.budget_exceeded.inc();
    let wait = wait.max(ctx.limits.min_requeue);
    tracing::warn!(object = %object.key, writes = cost, retry_in_ms = wait.as_millis() as u64, "write budget exceeded; nothing applied");
    if ctx.objects.budget.should_warn(&object.uid) {
        let budget = ctx.objects.budget.config();
        ctx.events.publish(
            &object.jz,
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
    Some(Action::requeue(wait))
}

/// Step 5: logs what was applied and returns when to reconcile again, or
/// the error that sends the object to backoff.
fn record(
    ctx: &Context,
    object: &Object,
    requeue_after: Option<Duration>,
    applied: Result<Applied, ApplyError>,
    started: Instant,
) -> Result<Action, ReconcileError> {
    let summary = match applied {
        Ok(summary) => summary,
        Err(ApplyError::Fenced { .. }) => {
            // Logged and counted at the fence. If the hold comes back (a
            // renewal answered late) this host goes on; otherwise it is
            // no longer the one to reconcile it and the retry waits at the
            // gate (or is skipped) until it holds the object again.
            return Ok(Action::requeue(FENCED_RETRY));
        }
        Err(err) => {
            ctx.metrics.apply_errors.inc();
            // The failure's one line is `error_policy`'s (rate-limited).
            tracing::debug!(object = %object.key, error = %shown(&err.to_string()), "applying failed part-way; will retry");
            return Err(ReconcileError::Apply {
                message: err.to_string(),
                unreachable: err.is_unreachable(),
            });
        }
    };
    ctx.objects.backoff.succeeded(&object.uid);
    log_applied(ctx, object, &summary);
    let requeue = next_requeue(requeue_after, ctx.limits.min_requeue, summary.stale);
    tracing::debug!(
        object = %object.key,
        events = summary.events,
        requeue_after = ?requeue,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "reconcile done"
    );
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// The line a person reads: pods created or deleted, by name, at info
/// (rate-limited per object: see [`crate::telemetry::log_limit`]); a
/// status-only write at debug.
fn log_applied(ctx: &Context, object: &Object, summary: &Applied) {
    if summary.created.is_empty() && summary.deleted.is_empty() {
        if summary.status_written {
            tracing::debug!(object = %object.key, "actions applied: the status only");
        }
        return;
    }
    let created = apply::name_list(&summary.created);
    let deleted = apply::name_list(&summary.deleted);
    match ctx.objects.logs.check(&object.uid) {
        Verdict::Emit { held_back } => tracing::info!(
            object = %object.key,
            %created,
            %deleted,
            status_written = summary.status_written,
            lines_held_back = held_back,
            "actions applied"
        ),
        Verdict::HoldBack => tracing::debug!(
            object = %object.key,
            %created,
            %deleted,
            status_written = summary.status_written,
            "actions applied (over this object's info lines for the minute)"
        ),
    }
}

/// When to reconcile again after a successful apply: the plugin's
/// requeue-after, never shorter than `min_requeue`; and within
/// [`STALE_STATUS_RETRY`] when the status was refused as `stale` (the newer
/// version may be our own write's echo, which queues nothing).
fn next_requeue(
    requeue_after: Option<Duration>,
    min_requeue: Duration,
    stale: bool,
) -> Option<Duration> {
    let requeue = requeue_after.map(|after| after.max(min_requeue));
    if stale {
        Some(requeue.map_or(STALE_STATUS_RETRY, |r| r.min(STALE_STATUS_RETRY)))
    } else {
        requeue
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
    let uid = jz.uid().unwrap_or(key.clone());
    let mut delay = ctx.objects.backoff.failed(&uid);
    if let ReconcileError::Apply {
        unreachable: true, ..
    } = err
    {
        delay = delay.min(ctx.recovery.strand(&uid, ObjectRef::from_obj(jz.as_ref())));
    }
    let message = err.to_string();
    let error = shown(&message);
    let retry_in_ms = delay.as_millis() as u64;
    match ctx.objects.logs.check(&uid) {
        Verdict::Emit { held_back } => {
            tracing::warn!(object = %key, %error, retry_in_ms, lines_held_back = held_back, "reconcile failed; requeued with backoff")
        }
        Verdict::HoldBack => {
            tracing::debug!(object = %key, %error, retry_in_ms, "reconcile failed; requeued with backoff (over this object's info lines for the minute)")
        }
    }
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

    fn web(uid: &str, desired: u32) -> Jinghzhu {
        wasm_operator_testkit::jinghzhu("web")
            .namespace("ns")
            .uid(uid)
            .desired(desired)
            .build()
    }

    fn pod(uid: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid.into());
        pod
    }

    fn owner_with(pods: Vec<Pod>, pod_events: u64) -> Object {
        Object {
            jz: Arc::new(web("owner", 1)),
            uid: "owner".into(),
            key: "default/web".into(),
            pods,
            pod_events,
        }
    }

    #[test]
    fn a_reconcile_waits_until_the_cache_shows_its_own_creates() {
        let expectations = Expectations::new(Duration::from_secs(300));
        assert_eq!(
            pending_own_changes(&expectations, &owner_with(vec![], 0)),
            Check::Satisfied
        );
        expectations.expect_creations("owner", 1);
        expectations.created("owner", "pod-1");
        let Check::Waiting(waiting) = pending_own_changes(&expectations, &owner_with(vec![], 0))
        else {
            panic!("the pod is not cached yet");
        };
        assert_eq!((waiting.creates, waiting.deletes), (1, 0));
        assert_eq!(
            pending_own_changes(&expectations, &owner_with(vec![pod("pod-1")], 0)),
            Check::Satisfied
        );
    }

    #[test]
    fn a_snapshot_read_before_a_pod_left_does_not_end_its_stray_hold() {
        let expectations = Expectations::new(Duration::from_secs(300));
        let read_before = expectations.pod_events_applied();
        // The pod leaves the watch's selection after the snapshot was read.
        expectations.stray("owner", "pod-1", "web-a", Duration::from_secs(30));
        expectations.pod_event_applied();
        let stale = owner_with(vec![pod("pod-1")], read_before);
        assert!(
            matches!(
                pending_own_changes(&expectations, &stale),
                Check::Waiting(_)
            ),
            "the stale snapshot still shows the pod: held"
        );
        let gone = owner_with(vec![], expectations.pod_events_applied());
        assert!(matches!(
            pending_own_changes(&expectations, &gone),
            Check::Waiting(_)
        ));
        // The pod comes back (its labels restored): a later snapshot ends it.
        expectations.pod_event_applied();
        let back = owner_with(vec![pod("pod-1")], expectations.pod_events_applied());
        assert_eq!(pending_own_changes(&expectations, &back), Check::Satisfied);
    }

    #[test]
    fn a_template_that_breaks_the_floor_is_refused_before_the_plugin_runs() {
        assert_eq!(template_allowed(&web("uid-1", 1)), Ok(()), "no template");
        let mut privileged = web("uid-1", 1);
        let mut spec = crate::crd::default_template::default_template_spec();
        spec.host_network = Some(true);
        privileged.spec.template = Some(Box::new(k8s_openapi::api::core::v1::PodTemplateSpec {
            metadata: None,
            spec: Some(spec),
        }));
        let reasons = template_allowed(&privileged).expect_err("hostNetwork breaks the floor");
        assert!(reasons.contains("host"), "{reasons}");
    }

    #[test]
    fn the_next_requeue_respects_the_minimum_and_comes_back_for_a_stale_status() {
        let min = Duration::from_secs(1);
        assert_eq!(next_requeue(None, min, false), None);
        let short = Some(Duration::from_millis(10));
        assert_eq!(next_requeue(short, min, false), Some(min));
        let long = Some(Duration::from_secs(30));
        assert_eq!(next_requeue(long, min, false), long);
        assert_eq!(next_requeue(None, min, true), Some(STALE_STATUS_RETRY));
        assert_eq!(next_requeue(long, min, true), Some(STALE_STATUS_RETRY));
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
