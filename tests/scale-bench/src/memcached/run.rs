//! One measured run of the Memcached workload: a fresh local control plane
//! with the Deployment and ReplicaSet controllers and an audit log of the
//! controller's own user, the Memcached CRD, one controller (the host with
//! the memcached plugin declared, alone or with the same plugin as its
//! shadow, or the controller-runtime peer) running as a ServiceAccount,
//! then N Memcacheds created at once and measured until every one has
//! converged; then the controller's metrics are read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, CustomResourceExt};
use local_control_plane::ControlPlane;
use local_control_plane::process::Supervised;
use serde_json::{Value, json};
use wasm_operator::crd::controller::PluginController;

use super::audit;
use super::converge::{self, Progress};
use super::{Controllers, Options, ReconcileLatency, RunResult, Side};
use crate::procstat;

/// The namespace the Memcacheds live in (and the controller's account).
pub const NAMESPACE: &str = "memcached-bench";
/// The controller's ServiceAccount: its requests are the audit log's.
const ACCOUNT: &str = "controller";
/// Where the host reads its plugin from (examples/memcached/controller.yaml).
const PLUGIN_NAMESPACE: &str = "wasm-operator";
const PLUGIN_CONFIGMAP: &str = "memcached-plugin";
/// Where the host reads the shadow plugin from (the same bytes).
const SHADOW_CONFIGMAP: &str = "memcached-plugin-shadow";
/// The declared controller's name.
const CONTROLLER: &str = "memcached";

/// Runs `side` once on a fresh control plane.
pub async fn run(
    side: Side,
    controllers: &Controllers,
    options: &Options,
    round: usize,
) -> Result<RunResult> {
    let dir = options
        .log_dir
        .join(format!("{side}-{}-round{}", options.objects, round + 1));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let user = format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}");
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(&policy, audit::policy(&user))?;
    let audit_log = dir.join("audit.log");
    let load_at_start = procstat::load();
    eprintln!(
        "memcached-bench: {side} round {} with N={}: starting a fresh control plane (load {:.2} on {} CPUs)",
        round + 1,
        options.objects,
        load_at_start.0,
        load_at_start.1
    );
    let mut cp_options = e2e_tests::declared::with_workload_controllers();
    cp_options.nodes = options.nodes;
    cp_options.apiserver_args = audit::apiserver_args(&policy, &audit_log);
    let cp = tokio::task::spawn_blocking(move || ControlPlane::start_with(cp_options))
        .await
        .context("control plane start task")??;
    let result = measure(side, controllers, options, &cp, &dir, &audit_log).await;
    let cp_dir = cp.dir().to_path_buf();
    tokio::task::spawn_blocking(move || cp.shutdown()).await?;
    let mut result = result.with_context(|| {
        format!(
            "{side} run (logs in {}, control plane in {})",
            dir.display(),
            cp_dir.display()
        )
    })?;
    result.round = round;
    result.load_at_start = load_at_start;
    Ok(result)
}

async fn measure(
    side: Side,
    controllers: &Controllers,
    options: &Options,
    cp: &ControlPlane,
    dir: &Path,
    audit_log: &Path,
) -> Result<RunResult> {
    let client = cp.client().await?;
    e2e_tests::declared::apply_crd(&client, PluginController::crd()).await?;
    e2e_tests::declared::apply_crd(
        &client,
        e2e_tests::declared::crd_file("examples/memcached/crd.yaml")?,
    )
    .await?;
    create_namespace(&client, NAMESPACE).await?;
    let kubeconfig = controller_account(cp, &client).await?;
    let (mut process, metrics_addr) =
        start(side, controllers, options, &client, &kubeconfig, dir).await?;
    tokio::time::sleep(options.settle).await;
    let pid = process.pid();
    let rss_idle = procstat::memory(pid)?.rss;
    let (memcacheds, deployments) = watch(&client).await?;

    let mut others = cp.pids();
    others.push(("memcached-bench".to_owned(), std::process::id()));
    let others_before = procstat::cpu_seconds_by_name(&others);
    let cpu_before = procstat::cpu_seconds(pid)?;
    let from = Timestamp::now();
    let started = Instant::now();
    create_memcacheds(&client, options).await?;
    let created_secs = started.elapsed().as_secs_f64();
    let progress =
        wait_converged(&mut process, options, &memcacheds, &deployments, started).await?;
    let converge_secs = started.elapsed().as_secs_f64();
    let to = Timestamp::now();
    let cpu_converge_secs = procstat::cpu_seconds(pid)? - cpu_before;
    let memory = procstat::memory(pid)?;
    let cpu_others_converge_secs =
        procstat::cpu_difference(&others_before, &procstat::cpu_seconds_by_name(&others));
    let samples = crate::metrics::parse(&crate::metrics::fetch(metrics_addr).await?)?;
    process.stop(Duration::from_secs(5));
    let requests = audit::count_file(audit_log, from, to)?;
    eprintln!(
        "memcached-bench: {side} converged {} Memcacheds in {converge_secs:.1} s ({} writes)",
        progress.converged,
        audit::writes(&requests)
    );
    Ok(RunResult {
        side,
        round: 0,
        objects: options.objects,
        size: options.size,
        workers: options.workers,
        load_at_start: (0.0, 0),
        created_secs,
        converge_secs,
        cpu_converge_secs,
        rss_idle_mib: mib(rss_idle),
        rss_converged_mib: mib(memory.rss),
        rss_peak_mib: mib(memory.peak),
        writes: audit::writes(&requests),
        reads: audit::reads(&requests),
        requests,
        cpu_others_converge_secs,
        reconcile: reconcile_latency(&samples),
        shadow_outcomes: shadow_outcomes(&samples),
    })
}

/// The serving reconciles' latency from the controller's metrics.
fn reconcile_latency(samples: &[prometheus_parse::Sample]) -> Option<ReconcileLatency> {
    let latency = crate::metrics::latency(samples, crate::metrics::RECONCILE_TIME)?;
    Some(ReconcileLatency {
        count: latency.count.round() as u64,
        mean_ms: latency.mean * 1e3,
        p50_ms: latency.p50 * 1e3,
        p99_ms: latency.p99 * 1e3,
    })
}

/// The host's `wasm_operator_declared_shadow_outcomes_total` by outcome.
fn shadow_outcomes(samples: &[prometheus_parse::Sample]) -> BTreeMap<String, u64> {
    let mut outcomes = BTreeMap::new();
    for sample in samples
        .iter()
        .filter(|s| s.metric == "wasm_operator_declared_shadow_outcomes_total")
    {
        if let (Some(outcome), Some(n)) =
            (sample.labels.get("outcome"), crate::metrics::number(sample))
        {
            *outcomes.entry(outcome.to_owned()).or_insert(0) += n.round() as u64;
        }
    }
    outcomes
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// The controller's ServiceAccount, bound to `cluster-admin` (both
/// controllers get the same rights), and a kubeconfig with its token.
async fn controller_account(cp: &ControlPlane, client: &Client) -> Result<PathBuf> {
    let kubeconfig = cp
        .kubeconfig_for_service_account(NAMESPACE, ACCOUNT)
        .await?;
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some("memcached-bench-controller".to_owned()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: "cluster-admin".to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: ACCOUNT.to_owned(),
            namespace: Some(NAMESPACE.to_owned()),
            ..Subject::default()
        }]),
    };
    bindings.create(&PostParams::default(), &binding).await?;
    Ok(kubeconfig)
}

/// Starts the controller of `side` and waits until it serves: the host's
/// `PluginController` `Serving` (and its shadow running, with one), the
/// peer's workers started. Returns it and its metrics address.
async fn start(
    side: Side,
    controllers: &Controllers,
    options: &Options,
    client: &Client,
    kubeconfig: &Path,
    dir: &Path,
) -> Result<(Supervised, std::net::SocketAddr)> {
    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let workers = options.workers.to_string();
    let mut cmd = match side {
        Side::Host | Side::HostShadow => {
            create_namespace(client, PLUGIN_NAMESPACE).await?;
            let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), PLUGIN_NAMESPACE);
            let bytes = std::fs::read(&controllers.plugin)
                .with_context(|| format!("reading {}", controllers.plugin.display()))?;
            let mut names = vec![PLUGIN_CONFIGMAP];
            if side == Side::HostShadow {
                names.push(SHADOW_CONFIGMAP);
            }
            for name in names {
                configmaps
                    .create(
                        &PostParams::default(),
                        &e2e_tests::plugin_configmap(name, bytes.clone()),
                    )
                    .await?;
            }
            let mut cmd = Command::new(&controllers.host);
            cmd.args(["run", "--plugin-controllers", "--workers", &workers])
                .env("WASM_OPERATOR_PRECOMPILED_DIR", dir.join("precompiled"));
            cmd
        }
        Side::Peer => {
            let mut cmd = Command::new(&controllers.peer);
            cmd.args(["--workers", &workers]);
            cmd
        }
    };
    cmd.args(["--metrics-addr", &metrics_addr.to_string()])
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    let log = dir.join(format!("{side}.log"));
    let mut process = Supervised::spawn(side.name(), cmd, &log)
        .with_context(|| format!("starting the {side}"))?;
    match side {
        Side::Host | Side::HostShadow => {
            let mut declaration = declaration()?;
            if side == Side::HostShadow {
                declaration["shadow"] = json!({"source": {"configMap": {
                    "namespace": PLUGIN_NAMESPACE, "name": SHADOW_CONFIGMAP, "key": "plugin.wasm",
                }}});
            }
            e2e_tests::declared::declare(client, CONTROLLER, declaration).await?;
            e2e_tests::declared::wait_state(client, CONTROLLER, "Serving")
                .await
                .with_context(|| format!("the host's log:\n{}", process.log_tail(20)))?;
            if side == Side::HostShadow {
                wait_shadow(client)
                    .await
                    .with_context(|| format!("the host's log:\n{}", process.log_tail(20)))?;
            }
        }
        Side::Peer => wait_for_line(&mut process, &log, "Starting workers").await?,
    }
    Ok((process, metrics_addr))
}

/// Waits (60 s at most) until the controller's `status.shadow` shows its
/// shadow running.
async fn wait_shadow(client: &Client) -> Result<()> {
    let api: Api<PluginController> = Api::all(client.clone());
    e2e_tests::wait_for(
        "the shadow running (status.shadow.digest)",
        Duration::from_secs(60),
        || async {
            Ok(api
                .get(CONTROLLER)
                .await?
                .status
                .and_then(|s| s.shadow)
                .is_some_and(|s| !s.digest.is_empty()))
        },
    )
    .await
}

/// The `spec` of examples/memcached/controller.yaml.
fn declaration() -> Result<Value> {
    let path = crate::artifacts::workspace_root().join("examples/memcached/controller.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let object: Value =
        serde_yaml::from_str(&text).with_context(|| format!("{} is not YAML", path.display()))?;
    object
        .get("spec")
        .cloned()
        .with_context(|| format!("{} has no spec", path.display()))
}

/// Waits (60 s at most) until the process's log has a line with `needle`.
async fn wait_for_line(process: &mut Supervised, log: &Path, needle: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = process.exit_status() {
            bail!("exited ({status}):\n{}", process.log_tail(30));
        }
        if std::fs::read_to_string(log).is_ok_and(|text| text.contains(needle)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "no `{needle}` in its log within 60 s:\n{}",
                process.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Stores = (Store<DynamicObject>, Store<Deployment>);

/// Caches of the Memcacheds and Deployments of the namespace, filled by
/// watches in the background (the harness's, as admin: not in the audit log).
async fn watch(client: &Client) -> Result<Stores> {
    let memcached_api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &e2e_tests::declared::memcacheds(),
    );
    let writer = reflector::store::Writer::new(e2e_tests::declared::memcacheds());
    let memcacheds = writer.as_reader();
    let stream = reflector::reflector(writer, watcher(memcached_api, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    let deployment_api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let (deployments, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(deployment_api, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    memcacheds.wait_until_ready().await?;
    deployments.wait_until_ready().await?;
    Ok((memcacheds, deployments))
}

/// Creates the N Memcacheds (`memcached-00000`, …) of `spec.size`,
/// `create_concurrency` at a time.
async fn create_memcacheds(client: &Client, options: &Options) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &e2e_tests::declared::memcacheds(),
    );
    futures::stream::iter(0..options.objects)
        .map(|i| {
            let api = api.clone();
            async move {
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "cache.example.com/v1alpha1",
                    "kind": "Memcached",
                    "metadata": {"name": format!("memcached-{i:05}")},
                    "spec": {"size": options.size},
                }))?;
                api.create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("creating memcached-{i:05}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(options.create_concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Polls the caches until every Memcached has converged
/// ([`converge::progress`]), or fails after the timeout with how far it got.
async fn wait_converged(
    process: &mut Supervised,
    options: &Options,
    memcacheds: &Store<DynamicObject>,
    deployments: &Store<Deployment>,
    started: Instant,
) -> Result<Progress> {
    let mut last_report = Instant::now();
    loop {
        let deployments_by_name: BTreeMap<String, std::sync::Arc<Deployment>> = deployments
            .state()
            .into_iter()
            .filter_map(|d| Some((d.metadata.name.clone()?, d)))
            .collect();
        let progress = converge::progress(&memcacheds.state(), &deployments_by_name);
        if progress.converged >= options.objects {
            return Ok(progress);
        }
        if let Some(status) = process.exit_status() {
            bail!(
                "the controller exited ({status}):\n{}",
                process.log_tail(30)
            );
        }
        if started.elapsed() > options.converge_timeout {
            bail!(
                "not converged after {:?}: {progress:?}; the controller's log:\n{}",
                options.converge_timeout,
                process.log_tail(20)
            );
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "memcached-bench: {:.0} s: {progress:?}",
                started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
