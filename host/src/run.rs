//! `wasm-operator run`: connect to the cluster, load and vet the plugin,
//! start the plugin sources, the swapper, leader election, the
//! metrics/status/probe endpoint and the controller, and stop cleanly on
//! Ctrl-C or SIGTERM (running reconciles finish, the Lease is released).
//!
//! Every flag can also be set from the environment as
//! `WASM_OPERATOR_<FLAG>` (upper case, `-` as `_`), as container deployments
//! expect; a flag on the command line wins.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use kube::Client;
use kube::api::{Api, ListParams};

use crate::apply::Limits;
use crate::apply::policy::PolicyArgs;
use crate::controller::budget::BudgetConfig;
use crate::controller::{self, ControllerConfig};
use crate::hotswap::router::PluginRouter;
use crate::hotswap::setup::{self, PluginOptions, PluginSource, Plugins};
use crate::hotswap::{ActivePlugin, RollbackPolicy};
use crate::leader::lease::parse_duration;
use crate::leader::{self, Elector, LeaderElectionConfig, Leadership};
use crate::plugin_resource::judge::{JudgeBy, RolloutJudge};
use crate::runtime::compiler::{DEFAULT_COMPILE_MEMORY_MIB, DEFAULT_COMPILE_TIMEOUT};
use crate::runtime::{ChildCompiler, Compiler, Runtime, RuntimeArgs, RuntimeConfig};
use crate::serve::{self, Endpoint, LeaderInfo};
use crate::tasks::AbortOnDrop;
use crate::telemetry::health::Health;
use crate::telemetry::metrics::Metrics;

/// Options of `wasm-operator run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The plugin file (.wasm component). Watched: replacing it swaps the plugin live.
    /// Or an OCI artifact, oci://REGISTRY/REPO:TAG (the tag polled, see
    /// --oci-poll-interval) or oci://REGISTRY/REPO@sha256:DIGEST.
    #[arg(
        long,
        env = "WASM_OPERATOR_PLUGIN",
        required_unless_present_any = ["plugin_configmap", "plugin_resource"],
        conflicts_with_all = ["plugin_configmap", "plugin_resource"]
    )]
    pub plugin: Option<PathBuf>,
    /// Take the plugin from a ConfigMap, `namespace/name`, and swap it when the ConfigMap changes.
    #[arg(
        long,
        env = "WASM_OPERATOR_PLUGIN_CONFIGMAP",
        value_name = "NAMESPACE/NAME"
    )]
    pub plugin_configmap: Option<String>,
    /// Serve the plugin the cluster-scoped JinghzhuPlugin NAME names (its
    /// source, pin, limits), follow its changes, and report in its status.
    #[arg(
        long,
        env = "WASM_OPERATOR_PLUGIN_RESOURCE",
        value_name = "NAME",
        conflicts_with_all = ["plugin_configmap", "shadow_plugin", "plugin_sha256"]
    )]
    pub plugin_resource: Option<String>,
    /// Run the JinghzhuPlugin NAME (spec.mode: shadow) as a shadow candidate
    /// beside the --plugin-resource one.
    #[arg(
        long,
        env = "WASM_OPERATOR_SHADOW_PLUGIN_RESOURCE",
        value_name = "NAME",
        requires = "plugin_resource"
    )]
    pub shadow_plugin_resource: Option<String>,
    /// The ConfigMap key (in binaryData) holding the plugin.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_KEY", default_value = "plugin.wasm")]
    pub plugin_key: String,
    /// Only load a plugin with this sha256 digest (hex, optionally prefixed `sha256:`).
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_SHA256", value_name = "HEX")]
    pub plugin_sha256: Option<String>,
    /// Run this candidate plugin on the same inputs, log where it differs, apply nothing of it.
    #[arg(long, env = "WASM_OPERATOR_SHADOW_PLUGIN")]
    pub shadow_plugin: Option<PathBuf>,
    /// Only run a shadow plugin with this sha256 digest (hex, optionally prefixed `sha256:`).
    #[arg(
        long,
        env = "WASM_OPERATOR_SHADOW_PLUGIN_SHA256",
        value_name = "HEX",
        requires = "shadow_plugin"
    )]
    pub shadow_plugin_sha256: Option<String>,
    /// Shadow calls that may wait for the shadow plugin, which runs one call
    /// at a time off the reconciles; more are dropped (and counted).
    #[arg(long, env = "WASM_OPERATOR_SHADOW_QUEUE", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub shadow_queue: u16,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, short = 'n', env = "WASM_OPERATOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Reconciles running at once (one per object at a time regardless).
    #[arg(long, env = "WASM_OPERATOR_WORKERS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// Gather an object's pod events for this long before reconciling it, so a burst
    /// (its pods becoming ready one by one) costs one reconcile (0: at once); one
    /// more such window per round of the workers already queued. The pod event that
    /// settles its object (every desired pod live and ready) queues it at once…
    #[arg(long, env = "WASM_OPERATOR_POD_BATCH_MS", default_value_t = 100)]
    pub pod_batch_ms: u64,
    /// …up to this long.
    #[arg(long, env = "WASM_OPERATOR_POD_BATCH_MAX_MS", default_value_t = 1000)]
    pub pod_batch_max_ms: u64,
    /// Hold a status on its way (pods not all ready yet) for up to this long, so its
    /// steps cost one write; a settled status (every desired pod live and ready) is
    /// written at once, and the last state always is (0: write every change at once).
    #[arg(long, env = "WASM_OPERATOR_STATUS_COALESCE_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub status_coalesce_ms: u64,
    /// Keep the executable's pages that only start-up used resident (by default
    /// they are given back to the kernel once the host is ready: ~15 MiB mapped
    /// at start, of which the host goes on using a fraction).
    #[arg(long, env = "WASM_OPERATOR_KEEP_START_UP_PAGES")]
    pub keep_start_up_pages: bool,
    /// Plugin sandbox limits and the precompiled cache.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Plugins from OCI registries (`--plugin oci://…`) and their signatures.
    #[command(flatten)]
    pub oci: crate::sources::OciArgs,
    /// Plugin files: the cap, where a JinghzhuPlugin's file may be.
    #[command(flatten)]
    pub files: crate::sources::FileSourceArgs,
    /// Most seconds the child process that compiles a plugin (at start and on
    /// every swap) may take; it is killed after that and the plugin refused.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_COMPILE_TIMEOUT_SECS", default_value_t = DEFAULT_COMPILE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub plugin_compile_timeout_secs: u64,
    /// Most memory, in MiB, the child process that compiles a plugin may allocate.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_COMPILE_MEMORY_MIB", default_value_t = DEFAULT_COMPILE_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(64..=65536))]
    pub plugin_compile_memory_mib: u64,
    /// Serve `/metrics` (OpenMetrics), `/status` (JSON), `/healthz` and `/readyz` here
    /// (port 0: any free port; the log and `/status` say which).
    #[arg(
        long,
        env = "WASM_OPERATOR_METRICS_ADDR",
        default_value = "127.0.0.1:9090"
    )]
    pub metrics_addr: SocketAddr,
    /// Roll back a swapped-in plugin failing on more than this share of the objects it reconciled (each object counted once; objects already failing under the previous plugin not judged)…
    #[arg(
        long,
        env = "WASM_OPERATOR_ROLLBACK_FAILURE_RATIO",
        default_value_t = 0.5
    )]
    pub rollback_failure_ratio: f64,
    /// …within this many seconds after the swap.
    #[arg(long, env = "WASM_OPERATOR_ROLLBACK_WINDOW_SECS", default_value_t = 60)]
    pub rollback_window_secs: u64,
    /// Let a source move back to an older version of the plugin that serves
    /// (same name, a lower semantic version). Off: such a candidate is
    /// refused (`plugin/downgrade`), so a tag moved back to an older signed
    /// artifact does not serve it again.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_ALLOW_DOWNGRADE")]
    pub plugin_allow_downgrade: bool,
    /// Serve every `JinghzhuPlugin` with `spec.selector` for the Jinghzhus
    /// it selects, each in a slot of its own beside the default plugin
    /// (`--plugin` or `--plugin-resource`). Needs the JinghzhuPlugin CRD and
    /// `list`/`watch` on JinghzhuPlugins.
    #[arg(long, env = "WASM_OPERATOR_TENANT_PLUGINS")]
    pub tenant_plugins: bool,
    /// With --tenant-plugins: a Secret, NAMESPACE/NAME, that a tenant
    /// JinghzhuPlugin's spec.verification.keys may name; repeat (or
    /// separate with commas) for more. Default: none (a tenant naming any
    /// other is refused, rule verification/secret-not-allowed, before the
    /// Secret is read). The --plugin-resource resource may name any.
    #[arg(
        long = "tenant-key-secret",
        env = "WASM_OPERATOR_TENANT_KEY_SECRET",
        value_name = "NAMESPACE/NAME",
        value_delimiter = ',',
        requires = "tenant_plugins"
    )]
    pub tenant_key_secrets: Vec<String>,
    /// The quiet interval of plugin sources, in seconds: a change after
    /// this long without one (or one swap back to the plugin before)
    /// swaps at once; a source that moves again sooner is flapping, held
    /// until it has been quiet long enough (this, doubled the longer it
    /// flaps, at most 8 times it), and only its newest plugin is offered;
    /// the others are coalesced, counted and reported (rule swap/flapping).
    /// 0: never held.
    #[arg(long, env = "WASM_OPERATOR_MIN_SWAP_INTERVAL_SECS", default_value_t = crate::hotswap::damper::DEFAULT_MIN_SWAP_INTERVAL.as_secs(), value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub min_swap_interval_secs: u64,
    /// Most pods one reconcile may create.
    #[arg(long, env = "WASM_OPERATOR_MAX_CREATES", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=5000))]
    pub max_creates: u64,
    /// Pods a reconcile may create beyond what spec.desired justifies.
    #[arg(long, env = "WASM_OPERATOR_MAX_SURGE", default_value_t = 0)]
    pub max_surge: u32,
    /// Shortest requeue-after a plugin may ask for, in milliseconds.
    #[arg(long, env = "WASM_OPERATOR_MIN_REQUEUE_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..))]
    pub min_requeue_ms: u64,
    /// Writes (pod creates and deletes, status patches, Events) one object's
    /// reconciles may make per minute once its burst is spent.
    #[arg(long, env = "WASM_OPERATOR_WRITES_PER_MINUTE", default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..))]
    pub writes_per_minute: u32,
    /// Writes one object's reconciles may make in a burst (at least
    /// --max-creates plus the Events and status of one reconcile).
    #[arg(long, env = "WASM_OPERATOR_WRITE_BURST", default_value_t = 1200)]
    pub write_burst: u32,
    /// Most KiB of labels and annotations (keys and values, beyond the
    /// template's own) a plugin may have written on one object's pods
    /// together; a proposal that would leave more is refused
    /// (`limits/pod-metadata-budget`).
    #[arg(long, env = "WASM_OPERATOR_POD_METADATA_BUDGET_KIB", default_value_t = (crate::apply::validate::DEFAULT_POD_METADATA_BUDGET / 1024) as u64, value_parser = clap::value_parser!(u64).range(0..=1024 * 1024))]
    pub pod_metadata_budget_kib: u64,
    /// Most seconds the host takes to stop after SIGTERM or Ctrl-C: running
    /// reconciles may finish until shortly before (then they are cancelled),
    /// the queued Events are recorded and the Leases released in the rest.
    #[arg(long, env = "WASM_OPERATOR_SHUTDOWN_TIMEOUT_SECS", default_value_t = controller::DEFAULT_SHUTDOWN_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub shutdown_timeout_secs: u64,
    /// The pod policy: which pod specs, labels and annotations a plugin may propose.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Leader election among replicas.
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
    /// Bounds on one list (pages, items, bytes).
    #[command(flatten)]
    pub lists: crate::list_bounds::ListBoundArgs,
}

/// Leader election flags (controller-runtime's names and defaults).
#[derive(Debug, Clone, clap::Args)]
pub struct LeaderElectionArgs {
    /// Compete for a Lease and reconcile only while holding it (run two or
    /// more replicas; standbys keep their caches warm and take over).
    #[arg(long, env = "WASM_OPERATOR_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Name of the Lease (coordination.k8s.io/v1).
    #[arg(
        long,
        env = "WASM_OPERATOR_LEADER_ELECT_LEASE_NAME",
        default_value = "wasm-operator"
    )]
    pub leader_elect_lease_name: String,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else "default").
    #[arg(long, env = "WASM_OPERATOR_LEADER_ELECT_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// How long a Lease stays valid after its last renewal (standbys wait this long after a crash).
    #[arg(long, env = "WASM_OPERATOR_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader tries to renew before it stops reconciling.
    #[arg(long, env = "WASM_OPERATOR_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try to acquire or renew the Lease.
    #[arg(long, env = "WASM_OPERATOR_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// This host's identity in the Lease (default: $POD_NAME, else hostname plus a random suffix).
    #[arg(long, env = "WASM_OPERATOR_LEADER_ELECT_IDENTITY")]
    pub leader_elect_identity: Option<String>,
    /// Split the Jinghzhus into this many shards, each with its own Lease
    /// (`<lease-name>-shard-07`); every replica holds a fair share and
    /// caches and reconciles only those. The same on every replica; the
    /// other `--leader-elect-*` flags set the Leases' namespace, timing and
    /// identity. 0: no sharding (with --leader-elect one replica does all).
    #[arg(long, env = "WASM_OPERATOR_SHARDS", default_value_t = 0, conflicts_with = "leader_elect", value_parser = clap::value_parser!(u32).range(0..=crate::shards::coordinator::MAX_SHARDS as i64))]
    pub shards: u32,
}

impl LeaderElectionArgs {
    /// The elector's configuration, if leader election is on.
    pub fn config(&self) -> Option<LeaderElectionConfig> {
        self.leader_elect.then(|| self.lease_config())
    }

    /// The sharding configuration, if `--shards` is above 0.
    pub fn shard_config(&self) -> Option<crate::shards::ShardConfig> {
        (self.shards > 0).then(|| crate::shards::ShardConfig {
            count: self.shards,
            lease: self.lease_config(),
        })
    }

    /// The Lease settings the flags give (election or shards).
    fn lease_config(&self) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: self.leader_elect_lease_name.clone(),
            namespace: self
                .leader_elect_namespace
                .clone()
                .or_else(|| {
                    std::env::var("POD_NAMESPACE")
                        .ok()
                        .filter(|ns| !ns.is_empty())
                })
                .unwrap_or_else(|| "default".to_string()),
            identity: self
                .leader_elect_identity
                .clone()
                .unwrap_or_else(leader::default_identity),
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }
}

/// The OCI source `--plugin oci://…` names, with the `--oci-*` and
/// `--plugin-verify-*` flags; refusals are recorded on the host's own Pod.
fn oci_source(args: &RunArgs, reference: &str) -> Result<PluginSource> {
    let reference = crate::sources::OciRef::parse(reference)?;
    let options = args.oci.options(&args.runtime.config())?;
    Ok(PluginSource::Oci(Box::new(
        crate::hotswap::sources::OciSource {
            reference,
            puller: crate::sources::OciPuller::new(options)?,
            poll_interval: args.oci.oci_poll_interval,
            events_on: crate::hotswap::sources::own_pod(),
        },
    )))
}

/// How the host follows `JinghzhuPlugin`s: the one `name`d (`""`: none)
/// and the tenants', from the flags.
fn resource_options(
    args: &RunArgs,
    name: &str,
    policy: crate::apply::policy::PodPolicy,
    (replica, late): (String, &LateBound),
) -> Result<crate::plugin_resource::ResourceOptions> {
    Ok(crate::plugin_resource::ResourceOptions {
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
            args.oci.options(&args.runtime.config())?,
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
/// [`crate::plugin_resource::tenants`]); without it, the default slot only.
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
        crate::plugin_resource::check_tenant_access(client).await?;
        crate::plugin_resource::tenants::check_access(client).await?;
        let key_secrets =
            crate::plugin_resource::keys::AllowedKeySecrets::parse(&args.tenant_key_secrets)
                .map_err(|err| anyhow!(err))?;
        crate::plugin_resource::tenants::start(
            client,
            runtime,
            resource_options(
                args,
                args.plugin_resource.as_deref().unwrap_or_default(),
                policy,
                (replica, late),
            )?,
            crate::plugin_resource::tenants::SlotSettings {
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
        let plugins = crate::plugin_resource::start(
            client,
            runtime,
            resource_options(args, name, policy, (replica, late))?,
            metrics.clone(),
        )
        .await?;
        (plugins, None)
    } else {
        let source = match (&args.plugin, &args.plugin_configmap) {
            (Some(path), _) if path.to_str().is_some_and(crate::sources::is_oci) => {
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
    list_bounds: crate::list_bounds::ListBounds,
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

/// Runs the host until Ctrl-C or SIGTERM. On a signal, reconciles that are
/// running finish, the Lease (if held) is released, and the host exits,
/// all within `--shutdown-timeout-secs` (what still runs then is cancelled).
pub async fn run(args: RunArgs) -> Result<()> {
    let policy = args.policy.config()?;
    check_write_burst(&args)?;
    check_instance_pool(&args)?;
    let election = args.leader_election.config();
    if let Some(config) = &election {
        config.validate().map_err(|err| anyhow!(err))?;
    }
    let sharding = args.leader_election.shard_config();
    if let Some(config) = &sharding {
        config.validate().map_err(|err| anyhow!(err))?;
    }
    let metrics = Arc::new(Metrics::default());
    let list_bounds = args
        .lists
        .bounds(metrics.list_refused.clone(), metrics.pods_dropped.clone());
    let client = connect_bounded(list_bounds.clone()).await?;
    check_crd_in(&client, args.namespace.as_deref()).await?;

    if crate::runtime::compiler::helper_program().is_none() {
        tracing::warn!(
            "no compile helper `{}`: plugins not already in the precompiled cache will be \
             refused; {}",
            crate::runtime::compiler::HELPER_NAME,
            crate::runtime::compiler::HOW_TO_INSTALL_THE_HELPER
        );
    }
    let runtime = Arc::new(Runtime::new(RuntimeConfig {
        // Cranelift never runs in the operator's own process: the compile
        // helper compiles (see `runtime::compiler`).
        compiler: Compiler::Child(ChildCompiler::helper(
            Duration::from_secs(args.plugin_compile_timeout_secs),
            args.plugin_compile_memory_mib * 1024 * 1024,
        )),
        ..args.runtime.config()
    })?);

    // The Lease identity when electing, so both name one replica.
    let replica = election
        .as_ref()
        .or(sharding.as_ref().map(|config| &config.lease))
        .map(|config| config.identity.clone())
        .unwrap_or_else(leader::default_identity);
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
    let release = release_all(&args, &client, &replica, coordinator, elector);
    let timeout = Duration::from_secs(args.shutdown_timeout_secs);
    release_leases_within(stopping, timeout, release).await;
    tracing::info!("stopped");
    Ok(())
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
/// entries in its `JinghzhuPlugin`s' status.
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
        crate::plugin_resource::status::StatusWriter::leave(client, name, replica).await;
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
    connect_bounded(crate::list_bounds::ListBounds::default()).await
}

/// [`connect`] with the client's lists bounded by `lists`.
pub async fn connect_bounded(lists: crate::list_bounds::ListBounds) -> Result<Client> {
    let config = kube::Config::infer().await.map_err(|err| {
        anyhow!(
            "no Kubernetes configuration found ({err}). Set KUBECONFIG or create ~/.kube/config, \
             or run in a cluster. For a local control plane: `cargo run -p local-control-plane` \
             and export the KUBECONFIG it prints"
        )
    })?;
    let server = config.cluster_url.to_string();
    let client =
        crate::api_client::build_bounded(config, crate::api_client::MAX_RETRY_WAIT, lists)?;
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
/// ([`crate::plugin_resource::prune`]); stopped when dropped.
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
    Some(AbortOnDrop::from(crate::plugin_resource::prune::start(
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
            crate::hotswap::shadow::DEFAULT_SHADOW_QUEUE
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
            crate::plugin_resource::keys::AllowedKeySecrets::parse(&args.tenant_key_secrets)
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
