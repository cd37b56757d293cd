//! The generic contract's call against the `Jinghzhu` one, side by side in
//! one run, for the same object and the same number of children: a
//! Jinghzhu with 10 and 100 owned pods in the steady state.
//!
//! - `0.2`: what a `Jinghzhu` reconcile does per call: the 0.2 input built
//!   from the objects, a fresh instance, the call (the example plugin
//!   `replicaset-plugin`, the SDK's borrowed view), the output converted to
//!   actions.
//! - `0.3`: what a declared controller does per call: the same Jinghzhu and
//!   pods as dynamic objects (as its caches hold them), the 0.3 input built
//!   from them (the pods as one child kind), a fresh instance, the call
//!   (`misbehaving-controller-plugin` in its good mode: it reads the
//!   parent's spec and its ConfigMap children and proposes one ConfigMap
//!   and a status; its bindings lift the whole input, every pod included),
//!   and the output checked into a plan (`declared::checks`).
//! - `0.3 kept`: the same, with the parent's and the children's records kept per (uid,
//!   `resourceVersion`) as a declared controller keeps them
//!   (`convert_v3::Records`, lent to the input and put back after the
//!   call): in the steady state no child is serialised or copied again.
//!
//! The two plugins differ in their own logic, so the ratio bounds what the
//! contract itself costs (metadata typed, the rest one JSON text per
//! object) rather than isolating it. Issue 53's goal: 0.3 at most 2× 0.2.
//!
//! Run: `cargo bench -p wasm-operator --bench generic_contract`
//! (`-- --rounds N`, default 20 rounds of 200 calls per case).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kube::core::DynamicObject;
use wasm_artifacts::{Toolchain, build};
use wasm_operator::apply::policy::PolicyConfig;
use wasm_operator::crd::controller::KindRef;
use wasm_operator::declared::checks::{self, Declared, Parent};
use wasm_operator::declared::kinds::ResolvedKind;
use wasm_operator::offline::sample::steady_objects;
use wasm_operator::runtime::bindings::v3;
use wasm_operator::runtime::{LoadedPlugin, RawProposal, Runtime, RuntimeConfig, convert_v3};

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn kind(api_version: &str, kind: &str) -> ResolvedKind {
    ResolvedKind::by_convention(&KindRef {
        api_version: api_version.into(),
        kind: kind.into(),
    })
}

fn dynamic<T: serde::Serialize>(object: &T) -> DynamicObject {
    serde_json::from_value(serde_json::to_value(object).expect("json")).expect("dynamic")
}

fn load(runtime: &Runtime, package: &str) -> Arc<LoadedPlugin> {
    let path = build(package, &[], Toolchain::Wasip2);
    let bytes = std::fs::read(&path).expect("artifact");
    runtime.load(&bytes, package).expect("load")
}

/// The 0.3 input for `parent` with its pods as one child kind (and no
/// ConfigMaps).
fn generic_input(
    parent: &DynamicObject,
    pods: &[DynamicObject],
    now: SystemTime,
) -> v3::ReconcileInput {
    v3::ReconcileInput {
        parent: convert_v3::object(parent, "jinghzhu.io/v1", "Jinghzhu"),
        children: vec![
            convert_v3::children("v1", "ConfigMap", []),
            convert_v3::children("v1", "Pod", pods),
        ],
        now: convert_v3::timestamp(now),
    }
}

/// The kept records of one case: the parent's kind, then the two child
/// kinds (ConfigMaps, Pods).
type Kept = [convert_v3::Records; 3];

/// [`generic_input`] with the parent's and the children's records kept
/// between calls (lent to the input: [`put_back`] returns them).
fn kept_input(
    parent: &DynamicObject,
    pods: &[DynamicObject],
    records: &Kept,
    now: SystemTime,
) -> v3::ReconcileInput {
    let mut parent = records[0].take_children([parent]).objects;
    v3::ReconcileInput {
        parent: parent.pop().expect("the parent"),
        children: vec![records[1].take_children([]), records[2].take_children(pods)],
        now: convert_v3::timestamp(now),
    }
}

/// Puts the records of `input` back for the next call.
fn put_back(input: v3::ReconcileInput, records: &Kept) {
    records[0].put_back(v3::Children {
        api_version: input.parent.api_version.clone(),
        kind: input.parent.kind.clone(),
        objects: vec![input.parent],
    });
    for (kept, children) in records[1..].iter().zip(input.children) {
        kept.put_back(children);
    }
}

/// One 0.3 call as a declared controller makes it: the input, the call,
/// the output checked into a plan.
fn generic_call(
    rt: &tokio::runtime::Runtime,
    plugin: &LoadedPlugin,
    declared: &Declared<'_>,
    input: &v3::ReconcileInput,
) {
    let output = rt
        .block_on(plugin.call_generic(input, "default/web"))
        .expect("call");
    let about = Parent {
        name: "web",
        namespace: "default",
        uid: "u",
    };
    let owned = [BTreeMap::new(), BTreeMap::new()];
    black_box(checks::check(declared, &about, &owned, output).expect("plan"));
}

/// Pushes how long `f` took to `samples` when `keep`.
fn timed(keep: bool, samples: &mut Vec<Duration>, f: impl FnOnce()) {
    let started = Instant::now();
    f();
    if keep {
        samples.push(started.elapsed());
    }
}

/// p50 of `run`'s samples, in µs.
fn p50(samples: &mut [Duration]) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

fn main() {
    let rounds: usize = arg("--rounds").and_then(|n| n.parse().ok()).unwrap_or(20);
    let per_round = 200;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let jinghzhu = load(&runtime, "replicaset-plugin");
    let generic = load(&runtime, "misbehaving-controller-plugin");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    // The controller the 0.3 call is checked for: Jinghzhu parents with
    // ConfigMap and Pod children.
    let (parent_kind, policy) = (kind("jinghzhu.io/v1", "Jinghzhu"), PolicyConfig::default());
    let children = [("v1", "ConfigMap", 16), ("v1", "Pod", 1000)]
        .map(|(api_version, name, most)| (kind(api_version, name), most, 65536));
    let declared = Declared {
        controller: "bench",
        parent: &parent_kind,
        children: &children,
        policy: &policy,
    };
    println!("steady state; {rounds} rounds × {per_round} calls per case; p50 µs");
    for pods in [10usize, 100] {
        let (mut jz, pod_list) = steady_objects(pods);
        let first = jinghzhu
            .reconcile_blocking(&jz, &pod_list, now)
            .expect("reconcile");
        jz.status = first.status;
        let parent = dynamic(&jz);
        let pod_objects: Vec<DynamicObject> = pod_list.iter().map(dynamic).collect();
        let records = [
            ("jinghzhu.io/v1", "Jinghzhu"),
            ("v1", "ConfigMap"),
            ("v1", "Pod"),
        ]
        .map(|(api_version, kind)| convert_v3::Records::new(api_version, kind, 4096));
        let mut samples: [Vec<Duration>; 5] = Default::default();
        let [old, new, input_only, kept, kept_input_only] = &mut samples;
        for round in 0..=rounds {
            let keep = round > 0;
            for _ in 0..per_round {
                timed(keep, old, || {
                    let input = jinghzhu.input(&jz, &pod_list, now);
                    let output = rt
                        .block_on(jinghzhu.call(&input, "default/web"))
                        .expect("call");
                    black_box(RawProposal { input, output }.into_actions());
                });
                timed(keep, input_only, || {
                    black_box(generic_input(&parent, &pod_objects, now));
                });
                timed(keep, new, || {
                    let input = generic_input(&parent, &pod_objects, now);
                    generic_call(&rt, &generic, &declared, &input);
                });
                timed(keep, kept_input_only, || {
                    let input = black_box(kept_input(&parent, &pod_objects, &records, now));
                    put_back(input, &records);
                });
                timed(keep, kept, || {
                    let input = kept_input(&parent, &pod_objects, &records, now);
                    generic_call(&rt, &generic, &declared, &input);
                    put_back(input, &records);
                });
            }
        }
        let [a, b, c, d, e] = samples.each_mut().map(|s| p50(s));
        println!(
            "{pods} pods: 0.2 {a:.2}; 0.3 {b:.2} (its input alone {c:.2}), 0.3 / 0.2 = {:.2}; \
             0.3 kept {d:.2} (its input alone {e:.2}), 0.3 kept / 0.2 = {:.2} (goal ≤ 2)",
            b / a,
            d / a
        );
    }
}
