//! The fault catalogue and its injector. Every [`FaultKind`] is injected
//! from a shuffled deck (all kinds once, in a random order, then again), so
//! a run of at least as many faults as kinds injects each at least once.
//! A fault starts every `--fault-interval` (± a quarter); faults overlap
//! when one outlasts the interval, except that at most one replica is
//! killed, stopped or terminated at a time (a kind whose target is busy
//! waits for a later slot) and one control-plane fault runs at a time.
//! When a fault ends, the checker starts timing how long the objects not
//! exact at that moment take to become exact ([`super::State::fault_ended`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use axum::http::Method;
use e2e_tests::faults::{Dropped, Failure};
use local_control_plane::cluster::Stop;
use serde::Serialize;

use super::Ctx;
use super::replicas::{ReplicaSlot, STOP_GRACE};
use super::rng::Rng;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL of a replica, restarted 1–3 s later.
    ReplicaKill,
    /// SIGSTOP of a replica for the lease duration plus 1–3 s, then SIGCONT.
    ReplicaStop,
    /// SIGTERM of a replica (its shards handed over), restarted 1 s after it exits.
    ReplicaTerm,
    /// kube-apiserver stopped (SIGTERM or SIGKILL), down 1–3 s, started again.
    ApiserverRestart,
    /// SIGSTOP of kube-apiserver for 2–5 s, then SIGCONT.
    ApiserverStop,
    /// etcd compacted to its current revision.
    EtcdCompaction,
    /// 429 with `Retry-After` 1, 5 or 3600 s, before forwarding.
    Throttle429,
    /// 500 before forwarding.
    Error500,
    /// 503 before forwarding.
    Error503,
    /// 504 before forwarding.
    Error504,
    /// 500 after forwarding (the request was made, the client told it failed).
    Error500After,
    /// 503 after forwarding.
    Error503After,
    /// 504 after forwarding.
    Error504After,
    /// 100–1500 ms added to every request for 4–10 s.
    Latency,
    /// Connections dropped without an answer, before forwarding.
    DropBefore,
    /// Connections dropped after forwarding (the request was made, its answer lost).
    DropAfter,
    /// Every open watch ends with an error mid-stream.
    TruncateWatches,
    /// Every open watch ends cleanly.
    CutWatches,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 18] = [
        FaultKind::ReplicaKill,
        FaultKind::ReplicaStop,
        FaultKind::ReplicaTerm,
        FaultKind::ApiserverRestart,
        FaultKind::ApiserverStop,
        FaultKind::EtcdCompaction,
        FaultKind::Throttle429,
        FaultKind::Error500,
        FaultKind::Error503,
        FaultKind::Error504,
        FaultKind::Error500After,
        FaultKind::Error503After,
        FaultKind::Error504After,
        FaultKind::Latency,
        FaultKind::DropBefore,
        FaultKind::DropAfter,
        FaultKind::TruncateWatches,
        FaultKind::CutWatches,
    ];

    /// Its name in reports.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{self:?}"))
    }

    fn is_replica_process(self) -> bool {
        matches!(
            self,
            FaultKind::ReplicaKill | FaultKind::ReplicaStop | FaultKind::ReplicaTerm
        )
    }

    fn is_control_plane(self) -> bool {
        matches!(
            self,
            FaultKind::ApiserverRestart | FaultKind::ApiserverStop | FaultKind::EtcdCompaction
        )
    }
}

/// One injected fault.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    /// Its kind.
    pub kind: FaultKind,
    /// What it hit (`replica-1`, `proxies 0,2`, `kube-apiserver`, …) and how.
    pub detail: String,
    /// Seconds since the soak started.
    pub start_secs: f64,
    /// When it ended (the replica running again, the proxy healthy again).
    pub end_secs: f64,
    /// From its end until every object not exact then was exact, seconds
    /// (`None`: not within the run).
    pub convergence_secs: Option<f64>,
    /// Set when the fault itself could not be carried out.
    pub error: Option<String>,
}

/// Injects faults from the deck until `until`, one every `interval` (±25%).
pub async fn inject_until(
    ctx: Arc<Ctx>,
    mut rng: Rng,
    interval: Duration,
    until: Instant,
    only: Vec<FaultKind>,
) {
    let kinds: Vec<FaultKind> = if only.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        only
    };
    let mut deck: Vec<FaultKind> = Vec::new();
    let mut tasks = Vec::new();
    while Instant::now() < until {
        if deck.is_empty() {
            deck = kinds.clone();
            rng.shuffle(&mut deck);
        }
        let available = deck.iter().position(|k| target_free(&ctx, *k));
        if let Some(i) = available {
            let kind = deck.remove(i);
            let ctx = ctx.clone();
            let task_rng = rng.fork();
            tasks.push(tokio::spawn(
                async move { inject(ctx, kind, task_rng).await },
            ));
        }
        let jitter = 0.75 + rng.unit() * 0.5;
        let wait = interval.mul_f64(jitter);
        let left = until.saturating_duration_since(Instant::now());
        tokio::time::sleep(wait.min(left)).await;
    }
    for task in tasks {
        let _ = task.await;
    }
}

fn target_free(ctx: &Ctx, kind: FaultKind) -> bool {
    if kind.is_replica_process() {
        ctx.process_fault.try_lock().is_ok()
    } else if kind.is_control_plane() {
        ctx.control_plane_fault.try_lock().is_ok()
    } else {
        ctx.proxy_faults.iter().any(|m| m.try_lock().is_ok())
    }
}

/// Injects one fault of `kind`, records it, and tells the checker when it ends.
async fn inject(ctx: Arc<Ctx>, kind: FaultKind, mut rng: Rng) {
    let start = Instant::now();
    let index = ctx.state().fault_started(kind, ctx.clock.secs(start));
    let outcome = if kind.is_replica_process() {
        let _busy = ctx.process_fault.lock().await;
        replica_fault(&ctx, kind, &mut rng).await
    } else if kind.is_control_plane() {
        let _busy = ctx.control_plane_fault.lock().await;
        control_plane_fault(&ctx, kind, &mut rng).await
    } else {
        proxy_fault(&ctx, kind, &mut rng).await
    };
    let end = Instant::now();
    let (detail, error) = match outcome {
        Ok(detail) => (detail, None),
        Err(err) => (String::new(), Some(format!("{err:#}"))),
    };
    eprintln!(
        "chaos-soak: {:>7.1} s {} {detail}{} ({:.1} s)",
        ctx.clock.secs(start),
        kind.name(),
        error
            .as_deref()
            .map(|e| format!(" FAILED: {e}"))
            .unwrap_or_default(),
        (end - start).as_secs_f64()
    );
    ctx.state()
        .fault_ended(index, detail, error, ctx.clock.secs(end));
}

async fn replica_fault(ctx: &Ctx, kind: FaultKind, rng: &mut Rng) -> Result<String> {
    let replica = rng.between(0, ctx.slots.len() as u64 - 1) as usize;
    let slot = ctx.slots[replica].clone();
    let mut slot = slot.lock().await;
    let name = slot.identity();
    match kind {
        FaultKind::ReplicaKill => {
            let restart = Duration::from_millis(rng.between(1000, 3000));
            if let Some(mut running) = slot.running.take() {
                tokio::task::block_in_place(|| running.kill());
            }
            tokio::time::sleep(restart).await;
            slot.start(&ctx.spec)?;
            Ok(format!(
                "{name}: SIGKILL, restarted {:.1} s later",
                restart.as_secs_f64()
            ))
        }
        FaultKind::ReplicaStop => {
            let lease = Duration::from_secs(ctx.spec.lease.duration_secs);
            let stopped = lease + Duration::from_millis(rng.between(1000, 3000));
            slot.signal_pause(true);
            tokio::time::sleep(stopped).await;
            slot.signal_pause(false);
            Ok(format!(
                "{name}: SIGSTOP for {:.1} s, then SIGCONT",
                stopped.as_secs_f64()
            ))
        }
        FaultKind::ReplicaTerm => {
            let took = terminate(&mut slot).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            slot.start(&ctx.spec)?;
            ctx.state().stop_times_secs.push(took);
            Ok(format!(
                "{name}: SIGTERM, exited in {took:.1} s, restarted 1 s later"
            ))
        }
        _ => Err(anyhow!("{kind:?} is not a replica fault")),
    }
}

/// SIGTERM, SIGKILL after [`STOP_GRACE`]; returns how long it took.
async fn terminate(slot: &mut ReplicaSlot) -> Result<f64> {
    let running = slot.running.take().context("the replica was not running")?;
    let started = Instant::now();
    tokio::task::spawn_blocking(move || running.stop(STOP_GRACE)).await?;
    Ok(started.elapsed().as_secs_f64())
}

async fn control_plane_fault(ctx: &Ctx, kind: FaultKind, rng: &mut Rng) -> Result<String> {
    let cp = ctx.cp.clone();
    match kind {
        FaultKind::ApiserverRestart => {
            let (how, how_name) = if rng.unit() < 0.5 {
                (Stop::Graceful, "SIGTERM")
            } else {
                (Stop::Kill, "SIGKILL")
            };
            let down = Duration::from_millis(rng.between(1000, 3000));
            let unreachable =
                tokio::task::spawn_blocking(move || cp.restart_apiserver(how, down)).await??;
            Ok(format!(
                "kube-apiserver: {how_name}, down {:.1} s, ready again {:.1} s after the stop",
                down.as_secs_f64(),
                unreachable.as_secs_f64()
            ))
        }
        FaultKind::ApiserverStop => {
            let pid = cp
                .pids()
                .into_iter()
                .find(|(name, _)| name == "kube-apiserver")
                .map(|(_, pid)| pid)
                .context("kube-apiserver is not running")?;
            let stopped = Duration::from_millis(rng.between(2000, 5000));
            // SAFETY: signalling the API server process this control plane started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
            tokio::time::sleep(stopped).await;
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
            Ok(format!(
                "kube-apiserver: SIGSTOP for {:.1} s",
                stopped.as_secs_f64()
            ))
        }
        FaultKind::EtcdCompaction => {
            let revision = tokio::task::spawn_blocking(move || cp.compact_etcd()).await??;
            Ok(format!("etcd compacted to revision {revision}"))
        }
        _ => Err(anyhow!("{kind:?} is not a control-plane fault")),
    }
}

/// Paths a proxy fault may hit (by suffix; empty: every request).
const PATHS: [&str; 4] = ["/pods", "/status", "/leases", ""];

async fn proxy_fault(ctx: &Ctx, kind: FaultKind, rng: &mut Rng) -> Result<String> {
    // One free proxy, or every free one a third of the time.
    let mut held = Vec::new();
    let all = rng.unit() < 1.0 / 3.0;
    let mut order: Vec<usize> = (0..ctx.proxy_faults.len()).collect();
    rng.shuffle(&mut order);
    for i in order {
        if let Ok(guard) = ctx.proxy_faults[i].clone().try_lock_owned() {
            held.push((i, guard));
            if !all {
                break;
            }
        }
    }
    if held.is_empty() {
        return Err(anyhow!("every proxy was busy"));
    }
    held.sort_by_key(|(i, _)| *i);
    let targets: Vec<usize> = held.iter().map(|(i, _)| *i).collect();
    let path = *rng.pick(&PATHS).unwrap_or(&"");
    let period = Duration::from_millis(rng.between(2000, 6000));
    let slots: Vec<_> = targets.iter().map(|&i| ctx.slots[i].clone()).collect();
    let mut proxies = Vec::new();
    for slot in &slots {
        proxies.push(slot.lock().await.proxy.clone());
    }
    let what = apply_proxy_fault(&proxies, kind, path, period, rng)?;
    if !period.is_zero() && !matches!(kind, FaultKind::TruncateWatches | FaultKind::CutWatches) {
        tokio::time::sleep(period).await;
    }
    if kind == FaultKind::Latency {
        for proxy in &proxies {
            proxy.set_latency(Duration::ZERO);
        }
    }
    let names: Vec<String> = targets.iter().map(|i| i.to_string()).collect();
    Ok(format!("proxies of replicas {}: {what}", names.join(",")))
}

fn apply_proxy_fault(
    proxies: &[Arc<e2e_tests::faults::ApiProxy>],
    kind: FaultKind,
    path: &str,
    period: Duration,
    rng: &mut Rng,
) -> Result<String> {
    let on = if path.is_empty() {
        "every request".to_owned()
    } else {
        format!("*{path}")
    };
    let secs = period.as_secs_f64();
    let status = |code: u16, after: bool, retry_after: Option<u64>| {
        let mut failure = Failure::new(code, Method::GET, path, period);
        failure.method = None;
        failure.after_forwarding = after;
        failure.retry_after_secs = retry_after;
        failure
    };
    let (what, failure) = match kind {
        FaultKind::Throttle429 => {
            let retry_after = *rng.pick(&[1u64, 5, 3600]).unwrap_or(&1);
            (
                format!("429 Retry-After {retry_after} s on {on} for {secs:.1} s"),
                Some(status(429, false, Some(retry_after))),
            )
        }
        FaultKind::Error500 | FaultKind::Error503 | FaultKind::Error504 => {
            let code = match kind {
                FaultKind::Error500 => 500,
                FaultKind::Error503 => 503,
                _ => 504,
            };
            (
                format!("{code} before forwarding on {on} for {secs:.1} s"),
                Some(status(code, false, None)),
            )
        }
        FaultKind::Error500After | FaultKind::Error503After | FaultKind::Error504After => {
            let code = match kind {
                FaultKind::Error500After => 500,
                FaultKind::Error503After => 503,
                _ => 504,
            };
            (
                format!("{code} after forwarding on {on} for {secs:.1} s"),
                Some(status(code, true, None)),
            )
        }
        _ => (String::new(), None),
    };
    if let Some(failure) = failure {
        for proxy in proxies {
            proxy.fail(failure.clone());
        }
        return Ok(what);
    }
    Ok(match kind {
        FaultKind::Latency => {
            let latency = Duration::from_millis(rng.between(100, 1500));
            for proxy in proxies {
                proxy.set_latency(latency);
            }
            format!("{} ms latency for {secs:.1} s", latency.as_millis())
        }
        FaultKind::DropBefore | FaultKind::DropAfter => {
            let after = kind == FaultKind::DropAfter;
            for proxy in proxies {
                proxy.drop_connections(Dropped {
                    method: None,
                    path_suffix: path.to_owned(),
                    until: Instant::now() + period,
                    after_forwarding: after,
                });
            }
            let when = if after { "after" } else { "before" };
            format!("connections dropped {when} forwarding on {on} for {secs:.1} s")
        }
        FaultKind::TruncateWatches => {
            for proxy in proxies {
                proxy.truncate_watches();
            }
            "watches truncated".to_owned()
        }
        FaultKind::CutWatches => {
            for proxy in proxies {
                proxy.cut_watches();
            }
            "watches cut".to_owned()
        }
        _ => return Err(anyhow!("{kind:?} is not a proxy fault")),
    })
}

#[cfg(test)]
mod tests {
    use super::FaultKind;

    #[test]
    fn every_kind_is_in_the_catalogue_once_with_a_kebab_name() {
        let mut names: Vec<String> = FaultKind::ALL.iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FaultKind::ALL.len());
        assert!(names.contains(&"replica-kill".to_owned()), "{names:?}");
        assert!(names.contains(&"error503-after".to_owned()), "{names:?}");
    }
}
