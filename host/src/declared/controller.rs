//! One declared controller at work: kube's controller runtime over the
//! parent kind (watch, cache, a queue that dedups and serialises per
//! object), a cache per child kind (only this controller's labelled
//! objects, `managedFields` stripped, [`super::children`]) whose changes
//! wake the parent, and the reconcile: children that lost the label
//! released, a wait until the caches show the last creates and deletes,
//! input from the caches, the plugin's call, the checks, the apply. A new plugin swaps in between reconciles and every parent is
//! reconciled again; stopping the controller (dropping [`Running`]) stops
//! its watches. Sharded ([`Shared::shards`]), a reconcile runs only for a
//! parent whose shard this replica holds, and its writes are fenced on
//! that hold ([`super::sharding`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, events::Event, events::EventType, watcher};
use kube::{Client, ResourceExt};

use crate::apply::expectations::{Check, Expectations};
use crate::apply::fence::WriteFence;
use crate::apply::policy::PolicyConfig;
use crate::locks::MutexExt;
use crate::refusal::Refusal;
use crate::runtime::bindings::v3;
use crate::runtime::convert_v3;
use crate::runtime::{LoadedPlugin, PluginError};
use crate::tasks::AbortOnDrop;
use crate::telemetry::events::{EventSink, QueuedEvent};
use crate::telemetry::metrics::Metrics;

use super::applied::AppliedMemory;
use super::apply::{self, ApplyError, ParentRef, Target, Written};
use super::budget::WriteBudget;
use super::checks::{self, CONTROLLER_LABEL, Declared, Parent, Plan};
use super::children::ChildKind;
use super::gone::{self, ParentMemory};
use super::kinds::ResolvedKind;
use super::observed::{Meta, ObservedCaches, ObservedKind};
use super::rollout::Slot;
use super::shadow::{Shadow, ShadowSeat};
use super::sharding;
use super::status_fields::{self, CheckedField};
use crate::judging::tally::Sample;

/// A declaration resolved: what one controller serves and within which rules.
#[derive(Clone, Debug)]
pub struct Declaration {
    /// The `PluginController`'s name.
    pub name: String,
    /// The parent kind.
    pub parent: ResolvedKind,
    /// The child kinds with their bounds (most children, most bytes).
    pub children: Vec<(ResolvedKind, u32, u32)>,
    /// The kinds read through the children (`spec.observe`).
    pub observed: Vec<ObservedKind>,
    /// The pod policy pod templates in children are held to.
    pub policy: PolicyConfig,
    /// Reconciles at once.
    pub workers: u16,
    /// Which parents it serves, by namespace (a base and its tenants).
    pub route: super::tenants::Route,
    /// Its write budget: writes per second, burst.
    pub write_budget: (u32, u32),
    /// The status fields the host checks (`spec.checkedStatus`).
    pub checked_status: Vec<CheckedField>,
}

impl Declaration {
    /// The name its children are labelled and written under (a tenant's
    /// base's, so children carry over between them).
    pub fn family(&self) -> &str {
        self.route.family()
    }
}

/// What every controller of a host shares.
#[derive(Clone)]
pub struct Shared {
    /// The host's client.
    pub client: Client,
    /// Where Events go.
    pub events: EventSink,
    /// The host's metrics.
    pub metrics: Arc<Metrics>,
    /// Sharded (`--shards`): the shards this replica holds; it reconciles
    /// only their parents. `None`: every parent.
    pub shards: Option<crate::shards::Shards>,
}

/// A running controller; dropping it stops its watches and reconciles.
pub struct Running {
    context: Arc<Context>,
    reconcile_all: tokio::sync::watch::Sender<u64>,
    _task: AbortOnDrop,
}

impl Running {
    /// The stable plugin, serving every parent outside a canary's cohort.
    pub fn plugin(&self) -> Arc<LoadedPlugin> {
        self.context.slot.stable()
    }

    /// Which plugin serves which parent ([`Slot`]).
    pub fn slot(&self) -> &Slot {
        &self.context.slot
    }

    /// Serves `plugin` from the next reconcile on, and reconciles every
    /// parent again.
    pub fn swap(&self, plugin: Arc<LoadedPlugin>) {
        self.context.slot.swap(plugin);
        self.reconcile_all();
    }

    /// Reconciles every parent again (a rollout's cohort moved).
    pub fn reconcile_all(&self) {
        self.reconcile_all.send_modify(|n| *n += 1);
    }

    /// The declaration it serves.
    pub fn declaration(&self) -> &Declaration {
        &self.context.declaration
    }

    /// Runs `shadow` beside the serving plugin from the next reconcile on
    /// (`None`: no shadow).
    pub fn set_shadow(&self, shadow: Option<Arc<Shadow>>) {
        self.context.shadow.set(shadow);
    }

    /// The shadow running, if any.
    pub fn shadow(&self) -> Option<Arc<Shadow>> {
        self.context.shadow.get()
    }
}

struct Context {
    declaration: Declaration,
    field_manager: String,
    shared: Shared,
    slot: Slot,
    applied: AppliedMemory,
    children: Vec<Arc<ChildKind>>,
    child_kinds: Vec<ResolvedKind>,
    expectations: Arc<Expectations>,
    budget: WriteBudget,
    parents: convert_v3::Records,
    observed: Vec<Arc<ObservedCaches>>,
    failures: Mutex<HashMap<String, u32>>,
    shadow: ShadowSeat,
}

/// Why one reconcile failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Plugin(PluginError),
    #[error("{0}")]
    Refused(Refusal),
    #[error("{0}")]
    Api(kube::Error),
    #[error("{message}")]
    OverBudget { message: String, wait: Duration },
    #[error("{verb} not sent: {lapsed}")]
    Fenced {
        verb: &'static str,
        lapsed: crate::apply::fence::Lapsed,
    },
}

/// Starts `declaration` serving `plugin`.
pub fn start(declaration: Declaration, plugin: Arc<LoadedPlugin>, shared: Shared) -> Running {
    let client = shared.client.clone();
    let parent = declaration.parent.resource.clone();
    let writer = Writer::new(parent.clone());
    let reader = writer.as_reader();
    let parent_cache = writer.as_reader();
    let (gone_to, gone_seen) = tokio::sync::mpsc::unbounded_channel();
    let parents = watcher(
        Api::<DynamicObject>::all_with(client.clone(), &parent),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|obj| obj.managed_fields_mut().clear())
    .reflect(writer)
    .inspect({
        let observe = gone::on_event(gone_to);
        move |event| {
            if let Ok(event) = event {
                observe(event);
            }
        }
    })
    .applied_objects();
    let mut controller = Controller::for_stream_with(parents, reader, parent);
    let selector = format!("{CONTROLLER_LABEL}={}", declaration.family());
    let expectations = Arc::new(Expectations::new(EXPECTATIONS_TIMEOUT));
    let mut children = Vec::new();
    for (kind, ..) in &declaration.children {
        let (caches, changes) = ChildKind::watch(&client, kind, &selector, expectations.clone());
        children.push(caches);
        controller = controller.owns_stream_with(changes, kind.resource.clone());
    }
    let stores: Vec<Store<DynamicObject>> = children.iter().map(|c| c.store.clone()).collect();
    let (observed, controller) = observe(&client, &declaration, &stores, controller);
    let (reconcile_all, asked) = tokio::sync::watch::channel(0u64);
    let asked_again = futures::stream::unfold(asked, |mut asked| async move {
        asked.changed().await.ok().map(|()| ((), asked))
    });
    // Sharded: a shard turning active here re-queues every parent.
    let activated = match &shared.shards {
        Some(shards) => shards.activations().boxed(),
        None => futures::stream::pending().boxed(),
    };
    let again = futures::stream::select(asked_again, activated);
    // A namespace handed between a base and its tenant: every parent again.
    let again = futures::stream::select(again, declaration.route.changes());
    let parents = convert_v3::Records::new(
        &declaration.parent.declared.api_version,
        &declaration.parent.declared.kind,
        PARENT_RECORDS_KEPT,
    );
    let (per_second, burst) = declaration.write_budget;
    let budget = WriteBudget::new(per_second, burst);
    let context = Arc::new(Context {
        field_manager: format!("wasm-operator/{}", declaration.family()),
        child_kinds: declaration
            .children
            .iter()
            .map(|(k, ..)| k.clone())
            .collect(),
        declaration,
        shared,
        slot: Slot::new(plugin),
        applied: AppliedMemory::default(),
        children,
        expectations,
        budget,
        parents,
        observed,
        failures: Mutex::new(HashMap::new()),
        shadow: ShadowSeat::default(),
    });
    let workers = context.declaration.workers;
    let run = controller
        .reconcile_all_on(again)
        .with_config(ControllerConfig::default().concurrency(workers))
        .run(reconcile, error_policy, context.clone())
        .for_each(|_| async {});
    let forgetting = forget_gone(gone_seen, parent_cache, context.clone());
    let task = tokio::spawn(async move {
        futures::join!(run, forgetting);
    });
    Running {
        context,
        reconcile_all,
        _task: AbortOnDrop::new(task.abort_handle()),
    }
}

/// Starts the caches of the observed kinds; their changes wake the parent
/// they descend from.
fn observe(
    client: &Client,
    declaration: &Declaration,
    children: &[Store<DynamicObject>],
    mut controller: Controller<DynamicObject>,
) -> (Vec<Arc<ObservedCaches>>, Controller<DynamicObject>) {
    let mut all = Vec::new();
    for observed in &declaration.observed {
        let (caches, streams) = ObservedCaches::start(client, observed);
        let caches = Arc::new(caches);
        for (changes, kind) in streams {
            let walk = ParentWalk {
                caches: caches.clone(),
                level: caches.level_of(&kind),
                children: children.to_vec(),
                child_kinds: declaration
                    .children
                    .iter()
                    .map(|(k, ..)| k.clone())
                    .collect(),
                parent: declaration.parent.clone(),
            };
            controller = controller.watches_stream_with(
                changes,
                move |meta: Meta| walk.parent_of(&meta),
                kind.resource.clone(),
            );
        }
        all.push(caches);
    }
    (all, controller)
}

/// From an observed object up to the parent it descends from.
struct ParentWalk {
    caches: Arc<ObservedCaches>,
    level: usize,
    children: Vec<Store<DynamicObject>>,
    child_kinds: Vec<ResolvedKind>,
    parent: ResolvedKind,
}

impl ParentWalk {
    fn parent_of(&self, meta: &Meta) -> Option<ObjectRef<DynamicObject>> {
        let (namespace, name, uid) = self.caches.child_above(&meta.metadata, self.level)?;
        let child = self
            .children
            .iter()
            .zip(&self.child_kinds)
            .find_map(|(store, kind)| {
                store
                    .get(&ObjectRef::new_with(&name, kind.resource.clone()).within(&namespace))
                    .filter(|child| child.metadata.uid.as_deref() == Some(uid.as_str()))
            })?;
        let owner = child
            .owner_references()
            .iter()
            .find(|owner| {
                owner.controller == Some(true) && owner.kind == self.parent.resource.kind
            })?
            .clone();
        Some(ObjectRef::new_with(&owner.name, self.parent.resource.clone()).within(&namespace))
    }
}

async fn reconcile(parent: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Failure> {
    let Some(shards) = ctx.shared.shards.clone() else {
        return reconcile_fenced(parent, ctx, &WriteFence::open())
            .await
            .map(|(action, _)| action);
    };
    let uid = parent.uid().unwrap_or_default();
    let guard = match sharding::enter(&shards, &uid) {
        Ok(guard) => guard,
        Err(instead) => return Ok(instead),
    };
    let fence = sharding::fence(&guard);
    tokio::select! {
        result = reconcile_fenced(parent.clone(), ctx.clone(), &fence) => {
            let result = result?;
            if let (_, Some(written)) = &result {
                let writes = written.applied + written.deleted + u32::from(written.status);
                shards.metrics().declared_wrote(&ctx.declaration.name, guard.shard(), writes);
            }
            Ok(result.0)
        }
        () = guard.lost() => {
            // What was awaited of the writes cut short is not waited for
            // when the shard comes back.
            ctx.expectations.forget(&uid);
            tracing::info!(controller = %ctx.declaration.name, parent = %object_key(&parent),
                shard = guard.shard(), "shard lost mid-reconcile; cancelled (its holder reconciles it)");
            Ok(sharding::after_lapse(&shards, guard.shard()))
        }
    }
}

/// One reconcile, its writes checked by `fence`; the writes made.
async fn reconcile_fenced(
    parent: Arc<DynamicObject>,
    ctx: Arc<Context>,
    fence: &WriteFence,
) -> Result<(Action, Option<Written>), Failure> {
    let started = Instant::now();
    let uid = parent.uid().unwrap_or_default();
    let plugin = ctx.slot.plugin_for(&uid);
    let result = reconcile_once(&parent, &ctx, &plugin, fence).await;
    if let Some(sample) = sample_of(&result) {
        ctx.slot
            .record(&uid, plugin.digest(), sample, started.elapsed());
    }
    let key = object_key(&parent);
    ctx.shared.metrics.declared_reconcile(
        &ctx.declaration.name,
        match &result {
            Ok(_) => "success",
            Err(_) => "error",
        },
        started.elapsed(),
    );
    if result.is_ok() {
        ctx.failures.lock_unpoisoned().remove(&key);
    }
    result
}

/// How a reconcile ended, for a rollout's judge (`None`: not the plugin's
/// doing, an API error or no call).
fn sample_of(result: &Result<(Action, Option<Written>), Failure>) -> Option<Sample> {
    match result {
        Ok((_, None)) | Err(Failure::Api(_) | Failure::Fenced { .. }) => None,
        Ok((_, Some(written))) => {
            let writes = written.applied + written.deleted + u32::from(written.status);
            Some(Sample::Accepted {
                writes,
                converged: writes == 0,
            })
        }
        Err(Failure::Plugin(_)) => Some(Sample::Failed),
        Err(Failure::Refused(_)) => Some(Sample::Rejected),
        // Over the budget: the writes are held back, not refused.
        Err(Failure::OverBudget { .. }) => None,
    }
}

/// Most parent input records kept (a parent's is dropped when it goes,
/// [`gone`]).
const PARENT_RECORDS_KEPT: usize = 4096;

/// How long a parent's reconciles wait for the caches to show the host's
/// own creates and deletes before they act on the caches as they are.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(60);
/// How soon a reconcile held back by its expectations looks again (the
/// watch event that satisfies them wakes it sooner).
const EXPECTATIONS_RECHECK: Duration = Duration::from_secs(2);

/// One reconcile of `parent` by `plugin`: the writes made, or `None` when
/// the plugin was not called.
async fn reconcile_once(
    parent: &DynamicObject,
    ctx: &Context,
    plugin: &Arc<LoadedPlugin>,
    fence: &WriteFence,
) -> Result<(Action, Option<Written>), Failure> {
    let (Some(namespace), Some(uid)) = (parent.namespace(), parent.uid()) else {
        return Ok((Action::await_change(), None));
    };
    let routed_away = !ctx.declaration.route.serves(&namespace);
    if routed_away || parent.metadata.deletion_timestamp.is_some() {
        // The garbage collector deletes the children through their owner
        // references; a parent routed to a tenant (or back) is another
        // controller's, which writes what it applied afresh.
        ParentMemory::forget(ctx, &uid, &object_key(parent));
        return Ok((Action::await_change(), None));
    }
    let name = parent.name_any();
    let deleting = |kind: usize, child: &str| ctx.children[kind].deleting(child);
    let target = Target {
        client: &ctx.shared.client,
        field_manager: &ctx.field_manager,
        parent: &ctx.declaration.parent,
        children: &ctx.child_kinds,
        controller: ctx.declaration.family(),
        expectations: &ctx.expectations,
        deleting: &deleting,
        budget: &ctx.budget,
        applied: &ctx.applied,
        fence,
    };
    let parent_ref = ParentRef {
        namespace: &namespace,
        name: &name,
        uid: &uid,
    };
    release_departed(ctx, parent, &target, &parent_ref).await?;
    let owned: Vec<Vec<Arc<DynamicObject>>> = ctx
        .children
        .iter()
        .map(|kind| kind.children_of(&uid, &namespace))
        .collect();
    if let Some(again) = awaiting(ctx, &parent_ref, &owned) {
        return Ok((Action::requeue(again), None));
    }
    let input = input(ctx, parent, &owned);
    let shown = status_fields::Snapshot::of(&ctx.declaration.checked_status, &input);
    let (output, lent) = plugin
        .reconcile_generic_lent(input, object_key(parent))
        .await;
    // `spec.shadow`, and the stable plugin beside a canary (`shadowStable`).
    let shadows: Vec<_> = if output.is_ok() {
        [
            ctx.shadow.get(),
            ctx.slot.stable_shadow_for(plugin.digest()),
        ]
        .into_iter()
        .flatten()
        .filter_map(|shadow| shadow.reserve(lent.as_ref()))
        .collect()
    } else {
        Vec::new()
    };
    put_back(ctx, lent);
    let output = output.map_err(Failure::Plugin)?;
    let owned_names: Vec<BTreeMap<String, String>> = owned
        .iter()
        .map(|kind| {
            kind.iter()
                .map(|child| (child.name_any(), child.uid().unwrap_or_default()))
                .collect()
        })
        .collect();
    let declared = Declared {
        controller: ctx.declaration.family(),
        parent: &ctx.declaration.parent,
        children: &ctx.declaration.children,
        policy: &ctx.declaration.policy,
    };
    let about = Parent {
        name: &name,
        namespace: &namespace,
        uid: &uid,
    };
    let mut plan =
        checks::check(&declared, &about, &owned_names, output).map_err(Failure::Refused)?;
    for shadow in shadows {
        // Off the write path: the shadow's worker calls it and compares.
        shadow.send(&about, &owned_names, &plan);
    }
    if plan.status.as_ref() == parent.data.get("status") {
        // The status the plugin gives is stored already: no write.
        plan.status = None;
    }
    if let Some(status) = &plan.status {
        status_fields::check(&ctx.declaration.checked_status, &shown, status)
            .map_err(Failure::Refused)?;
    }
    let written = apply_plan(ctx, &target, &parent_ref, &plan).await?;
    for (warning, reason, message) in &plan.events {
        publish(ctx, parent, *warning, reason, message, "Reconcile");
    }
    let action = plan
        .requeue_after
        .map_or_else(Action::await_change, Action::requeue);
    Ok((action, Some(written)))
}

/// Keeps the parent's and the children's records of a call's input for
/// the next call.
fn put_back(ctx: &Context, lent: Option<v3::ReconcileInput>) {
    let Some(input) = lent else {
        return;
    };
    ctx.parents.put_back(v3::Children {
        api_version: input.parent.api_version.clone(),
        kind: input.parent.kind.clone(),
        objects: vec![input.parent],
    });
    for (kind, records) in ctx.children.iter().zip(input.children) {
        kind.records.put_back(records);
    }
}

/// Applies `plan`, children read from the caches.
async fn apply_plan(
    ctx: &Context,
    target: &Target<'_>,
    parent: &ParentRef<'_>,
    plan: &Plan,
) -> Result<Written, Failure> {
    let cached = |kind: usize, child: &str| {
        let key = ObjectRef::new_with(child, ctx.child_kinds[kind].resource.clone())
            .within(parent.namespace);
        ctx.children[kind].store.get(&key)
    };
    apply::apply(target, parent, plan, cached)
        .await
        .map_err(failure)
}

fn failure(err: ApplyError) -> Failure {
    match err {
        ApplyError::Refused(refusal) => Failure::Refused(refusal),
        ApplyError::Api(err) => Failure::Api(err),
        ApplyError::OverBudget { wait, .. } | ApplyError::OverNamespaceShare { wait, .. } => {
            Failure::OverBudget {
                message: err.to_string(),
                wait,
            }
        }
        ApplyError::Fenced { verb, lapsed } => Failure::Fenced { verb, lapsed },
    }
}

/// Releases the children of `parent` that left the caches alive and are
/// still controlled by it without the controller's label. Those not
/// looked at for a failure are kept for the retry.
async fn release_departed(
    ctx: &Context,
    parent: &DynamicObject,
    target: &Target<'_>,
    parent_ref: &ParentRef<'_>,
) -> Result<(), Failure> {
    for (kind, caches) in ctx.children.iter().enumerate() {
        let departed = caches.take_departed(parent_ref.uid);
        for (at, child) in departed.iter().enumerate() {
            match apply::release(target, parent_ref, kind, child).await {
                Ok(true) => {
                    let note = format!(
                        "{} {} lost the {CONTROLLER_LABEL}={} label: released (its owner \
                         reference to this {} removed), left in place",
                        caches.kind.declared.kind,
                        child.name,
                        ctx.declaration.family(),
                        ctx.declaration.parent.declared.kind
                    );
                    publish(ctx, parent, false, "ReleasedChild", &note, "Release");
                }
                Ok(false) => {}
                Err(err) => {
                    caches.departed_again(parent_ref.uid, &departed[at..]);
                    return Err(failure(err));
                }
            }
        }
    }
    Ok(())
}

/// When the caches do not show yet every create and delete the host made
/// for `parent` (by the snapshot `owned`), how soon to look again.
fn awaiting(
    ctx: &Context,
    parent: &ParentRef<'_>,
    owned: &[Vec<Arc<DynamicObject>>],
) -> Option<Duration> {
    let seen: HashMap<&str, bool> = owned
        .iter()
        .flatten()
        .filter_map(|child| {
            let uid = child.metadata.uid.as_deref()?;
            Some((uid, child.metadata.deletion_timestamp.is_some()))
        })
        .collect();
    let name = ctx.declaration.name.as_str();
    match ctx
        .expectations
        .check(parent.uid, |uid| seen.get(uid).copied())
    {
        Check::Satisfied => None,
        Check::TimedOut(wait) => {
            tracing::warn!(controller = name, object = %format!("{}/{}", parent.namespace, parent.name),
                creates = wait.creates, deletes = wait.deletes,
                "the cache never showed these writes; reconciling with the cache as it is");
            None
        }
        Check::Waiting(wait) => {
            if wait.log {
                tracing::info!(controller = name, object = %format!("{}/{}", parent.namespace, parent.name),
                    creates = wait.creates, deletes = wait.deletes, waited = ?wait.waited,
                    "waiting for the cache to show the host's own writes");
            }
            Some(EXPECTATIONS_RECHECK)
        }
    }
}

/// The 0.3 input: the parent and, per declared kind, its children (their
/// kept records lent, to be put back after the call), then the observed
/// kinds.
fn input(
    ctx: &Context,
    parent: &DynamicObject,
    owned: &[Vec<Arc<DynamicObject>>],
) -> v3::ReconcileInput {
    let parent_kind = &ctx.declaration.parent.declared;
    let mut children: Vec<v3::Children> = ctx
        .children
        .iter()
        .zip(owned)
        .map(|(kind, objects)| {
            kind.records
                .take_children(objects.iter().map(AsRef::as_ref))
        })
        .collect();
    let uids: std::collections::HashSet<String> = owned
        .iter()
        .flatten()
        .filter_map(|child| child.uid())
        .collect();
    let namespace = parent.metadata.namespace.as_deref().unwrap_or_default();
    for caches in &ctx.observed {
        let kind = &caches.observed.kind.declared;
        let objects = caches
            .of(&uids, namespace)
            .iter()
            .map(|obj| convert_v3::metadata_only(&obj.metadata, &kind.api_version, &kind.kind))
            .collect();
        children.push(convert_v3::sorted(&kind.api_version, &kind.kind, objects));
    }
    v3::ReconcileInput {
        parent: ctx
            .parents
            .take_children([parent])
            .objects
            .pop()
            .unwrap_or_else(|| {
                convert_v3::object(parent, &parent_kind.api_version, &parent_kind.kind)
            }),
        children,
        now: convert_v3::timestamp(SystemTime::now()),
    }
}

/// After a failed reconcile: a Warning naming the rule on the parent, and
/// a retry with exponential backoff (5 ms doubling, at most 5 minutes).
fn error_policy(parent: Arc<DynamicObject>, failure: &Failure, ctx: Arc<Context>) -> Action {
    let key = object_key(&parent);
    let uid = parent.uid().unwrap_or_default();
    if let (Failure::Fenced { verb, lapsed }, Some(shards)) = (failure, &ctx.shared.shards) {
        ctx.shared.metrics.write_fenced(verb, lapsed.kind);
        tracing::info!(controller = %ctx.declaration.name, object = %key, error = %lapsed,
            "write fenced: the shard's hold lapsed on this host's clock; not sent, reconcile ended");
        return sharding::after_lapse(shards, shards.shard_of(&uid));
    }
    let failures = {
        let mut all = ctx.failures.lock_unpoisoned();
        let count = all.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    let (reason, note) = match failure {
        Failure::Plugin(err) => (
            "PluginFailed",
            format!("plugin {}: {err}", ctx.slot.plugin_for(&uid).describe()),
        ),
        Failure::Refused(refusal) => (
            "RejectedOutput",
            format!("plugin {}: {refusal}", ctx.slot.plugin_for(&uid).describe()),
        ),
        Failure::Api(err) => ("FailedApply", format!("applying the plan: {err}")),
        Failure::OverBudget { message, .. } => ("WriteBudgetExceeded", message.clone()),
        Failure::Fenced { .. } => ("WriteFenced", failure.to_string()),
    };
    tracing::warn!(controller = %ctx.declaration.name, object = %key, reason, "{note}");
    if failures == 1 || failures.is_power_of_two() {
        publish(&ctx, &parent, true, reason, &note, "Reconcile");
    }
    let retryable = match failure {
        Failure::Plugin(err) => err.retryable(),
        Failure::OverBudget { wait, .. } => return Action::requeue(*wait),
        _ => true,
    };
    if !retryable {
        return Action::await_change();
    }
    let exponent = failures.saturating_sub(1).min(16);
    Action::requeue(Duration::from_millis(5u64 << exponent).min(Duration::from_secs(300)))
}

fn publish(
    ctx: &Context,
    parent: &DynamicObject,
    warning: bool,
    reason: &str,
    note: &str,
    action: &str,
) {
    let regarding = ObjectReference {
        api_version: Some(ctx.declaration.parent.declared.api_version.clone()),
        kind: Some(ctx.declaration.parent.declared.kind.clone()),
        name: parent.metadata.name.clone(),
        namespace: parent.metadata.namespace.clone(),
        uid: parent.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    ctx.shared.events.send(QueuedEvent {
        event: Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(note.to_string()),
            action: action.to_string(),
            secondary: None,
        },
        regarding,
        object: object_key(parent),
    });
}

fn object_key(obj: &DynamicObject) -> String {
    gone::key_of(obj)
}

/// Forgets the parents that go ([`gone`]), the entries kept counted in
/// `wasm_operator_declared_parent_entries`.
async fn forget_gone(
    seen: tokio::sync::mpsc::UnboundedReceiver<gone::Seen>,
    cache: Store<DynamicObject>,
    ctx: Arc<Context>,
) {
    let counted = |entries: usize| {
        ctx.shared
            .metrics
            .declared_parent_entries(&ctx.declaration.name, entries);
    };
    gone::forget_gone(seen, cache, ctx.as_ref(), gone::SWEEP_EVERY, counted).await;
}

impl ParentMemory for Context {
    fn forget(&self, uid: &str, key: &str) {
        self.slot.forget(uid);
        self.applied.forget_parent(uid);
        self.expectations.forget(uid);
        self.parents.forget(uid);
        self.failures.lock_unpoisoned().remove(key);
    }

    fn keep_only(&self, present: &gone::Present) {
        let kept = |uid: &str| present.uids.contains(uid);
        self.applied.retain(kept);
        self.expectations.retain(kept);
        self.parents.retain(kept);
        self.failures
            .lock_unpoisoned()
            .retain(|key, _| present.keys.contains(key));
    }

    fn entries(&self) -> usize {
        self.applied.len()
            + self.expectations.len()
            + self.parents.len()
            + self.failures.lock_unpoisoned().len()
    }
}
