//! The controllers under test and how each is built and started as
//! its own process: the Wasm host (`wasm-operator run` with the replicaset
//! plugin in Rust, Python or JavaScript), the kube-rs peer and the controller-runtime peer — all with the
//! same flags (`--namespace`, `--workers`, `--metrics-addr`), the admin
//! kubeconfig in `KUBECONFIG`, and their output in a log file.

use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use local_control_plane::process::Supervised;

use crate::artifacts::{self, Profile};
use crate::metrics;
use wasm_artifacts::Language;

/// A controller the benchmark can run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, serde::Serialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ControllerKind {
    /// `wasm-operator run` with the replicaset plugin (Wasm).
    Host,
    /// `tests/peers/kube-rs`: kube-rs with the replicaset logic compiled in.
    KubeRs,
    /// `wasm-operator run` with the replicaset plugin in Python (`plugins/python`).
    HostPython,
    /// `host-python` with `--no-plugin-call-turns`: beside `host-python`,
    /// what the Python plugin's calls taking turns saves.
    HostPythonNoTurns,
    /// `wasm-operator run` with the replicaset plugin in JavaScript (`plugins/js`).
    HostJs,
    /// `wasm-operator run` with the replicaset plugin in Go (`plugins/go`).
    HostGo,
    /// `tests/peers/controller-runtime`: Go, controller-runtime.
    ControllerRuntime,
    /// Another build of the host with the Rust replicaset plugin: the
    /// executable named by [`BASELINE_HOST_VAR`] (e.g. a release build of
    /// an older commit), to compare two builds side by side in one run.
    HostBaseline,
    /// `host` with its log off (`RUST_LOG=off`): beside `host`, the CPU
    /// its logs at the default level cost.
    HostSilent,
    /// `host` logging at debug (`RUST_LOG=debug`: every reconcile's lines,
    /// as the host logged at info before issue 42): the CPU verbose logs cost.
    HostDebug,
    /// `tests/peers/kube-rs --floor`: no logic, only the writes converging
    /// needs (a create per pod, one Event per scale, one final status per
    /// object), as fast as the API server takes them.
    Floor,
}

/// The environment variable naming the executable of `host-baseline`.
pub const BASELINE_HOST_VAR: &str = "SCALE_BENCH_BASELINE_HOST";

impl ControllerKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ControllerKind::Host => "host",
            ControllerKind::KubeRs => "kube-rs",
            ControllerKind::HostPython => "host-python",
            ControllerKind::HostPythonNoTurns => "host-python-no-turns",
            ControllerKind::HostJs => "host-js",
            ControllerKind::HostGo => "host-go",
            ControllerKind::ControllerRuntime => "controller-runtime",
            ControllerKind::HostBaseline => "host-baseline",
            ControllerKind::HostSilent => "host-silent",
            ControllerKind::HostDebug => "host-debug",
            ControllerKind::Floor => "floor",
        }
    }

    /// The log filter this kind runs with (`RUST_LOG`), if not its default.
    pub fn log_filter(self) -> Option<&'static str> {
        match self {
            ControllerKind::HostSilent => Some("off"),
            ControllerKind::HostDebug => Some("debug"),
            _ => None,
        }
    }
}

impl ControllerKind {
    /// The Wasm host, whichever language its plugin is in.
    pub fn is_host(self) -> bool {
        matches!(
            self,
            ControllerKind::Host
                | ControllerKind::HostPython
                | ControllerKind::HostPythonNoTurns
                | ControllerKind::HostJs
                | ControllerKind::HostGo
                | ControllerKind::HostBaseline
                | ControllerKind::HostSilent
                | ControllerKind::HostDebug
        )
    }
}

impl fmt::Display for ControllerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A built controller: the program and the arguments before the common flags.
#[derive(Debug, Clone)]
pub struct Built {
    /// Which controller.
    pub kind: ControllerKind,
    /// The executable.
    pub program: PathBuf,
    /// Arguments that come first (`run --plugin …` for the host).
    pub leading_args: Vec<String>,
}

/// Builds `kind` (cargo with `profile`, or Go).
pub fn build(kind: ControllerKind, profile: Profile) -> Result<Built> {
    let (program, leading_args) = match kind {
        ControllerKind::Host
        | ControllerKind::HostPython
        | ControllerKind::HostPythonNoTurns
        | ControllerKind::HostJs
        | ControllerKind::HostGo
        | ControllerKind::HostBaseline
        | ControllerKind::HostSilent
        | ControllerKind::HostDebug => {
            let program = match kind {
                ControllerKind::HostBaseline => {
                    let path = std::env::var_os(BASELINE_HOST_VAR).with_context(|| {
                        format!(
                            "host-baseline runs the executable named by {BASELINE_HOST_VAR}; set it"
                        )
                    })?;
                    PathBuf::from(path)
                }
                _ => {
                    // The host has no compiler: it starts the compile
                    // helper beside it (a build of its own, so cargo does
                    // not unify the helper's Cranelift into the host).
                    artifacts::cargo_binary(
                        "wasm-operator-compile",
                        "wasm-operator-compile",
                        profile,
                    )?;
                    artifacts::cargo_binary("wasm-operator", "wasm-operator", profile)?
                }
            };
            let plugin = match kind {
                ControllerKind::HostPython | ControllerKind::HostPythonNoTurns => {
                    artifacts::language_plugin(Language::Python)?
                }
                ControllerKind::HostJs => artifacts::language_plugin(Language::JavaScript)?,
                ControllerKind::HostGo => artifacts::language_plugin(Language::Go)?,
                _ => artifacts::replicaset_plugin()?,
            };
            let mut args = vec![
                "run".to_owned(),
                "--plugin".to_owned(),
                plugin.display().to_string(),
            ];
            if kind == ControllerKind::HostPythonNoTurns {
                args.push("--no-plugin-call-turns".to_owned());
            }
            (program, args)
        }
        ControllerKind::KubeRs => (
            artifacts::cargo_binary("kube-rs-peer", "kube-rs-peer", profile)?,
            Vec::new(),
        ),
        ControllerKind::ControllerRuntime => (artifacts::controller_runtime_peer()?, Vec::new()),
        ControllerKind::Floor => (
            artifacts::cargo_binary("kube-rs-peer", "kube-rs-peer", profile)?,
            vec!["--floor".to_owned()],
        ),
    };
    Ok(Built {
        kind,
        program,
        leading_args,
    })
}

/// One replica of several that split the work into shards.
#[derive(Debug, Clone, Copy)]
pub struct Sharding {
    /// Which replica, from 0.
    pub replica: u32,
    /// The host's `--shards`.
    pub shards: u32,
}

impl Sharding {
    /// The replica's identity in the shard Leases.
    pub fn identity(self) -> String {
        format!("replica-{}", self.replica)
    }
}

/// A running controller process.
pub struct Running {
    /// Which controller.
    pub kind: ControllerKind,
    /// Where its `/metrics` is served.
    pub metrics_addr: SocketAddr,
    /// Its log file.
    pub log: PathBuf,
    process: Supervised,
}

impl Running {
    /// Starts `built` against the cluster of `kubeconfig`, watching
    /// `namespace`; with `sharding`, as one replica of several sharing the
    /// work (the host's `--shards`, its shard Leases in `namespace`).
    pub fn start(
        built: &Built,
        kubeconfig: &Path,
        namespace: &str,
        workers: u16,
        log_dir: &Path,
        sharding: Option<Sharding>,
    ) -> Result<Self> {
        let metrics_addr = free_local_addr()?;
        let mut cmd = match wrapper()? {
            Some(mut wrapper) => {
                let mut cmd = Command::new(wrapper.remove(0));
                cmd.args(wrapper).arg(&built.program);
                cmd
            }
            None => Command::new(&built.program),
        };
        cmd.args(&built.leading_args)
            .args(["--namespace", namespace])
            .args(["--workers", &workers.to_string()])
            .args(["--metrics-addr", &metrics_addr.to_string()])
            .env("KUBECONFIG", kubeconfig)
            // Each controller logs at its own default level and runs as
            // it would in a container: no backtrace capture inherited from
            // a developer's shell (anyhow captures one per error with it).
            .env_remove("RUST_LOG")
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE");
        // To look into a run: the hosts' log filter (e.g.
        // `info,wasm_operator::controller::reconcile=debug`).
        if let Ok(filter) = std::env::var("SCALE_BENCH_HOST_LOG") {
            cmd.env("RUST_LOG", filter);
        }
        if let Some(filter) = built.kind.log_filter() {
            cmd.env("RUST_LOG", filter);
        }
        let name = match sharding {
            Some(sharding) => {
                if !built.kind.is_host() {
                    bail!(
                        "{} has no shards: only the host runs as several replicas",
                        built.kind
                    );
                }
                cmd.args(["--shards", &sharding.shards.to_string()])
                    .args(["--leader-elect-namespace", namespace])
                    .args(["--leader-elect-identity", &sharding.identity()]);
                format!("{}-{}", built.kind, sharding.identity())
            }
            None => built.kind.name().to_owned(),
        };
        if built.kind.is_host() {
            // As a pod starts with an emptyDir for its precompiled plugins:
            // the host compiles the plugin when it starts.
            // Each replica has its own, as each pod has its own emptyDir.
            let precompiled = match sharding {
                Some(sharding) => log_dir.join(format!("precompiled-{}", sharding.identity())),
                None => log_dir.join("precompiled"),
            };
            let _ = std::fs::remove_dir_all(&precompiled);
            cmd.env("WASM_OPERATOR_PRECOMPILED_DIR", &precompiled);
        }
        let log = log_dir.join(format!("{name}.log"));
        let process = Supervised::spawn(&name, cmd, &log)
            .with_context(|| format!("starting {}", built.program.display()))?;
        Ok(Self {
            kind: built.kind,
            metrics_addr,
            log,
            process,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// SIGKILL: a replica that crashes, with no chance to hand anything over.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// The shards this host holds in any phase (`wasm_operator_shard_owned{shard}`).
    pub async fn held_shards(&mut self) -> Result<std::collections::BTreeSet<u32>> {
        self.check_alive()?;
        let samples = metrics::parse(&metrics::fetch(self.metrics_addr).await?)?;
        Ok(samples
            .iter()
            .filter(|s| s.metric == metrics::HOST_SHARD_OWNED && metrics::number(s) == Some(1.0))
            .filter_map(|s| s.labels.get("shard")?.parse().ok())
            .collect())
    }

    /// Shards whose Lease this host holds and reconciles
    /// (`wasm_operator_shards_owned`), 0 when it does not report them.
    pub async fn shards_owned(&mut self) -> Result<u64> {
        self.check_alive()?;
        let samples = metrics::parse(&metrics::fetch(self.metrics_addr).await?)?;
        Ok(metrics::sum(&samples, metrics::HOST_SHARDS_OWNED).unwrap_or(0.0) as u64)
    }

    /// Fails with the end of its log if the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.process.exit_status() {
            bail!(
                "{} exited ({status}); the end of its log ({}):\n{}",
                self.kind,
                self.log.display(),
                self.process.log_tail(30)
            );
        }
        Ok(())
    }

    /// Waits until its `/metrics` reports a reconcile count and, for the
    /// host, its `/readyz` says ready: the plugin compiled and serving (an
    /// interpreter-sized plugin compiles for seconds at start, which must
    /// not fall into the measured window).
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            let ready = match metrics::fetch_reconciles(self.metrics_addr).await {
                Ok(_) if self.kind.is_host() && !metrics::is_ready(self.metrics_addr).await => {
                    Err(anyhow::anyhow!("/readyz is not ready yet"))
                }
                other => other,
            };
            match ready {
                Ok(_) => return Ok(()),
                Err(err) if Instant::now() > deadline => {
                    bail!(
                        "{} did not serve its reconcile count within {timeout:?} ({err:#}); \
                         the end of its log:\n{}",
                        self.kind,
                        self.process.log_tail(30)
                    )
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Reconciles so far.
    pub async fn reconciles(&mut self) -> Result<u64> {
        self.check_alive()?;
        metrics::fetch_reconciles(self.metrics_addr).await
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(mut self, grace: Duration) {
        self.process.stop(grace);
    }
}

/// The environment variable naming a command every controller runs under,
/// split on whitespace (a profiler: `heaptrack -o /tmp/heap`, `perf record
/// -g -o /tmp/perf.data`). Its figures are then the wrapper's process's.
pub const WRAPPER_VAR: &str = "SCALE_BENCH_WRAPPER";

fn wrapper() -> Result<Option<Vec<String>>> {
    match std::env::var(WRAPPER_VAR) {
        Ok(value) => {
            let words: Vec<String> = value.split_whitespace().map(str::to_owned).collect();
            if words.is_empty() {
                bail!("{WRAPPER_VAR} is set but empty: name a command or unset it");
            }
            Ok(Some(words))
        }
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(err) => bail!("{WRAPPER_VAR}: {err}"),
    }
}

/// A loopback address with a port free right now.
fn free_local_addr() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?)
}
