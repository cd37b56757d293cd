//! The benchmark's report: a Markdown file with the results table, the
//! ratios to the controller-runtime peer, the API requests by verb and
//! resource, links to the SVG plots and (optionally) the reconcile
//! micro-benchmark's figures; plus every figure as JSON.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::artifacts::Profile;
use crate::controllers::ControllerKind;
use crate::plots;
use crate::scenario::RunResult;

/// A whole benchmark invocation.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The command that produced it.
    pub command: String,
    /// When it started (UTC, RFC 3339).
    pub started: String,
    /// The cargo profile of the Rust controllers.
    pub profile: Profile,
    /// P.
    pub pods_per_object: u32,
    /// `--workers` of every controller.
    pub workers: u16,
    /// The quiet window, seconds.
    pub idle_secs: u64,
    /// Edits timed per run.
    pub edits: usize,
    /// Creates in flight at once.
    pub create_concurrency: usize,
    /// Creates started a second at most (`None`: unpaced).
    #[serde(default)]
    pub create_rate: Option<f64>,
    /// Every run, in the order run.
    pub runs: Vec<RunResult>,
    /// The reconcile micro-benchmark's figures (criterion's lines), if run.
    pub micro_bench: Option<String>,
}

/// The files a report was written to.
#[derive(Debug, Clone)]
pub struct Written {
    /// `report.md`.
    pub markdown: PathBuf,
    /// `results.json`.
    pub json: PathBuf,
    /// The SVG plots.
    pub plots: Vec<PathBuf>,
}

/// Writes `report.md`, `results.json`, `convergence.svg` and `rss.svg` into
/// `dir` (no plots when every run had several replicas).
pub fn write(report: &Report, dir: &Path) -> Result<Written> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut plots_written = Vec::new();
    // The plots draw one line per controller of one replica each.
    let plotted = report.runs.iter().any(|r| r.replicas <= 1);
    for (file, quantity) in plotted
        .then_some([
            ("convergence.svg", &plots::CONVERGENCE),
            ("rss.svg", &plots::RSS),
        ])
        .into_iter()
        .flatten()
    {
        let path = dir.join(file);
        fs::write(&path, plots::svg(&report.runs, quantity)?)
            .with_context(|| format!("writing {}", path.display()))?;
        plots_written.push(path);
    }
    let markdown = dir.join("report.md");
    fs::write(&markdown, markdown_text(report))?;
    let json = dir.join("results.json");
    fs::write(&json, serde_json::to_string_pretty(report)?)?;
    Ok(Written {
        markdown,
        json,
        plots: plots_written,
    })
}

/// The results table (also printed at the end of a run).
pub fn results_table(runs: &[RunResult]) -> String {
    let mut t = String::from(
        "| Controller | N | Converge (s) | API writes | API reads | CPU (s) | Log lines | RSS idle / converged / peak (MiB) | Reconciles converge / idle | Edit p50 / p99 (ms) | Controller's part p50 / p99 (ms) | GC (s) | Load at start |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in runs {
        let _ = writeln!(
            t,
            "| {} | {} | {:.2} | {} | {} | {:.2} | {} | {:.0} / {:.0} / {:.0} | {} / {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.1} | {:.2} |",
            r.label(),
            r.objects,
            r.converge_secs,
            r.writes,
            r.reads,
            r.cpu_converge_secs,
            r.log_lines_converge,
            r.rss_idle_mib,
            r.rss_converged_mib,
            r.rss_peak_mib,
            r.reconciles_converge,
            r.reconciles_idle,
            r.edit_p50_ms,
            r.edit_p99_ms,
            r.edit_controller_p50_ms,
            r.edit_controller_p99_ms,
            r.gc_secs,
            r.load_at_start.0,
        );
    }
    t
}

/// The simulated node counts of `runs`, e.g. `3` or `3 or 30` (as the
/// table's labels say).
fn node_counts(runs: &[RunResult]) -> String {
    let mut counts: Vec<usize> = runs.iter().map(|r| r.nodes).collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.is_empty() {
        return local_control_plane::DEFAULT_NODES.to_string();
    }
    counts
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" or ")
}

/// Each controller's figures divided by the controller-runtime peer's at the same N.
pub fn ratios_table(runs: &[RunResult]) -> Option<String> {
    ratios_against(runs, ControllerKind::ControllerRuntime)
}

/// Each controller's figures divided by the floor's (what the control
/// plane allows) at the same N.
pub fn floor_table(runs: &[RunResult]) -> Option<String> {
    ratios_against(runs, ControllerKind::Floor)
}

/// What the host's logs cost: `host-silent` (logs off) and `host-debug`
/// divided by `host` (its default level) at the same N; `None` unless one
/// of them ran.
pub fn log_cost_table(runs: &[RunResult]) -> Option<String> {
    let log_kinds = [ControllerKind::HostSilent, ControllerKind::HostDebug];
    let runs: Vec<RunResult> = runs
        .iter()
        .filter(|r| r.controller == ControllerKind::Host || log_kinds.contains(&r.controller))
        .cloned()
        .collect();
    if !runs.iter().any(|r| log_kinds.contains(&r.controller)) {
        return None;
    }
    ratios_against(&runs, ControllerKind::Host)
}

/// Each controller's figures divided by `base`'s run at the same N, nodes
/// and round; `None` without such pairs.
fn ratios_against(runs: &[RunResult], base_kind: ControllerKind) -> Option<String> {
    let mut t = String::from(
        "| Controller | N | Converge | API writes | CPU | Log lines | RSS converged | RSS growth (converged - idle) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let mut any = false;
    for r in runs.iter().filter(|r| r.controller != base_kind) {
        let Some(base) = paired_base(runs, r, base_kind) else {
            continue;
        };
        any = true;
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.2}×", a / b)
            } else {
                "–".into()
            }
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label(),
            r.objects,
            ratio(r.converge_secs, base.converge_secs),
            ratio(r.writes as f64, base.writes as f64),
            ratio(r.cpu_converge_secs, base.cpu_converge_secs),
            ratio(r.log_lines_converge as f64, base.log_lines_converge as f64),
            ratio(r.rss_converged_mib, base.rss_converged_mib),
            ratio(
                r.rss_converged_mib - r.rss_idle_mib,
                base.rss_converged_mib - base.rss_idle_mib
            ),
        );
    }
    any.then_some(t)
}

/// The run of `base_kind` that `r` is compared with: same N, nodes and
/// round, and, when a controller runs several times in one sweep
/// (`--controllers host,floor,host,floor`), the same position among the
/// runs of its kind (the k-th host against the k-th floor; the last one
/// when the base ran fewer times).
fn paired_base<'a>(
    runs: &'a [RunResult],
    r: &RunResult,
    base_kind: ControllerKind,
) -> Option<&'a RunResult> {
    let same_point =
        |b: &RunResult| b.objects == r.objects && b.nodes == r.nodes && b.round == r.round;
    let position = runs
        .iter()
        .filter(|b| b.controller == r.controller && same_point(b))
        .position(|b| std::ptr::eq(b, r))?;
    let bases: Vec<&RunResult> = runs
        .iter()
        .filter(|b| b.controller == base_kind && same_point(b))
        .collect();
    bases.get(position).or(bases.last()).copied()
}

/// Runs of several replicas against the one-replica run of the same
/// controller at the same N: each replica's CPU and RSS as a share of the
/// single replica's, and the failover figures; `None` without such runs.
pub fn replicas_table(runs: &[RunResult]) -> Option<String> {
    let mut t = String::from(
        "| Controller | N | Converge (s, ×1 → ×R) | shards at start | CPU per replica (s) | max CPU / ×1 | RSS per replica (MiB) | max RSS / ×1 | Failover: scaled objects in the dead replica's shards | their last converged (s) | the others' last (s) | all exact (s) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let mut any = false;
    for r in runs.iter().filter(|r| r.replicas > 1) {
        any = true;
        let single = runs.iter().find(|b| {
            b.controller == r.controller
                && b.objects == r.objects
                && b.nodes == r.nodes
                && b.replicas == 1
                && b.round == r.round
        });
        let list = |f: fn(&crate::scenario::ReplicaFigures) -> String| {
            r.per_replica.iter().map(f).collect::<Vec<_>>().join(" / ")
        };
        let max = |f: fn(&crate::scenario::ReplicaFigures) -> f64| {
            r.per_replica.iter().map(f).fold(0.0, f64::max)
        };
        let share = |mine: f64, theirs: Option<f64>| match theirs {
            Some(theirs) if theirs > 0.0 => format!("{:.2}", mine / theirs),
            _ => "–".into(),
        };
        let converge = match single {
            Some(s) => format!("{:.1} → {:.1}", s.converge_secs, r.converge_secs),
            None => format!("{:.1}", r.converge_secs),
        };
        let (dead, last_dead, last_others, exact) = match &r.failover {
            Some(f) => (
                format!("{} of {}", f.of_dead_replica, f.objects),
                format!("{:.1}", f.last_of_dead_replica_secs),
                format!("{:.1}", f.last_of_others_secs),
                format!("{:.1}", f.all_exact_secs),
            ),
            None => ("–".into(), "–".into(), "–".into(), "–".into()),
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label(),
            r.objects,
            converge,
            list(|p| p.shards_at_start.to_string()),
            list(|p| format!("{:.1}", p.cpu_converge_secs)),
            share(
                max(|p| p.cpu_converge_secs),
                single.map(|s| s.cpu_converge_secs)
            ),
            list(|p| format!("{:.1}", p.rss_converged_mib)),
            share(
                max(|p| p.rss_converged_mib),
                single.map(|s| s.rss_converged_mib)
            ),
            dead,
            last_dead,
            last_others,
            exact,
        );
    }
    any.then_some(t)
}

/// The CPU of every process during a run's convergence: the controller's,
/// the control plane's and the harness's.
fn cpu_all(r: &RunResult) -> f64 {
    r.cpu_converge_secs + r.cpu_others_converge_secs.values().sum::<f64>()
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// How each controller's run at the largest N compares with its run at the
/// smallest N of the same round (convergence time, its own CPU, every
/// process's CPU), a row per round, and with several rounds the median and
/// range of each ratio; `None` without two Ns.
pub fn linearity_table(runs: &[RunResult]) -> Option<String> {
    let mut t = String::from(
        "| Controller | Round | N | Converge (s) | Converge ratio | Controller CPU ratio | Every process's CPU ratio |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let mut any = false;
    let mut groups: Vec<(ControllerKind, u32, usize)> = Vec::new();
    for r in runs {
        let key = (r.controller, r.replicas, r.nodes);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (controller, replicas, nodes) in groups {
        let mine: Vec<&RunResult> = runs
            .iter()
            .filter(|r| r.controller == controller && r.replicas == replicas && r.nodes == nodes)
            .collect();
        let (Some(small), Some(large)) = (
            mine.iter().map(|r| r.objects).min(),
            mine.iter().map(|r| r.objects).max(),
        ) else {
            continue;
        };
        if small == large {
            continue;
        }
        let mut rounds: Vec<usize> = mine.iter().map(|r| r.round).collect();
        rounds.sort_unstable();
        rounds.dedup();
        let (mut converge, mut own, mut all) = (Vec::new(), Vec::new(), Vec::new());
        let mut label = String::new();
        for round in rounds {
            let at = |n: usize| {
                mine.iter()
                    .find(|r| r.round == round && r.objects == n)
                    .copied()
            };
            let (Some(a), Some(b)) = (at(small), at(large)) else {
                continue;
            };
            any = true;
            label = a.setup();
            converge.push(b.converge_secs / a.converge_secs);
            own.push(b.cpu_converge_secs / a.cpu_converge_secs);
            all.push(cpu_all(b) / cpu_all(a));
            let _ = writeln!(
                t,
                "| {label} | {} | {small} → {large} (×{:.2}) | {:.2} → {:.2} | {:.2}× | {:.2}× | {:.2}× |",
                round + 1,
                large as f64 / small as f64,
                a.converge_secs,
                b.converge_secs,
                converge[converge.len() - 1],
                own[own.len() - 1],
                all[all.len() - 1],
            );
        }
        if converge.len() > 1 {
            let summary = |values: &mut Vec<f64>| {
                let low = values.iter().copied().fold(f64::INFINITY, f64::min);
                let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!("{:.2}× ({low:.2}–{high:.2})", median(values))
            };
            let _ = writeln!(
                t,
                "| {label} | median (range) of {} | {small} → {large} | | {} | {} | {} |",
                converge.len(),
                summary(&mut converge),
                summary(&mut own),
                summary(&mut all),
            );
        }
    }
    any.then_some(t)
}

/// Where the machine's CPU went during each run's convergence: the
/// controller, each control-plane process and the harness, their total, and
/// that total as a share of every CPU over the convergence time.
pub fn cpu_table(runs: &[RunResult]) -> String {
    let names: BTreeSet<&String> = runs
        .iter()
        .flat_map(|r| r.cpu_others_converge_secs.keys())
        .collect();
    let mut t = String::from("| Controller | N | controller |");
    for name in &names {
        let _ = write!(t, " {name} |");
    }
    t.push_str(" total | busy |\n| --- | ---: | ---: |");
    for _ in 0..names.len() + 2 {
        t.push_str(" ---: |");
    }
    t.push('\n');
    for r in runs {
        let _ = write!(
            t,
            "| {} | {} | {:.2} |",
            r.label(),
            r.objects,
            r.cpu_converge_secs
        );
        for name in &names {
            match r.cpu_others_converge_secs.get(*name) {
                Some(secs) => {
                    let _ = write!(t, " {secs:.2} |");
                }
                None => t.push_str(" – |"),
            }
        }
        let total = cpu_all(r);
        let capacity = r.converge_secs * r.load_at_start.1 as f64;
        let busy = if capacity > 0.0 {
            format!("{:.0}%", 100.0 * total / capacity)
        } else {
            "–".into()
        };
        let _ = writeln!(t, " {total:.2} | {busy} |");
    }
    t
}

/// The controller's resident memory at convergence, split into anonymous
/// memory and mapped files.
pub fn memory_table(runs: &[RunResult]) -> String {
    let mut t = String::from(
        "| Controller | N | RSS converged (MiB) | anonymous (MiB) | files (MiB) | per pod (KiB, growth from idle) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in runs {
        let pods = r.objects as f64 * f64::from(r.pods_per_object);
        let per_pod = (r.rss_converged_mib - r.rss_idle_mib) * 1024.0 / pods.max(1.0);
        let _ = writeln!(
            t,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r.label(),
            r.objects,
            r.rss_converged_mib,
            r.rss_converged_anon_mib,
            r.rss_converged_file_mib,
            per_pod,
        );
    }
    t
}

/// The requests during convergence by verb and resource, one row per run.
pub fn requests_table(runs: &[RunResult]) -> String {
    let keys: BTreeSet<&String> = runs.iter().flat_map(|r| r.requests.keys()).collect();
    let mut t = String::from("| Controller | N |");
    for key in &keys {
        let _ = write!(t, " {key} |");
    }
    t.push_str(" other resources |\n| --- | ---: |");
    for _ in 0..=keys.len() {
        t.push_str(" ---: |");
    }
    t.push('\n');
    for r in runs {
        let _ = write!(t, "| {} | {} |", r.label(), r.objects);
        for key in &keys {
            let _ = write!(t, " {} |", r.requests.get(*key).copied().unwrap_or(0));
        }
        let _ = writeln!(t, " {} |", r.other_requests);
    }
    t
}

fn markdown_text(report: &Report) -> String {
    let mut md = String::from("# Scale benchmark\n\n");
    let (_, cpus) = report.runs.first().map_or((0.0, 0), |r| r.load_at_start);
    let _ = write!(
        md,
        "Produced by `{}` (started {}; Rust controllers built with the {:?} profile).\n\n\
         Each run: a fresh local control plane (etcd, kube-apiserver, kube-controller-manager, \
         kube-scheduler and kwok with {} simulated nodes; \
         default options), the Jinghzhu CRD, one controller as its own process with \
         `--workers {}`, then N Jinghzhus × {} pods created ({} in flight{}) and watched \
         from the harness. Machine: {cpus} CPUs, shared; the load average at each run's \
         start is in the table.\n\n",
        report.command,
        report.started,
        report.profile,
        node_counts(&report.runs),
        report.workers,
        report.pods_per_object,
        report.create_concurrency,
        report
            .create_rate
            .map(|r| format!(", at most {r} a second"))
            .unwrap_or_default(),
    );
    md.push_str(
        "- **Converge**: first create until every object's status reports exactly its live pods \
         (count, names, `Running`, observed generation) and the live pod total is exact.\n\
         - **API writes / reads**: the API server's own `apiserver_request_total`, difference \
         over the convergence window, on Jinghzhus, their status, pods and Events, less the \
         harness's own creates. Writes are POST, PUT, PATCH, DELETE; reads GET and LIST \
         (watches are counted when they end, so they hardly appear).\n\
         - **CPU**: the controller process's user + system seconds over the convergence window.\n\
         - **RSS**: `VmRSS` after start-up with no objects, at convergence, and `VmHWM` (peak).\n\
         - **Reconciles**: from each controller's `/metrics` (`controller_runtime_reconcile_total`, \
         or the host's `wasm_operator_reconciles_total`), during convergence and during the quiet \
         window that follows",
    );
    let _ = write!(
        md,
        " ({} s).\n\
         - **Edit p50 / p99**: {} single-object edits on the converged set (scale by one pod up, \
         then back down), from the patch until the status shows the new count at the new \
         generation. **Controller's part**: of each edit, the patch until the new pod \
         appeared plus its pods all Running and Ready until the status showed it, both as the \
         harness's watches saw them; the rest is kube-scheduler's and kwok's (its Stage makes a \
         pod Ready after 200 ms plus up to 800 ms at random, which a handful of edits cannot \
         average out, so compare controllers on this part).\n\
         - **GC**: all Jinghzhus deleted at once until the garbage collector removed the last pod \
         (NaN: not timed, `--no-gc`).\n\n",
        report.idle_secs, report.edits,
    );
    md.push_str("## Results\n\n");
    md.push_str(&results_table(&report.runs));
    if let Some(ratios) = ratios_table(&report.runs) {
        md.push_str("\n## Ratios to the controller-runtime peer (same N)\n\n");
        md.push_str(&ratios);
    }
    if let Some(ratios) = floor_table(&report.runs) {
        md.push_str(
            "\n## Ratios to the floor (same N): no logic, only the writes converging needs\n\n",
        );
        md.push_str(&ratios);
    }
    if let Some(ratios) = log_cost_table(&report.runs) {
        md.push_str(
            "\n## What the logs cost: ratios to the host at its default level (same N)\n\n\
             `host-silent` runs with `RUST_LOG=off`, `host-debug` with `RUST_LOG=debug` (every \
             reconcile's lines).\n\n",
        );
        md.push_str(&ratios);
    }
    if let Some(linearity) = linearity_table(&report.runs) {
        md.push_str(
            "\n## Linearity (the largest N against the smallest, round by round)\n\n\
             Each ratio divides a figure of the run at the largest N by the same figure at the \
             smallest N of the same round; linear growth is the objects' ratio in brackets. \
             On a shared machine a ratio of runs far apart in time also measures how the \
             machine changed (`--repeat` runs the sweep again and shows the spread).\n\n",
        );
        md.push_str(&linearity);
    }
    if let Some(replicas) = replicas_table(&report.runs) {
        md.push_str(
            "\n## Several replicas (the host with `--shards`)\n\n\
             A run of R replicas sums their CPU, RSS and reconciles in the tables above; \
             here each replica's own, its share of the one-replica run at the same N \
             (the largest of them), and the failover: replica 0 killed with SIGKILL after \
             the edits, then objects spread over every shard scaled by two pods, timed \
             from the kill (those of the dead replica's shards, told by their UIDs' shard \
             and the shards it held, wait for its Leases to expire: 15 s lease + 2 s \
             retry), and every object exact again.\n\n",
        );
        md.push_str(&replicas);
    }
    md.push_str("\n## API requests during convergence, by verb and resource\n\n");
    md.push_str(&requests_table(&report.runs));
    md.push_str(
        "\n## CPU seconds during convergence, by process\n\n\
         Everything that shares the machine with the controller: the control plane's \
         processes and the harness (`scale-bench`, which creates the objects and watches \
         them). **busy** is the total over every CPU for the convergence time.\n\n",
    );
    md.push_str(&cpu_table(&report.runs));
    md.push_str(
        "\n## Memory at convergence\n\n\
         `RssAnon` (heap, stacks) and `RssFile` (pages of the executable and shared \
         libraries mapped in) from `/proc/PID/status`.\n\n",
    );
    md.push_str(&memory_table(&report.runs));
    md.push_str(
        "\n## Plots\n\n![Convergence time against N](convergence.svg)\n\n\
         ![RSS after convergence against N](rss.svg)\n",
    );
    md.push_str("\n## Reconcile micro-benchmark\n\n");
    match &report.micro_bench {
        Some(figures) => {
            md.push_str(
                "`cargo bench -p wasm-operator --bench reconcile` (criterion; low, median and high \
                 estimates), run right after the scale runs:\n\n```text\n",
            );
            md.push_str(figures);
            md.push_str("\n```\n");
        }
        None => md.push_str(
            "Not run this time (`--micro-bench` runs it); the command is \
             `cargo bench -p wasm-operator --bench reconcile`.\n",
        ),
    }
    md
}

/// Runs `cargo bench -p wasm-operator --bench reconcile` and keeps criterion's
/// benchmark names and `time:` lines.
pub fn run_micro_bench() -> Result<String> {
    eprintln!("scale-bench: cargo bench -p wasm-operator --bench reconcile");
    let output = crate::artifacts::nested_cargo()
        .args(["bench", "-p", "wasm-operator", "--bench", "reconcile"])
        .output()
        .context("running cargo bench")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "`cargo bench -p wasm-operator --bench reconcile` failed:\n{}",
        crate::artifacts::tail(&String::from_utf8_lossy(&output.stderr), 20)
    );
    Ok(criterion_times(&stdout))
}

/// criterion's `<name> time: [low median high]` lines (the name may be on
/// the line before when it is long).
pub fn criterion_times(stdout: &str) -> String {
    let mut kept = Vec::new();
    let mut previous = "";
    for line in stdout.lines() {
        if line.contains("time:") {
            if line.trim_start().starts_with("time:") {
                kept.push(format!("{} {}", previous.trim(), line.trim()));
            } else {
                kept.push(line.trim().to_owned());
            }
        }
        previous = line;
    }
    kept.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_runs_are_paired_by_position() {
        let run = |kind, secs| RunResult {
            controller: kind,
            converge_secs: secs,
            ..result(1, 1.0, 1.0)
        };
        let runs = vec![
            run(ControllerKind::Host, 10.0),
            run(ControllerKind::Floor, 5.0),
            run(ControllerKind::Host, 30.0),
            run(ControllerKind::Floor, 10.0),
            run(ControllerKind::Host, 40.0),
        ];
        let table = floor_table(&runs).expect("pairs");
        let converge: Vec<&str> = table
            .lines()
            .skip(2)
            .map(|l| l.split('|').nth(3).unwrap_or_default().trim())
            .collect();
        // 10/5, 30/10, and the third host against the last floor: 40/10.
        assert_eq!(converge, ["2.00×", "3.00×", "4.00×"]);
    }

    #[test]
    fn the_log_cost_table_compares_the_log_levels_with_the_host_only() {
        let run = |kind, cpu| RunResult {
            controller: kind,
            ..result(1, cpu, 1.0)
        };
        let plain = vec![
            run(ControllerKind::Host, 2.0),
            run(ControllerKind::Floor, 1.0),
        ];
        assert!(log_cost_table(&plain).is_none(), "no log-level runs");
        let runs = vec![
            run(ControllerKind::Host, 2.0),
            run(ControllerKind::HostSilent, 1.5),
            run(ControllerKind::Floor, 1.0),
            run(ControllerKind::HostDebug, 3.0),
        ];
        let table = log_cost_table(&runs).expect("pairs");
        let cpu: Vec<(&str, &str)> = table
            .lines()
            .skip(2)
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells[1], cells[5])
            })
            .collect();
        assert_eq!(cpu, [("host-silent", "0.75×"), ("host-debug", "1.50×")]);
    }

    #[test]
    fn keeps_criterion_time_lines_with_their_names() {
        let out = "Benchmarking x\nreconcile/fresh_instance\n                        time:   [39.1 µs 40.1 µs 41.0 µs]\n\
                   short               time:   [1.0 ms 1.1 ms 1.2 ms]\nchange: ...\n";
        assert_eq!(
            criterion_times(out),
            "reconcile/fresh_instance time:   [39.1 µs 40.1 µs 41.0 µs]\nshort               time:   [1.0 ms 1.1 ms 1.2 ms]"
        );
    }

    fn result(replicas: u32, cpu: f64, rss: f64) -> RunResult {
        RunResult {
            controller: ControllerKind::Host,
            replicas,
            per_replica: Vec::new(),
            failover: None,
            objects: 100,
            pods_per_object: 3,
            workers: 4,
            nodes: 3,
            load_at_start: (0.0, 2),
            converge_secs: 10.0,
            requests: Default::default(),
            writes: 0,
            reads: 0,
            other_requests: 0,
            cpu_converge_secs: cpu,
            cpu_others_converge_secs: Default::default(),
            log_lines_converge: 0,
            cpu_idle_secs: 0.0,
            rss_idle_mib: 0.0,
            rss_converged_mib: rss,
            rss_converged_anon_mib: 0.0,
            rss_converged_file_mib: 0.0,
            rss_peak_mib: 0.0,
            reconciles_converge: 0,
            reconciles_idle: 0,
            idle_secs: 0.0,
            edit_latencies_ms: Vec::new(),
            edit_p50_ms: 0.0,
            edit_p99_ms: 0.0,
            edit_controller_ms: Vec::new(),
            edit_controller_p50_ms: 0.0,
            edit_controller_p99_ms: 0.0,
            gc_secs: 0.0,
            round: 0,
        }
    }

    #[test]
    fn linearity_compares_the_largest_n_with_the_smallest_of_the_same_round() {
        let run = |objects, round, converge, cpu| RunResult {
            objects,
            round,
            converge_secs: converge,
            cpu_others_converge_secs: [("etcd".to_string(), cpu)].into(),
            ..result(1, cpu, 10.0)
        };
        assert_eq!(linearity_table(&[run(100, 0, 10.0, 1.0)]), None, "one N");
        let table = linearity_table(&[
            run(100, 0, 10.0, 1.0),
            run(1000, 0, 40.0, 3.0),
            run(100, 1, 20.0, 2.0),
            run(1000, 1, 40.0, 8.0),
            run(100, 2, 10.0, 1.0),
            run(1000, 2, 30.0, 5.0),
        ])
        .expect("a table");
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(
            rows,
            [
                "| host | 1 | 100 → 1000 (×10.00) | 10.00 → 40.00 | 4.00× | 3.00× | 3.00× |",
                "| host | 2 | 100 → 1000 (×10.00) | 20.00 → 40.00 | 2.00× | 4.00× | 4.00× |",
                "| host | 3 | 100 → 1000 (×10.00) | 10.00 → 30.00 | 3.00× | 5.00× | 5.00× |",
                "| host | median (range) of 3 | 100 → 1000 | | 3.00× (2.00–4.00) | 4.00× (3.00–5.00) | 4.00× (3.00–5.00) |",
            ]
        );
    }

    #[test]
    fn replicas_are_compared_with_one_replica_by_their_largest_share() {
        assert_eq!(replicas_table(&[result(1, 10.0, 40.0)]), None);
        let figures = |cpu, rss| crate::scenario::ReplicaFigures {
            cpu_converge_secs: cpu,
            rss_converged_mib: rss,
            rss_peak_mib: rss,
            reconciles_converge: 0,
            shards_at_start: 11,
        };
        let mut three = result(3, 12.0, 45.0);
        three.per_replica = vec![figures(3.0, 15.0), figures(4.0, 16.0), figures(5.0, 14.0)];
        three.failover = Some(crate::scenario::Failover {
            objects: 30,
            last_secs: 18.5,
            latencies_secs: Vec::new(),
            of_dead_replica: 10,
            last_of_dead_replica_secs: 18.5,
            last_of_others_secs: 1.2,
            all_exact_secs: 19.0,
        });
        let table = replicas_table(&[result(1, 10.0, 40.0), three]).expect("a table");
        let row = table.lines().nth(2).expect("a row");
        assert_eq!(
            row,
            "| host ×3 (--workers 4) | 100 | 10.0 → 10.0 | 11 / 11 / 11 | 3.0 / 4.0 / 5.0 | 0.50 | 15.0 / 16.0 / 14.0 | 0.40 | 10 of 30 | 18.5 | 1.2 | 19.0 |"
        );
    }
}
