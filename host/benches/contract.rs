//! Contract 0.1 against 0.2, side by side in one run: the example plugin
//! built for each version (`replicaset-plugin` with and without the SDK's
//! `contract-0-1` feature), on the same Jinghzhu with 10 and 100 owned pods
//! in the steady state (desired met, status already up to date, so the
//! plugin proposes nothing; the most common reconcile).
//!
//! Cases, each timed call by call (p50 and p99 of every sample):
//! - `with conversion`: what the host does per reconcile: build the input
//!   of the plugin's version from the Kubernetes objects, a fresh instance
//!   from the pool, the call, and the output converted to actions;
//! - `call only`: the same with the input built beforehand;
//! - `reused instance`: calls on one kept instance (the floor; the host
//!   never reuses instances);
//! - `input only`: building the input alone.
//!
//! The cases run interleaved, round after round, so a noisy moment on this
//! shared machine hits all of them alike.
//!
//! Run: `cargo bench -p wasm-operator --bench contract` (`-- --rounds N`,
//! default 20 rounds of 200 calls per case; `-- --only TEXT` times only the
//! cases whose name contains TEXT, e.g. under `perf record`).

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

fn objects(pods: usize) -> (Jinghzhu, Vec<Pod>) {
    steady_objects(pods)
}

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

fn main() {
    let rounds: usize = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let only: Option<String> = std::env::args().skip_while(|a| a != "--only").nth(1);
    let per_round = 200;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let load = |features: &[&str]| -> Arc<LoadedPlugin> {
        let path = build("replicaset-plugin", features, Toolchain::Wasip2);
        let bytes = std::fs::read(&path).expect("artifact");
        runtime.load(&bytes, "bench").expect("load")
    };
    let plugins = [("0.1.0", load(&["contract-0-1"])), ("0.2.0", load(&[]))];
    assert_eq!(plugins[0].1.contract(), ContractVersion::V0_1);
    assert_eq!(plugins[1].1.contract(), ContractVersion::V0_2);
    let rt = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime"),
    );
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);

    let mut cases: Vec<Case> = Vec::new();
    for pods in [10usize, 100] {
        let (mut jz, pods_list) = objects(pods);
        // The steady state: the status the plugin would write is already there.
        let first = plugins[0]
            .1
            .reconcile_blocking(&jz, &pods_list, now)
            .expect("reconcile");
        assert!(first.create_pods.is_empty() && first.delete_pods.is_empty());
        jz.status = first.status.clone();
        let again = plugins[0]
            .1
            .reconcile_blocking(&jz, &pods_list, now)
            .expect("reconcile");
        assert!(again.status.is_none(), "steady state");
        let (jz, pods_list) = (Arc::new(jz), Arc::new(pods_list));

        for (version, plugin) in &plugins {
            let input = plugin.input(&jz, &pods_list, now);
            let out = rt
                .block_on(plugin.call(&input, "default/web"))
                .expect("call");
            assert!(out.status.is_none() && out.create_pods.is_empty());

            {
                let (plugin, rt, jz, pods_list) =
                    (plugin.clone(), rt.clone(), jz.clone(), pods_list.clone());
                cases.push(Case {
                    name: format!("{pods} pods, {version}, with conversion"),
                    samples: Vec::new(),
                    run: Box::new(move || {
                        let input = plugin.input(&jz, &pods_list, now);
                        let output = rt
                            .block_on(plugin.call(&input, "default/web"))
                            .expect("call");
                        black_box(RawProposal { input, output }.into_actions());
                    }),
                });
            }
            {
                let (plugin, rt, input) = (plugin.clone(), rt.clone(), input.clone());
                cases.push(Case {
                    name: format!("{pods} pods, {version}, call only"),
                    samples: Vec::new(),
                    run: Box::new(move || {
                        black_box(
                            rt.block_on(plugin.call(&input, "default/web"))
                                .expect("call"),
                        );
                    }),
                });
            }
            {
                let rt2 = rt.clone();
                let mut reused = rt.block_on(plugin.reusable_instance()).expect("instance");
                let input = input.clone();
                cases.push(Case {
                    name: format!("{pods} pods, {version}, reused instance"),
                    samples: Vec::new(),
                    run: Box::new(move || {
                        let out = match &input {
                            PluginInput::V0_1(input) => rt2.block_on(reused.call_reconcile(input)),
                            PluginInput::V0_2(input) => {
                                rt2.block_on(reused.call_reconcile_v2(input))
                            }
                        };
                        black_box(out.expect("call"));
                    }),
                });
            }
            {
                let (plugin, jz, pods_list) = (plugin.clone(), jz.clone(), pods_list.clone());
                cases.push(Case {
                    name: format!("{pods} pods, {version}, input only"),
                    samples: Vec::new(),
                    run: Box::new(move || {
                        black_box(plugin.input(&jz, &pods_list, now));
                    }),
                });
            }
        }
    }

    if let Some(only) = &only {
        cases.retain(|case| case.name.contains(only.as_str()));
    }
    // Warm up, then interleaved rounds.
    for case in &mut cases {
        for _ in 0..per_round {
            (case.run)();
        }
    }
    for _ in 0..rounds {
        for case in &mut cases {
            for _ in 0..per_round {
                let started = Instant::now();
                (case.run)();
                case.samples.push(started.elapsed());
            }
        }
    }

    println!(
        "contract 0.1 vs 0.2, replicaset plugin, steady state; {rounds} rounds × {per_round} calls per case"
    );
    println!("{:<44} {:>10} {:>10}", "case", "p50 µs", "p99 µs");
    let mut p50 = std::collections::HashMap::new();
    for case in &mut cases {
        case.samples.sort_unstable();
        let (a, b) = (
            percentile(&case.samples, 0.5),
            percentile(&case.samples, 0.99),
        );
        p50.insert(case.name.clone(), micros(a));
        println!("{:<44} {:>10.2} {:>10.2}", case.name, micros(a), micros(b));
    }
    for pods in [10, 100] {
        for what in [
            "with conversion",
            "call only",
            "reused instance",
            "input only",
        ] {
            for new_version in ["0.2.0"] {
                let (Some(old), Some(new)) = (
                    p50.get(&format!("{pods} pods, 0.1.0, {what}")),
                    p50.get(&format!("{pods} pods, {new_version}, {what}")),
                ) else {
                    continue;
                };
                println!(
                    "{pods} pods, {what}: {new_version} / 0.1.0 = {:.2} (p50 {new:.2} vs {old:.2} µs)",
                    new / old
                );
            }
        }
    }
}
