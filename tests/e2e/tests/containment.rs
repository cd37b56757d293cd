//! Containment end to end: a hostile plugin (the misbehaving test plugin,
//! driven by the annotation `test.jinghzhu.io/misbehave`) against a real
//! control plane. For every hazard the host stays up, objects the same
//! plugin reconciles normally keep converging, and the offending object gets
//! a Warning Event naming the rule it broke.

use std::time::{Duration, Instant};

use e2e_tests::{HostOptions, RunningHost, TestEnv, plugin};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use wasm_operator::apply::policy::{PodPolicy, PolicyConfig};
use wasm_operator::controller::ControllerConfig;
use wasm_operator::controller::budget::BudgetConfig;
use wasm_operator::crd::Jinghzhu;

const MISBEHAVE: &str = "test.jinghzhu.io/misbehave";
const CONVERGE: Duration = Duration::from_secs(90);

fn misbehaving() -> std::path::PathBuf {
    plugin("misbehaving-plugin", &[])
}

async fn host_with(env: &TestEnv, controller: ControllerConfig) -> anyhow::Result<RunningHost> {
    let mut options = HostOptions::file(&misbehaving());
    options.controller = controller;
    RunningHost::start_with(env, options).await
}

/// Creates `bad` objects (name, mode) and one well-behaved `good` object;
/// waits for the good one to converge.
async fn with_good_neighbour(env: &TestEnv, bad: &[(&str, &str)]) -> anyhow::Result<()> {
    for (name, mode) in bad {
        env.create(name, 2, &[(MISBEHAVE, mode)]).await?;
    }
    env.create("good", 2, &[]).await?;
    env.wait_converged("good", 2, CONVERGE).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_template_policy_refuses_every_spec_but_the_template() -> anyhow::Result<()> {
    let env = TestEnv::new("policy-template").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    let attacks = [
        ("caps", "escalate:capabilities"),
        ("hostport", "escalate:host-port"),
        ("secret", "escalate:secret-volume"),
        ("account", "escalate:service-account"),
        ("seccomp", "escalate:seccomp-unconfined"),
        ("tolerate", "escalate:tolerations"),
        ("pinned", "escalate:node-selector"),
        ("priority", "escalate:priority-class"),
        ("image", "escalate:image"),
    ];
    with_good_neighbour(&env, &attacks).await?;
    for (name, _) in attacks {
        env.wait_event(name, "RejectedOutput", "template/spec-differs", CONVERGE)
            .await?;
        assert!(
            env.owned_pods(name).await?.is_empty(),
            "{name}: nothing applied"
        );
    }
    env.create("labels", 1, &[(MISBEHAVE, "foreign-labels")])
        .await?;
    env.wait_event("labels", "RejectedOutput", "labels/", CONVERGE)
        .await?;
    assert!(env.owned_pods("labels").await?.is_empty());
    env.wait_converged("good", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_restricted_policy_names_each_broken_rule() -> anyhow::Result<()> {
    let env = TestEnv::new("policy-restricted").await?;
    let host = host_with(
        &env,
        ControllerConfig {
            policy: PolicyConfig {
                policy: PodPolicy::Restricted,
                ..PolicyConfig::default()
            },
            ..ControllerConfig::default()
        },
    )
    .await?;
    // Each attack and a rule id its Event must name.
    let attacks = [
        ("caps", "escalate:capabilities", "capabilities"),
        ("hostport", "escalate:host-port", "host-ports"),
        ("secret", "escalate:secret-volume", "host/volume-source"),
        (
            "account",
            "escalate:service-account",
            "host/service-account",
        ),
        ("seccomp", "escalate:seccomp-unconfined", "seccomp"),
        ("tolerate", "escalate:tolerations", "host/tolerations"),
        ("privileged", "escalate:privileged", "privileged"),
        ("hostnet", "escalate:host-network", "host-namespaces"),
        ("hostpath", "escalate:host-path", "hostPath volume"),
        ("root", "escalate:run-as-root", "run-as"),
    ];
    let modes: Vec<(&str, &str)> = attacks.iter().map(|(n, m, _)| (*n, *m)).collect();
    with_good_neighbour(&env, &modes).await?;
    for (name, _, rule) in attacks {
        env.wait_event(name, "RejectedOutput", rule, CONVERGE)
            .await?;
        assert!(
            env.owned_pods(name).await?.is_empty(),
            "{name}: nothing applied"
        );
    }
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_beyond_the_bounds_are_refused_before_expansion() -> anyhow::Result<()> {
    let env = TestEnv::new("bounds").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    with_good_neighbour(
        &env,
        &[
            ("many", "many"),
            ("over", "over-create"),
            ("huge", "huge-status"),
        ],
    )
    .await?;
    env.wait_event("many", "PluginFailed", "limits/output-too-large", CONVERGE)
        .await?;
    env.wait_event(
        "over",
        "RejectedOutput",
        "limits/creates-beyond-desired",
        CONVERGE,
    )
    .await?;
    env.wait_event("huge", "RejectedOutput", "limits/status-size", CONVERGE)
        .await?;
    for name in ["many", "over", "huge"] {
        assert!(
            env.owned_pods(name).await?.is_empty(),
            "{name}: nothing applied"
        );
    }
    host.stop().await;
    Ok(())
}

/// Contract 0.2 outputs whose references do not resolve (a string id past
/// the table, a span past `pairs`, bytes that are not UTF-8, an end past
/// the bytes) are refused whole: the rule `bad-output` in a Warning Event,
/// not even the output's valid creates applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_that_break_the_wire_contract_are_refused_whole() -> anyhow::Result<()> {
    let env = TestEnv::new("bad-wire").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    let broken = [
        ("wire-id", "bad-wire:string-id"),
        ("wire-span", "bad-wire:span"),
        ("wire-utf8", "bad-wire:utf8"),
        ("wire-ends", "bad-wire:ends"),
    ];
    with_good_neighbour(&env, &broken).await?;
    for (name, _) in broken {
        env.wait_event(name, "PluginFailed", "limits/bad-output", CONVERGE)
            .await?;
        assert!(
            env.owned_pods(name).await?.is_empty(),
            "{name}: nothing applied"
        );
    }
    env.wait_converged("good", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_and_write_loops_are_capped() -> anyhow::Result<()> {
    let env = TestEnv::new("budget").await?;
    let host = host_with(
        &env,
        ControllerConfig {
            // Refill (1 write per 3 s) below the volatile status's own pace
            // (1 write per 1 s minimum requeue), so its budget runs out.
            budget: BudgetConfig {
                burst: 12,
                per_minute: 20,
            },
            ..ControllerConfig::default()
        },
    )
    .await?;
    with_good_neighbour(
        &env,
        &[
            ("requeue", "requeue-zero"),
            ("volatile", "volatile-status"),
            ("flood", "event-flood"),
        ],
    )
    .await?;
    // A status that changes on every call (the echo of its own write no
    // longer re-queues it, but it asks for a requeue): the budget runs out
    // and the object is held back with a Warning naming the rule.
    env.wait_event(
        "volatile",
        "WriteBudgetExceeded",
        "limits/write-budget",
        CONVERGE,
    )
    .await?;
    let before = host.metrics.status_patches.get();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let writes = host.metrics.status_patches.get() - before;
    let per_sec = writes as f64 / started.elapsed().as_secs_f64();
    eprintln!("measured: {writes} status writes in 10 s ({per_sec:.1}/s) with a volatile status");
    // Refill is 1 write per 3 s for the volatile object; the converged good
    // one writes nothing. Before the budget a volatile status ran ~80 writes/s.
    assert!(
        per_sec <= 3.0,
        "{writes} status writes in 10 s ({per_sec:.1}/s)"
    );

    // Requeue-after 0 is raised to the 1 s minimum: at most ~1 reconcile/s
    // for that object (its own status no longer changes).
    let before = host.metrics.reconciles.get();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let reconciles = host.metrics.reconciles.get() - before;
    eprintln!("measured: {reconciles} reconciles in 5 s (requeue-zero, volatile and good objects)");
    assert!(
        reconciles <= 25,
        "{reconciles} reconciles in 5 s (volatile is held back, requeue-zero is raised to 1 s)"
    );

    // New Event reasons on every call cost budget too.
    env.wait_event(
        "flood",
        "WriteBudgetExceeded",
        "limits/write-budget",
        CONVERGE,
    )
    .await?;
    env.wait_converged("good", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeping_and_recursing_plugins_cannot_hold_the_workers() -> anyhow::Result<()> {
    let env = TestEnv::new("deadline").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    // Four sleepers for four workers: before the outer deadline they held
    // every worker for an hour and nothing else was ever reconciled.
    for i in 0..4 {
        env.create(&format!("sleeper-{i}"), 1, &[(MISBEHAVE, "sleep")])
            .await?;
    }
    env.create("deep", 1, &[(MISBEHAVE, "recurse")]).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.create("good", 2, &[]).await?;
    env.wait_converged("good", 2, CONVERGE).await?;
    env.wait_event("sleeper-0", "PluginFailed", "limits/deadline", CONVERGE)
        .await?;
    env.wait_event("deep", "PluginFailed", "call stack was exhausted", CONVERGE)
        .await?;
    // A graceful stop ends promptly although sleepers keep being retried.
    let started = Instant::now();
    host.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "stopping took {:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_against_the_floor_makes_no_pods() -> anyhow::Result<()> {
    let env = TestEnv::new("floor").await?;
    let host = RunningHost::start(&env, &plugin("replicaset-plugin", &[])).await?;
    let mut jz: Jinghzhu = serde_json::from_value(serde_json::json!({
        "apiVersion": "jinghzhu.io/v1",
        "kind": "Jinghzhu",
        "metadata": {"name": "hostnet"},
        "spec": {"desired": 1, "template": {"spec": {
            "hostNetwork": true,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]
        }}}
    }))?;
    jz.metadata.namespace = Some(env.namespace.clone());
    env.jinghzhus().create(&PostParams::default(), &jz).await?;
    env.create("good", 1, &[]).await?;
    env.wait_converged("good", 1, CONVERGE).await?;
    env.wait_event("hostnet", "InvalidTemplate", "host-namespaces", CONVERGE)
        .await?;
    assert!(env.owned_pods("hostnet").await?.is_empty());
    host.stop().await;
    Ok(())
}

/// A Jinghzhu the host cannot read (its template passes the CRD's schema
/// but not the PodTemplateSpec type) is skipped with an Event, whether it
/// exists before the host starts or appears later; the rest converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreadable_object_does_not_stop_the_others() -> anyhow::Result<()> {
    let env = TestEnv::new("decode").await?;
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &ApiResource::erase::<Jinghzhu>(&()),
    );
    let bad = |name: &str| -> anyhow::Result<DynamicObject> {
        Ok(serde_json::from_value(serde_json::json!({
            "apiVersion": "jinghzhu.io/v1",
            "kind": "Jinghzhu",
            "metadata": {"name": name},
            "spec": {"desired": 1, "template": {"spec": {"containers": [
                {"name": "app", "image": "registry.k8s.io/pause:3.10", "ports": "oops"}
            ]}}}
        }))?)
    };
    // The CRD's schema refuses the worst at admission.
    let mut refused = bad("refused")?;
    refused.data["spec"]["template"]["spec"]["containers"] = serde_json::json!("oops");
    let err = api
        .create(&PostParams::default(), &refused)
        .await
        .expect_err("containers must be a list of named objects");
    assert!(err.to_string().contains("containers"), "{err}");

    api.create(&PostParams::default(), &bad("before")?).await?;
    let host = RunningHost::start(&env, &plugin("replicaset-plugin", &[])).await?;
    env.create("good", 1, &[]).await?;
    env.wait_converged("good", 1, CONVERGE).await?;
    api.create(&PostParams::default(), &bad("after")?).await?;
    env.create("good2", 1, &[]).await?;
    env.wait_converged("good2", 1, CONVERGE).await?;
    for name in ["before", "after"] {
        env.wait_event(name, "InvalidObject", "cannot be read", CONVERGE)
            .await?;
    }
    host.stop().await;
    Ok(())
}

/// Bookkeeping is keyed by UID: a Jinghzhu recreated under the name of one
/// that failed many times does not inherit its backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_object_does_not_inherit_the_old_ones_backoff() -> anyhow::Result<()> {
    let env = TestEnv::new("uid").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    env.create("web", 1, &[(MISBEHAVE, "error")]).await?;
    // Twelve consecutive failures: the next retry is 5 ms * 2^12 ≈ 20 s away.
    let failing_since = Instant::now();
    while host
        .metrics
        .plugin_errors
        .get_or_create(&wasm_operator::telemetry::metrics::PluginLabels {
            plugin: host.plugin.current().digest().to_string(),
        })
        .get()
        < 13
    {
        anyhow::ensure!(
            failing_since.elapsed() < CONVERGE,
            "the object did not fail 13 times"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.jinghzhus().delete("web", &Default::default()).await?;
    e2e_tests::wait_for("web to be gone", CONVERGE, || async {
        Ok(env.jinghzhus().get_opt("web").await?.is_none())
    })
    .await?;
    let recreated = Instant::now();
    env.create("web", 1, &[]).await?;
    env.wait_converged("web", 1, CONVERGE).await?;
    assert!(
        recreated.elapsed() < Duration::from_secs(10),
        "the recreated object waited {:?} (an inherited backoff is ≥ 20 s)",
        recreated.elapsed()
    );
    host.stop().await;
    Ok(())
}

/// A host whose plugins are compiled by the real `wasm-operator` executable
/// in a child process with `limits`, taking its plugin from the ConfigMap
/// `plugin` and precompiled artifacts from `cache`.
async fn host_compiling_in_a_child(
    env: &TestEnv,
    limits: wasm_operator::runtime::ChildCompiler,
    cache: &std::path::Path,
) -> anyhow::Result<RunningHost> {
    let mut options = HostOptions::file(std::path::Path::new("-"));
    options.source = wasm_operator::delivery::setup::PluginSource::ConfigMap {
        namespace: env.namespace.clone(),
        name: "plugin".into(),
        key: "plugin.wasm".into(),
    };
    options.runtime = wasm_operator::runtime::RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        compiler: wasm_operator::runtime::Compiler::Child(limits),
        ..Default::default()
    };
    RunningHost::start_with(env, options).await
}

/// The example plugin, v1 and v2, and a precompiled cache that holds v1
/// already (as after an earlier start): v2 must be compiled when it arrives.
fn v1_precompiled() -> anyhow::Result<(Vec<u8>, Vec<u8>, tempfile::TempDir)> {
    use wasm_operator::runtime::{Runtime, RuntimeConfig};
    let v1 = std::fs::read(plugin("replicaset-plugin", &[]))?;
    let v2 = std::fs::read(plugin("replicaset-plugin", &["v2"]))?;
    let cache = tempfile::tempdir()?;
    Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    })?
    .load(&v1, "v1")?;
    Ok((v1, v2, cache))
}

/// How many `PluginRefused` Warnings on the ConfigMap `plugin` name `rule`.
async fn plugin_refusals(env: &TestEnv, rule: &str) -> anyhow::Result<usize> {
    Ok(env
        .events_on("ConfigMap", "plugin")
        .await?
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("PluginRefused")
                && e.type_.as_deref() == Some("Warning")
                && e.message.as_deref().is_some_and(|m| m.contains(rule))
        })
        .count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_the_compiler_cannot_finish_within_its_limits_is_refused() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    use wasm_operator::runtime::ChildCompiler;

    let env = TestEnv::new("compile-limits").await?;
    let (v1, v2, cache) = v1_precompiled()?;
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let apply = PatchParams::apply("e2e").force();
    let program = e2e_tests::deploy::compile_helper_binary();

    for (round, (rule, limits)) in [
        (
            "limits/compile-time",
            ChildCompiler {
                program: program.clone(),
                timeout: Duration::from_millis(1),
                memory_limit_bytes: 1 << 30,
            },
        ),
        (
            "limits/compile-memory",
            ChildCompiler {
                program: program.clone(),
                timeout: Duration::from_secs(60),
                memory_limit_bytes: 8 << 20,
            },
        ),
    ]
    .into_iter()
    .enumerate()
    {
        maps.patch(
            "plugin",
            &apply,
            &Patch::Apply(&e2e_tests::plugin_configmap("plugin", v1.clone())),
        )
        .await?;
        let host = host_compiling_in_a_child(&env, limits, cache.path()).await?;
        let before = format!("before-{round}");
        env.create(&before, 1, &[]).await?;
        env.wait_converged(&before, 1, CONVERGE).await?;

        // v2 arrives; its compile breaks the limit; v1 keeps serving.
        maps.patch(
            "plugin",
            &apply,
            &Patch::Apply(&e2e_tests::plugin_configmap("plugin", v2.clone())),
        )
        .await?;
        e2e_tests::wait_for(
            &format!("a PluginRefused Warning naming {rule}"),
            Duration::from_secs(60),
            || async { Ok(plugin_refusals(&env, rule).await? > 0) },
        )
        .await
        .map_err(|err| {
            let last = host
                .history
                .lock()
                .ok()
                .and_then(|h| h.last_refusal.clone())
                .map(|r| r.outcome);
            err.context(format!("last refusal: {last:?}"))
        })?;
        assert_eq!(host.metrics.plugin_swaps.get(), 0, "{rule}: no swap");
        assert!(
            !host.plugin.current().info().version.ends_with("+v2"),
            "{rule}: v1 still serves"
        );
        let after = format!("after-{round}");
        env.create(&after, 2, &[]).await?;
        env.wait_converged(&after, 2, CONVERGE).await?;
        env.scale(&before, 2).await?;
        env.wait_converged(&before, 2, CONVERGE).await?;
        host.stop().await;
    }
    Ok(())
}

// Containment, round two (issue 22): one module per hazard.
#[path = "containment/compiler_sandbox.rs"]
mod compiler_sandbox;
#[path = "containment/objects.rs"]
mod objects;
#[path = "containment/plugin_delivery.rs"]
mod plugin_delivery;
#[path = "containment/plugin_text.rs"]
mod plugin_text;
#[path = "containment/pod_metadata.rs"]
mod pod_metadata;
#[path = "containment/pod_policy.rs"]
mod pod_policy;
#[path = "containment/wasi_host_work.rs"]
mod wasi_host_work;

// Containment, round three (issue 40): one module per hazard.
#[path = "containment/status_truth.rs"]
mod status_truth;
