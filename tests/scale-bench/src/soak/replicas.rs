//! The soak's host replicas: each a `wasm-operator run --shards` process
//! (`controllers::Running`) that reaches the API server only through its
//! own fault proxy ([`e2e_tests::faults::ApiProxy`], plain HTTP, a
//! kubeconfig of its own), so the proxy's log says which replica sent each
//! request. A replica is restarted by the harness after a kill or SIGTERM
//! (each incarnation logs to its own directory); an exit the harness did
//! not cause is reported by [`ReplicaSlot::exited_unasked`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use e2e_tests::faults::ApiProxy;

use crate::controllers::{Built, Running, Sharding};

/// Lease timing short enough for the faults to matter.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct LeaseTiming {
    /// `--leader-elect-lease-duration`, seconds.
    pub duration_secs: u64,
    /// `--leader-elect-renew-deadline`, seconds.
    pub renew_deadline_secs: u64,
    /// `--leader-elect-retry-period`, seconds.
    pub retry_secs: u64,
}

/// The soak's default: lease 4 s, renew deadline 3 s, retry 1 s.
pub const LEASE: LeaseTiming = LeaseTiming {
    duration_secs: 4,
    renew_deadline_secs: 3,
    retry_secs: 1,
};

/// How to start a replica.
#[derive(Clone)]
pub struct ReplicaSpec {
    /// The host, with `run --plugin <the soak's plugin file>`.
    pub built: Built,
    /// The namespace of the objects and the Leases.
    pub namespace: String,
    /// `--shards`.
    pub shards: u32,
    /// `--workers` of each replica.
    pub workers: u16,
    /// Lease timing.
    pub lease: LeaseTiming,
    /// Logs go to `<log_dir>/replica-<i>-<incarnation>/`.
    pub log_dir: PathBuf,
}

/// One replica: its proxy, its kubeconfig and its process (none while
/// the harness has it down).
pub struct ReplicaSlot {
    /// Which replica, from 0.
    pub index: u32,
    /// Its fault proxy.
    pub proxy: Arc<ApiProxy>,
    kubeconfig: PathBuf,
    /// The process.
    pub running: Option<Running>,
    /// Stopped with SIGSTOP by the harness.
    pub paused: bool,
    /// Starts so far.
    pub incarnations: u32,
}

impl ReplicaSlot {
    /// A proxy to the API server `upstream` talks to and a kubeconfig
    /// naming it; the process is started by [`ReplicaSlot::start`].
    pub async fn new(index: u32, upstream: kube::Client, spec: &ReplicaSpec) -> Result<Self> {
        let proxy = Arc::new(ApiProxy::start(upstream).await?);
        let server = proxy.host_config(&spec.namespace)?.cluster_url.to_string();
        std::fs::create_dir_all(&spec.log_dir)?;
        let kubeconfig = spec.log_dir.join(format!("replica-{index}.kubeconfig"));
        write_kubeconfig(&kubeconfig, &server, &spec.namespace)?;
        Ok(Self {
            index,
            proxy,
            kubeconfig,
            running: None,
            paused: false,
            incarnations: 0,
        })
    }

    /// The replica's identity in the shard Leases.
    pub fn identity(&self) -> String {
        identity(self.index)
    }

    /// Starts a new incarnation of the process.
    pub fn start(&mut self, spec: &ReplicaSpec) -> Result<()> {
        self.incarnations += 1;
        let dir = spec
            .log_dir
            .join(format!("replica-{}-{}", self.index, self.incarnations));
        std::fs::create_dir_all(&dir)?;
        let mut built = spec.built.clone();
        for (flag, secs) in [
            ("--leader-elect-lease-duration", spec.lease.duration_secs),
            (
                "--leader-elect-renew-deadline",
                spec.lease.renew_deadline_secs,
            ),
            ("--leader-elect-retry-period", spec.lease.retry_secs),
        ] {
            built.leading_args.push(flag.to_owned());
            built.leading_args.push(format!("{secs}s"));
        }
        let running = Running::start(
            &built,
            &self.kubeconfig,
            &spec.namespace,
            spec.workers,
            &dir,
            Some(Sharding {
                replica: self.index,
                shards: spec.shards,
            }),
        )
        .with_context(|| format!("starting replica {}", self.index))?;
        self.running = Some(running);
        self.paused = false;
        Ok(())
    }

    /// SIGSTOP (`stop`) or SIGCONT of the replica's process group.
    pub fn signal_pause(&mut self, stop: bool) {
        if let Some(running) = &self.running {
            let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: signalling the process group the harness created.
            unsafe { libc::kill(-(running.pid() as libc::pid_t), signal) };
            self.paused = stop;
        }
    }

    /// `Some(what)` when the process exited without the harness asking
    /// (the slot is emptied: the caller restarts it).
    pub fn exited_unasked(&mut self) -> Option<String> {
        let running = self.running.as_mut()?;
        let err = running.check_alive().err()?;
        self.running = None;
        Some(format!("{err:#}"))
    }

    /// The end of the current incarnation's log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.running
            .as_ref()
            .map(|r| r.log_tail(lines))
            .unwrap_or_default()
    }

    /// The current incarnation's log file.
    pub fn log_path(&self) -> Option<&Path> {
        self.running.as_ref().map(|r| r.log.as_path())
    }
}

/// A replica's identity in the shard Leases (as [`Sharding::identity`]).
pub fn identity(index: u32) -> String {
    Sharding {
        replica: index,
        shards: 0,
    }
    .identity()
}

/// A kubeconfig for plain HTTP to `server` (the proxy authenticates).
fn write_kubeconfig(path: &Path, server: &str, namespace: &str) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: {server}\n\
         users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    \
         user: proxy\n    namespace: {namespace}\ncurrent-context: proxy\n"
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// How long a SIGTERM may take before the harness SIGKILLs (the host's
/// documented bound is 10 s; the report has each stop's time).
pub const STOP_GRACE: Duration = Duration::from_secs(20);
