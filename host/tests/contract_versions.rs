//! Contract 0.1 and 0.2 plugins side by side in one host: the example
//! plugin built for each version (the SDK's default, 0.2, and its
//! `contract-0-1` feature) loads, is told apart, passes the golden
//! fixtures, and proposes exactly the same on every sample input, whichever
//! version's records the input is given in.

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PodTemplateSpec;
use support::*;
use wasm_artifacts::{Toolchain, build};
use wasm_operator::offline::{compare, fixtures};
use wasm_operator::runtime::bindings::v2;
use wasm_operator::runtime::{
    ContractVersion, LoadedPlugin, PluginInput, Runtime, RuntimeConfig, block_on, convert,
    convert_v2,
};

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn load(runtime: &Runtime, features: &[&str]) -> Arc<LoadedPlugin> {
    let path = build("replicaset-plugin", features, Toolchain::Wasip2);
    let bytes = std::fs::read(&path).expect("read artifact");
    runtime
        .load(&bytes, &path.display().to_string())
        .expect("loads")
}

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

/// Scale up (with and without a template), down, converged, and mixes of
/// phases, readiness and terminating pods.
fn samples() -> Vec<(
    wasm_operator::crd::Jinghzhu,
    Vec<k8s_openapi::api::core::v1::Pod>,
)> {
    let mut out = Vec::new();
    for (desired, pods) in [(0, 0), (3, 0), (1, 3), (3, 3), (2, 5), (0, 4), (10, 10)] {
        let mut jz = jinghzhu("web", desired);
        if desired == 3 {
            let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
                "metadata": {"labels": {"app": "web"}, "annotations": {"note": "ü"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }))
            .expect("template");
            jz.spec.template = Some(Box::new(template));
        }
        let pods = (0..pods)
            .map(|i| {
                let mut p = pod(
                    &jz,
                    &format!("web-{i:05}"),
                    ["Running", "Pending", "Failed"][i % 3],
                    i % 2 == 0,
                    100 + i as i64,
                );
                if i == 1 {
                    p.metadata.deletion_timestamp = p.metadata.creation_timestamp.clone();
                }
                p
            })
            .collect();
        out.push((jz, pods));
    }
    out
}

#[test]
fn a_0_1_and_a_0_2_build_of_the_example_plugin_agree_everywhere() {
    let runtime = runtime();
    let new = load(&runtime, &[]);
    let old = load(&runtime, &["contract-0-1"]);
    assert_eq!(new.contract(), ContractVersion::V0_2);
    assert_eq!(old.contract(), ContractVersion::V0_1);
    assert_eq!(new.info(), old.info());
    assert_ne!(new.digest(), old.digest());

    for (jz, pods) in samples() {
        let a = old.reconcile_blocking(&jz, &pods, now()).expect("0.1 call");
        let b = new.reconcile_blocking(&jz, &pods, now()).expect("0.2 call");
        assert_eq!(a, b, "desired {} with {} pods", jz.spec.desired, pods.len());

        // Either plugin takes either version's records.
        let v1 = convert::input(&jz, &pods, now());
        let v2_input = convert_v2::input(&jz, &pods, now());
        for plugin in [&old, &new] {
            let from_v1 = block_on(plugin.call(&PluginInput::V0_1(v1.clone()), "shop/web"))
                .expect("runs")
                .expect("ok");
            let from_v2 = block_on(plugin.call_reconcile_v2(&v2_input, "shop/web"))
                .expect("runs")
                .expect("ok");
            assert_eq!(from_v1, from_v2);
        }
    }
}

#[test]
fn both_builds_pass_the_golden_fixtures_and_compare_equal() {
    let runtime = runtime();
    let new = load(&runtime, &[]);
    let old = load(&runtime, &["contract-0-1"]);
    let dir = fixtures_dir();
    for plugin in [&new, &old] {
        let results = fixtures::run_all(plugin, &dir, fixtures::Mode::Check).expect("cases");
        assert!(results.len() >= 10, "{} cases", results.len());
        let failed: Vec<_> = results.iter().filter(|r| r.failure.is_some()).collect();
        assert!(failed.is_empty(), "{:?}: {failed:?}", plugin.contract());
    }
    let differences: Vec<_> = compare::compare_cases(&new, &old, &dir)
        .expect("cases")
        .into_iter()
        .filter(|c| c.difference.is_some())
        .collect();
    assert!(differences.is_empty(), "{differences:?}");
}

#[test]
fn the_0_2_input_crosses_in_a_handful_of_lists() {
    let jz = jinghzhu("web", 10);
    let pods: Vec<_> = (0..10)
        .map(|i| pod(&jz, &format!("web-{i:05}"), "Running", true, 100))
        .collect();
    let input: v2::ReconcileInput = convert_v2::input(&jz, &pods, now());
    // bytes, ends, pairs, owners, pods (+ the status' pod list when there
    // is one), whatever the number of pods; the owner's strings are shared.
    assert_eq!(input.pods.len(), 10);
    assert_eq!(input.owners.len(), 10);
    let shared = ["jinghzhu.io/v1", "Jinghzhu", "web", "uid-web", "shop"];
    let strings = convert_v2::Strings::new(&input.strings).expect("table");
    for text in shared {
        let count = (0..strings.len() as u32)
            .filter(|&i| strings.get(i) == Ok(text))
            .count();
        assert_eq!(count, 1, "{text} stored once");
    }
}
