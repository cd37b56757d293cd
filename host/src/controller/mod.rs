//! The Kubernetes side of the host: watch Jinghzhus and the Pods they own,
//! queue the objects that need attention, reconcile each with the active
//! plugin and hand what it proposes to [`crate::apply`]. It owns watching,
//! queueing and reconciling, nothing else.
//!
//! What it may import: the rooms below it — `slot/` (the active plugin), `judging/`,
//! `apply/` (validating and applying a proposal, expectations, our own
//! status writes), `leader/`, `telemetry/` (metrics, Events, health),
//! `runtime/` and the shared types (`crd`, `cached_pod`, `ownership`,
//! `plugin_text`). Never `serve.rs`, `run.rs` or `cli.rs`, which sit above it.
//!
//! kube's runtime does the heavy lifting:
//! [`kube::runtime::watcher`](mod@kube::runtime::watcher) +
//! [`kube::runtime::reflector`](mod@kube::runtime::reflector) are the
//! informers and caches, and [`kube::runtime::Controller`] is the workqueue
//! (dedup, one reconcile at a time per object, N concurrent workers,
//! requeue-after). This module fills its gaps: per-object exponential
//! backoff ([`backoff`]), expectations so a lagging cache never causes
//! double creates ([`crate::apply::expectations`]), a per-object write
//! budget ([`budget`]), waiting for the initial pod list before the first
//! reconcile, and logs that tell the story of each change. The per-object
//! state is keyed by the Jinghzhu's UID ([`PerObject`]) and dropped when the
//! watch reports the object deleted.
//!
//! - [`watch`]: the two watch streams and their caches.
//! - [`owner_index`]: which cached pods each Jinghzhu controls.
//! - [`pod_batch`]: pod events queue their owner, gathered per short window
//!   (the one that settles its owner queues it at once).
//! - [`reconcile`]: one reconcile, in named steps: read the object and its
//!   pods → call the plugin → check → apply → record.
//! - [`readiness`]: the pod cache's initial-list gate every reconcile awaits.
//! - [`backoff`], [`budget`]: per-object retry delays and write budget.
//! - [`recovery`]: objects that failed while the API server was unavailable
//!   are queued again the moment it answers.
//! - [`fencing`]: the write fence of each reconcile (its term or shard hold).
//! - [`sharding`]: the controller's side of shards (below).
//! - [`strays`]: controlled pods that lost a label alive get it back
//!   instead of a replacement.
//!
//! With leader election every host runs all of this (standbys keep their
//! watches and caches warm), but each reconcile first passes the
//! [`LeaderGate`]: only the leader gets through, and is cancelled when its
//! term ends (see [`crate::leader`]); each of its writes is fenced on the
//! term ([`fencing`], [`crate::apply::fence`]).
//!
//! Sharded ([`ControllerConfig::shards`], see [`crate::shards`]), the
//! watches select the held shards only and restart when they change
//! ([`watch::selected`]); [`sharding::shard_sync`] turns a newly taken shard active
//! once both caches show a list taken after the take, and re-queues
//! everything then. A reconcile first checks the object's shard label (and
//! fixes a wrong one instead of reconciling), then enters its shard
//! ([`crate::shards::Shards::enter`]): an object of a shard this replica
//! does not hold, or not yet, is skipped, a running reconcile is
//! cancelled when the hold ends, and each of its writes (the label fix
//! included) is fenced on the shard's hold.

pub mod backoff;
pub mod budget;
pub mod context;
pub mod fencing;
pub mod owner_index;
pub mod pod_batch;
pub mod readiness;
pub mod reconcile;
pub mod recovery;
pub mod sharding;
pub mod status_window;
pub mod strays;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::controller::Config as RuntimeConfig;
use kube::{Api, Client};

use crate::apply::Limits;
use crate::apply::fence::WriteFence;
use crate::apply::policy::PolicyConfig;
use crate::apply::{expectations, own_writes};
use crate::crd::Jinghzhu;
use crate::leader::Leadership;
use crate::leader::catch_up::LeaderGate;
use crate::ownership::MANAGED_BY_SELECTOR;
use crate::runtime::reclaim;
use crate::shards::Shards;
use crate::slot::ActivePlugin;
use crate::slot::router::{OBJECT_COUNT_INTERVAL, PluginRouter};
use crate::tasks::AbortOnDrop;
use crate::telemetry::health::Health;
use crate::telemetry::{event_writer, events, metrics};

pub use reconcile::Context;

/// What the host remembers about each Jinghzhu between reconciles, keyed by
/// its UID: a recreated object of the same name starts clean, and
/// [`PerObject::forget`] drops it all when the object is deleted.
#[derive(Debug)]
pub struct PerObject {
    /// Pods we created or deleted and wait to see in the cache.
    pub expectations: expectations::Expectations,
    /// Consecutive failures.
    pub backoff: backoff::PerObjectBackoff,
    /// Writes left this minute.
    pub budget: budget::WriteBudget,
    /// Status writes whose watch echo is still to come.
    pub own_writes: own_writes::OwnWrites,
    /// Info lines left this minute.
    pub logs: crate::telemetry::log_limit::LogLimit,
    /// Status changes held for a window.
    pub status_window: status_window::StatusWindow,
    /// The plugin slots, whose rollback judges remember failing objects.
    plugin: Option<Arc<PluginRouter>>,
}

impl PerObject {
    /// Empty bookkeeping: expectations given up on after
    /// `expectations_timeout`, writes limited by `budget`, status changes
    /// coalesced over `status_window`.
    pub fn new(
        expectations_timeout: std::time::Duration,
        budget: budget::BudgetConfig,
        status_window: std::time::Duration,
    ) -> Self {
        Self {
            expectations: expectations::Expectations::new(expectations_timeout),
            backoff: backoff::PerObjectBackoff::default(),
            budget: budget::WriteBudget::new(budget),
            own_writes: own_writes::OwnWrites::default(),
            logs: Default::default(),
            status_window: status_window::StatusWindow::new(status_window),
            plugin: None,
        }
    }

    /// Forgets objects in the slots' rollback bookkeeping too.
    pub fn with_plugin(mut self, plugin: Arc<PluginRouter>) -> Self {
        self.plugin = Some(plugin);
        self
    }

    /// Drops everything kept for the Jinghzhu `uid`.
    pub fn forget(&self, uid: &str) {
        self.expectations.forget(uid);
        self.backoff.succeeded(uid);
        self.budget.forget(uid);
        self.own_writes.forget(uid);
        self.logs.forget(uid);
        self.status_window.forget(uid);
        if let Some(plugin) = &self.plugin {
            plugin.forget_object(uid);
        }
    }
}

/// What `wasm-operator run` configures.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Watch only this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Reconciles running at once (each object is still reconciled by one at a time).
    pub workers: u16,
    /// How pod events are gathered before they queue their owner.
    pub pod_batch: pod_batch::PodBatchConfig,
    /// How long to trust our own expectations before reconciling anyway.
    pub expectations_timeout: Duration,
    /// Limits on what a plugin may propose.
    pub limits: Limits,
    /// Which pod specs a plugin may propose.
    pub policy: PolicyConfig,
    /// Writes per object per minute.
    pub budget: budget::BudgetConfig,
    /// How long a status on its way is held before it is written (see
    /// [`status_window`]).
    pub status_window: Duration,
    /// Name reported as the source of Events.
    pub reporter: String,
    /// Whether this host may reconcile (always, without leader election).
    pub leadership: Leadership,
    /// Heartbeat and cache state for the probes.
    pub health: Arc<Health>,
    /// Sharded: the shards this replica holds (`None`: unsharded).
    pub shards: Option<Shards>,
    /// The most [`run`] takes once told to stop: running reconciles until
    /// [`EVENT_DRAIN_SHARE`] before it (those still running then are
    /// cancelled, as a crash would), then the queued Events within what is
    /// left (at most [`EVENT_DRAIN_TIMEOUT`]).
    pub shutdown_timeout: Duration,
    /// Bounds on the watches' lists (the same the client enforces pages,
    /// bytes and tokens with; see [`crate::kube_api::list_bounds`]).
    pub list_bounds: crate::kube_api::list_bounds::ListBounds,
    /// Give the executable's pages back to the kernel once ready, so only
    /// what the host runs from then on is faulted in again
    /// ([`reclaim::page_out_executable`]).
    pub page_out_start_up_code: bool,
}

/// [`ControllerConfig::shutdown_timeout`] by default: a host stops within
/// 10 s of SIGTERM with room to spare (the kubelet waits 30 s).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(8);

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            workers: 4,
            pod_batch: pod_batch::PodBatchConfig::default(),
            expectations_timeout: Duration::from_secs(300),
            limits: Limits::default(),
            policy: PolicyConfig::default(),
            budget: budget::BudgetConfig::default(),
            status_window: status_window::DEFAULT_WINDOW,
            reporter: "wasm-operator".to_string(),
            leadership: Leadership::always(),
            health: Arc::new(Health::default()),
            shards: None,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            list_bounds: crate::kube_api::list_bounds::ListBounds::default(),
            page_out_start_up_code: true,
        }
    }
}

/// What a reconcile passes first: its shard's hold when sharded, else the
/// leadership (which, on a new term, waits for the pod cache to catch up).
fn reconcile_gate(
    client: &Client,
    config: &ControllerConfig,
    watches: &watch::Watches,
) -> Arc<Gate> {
    if let Some(shards) = config.shards.clone() {
        return Arc::new(Gate::Shards(shards));
    }
    let pods_api: Api<Pod> = match config.namespace.as_deref() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    Arc::new(Gate::Leader(Arc::new(LeaderGate::new(
        config.leadership.clone(),
        pods_api,
        MANAGED_BY_SELECTOR,
        watches.pod_cache.clone(),
    ))))
}

/// Counts the objects of the cache each plugin resource selects and
/// serves, every [`OBJECT_COUNT_INTERVAL`] (their status shows it).
async fn count_objects(
    router: Arc<PluginRouter>,
    cache: kube::runtime::reflector::Store<Jinghzhu>,
    metrics: Arc<metrics::Metrics>,
) {
    let mut ticks = tokio::time::interval(OBJECT_COUNT_INTERVAL);
    let mut tenants: Vec<String> = Vec::new();
    loop {
        ticks.tick().await;
        let objects = cache.state();
        router.count(objects.iter().map(|jz| jz.as_ref()));
        let now = router.tenant_names();
        for gone in tenants.iter().filter(|name| !now.contains(name)) {
            metrics.forget_plugin_objects(gone);
        }
        let names = std::iter::once(None).chain(now.iter().map(|n| Some(n.as_str())));
        for name in names {
            if let Some(counts) = router.counts(name) {
                let resource = name.unwrap_or_default();
                metrics.set_plugin_objects(resource, counts.selected, counts.served);
            }
        }
        tenants = now;
    }
}

/// Whether a pod event just settled its owner ([`pod_batch::settles`]),
/// read from the caches the event has already updated (see [`watch`]).
fn settled_owners(
    watches: &watch::Watches,
) -> impl Fn(&kube::runtime::reflector::ObjectRef<Jinghzhu>) -> bool + Send + 'static {
    let jinghzhus = watches.jinghzhu_cache.clone();
    let pods = watches.pod_cache.clone();
    let owners = watches.pod_owners.clone();
    move |owner| {
        let Some(jz) = jinghzhus.get(owner) else {
            return false;
        };
        let owned = owner_index::controlled_by(&owners, &pods, &jz);
        pod_batch::settles(&jz, owned.iter().map(AsRef::as_ref))
    }
}

/// The owners pod events queue, counted as queued when their owner's batch
/// window closes, so the depth is the backlog of objects due, not those
/// gathering events.
fn queued_pod_triggers(
    pods: watch::ObjectStream<crate::cached_pod::CachedPod>,
    batch: pod_batch::PodBatchConfig,
    settled: impl Fn(&kube::runtime::reflector::ObjectRef<Jinghzhu>) -> bool + Send + 'static,
    queue: &Arc<metrics::QueueTracker>,
    cache: kube::runtime::reflector::Store<Jinghzhu>,
    shard_of: impl Fn(&Jinghzhu) -> Option<u32> + Send + 'static,
) -> impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<Jinghzhu>> + Send + 'static {
    let depth = {
        let queue = queue.clone();
        move || queue.depth()
    };
    let queue = queue.clone();
    pod_batch::owner_triggers(pods, batch, depth, settled).inspect(move |owner| {
        let shard = cache.get(owner).and_then(|jz| shard_of(&jz));
        queue.added_in_shard(
            format!(
                "{}/{}",
                owner.namespace.as_deref().unwrap_or_default(),
                owner.name
            ),
            shard,
        )
    })
}

/// Drives the controller's reconciles until they end or the shutdown's
/// cut-off, beating the heartbeat (from this task, so a wedged driver
/// stops it); whatever still runs then is cancelled.
async fn drive<T, E: std::error::Error + 'static>(
    results: impl futures::Stream<
        Item = Result<T, kube::runtime::controller::Error<E, kube::runtime::watcher::Error>>,
    >,
    health: &crate::telemetry::health::Health,
    stopping: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    timeout: Duration,
) {
    let mut results = Box::pin(results);
    let mut heartbeat = tokio::time::interval(Duration::from_secs(1));
    let mut cut_off = std::pin::pin!(cut_off(stopping, timeout));
    loop {
        tokio::select! {
            result = results.next() => match result {
                Some(Err(err)) => reconcile::log_controller_error(&err),
                Some(Ok(_)) => {}
                None => break,
            },
            _ = heartbeat.tick() => health.beat(),
            () = &mut cut_off => {
                tracing::warn!(timeout = ?timeout, "shutting down: reconciles still running are cancelled");
                break;
            }
        }
    }
}

/// Runs the controller until `shutdown` resolves, then lets running
/// reconciles finish and records the Events still queued, all within
/// [`ControllerConfig::shutdown_timeout`].
pub async fn run(
    client: Client,
    plugin: Arc<ActivePlugin>,
    config: ControllerConfig,
    metrics: Arc<metrics::Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let router = Arc::new(PluginRouter::new(plugin));
    run_routed(client, router, config, metrics, shutdown).await;
}

/// [`run`] with plugin slots per object: the default one and the tenants'
/// ([`crate::slot::router`]).
pub async fn run_routed(
    client: Client,
    plugin: Arc<PluginRouter>,
    config: ControllerConfig,
    metrics: Arc<metrics::Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let writer = event_writer::EventWriter::new(
        client.clone(),
        event_writer::Reporter {
            controller: config.reporter.clone(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let (events, event_worker) = events::EventSink::start(
        writer,
        events::QUEUE_CAPACITY,
        metrics.events_dropped.clone(),
    );
    // Shutting down: reconciles still waiting for leadership give up at once.
    let (stopped_at, stopping) = tokio::sync::watch::channel(None);
    let shutdown = {
        let leadership = config.leadership.clone();
        async move {
            shutdown.await;
            stopped_at.send_replace(Some(tokio::time::Instant::now()));
            leadership.stop_new_work();
        }
    };
    let objects = Arc::new(
        PerObject::new(
            config.expectations_timeout,
            config.budget,
            config.status_window,
        )
        .with_plugin(plugin.clone()),
    );
    let selection = config.shards.as_ref().map(|shards| {
        tokio::sync::watch::Sender::new(watch::ShardSelection {
            generation: 0,
            shards: Default::default(),
            count: shards.count(),
        })
    });
    let watches = watch::Watches::start(
        &client,
        config.namespace.as_deref(),
        objects.clone(),
        events.clone(),
        selection.as_ref().map(|s| s.subscribe()),
        metrics.watch_lists.clone(),
        config.list_bounds.clone(),
    );
    // Sharded: label what lacks the label, and sync taken shards (both stop with this function).
    let _shard_tasks = sharding::start_shard_tasks(&client, &config, selection, &watches, &objects);
    let gate = reconcile_gate(&client, &config, &watches);
    let recovery = Arc::new(recovery::Recovery::default());
    let ctx = Arc::new(Context {
        client,
        jinghzhus: watches.jinghzhu_cache.clone(),
        pods_ready: readiness::CacheReady::new(&watches.pod_cache),
        pods: watches.pod_cache.clone(),
        pod_owners: watches.pod_owners.clone(),
        plugin: plugin.clone(),
        objects,
        events,
        recovery: recovery.clone(),
        limits: config.limits.clone(),
        policy: config.policy.clone(),
        metrics: metrics.clone(),
    });
    spawn_readiness(&watches, &ctx, &config);
    let _counting = AbortOnDrop::from(tokio::spawn(count_objects(
        plugin.clone(),
        watches.jinghzhu_cache.clone(),
        metrics.clone(),
    )));
    metrics.init_controller(config.workers);
    let queue = metrics.queue.clone();
    track_queue_liveness(&queue, watches.jinghzhu_cache.clone());
    let shard_of = sharding::shard_of_objects(config.shards.clone(), &queue);
    let settled = settled_owners(&watches);
    let jinghzhus = track_triggers(watches.jinghzhus, queue.clone(), shard_of.clone());
    let pod_triggers = queued_pod_triggers(
        watches.pods,
        config.pod_batch,
        settled,
        &queue,
        watches.jinghzhu_cache.clone(),
        shard_of.clone(),
    );
    let requeue_all = requeue_all_triggers(
        &plugin,
        &config,
        watches.jinghzhu_cache.clone(),
        queue,
        shard_of,
    );
    let recovered = recovery.requeues(ctx.client.clone(), ctx.objects.clone());
    let results = Controller::for_stream(jinghzhus, watches.jinghzhu_cache)
        .reconcile_on(pod_triggers)
        .reconcile_on(recovered)
        .reconcile_all_on(requeue_all)
        .with_config(RuntimeConfig::default().concurrency(config.workers))
        .graceful_shutdown_on(shutdown)
        .run(
            move |jz, ctx| reconcile_when_leading(jz, ctx, gate.clone()),
            reconcile::error_policy,
            ctx,
        );
    let timeout = config.shutdown_timeout;
    drive(results, &config.health, stopping.clone(), timeout).await;
    let stopped_at = *stopping.borrow();
    let drain = stopped_at.map_or(EVENT_DRAIN_TIMEOUT, |at| {
        (at + timeout)
            .saturating_duration_since(tokio::time::Instant::now())
            .min(EVENT_DRAIN_TIMEOUT)
    });
    event_worker.drain(drain).await;
}

/// The events that re-queue every known object (in `cache`): a hot swap of
/// the plugin, this host becoming the leader, a shard turning active here.
/// Each counts the objects as queued in `queue` (by their `shard_of`).
fn requeue_all_triggers(
    plugin: &PluginRouter,
    config: &ControllerConfig,
    cache: kube::runtime::reflector::Store<Jinghzhu>,
    queue: Arc<metrics::QueueTracker>,
    shard_of: impl Fn(&Jinghzhu) -> Option<u32> + Clone + Send + Sync + 'static,
) -> futures::stream::BoxStream<'static, ()> {
    let requeue_all = move || {
        for jz in cache.state() {
            queue.added_in_shard(watch::object_key(jz.as_ref()), shard_of(&jz));
        }
    };
    let activations: futures::stream::BoxStream<'static, ()> = match &config.shards {
        Some(shards) => shards.activations().boxed(),
        None => futures::stream::pending().boxed(),
    };
    futures::stream::select_all([
        plugin.swaps().boxed(),
        config.leadership.acquisitions().boxed(),
        activations,
    ])
    .inspect(move |()| requeue_all())
    .boxed()
}

/// Resolves when a stopping controller must give up on its running
/// reconciles: [`EVENT_DRAIN_SHARE`] before `timeout` has passed since the
/// stop (never, before one).
async fn cut_off(
    mut stopping: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    timeout: Duration,
) {
    let Ok(at) = stopping.wait_for(Option::is_some).await.map(|at| *at) else {
        return std::future::pending().await;
    };
    let Some(at) = at else {
        return std::future::pending().await;
    };
    let share = EVENT_DRAIN_SHARE.min(timeout / 2);
    tokio::time::sleep_until(at + timeout.saturating_sub(share)).await;
}

/// How long a stopping host spends at most recording the Events still queued.
pub const EVENT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Of [`ControllerConfig::shutdown_timeout`], what is kept for recording
/// the queued Events after the running reconciles.
pub const EVENT_DRAIN_SHARE: Duration = Duration::from_secs(1);

/// How soon a reconcile refused for a lapse of an active shard's hold is retried.
const SHARD_LAPSE_RETRY: Duration = Duration::from_secs(1);

/// Who may reconcile: the leader (or the only host), or the holder of the
/// object's shard.
enum Gate {
    Leader(Arc<LeaderGate>),
    Shards(Shards),
}

/// Runs a reconcile once this host may: it leads, or (sharded) it holds the
/// object's shard and the object's label names it.
async fn reconcile_when_leading(
    jz: Arc<Jinghzhu>,
    ctx: Arc<Context>,
    gate: Arc<Gate>,
) -> Result<Action, reconcile::ReconcileError> {
    match gate.as_ref() {
        Gate::Leader(gate) => {
            let Some(mut term) = gate.enter().await else {
                // Shutting down before this host ever led: nothing to do.
                return Ok(Action::await_change());
            };
            let fence = fencing::for_term(&term);
            let lost = async {
                term.lost().await;
                Action::await_change()
            };
            measured(
                jz,
                ctx,
                fence,
                lost,
                "leadership lost mid-reconcile; cancelled (the next leader reconciles it)",
            )
            .await
        }
        Gate::Shards(shards) => sharding::reconcile_in_shard(jz, ctx, shards).await,
    }
}

/// Runs a reconcile measured the way controller-runtime measures it;
/// cancels it when `lost` resolves first (nothing it has not sent yet is
/// sent; see [`crate::leader`]).
async fn measured(
    jz: Arc<Jinghzhu>,
    ctx: Arc<Context>,
    fence: WriteFence,
    lost: impl std::future::Future<Output = Action>,
    why: &'static str,
) -> Result<Action, reconcile::ReconcileError> {
    let key = watch::object_key(jz.as_ref());
    let metrics = ctx.metrics.clone();
    let observation = metrics.reconcile_started(&key);
    tokio::select! {
        result = reconcile::reconcile_fenced(jz, ctx, fence) => {
            observation.finish(match &result {
                Ok(action) if *action == Action::await_change() => metrics::ReconcileResult::Success,
                Ok(_) => metrics::ReconcileResult::RequeueAfter,
                Err(reconcile::ReconcileError::Plugin { retryable: false, .. }) => {
                    metrics::ReconcileResult::TerminalError
                }
                Err(_) => metrics::ReconcileResult::Error,
            });
            result
        }
        action = lost => {
            tracing::warn!(object = %key, "{why}");
            Ok(action)
        }
    }
}

type Triggers<K> =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send>>;

/// Counts every Jinghzhu trigger for the workqueue metrics (pod triggers
/// are counted as their batch closes, see [`pod_batch`]).
fn track_triggers(
    jinghzhus: Triggers<Jinghzhu>,
    queue: Arc<metrics::QueueTracker>,
    shard_of: impl Fn(&Jinghzhu) -> Option<u32> + Send + 'static,
) -> Triggers<Jinghzhu> {
    Box::pin(
        jinghzhus.inspect_ok(move |jz| queue.added_in_shard(watch::object_key(jz), shard_of(jz))),
    )
}

/// The queue's depth counts only keys of objects the cache still holds
/// (see [`metrics::QueueTracker::track_liveness`]).
fn track_queue_liveness(
    queue: &metrics::QueueTracker,
    cache: kube::runtime::reflector::Store<Jinghzhu>,
) {
    queue.track_liveness(move |key| {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let mut object = kube::runtime::reflector::ObjectRef::<Jinghzhu>::new(name);
        if !namespace.is_empty() {
            object = object.within(namespace);
        }
        cache.get(&object).is_some()
    });
}

/// Marks the host ready once both caches have had their initial list (and,
/// unsharded, gives the start-up pages back then; a sharded replica does
/// so once its first shard turns active, see [`shard_sync`]).
fn spawn_readiness(watches: &watch::Watches, ctx: &Context, config: &ControllerConfig) {
    let health = config.health.clone();
    let page_out = config.page_out_start_up_code && config.shards.is_none();
    let jinghzhus = readiness::CacheReady::new(&watches.jinghzhu_cache);
    let pods = ctx.pods_ready.clone();
    tokio::spawn(async move {
        if jinghzhus.wait().await.is_ok() && pods.wait().await.is_ok() {
            health.set_caches_synced();
            tracing::info!("caches synced: ready");
            if page_out {
                page_out_start_up_code();
            }
        }
    });
}

/// Once per process, the first time the host is ready: the executable's
/// pages that only start-up used go back to the kernel
/// ([`reclaim::page_out_executable`]).
fn page_out_start_up_code() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tokio::task::spawn_blocking(|| match reclaim::page_out_executable() {
            Ok(bytes) => tracing::debug!(bytes, "paged out the executable's start-up pages"),
            Err(err) => {
                tracing::debug!(error = %err, "could not page out the executable's start-up pages")
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_label_is_fixed_for_the_shard_it_names_and_no_label_is_the_labellers() {
        assert_eq!(
            sharding::label_check(Some("2-of-4"), 2, 4),
            sharding::LabelCheck::Right
        );
        assert_eq!(
            sharding::label_check(Some("1-of-4"), 2, 4),
            sharding::LabelCheck::Wrong { labelled: 1 },
            "fenced on the shard whose watch shows it here"
        );
        // No label of this count: never written here (and so never unfenced).
        assert_eq!(
            sharding::label_check(None, 2, 4),
            sharding::LabelCheck::Labeller
        );
        assert_eq!(
            sharding::label_check(Some("2-of-8"), 2, 4),
            sharding::LabelCheck::Labeller
        );
        assert_eq!(
            sharding::label_check(Some("web"), 2, 4),
            sharding::LabelCheck::Labeller
        );
    }

    #[tokio::test]
    async fn running_reconciles_are_cut_off_before_the_shutdown_timeout() {
        let (stopped_at, stopping) = tokio::sync::watch::channel(None);
        let timeout = Duration::from_millis(400);
        let cut = tokio::spawn(cut_off(stopping, timeout));
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!cut.is_finished(), "cut off before any stop");
        let at = tokio::time::Instant::now();
        stopped_at.send_replace(Some(at));
        cut.await.expect("cut off");
        // Half of so short a timeout is kept for the Events.
        let took = at.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_millis(390),
            "{took:?}"
        );
    }
}
