//! `wasm-operator run`: connect to the cluster, load and vet the plugin,
//! start the plugin sources, the swapper, the metrics/status endpoint and
//! the controller, and stop cleanly on Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use crate::apply::Limits;
use crate::apply::policy::PolicyArgs;
use crate::controller::budget::BudgetConfig;
use crate::controller::{self, ControllerConfig, metrics::Metrics};
use crate::crd::Jinghzhu;
use crate::hotswap::RollbackPolicy;
use crate::hotswap::setup::{self, PluginOptions, PluginSource};
use crate::runtime::{Runtime, RuntimeArgs};
use crate::serve;

/// Options of `wasm-operator run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The plugin file (.wasm component). Watched: replacing it swaps the plugin live.
    #[arg(
        long,
        required_unless_present = "plugin_configmap",
        conflicts_with = "plugin_configmap"
    )]
    pub plugin: Option<PathBuf>,
    /// Take the plugin from a ConfigMap, `namespace/name`, and swap it when the ConfigMap changes.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub plugin_configmap: Option<String>,
    /// The ConfigMap key (in binaryData) holding the plugin.
    #[arg(long, default_value = "plugin.wasm")]
    pub plugin_key: String,
    /// Only load a plugin with this sha256 digest (hex, optionally prefixed `sha256:`).
    #[arg(long, value_name = "HEX")]
    pub plugin_sha256: Option<String>,
    /// Run this candidate plugin on the same inputs, log where it differs, apply nothing of it.
    #[arg(long)]
    pub shadow_plugin: Option<PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Reconciles running at once (one per object at a time regardless).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// Plugin sandbox limits and the precompiled cache.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Serve `/metrics` (Prometheus), `/status` (JSON) and `/healthz` here.
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub metrics_addr: SocketAddr,
    /// Roll back a swapped-in plugin failing more than this share of reconciles…
    #[arg(long, default_value_t = 0.5)]
    pub rollback_failure_ratio: f64,
    /// …within this many seconds after the swap.
    #[arg(long, default_value_t = 60)]
    pub rollback_window_secs: u64,
    /// Most pods one reconcile may create.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=5000))]
    pub max_creates: u64,
    /// Pods a reconcile may create beyond what spec.desired justifies.
    #[arg(long, default_value_t = 0)]
    pub max_surge: u32,
    /// Shortest requeue-after a plugin may ask for, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..))]
    pub min_requeue_ms: u64,
    /// Writes (pod creates and deletes, status patches, Events) one object's
    /// reconciles may make per minute once its burst is spent.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..))]
    pub writes_per_minute: u32,
    /// Writes one object's reconciles may make in a burst (at least
    /// --max-creates plus the Events and status of one reconcile).
    #[arg(long, default_value_t = 1200)]
    pub write_burst: u32,
    /// The pod policy: which pod specs, labels and annotations a plugin may propose.
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Runs the host until Ctrl-C or SIGTERM.
pub async fn run(args: RunArgs) -> Result<()> {
    let policy = args.policy.config()?;
    let max_creates = usize::try_from(args.max_creates).unwrap_or(usize::MAX);
    // One reconcile's writes: its creates, a delete Event, its Events and status.
    let one_reconcile = args.max_creates + Limits::default().max_events as u64 + 3;
    if u64::from(args.write_burst) < one_reconcile {
        bail!(
            "--write-burst {} is smaller than one reconcile may need ({one_reconcile} = --max-creates {} \
             + Events + status); raise it or lower --max-creates",
            args.write_burst,
            args.max_creates
        );
    }
    let client = connect().await?;
    check_crd(&client).await?;

    let runtime = Arc::new(Runtime::new(args.runtime.config())?);
    let metrics = Arc::new(Metrics::default());

    let source = match (&args.plugin, &args.plugin_configmap) {
        (Some(path), _) => PluginSource::File(path.clone()),
        (None, Some(spec)) => PluginSource::configmap(spec, &args.plugin_key)?,
        (None, None) => bail!("give --plugin PATH or --plugin-configmap NAMESPACE/NAME"),
    };
    let plugins = setup::start(
        &client,
        runtime,
        PluginOptions {
            source,
            pinned_sha256: args.plugin_sha256.clone(),
            shadow: args.shadow_plugin.clone(),
            rollback: RollbackPolicy {
                window: Duration::from_secs(args.rollback_window_secs),
                max_failure_ratio: args.rollback_failure_ratio,
                ..RollbackPolicy::default()
            },
        },
        metrics.clone(),
    )
    .await?;
    let active = plugins.active.clone();
    serve::spawn(
        args.metrics_addr,
        metrics.clone(),
        active.clone(),
        plugins.history,
    )
    .await?;

    let config = ControllerConfig {
        namespace: args.namespace.clone(),
        workers: args.workers,
        limits: Limits {
            max_creates,
            max_surge: usize::try_from(args.max_surge).unwrap_or(usize::MAX),
            min_requeue: Duration::from_millis(args.min_requeue_ms),
            ..Limits::default()
        },
        policy,
        budget: BudgetConfig {
            burst: args.write_burst,
            per_minute: args.writes_per_minute,
        },
        ..ControllerConfig::default()
    };
    tracing::info!(
        namespace = args.namespace.as_deref().unwrap_or("<all>"),
        workers = args.workers,
        pod_policy = %config.policy.policy,
        "controller starting"
    );
    controller::run(client, active, config, metrics, shutdown_signal()).await;
    tracing::info!("stopped");
    Ok(())
}

/// A client for the cluster the kubeconfig names (`KUBECONFIG`,
/// `~/.kube/config`, in-cluster), checked to reach the API server; the
/// errors say what to do.
pub async fn connect() -> Result<Client> {
    let config = kube::Config::infer().await.map_err(|err| {
        anyhow!(
            "no Kubernetes configuration found ({err}). Set KUBECONFIG or create ~/.kube/config, \
             or run in a cluster. For a local control plane: `cargo run -p local-control-plane` \
             and export the KUBECONFIG it prints"
        )
    })?;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).context("building the Kubernetes client")?;
    client
        .apiserver_version()
        .await
        .map_err(|err| anyhow!("cannot reach the API server at {server}: {err}"))?;
    Ok(client)
}

/// Checks that the Jinghzhu CRD is served; when it is not, the error says
/// how to install it.
pub async fn check_crd(client: &Client) -> Result<()> {
    // Untyped: one Jinghzhu the host cannot read must not stop it starting
    // (it is reported and skipped by the watch).
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<Jinghzhu>(&()));
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => bail!(
            "the Jinghzhu CRD is not installed: run `wasm-operator crd | kubectl apply -f -` \
             (or `kubectl apply -f examples/crd.yaml`)"
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
