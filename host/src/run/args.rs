//! The flags of `wasm-operator run` (each also `WASM_OPERATOR_<FLAG>` from
//! the environment), as clap reads them; `docs/flags.md` is generated from
//! them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::apply::policy::PolicyArgs;
use crate::controller;
use crate::leader::lease::parse_duration;
use crate::leader::{self, LeaderElectionConfig};
use crate::runtime::RuntimeArgs;
use crate::runtime::compiler::{DEFAULT_COMPILE_MEMORY_MIB, DEFAULT_COMPILE_TIMEOUT};

/// Options of `wasm-operator run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The plugin file (.wasm component). Watched: replacing it swaps the plugin live.
    /// Or an OCI artifact, oci://REGISTRY/REPO:TAG (the tag polled, see
    /// --oci-poll-interval) or oci://REGISTRY/REPO@sha256:DIGEST.
    #[arg(
        long,
        env = "WASM_OPERATOR_PLUGIN",
        required_unless_present_any = ["plugin_configmap", "plugin_resource", "plugin_controllers"],
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
    pub oci: crate::registry::OciArgs,
    /// Plugin files: the cap, where a JinghzhuPlugin's file may be.
    #[command(flatten)]
    pub files: crate::registry::FileSourceArgs,
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
    /// Run a controller for every `PluginController` resource (any parent
    /// kind, contract 0.3 plugins), started and stopped as the resources
    /// come and go, beside the Jinghzhu controller; without --plugin,
    /// --plugin-configmap or --plugin-resource, only these run (no Jinghzhu
    /// CRD needed; /readyz then waits for the PluginController watch). With
    /// --leader-elect only the leader runs them; not with --shards. Needs the
    /// PluginController CRD and access to the declared kinds
    /// (`wasm-operator rbac` prints the roles, or the Helm chart's values).
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_CONTROLLERS")]
    pub plugin_controllers: bool,
    /// With --plugin-controllers: a child kind that carries authority
    /// (`Secret`, `ServiceAccount`, `Role.rbac.authorization.k8s.io`, a
    /// webhook, a CRD, the host's own kinds) that a PluginController may
    /// own; repeat (or separate with commas) for more. Default: none
    /// (rule controller/sensitive-kind). Cluster-scoped kinds never.
    #[arg(
        long = "allow-child-kind",
        env = "WASM_OPERATOR_ALLOW_CHILD_KIND",
        value_name = "KIND[.GROUP]",
        value_delimiter = ',',
        requires = "plugin_controllers"
    )]
    pub allow_child_kinds: Vec<String>,
    /// With --plugin-controllers: writes (child applies that change
    /// something, deletes, status writes) all reconciles of one
    /// PluginController together may make per second once its burst is
    /// spent; a plan over it waits, with a Warning WriteBudgetExceeded
    /// (rule writes/budget).
    #[arg(long, env = "WASM_OPERATOR_CONTROLLER_WRITES_PER_SECOND", default_value_t = crate::declared::budget::DEFAULT_PER_SECOND, value_parser = clap::value_parser!(u32).range(1..), requires = "plugin_controllers")]
    pub controller_writes_per_second: u32,
    /// With --plugin-controllers: writes one PluginController's reconciles
    /// may make at once (its bucket's size).
    #[arg(long, env = "WASM_OPERATOR_CONTROLLER_WRITE_BURST", default_value_t = crate::declared::budget::DEFAULT_BURST, value_parser = clap::value_parser!(u32).range(1..), requires = "plugin_controllers")]
    pub controller_write_burst: u32,
    /// The quiet interval of plugin sources, in seconds: a change after
    /// this long without one (or one swap back to the plugin before)
    /// swaps at once; a source that moves again sooner is flapping, held
    /// until it has been quiet long enough (this, doubled the longer it
    /// flaps, at most 8 times it), and only its newest plugin is offered;
    /// the others are coalesced, counted and reported (rule swap/flapping).
    /// 0: never held.
    #[arg(long, env = "WASM_OPERATOR_MIN_SWAP_INTERVAL_SECS", default_value_t = crate::slot::DEFAULT_MIN_SWAP_INTERVAL.as_secs(), value_parser = clap::value_parser!(u64).range(0..=3600))]
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
    pub lists: crate::kube_api::list_bounds::ListBoundArgs,
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
    /// caches and reconciles only those. With --plugin-controllers the
    /// declared controllers' parents are split by the same shards (every
    /// replica watches them all and reconciles those of its shards; the
    /// holder of shard 0 judges a canary on every replica's figures). The
    /// same on every replica; the
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
