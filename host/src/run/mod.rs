//! `wasm-operator run`: connect to the cluster, load and vet the plugin,
//! start the plugin sources, the swapper, leader election, the
//! metrics/status/probe endpoint and the controller, and stop cleanly on
//! Ctrl-C or SIGTERM (running reconciles finish, the Lease is released).
//!
//! Every flag can also be set from the environment as
//! `WASM_OPERATOR_<FLAG>` (upper case, `-` as `_`), as container deployments
//! expect; a flag on the command line wins.

mod args;
pub use args::{LeaderElectionArgs, RunArgs};

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use kube::Client;
use kube::api::{Api, ListParams};

use crate::apply::Limits;
use crate::controller::budget::BudgetConfig;
use crate::controller::{self, ControllerConfig};
use crate::delivery::resource::fleet::{JudgeBy, RolloutJudge};
use crate::delivery::setup::{self, PluginOptions, PluginSource, Plugins};
use crate::leader::{self, Elector, LeaderElectionConfig, Leadership};
use crate::runtime::{ChildCompiler, Compiler, Runtime, RuntimeConfig};
use crate::serve::{self, Endpoint, LeaderInfo};
use crate::slot::router::PluginRouter;
use crate::slot::{ActivePlugin, RollbackPolicy};
use crate::tasks::AbortOnDrop;
use crate::telemetry::health::Health;
use crate::telemetry::metrics::Metrics;

/// The OCI source `--plugin oci://…` names, with the `--oci-*` and
/// `--plugin-verify-*` flags; refusals are recorded on the host's own Pod.
fn oci_source(args: &RunArgs, reference: &str) -> Result<PluginSource> {
    let reference = crate::registry::OciRef::parse(reference)?;
    let options = args.oci.options(&precompiled_cache(args))?;
    Ok(PluginSource::Oci(Box::new(
        crate::delivery::sources::OciSource {
            reference,
            puller: crate::registry::OciPuller::new(options)?,
            poll_interval: args.oci.oci_poll_interval,
            events_on: crate::delivery::sources::own_pod(),
        },
    )))
}

/// The precompiled cache the flags name (its directory, `None` when off,
/// and its key file): the OCI store is kept beside it and signed with its key.
fn precompiled_cache(args: &RunArgs) -> crate::registry::store::StoreKey {
    let config = args.runtime.config();
    crate::registry::store::StoreKey {
        file: config.cache_key_file,
        dir: config.cache_dir,
    }
}

/// How the host follows `JinghzhuPlugin`s: the one `name`d (`""`: none)
/// and the tenants', from the flags.
fn resource_options(
    args: &RunArgs,
    name: &str,
    policy: crate::apply::policy::PodPolicy,
    (replica, late): (String, &LateBound),
) -> Result<crate::delivery::resource::ResourceOptions> {
    Ok(crate::delivery::resource::ResourceOptions {
        name: name.to_string(),
        shadow: args.shadow_plugin_resource.clone(),
        // The Lease identity when electing, so both name one replica.
        replica,
        shadow_queue: usize::from(args.shadow_queue),
        rollback: RollbackPolicy {
            window: Duration::from_secs(args.rollback_window_secs),
            max_failure_ratio: args.rollback_failure_ratio,
            ..RollbackPolicy::default()
        },
        pod_policy: policy,
        oci: Some((
            args.oci.options(&precompiled_cache(args))?,
            args.oci.oci_poll_interval,
        )),
        files: args.files.rules(),
        allow_unsigned: args.oci.plugin_resource_allow_unsigned,
        judge: late.judge.clone(),
        router: late.router.clone(),
    })
}

/// What the resources' drivers learn only once the rest of the host
/// started: who judges rollouts, and the router of `--tenant-plugins`.
struct LateBound {
    judge: RolloutJudge,
    router: Arc<std::sync::OnceLock<Arc<PluginRouter>>>,
}

impl LateBound {
    /// The judge of rollouts: shard 0's holder, else the leader, else this
    /// only replica.
    fn decide_judge(&self, shards: Option<&crate::shards::Shards>, leadership: &Leadership) {
        self.judge.decide(match (shards, leadership.is_elected()) {
            (Some(shards), _) => JudgeBy::Shard(shards.clone()),
            (None, true) => JudgeBy::Leader(leadership.clone()),
            (None, false) => JudgeBy::Alone,
        });
    }
}

/// `--tenant-plugins`: the router handing each object its slot, with the
/// tenants followed in a task of their own (see
/// [`crate::delivery::resource::tenants`]); without it, the default slot only.
async fn plugin_router(
    args: &RunArgs,
    client: &Client,
    runtime: Arc<Runtime>,
    metrics: &Arc<Metrics>,
    (active, policy, replica): (Arc<ActivePlugin>, crate::apply::policy::PodPolicy, String),
    late: &LateBound,
) -> Result<Arc<PluginRouter>> {
    let router = Arc::new(PluginRouter::new(active));
    if args.tenant_plugins {
        crate::delivery::resource::check_tenant_access(client).await?;
        crate::delivery::resource::tenants::check_access(client).await?;
        let key_secrets =
            crate::delivery::resource::keys::AllowedKeySecrets::parse(&args.tenant_key_secrets)
                .map_err(|err| anyhow!(err))?;
        crate::delivery::resource::tenants::start(
            client,
            runtime,
            resource_options(
                args,
                args.plugin_resource.as_deref().unwrap_or_default(),
                policy,
                (replica, late),
            )?,
            crate::delivery::resource::tenants::SlotSettings {
                allow_downgrade: args.plugin_allow_downgrade,
                min_swap_interval: Duration::from_secs(args.min_swap_interval_secs),
                key_secrets,
            },
            metrics.clone(),
            router.clone(),
        );
    }
    Ok(router)
}

/// The plugin side `run` asks for: a `JinghzhuPlugin`'s drivers (started:
/// they pull and compile in tasks of their own), or the empty slot of a
/// `--plugin` / `--plugin-configmap` source and what [`setup::deliver`]
/// needs once the probes are bound. Only operator mistakes end the start
/// here: nothing is pulled or compiled yet.
async fn plugin_side(
    args: &RunArgs,
    client: &Client,
    runtime: Arc<Runtime>,
    metrics: &Arc<Metrics>,
    (policy, replica, late): (crate::apply::policy::PodPolicy, String, &LateBound),
) -> Result<(Plugins, Option<(PluginOptions, Arc<Runtime>)>)> {
    Ok(if let Some(name) = &args.plugin_resource {
        // The JinghzhuPlugin names the plugin (see `plugin_resource`); its
        // drivers pull and compile in their own tasks.
        let plugins = crate::delivery::resource::start(
            client,
            runtime,
            resource_options(args, name, policy, (replica, late))?,
            metrics.clone(),
        )
        .await?;
        (plugins, None)
    } else {
        let source = match (&args.plugin, &args.plugin_configmap) {
            (Some(path), _) if path.to_str().is_some_and(crate::registry::is_oci) => {
                oci_source(args, path.to_str().unwrap_or_default())?
            }
            (Some(path), _) => PluginSource::File(path.clone()),
            (None, Some(spec)) => PluginSource::configmap(spec, &args.plugin_key)?,
            (None, None) => bail!("give --plugin PATH or --plugin-configmap NAMESPACE/NAME"),
        };
        let options = PluginOptions {
            source,
            pinned_sha256: args.plugin_sha256.clone(),
            shadow: args.shadow_plugin.clone(),
            shadow_pinned_sha256: args.shadow_plugin_sha256.clone(),
            shadow_queue: usize::from(args.shadow_queue),
            rollback: RollbackPolicy {
                window: Duration::from_secs(args.rollback_window_secs),
                max_failure_ratio: args.rollback_failure_ratio,
                ..RollbackPolicy::default()
            },
            max_file_bytes: args.files.plugin_file_max_mib << 20,
        };
        // Only operator mistakes end the start here (nothing is pulled or
        // compiled yet); the plugin is delivered once the probes are bound.
        setup::check(client, &options).await?;
        let plugins = setup::empty(&options, metrics);
        (plugins, Some((options, runtime)))
    })
}

/// Reads, pulls and compiles the plugin behind the probes (see
/// [`setup::deliver`]); a failure leaves the host unready, saying why.
fn deliver_in_background(
    client: &Client,
    metrics: &Arc<Metrics>,
    plugins: &Plugins,
    (options, runtime): (PluginOptions, Arc<Runtime>),
) {
    // Every replica, leader or standby, vets and loads the plugin itself
    // and watches its source, so a swap reaches standbys too. A refused
    // plugin does not stop the host: it runs unready until a good one
    // arrives (see `hotswap::setup`). Behind the probes: a slow registry
    // or compile never delays liveness.
    let (client, metrics, plugins) = (client.clone(), metrics.clone(), plugins.clone());
    tokio::spawn(async move {
        if let Err(err) = setup::deliver(&client, runtime, options, metrics, &plugins).await {
            tracing::error!(error = %format!("{err:#}"), "delivering the plugin failed; the host stays unready");
            setup::not_serving(&plugins, format!("delivering the plugin failed: {err:#}"));
        }
    });
}

/// Plugin instances the host may need at once beyond its workers: loading
/// or vetting a new plugin while they all run.
const SPARE_INSTANCES: u32 = 4;

/// Refuses a pool that cannot hold an instance per worker (plus one for a
/// shadow plugin, whose queue runs one call at a time) plus
/// [`SPARE_INSTANCES`]: calls beyond it would fail.
fn check_instance_pool(args: &RunArgs) -> Result<()> {
    let Some(pool) = args.runtime.config().allocator.pool_size() else {
        return Ok(());
    };
    let shadow = u32::from(args.shadow_plugin.is_some() || args.shadow_plugin_resource.is_some());
    let needed = u32::from(args.workers) + shadow + SPARE_INSTANCES;
    if pool < needed {
        bail!(
            "--plugin-instance-pool {pool} is smaller than the {needed} instances {} workers{} may need at once; \
             raise it, lower --workers, or set it to 0 to allocate instances on demand",
            args.workers,
            if shadow == 1 {
                " with a shadow plugin"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// One reconcile's writes (its creates, a delete Event, its Events and
/// status) must fit in `--write-burst`.
fn check_write_burst(args: &RunArgs) -> Result<()> {
    let one_reconcile = args.max_creates + Limits::default().max_events as u64 + 3;
    if u64::from(args.write_burst) < one_reconcile {
        bail!(
            "--write-burst {} is smaller than one reconcile may need ({one_reconcile} = --max-creates {} \
             + Events + status); raise it or lower --max-creates",
            args.write_burst,
            args.max_creates
        );
    }
    Ok(())
}

/// The controller's settings from the flags; `holds_leases` when electing
/// or sharded (the shutdown leaves time to release them).
fn controller_config(
    args: &RunArgs,
    policy: crate::apply::policy::PolicyConfig,
    (leadership, health, shards): (Leadership, Arc<Health>, Option<crate::shards::Shards>),
    holds_leases: bool,
    list_bounds: crate::kube_api::list_bounds::ListBounds,
) -> ControllerConfig {
    ControllerConfig {
        namespace: args.namespace.clone(),
        workers: args.workers,
        pod_batch: crate::controller::pod_batch::PodBatchConfig {
            window: Duration::from_millis(args.pod_batch_ms),
            max_window: Duration::from_millis(args.pod_batch_max_ms),
            workers: args.workers,
        },
        status_window: Duration::from_millis(args.status_coalesce_ms),
        limits: Limits {
            max_creates: usize::try_from(args.max_creates).unwrap_or(usize::MAX),
            max_surge: usize::try_from(args.max_surge).unwrap_or(usize::MAX),
            min_requeue: Duration::from_millis(args.min_requeue_ms),
            pod_metadata_budget: usize::try_from(args.pod_metadata_budget_kib * 1024)
                .unwrap_or(usize::MAX),
            plugin_key_prefixes: policy.allowed_label_prefixes.clone(),
            ..Limits::default()
        },
        policy,
        budget: BudgetConfig {
            burst: args.write_burst,
            per_minute: args.writes_per_minute,
        },
        leadership,
        health,
        shards,
        shutdown_timeout: controller_share(
            Duration::from_secs(args.shutdown_timeout_secs),
            holds_leases,
        ),
        list_bounds,
        page_out_start_up_code: !args.keep_start_up_pages,
        ..ControllerConfig::default()
    }
}

/// Warns at start when the compile helper cannot be found: plugins not in
/// the precompiled cache will then be refused.
fn warn_without_compile_helper() {
    if crate::runtime::compiler::helper_program().is_none() {
        tracing::warn!(
            "no compile helper `{}`: plugins not already in the precompiled cache will be \
             refused; {}",
            crate::runtime::compiler::HELPER_NAME,
            crate::runtime::compiler::HOW_TO_INSTALL_THE_HELPER
        );
    }
}

/// Runs the host until Ctrl-C or SIGTERM. On a signal, reconciles that are
/// running finish, the Lease (if held) is released, and the host exits,
/// all within `--shutdown-timeout-secs` (what still runs then is cancelled).
pub async fn run(args: RunArgs) -> Result<()> {
    if args.plugin.is_none() && args.plugin_configmap.is_none() && args.plugin_resource.is_none() {
        return run_declared_only(args).await;
    }
    let policy = args.policy.config()?;
    check_write_burst(&args)?;
    check_instance_pool(&args)?;
    let (election, sharding) = replica_config(&args)?;
    let metrics = Arc::new(Metrics::default());
    let list_bounds = args
        .lists
        .bounds(metrics.list_refused.clone(), metrics.pods_dropped.clone());
    let client = connect_bounded(list_bounds.clone()).await?;
    check_crd_in(&client, args.namespace.as_deref()).await?;

    let runtime = serving_runtime(&args)?;

    let replica = replica_name(election.as_ref(), sharding.as_ref());
    // Who judges canary rollouts is known once the election or shards
    // start, the router once the tenants are followed.
    let late = LateBound {
        judge: RolloutJudge::later(),
        router: Arc::default(),
    };
    let (plugins, delivery) = plugin_side(
        &args,
        &client,
        runtime.clone(),
        &metrics,
        (policy.policy, replica.clone(), &late),
    )
    .await?;
    let active = plugins.active.clone();
    active.allow_downgrades(args.plugin_allow_downgrade);
    active.set_min_swap_interval(Duration::from_secs(args.min_swap_interval_secs));

    let runtime_for_declared = runtime.clone();
    let router = plugin_router(
        &args,
        &client,
        runtime,
        &metrics,
        (active.clone(), policy.policy, replica.clone()),
        &late,
    )
    .await?;
    if args.tenant_plugins {
        let _ = late.router.set(router.clone());
    }

    let (leadership, elector, leader_info) = start_election(&client, &metrics, election)?;
    let (shards, coordinator) = start_shards(&client, sharding)?;
    late.decide_judge(shards.as_ref(), &leadership);
    let _pruner = start_pruner(&args, &client, shards.as_ref());
    let health = Arc::new(Health::default());
    serve::spawn(
        args.metrics_addr,
        Endpoint {
            metrics: metrics.clone(),
            active: active.clone(),
            history: plugins.history.clone(),
            health: health.clone(),
            leadership: leadership.clone(),
            leader: leader_info,
            shards: shards.clone(),
        },
    )
    .await?;
    if let Some(delivery) = delivery {
        deliver_in_background(&client, &metrics, &plugins, delivery);
    }

    // Sharded, the Jinghzhu controller's shard sync turns taken shards
    // active for both (the declared watches already show every shard).
    let declared = start_declared(
        &args,
        &metrics,
        (&runtime_for_declared, &policy, leadership.clone()),
        (None, shards.clone()),
    )
    .await?;
    let config = controller_config(
        &args,
        policy,
        (leadership, health, shards),
        elector.is_some() || coordinator.is_some(),
        list_bounds,
    );
    tracing::info!(
        namespace = args.namespace.as_deref().unwrap_or("<all>"),
        workers = args.workers,
        pod_policy = %config.policy.policy,
        leader_election = elector.is_some(),
        shards = args.leader_election.shards,
        "controller starting"
    );
    let (stopped_at, stopping) = tokio::sync::oneshot::channel();
    let signal = async move {
        shutdown_signal().await;
        let _ = stopped_at.send(tokio::time::Instant::now());
    };
    controller::run_routed(client.clone(), router, config, metrics, signal).await;
    // The shadow's queue is work nobody waits for: drop it with the controller.
    active.set_shadow(None, 0);
    // The declared controllers stop first, so none writes its entry again.
    drop(declared);
    let release = release_all(&args, &client, &replica, coordinator, elector);
    let timeout = Duration::from_secs(args.shutdown_timeout_secs);
    release_leases_within(stopping, timeout, release).await;
    tracing::info!("stopped");
    Ok(())
}

/// `--plugin-controllers`: follows every `PluginController` in a task of
/// its own (stopped when the returned guard drops), while this replica
/// leads (always, without `--leader-elect`). Its client bounds lists as
/// the host's does, but reads pods as they come: the host's own client
/// leaves out every pod no Jinghzhu controls. `synced`, when given, is
/// marked once the `PluginController` watch has had its first list.
/// Sharded (`shards`), every replica runs every declared controller and
/// reconciles the parents of the shards it holds (`declared::sharding`).
async fn start_declared(
    args: &RunArgs,
    metrics: &Arc<Metrics>,
    (runtime, policy, leadership): (
        &Arc<Runtime>,
        &crate::apply::policy::PolicyConfig,
        Leadership,
    ),
    (synced, shards): (Option<Arc<Health>>, Option<crate::shards::Shards>),
) -> Result<Option<AbortOnDrop>> {
    if !args.plugin_controllers {
        return Ok(None);
    }
    let bounds = crate::kube_api::list_bounds::ListBounds::new(
        args.lists.limits(),
        metrics.list_refused.clone(),
    );
    let client = &connect_bounded(bounds).await?;
    let writer = crate::telemetry::event_writer::EventWriter::new(
        client.clone(),
        crate::telemetry::event_writer::Reporter {
            controller: "wasm-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let (events, worker) = crate::telemetry::events::EventSink::start(
        writer,
        crate::telemetry::events::QUEUE_CAPACITY,
        metrics.events_dropped.clone(),
    );
    let opener = crate::delivery::resource::opener::SourceOpener::new(
        client,
        Some((
            args.oci.options(&precompiled_cache(args))?,
            args.oci.oci_poll_interval,
        )),
        args.files.rules(),
    )
    .allowing_unsigned(args.oci.plugin_resource_allow_unsigned);
    let settings = crate::declared::Settings {
        shared: crate::declared::Shared {
            client: client.clone(),
            events,
            metrics: metrics.clone(),
            shards,
        },
        runtime: runtime.clone(),
        opener,
        policy: policy.clone(),
        allowed_child_kinds: args.allow_child_kinds.clone(),
        workers: args.workers,
        write_budget: crate::declared::WriteRate {
            per_second: args.controller_writes_per_second,
            burst: args.controller_write_burst,
        },
    };
    let synced = synced.unwrap_or_default();
    let task = tokio::spawn(async move {
        let _worker = worker;
        while let Some(mut term) = leadership.wait_leading().await {
            tokio::select! {
                () = crate::declared::run_reporting(settings.clone(), &synced) => break,
                () = term.lost() => {
                    tracing::info!("leadership lost: the declared controllers stop until it returns");
                }
            }
        }
    });
    Ok(Some(AbortOnDrop::new(task.abort_handle())))
}

/// This replica's name in status entries: its Lease identity when electing
/// or sharded, so both name one replica.
fn replica_name(
    election: Option<&LeaderElectionConfig>,
    sharding: Option<&crate::shards::ShardConfig>,
) -> String {
    election
        .or(sharding.map(|config| &config.lease))
        .map(|config| config.identity.clone())
        .unwrap_or_else(leader::default_identity)
}

/// Leader election's and sharding's settings from the flags, checked.
fn replica_config(
    args: &RunArgs,
) -> Result<(
    Option<LeaderElectionConfig>,
    Option<crate::shards::ShardConfig>,
)> {
    let election = args.leader_election.config();
    if let Some(config) = &election {
        config.validate().map_err(|err| anyhow!(err))?;
    }
    let sharding = args.leader_election.shard_config();
    if let Some(config) = &sharding {
        config.validate().map_err(|err| anyhow!(err))?;
    }
    Ok((election, sharding))
}

/// The plugin runtime of a serving host: Cranelift never runs in the
/// operator's own process, the compile helper compiles (see
/// `runtime::compiler`).
fn serving_runtime(args: &RunArgs) -> Result<Arc<Runtime>> {
    warn_without_compile_helper();
    Ok(Arc::new(Runtime::new(RuntimeConfig {
        compiler: Compiler::Child(ChildCompiler::helper(
            Duration::from_secs(args.plugin_compile_timeout_secs),
            args.plugin_compile_memory_mib * 1024 * 1024,
        )),
        ..args.runtime.config()
    })?))
}

/// `--plugin-controllers` without a Jinghzhu plugin: only the declared
/// controllers run (no Jinghzhu CRD needed), with the metrics and probe
/// endpoint and, with `--leader-elect`, on the leader only, or with
/// `--shards`, on every replica for the parents of its shards, until
/// Ctrl-C or SIGTERM (the Leases are then released: the shards after their
/// running reconciles finish).
async fn run_declared_only(args: RunArgs) -> Result<()> {
    let policy = args.policy.config()?;
    let (election, sharding) = replica_config(&args)?;
    let replica = replica_name(election.as_ref(), sharding.as_ref());
    let metrics = Arc::new(Metrics::default());
    let client = connect().await?;
    let runtime = serving_runtime(&args)?;
    let (leadership, elector, leader) = start_election(&client, &metrics, election)?;
    let (shards, coordinator) = start_shards(&client, sharding)?;
    let _activating = shards.clone().map(|shards| {
        AbortOnDrop::from(tokio::spawn(crate::declared::sharding::activate_taken(
            shards,
        )))
    });
    let health = Arc::new(Health::default());
    serve::spawn_declared(
        args.metrics_addr,
        serve::DeclaredEndpoint {
            metrics: metrics.clone(),
            health: health.clone(),
            leadership: leadership.clone(),
            leader,
            shards: shards.clone(),
        },
    )
    .await?;
    let _heartbeat = heartbeat(health.clone());
    let declared = start_declared(
        &args,
        &metrics,
        (&runtime, &policy, leadership),
        (Some(health), shards),
    )
    .await?;
    tracing::info!(
        workers = args.workers,
        leader_election = elector.is_some(),
        shards = args.leader_election.shards,
        "declared controllers starting (no Jinghzhu plugin)"
    );
    shutdown_signal().await;
    let coordinator_held = coordinator.is_some();
    if let Some(coordinator) = coordinator {
        // Draining: no reconcile starts, the running ones finish, then
        // each shard's Lease is released for its next holder.
        let timeout = Duration::from_secs(args.shutdown_timeout_secs);
        if tokio::time::timeout(timeout, coordinator.release())
            .await
            .is_err()
        {
            tracing::warn!(
                "shutting down: releasing the shards took too long; their Leases expire on their own"
            );
        }
    }
    drop(declared);
    if coordinator_held {
        let timeout = Duration::from_secs(args.shutdown_timeout_secs);
        let leave = crate::declared::leave_fleets(&client, &replica);
        if tokio::time::timeout(timeout, leave).await.is_err() {
            tracing::warn!(
                "shutting down: removing this replica's status.replicas entries took too long"
            );
        }
    }
    if let Some(elector) = elector {
        let timeout = Duration::from_secs(args.shutdown_timeout_secs);
        if tokio::time::timeout(timeout, elector.release())
            .await
            .is_err()
        {
            tracing::warn!(
                "shutting down: releasing the Lease took too long; it expires on its own"
            );
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Beats `health` every second from a task of its own (stopped when
/// dropped): `/healthz` of a host of declared controllers only fails when
/// its runtime stops running tasks.
fn heartbeat(health: Arc<Health>) -> AbortOnDrop {
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            health.beat();
        }
    });
    AbortOnDrop::new(task.abort_handle())
}

/// Sharded: joins the shard Leases (shards are synced once the controller runs).
fn start_shards(
    client: &Client,
    sharding: Option<crate::shards::ShardConfig>,
) -> Result<(
    Option<crate::shards::Shards>,
    Option<crate::shards::Coordinator>,
)> {
    let Some(config) = sharding else {
        return Ok((None, None));
    };
    let (shards, coordinator) =
        crate::shards::Coordinator::start(client.clone(), config).map_err(|err| anyhow!(err))?;
    Ok((Some(shards), Some(coordinator)))
}

/// With `--leader-elect`: the elector on its Lease, the leadership it
/// grants and what `/status` says of it; without, leadership always.
fn start_election(
    client: &Client,
    metrics: &Metrics,
    election: Option<LeaderElectionConfig>,
) -> Result<(Leadership, Option<Elector>, Option<LeaderInfo>)> {
    let Some(config) = election else {
        return Ok((Leadership::always(), None, None));
    };
    let info = LeaderInfo {
        identity: config.identity.clone(),
        lease: format!("{}/{}", config.namespace, config.lease_name),
    };
    let status = metrics.leader_status_of(&config.lease_name);
    let (leadership, elector) =
        Elector::start(client.clone(), config, status).map_err(|err| anyhow!(err))?;
    Ok((leadership, Some(elector), Some(info)))
}

/// What a stopping replica gives back: its shard and leader Leases, and its
/// entries in its `JinghzhuPlugin`s' status (and, sharded with declared
/// controllers, in their `PluginController`s').
async fn release_all(
    args: &RunArgs,
    client: &kube::Client,
    replica: &str,
    coordinator: Option<crate::shards::Coordinator>,
    elector: Option<Elector>,
) {
    if let Some(coordinator) = coordinator {
        coordinator.release().await;
    }
    if let Some(elector) = elector {
        elector.release().await;
    }
    let resources = args
        .plugin_resource
        .iter()
        .chain(&args.shadow_plugin_resource);
    for name in resources {
        crate::delivery::resource::status::StatusWriter::leave(client, name, replica).await;
    }
    if args.plugin_controllers && args.leader_election.shards > 0 {
        crate::declared::leave_fleets(client, replica).await;
    }
}

/// Runs `release` (the Leases' release) until `timeout` has passed since
/// the stop signal (`stopped_at`), or for [`LEASE_RELEASE_SHARE`] when the
/// controller ended without one; a Lease not released by then expires on
/// its own.
async fn release_leases_within(
    stopped_at: tokio::sync::oneshot::Receiver<tokio::time::Instant>,
    timeout: Duration,
    release: impl std::future::Future<Output = ()>,
) {
    let deadline = stopped_at
        .await
        .map(|at| at + timeout)
        .unwrap_or_else(|_| tokio::time::Instant::now() + LEASE_RELEASE_SHARE);
    if tokio::time::timeout_at(deadline, release).await.is_err() {
        tracing::warn!(
            "shutting down: releasing the Leases took too long; they expire on their own"
        );
    }
}

/// Of `--shutdown-timeout-secs`, what is kept for releasing the Leases.
const LEASE_RELEASE_SHARE: Duration = Duration::from_secs(2);

/// The controller's part of the shutdown `timeout`: all of it, or (holding
/// Leases) all but [`LEASE_RELEASE_SHARE`].
fn controller_share(timeout: Duration, leases: bool) -> Duration {
    if leases {
        timeout
            .saturating_sub(LEASE_RELEASE_SHARE)
            .max(Duration::from_secs(1))
    } else {
        timeout
    }
}

/// A client for the cluster the kubeconfig names (`KUBECONFIG`,
/// `~/.kube/config`, in-cluster), checked to reach the API server; the
/// errors say what to do.
pub async fn connect() -> Result<Client> {
    connect_bounded(crate::kube_api::list_bounds::ListBounds::default()).await
}

/// [`connect`] with the client's lists bounded by `lists`.
pub async fn connect_bounded(lists: crate::kube_api::list_bounds::ListBounds) -> Result<Client> {
    let config = kube::Config::infer().await.map_err(|err| {
        anyhow!(
            "no Kubernetes configuration found ({err}). Set KUBECONFIG or create ~/.kube/config, \
             or run in a cluster. For a local control plane: `cargo run -p local-control-plane` \
             and export the KUBECONFIG it prints"
        )
    })?;
    let server = config.cluster_url.to_string();
    let client = crate::kube_api::client::build_bounded(
        config,
        crate::kube_api::client::MAX_RETRY_WAIT,
        lists,
    )?;
    client
        .apiserver_version()
        .await
        .map_err(|err| anyhow!("cannot reach the API server at {server}: {err}"))?;
    Ok(client)
}

/// Checks that the Jinghzhu CRD is served; when it is not, the error says
/// how to install it.
pub async fn check_crd(client: &Client) -> Result<()> {
    check_crd_in(client, None).await
}

/// [`check_crd`] with a list in `namespace` only (what a host restricted to
/// one namespace, with RBAC only there, is allowed to do). Read per object
/// ([`crate::crd::incoming::Incoming`]): one Jinghzhu the host cannot read,
/// however deep, must not stop it starting (the watch reports and skips it).
pub async fn check_crd_in(client: &Client, namespace: Option<&str>) -> Result<()> {
    let api: Api<crate::crd::incoming::Incoming> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => bail!(
            "the Jinghzhu CRD is not installed: run `wasm-operator crd | kubectl apply -f -` \
             (or `kubectl apply -f examples/crd.yaml`)"
        ),
        Err(kube::Error::Api(status)) if status.code == 403 => bail!(
            "this host's account may not list Jinghzhus ({}): bind it to the ClusterRole in \
             examples/deploy/rbac.yaml (or pass --namespace for a namespace where it is bound)",
            status.message
        ),
        Err(err) => Err(anyhow!("listing Jinghzhus failed: {err}")),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down: letting running reconciles finish");
}

/// Sharded: the holder of shard 0 prunes the resources' `status.replicas`
/// entries of replicas without a live membership Lease
/// ([`crate::delivery::resource::prune`]); stopped when dropped.
fn start_pruner(
    args: &RunArgs,
    client: &Client,
    shards: Option<&crate::shards::Shards>,
) -> Option<AbortOnDrop> {
    let resources: Vec<String> = args
        .plugin_resource
        .iter()
        .chain(&args.shadow_plugin_resource)
        .cloned()
        .collect();
    if resources.is_empty() {
        return None;
    }
    Some(AbortOnDrop::from(crate::delivery::resource::prune::start(
        client.clone(),
        resources,
        shards?.clone(),
        args.leader_election.leader_elect_lease_duration,
    )))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use std::time::Duration;

    #[test]
    fn leases_keep_a_share_of_the_shutdown_timeout() {
        let eight = Duration::from_secs(8);
        assert_eq!(super::controller_share(eight, false), eight);
        assert_eq!(super::controller_share(eight, true), Duration::from_secs(6));
        assert_eq!(
            super::controller_share(Duration::from_secs(2), true),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn every_run_flag_can_come_from_the_environment() {
        let cli = crate::cli::Cli::command();
        let run = cli.find_subcommand("run").expect("the run subcommand");
        let globals = cli.get_arguments().filter(|a| a.is_global_set());
        let mut checked = Vec::new();
        for arg in run.get_arguments().chain(globals) {
            let Some(long) = arg.get_long() else { continue };
            if long == "help" || long == "version" {
                continue;
            }
            // `--cache-dir` is shared with `reconcile` and `record`, whose
            // users know it by what it caches.
            let expected = match long {
                "cache-dir" => "WASM_OPERATOR_PRECOMPILED_DIR".to_string(),
                _ => format!("WASM_OPERATOR_{}", long.to_uppercase().replace('-', "_")),
            };
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(expected.as_str()),
                "--{long} must also be settable as {expected}"
            );
            checked.push(long.to_string());
        }
        for flag in [
            "plugin",
            "leader-elect",
            "leader-elect-namespace",
            "plugin-timeout-ms",
            "log-format",
        ] {
            assert!(
                checked.iter().any(|c| c == flag),
                "--{flag} was not checked: {checked:?}"
            );
        }
    }

    #[test]
    fn run_takes_the_oci_and_file_flags_beside_the_precompiled_cache() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "wasm-operator",
            "run",
            "--plugin",
            "oci://127.0.0.1:5000/p:live",
            "--oci-poll-interval",
            "1s",
            "--plugin-file-max-mib",
            "3",
            "--cache-dir",
            "/cache",
            "--precompiled-cache-key-file",
            "/keys/cache.key",
        ])
        .expect("parses");
        let crate::cli::Command::Run(run) = cli.command else {
            panic!("not run");
        };
        assert_eq!(run.oci.oci_poll_interval, Duration::from_secs(1));
        assert_eq!(run.files.plugin_file_max_mib, 3);
        assert_eq!(
            run.runtime.precompiled_cache_max_mib,
            crate::runtime::cache::DEFAULT_MAX_BYTES >> 20
        );
        // The OCI store lives in the precompiled cache and takes its key.
        let options = run
            .oci
            .options(&super::precompiled_cache(&run))
            .expect("options");
        let cache = std::path::Path::new("/cache");
        assert_eq!(
            options.store_dir.as_deref(),
            Some(cache.join("oci").as_path())
        );
        assert_eq!(options.store_key.dir.as_deref(), Some(cache));
        assert_eq!(
            options.store_key.file.as_deref(),
            Some(std::path::Path::new("/keys/cache.key"))
        );
        assert!(
            crate::cli::Cli::try_parse_from([
                "wasm-operator",
                "run",
                "--plugin",
                "p.wasm",
                "--plugin-verify-policy",
                "most"
            ])
            .is_err()
        );
    }

    #[test]
    fn shards_take_the_lease_flags_and_exclude_leader_election() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["wasm-operator", "run", "--plugin", "p.wasm"];
            argv.extend_from_slice(extra);
            crate::cli::Cli::try_parse_from(argv)
        };
        let crate::cli::Command::Run(args) =
            parse(&["--shards", "32", "--leader-elect-identity", "me"])
                .expect("parse")
                .command
        else {
            panic!("not run")
        };
        let config = args.leader_election.shard_config().expect("sharded");
        assert_eq!(config.count, 32);
        assert_eq!(config.lease.identity, "me");
        assert_eq!(config.lease.lease_name, "wasm-operator");
        assert!(args.leader_election.config().is_none());
        assert!(config.validate().is_ok());
        assert!(parse(&["--shards", "4", "--leader-elect"]).is_err());
        assert!(parse(&["--shards", "5000"]).is_err());
        let crate::cli::Command::Run(args) = parse(&[]).expect("parse").command else {
            panic!("not run")
        };
        assert!(
            args.leader_election.shard_config().is_none(),
            "unsharded by default"
        );
    }

    #[test]
    fn leader_election_defaults_are_controller_runtimes() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "wasm-operator",
            "run",
            "--plugin",
            "p.wasm",
            "--leader-elect",
            "--leader-elect-namespace",
            "ops",
            "--leader-elect-identity",
            "me",
        ])
        .expect("parse");
        let crate::cli::Command::Run(args) = cli.command else {
            panic!("not run")
        };
        let config = args.leader_election.config().expect("leader election on");
        assert_eq!(config.lease_duration, std::time::Duration::from_secs(15));
        assert_eq!(config.renew_deadline, std::time::Duration::from_secs(10));
        assert_eq!(config.retry_period, std::time::Duration::from_secs(2));
        assert_eq!(config.namespace, "ops");
        assert_eq!(config.lease_name, "wasm-operator");
        assert_eq!(config.identity, "me");
    }

    #[test]
    fn the_shadow_queue_default_is_documented_and_its_pin_needs_a_shadow() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["wasm-operator", "run", "--plugin", "p.wasm"];
            argv.extend_from_slice(extra);
            crate::cli::Cli::try_parse_from(argv)
        };
        let crate::cli::Command::Run(args) = parse(&[]).expect("parse").command else {
            panic!("not run")
        };
        assert_eq!(
            usize::from(args.shadow_queue),
            crate::slot::shadow::DEFAULT_SHADOW_QUEUE
        );
        assert!(parse(&["--shadow-plugin-sha256", "ab"]).is_err());
        assert!(parse(&["--shadow-plugin", "s.wasm", "--shadow-queue", "0"]).is_err());
        assert!(parse(&["--shadow-plugin", "s.wasm", "--shadow-plugin-sha256", "ab"]).is_ok());
    }

    #[test]
    fn tenant_key_secrets_repeat_or_split_on_commas_and_need_tenant_plugins() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["wasm-operator", "run", "--plugin", "p.wasm"];
            argv.extend_from_slice(extra);
            crate::cli::Cli::try_parse_from(argv)
        };
        let crate::cli::Command::Run(args) = parse(&[
            "--tenant-plugins",
            "--tenant-key-secret",
            "ops/a,ops/b",
            "--tenant-key-secret",
            "keys/c",
        ])
        .expect("parse")
        .command
        else {
            panic!("not run")
        };
        assert_eq!(args.tenant_key_secrets, ["ops/a", "ops/b", "keys/c"]);
        assert!(
            crate::delivery::resource::keys::AllowedKeySecrets::parse(&args.tenant_key_secrets)
                .is_ok()
        );
        assert!(parse(&["--tenant-key-secret", "ops/a"]).is_err());
        let crate::cli::Command::Run(args) = parse(&[]).expect("parse").command else {
            panic!("not run")
        };
        assert!(
            args.tenant_key_secrets.is_empty(),
            "none allowed by default"
        );
    }
}
