//! One declared controller at work: kube's controller runtime over the
//! parent kind (watch, cache, a queue that dedups and serialises per
//! object), a cache per child kind (only this controller's labelled
//! objects, `managedFields` stripped) whose changes wake the parent, and
//! the reconcile: input from the caches, the plugin's call, the checks,
//! the apply. A new plugin swaps in between reconciles and every parent is
//! reconciled again; stopping the controller (dropping [`Running`]) stops
//! its watches.

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
use super::checks::{self, CONTROLLER_LABEL, Declared, Parent};
use super::kinds::ResolvedKind;
use super::observed::{Meta, ObservedCaches, ObservedKind};
use super::rollout::Slot;
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
}

struct Context {
    declaration: Declaration,
    field_manager: String,
    shared: Shared,
    slot: Slot,
    applied: AppliedMemory,
    children: Vec<Store<DynamicObject>>,
    child_kinds: Vec<ResolvedKind>,
    observed: Vec<Arc<ObservedCaches>>,
    failures: Mutex<HashMap<String, u32>>,
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
}

/// Starts `declaration` serving `plugin`.
pub fn start(declaration: Declaration, plugin: Arc<LoadedPlugin>, shared: Shared) -> Running {
    let client = shared.client.clone();
    let parent = declaration.parent.resource.clone();
    let writer = Writer::new(parent.clone());
    let reader = writer.as_reader();
    let parents = watcher(
        Api::<DynamicObject>::all_with(client.clone(), &parent),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|obj| obj.managed_fields_mut().clear())
    .reflect(writer)
    .applied_objects();
    let mut controller = Controller::for_stream_with(parents, reader, parent);
    let selector = format!("{CONTROLLER_LABEL}={}", declaration.name);
    let mut children = Vec::new();
    for (kind, ..) in &declaration.children {
        let writer = Writer::new(kind.resource.clone());
        children.push(writer.as_reader());
        let api = Api::<DynamicObject>::all_with(client.clone(), &kind.resource);
        let changes = watcher(api, watcher::Config::default().labels(&selector))
            .default_backoff()
            .modify(|obj| obj.managed_fields_mut().clear())
            .reflect(writer)
            .touched_objects();
        controller = controller.owns_stream_with(changes, kind.resource.clone());
    }
    let (observed, controller) = observe(&client, &declaration, &children, controller);
    let (reconcile_all, asked) = tokio::sync::watch::channel(0u64);
    let again = futures::stream::unfold(asked, |mut asked| async move {
        asked.changed().await.ok().map(|()| ((), asked))
    });
    let context = Arc::new(Context {
        field_manager: format!("wasm-operator/{}", declaration.name),
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
        observed,
        failures: Mutex::new(HashMap::new()),
    });
    let workers = context.declaration.workers;
    let run = controller
        .reconcile_all_on(again)
        .with_config(ControllerConfig::default().concurrency(workers))
        .run(reconcile, error_policy, context.clone())
        .for_each(|_| async {});
    let task = tokio::spawn(run);
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
    let started = Instant::now();
    let uid = parent.uid().unwrap_or_default();
    let plugin = ctx.slot.plugin_for(&uid);
    let result = reconcile_once(&parent, &ctx, &plugin).await;
    if let Some(sample) = sample_of(&result) {
        ctx.slot
            .record(&uid, plugin.digest(), sample, started.elapsed());
    }
    let result = result.map(|(action, _)| action);
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
        Ok((_, None)) | Err(Failure::Api(_)) => None,
        Ok((_, Some(written))) => {
            let writes = written.applied + written.deleted + u32::from(written.status);
            Some(Sample::Accepted {
                writes,
                converged: writes == 0,
            })
        }
        Err(Failure::Plugin(_)) => Some(Sample::Failed),
        Err(Failure::Refused(_)) => Some(Sample::Rejected),
    }
}

/// One reconcile of `parent` by `plugin`: the writes made, or `None` when
/// the plugin was not called.
async fn reconcile_once(
    parent: &DynamicObject,
    ctx: &Context,
    plugin: &Arc<LoadedPlugin>,
) -> Result<(Action, Option<Written>), Failure> {
    let (Some(namespace), Some(uid)) = (parent.namespace(), parent.uid()) else {
        return Ok((Action::await_change(), None));
    };
    if parent.metadata.deletion_timestamp.is_some() {
        // The garbage collector deletes the children through their owner
        // references.
        ctx.slot.forget(&uid);
        ctx.applied.forget_parent(&uid);
        return Ok((Action::await_change(), None));
    }
    let name = parent.name_any();
    let owned: Vec<Vec<Arc<DynamicObject>>> = ctx
        .children
        .iter()
        .map(|store| store.state_filter(|child| controlled_by(child, &uid, &namespace)))
        .collect();
    let input = input(ctx, parent, &owned);
    let output = plugin
        .reconcile_generic(input, object_key(parent))
        .await
        .map_err(Failure::Plugin)?;
    let owned_names: Vec<BTreeMap<String, String>> = owned
        .iter()
        .map(|kind| {
            kind.iter()
                .map(|child| (child.name_any(), child.uid().unwrap_or_default()))
                .collect()
        })
        .collect();
    let declared = Declared {
        controller: &ctx.declaration.name,
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
    if plan.status.as_ref() == parent.data.get("status") {
        // The status the plugin gives is stored already: no write.
        plan.status = None;
    }
    let target = Target {
        client: &ctx.shared.client,
        field_manager: &ctx.field_manager,
        parent: &ctx.declaration.parent,
        children: &ctx.child_kinds,
        controller: &ctx.declaration.name,
        applied: &ctx.applied,
    };
    let parent_ref = ParentRef {
        namespace: &namespace,
        name: &name,
        uid: &uid,
    };
    let cached = |kind: usize, child: &str| {
        let key =
            ObjectRef::new_with(child, ctx.child_kinds[kind].resource.clone()).within(&namespace);
        ctx.children[kind].get(&key)
    };
    let written = apply::apply(&target, &parent_ref, &plan, cached)
        .await
        .map_err(|err| match err {
            ApplyError::Refused(refusal) => Failure::Refused(refusal),
            ApplyError::Api(err) => Failure::Api(err),
        })?;
    for (warning, reason, message) in &plan.events {
        publish(ctx, parent, *warning, reason, message, "Reconcile");
    }
    let action = plan
        .requeue_after
        .map_or_else(Action::await_change, Action::requeue);
    Ok((action, Some(written)))
}

/// The 0.3 input: the parent and, per declared kind, its children.
fn input(
    ctx: &Context,
    parent: &DynamicObject,
    owned: &[Vec<Arc<DynamicObject>>],
) -> v3::ReconcileInput {
    let parent_kind = &ctx.declaration.parent.declared;
    let mut children: Vec<v3::Children> = ctx
        .child_kinds
        .iter()
        .zip(owned)
        .map(|(kind, objects)| {
            convert_v3::children(
                &kind.declared.api_version,
                &kind.declared.kind,
                objects.iter().map(AsRef::as_ref),
            )
        })
        .collect();
    let uids: std::collections::HashSet<String> = owned
        .iter()
        .flatten()
        .filter_map(|child| child.uid())
        .collect();
    for caches in &ctx.observed {
        let kind = &caches.observed.kind.declared;
        let objects = caches
            .of(&uids)
            .iter()
            .map(|obj| convert_v3::metadata_only(&obj.metadata, &kind.api_version, &kind.kind))
            .collect();
        children.push(convert_v3::sorted(&kind.api_version, &kind.kind, objects));
    }
    v3::ReconcileInput {
        parent: convert_v3::object(parent, &parent_kind.api_version, &parent_kind.kind),
        children,
        now: convert_v3::timestamp(SystemTime::now()),
    }
}

fn controlled_by(child: &DynamicObject, uid: &str, namespace: &str) -> bool {
    child.metadata.namespace.as_deref() == Some(namespace)
        && child
            .owner_references()
            .iter()
            .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

/// After a failed reconcile: a Warning naming the rule on the parent, and
/// a retry with exponential backoff (5 ms doubling, at most 5 minutes).
fn error_policy(parent: Arc<DynamicObject>, failure: &Failure, ctx: Arc<Context>) -> Action {
    let key = object_key(&parent);
    let uid = parent.uid().unwrap_or_default();
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
    };
    tracing::warn!(controller = %ctx.declaration.name, object = %key, reason, "{note}");
    if failures == 1 || failures.is_power_of_two() {
        publish(&ctx, &parent, true, reason, &note, "Reconcile");
    }
    let retryable = match failure {
        Failure::Plugin(err) => err.retryable(),
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
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}
