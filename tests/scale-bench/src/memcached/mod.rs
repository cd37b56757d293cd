//! The Memcached benchmark (`memcached-bench`): the Wasm host serving the
//! Memcached example (`wasm-operator run --plugin-controllers`, the
//! memcached plugin declared by examples/memcached/controller.yaml) against
//! a controller-runtime operator doing the same work
//! (tests/peers/controller-runtime/cmd/memcached), in alternating rounds,
//! each run on a fresh control plane: convergence time, the controller's
//! CPU seconds and RSS, and its API requests (from the audit log of its
//! own ServiceAccount), then the medians and the ratios host ÷ peer.
//!
//! With `--compare shadow` the rounds alternate the host alone and the host
//! with the same plugin declared as its shadow (`spec.shadow`, from a
//! ConfigMap of its own), the ratios being host+shadow ÷ host: what a
//! shadow costs the serving path. Every run also reads the serving
//! reconciles' latency from the controller's
//! `controller_runtime_reconcile_time_seconds` (a shadow call is not a
//! reconcile: it is not in it).
//!
//! - [`run`](mod@run): one measured run.
//! - [`converge`]: when a Memcached has converged.
//! - [`audit`]: the controller's requests from the audit log.

pub mod audit;
pub mod converge;
pub mod run;

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

/// Which controller a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// `wasm-operator run --plugin-controllers` with the memcached plugin.
    Host,
    /// The controller-runtime Memcached operator.
    Peer,
    /// The host with the memcached plugin, and the same plugin as its
    /// shadow (`spec.shadow`).
    HostShadow,
}

impl Side {
    /// The name in tables and logs.
    pub fn name(self) -> &'static str {
        match self {
            Side::Host => "host",
            Side::Peer => "controller-runtime",
            Side::HostShadow => "host+shadow",
        }
    }

    /// Whether this side is the host (alone or with a shadow).
    pub fn is_host(self) -> bool {
        matches!(self, Side::Host | Side::HostShadow)
    }
}

/// What a run of rounds compares: `measured` against `against`, run in
/// that order in each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison {
    /// The side whose figures are the numerators.
    pub measured: Side,
    /// The side it is divided by.
    pub against: Side,
}

impl Comparison {
    /// The host against the controller-runtime peer.
    pub const PEER: Self = Self {
        measured: Side::Host,
        against: Side::Peer,
    };
    /// The host with a shadow against the host alone, the host alone first.
    pub const SHADOW: Self = Self {
        measured: Side::HostShadow,
        against: Side::Host,
    };

    /// The sides in the order each round runs them.
    fn order(self) -> [Side; 2] {
        if self == Self::SHADOW {
            [Side::Host, Side::HostShadow]
        } else {
            [self.measured, self.against]
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The built controllers.
#[derive(Debug, Clone)]
pub struct Controllers {
    /// The host's executable (its compile helper beside it).
    pub host: PathBuf,
    /// The memcached plugin (`wasm32-wasip2`, release).
    pub plugin: PathBuf,
    /// The controller-runtime peer's executable.
    pub peer: PathBuf,
}

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// N: how many Memcacheds.
    pub objects: usize,
    /// `spec.size` of each.
    pub size: u32,
    /// `--workers` of both controllers.
    pub workers: u16,
    /// Simulated nodes.
    pub nodes: usize,
    /// Creates in flight at once.
    pub create_concurrency: usize,
    /// Give up on a run after this long.
    pub converge_timeout: Duration,
    /// Wait this long after the controller serves before measuring.
    pub settle: Duration,
    /// Where the controllers' logs and the audit logs go.
    pub log_dir: PathBuf,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The controller.
    pub side: Side,
    /// Which round, from 0.
    pub round: usize,
    /// N.
    pub objects: usize,
    /// `spec.size`.
    pub size: u32,
    /// `--workers`.
    pub workers: u16,
    /// 1-minute load average when the run started, and the CPU count.
    pub load_at_start: (f64, usize),
    /// First create → the last create answered, seconds.
    pub created_secs: f64,
    /// First create → every Memcached converged, seconds.
    pub converge_secs: f64,
    /// The controller's CPU seconds during convergence.
    pub cpu_converge_secs: f64,
    /// RSS before any Memcached, MiB.
    pub rss_idle_mib: f64,
    /// RSS when converged, MiB.
    pub rss_converged_mib: f64,
    /// Peak RSS (VmHWM) when converged, MiB.
    pub rss_peak_mib: f64,
    /// The controller's writes during convergence (audit log).
    pub writes: u64,
    /// Its reads (get, list, watch) during convergence.
    pub reads: u64,
    /// Its requests by `"verb resource"`.
    pub requests: audit::Counts,
    /// CPU seconds of the control plane's processes and the harness.
    pub cpu_others_converge_secs: BTreeMap<String, f64>,
    /// The serving reconciles' latency when converged (all reconciles
    /// since the controller started), `None` when it has no such metric.
    pub reconcile: Option<ReconcileLatency>,
    /// The shadow's calls by outcome (`agreed`, `dropped`, …), with a shadow.
    pub shadow_outcomes: BTreeMap<String, u64>,
}

/// The serving reconciles' latency, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ReconcileLatency {
    /// Reconciles.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median (interpolated within its bucket).
    pub p50_ms: f64,
    /// 99th percentile (interpolated within its bucket).
    pub p99_ms: f64,
}

/// Runs `rounds` rounds of the two sides of `comparison`, alternating;
/// each run's table row goes to stderr as it ends.
pub async fn run_rounds(
    controllers: &Controllers,
    options: &Options,
    rounds: usize,
    comparison: Comparison,
) -> Result<Vec<RunResult>> {
    let mut results = Vec::new();
    for round in 0..rounds {
        for side in comparison.order() {
            let result = run::run(side, controllers, options, round).await?;
            eprintln!("{}", table(std::slice::from_ref(&result)));
            results.push(result);
        }
    }
    Ok(results)
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    }
}

/// A figure of a run.
type Figure = fn(&RunResult) -> f64;

/// The measured figures of a run, by column.
const COLUMNS: [(&str, Figure); 9] = [
    ("converge s", |r| r.converge_secs),
    ("CPU s", |r| r.cpu_converge_secs),
    ("RSS idle MiB", |r| r.rss_idle_mib),
    ("RSS converged MiB", |r| r.rss_converged_mib),
    ("RSS peak MiB", |r| r.rss_peak_mib),
    ("writes", |r| r.writes as f64),
    ("reconcile mean ms", |r| {
        r.reconcile.map_or(f64::NAN, |l| l.mean_ms)
    }),
    ("reconcile p50 ms", |r| {
        r.reconcile.map_or(f64::NAN, |l| l.p50_ms)
    }),
    ("reconcile p99 ms", |r| {
        r.reconcile.map_or(f64::NAN, |l| l.p99_ms)
    }),
];

/// One row per run.
pub fn table(results: &[RunResult]) -> String {
    let mut out = String::from("| run | round | N | load |");
    for (name, _) in COLUMNS {
        let _ = write!(out, " {name} |");
    }
    out.push_str(" reads | writes by request |\n|---|---|---|---|");
    out.push_str(&"---|".repeat(COLUMNS.len() + 2));
    out.push('\n');
    for r in results {
        let _ = write!(
            out,
            "| {} | {} | {} | {:.2} |",
            r.side,
            r.round + 1,
            r.objects,
            r.load_at_start.0
        );
        for (_, value) in COLUMNS {
            let _ = write!(out, " {} |", figure(value(r)));
        }
        let writes: Vec<String> = r
            .requests
            .iter()
            .filter(|(key, _)| audit::is_write(key))
            .map(|(key, n)| format!("{key} {n}"))
            .collect();
        let mut writes = writes.join(", ");
        if !r.shadow_outcomes.is_empty() {
            let outcomes: Vec<String> = r
                .shadow_outcomes
                .iter()
                .map(|(outcome, n)| format!("{outcome} {n}"))
                .collect();
            let _ = write!(writes, "; shadow calls: {}", outcomes.join(", "));
        }
        let _ = writeln!(out, " {} | {writes} |", r.reads);
    }
    out
}

/// Medians of each side and the ratios measured ÷ against (host ÷ peer,
/// host+shadow ÷ host): of the medians, and the median of the rounds' own
/// ratios (each round's two runs, one right after the other).
pub fn summary(results: &[RunResult], comparison: Comparison) -> String {
    let of =
        |side: Side| -> Vec<&RunResult> { results.iter().filter(|r| r.side == side).collect() };
    let (host, peer) = (of(comparison.measured), of(comparison.against));
    let (a, b) = (comparison.measured, comparison.against);
    let mut out = format!(
        "| figure | {a} median | {b} median | {a} ÷ {b} (medians) | {a} ÷ {b} (median of rounds) | rounds' ratios |\n|---|---|---|---|---|---|\n",
    );
    for (name, value) in COLUMNS {
        let h = median(&host.iter().map(|r| value(r)).collect::<Vec<_>>());
        let p = median(&peer.iter().map(|r| value(r)).collect::<Vec<_>>());
        let per_round: Vec<f64> = host
            .iter()
            .filter_map(|h| {
                let p = peer.iter().find(|p| p.round == h.round)?;
                Some(value(h) / value(p))
            })
            .collect();
        let rounds: Vec<String> = per_round.iter().map(|r| format!("{r:.2}")).collect();
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {:.2} | {:.2} | {} |",
            figure(h),
            figure(p),
            h / p,
            median(&per_round),
            rounds.join(", ")
        );
    }
    out
}

fn figure(value: f64) -> String {
    if value.is_nan() {
        "-".to_owned()
    } else if value.fract() == 0.0 || value.abs() >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(side: Side, round: usize, converge: f64, writes: u64) -> RunResult {
        RunResult {
            side,
            round,
            objects: 10,
            size: 1,
            workers: 4,
            load_at_start: (1.0, 2),
            created_secs: 1.0,
            converge_secs: converge,
            cpu_converge_secs: 2.0,
            rss_idle_mib: 10.0,
            rss_converged_mib: 20.0,
            rss_peak_mib: 25.0,
            writes,
            reads: 5,
            requests: audit::Counts::from([
                ("patch deployments".to_owned(), writes),
                ("watch pods".to_owned(), 5),
            ]),
            cpu_others_converge_secs: BTreeMap::new(),
            reconcile: None,
            shadow_outcomes: BTreeMap::new(),
        }
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn the_summary_gives_ratios_of_medians_and_of_rounds() {
        let results = [
            result(Side::Host, 0, 10.0, 20),
            result(Side::Peer, 0, 20.0, 20),
            result(Side::Host, 1, 30.0, 20),
            result(Side::Peer, 1, 30.0, 40),
            result(Side::Host, 2, 12.0, 20),
            result(Side::Peer, 2, 12.0, 20),
        ];
        let summary = summary(&results, Comparison::PEER);
        let converge = summary
            .lines()
            .find(|l| l.starts_with("| converge s"))
            .expect("row");
        assert_eq!(
            converge,
            "| converge s | 12 | 20 | 0.60 | 1.00 | 0.50, 1.00, 1.00 |"
        );
        let writes = summary
            .lines()
            .find(|l| l.starts_with("| writes"))
            .expect("row");
        assert_eq!(
            writes,
            "| writes | 20 | 20 | 1.00 | 1.00 | 1.00, 0.50, 1.00 |"
        );
        let table = table(&results[..1]);
        assert!(
            table.contains(
                "| host | 1 | 10 | 1.00 | 10 | 2 | 10 | 20 | 25 | 20 | - | - | - | 5 | patch deployments 20 |"
            ),
            "{table}"
        );
    }
}
