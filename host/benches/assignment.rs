//! What picking an object's plugin costs per reconcile (issue 41), side by
//! side in one run: the two calls `controller::reconcile` makes before it
//! calls a plugin, `PluginRouter::route` (which tenant resource serves the
//! object, under the router's read lock) and then `ActivePlugin::plugin_for`
//! on the chosen slot (canary or stable, under the slot's read lock).
//!
//! - `route/unselected/<N>`: an object no tenant selects, with N tenant
//!   resources (half select a namespace, half a label across the cluster):
//!   every selector is tried before the default slot is taken, the most
//!   a route does. `route/last_tenant/<N>`: an object only the
//!   lowest-precedence tenant (a label selector) selects: the same scan,
//!   ending on a match.
//! - `plugin_for/no_rollout`: a slot serving one plugin. `plugin_for/canary_*`:
//!   a canary rollout at its 25% step; an object in the cohort (served by
//!   the canary) and one outside it (the cohort hash, then the stable).
//! - `route_then_plugin_for/10_tenants_canary`: both, as a reconcile does
//!   them, with 10 tenants and the object's tenant rolling out a canary.
//!
//! After criterion's report it prints the median of each case (criterion's
//! own estimate, read back from its output directory).
//!
//! Run: `cargo bench -p wasm-operator --bench assignment -- --warm-up-time 1 --measurement-time 3`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use wasm_artifacts::{Toolchain, build};
use wasm_operator::crd::Jinghzhu;
use wasm_operator::crd::plugin::ObjectSelectorSpec;
use wasm_operator::judging::plan::{Strategy, in_cohort};
use wasm_operator::runtime::{LoadedPlugin, Runtime, RuntimeConfig};
use wasm_operator::slot::canary::CanaryStart;
use wasm_operator::slot::router::{PluginRouter, Selection};
use wasm_operator::slot::{ActivePlugin, RollbackPolicy};
use wasm_operator::telemetry::metrics::Metrics;

/// The criterion group (and directory) of every case.
const GROUP: &str = "assignment";

/// Tenant counts compared.
const TENANTS: [usize; 4] = [0, 1, 10, 100];

/// The canary's cohort in the rollout cases, in percent.
const CANARY_PERCENT: u32 = 25;

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (stable, canary) = load_plugins()?;
    let mut c = Criterion::default().configure_from_args();
    {
        // The router forwards its slots' swaps on the runtime.
        let _guard = rt.enter();
        routes(&mut c, &stable);
        plugin_for(&mut c, &stable, &canary)?;
        both(&mut c, &stable, &canary)?;
    }
    c.final_summary();
    print_medians();
    Ok(())
}

/// The example plugin v1 (stable) and v2 (canary), compiled in process.
fn load_plugins() -> anyhow::Result<(Arc<LoadedPlugin>, Arc<LoadedPlugin>)> {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })?;
    let load = |features: &[&str], name: &str| -> anyhow::Result<Arc<LoadedPlugin>> {
        let bytes = std::fs::read(build("replicaset-plugin", features, Toolchain::Wasip2))?;
        Ok(runtime.load(&bytes, name)?)
    };
    Ok((load(&[], "v1")?, load(&["v2"], "v2")?))
}

fn slot(plugin: &Arc<LoadedPlugin>) -> Arc<ActivePlugin> {
    Arc::new(ActivePlugin::new(
        plugin.clone(),
        RollbackPolicy::default(),
        Arc::new(Metrics::default()),
    ))
}

/// A slot serving `stable` with `canary` at its first step (25%), held
/// there (an hour per step, paused).
fn slot_with_canary(
    stable: &Arc<LoadedPlugin>,
    canary: &Arc<LoadedPlugin>,
) -> anyhow::Result<Arc<ActivePlugin>> {
    let slot = slot(stable);
    let strategy = Strategy {
        steps: vec![CANARY_PERCENT, 50],
        hold: Duration::from_secs(3600),
        min_reconciles: 1_000_000,
        thresholds: Default::default(),
    };
    let started = slot
        .canary()
        .start(canary.clone(), strategy, true)
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(started == CanaryStart::Started, "no rollout: {started:?}");
    Ok(slot)
}

fn object(namespace: &str, labels: &[(&str, &str)], uid: &str) -> Jinghzhu {
    wasm_operator_testkit::jinghzhu("web")
        .namespace(namespace)
        .uid(uid)
        .labels(labels)
        .build()
}

/// Tenant `i` of `n`: the first half select the namespace `team-<i>`, the
/// rest the label `team: <i>` across the cluster (lower precedence).
fn selection(i: usize, n: usize) -> Selection {
    let spec = if i < n / 2 {
        ObjectSelectorSpec {
            namespaces: vec![format!("team-{i}")],
            labels: None,
        }
    } else {
        ObjectSelectorSpec {
            namespaces: Vec::new(),
            labels: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("team".to_string(), i.to_string())])),
                ..LabelSelector::default()
            }),
        }
    };
    match Selection::from_spec(&spec) {
        Ok(selection) => selection,
        Err(err) => panic!("the bench's selector {i}: {err}"),
    }
}

/// A router with `n` tenants, each its own slot serving `plugin`; the
/// objects' namespace (`default`) opts in to the last.
fn router(n: usize, plugin: &Arc<LoadedPlugin>) -> PluginRouter {
    let router = PluginRouter::new(slot(plugin));
    for i in 0..n {
        router.upsert(&format!("tenant-{i}"), None, selection(i, n), &slot(plugin));
    }
    if n > 0 {
        router.set_opt_ins(
            [("default".to_string(), format!("tenant-{}", n - 1))]
                .into_iter()
                .collect(),
        );
    }
    router
}

fn routes(c: &mut Criterion, plugin: &Arc<LoadedPlugin>) {
    let mut group = c.benchmark_group(GROUP);
    let unselected = object("default", &[("app", "web"), ("team", "none")], "uid-0");
    for n in TENANTS {
        let router = router(n, plugin);
        group.bench_with_input(
            BenchmarkId::new("route/unselected", n),
            &unselected,
            |b, jz| b.iter(|| black_box(router.route(black_box(jz)))),
        );
        if n > 0 {
            let last = (n - 1).to_string();
            let selected = object("default", &[("app", "web"), ("team", &last)], "uid-0");
            assert_eq!(
                router.route(&selected).tenant,
                Some(format!("tenant-{}", n - 1))
            );
            group.bench_with_input(
                BenchmarkId::new("route/last_tenant", n),
                &selected,
                |b, jz| b.iter(|| black_box(router.route(black_box(jz)))),
            );
        }
    }
    group.finish();
}

/// A UID in (or outside) the 25% cohort.
fn uid(in_canary: bool) -> String {
    (0..)
        .map(|i| format!("00000000-0000-4000-8000-{i:012}"))
        .find(|uid| in_cohort(uid, CANARY_PERCENT) == in_canary)
        .unwrap_or_default()
}

fn plugin_for(
    c: &mut Criterion,
    stable: &Arc<LoadedPlugin>,
    canary: &Arc<LoadedPlugin>,
) -> anyhow::Result<()> {
    let mut group = c.benchmark_group(GROUP);
    let plain = slot(stable);
    let rolling = slot_with_canary(stable, canary)?;
    let (inside, outside) = (uid(true), uid(false));
    anyhow::ensure!(
        rolling.plugin_for(&inside).map(|p| p.digest().to_string())
            == Some(canary.digest().to_string()),
        "the cohort's object is not on the canary"
    );
    group.bench_function("plugin_for/no_rollout", |b| {
        b.iter(|| black_box(plain.plugin_for(black_box(&outside))))
    });
    group.bench_function("plugin_for/canary_cohort_object", |b| {
        b.iter(|| black_box(rolling.plugin_for(black_box(&inside))))
    });
    group.bench_function("plugin_for/canary_stable_object", |b| {
        b.iter(|| black_box(rolling.plugin_for(black_box(&outside))))
    });
    group.finish();
    Ok(())
}

fn both(
    c: &mut Criterion,
    stable: &Arc<LoadedPlugin>,
    canary: &Arc<LoadedPlugin>,
) -> anyhow::Result<()> {
    let mut group = c.benchmark_group(GROUP);
    let router = router(10, stable);
    // The object's tenant (the last, a label selector) rolls out a canary.
    router.upsert(
        "tenant-9",
        None,
        selection(9, 10),
        &slot_with_canary(stable, canary)?,
    );
    let uid = uid(true);
    let jz = object("default", &[("team", "9")], &uid);
    group.bench_function("route_then_plugin_for/10_tenants_canary", |b| {
        b.iter(|| {
            let route = router.route(black_box(&jz));
            black_box(route.slot.plugin_for(black_box(&uid)))
        })
    });
    group.finish();
    Ok(())
}

/// Where criterion writes its estimates (as criterion finds it).
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| wasm_artifacts::workspace_root().join("target"))
        .join("criterion")
}

/// Prints the median of every case this run measured.
fn print_medians() {
    let root = criterion_dir().join(GROUP);
    let mut cases = Vec::new();
    collect_estimates(&root, &root, &mut cases);
    if cases.is_empty() {
        println!("(no estimates under {})", root.display());
        return;
    }
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    println!("\nmedian per lookup ({}):", root.display());
    for (case, ns) in cases {
        println!("  {case:<48} {ns:>9.1} ns");
    }
}

/// Every `<case>/new/estimates.json` under `dir`: the case and its median in ns.
fn collect_estimates(root: &PathBuf, dir: &PathBuf, out: &mut Vec<(String, f64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() || path.ends_with("base") || path.ends_with("report") {
            continue;
        }
        let estimates = path.join("new").join("estimates.json");
        let median = std::fs::read(&estimates)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .and_then(|v| v["median"]["point_estimate"].as_f64());
        match median {
            Some(ns) => {
                let case = path.strip_prefix(root).unwrap_or(&path);
                out.push((case.display().to_string(), ns));
            }
            None => collect_estimates(root, &path, out),
        }
    }
}
