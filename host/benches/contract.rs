//! The plugin call, side by side in one run: the example plugin built for
//! contract 0.1 (`replicaset-plugin --features contract-0-1`), for 0.2 on
//! the SDK's owned records (`--features owned-input`: the SDK decodes every
//! string of the input before the plugin runs), and for 0.2 on the SDK's
//! borrowed view (the default build: names read in place from the string
//! table); on the same Jinghzhu with 10 and 100 owned pods in the steady
//! state (desired met, status already up to date, so the plugin proposes
//! nothing; the most common reconcile).
//!
//! Cases, each timed call by call (p50 and p99 of every sample):
//! - `with conversion`: what the host does per reconcile: build the input
//!   of the plugin's version from the Kubernetes objects, a fresh instance
//!   from the pool, the call, and the output converted to actions;
//! - `call only`: the same with the input built beforehand;
//! - `reused instance`: calls on one kept instance (the floor; the host
//!   never reuses instances);
//! - `instance only`: a fresh instance from the pool and its drop, no call;
//! - `input only`: building the input alone (once per contract version).
//!
//! The cases run interleaved, round after round, so a noisy moment on this
//! shared machine hits all of them alike. The engine runs with
//! `Config::concurrency_support(false)` (see `runtime::engine`); this
//! wasmtime build has no `component-model-async`, so the other setting
//! cannot be made in the same process and is not a case here.
//!
//! Run: `cargo bench -p wasm-operator --bench contract` (`-- --rounds N`,
//! default 20 rounds of 200 calls per case; `-- --only TEXT` times only the
//! cases whose name contains TEXT, e.g. under `perf record`).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use wasm_artifacts::{Toolchain, build};
use wasm_operator::crd::Jinghzhu;
use wasm_operator::offline::sample::steady_objects;
use wasm_operator::runtime::{
    ContractVersion, LoadedPlugin, PluginInput, RawProposal, Runtime, RuntimeConfig,
};

/// The builds compared: a label and the plugin's cargo features.
const BUILDS: [(&str, &[&str]); 3] = [
    ("0.1", &["contract-0-1"]),
    ("0.2 owned", &["owned-input"]),
    ("0.2 view", &[]),
];

/// The goals of issue 42 for the call with conversion, p50 (µs).
const GOALS: [(usize, f64); 2] = [(10, 10.0), (100, 60.0)];

/// One timed case.
struct Case {
    name: String,
    samples: Vec<Duration>,
    run: Box<dyn FnMut()>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

/// The Jinghzhu with `pods` pods in the steady state: the status the plugin
/// would write is already there.
fn steady(plugin: &LoadedPlugin, pods: usize, now: SystemTime) -> (Arc<Jinghzhu>, Arc<Vec<Pod>>) {
    let (mut jz, pods_list) = steady_objects(pods);
    let first = plugin
        .reconcile_blocking(&jz, &pods_list, now)
        .expect("reconcile");
    assert!(first.create_pods.is_empty() && first.delete_pods.is_empty());
    jz.status = first.status.clone();
    let again = plugin
        .reconcile_blocking(&jz, &pods_list, now)
        .expect("reconcile");
    assert!(again.status.is_none(), "steady state");
    (Arc::new(jz), Arc::new(pods_list))
}

/// The cases of one build on one object.
fn cases_for(
    label: &str,
    plugin: &Arc<LoadedPlugin>,
    rt: &Arc<tokio::runtime::Runtime>,
    (jz, pods_list): (&Arc<Jinghzhu>, &Arc<Vec<Pod>>),
    now: SystemTime,
    with_input_only: bool,
) -> Vec<Case> {
    let pods = pods_list.len();
    let name = |what: &str| format!("{pods} pods, {label}, {what}");
    let input = plugin.input(jz, pods_list, now);
    let out = rt
        .block_on(plugin.call(&input, "default/web"))
        .expect("call");
    assert!(out.status.is_none() && out.create_pods.is_empty());
    let mut cases = Vec::new();
    let (p, r, j, l) = (plugin.clone(), rt.clone(), jz.clone(), pods_list.clone());
    cases.push(Case {
        name: name("with conversion"),
        samples: Vec::new(),
        run: Box::new(move || {
            let input = p.input(&j, &l, now);
            let output = r.block_on(p.call(&input, "default/web")).expect("call");
            black_box(RawProposal { input, output }.into_actions());
        }),
    });
    let (p, r, i) = (plugin.clone(), rt.clone(), input.clone());
    cases.push(Case {
        name: name("call only"),
        samples: Vec::new(),
        run: Box::new(move || {
            black_box(r.block_on(p.call(&i, "default/web")).expect("call"));
        }),
    });
    let r = rt.clone();
    let mut reused = rt.block_on(plugin.reusable_instance()).expect("instance");
    let i = input.clone();
    cases.push(Case {
        name: name("reused instance"),
        samples: Vec::new(),
        run: Box::new(move || {
            let out = match &i {
                PluginInput::V0_1(input) => r.block_on(reused.call_reconcile(input)),
                PluginInput::V0_2(input) => r.block_on(reused.call_reconcile_v2(input)),
            };
            black_box(out.expect("call"));
        }),
    });
    let (p, r) = (plugin.clone(), rt.clone());
    cases.push(Case {
        name: name("instance only"),
        samples: Vec::new(),
        run: Box::new(move || {
            black_box(r.block_on(p.reusable_instance()).expect("instance"));
        }),
    });
    if with_input_only {
        let (p, j, l) = (plugin.clone(), jz.clone(), pods_list.clone());
        cases.push(Case {
            name: format!("{pods} pods, {}, input only", p.contract()),
            samples: Vec::new(),
            run: Box::new(move || {
                black_box(p.input(&j, &l, now));
            }),
        });
    }
    cases
}

/// Warms every case up, then times them interleaved, round after round.
fn run(cases: &mut [Case], rounds: usize, per_round: usize) {
    for case in cases.iter_mut() {
        for _ in 0..per_round {
            (case.run)();
        }
    }
    for _ in 0..rounds {
        for case in cases.iter_mut() {
            for _ in 0..per_round {
                let started = Instant::now();
                (case.run)();
                case.samples.push(started.elapsed());
            }
        }
    }
}

/// Prints every case's p50 and p99, then the ratios and the goals.
fn report(cases: &mut [Case], rounds: usize, per_round: usize) {
    println!(
        "replicaset plugin, steady state; {rounds} rounds × {per_round} calls per case; \
         concurrency_support off"
    );
    println!("{:<44} {:>10} {:>10}", "case", "p50 µs", "p99 µs");
    let mut p50 = HashMap::new();
    for case in cases.iter_mut() {
        case.samples.sort_unstable();
        let (a, b) = (
            percentile(&case.samples, 0.5),
            percentile(&case.samples, 0.99),
        );
        p50.insert(case.name.clone(), micros(a));
        println!("{:<44} {:>10.2} {:>10.2}", case.name, micros(a), micros(b));
    }
    for pods in [10, 100] {
        for what in ["with conversion", "call only", "reused instance"] {
            for (new, old) in [("0.2 view", "0.2 owned"), ("0.2 view", "0.1")] {
                let (Some(a), Some(b)) = (
                    p50.get(&format!("{pods} pods, {new}, {what}")),
                    p50.get(&format!("{pods} pods, {old}, {what}")),
                ) else {
                    continue;
                };
                println!(
                    "{pods} pods, {what}: {new} / {old} = {:.2} (p50 {a:.2} vs {b:.2} µs)",
                    a / b
                );
            }
        }
    }
    for (pods, goal) in GOALS {
        if let Some(a) = p50.get(&format!("{pods} pods, 0.2 view, with conversion")) {
            let verdict = if *a <= goal { "met" } else { "missed" };
            println!("goal: {pods} pods with conversion ≤ {goal} µs p50: {a:.2} µs, {verdict}");
        }
    }
}

fn main() {
    let rounds: usize = arg("--rounds").and_then(|n| n.parse().ok()).unwrap_or(20);
    let only = arg("--only");
    let per_round = 200;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let plugins: Vec<(&str, Arc<LoadedPlugin>)> = BUILDS
        .iter()
        .map(|(label, features)| {
            let path = build("replicaset-plugin", features, Toolchain::Wasip2);
            let bytes = std::fs::read(&path).expect("artifact");
            (*label, runtime.load(&bytes, "bench").expect("load"))
        })
        .collect();
    assert_eq!(plugins[0].1.contract(), ContractVersion::V0_1);
    assert!(
        plugins[1..]
            .iter()
            .all(|(_, p)| p.contract() == ContractVersion::V0_2)
    );
    let rt = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime"),
    );
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);

    let mut cases: Vec<Case> = Vec::new();
    for pods in [10usize, 100] {
        let (jz, pods_list) = steady(&plugins[0].1, pods, now);
        let mut seen = Vec::new();
        for (label, plugin) in &plugins {
            let first_of_version = !seen.contains(&plugin.contract());
            seen.push(plugin.contract());
            let object = (&jz, &pods_list);
            cases.extend(cases_for(label, plugin, &rt, object, now, first_of_version));
        }
    }
    if let Some(only) = &only {
        cases.retain(|case| case.name.contains(only.as_str()));
    }
    run(&mut cases, rounds, per_round);
    report(&mut cases, rounds, per_round);
}
