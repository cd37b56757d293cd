//! Support for the end-to-end tests: a namespace of one's own on the shared
//! local control plane (with simulated nodes, so pods are scheduled, run and
//! become Ready), the CRD installed once, a host running in-process against
//! that namespace, and waiting helpers that say what they waited for.
//! [`deploy`]: the deploy manifests and the host binary run as the Deployment runs it.

pub mod declared;
pub mod deploy;
pub mod endless_list;
pub mod faults;
pub mod go_plugins;
pub mod hostile_registry;
pub mod memory;
pub mod previous_host;
pub mod sharded;
pub mod watched_host;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Pod, PodTemplateSpec, ServiceAccount,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, CustomResourceExt, ResourceExt};
use local_control_plane::ControlPlane;
use tokio::sync::{OnceCell, oneshot};
use wasm_operator::controller::{self, ControllerConfig};
use wasm_operator::crd::Jinghzhu;
use wasm_operator::delivery::setup::{self, PluginOptions, PluginSource};
use wasm_operator::delivery::swapper::SwapHistory;
use wasm_operator::ownership::is_controlled_by;
use wasm_operator::runtime::{Runtime, RuntimeConfig};
use wasm_operator::slot::{ActivePlugin, RollbackPolicy};
use wasm_operator::telemetry::metrics::{Metrics, PluginLabels};
use wasm_operator_testkit::jinghzhu;

/// A test's own namespace on the shared control plane, with the CRD installed.
pub struct TestEnv {
    /// The shared control plane.
    pub control_plane: &'static ControlPlane,
    /// Admin client.
    pub client: Client,
    /// This test's namespace.
    pub namespace: String,
}

static CRD_INSTALLED: OnceCell<()> = OnceCell::const_new();

impl TestEnv {
    /// Creates a fresh namespace named after `prefix` (the CRD is installed once per process).
    pub async fn new(prefix: &str) -> Result<Self> {
        capture_host_logs();
        let control_plane = ControlPlane::shared()?;
        CRD_INSTALLED
            .get_or_try_init(|| install_crd(control_plane))
            .await?;
        Self::in_new_namespace(control_plane, prefix).await
    }

    /// [`TestEnv::new`] on a control plane of the test's own (started with
    /// options the shared one does not have); the CRD is applied to it.
    pub async fn new_on(control_plane: &'static ControlPlane, prefix: &str) -> Result<Self> {
        capture_host_logs();
        install_crd(control_plane).await?;
        Self::in_new_namespace(control_plane, prefix).await
    }

    /// A namespace named after `prefix` on `control_plane`, ready for pods.
    async fn in_new_namespace(control_plane: &'static ControlPlane, prefix: &str) -> Result<Self> {
        let client = control_plane.client().await?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut namespace = Namespace::default();
        namespace.metadata.generate_name = Some(format!("{prefix}-"));
        let ns = namespaces
            .create(&PostParams::default(), &namespace)
            .await?
            .name_any();
        // Pods are admitted only once the namespace's default ServiceAccount exists.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
        wait_for(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || async { Ok(accounts.get_opt("default").await?.is_some()) },
        )
        .await?;
        Ok(Self {
            control_plane,
            client,
            namespace: ns,
        })
    }

    /// The Jinghzhu API of this namespace.
    pub fn jinghzhus(&self) -> Api<Jinghzhu> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The Pod API of this namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates a Jinghzhu with `desired` replicas (and optional annotations).
    pub async fn create(
        &self,
        name: &str,
        desired: u32,
        annotations: &[(&str, &str)],
    ) -> Result<Jinghzhu> {
        let mut jz = jinghzhu(name).desired(desired);
        if !annotations.is_empty() {
            jz = jz.annotations(annotations);
        }
        Ok(self
            .jinghzhus()
            .create(&PostParams::default(), &jz.build())
            .await?)
    }

    /// Creates a Jinghzhu with `desired` replicas of `template`.
    pub async fn create_with_template(
        &self,
        name: &str,
        desired: u32,
        template: PodTemplateSpec,
    ) -> Result<Jinghzhu> {
        let jz = jinghzhu(name).desired(desired).template(template).build();
        Ok(self.jinghzhus().create(&PostParams::default(), &jz).await?)
    }

    /// Sets an annotation on a pod (e.g. the control plane's fail annotation).
    pub async fn annotate_pod(&self, pod: &str, key: &str, value: &str) -> Result<()> {
        let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
        self.pods()
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// [`TestEnv::create`] with an owned name (handy in `join_all`).
    pub async fn create_owned(
        &self,
        name: String,
        desired: u32,
        annotations: &[(&str, &str)],
    ) -> Result<Jinghzhu> {
        self.create(&name, desired, annotations).await
    }

    /// Sets `spec.desired`.
    pub async fn scale(&self, name: &str, desired: u32) -> Result<()> {
        let patch = serde_json::json!({ "spec": { "desired": desired } });
        self.jinghzhus()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// All pods controlled by the Jinghzhu `name`, terminating ones included.
    pub async fn owned_pods(&self, name: &str) -> Result<Vec<Pod>> {
        let jz = self.jinghzhus().get(name).await?;
        let uid = jz.uid().context("Jinghzhu without uid")?;
        Ok(self
            .pods()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|p| is_controlled_by(p, &uid))
            .collect())
    }

    /// Live pods controlled by `name`: neither terminating nor finished
    /// (`Failed`/`Succeeded`), the pods that count towards `desired`.
    pub async fn live_pods(&self, name: &str) -> Result<Vec<Pod>> {
        Ok(self
            .owned_pods(name)
            .await?
            .into_iter()
            .filter(wasm_operator::observed::is_live)
            .collect())
    }

    /// Waits until `name` has exactly `desired` live pods, every one Running
    /// and Ready, and a status that says so (`current`, `podList` matching
    /// the pods, `readyReplicas`, state `Running`).
    pub async fn wait_converged(
        &self,
        name: &str,
        desired: u32,
        timeout: Duration,
    ) -> Result<(Jinghzhu, Vec<Pod>)> {
        let deadline = Instant::now() + timeout;
        loop {
            let jz = self.jinghzhus().get(name).await?;
            let mut pods = self.live_pods(name).await?;
            pods.sort_by_key(|p| p.name_any());
            let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
            let ready = pods.iter().filter(|p| is_running_and_ready(p)).count();
            if let Some(status) = &jz.status
                && pods.len() == desired as usize
                && ready == pods.len()
                && status.current == desired
                && status.ready_replicas == Some(desired)
                && status.pod_list == names
                && status.state == "Running"
            {
                return Ok((jz, pods));
            }
            let last = format!(
                "{} live pods {names:?} ({ready} running and ready), status {:?}",
                pods.len(),
                jz.status
            );
            if Instant::now() > deadline {
                bail!(
                    "{}/{name} did not converge to {desired} within {timeout:?}: {last}",
                    self.namespace
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits for an Event `reason` on the Jinghzhu `name` whose message
    /// contains `needle`, and returns the message.
    pub async fn wait_event(
        &self,
        name: &str,
        reason: &str,
        needle: &str,
        timeout: Duration,
    ) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let events = self.events_of(name).await?;
            if let Some(message) = events
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.message.clone())
                .find(|m| m.contains(needle))
            {
                return Ok(message);
            }
            if Instant::now() > deadline {
                let seen: Vec<String> = events
                    .iter()
                    .map(|e| {
                        format!(
                            "{}: {}",
                            e.reason.as_deref().unwrap_or("-"),
                            e.message.as_deref().unwrap_or("-")
                        )
                    })
                    .collect();
                bail!(
                    "no {reason} Event containing {needle:?} on {}/{name} within {timeout:?}; events: {seen:#?}",
                    self.namespace
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Events recorded on the Jinghzhu `name`.
    pub async fn events_of(&self, name: &str) -> Result<Vec<Event>> {
        self.events_on("Jinghzhu", name).await
    }

    /// Events recorded on the object of `kind` named `name` (e.g. the
    /// plugin's ConfigMap).
    pub async fn events_on(&self, kind: &str, name: &str) -> Result<Vec<Event>> {
        events_on(&self.client, &self.namespace, kind, name).await
    }
}

/// A ConfigMap `name` holding `bytes` as the plugin, under the key
/// `plugin.wasm` (for `PluginSource::ConfigMap`).
pub fn plugin_configmap(name: &str, bytes: Vec<u8>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        binary_data: Some(std::collections::BTreeMap::from([(
            "plugin.wasm".to_string(),
            k8s_openapi::ByteString(bytes),
        )])),
        ..Default::default()
    }
}

/// The pod's phase (`""` when it has no status yet).
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// True when the pod is in phase `Running` with a `Ready` condition `True`.
pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && wasm_operator::observed::is_ready(pod)
}

/// Sends the in-process hosts' logs to the test's captured output, so a
/// failing test shows what its host did (`RUST_LOG` overrides the default
/// [`HOST_LOG_FILTER`]).
fn capture_host_logs() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(HOST_LOG_FILTER));
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(tracing_subscriber::fmt::layer().with_test_writer())
            // A plain copy (no colours) for the tests that read the log.
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(|| CaptureWriter),
            )
            .try_init();
    });
}

/// The in-process hosts' log filter: the host's default (`info`) and each
/// reconcile's own lines (debug in the host), which tests read.
pub const HOST_LOG_FILTER: &str =
    "wasm_operator=info,wasm_operator::controller::reconcile=debug,warn";

/// Most bytes one [`LogCapture`] keeps (it counts the rest).
const CAPTURE_LIMIT: usize = 256 * 1024 * 1024;

/// What one [`LogCapture`] has seen.
#[derive(Default)]
struct CapturedLog {
    text: Vec<u8>,
    total: usize,
}

static CAPTURES: std::sync::Mutex<Vec<std::sync::Weak<std::sync::Mutex<CapturedLog>>>> =
    std::sync::Mutex::new(Vec::new());

/// The writer of the in-process hosts' plain log copy: each write (one
/// formatted line, as the formatter writes them) goes to every live
/// [`LogCapture`].
struct CaptureWriter;

impl std::io::Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut captures = CAPTURES.lock().unwrap_or_else(|e| e.into_inner());
        captures.retain(|capture| {
            let Some(capture) = capture.upgrade() else {
                return false;
            };
            let mut log = capture.lock().unwrap_or_else(|e| e.into_inner());
            log.total += buf.len();
            let room = CAPTURE_LIMIT.saturating_sub(log.text.len());
            log.text.extend_from_slice(&buf[..buf.len().min(room)]);
            true
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A copy of every log line the in-process hosts (of every test in this
/// process) write while it is alive, as plain text without colours: for
/// tests of what reaches the host's log.
pub struct LogCapture {
    log: Arc<std::sync::Mutex<CapturedLog>>,
}

impl LogCapture {
    /// Starts capturing (and the hosts' logging, if no host started yet).
    pub fn start() -> Self {
        capture_host_logs();
        let log = Arc::new(std::sync::Mutex::new(CapturedLog::default()));
        CAPTURES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&log));
        Self { log }
    }

    /// What was captured so far (the first 256 MiB), as text.
    pub fn text(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&log.text).into_owned()
    }

    /// How many bytes of log were written while capturing.
    pub fn bytes(&self) -> usize {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

async fn install_crd(control_plane: &ControlPlane) -> Result<()> {
    apply_crd(control_plane.client().await?, Jinghzhu::crd()).await
}

/// Applies `crd` (server-side, as `e2e-tests`) and waits up to 30 s until
/// it is established.
async fn apply_crd(client: Client, crd: CustomResourceDefinition) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply("e2e-tests").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, &crd.name_any(), conditions::is_crd_established()),
    )
    .await
    .context("the CRD was not established within 30 s")??;
    Ok(())
}

/// Polls `check` until it returns true.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err = String::new();
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(err) => last_err = format!("{err:#}"),
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what} {last_err}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A host running in-process, watching one namespace, wired like
/// `wasm-operator run` (same plugin setup, swapper and controller).
pub struct RunningHost {
    /// Its counters.
    pub metrics: Arc<Metrics>,
    /// Its plugin slot.
    pub plugin: Arc<ActivePlugin>,
    /// The last swap and refusal.
    pub history: Arc<std::sync::Mutex<SwapHistory>>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

/// How to start a [`RunningHost`].
pub struct HostOptions {
    /// Where the plugin comes from.
    pub source: PluginSource,
    /// Only this digest may load.
    pub pinned_sha256: Option<String>,
    /// A shadow candidate.
    pub shadow: Option<std::path::PathBuf>,
    /// Only a shadow with this digest may run.
    pub shadow_pinned_sha256: Option<String>,
    /// Shadow calls that may wait in the shadow's queue.
    pub shadow_queue: usize,
    /// Rollback policy.
    pub rollback: RollbackPolicy,
    /// Controller settings (the namespace is set to the test's).
    pub controller: ControllerConfig,
    /// Run as this client instead of the admin (e.g. a ServiceAccount's).
    pub client: Option<Client>,
    /// The plugin runtime (limits, precompiled cache, compiler).
    pub runtime: RuntimeConfig,
    /// Tags the controller's log lines (a `host` span with this name), so
    /// tests running several hosts in one process can tell them apart.
    pub log_name: Option<String>,
}

impl HostOptions {
    /// Defaults with the plugin file at `path`.
    pub fn file(path: &std::path::Path) -> Self {
        Self {
            source: PluginSource::File(path.to_path_buf()),
            pinned_sha256: None,
            shadow: None,
            shadow_pinned_sha256: None,
            shadow_queue: wasm_operator::slot::shadow::DEFAULT_SHADOW_QUEUE,
            rollback: RollbackPolicy::default(),
            controller: ControllerConfig::default(),
            client: None,
            runtime: RuntimeConfig::default(),
            log_name: None,
        }
    }
}

impl RunningHost {
    /// Starts a host with the plugin at `plugin_path` for `env`'s namespace.
    pub async fn start(env: &TestEnv, plugin_path: &std::path::Path) -> Result<Self> {
        Self::start_with(env, HostOptions::file(plugin_path)).await
    }

    /// Starts a host with `options` for `env`'s namespace.
    pub async fn start_with(env: &TestEnv, mut options: HostOptions) -> Result<Self> {
        options.controller.namespace = Some(env.namespace.clone());
        let client = options.client.clone().unwrap_or_else(|| env.client.clone());
        let metrics = Arc::new(Metrics::default());
        let runtime = Arc::new(Runtime::new(options.runtime)?);
        let plugins = setup::start(
            &client,
            runtime,
            PluginOptions {
                source: options.source,
                pinned_sha256: options.pinned_sha256,
                shadow: options.shadow,
                shadow_pinned_sha256: options.shadow_pinned_sha256,
                shadow_queue: options.shadow_queue,
                rollback: options.rollback,
                max_file_bytes: wasm_operator::registry::bounded::FileRules::default().max_bytes,
            },
            metrics.clone(),
        )
        .await?;
        let (tx, rx) = oneshot::channel();
        let span = match &options.log_name {
            // The host's target, so the host's log filter keeps the span.
            Some(name) => tracing::info_span!(target: "wasm_operator", "host", name = %name),
            None => tracing::Span::none(),
        };
        let task = tokio::spawn(tracing::Instrument::instrument(
            controller::run(
                client,
                plugins.active.clone(),
                options.controller,
                metrics.clone(),
                async move {
                    let _ = rx.await;
                },
            ),
            span,
        ));
        Ok(Self {
            metrics,
            plugin: plugins.active,
            history: plugins.history,
            shutdown: Some(tx),
            task,
        })
    }

    /// Aborts the host at once, mid-reconcile if one is running: what a crash
    /// or a SIGKILL does to in-flight work.
    pub async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Stops the host and waits for running reconciles to finish.
    pub async fn stop(self) {
        let _ = self.stop_timed().await;
    }

    /// [`RunningHost::stop`], saying how long the controller took to stop
    /// once told to (`None`: it had not within 30 s, and is left running).
    pub async fn stop_timed(mut self) -> Option<Duration> {
        let started = std::time::Instant::now();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let stopped = tokio::time::timeout(Duration::from_secs(30), &mut self.task).await;
        let took = started.elapsed();
        // As `run` does: the shadow's queue stops with the controller.
        self.plugin.set_shadow(None, 0);
        stopped.is_ok().then_some(took)
    }

    /// Reconcile calls made by the plugin with this digest.
    pub fn calls_by(&self, digest: &str) -> u64 {
        self.metrics
            .plugin_calls
            .get_or_create(&PluginLabels {
                plugin: digest.to_string(),
            })
            .get()
    }

    /// Failed reconcile calls of the plugin with this digest.
    pub fn errors_by(&self, digest: &str) -> u64 {
        self.metrics
            .plugin_errors
            .get_or_create(&PluginLabels {
                plugin: digest.to_string(),
            })
            .get()
    }
}

/// Path of a plugin artifact, built on first use.
pub fn plugin(package: &str, features: &[&str]) -> std::path::PathBuf {
    wasm_artifacts::build(package, features, wasm_artifacts::Toolchain::Wasip2)
}

/// Where a test binary keeps a control plane of its own
/// ([`own_control_plane`]).
pub type ControlPlaneSlot = std::sync::OnceLock<std::result::Result<ControlPlane, String>>;

/// A control plane of a test binary's own, started with options the shared
/// one does not have (API server flags, no nodes): once per `slot`, off the
/// async threads (starting it blocks), and stopped when the process exits.
pub async fn own_control_plane(
    slot: &'static ControlPlaneSlot,
    options: fn() -> local_control_plane::ControlPlaneOptions,
) -> Result<&'static ControlPlane> {
    static AT_EXIT: std::sync::Mutex<Vec<&'static ControlPlane>> =
        std::sync::Mutex::new(Vec::new());
    extern "C" fn stop_all() {
        if let Ok(planes) = AT_EXIT.lock() {
            for plane in planes.iter() {
                plane.shutdown();
            }
        }
    }
    tokio::task::spawn_blocking(move || {
        slot.get_or_init(|| ControlPlane::start_with(options()).map_err(|err| format!("{err:#}")));
    })
    .await?;
    let plane = match slot.get() {
        Some(Ok(plane)) => plane,
        Some(Err(err)) => bail!("the test's own control plane did not start: {err}"),
        None => bail!("the test's own control plane was not started"),
    };
    let mut planes = AT_EXIT
        .lock()
        .map_err(|_| anyhow::anyhow!("a test panicked holding the exit list"))?;
    if planes.is_empty() {
        // SAFETY: registering a plain function to run at exit.
        unsafe { libc::atexit(stop_all) };
    }
    if !planes.iter().any(|p| std::ptr::eq(*p, plane)) {
        planes.push(plane);
    }
    Ok(plane)
}

/// The messages of the Warning `PluginRefused` Events on `kind`/`name` in
/// `namespace`.
pub async fn refusal_events(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Result<Vec<String>> {
    Ok(events_on(client, namespace, kind, name)
        .await?
        .into_iter()
        .filter(|e| {
            e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("PluginRefused")
        })
        .filter_map(|e| e.message)
        .collect())
}

/// The Events in `namespace` on the object of `kind` named `name`.
pub async fn events_on(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Result<Vec<Event>> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some(kind)
                && e.involved_object.name.as_deref() == Some(name)
        })
        .collect())
}

/// The same on the `JinghzhuPlugin` `name` (cluster-scoped: its Events are
/// in `default`).
pub async fn plugin_refusals(client: &Client, name: &str) -> Result<Vec<String>> {
    refusal_events(client, "default", "JinghzhuPlugin", name).await
}

/// Installs the `JinghzhuPlugin` CRD and waits until it is established
/// (once per process; idempotent across processes).
pub async fn install_plugin_crd(client: &Client) -> Result<()> {
    static PLUGIN_CRD: OnceCell<()> = OnceCell::const_new();
    PLUGIN_CRD
        .get_or_try_init(|| {
            apply_crd(
                client.clone(),
                wasm_operator::crd::plugin::JinghzhuPlugin::crd(),
            )
        })
        .await?;
    Ok(())
}
