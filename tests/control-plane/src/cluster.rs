//! Starting, waiting for and stopping a local control plane.
//!
//! Start order is etcd, kube-apiserver (wait for `/readyz`), then at once
//! kube-controller-manager (garbage collector, pod garbage collector,
//! namespace and ServiceAccount controllers), kube-scheduler and kwok with
//! its fake Nodes (see [`crate::nodes`]); then the waits run side by side:
//! the `default` ServiceAccount (proves the controller manager works), the
//! scheduler's `/readyz`, and every fake Node Ready. Stop order is the
//! reverse of start. Everything lives in one temporary directory that is
//! removed on shutdown.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use crate::binaries::{self, Binaries};
use crate::kubeconfig::{self, Credentials};
use crate::nodes;
use crate::pki::Pki;
use crate::process::{self, Supervised};

/// Prefix of every control plane's temporary directory.
const DIR_PREFIX: &str = "wasm-operator-cp-";

/// Client rate limits for kube-controller-manager and kube-scheduler: none
/// to speak of (kwokctl's `--disable-qps-limits` values). Their defaults
/// (20 and 50 requests/s) would make the garbage collector and pod binding
/// the pace of every test and benchmark, not the operator under test; kwok's
/// own client is unthrottled already.
const UNTHROTTLED_CLIENT: [&str; 2] = ["--kube-api-qps=5000", "--kube-api-burst=10000"];

/// The controllers kube-controller-manager runs by default here. For the
/// simulated nodes: the node lifecycle controller lifts the
/// `node.kubernetes.io/not-ready` taint every new Node is created with once
/// the Node is Ready (and puts it back if kwok stops renewing its Lease);
/// the pod garbage collector deletes the pods of a Node that was deleted
/// (after a 40 s quarantine) and unscheduled pods that are terminating.
pub const DEFAULT_CONTROLLERS: [&str; 6] = [
    "garbage-collector-controller",
    "namespace-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
];

/// kube-controller-manager's controllers for workloads: Deployments make
/// ReplicaSets, ReplicaSets make Pods. Off by default (the host's own tests
/// need neither); operators whose children are Deployments need both.
pub const WORKLOAD_CONTROLLERS: [&str; 2] = ["deployment-controller", "replicaset-controller"];

/// The controller that makes new Nodes schedulable.
const NODE_LIFECYCLE_CONTROLLER: &str = "node-lifecycle-controller";

/// How many simulated nodes a control plane has unless told otherwise.
pub const DEFAULT_NODES: usize = 3;

/// What to start and how long to wait.
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// Start kube-controller-manager (garbage collection, namespace deletion,
    /// default ServiceAccounts). On by default.
    pub controller_manager: bool,
    /// The kube-controller-manager controllers to enable.
    pub controllers: Vec<String>,
    /// Simulated nodes (kwok) to create; with more than 0, kube-scheduler
    /// and kwok run too, so pods get scheduled, run and become Ready.
    /// 0 starts neither: pods stay Pending. Default [`DEFAULT_NODES`].
    pub nodes: usize,
    /// How long each component may take to become ready.
    pub startup_timeout: Duration,
    /// Keep the directory (certificates, kubeconfig, logs) after shutdown.
    pub keep_dir: bool,
    /// Extra kube-apiserver flags (e.g. `--watch-cache=false`, so watches
    /// are served by etcd and an etcd compaction answers an old
    /// resourceVersion with 410 Gone).
    pub apiserver_args: Vec<String>,
    /// kwok processes sharing the simulated Nodes (each manages every
    /// n-th Node; [`nodes::kwok_node_selector`]); at least 1, at most one
    /// per Node. Default 1. Each process still reads every pod event, so
    /// a second one did not lower kwok's CPU at scale (tests/scale-bench/results/log-2026-11.md).
    pub kwok_processes: usize,
}

impl Default for ControlPlaneOptions {
    fn default() -> Self {
        Self {
            controller_manager: true,
            controllers: DEFAULT_CONTROLLERS.iter().map(|c| c.to_string()).collect(),
            nodes: DEFAULT_NODES,
            startup_timeout: Duration::from_secs(90),
            keep_dir: false,
            apiserver_args: Vec::new(),
            kwok_processes: 1,
        }
    }
}

/// A running etcd + kube-apiserver (+ kube-controller-manager, + kube-scheduler
/// and kwok with simulated nodes).
///
/// Dropping it (or calling [`ControlPlane::shutdown`]) stops every process and
/// removes its directory.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    keep_dir: bool,
    server: String,
    kubeconfig: PathBuf,
    pki: Pki,
    binaries: Binaries,
    /// Names of the simulated nodes.
    nodes: Vec<String>,
    /// In start order; stopped in reverse.
    processes: Mutex<Vec<Supervised>>,
    /// etcd's client port (for [`ControlPlane::compact_etcd`]).
    etcd_port: u16,
    /// kube-apiserver's program and arguments (for [`ControlPlane::restart_apiserver`]).
    apiserver_command: Option<(PathBuf, Vec<std::ffi::OsString>)>,
    /// How long a component may take to become ready.
    startup_timeout: Duration,
    /// kube-apiserver restarts so far (names their logs).
    apiserver_restarts: std::sync::atomic::AtomicUsize,
}

/// How [`ControlPlane::restart_apiserver`] stops the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, then SIGKILL after 5 s (a kubelet's grace period, shorter):
    /// it stops listening at once and finishes the short requests in
    /// flight. (Left alone it would hold its watches open for the 60 s
    /// request timeout before exiting.)
    Graceful,
    /// SIGKILL: requests in flight are cut off, answered or not.
    Kill,
}

impl ControlPlane {
    /// Starts a control plane with default options. Blocks until it is ready.
    pub fn start() -> Result<Self> {
        Self::start_with(ControlPlaneOptions::default())
    }

    /// Starts a control plane. Blocks until it is ready (safe to call from
    /// inside a tokio runtime; the readiness checks run on their own thread).
    pub fn start_with(options: ControlPlaneOptions) -> Result<Self> {
        let lifecycle = options
            .controllers
            .iter()
            .any(|c| c == NODE_LIFECYCLE_CONTROLLER || c == "*");
        if options.nodes > 0 && !(options.controller_manager && lifecycle) {
            bail!(
                "simulated nodes need kube-controller-manager with its {NODE_LIFECYCLE_CONTROLLER} \
                 (it makes new Nodes schedulable): keep the controller manager and that controller, \
                 or start without nodes (`nodes: 0`, `up --no-nodes`)"
            );
        }
        remove_stale_dirs();
        let binaries = binaries::ensure_binaries()?;
        // A free port can be taken by someone else before we bind it: retry.
        let mut last_err = None;
        for _attempt in 0..3 {
            match Self::start_once(&options, &binaries) {
                Ok(cp) => return Ok(cp),
                Err(err) if format!("{err:#}").contains("address already in use") => {
                    last_err = Some(err);
                }
                Err(err) => return Err(err),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow!("control plane did not start")))
    }

    /// The control plane shared by every test in this process, started on
    /// first use and stopped when the process exits.
    pub fn shared() -> Result<&'static ControlPlane> {
        static SHARED: OnceLock<std::result::Result<ControlPlane, String>> = OnceLock::new();
        extern "C" fn shutdown_shared() {
            if let Some(Ok(cp)) = SHARED.get() {
                cp.shutdown();
            }
        }
        let result = SHARED.get_or_init(|| {
            let started = ControlPlane::start().map_err(|err| format!("{err:#}"));
            if started.is_ok() {
                // SAFETY: registering a plain function to run at exit.
                unsafe { libc::atexit(shutdown_shared) };
            }
            started
        });
        result
            .as_ref()
            .map_err(|err| anyhow!("the shared local control plane failed to start: {err}"))
    }

    fn start_once(options: &ControlPlaneOptions, binaries: &Binaries) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{DIR_PREFIX}{}-", std::process::id()))
            .tempdir()
            .context("creating the control plane's temporary directory")?
            .keep();
        let mut cp = Self {
            dir: dir.clone(),
            keep_dir: options.keep_dir,
            server: String::new(),
            kubeconfig: dir.join("admin.kubeconfig"),
            pki: Pki::generate(&dir.join("pki"))?,
            binaries: binaries.clone(),
            nodes: Vec::new(),
            processes: Mutex::new(Vec::new()),
            etcd_port: 0,
            apiserver_command: None,
            startup_timeout: options.startup_timeout,
            apiserver_restarts: std::sync::atomic::AtomicUsize::new(0),
        };
        // From here on, dropping `cp` on error stops what was started.
        let etcd_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let apiserver_port = free_port()?;
        cp.server = format!("https://127.0.0.1:{apiserver_port}");
        cp.etcd_port = etcd_port;

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
        let mut etcd = Command::new(&binaries.etcd);
        etcd.arg("--name=local")
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=local={peer_url}"))
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        cp.spawn("etcd", etcd)?;
        cp.wait_for("etcd", options.startup_timeout, || {
            Ok(http_get_plain(etcd_port, "/health")?.contains("\"health\":\"true\""))
        })?;

        let sa_public_key = dir.join("pki").join("service-account.pub");
        fs::write(
            &sa_public_key,
            rcgen::KeyPair::from_pem(&fs::read_to_string(&cp.pki.service_account_key)?)?
                .public_key_pem(),
        )?;
        let mut apiserver = Command::new(&binaries.kube_apiserver);
        apiserver
            .arg(format!("--etcd-servers={etcd_url}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={apiserver_port}"))
            .arg(format!("--cert-dir={}", dir.join("apiserver").display()))
            .arg(format!("--tls-cert-file={}", cp.pki.serving_cert.display()))
            .arg(format!(
                "--tls-private-key-file={}",
                cp.pki.serving_key.display()
            ))
            .arg(format!("--client-ca-file={}", cp.pki.ca_cert.display()))
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!(
                "--service-account-key-file={}",
                sa_public_key.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                cp.pki.service_account_key.display()
            ))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--authorization-mode=RBAC")
            .arg("--allow-privileged=true")
            .arg("--profiling=false")
            .arg("--v=1")
            .args(&options.apiserver_args);
        cp.apiserver_command = Some((
            PathBuf::from(apiserver.get_program()),
            apiserver.get_args().map(|a| a.to_owned()).collect(),
        ));
        cp.spawn("kube-apiserver", apiserver)?;

        kubeconfig::write(
            &cp.kubeconfig,
            &cp.server,
            &cp.pki.ca_cert,
            "admin",
            &Credentials::ClientCertificate {
                cert: cp.pki.admin_cert.clone(),
                key: cp.pki.admin_key.clone(),
            },
        )?;
        let kubeconfig = cp.kubeconfig.clone();
        cp.wait_for_apiserver(options.startup_timeout)?;

        if options.controller_manager {
            let mut kcm = Command::new(&binaries.kube_controller_manager);
            kcm.arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
                .arg(format!("--controllers={}", options.controllers.join(",")))
                .arg("--leader-elect=false")
                .arg("--secure-port=0")
                .arg("--use-service-account-credentials=false")
                .arg(format!(
                    "--service-account-private-key-file={}",
                    cp.pki.service_account_key.display()
                ))
                .arg(format!("--root-ca-file={}", cp.pki.ca_cert.display()))
                .arg("--concurrent-gc-syncs=5")
                .args(UNTHROTTLED_CLIENT)
                .arg("--v=1");
            cp.spawn("kube-controller-manager", kcm)?;
        }
        let scheduler_probe = if options.nodes > 0 {
            Some(cp.start_scheduler_and_nodes(options.nodes, options.kwok_processes)?)
        } else {
            None
        };

        if options.controller_manager {
            cp.wait_for("kube-controller-manager", options.startup_timeout, || {
                on_private_runtime(|| {
                    let kubeconfig = kubeconfig.clone();
                    async move {
                        let client = kube::Client::try_from(kubeconfig::load(&kubeconfig).await?)?;
                        let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
                        Ok(sas.get_opt("default").await?.is_some())
                    }
                })
            })?;
        }
        if let Some(probe) = scheduler_probe {
            cp.wait_for("kube-scheduler", options.startup_timeout, || {
                on_private_runtime(|| {
                    let probe = probe.clone();
                    async move {
                        let client = kube::Client::try_from(kubeconfig::load(&probe).await?)?;
                        let req = http::Request::get("/readyz").body(Vec::new())?;
                        Ok(client
                            .request_text(req)
                            .await
                            .is_ok_and(|body| body == "ok"))
                    }
                })
            })?;
            let wanted = options.nodes;
            cp.wait_for(
                &format!("{wanted} simulated nodes (kwok)"),
                options.startup_timeout,
                || {
                    on_private_runtime(|| {
                        let kubeconfig = kubeconfig.clone();
                        async move {
                            let client =
                                kube::Client::try_from(kubeconfig::load(&kubeconfig).await?)?;
                            Ok(nodes::schedulable_nodes(&client).await? >= wanted)
                        }
                    })
                },
            )?;
        }
        Ok(cp)
    }

    /// Waits until kube-apiserver answers `/readyz` with `ok`.
    fn wait_for_apiserver(&self, timeout: Duration) -> Result<()> {
        let kubeconfig = self.kubeconfig.clone();
        self.wait_for("kube-apiserver", timeout, || {
            on_private_runtime(|| {
                let kubeconfig = kubeconfig.clone();
                async move {
                    let client = kube::Client::try_from(kubeconfig::load(&kubeconfig).await?)?;
                    let req = http::Request::get("/readyz").body(Vec::new())?;
                    Ok(client
                        .request_text(req)
                        .await
                        .is_ok_and(|body| body == "ok"))
                }
            })
        })
    }

    /// Restarts kube-apiserver in place: stops it (`how`), leaves it down
    /// for `down`, starts it again with the same flags on the same port, and
    /// waits until it is ready. Clients see refused connections meanwhile;
    /// watches end and resume (or relist) on the new process. Returns how
    /// long it was unreachable from the stop to ready.
    pub fn restart_apiserver(&self, how: Stop, down: Duration) -> Result<Duration> {
        let (program, args) = self
            .apiserver_command
            .clone()
            .ok_or_else(|| anyhow!("kube-apiserver was not started by this control plane"))?;
        let started = Instant::now();
        {
            let mut processes = self
                .processes
                .lock()
                .map_err(|_| anyhow!("process list lock poisoned"))?;
            let index = processes
                .iter()
                .position(|p| p.name() == "kube-apiserver")
                .ok_or_else(|| anyhow!("kube-apiserver is not running"))?;
            match how {
                Stop::Graceful => processes[index].stop(Duration::from_secs(5)),
                Stop::Kill => processes[index].kill(),
            }
            std::thread::sleep(down);
            let restart = self
                .apiserver_restarts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            let mut command = Command::new(program);
            command.args(args);
            let log = self
                .dir
                .join(format!("kube-apiserver.restart-{restart}.log"));
            processes[index] = Supervised::spawn("kube-apiserver", command, &log)
                .context("starting kube-apiserver again")?;
        }
        self.wait_for_apiserver(self.startup_timeout)?;
        Ok(started.elapsed())
    }

    /// Compacts etcd's history up to its current revision (through etcd's
    /// v3 HTTP gateway, `/v3/kv/compaction`), so a watch resumed from an
    /// older resourceVersion that etcd serves gets 410 Gone. Returns the
    /// revision compacted to.
    pub fn compact_etcd(&self) -> Result<i64> {
        // A range read of any key answers with the current revision.
        let range = http_post_plain(self.etcd_port, "/v3/kv/range", r#"{"key":"AA=="}"#)?;
        let revision: i64 = serde_json::from_str::<serde_json::Value>(&range)
            .ok()
            .and_then(|v| v["header"]["revision"].as_str()?.parse().ok())
            .ok_or_else(|| anyhow!("etcd's range answer has no revision: {range}"))?;
        let answer = http_post_plain(
            self.etcd_port,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )?;
        if !answer.contains("header") {
            bail!("etcd refused the compaction to {revision}: {answer}");
        }
        Ok(revision)
    }

    /// Starts kube-scheduler and kwok and creates `count` fake Nodes; returns
    /// the kubeconfig that probes the scheduler's `/readyz`.
    fn start_scheduler_and_nodes(&mut self, count: usize, kwoks: usize) -> Result<PathBuf> {
        // A process without a Node to manage would get an empty selector.
        let kwoks = kwoks.clamp(1, count.max(1));
        let scheduler_port = free_port()?;
        let mut scheduler = Command::new(&self.binaries.kube_scheduler);
        scheduler
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={scheduler_port}"))
            .arg(format!(
                "--tls-cert-file={}",
                self.pki.serving_cert.display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                self.pki.serving_key.display()
            ))
            .args(UNTHROTTLED_CLIENT)
            .arg("--v=1");
        self.spawn("kube-scheduler", scheduler)?;
        // The scheduler knows no client CA, so the client certificate only
        // proves nothing; /readyz is open to anyone.
        let probe = self.dir.join("scheduler-probe.kubeconfig");
        kubeconfig::write(
            &probe,
            &format!("https://127.0.0.1:{scheduler_port}"),
            &self.pki.ca_cert,
            "scheduler-probe",
            &Credentials::ClientCertificate {
                cert: self.pki.admin_cert.clone(),
                key: self.pki.admin_key.clone(),
            },
        )?;

        let stages = self.dir.join("kwok-stages.yaml");
        fs::write(&stages, nodes::KWOK_STAGES)
            .with_context(|| format!("writing {}", stages.display()))?;
        for process in 0..kwoks {
            let mut kwok = Command::new(&self.binaries.kwok);
            kwok.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
                .arg(format!("--config={}", stages.display()))
                .arg(format!(
                    "--manage-nodes-with-annotation-selector={}=fake",
                    nodes::NODE_ANNOTATION
                ))
                .arg(format!("--cidr={}", nodes::KWOK_FALLBACK_CIDR))
                .arg(format!("--node-ip={}", nodes::KWOK_FALLBACK_NODE_IP))
                // Renew each Node's Lease (every 10 s), as a kubelet does: the
                // node lifecycle controller marks a Node without fresh
                // heartbeats NotReady after 50 s, and its pods not ready.
                .arg("--node-lease-duration-seconds=40")
                // kwok also reads ~/.kwok/kwok.yaml; a private HOME keeps a
                // user's kwok configuration out of our cluster.
                .env("HOME", &self.dir);
            if let Some(selector) = nodes::kwok_node_selector(process, kwoks, count) {
                kwok.arg(format!("--manage-nodes-with-label-selector={selector}"));
            }
            // One name for all (the benchmark adds up CPU by name), a log each.
            let log = if kwoks == 1 {
                "kwok".to_string()
            } else {
                format!("kwok-{process}")
            };
            self.spawn_logged("kwok", &log, kwok)?;
        }

        let kubeconfig = self.kubeconfig.clone();
        block_on_private(|| async move {
            let client = kube::Client::try_from(kubeconfig::load(&kubeconfig).await?)?;
            nodes::create_nodes(&client, count).await
        })
        .context("creating the simulated nodes")?;
        self.nodes = (0..count).map(nodes::node_name).collect();
        Ok(probe)
    }

    fn spawn(&self, name: &str, command: Command) -> Result<()> {
        self.spawn_logged(name, name, command)
    }

    /// [`Self::spawn`] with the log in `<log_name>.log`: several processes
    /// of one name each have their own log.
    fn spawn_logged(&self, name: &str, log_name: &str, command: Command) -> Result<()> {
        let log = self.dir.join(format!("{log_name}.log"));
        let child =
            Supervised::spawn(name, command, &log).with_context(|| format!("starting {name}"))?;
        self.processes
            .lock()
            .map_err(|_| anyhow!("process list lock poisoned"))?
            .push(child);
        Ok(())
    }

    /// Polls `ready` until it says yes, failing early if a process died.
    fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut ready: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last_error = String::new();
        loop {
            match ready() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(err) => last_error = format!("{err:#}"),
            }
            let mut processes = self
                .processes
                .lock()
                .map_err(|_| anyhow!("process list lock poisoned"))?;
            for child in processes.iter_mut() {
                if let Some(status) = child.exit_status() {
                    bail!(
                        "{} exited ({status}) while waiting for {what} to become ready. \
                         Its last output:\n{}",
                        child.name(),
                        child.log_tail(30)
                    );
                }
            }
            if Instant::now() > deadline {
                let tail = processes
                    .iter()
                    .map(|child| format!("--- {} ---\n{}", child.name(), child.log_tail(15)))
                    .collect::<Vec<_>>()
                    .join("\n");
                bail!(
                    "{what} was not ready after {timeout:?} (last error: {last_error}). \
                     Recent output:\n{tail}"
                );
            }
            drop(processes);
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The API server's URL, e.g. `https://127.0.0.1:39017`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The directory holding certificates, kubeconfigs, etcd data and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The binaries this control plane runs (kubectl included).
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// Names of the simulated nodes (empty when started with `nodes: 0`).
    pub fn node_names(&self) -> &[String] {
        &self.nodes
    }

    /// Process ids of the running components, by name.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes
            .lock()
            .map(|procs| {
                procs
                    .iter()
                    .map(|p| (p.name().to_string(), p.pid()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A client configuration for the admin user.
    pub async fn config(&self) -> Result<kube::Config> {
        kubeconfig::load(&self.kubeconfig).await
    }

    /// A client for the admin user, bound to the caller's tokio runtime.
    pub async fn client(&self) -> Result<kube::Client> {
        Ok(kube::Client::try_from(self.config().await?)?)
    }

    /// Writes a kubeconfig that impersonates `user` (and `groups`), so RBAC
    /// applies as it would to that user. Returns its path.
    pub fn kubeconfig_impersonating(&self, user: &str, groups: &[&str]) -> Result<PathBuf> {
        let path = self
            .dir
            .join(format!("impersonate-{}.kubeconfig", sanitize(user)));
        kubeconfig::write(
            &path,
            &self.server,
            &self.pki.ca_cert,
            user,
            &Credentials::Impersonate {
                cert: self.pki.admin_cert.clone(),
                key: self.pki.admin_key.clone(),
                user: user.to_string(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
            },
        )?;
        Ok(path)
    }

    /// Writes a kubeconfig that authenticates as the ServiceAccount
    /// `namespace/name` with a one-hour bound token (creating the account if
    /// it does not exist). Returns its path.
    pub async fn kubeconfig_for_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PathBuf> {
        let client = self.client().await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
        if accounts.get_opt(name).await?.is_none() {
            let mut account = ServiceAccount::default();
            account.metadata.name = Some(name.to_string());
            accounts.create(&PostParams::default(), &account).await?;
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await?
            .status
            .map(|status| status.token)
            .ok_or_else(|| anyhow!("TokenRequest for {namespace}/{name} returned no token"))?;
        let path = self.dir.join(format!(
            "sa-{}-{}.kubeconfig",
            sanitize(namespace),
            sanitize(name)
        ));
        kubeconfig::write(
            &path,
            &self.server,
            &self.pki.ca_cert,
            &format!("system:serviceaccount:{namespace}:{name}"),
            &Credentials::Token(token),
        )?;
        Ok(path)
    }

    /// Stops every process (newest first) and removes the directory. Safe to
    /// call more than once.
    pub fn shutdown(&self) {
        if let Ok(mut processes) = self.processes.lock() {
            while let Some(mut child) = processes.pop() {
                child.stop(Duration::from_secs(5));
            }
        }
        if !self.keep_dir {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// A minimal HTTP/1.0 GET on loopback (for etcd's `/health`).
fn http_get_plain(port: u16, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body)
}

/// A minimal HTTP/1.0 POST of a JSON `body` on loopback (for etcd's v3
/// gateway); returns the response body.
fn http_post_plain(port: u16, path: &str, body: &str) -> Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer
        .split_once("\r\n\r\n")
        .map_or(answer.as_str(), |(_, body)| body)
        .to_string())
}

/// Runs an async check on a fresh single-threaded runtime in its own thread,
/// so callers may be inside or outside a tokio runtime. A check that takes
/// more than 5 s counts as "not yet".
fn on_private_runtime<F, Fut>(make: F) -> Result<bool>
where
    F: FnOnce() -> Fut + Send,
    Fut: std::future::Future<Output = Result<bool>>,
{
    block_on_private(|| async {
        tokio::time::timeout(Duration::from_secs(5), make())
            .await
            .unwrap_or_else(|_| Ok(false))
    })
}

/// Runs async work to completion on a fresh single-threaded runtime in its
/// own thread (callers may be inside or outside a tokio runtime).
fn block_on_private<T, F, Fut>(make: F) -> Result<T>
where
    T: Send,
    F: FnOnce() -> Fut + Send,
    Fut: std::future::Future<Output = Result<T>>,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(make())
            })
            .join()
            .map_err(|_| anyhow!("work on the private runtime panicked"))?
    })
}

/// Removes directories of control planes whose process is gone (killed
/// without a chance to clean up). Every start calls it.
pub fn remove_stale_dirs() {
    remove_stale_dirs_in(&std::env::temp_dir());
}

/// [`remove_stale_dirs`] for control planes started with `TMPDIR=parent`.
pub fn remove_stale_dirs_in(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && pid != std::process::id()
            && !process::is_alive(pid)
        {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
