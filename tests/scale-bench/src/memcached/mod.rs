//! The Memcached benchmark (`memcached-bench`): the Wasm host serving the
//! Memcached example (`wasm-operator run --plugin-controllers`, the
//! memcached plugin declared by examples/memcached/controller.yaml) against
//! a controller-runtime operator doing the same work
//! (tests/peers/controller-runtime/cmd/memcached), in alternating rounds,
//! each run on a fresh control plane: convergence time, the controller's
//! CPU seconds and RSS, and its API requests (from the audit log of its
//! own ServiceAccount), then the medians and the ratios host ÷ peer.
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
}

impl Side {
    /// The name in tables and logs.
    pub fn name(self) -> &'static str {
        match self {
            Side::Host => "host",
            Side::Peer => "controller-runtime",
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
}

/// Runs `rounds` rounds of host then peer; each run's table row goes to
/// stderr as it ends.
pub async fn run_rounds(
    controllers: &Controllers,
    options: &Options,
    rounds: usize,
) -> Result<Vec<RunResult>> {
    let mut results = Vec::new();
    for round in 0..rounds {
        for side in [Side::Host, Side::Peer] {
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
const COLUMNS: [(&str, Figure); 6] = [
    ("converge s", |r| r.converge_secs),
    ("CPU s", |r| r.cpu_converge_secs),
    ("RSS idle MiB", |r| r.rss_idle_mib),
    ("RSS converged MiB", |r| r.rss_converged_mib),
    ("RSS peak MiB", |r| r.rss_peak_mib),
    ("writes", |r| r.writes as f64),
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
        let _ = writeln!(out, " {} | {} |", r.reads, writes.join(", "));
    }
    out
}

/// Medians of each side and the ratios host ÷ peer: of the medians, and
/// the median of the rounds' own ratios (each round's host run against the
/// peer run right after it).
pub fn summary(results: &[RunResult]) -> String {
    let of =
        |side: Side| -> Vec<&RunResult> { results.iter().filter(|r| r.side == side).collect() };
    let (host, peer) = (of(Side::Host), of(Side::Peer));
    let mut out = String::from(
        "| figure | host median | controller-runtime median | host ÷ peer (medians) | host ÷ peer (median of rounds) | rounds' ratios |\n|---|---|---|---|---|---|\n",
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
    if value.fract() == 0.0 || value.abs() >= 100.0 {
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
        let summary = summary(&results);
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
                "| host | 1 | 10 | 1.00 | 10 | 2 | 10 | 20 | 25 | 20 | 5 | patch deployments 20 |"
            ),
            "{table}"
        );
    }
}
