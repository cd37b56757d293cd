//! `wasm-operator run` as a process of its own, under watch: for tests that
//! need what only a separate process shows (its peak RSS from
//! `/proc/<pid>/status`, when its probes bind, its raw log).
//!
//! From its start, a watcher task polls `/healthz` every 200 ms and reads
//! the process's `VmRSS`; after the first 200 every other answer counts as
//! a liveness failure, and an RSS over the watchdog's limit kills the
//! process at once (SIGKILL, by its pid), so a host that reads an endless
//! answer whole stops there instead of taking the machine's memory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What the watcher saw.
#[derive(Default)]
struct Seen {
    healthy_at: Mutex<Option<Duration>>,
    failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
    killed_at_rss: AtomicU64,
    exited: AtomicBool,
}

/// A running `wasm-operator run` process.
pub struct WatchedHost {
    /// Its name (`POD_NAME`).
    pub name: String,
    /// Its `/metrics` … `/readyz` address.
    pub addr: SocketAddr,
    child: tokio::process::Child,
    pid: u32,
    log: PathBuf,
    started: Instant,
    seen: Arc<Seen>,
    watcher: tokio::task::JoinHandle<()>,
}

/// A `/proc/<pid>/status` field given in kB, in bytes.
pub fn proc_status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
}

/// `GET path` on `addr` (HTTP/1.1, `Connection: close`): the status code
/// and body, `None` when nothing answered within 2 s.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let work = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let text = String::from_utf8_lossy(&answer).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((code, body))
    };
    tokio::time::timeout(Duration::from_secs(2), work)
        .await
        .ok()
        .flatten()
}

impl WatchedHost {
    /// Starts `binary run --metrics-addr <free port> <args…>` with only
    /// `env` (plus `HOME` = `dir`) in its environment, its output appended
    /// to `dir/<name>.log`; the watchdog kills it above `rss_limit` bytes.
    pub fn start(
        binary: &Path,
        name: &str,
        dir: &Path,
        args: &[String],
        env: &[(&str, String)],
        rss_limit: u64,
    ) -> Result<Self> {
        let addr: SocketAddr = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
            probe.local_addr()?
        };
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let child = tokio::process::Command::new(binary)
            .arg("run")
            .arg("--metrics-addr")
            .arg(addr.to_string())
            .args(args)
            .env_clear()
            .env("HOME", dir)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let pid = child.id().context("no pid")?;
        let seen = Arc::new(Seen::default());
        let started = Instant::now();
        let watcher = tokio::spawn(watch(pid, addr, started, rss_limit, seen.clone()));
        Ok(Self {
            name: name.to_string(),
            addr,
            child,
            pid,
            log,
            started,
            seen,
            watcher,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How long after its start `/healthz` first answered 200 (waits up to `within`).
    pub async fn wait_healthy(&self, within: Duration) -> Result<Duration> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(at) = *self
                .seen
                .healthy_at
                .lock()
                .unwrap_or_else(|e| e.into_inner())
            {
                return Ok(at);
            }
            if Instant::now() > deadline {
                bail!(
                    "{}: /healthz did not answer 200 within {within:?} of the start; log:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET path` on its endpoint.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.addr, path).await
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self, within: Duration) -> Result<Duration> {
        let deadline = Instant::now() + within;
        loop {
            let answer = self.get("/readyz").await;
            if answer.as_ref().is_some_and(|(code, _)| *code == 200) {
                return Ok(self.started.elapsed());
            }
            if Instant::now() > deadline {
                bail!(
                    "{}: not ready within {within:?}: {answer:?}; log:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Its peak RSS so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        proc_status_bytes(self.pid, "VmHWM").unwrap_or(0)
    }

    /// Liveness failures after the first 200, and the last one.
    pub fn liveness_failures(&self) -> (u64, Option<String>) {
        (
            self.seen.failures.load(Ordering::Relaxed),
            self.seen
                .last_failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }

    /// Checks that it still runs, was never killed by the watchdog and
    /// answered every `/healthz` poll since its first 200.
    pub fn assert_alive_throughout(&mut self) -> Result<()> {
        let killed = self.seen.killed_at_rss.load(Ordering::Relaxed);
        if killed > 0 {
            bail!(
                "{}: killed by the watchdog at {} MiB RSS",
                self.name,
                killed >> 20
            );
        }
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{}: exited ({status}); log:\n{}",
                self.name,
                self.log_tail(40)
            );
        }
        let (failures, last) = self.liveness_failures();
        if failures > 0 {
            bail!(
                "{}: /healthz failed {failures} times after its first 200; last: {last:?}",
                self.name
            );
        }
        Ok(())
    }

    /// Everything it logged so far (lossy UTF-8).
    pub fn log_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = String::from_utf8_lossy(&self.log_bytes()).into_owned();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Stops it as Kubernetes does (SIGTERM) and waits up to `within` for
    /// it to exit; its exit status.
    pub async fn terminate(mut self, within: Duration) -> Result<std::process::ExitStatus> {
        self.watcher.abort();
        let pid = libc::pid_t::try_from(self.pid).context("pid")?;
        // SAFETY: `kill` only sends a signal to our own child process.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            anyhow::bail!(
                "SIGTERM to {}: {}",
                self.name,
                std::io::Error::last_os_error()
            );
        }
        tokio::time::timeout(within, self.child.wait())
            .await
            .with_context(|| format!("{} did not exit within {within:?} of SIGTERM", self.name))?
            .context("waiting for the host")
    }

    /// Kills it (SIGKILL): what a crash or a liveness restart does.
    pub async fn kill(mut self) {
        self.watcher.abort();
        let _ = self.child.kill().await;
    }
}

impl Drop for WatchedHost {
    fn drop(&mut self) {
        self.watcher.abort();
        let _ = self.child.start_kill();
    }
}

/// The watcher: the RSS watchdog (every 20 ms) beside the liveness polls
/// (every 200 ms; a poll may wait up to 2 s for its answer).
async fn watch(pid: u32, addr: SocketAddr, started: Instant, rss_limit: u64, seen: Arc<Seen>) {
    let watchdog = async {
        loop {
            let Some(rss) = proc_status_bytes(pid, "VmRSS") else {
                seen.exited.store(true, Ordering::Relaxed);
                return;
            };
            if rss > rss_limit {
                seen.killed_at_rss.store(rss, Ordering::Relaxed);
                // SAFETY: a signal to the child this watcher was started for.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let probes = async {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tick.tick().await;
            let answer = http_get(addr, "/healthz").await;
            let healthy = seen
                .healthy_at
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some();
            match answer {
                Some((200, _)) if !healthy => {
                    *seen.healthy_at.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(started.elapsed());
                }
                Some((200, _)) => {}
                other if healthy => {
                    seen.failures.fetch_add(1, Ordering::Relaxed);
                    *seen.last_failure.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("{:?} after {:?}", other, started.elapsed()));
                }
                _ => {}
            }
        }
    };
    tokio::select! {
        () = watchdog => {}
        () = probes => {}
    }
}
