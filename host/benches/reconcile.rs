//! What one reconcile costs, and what loading a plugin costs.
//!
//! - `reconcile_10_pods`: the example plugin on a Jinghzhu with 10 owned
//!   pods (desired 10, so the plugin reads them all and proposes nothing).
//!   `fresh_instance/*` is what the host does on every reconcile: a new
//!   `Store` and instance from the `InstancePre`, the call, the drop; with
//!   the pooling allocator and with on-demand mmap (the default).
//!   `reused_instance` calls one kept instance again and again (the host
//!   never does this; it is the floor a fresh instance is compared with).
//!   `fresh_instance_with_conversion` is the host's default (the pool) plus
//!   building the WIT input from the Kubernetes objects and converting the
//!   output back: the figure the plugin call goal is about.
//!   `store_setup_only` is the `Store` and WASI context alone.
//! - `load`: `Runtime::load` of the component with Cranelift compiling it
//!   (cache off) versus from a warm precompiled cache (read, checksum,
//!   deserialize); both include linking and the `info()` call.
//!
//! - `validate`: what the host does with an output before applying it.
//!   `10_creates/<policy>`: a reconcile that creates 10 pods from the
//!   default template (empty `spec-json`): the bounds check on the WIT
//!   output, the conversion, and validation with the pod policy; under
//!   `restricted` each create carries the default spec written out (parsed
//!   once, checked once). `reject_200000_creates`: the bounds check refusing
//!   a lifted output of 200 000 creates (the case where an admin loosened
//!   `--plugin-output-limit-kib`), including dropping it.
//!   `call_200000_creates_default_limit`: the misbehaving plugin proposing
//!   200 000 creates at the default output limit, whole call (guest time
//!   included): refused while the host copies the output.
//!
//! Run: `cargo bench -p wasm-operator --bench reconcile`

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use wasm_artifacts::{Toolchain, build};
use wasm_operator::apply::policy::{PodPolicy, PolicyConfig};
use wasm_operator::apply::validate::{self, Limits};
use wasm_operator::crd::Jinghzhu;
use wasm_operator::offline::sample::steady_objects;
use wasm_operator::runtime::bindings as wit;
use wasm_operator::runtime::config::DEFAULT_POOL_INSTANCES;
use wasm_operator::runtime::state::PluginState;
use wasm_operator::runtime::tags::CallTags;
use wasm_operator::runtime::{InstanceAllocator, LoadOutcome, Runtime, RuntimeConfig, convert};

const PODS: usize = 10;

fn plugin_bytes() -> Vec<u8> {
    let path = build("replicaset-plugin", &[], Toolchain::Wasip2);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn objects() -> (Jinghzhu, Vec<Pod>) {
    steady_objects(PODS)
}

fn runtime(allocator: InstanceAllocator, cache_dir: Option<&Path>) -> Runtime {
    Runtime::new(RuntimeConfig {
        allocator,
        cache_dir: cache_dir.map(Path::to_path_buf),
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn reconcile(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let bytes = plugin_bytes();
    let (jz, pods) = objects();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let input = convert::input(&jz, &pods, now);
    let mut group = c.benchmark_group("reconcile_10_pods");

    for (name, allocator) in [
        (
            "fresh_instance/pooling",
            InstanceAllocator::Pooling {
                max_instances: DEFAULT_POOL_INSTANCES,
            },
        ),
        ("fresh_instance/on_demand", InstanceAllocator::OnDemand),
    ] {
        let runtime = runtime(allocator, None);
        let plugin = runtime.load(&bytes, "bench").expect("load");
        let check = rt
            .block_on(plugin.call_reconcile(&input, "default/web"))
            .expect("reconcile");
        assert!(check.create_pods.is_empty() && check.delete_pods.is_empty());
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    rt.block_on(plugin.call_reconcile(black_box(&input), "default/web"))
                        .expect("reconcile"),
                )
            })
        });
    }

    let runtime = runtime(InstanceAllocator::default(), None);
    let plugin = runtime.load(&bytes, "bench").expect("load");
    let mut reused = rt.block_on(plugin.reusable_instance()).expect("instance");
    group.bench_function("reused_instance", |b| {
        b.iter(|| {
            black_box(
                rt.block_on(reused.call_reconcile(black_box(&input)))
                    .expect("reconcile"),
            )
        })
    });
    drop(reused);
    group.bench_function("fresh_instance_with_conversion", |b| {
        b.iter(|| {
            let input = convert::input(black_box(&jz), black_box(&pods), now);
            let output = rt
                .block_on(plugin.call_reconcile(&input, "default/web"))
                .expect("reconcile");
            black_box(convert::output(output, &input))
        })
    });
    group.bench_function("store_setup_only", |b| {
        b.iter(|| {
            let state = PluginState::new(
                CallTags::new("bench", plugin.digest(), "default/web"),
                64 << 20,
            );
            black_box(wasmtime::Store::new(runtime.engine(), state))
        })
    });
    group.finish();
}

fn load(c: &mut Criterion) {
    let bytes = plugin_bytes();
    let cache = tempfile::tempdir().expect("temp dir");
    let mut group = c.benchmark_group("load");
    group.sample_size(10);

    let uncached = runtime(InstanceAllocator::default(), None);
    group.bench_function("compile", |b| {
        b.iter(|| {
            let plugin = uncached.load(black_box(&bytes), "bench").expect("load");
            assert_eq!(plugin.load_outcome(), LoadOutcome::Compiled);
        })
    });

    let cached = runtime(InstanceAllocator::default(), Some(cache.path()));
    cached.load(&bytes, "bench").expect("fill the cache");
    group.sample_size(50);
    group.bench_function("precompiled_cache", |b| {
        b.iter(|| {
            let plugin = cached.load(black_box(&bytes), "bench").expect("load");
            assert_eq!(plugin.load_outcome(), LoadOutcome::FromCache);
        })
    });
    group.finish();
}

fn creates(n: usize, spec_json: &str) -> wit::ReconcileOutput {
    wit::ReconcileOutput {
        create_pods: vec![
            wit::PodCreate {
                name: None,
                generate_name: Some("web-".into()),
                labels: vec![],
                annotations: vec![],
                spec_json: spec_json.into(),
            };
            n
        ],
        delete_pods: vec![],
        status: None,
        requeue_after_ms: None,
        events: vec![wit::Event {
            event_type: wit::EventType::Normal,
            reason: "ScalingUp".into(),
            message: format!("Creating {n} pod(s)"),
        }],
    }
}

fn validation(c: &mut Criterion) {
    let (mut jz, _) = objects();
    jz.spec.desired = PODS as u32;
    let limits = Limits::default();
    let input = convert::input(&jz, &[], SystemTime::UNIX_EPOCH);
    let mut group = c.benchmark_group("validate");
    for (name, policy, spec) in [
        ("10_creates/template", PodPolicy::Template, ""),
        (
            "10_creates/restricted",
            PodPolicy::Restricted,
            convert::default_pod_spec_json(),
        ),
    ] {
        let config = PolicyConfig {
            policy,
            ..PolicyConfig::default()
        };
        let output = creates(PODS, spec);
        group.bench_function(name, |b| {
            b.iter_batched(
                || output.clone(),
                |out| {
                    validate::check_bounds(&out, &jz, &[], &limits).expect("within bounds");
                    let proposal = convert::output(out, &input);
                    let validated =
                        validate::validate(&jz, &[], &proposal, &config).expect("valid");
                    black_box((proposal, validated))
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }

    let many = creates(200_000, "");
    group.sample_size(20);
    group.bench_function("reject_200000_creates", |b| {
        b.iter_batched(
            || many.clone(),
            |out| {
                let refused = validate::check_bounds(&out, &jz, &[], &limits).is_err();
                drop(out);
                assert!(refused);
            },
            criterion::BatchSize::LargeInput,
        )
    });

    let path = build("misbehaving-plugin", &[], Toolchain::Wasip2);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let runtime = runtime(RuntimeConfig::default().allocator, None);
    let plugin = runtime.load(&bytes, "misbehaving").expect("load");
    let mut hostile = jz.clone();
    hostile.metadata.annotations = Some(
        [("test.jinghzhu.io/misbehave".to_string(), "many".to_string())]
            .into_iter()
            .collect(),
    );
    let hostile_input = convert::input(&hostile, &[], SystemTime::UNIX_EPOCH);
    group.bench_function("call_200000_creates_default_limit", |b| {
        b.iter(|| {
            let result = wasm_operator::runtime::block_on(
                plugin.call_reconcile(&hostile_input, "bench/hostile"),
            )
            .expect("runs");
            assert!(result.is_err(), "over the output limit");
        })
    });
    group.finish();
}

fn short() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = short();
    targets = reconcile, load, validation
}
criterion_main!(benches);
