//! The soak's report: faults injected by kind, violations by invariant,
//! convergence after each fault (p50/p99), the replicas' writes per
//! object (from their proxies' logs), the largest live-over-desired
//! excess, the churn, and the timeline; printed, and written as
//! `soak.json`, `soak.md` and `soak.svg` (objects not exact over time,
//! the faults as bars above) into the results directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;
use serde::Serialize;

use super::catalogue::{FaultKind, FaultRecord};
use super::churn::ChurnCounts;
use super::invariants::{self, Bounds, Violation, Write};
use super::replicas::LeaseTiming;
use super::{Ctx, Sample, SoakOptions, Timings};
use crate::artifacts::Profile;
use crate::scenario::percentile;

/// The replicas' writes for the objects.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteFigures {
    /// Every write counted (pod creates and deletes, status patches).
    pub total: usize,
    /// By kind (`POST pods`, `DELETE pods`, `PATCH status`).
    pub by_kind: BTreeMap<String, usize>,
    /// Objects written for.
    pub objects: usize,
    /// Per object: mean, median, 99th percentile, most.
    pub per_object_mean: f64,
    /// Median per object.
    pub per_object_p50: f64,
    /// 99th percentile per object.
    pub per_object_p99: f64,
    /// Most for one object.
    pub per_object_max: f64,
    /// Writes sent by a replica that did not hold the object's shard
    /// (a violation only with another replica's write within the window).
    pub unfenced: usize,
    /// The first of those (at most [`UNFENCED_SHOWN`]), with the reason.
    pub unfenced_first: Vec<invariants::Unfenced>,
}

/// How many unfenced writes the report lists.
pub const UNFENCED_SHOWN: usize = 50;

/// A whole soak.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// The command that ran it.
    pub command: String,
    /// When it started (UTC).
    pub started: String,
    /// The seed.
    pub seed: u64,
    /// N.
    pub objects: usize,
    /// Replicas, shards, workers of each.
    pub replicas: u32,
    /// `--shards`.
    pub shards: u32,
    /// `--workers` of each replica.
    pub workers: u16,
    /// The host's profile.
    pub profile: Profile,
    /// Lease timing.
    pub lease: LeaseTiming,
    /// The invariants' bounds.
    pub bounds: Bounds,
    /// How long each phase took.
    pub timings: Timings,
    /// Faults injected, by kind.
    pub faults_by_kind: BTreeMap<String, usize>,
    /// Every fault.
    pub faults: Vec<FaultRecord>,
    /// Convergence after a fault ends, seconds: median.
    pub convergence_p50_secs: f64,
    /// 99th percentile.
    pub convergence_p99_secs: f64,
    /// Most.
    pub convergence_max_secs: f64,
    /// Faults after which the objects did not converge before the run ended.
    pub faults_not_converged: usize,
    /// Every violation.
    pub violations: Vec<Violation>,
    /// Violations by invariant.
    pub violations_by_invariant: BTreeMap<String, usize>,
    /// The churn.
    pub churn: ChurnCounts,
    /// The replicas' writes.
    pub writes: WriteFigures,
    /// Pods that became live, in all.
    pub pods_made: u64,
    /// The largest live-over-desired excess of any object (scale-downs included).
    pub max_over_desired: i64,
    /// SIGTERM → exit of each terminated replica, seconds.
    pub stop_times_secs: Vec<f64>,
    /// Objects not exact over time.
    pub timeline: Vec<Sample>,
    /// No violation.
    pub passed: bool,
}

/// The writes the replicas' proxies logged, by object.
pub async fn collect_writes(ctx: &Ctx) -> Vec<Write> {
    let mut seen = Vec::new();
    for slot in &ctx.slots {
        let slot = slot.lock().await;
        seen.push((slot.index, slot.proxy.seen()));
    }
    let state = ctx.state();
    let by_uid: BTreeMap<&str, &str> = state
        .uids
        .iter()
        .map(|(name, uid)| (uid.as_str(), name.as_str()))
        .collect();
    let mut writes = Vec::new();
    for (replica, requests) in seen {
        for r in requests {
            let method = r.method.as_str();
            let object = if method == "POST" && r.path.ends_with("/pods") {
                r.owner_uid
                    .as_deref()
                    .and_then(|uid| by_uid.get(uid))
                    .map(|name| ((*name).to_owned(), "POST pods"))
            } else if method == "DELETE" && r.path.contains("/pods/") {
                r.path
                    .rsplit('/')
                    .next()
                    .and_then(|pod| state.checker.owner_of_pod(pod))
                    .map(|name| (name.to_owned(), "DELETE pods"))
            } else if method == "PATCH" && r.path.ends_with("/status") {
                r.path
                    .trim_end_matches("/status")
                    .rsplit('/')
                    .next()
                    .map(|name| (name.to_owned(), "PATCH status"))
            } else {
                None
            };
            if let Some((object, what)) = object {
                writes.push(Write {
                    replica,
                    at_secs: ctx.clock.secs(r.at),
                    object,
                    what: format!("{what} ({})", r.status),
                });
            }
        }
    }
    writes
}

/// Writes `writes.jsonl` (every write counted, with the wall-clock time
/// the hosts' logs use) and `leases.jsonl` (every shard Lease version seen)
/// into `dir`: the evidence behind a fence violation.
pub fn write_evidence(ctx: &Ctx, writes: &[Write], dir: &Path) -> Result<()> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join("writes.jsonl"))?);
    for w in writes {
        let line = serde_json::json!({
            "replica": w.replica, "at_secs": w.at_secs, "wall": ctx.clock.wall(w.at_secs),
            "object": w.object, "what": w.what,
        });
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    let state = ctx.state();
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join("leases.jsonl"))?);
    for (shard, seen) in &state.leases {
        for l in seen {
            let line = serde_json::json!({
                "shard": shard, "holder": l.holder,
                "acquired_secs": l.acquired_secs, "acquired": ctx.clock.wall(l.acquired_secs),
                "renewed_secs": l.renewed_secs, "renewed": ctx.clock.wall(l.renewed_secs),
                "duration_secs": l.duration_secs,
            });
            writeln!(out, "{line}")?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The report of a finished soak; runs the fence check over `writes`.
pub fn assemble(
    options: &SoakOptions,
    ctx: &Ctx,
    writes: &[Write],
    churn: ChurnCounts,
    timings: Timings,
    started: String,
) -> SoakReport {
    let mut state = ctx.state();
    let shards = options.shards;
    let (fence, unfenced) = {
        let uids = &state.uids;
        invariants::fence_violations(
            writes,
            &state.leases,
            &state.lease_gaps,
            |object| {
                uids.get(object)
                    .map(|uid| wasm_operator::shards::hash::shard_of(uid, shards))
            },
            super::replicas::identity,
            options.bounds.fence_window,
        )
    };
    state.checker.violations.extend(fence);
    let mut faults_by_kind = BTreeMap::new();
    for kind in FaultKind::ALL {
        let n = state.faults.iter().filter(|f| f.kind == kind).count();
        if n > 0 || options.only_faults.is_empty() {
            faults_by_kind.insert(kind.name(), n);
        }
    }
    let convergence: Vec<f64> = state
        .faults
        .iter()
        .filter_map(|f| f.convergence_secs)
        .collect();
    let mut violations_by_invariant = BTreeMap::new();
    for v in &state.checker.violations {
        let name = serde_json::to_value(v)
            .ok()
            .and_then(|v| v["invariant"].as_str().map(str::to_owned))
            .unwrap_or_default();
        *violations_by_invariant.entry(name).or_insert(0) += 1;
    }
    SoakReport {
        command: options.command.clone(),
        started,
        seed: options.seed,
        objects: options.objects,
        replicas: options.replicas,
        shards,
        workers: options.workers,
        profile: options.profile,
        lease: options.lease,
        bounds: options.bounds,
        timings,
        faults_by_kind,
        faults: state.faults.clone(),
        convergence_p50_secs: percentile(&convergence, 50.0),
        convergence_p99_secs: percentile(&convergence, 99.0),
        convergence_max_secs: convergence.iter().copied().fold(f64::NAN, f64::max),
        faults_not_converged: state.faults.len() - convergence.len(),
        passed: state.checker.violations.is_empty(),
        violations: state.checker.violations.clone(),
        violations_by_invariant,
        churn,
        writes: write_figures(writes, &unfenced),
        pods_made: state
            .checker
            .pods_made
            .values()
            .map(|&n| u64::from(n))
            .sum(),
        max_over_desired: state.checker.max_over_desired(),
        stop_times_secs: state.stop_times_secs.clone(),
        timeline: state.timeline.clone(),
    }
}

fn write_figures(writes: &[Write], unfenced: &[invariants::Unfenced]) -> WriteFigures {
    let mut by_kind = BTreeMap::new();
    let mut per_object: BTreeMap<&str, usize> = BTreeMap::new();
    for w in writes {
        let kind = w.what.split(" (").next().unwrap_or_default().to_owned();
        *by_kind.entry(kind).or_insert(0) += 1;
        *per_object.entry(w.object.as_str()).or_insert(0) += 1;
    }
    let counts: Vec<f64> = per_object.values().map(|&n| n as f64).collect();
    WriteFigures {
        total: writes.len(),
        by_kind,
        objects: counts.len(),
        per_object_mean: counts.iter().sum::<f64>() / counts.len().max(1) as f64,
        per_object_p50: percentile(&counts, 50.0),
        per_object_p99: percentile(&counts, 99.0),
        per_object_max: counts.iter().copied().fold(0.0, f64::max),
        unfenced: unfenced.len(),
        unfenced_first: unfenced.iter().take(UNFENCED_SHOWN).cloned().collect(),
    }
}

/// The report as text (also `soak.md`).
pub fn text(r: &SoakReport) -> String {
    let mut s = String::new();
    let verdict = if r.passed { "PASSED" } else { "FAILED" };
    let _ = writeln!(s, "# Chaos soak: {verdict}\n");
    let _ = writeln!(
        s,
        "`{}` (seed {}, started {})\n",
        r.command, r.seed, r.started
    );
    let _ = writeln!(
        s,
        "N = {} objects, {} replicas × {} shards ({} workers each, {:?} build), lease {} s / renew {} s / retry {} s.",
        r.objects,
        r.replicas,
        r.shards,
        r.workers,
        r.profile,
        r.lease.duration_secs,
        r.lease.renew_deadline_secs,
        r.lease.retry_secs
    );
    let t = &r.timings;
    let _ = writeln!(
        s,
        "Replicas ready {:.1} s; N exact {:.1} s after the creates; chaos {:.1} s; every object exact {} after it; {:.1} s in all.\n",
        t.replicas_ready_secs,
        t.initial_convergence_secs,
        t.chaos_secs,
        t.final_convergence_secs
            .map(|x| format!("{x:.1} s"))
            .unwrap_or_else(|| format!("NOT within {} s", r.bounds.final_convergence.as_secs())),
        t.total_secs
    );
    let _ = writeln!(s, "| Fault | Injected |\n| --- | ---: |");
    for (kind, n) in &r.faults_by_kind {
        let _ = writeln!(s, "| {kind} | {n} |");
    }
    let _ = writeln!(
        s,
        "| **all** | **{}** ({} could not be carried out) |\n",
        r.faults.len(),
        r.faults.iter().filter(|f| f.error.is_some()).count()
    );
    let _ = writeln!(
        s,
        "Convergence after a fault ends (objects not exact then, until all are): p50 {:.1} s, p99 {:.1} s, max {:.1} s; {} fault(s) not converged before the next phase.\n",
        r.convergence_p50_secs,
        r.convergence_p99_secs,
        r.convergence_max_secs,
        r.faults_not_converged
    );
    let c = &r.churn;
    let _ = writeln!(
        s,
        "Churn: {} scale edits, {} creates, {} deletes, {} plugin hot swaps, {} changes failed.",
        c.scales, c.creates, c.deletes, c.swaps, c.failed
    );
    let w = &r.writes;
    let _ = writeln!(
        s,
        "Writes by the replicas for {} objects: {} ({}); per object mean {:.1}, p50 {:.0}, p99 {:.0}, max {:.0}; {} sent without the shard.",
        w.objects,
        w.total,
        w.by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        w.per_object_mean,
        w.per_object_p50,
        w.per_object_p99,
        w.per_object_max,
        w.unfenced
    );
    let _ = writeln!(
        s,
        "Pods made: {}; max live pods over desired: {}; SIGTERM to exit: {}.\n",
        r.pods_made,
        r.max_over_desired,
        r.stop_times_secs
            .iter()
            .map(|x| format!("{x:.1} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(s, "Violations: {}", r.violations.len());
    for (invariant, n) in &r.violations_by_invariant {
        let _ = writeln!(s, "- {invariant}: {n}");
    }
    for v in r.violations.iter().take(20) {
        let _ = writeln!(s, "  - {}", serde_json::to_string(v).unwrap_or_default());
    }
    s
}

/// Writes `soak.json`, `soak.md` and `soak.svg` into `dir`; returns the JSON's path.
pub fn write(report: &SoakReport, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = dir.join("soak.json");
    std::fs::write(&json, serde_json::to_string_pretty(report)?)?;
    std::fs::write(dir.join("soak.md"), text(report))?;
    std::fs::write(dir.join("soak.svg"), svg(report)?)?;
    Ok(json)
}

/// The timeline: objects not exact over time, each fault a bar above.
pub fn svg(r: &SoakReport) -> Result<String> {
    let x_max = r.timeline.iter().map(|s| s.at_secs).fold(1.0, f64::max);
    let y_top = r
        .timeline
        .iter()
        .map(|s| s.not_exact as f64)
        .fold(1.0, f64::max);
    let lanes = [("replica", 1.08), ("control plane", 1.16), ("proxy", 1.24)];
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (960, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Chaos soak: objects not exact (N = {}, seed {}), faults above",
                    r.objects, r.seed
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_top * 1.3)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the soak started")
            .y_desc("objects not exact")
            .max_light_lines(2)
            .draw()
            .map_err(draw_error)?;
        let blue = RGBColor(0x1f, 0x77, 0xb4);
        chart
            .draw_series(LineSeries::new(
                r.timeline.iter().map(|s| (s.at_secs, s.not_exact as f64)),
                blue.stroke_width(2),
            ))
            .map_err(draw_error)?
            .label("objects not exact")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], blue.stroke_width(2))
            });
        let colours = [
            RGBColor(0xd6, 0x27, 0x28),
            RGBColor(0x94, 0x67, 0xbd),
            RGBColor(0xff, 0x7f, 0x0e),
        ];
        for (lane, ((name, level), colour)) in lanes.iter().zip(colours).enumerate() {
            let bars = r.faults.iter().filter(|f| lane_of(f.kind) == lane);
            chart
                .draw_series(bars.map(|f| {
                    let end = if f.end_secs.is_finite() {
                        f.end_secs
                    } else {
                        f.start_secs
                    };
                    PathElement::new(
                        vec![
                            (f.start_secs, y_top * level),
                            (end.max(f.start_secs + x_max / 400.0), y_top * level),
                        ],
                        colour.stroke_width(6),
                    )
                }))
                .map_err(draw_error)?
                .label(format!("{name} faults"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(6))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw_error)?;
        root.present().map_err(draw_error)?;
    }
    Ok(text)
}

fn lane_of(kind: FaultKind) -> usize {
    match kind {
        FaultKind::ReplicaKill | FaultKind::ReplicaStop | FaultKind::ReplicaTerm => 0,
        FaultKind::ApiserverRestart | FaultKind::ApiserverStop | FaultKind::EtcdCompaction => 1,
        _ => 2,
    }
}

fn draw_error<E: std::fmt::Debug>(err: E) -> anyhow::Error {
    anyhow!("drawing the soak's plot: {err:?}")
}
