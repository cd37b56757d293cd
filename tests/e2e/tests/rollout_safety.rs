//! What no rollout may do (issue 52), on the real control plane with a host
//! as `run --plugin-resource` wires it: a canary never loosens the stable
//! plugin's pod policy; the fleet's decisions (an abort, a step, the newest
//! version served, an action taken) survive a restart; the judge charges a
//! canary only with failures that are its own, sees a stuck cohort within a
//! short step, moves a small quiet fleet on, compares latencies in a small
//! fleet, and counts no figures its fleet did not write.

mod resource_host;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e_tests::{TestEnv, plugin, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use resource_host::*;
use wasm_operator::apply::policy::PodPolicy;
use wasm_operator::crd::plugin::{JinghzhuPlugin, PodPolicySpec, RolloutSpec, RolloutStatus};
use wasm_operator::delivery::resource::rollout::ROLLOUT_ACTION_ANNOTATION;
use wasm_operator::judging::plan::in_cohort;
use wasm_operator::runtime::digest_of;
use wasm_operator::telemetry::metrics::PluginLabels;

/// The misbehaving plugin built with `features`.
fn misbehaving(features: &[&str]) -> Vec<u8> {
    std::fs::read(plugin("misbehaving-plugin", features)).expect("the misbehaving plugin")
}

/// Calls of the plugin `bytes` on `host`.
fn calls(host: &ResourceHost, bytes: &[u8]) -> u64 {
    let labels = PluginLabels {
        plugin: digest_of(bytes),
    };
    host.metrics
        .plugin_calls
        .get(&labels)
        .map_or(0, |c| c.get())
}

async fn rollout_of(env: &TestEnv, name: &str) -> anyhow::Result<Option<RolloutStatus>> {
    Ok(status_of(env, name).await?.rollout)
}

/// Waits until the rollout of `canary` is in `phase`.
async fn phase_is(env: &TestEnv, name: &str, phase: &str, canary: &[u8]) -> anyhow::Result<()> {
    let digest = digest_of(canary);
    wait_for(&format!("rollout {phase}"), CONVERGE, || async {
        Ok(rollout_of(env, name)
            .await?
            .is_some_and(|r| r.phase == phase && r.canary.as_deref() == Some(digest.as_str())))
    })
    .await
}

/// Waits for the judge's verdict on the canary `bytes`: promoted or aborted.
async fn verdict(env: &TestEnv, name: &str, canary: &[u8]) -> anyhow::Result<RolloutStatus> {
    let digest = digest_of(canary);
    let deadline = Instant::now() + CONVERGE;
    loop {
        let rollout = rollout_of(env, name).await?.unwrap_or_default();
        let decided = rollout.phase == "Promoted" || rollout.phase == "Aborted";
        if decided && rollout.canary.as_deref() == Some(digest.as_str()) {
            return Ok(rollout);
        }
        anyhow::ensure!(Instant::now() < deadline, "no verdict: {rollout:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates the resource `name` of `env` over the ConfigMap `plugin` holding
/// `stable`, with `rollout` (and `tweak` applied), and a host serving it.
async fn serve(
    env: &TestEnv,
    stable: &[u8],
    rollout: RolloutSpec,
    setup: Setup<'_>,
    tweak: impl FnOnce(&mut JinghzhuPlugin),
) -> anyhow::Result<ResourceHost> {
    install_plugin_crd(env).await?;
    create_configmap(env, "plugin", stable.to_vec()).await?;
    let mut resource = resource(env, "plugin");
    resource.spec.rollout = Some(rollout);
    tweak(&mut resource);
    Api::<JinghzhuPlugin>::all(env.client.clone())
        .create(&PostParams::default(), &resource)
        .await?;
    let host = ResourceHost::start_with(env, &env.namespace, "replica-a", setup).await?;
    wait_replicas_on(env, &env.namespace, &["replica-a"], &digest_of(stable)).await?;
    Ok(host)
}

/// Objects `web-0` .. `web-{n-1}`, each asking for `annotations`, converged at 1 pod.
async fn objects(env: &TestEnv, n: usize, annotations: &[(&str, &str)]) -> anyhow::Result<()> {
    for i in 0..n {
        env.create(&format!("web-{i}"), 1, annotations).await?;
    }
    for i in 0..n {
        env.wait_converged(&format!("web-{i}"), 1, CONVERGE).await?;
    }
    Ok(())
}

/// Every object's status message, by name.
async fn messages(env: &TestEnv) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(env
        .jinghzhus()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|jz| {
            let message = jz.status.map(|s| s.message).unwrap_or_default();
            (jz.metadata.name.unwrap_or_default(), message)
        })
        .collect())
}

/// Hazard 1: `--pod-policy restricted`, the resource asks for `template`;
/// four objects whose plugin proposes a restricted-compliant pod with an
/// extra `env EVIL=1` are refused. A canary offered (one step of 10%) must
/// not loosen what holds the stable plugin, during the rollout or after
/// its abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_never_loosens_the_stable_plugins_pod_policy() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-policy").await?;
    let name = env.namespace.clone();
    let (v1, v2) = (misbehaving(&[]), misbehaving(&["v2"]));
    let setup = Setup {
        pod_policy: PodPolicy::Restricted,
        ..Setup::default()
    };
    let rollout = RolloutSpec {
        steps: vec![10],
        step_seconds: 3600,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout, setup, |r| {
        r.spec.pod_policy = Some(PodPolicySpec {
            policy: "template".into(),
        });
    })
    .await?;
    for i in 0..4 {
        env.create(&format!("evil-{i}"), 1, &[(MISBEHAVE, "escalate:env")])
            .await?;
    }
    let evil_pods = || async {
        let pods = env.pods().list(&ListParams::default()).await?;
        Ok::<usize, anyhow::Error>(pods.items.iter().filter(|p| has_evil_env(p)).count())
    };
    // Refused under the resource's policy before any canary.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(evil_pods().await?, 0, "refused under template");
    replace_configmap(&env, "plugin", v2.clone()).await?;
    phase_is(&env, &name, "Progressing", &v2).await?;
    // Each object is reconciled again when the canary starts; give the
    // stable plugin time to make pods if it could.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = evil_pods().await?;
    wasm_operator::delivery::resource::rollout_cli::apply(
        &env.client,
        &name,
        wasm_operator::delivery::resource::rollout_cli::RolloutAction::Abort,
    )
    .await?;
    phase_is(&env, &name, "Aborted", &v2).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = evil_pods().await?;
    println!("pods with EVIL=1: {during} while v2 was a canary, {after} after its abort");
    assert_eq!(
        (during, after),
        (0, 0),
        "the stable plugin stays held to template"
    );
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

fn has_evil_env(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|spec| {
        spec.containers.iter().any(|c| {
            c.env
                .iter()
                .flatten()
                .any(|e| e.name == "EVIL" && e.value.as_deref() == Some("1"))
        })
    })
}

/// Hazard 2, the abort: a canary the judge aborted is not served by a
/// replica that restarts with the source unchanged; the stable plugin
/// serves every object (restored from the replica's precompiled cache).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_canary_stays_aborted_after_a_restart() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-abort-restart").await?;
    let name = env.namespace.clone();
    let (v1, v3) = (v1(), misbehaving(&[]));
    let rollout = RolloutSpec {
        steps: vec![50],
        step_seconds: 3600,
        min_reconciles: 1,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout, Setup::default(), |_| {}).await?;
    // Every object asks the misbehaving plugin (v3) to fail; v1 ignores it.
    objects(&env, 8, &[(MISBEHAVE, "error")]).await?;
    replace_configmap(&env, "plugin", v3.clone()).await?;
    phase_is(&env, &name, "Aborted", &v3).await?;
    host.stop().await;

    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    wait_for("the restarted replica serving", CONVERGE, || async {
        Ok(host.active.serving().is_some())
    })
    .await?;
    for i in 0..8 {
        env.scale(&format!("web-{i}"), 2).await?;
    }
    let mut converged = 0;
    for i in 0..8 {
        let name = format!("web-{i}");
        if env
            .wait_converged(&name, 2, Duration::from_secs(20))
            .await
            .is_ok()
        {
            converged += 1;
        }
    }
    let v3_calls = calls(&host, &v3);
    println!(
        "after the restart: {v3_calls} calls of the aborted canary, {converged} of 8 objects scaled"
    );
    assert_eq!(
        v3_calls, 0,
        "the aborted canary serves nothing after a restart"
    );
    assert_eq!(converged, 8);
    let status = status_of(&env, &name).await?;
    assert_eq!(
        status.last_refusal.map(|r| r.rule).as_deref(),
        Some("rollout/aborted")
    );
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Hazard 2, a step: a replica restarted in the middle of a good rollout
/// at its first step (25%) serves the canary to its cohort only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_mid_rollout_follows_the_step() -> anyhow::Result<()> {
    const OBJECTS: usize = 12;
    let env = TestEnv::new("rollout-step-restart").await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), v2());
    let rollout = RolloutSpec {
        steps: vec![25],
        step_seconds: 3600,
        min_reconciles: 1,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout, Setup::default(), |_| {}).await?;
    objects(&env, OBJECTS, &[]).await?;
    let mut cohort = Vec::new();
    for jz in env.jinghzhus().list(&ListParams::default()).await? {
        if in_cohort(jz.metadata.uid.as_deref().unwrap_or_default(), 25) {
            cohort.push(jz.metadata.name.unwrap_or_default());
        }
    }
    replace_configmap(&env, "plugin", v2.clone()).await?;
    phase_is(&env, &name, "Progressing", &v2).await?;
    host.stop().await;

    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    wait_for("the restarted replica serving", CONVERGE, || async {
        Ok(host.active.serving().is_some() || host.active.canary().view().is_some())
    })
    .await?;
    for i in 0..OBJECTS {
        env.scale(&format!("web-{i}"), 2).await?;
    }
    for i in 0..OBJECTS {
        env.wait_converged(&format!("web-{i}"), 2, CONVERGE).await?;
    }
    let on_v2: Vec<String> = messages(&env)
        .await?
        .into_iter()
        .filter(|(_, m)| m.starts_with(V2_PREFIX))
        .map(|(n, _)| n)
        .collect();
    cohort.sort();
    println!(
        "after the restart at step 1 (25%): {} of {OBJECTS} objects on v2",
        on_v2.len()
    );
    assert_eq!(on_v2, cohort, "only the step's cohort is on the canary");
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Hazard 3: a downgrade refused before a restart stays refused after it,
/// and the newer version keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_stays_refused_after_a_restart() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-downgrade").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let (newer, older) = (misbehaving(&[]), misbehaving(&["older"]));
    create_configmap(&env, "plugin", newer.clone()).await?;
    Api::<JinghzhuPlugin>::all(env.client.clone())
        .create(&PostParams::default(), &resource(&env, "plugin"))
        .await?;
    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&newer)).await?;
    replace_configmap(&env, "plugin", older.clone()).await?;
    let refused = || async {
        let status = status_of(&env, &name).await?;
        Ok(status
            .last_refusal
            .is_some_and(|r| r.rule == "plugin/downgrade" && r.digest == digest_of(&older)))
    };
    wait_for("the downgrade refused", CONVERGE, refused).await?;
    host.stop().await;

    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    wait_for("the restarted replica serving", CONVERGE, || async {
        Ok(host.active.serving().is_some())
    })
    .await?;
    env.create("web", 1, &[]).await?;
    env.wait_converged("web", 1, CONVERGE).await?;
    let status = status_of(&env, &name).await?;
    println!(
        "after the restart: serving {:?}, {} calls of the older version",
        status.plugin,
        calls(&host, &older)
    );
    assert_eq!(calls(&host, &older), 0, "the older version never serves");
    assert_eq!(condition(&status, "Refused"), Some(("True", "Downgrade")));
    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&newer)).await?;
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Hazard 4: 8 team objects and 3 of one author's, all healthy; a good v2
/// rolls out (steps [50]); the author switches their 3 objects to input
/// every build fails on. Their failures are not the canary's: v2 is
/// promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authors_broken_objects_do_not_veto_a_good_canary() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-veto").await?;
    let name = env.namespace.clone();
    let (v1, v2) = (misbehaving(&[]), misbehaving(&["v2"]));
    let rollout = RolloutSpec {
        steps: vec![50],
        step_seconds: 6,
        min_reconciles: 1,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout, Setup::default(), |_| {}).await?;
    objects(&env, 11, &[]).await?;
    replace_configmap(&env, "plugin", v2.clone()).await?;
    phase_is(&env, &name, "Progressing", &v2).await?;
    for i in 8..11 {
        let patch = serde_json::json!({"metadata": {"annotations": {MISBEHAVE: "error"}}});
        env.jinghzhus()
            .patch(
                &format!("web-{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    let rollout = verdict(&env, &name, &v2).await?;
    println!(
        "the good v2 with 3 of 11 objects broken by their author: {} ({:?})",
        rollout.phase, rollout.rule
    );
    assert_eq!(rollout.phase, "Promoted", "{:?}", rollout.message);
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Hazard 5: a canary that writes status but never creates a pod, while
/// its 10 objects are scaled 1 → 2 during its step (steps [50], step 10 s,
/// stall 15 s): aborted by `rollout/stalled-objects`, never promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_makes_no_pods_is_not_promoted() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-idle").await?;
    let name = env.namespace.clone();
    let (v1, idle) = (misbehaving(&[]), misbehaving(&["idle"]));
    let rollout = RolloutSpec {
        steps: vec![50],
        step_seconds: 10,
        stall_seconds: 15,
        min_reconciles: 1,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout, Setup::default(), |_| {}).await?;
    objects(&env, 10, &[]).await?;
    replace_configmap(&env, "plugin", idle.clone()).await?;
    phase_is(&env, &name, "Progressing", &idle).await?;
    for i in 0..10 {
        env.scale(&format!("web-{i}"), 2).await?;
    }
    let started = Instant::now();
    let rollout = verdict(&env, &name, &idle).await?;
    println!(
        "the idle canary: {} after {:.1} s ({:?})",
        rollout.phase,
        started.elapsed().as_secs_f64(),
        rollout.rule
    );
    assert_eq!(rollout.phase, "Aborted");
    assert_eq!(rollout.rule.as_deref(), Some("rollout/stalled-objects"));
    for i in 0..10 {
        env.wait_converged(&format!("web-{i}"), 2, CONVERGE).await?;
    }
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Hazard 6: two `status.replicas` entries written by another field
/// manager claim 100 000 healthy canary objects at each step of the
/// rollout; a canary failing every reconcile is aborted at its first step,
/// and the entries are removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_figures_do_not_steer_the_judge() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-planted").await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), misbehaving(&[]));
    let rollout = RolloutSpec {
        steps: vec![50],
        step_seconds: 5,
        min_reconciles: 1,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout, Setup::default(), |_| {}).await?;
    objects(&env, 8, &[(MISBEHAVE, "error")]).await?;
    let healthy = serde_json::json!({
        "reconciles": 100_000, "objects": 100_000, "failed": 0, "rejected": 0,
        "accepted": 100_000, "writes": 0, "stalled": 0, "p99Micros": 100,
        "compared": 0, "differed": 0,
    });
    // One entry for each step of the rollout.
    let planted: Vec<serde_json::Value> = [1, 2]
        .iter()
        .map(|step| {
            serde_json::json!({
                "name": format!("ghost-{step}"), "digest": digest_of(&v2), "state": "Serving",
                "rollout": {"canary": digest_of(&v2), "step": step,
                            "canaryFigures": healthy, "stableFigures": healthy},
            })
        })
        .collect();
    let body = serde_json::json!({
        "apiVersion": "jinghzhu.io/v1", "kind": "JinghzhuPlugin",
        "metadata": {"name": name}, "status": {"replicas": planted},
    });
    Api::<JinghzhuPlugin>::all(env.client.clone())
        .patch_status(
            &name,
            &PatchParams::apply("intruder").force(),
            &Patch::Apply(&body),
        )
        .await?;
    replace_configmap(&env, "plugin", v2.clone()).await?;
    let rollout = verdict(&env, &name, &v2).await?;
    println!(
        "a canary failing every call with 2 planted entries: {} ({:?}), {} failed calls",
        rollout.phase,
        rollout.rule,
        host.metrics
            .plugin_errors
            .get(&PluginLabels {
                plugin: digest_of(&v2)
            })
            .map_or(0, |c| c.get())
    );
    assert_eq!(rollout.phase, "Aborted");
    let passed = rollout
        .history
        .iter()
        .filter(|h| h.verdict == "Passed")
        .count();
    assert_eq!(
        passed, 0,
        "no step of the failing canary passed: {:?}",
        rollout.history
    );
    wait_for("the planted entries removed", CONVERGE, || async {
        let status = status_of(&env, &name).await?;
        Ok(!status.replicas.iter().any(|e| e.name.starts_with("ghost-")))
    })
    .await?;
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Hazard 6, the full list: 256 entries left under another field manager's
/// names; a new replica's own entry is written within 30 s of serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_replicas_entry_is_written_though_others_filled_the_list() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-full-list").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let v1 = v1();
    create_configmap(&env, "plugin", v1.clone()).await?;
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &resource(&env, "plugin"))
        .await?;
    let planted: Vec<serde_json::Value> = (0..256)
        .map(|i| serde_json::json!({"name": format!("left-{i}"), "digest": "", "state": "Serving"}))
        .collect();
    let body = serde_json::json!({
        "apiVersion": "jinghzhu.io/v1", "kind": "JinghzhuPlugin",
        "metadata": {"name": name}, "status": {"replicas": planted},
    });
    api.patch_status(
        &name,
        &PatchParams::apply("intruder").force(),
        &Patch::Apply(&body),
    )
    .await?;
    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    let serving = Instant::now();
    wait_for("the host serving v1", CONVERGE, || async {
        Ok(host
            .active
            .serving()
            .is_some_and(|p| p.digest() == digest_of(&v1)))
    })
    .await?;
    wait_for(
        "the new replica's entry",
        Duration::from_secs(30),
        || async {
            let status = status_of(&env, &name).await?;
            Ok(status.replicas.iter().any(|e| e.name == "replica-a"))
        },
    )
    .await?;
    println!(
        "the new replica's entry written {:.1} s after serving, with 256 planted entries",
        serving.elapsed().as_secs_f64()
    );
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Hazard 7: the default steps [1, 5, 25] over 10 converged objects: the
/// steps whose cohort holds no object say so and move on; the good v2 is
/// promoted. A resource with no object at all says why its rollout waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_quiet_fleet_moves_and_an_empty_one_says_why_it_waits() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-small").await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), v2());
    let rollout = RolloutSpec {
        step_seconds: 2,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout.clone(), Setup::default(), |_| {}).await?;
    objects(&env, 10, &[]).await?;
    // UIDs are random: an object that fell in the 1% cohort goes, so the
    // first step's cohort is empty.
    for jz in env.jinghzhus().list(&ListParams::default()).await? {
        if in_cohort(jz.metadata.uid.as_deref().unwrap_or_default(), 1) {
            let name = jz.metadata.name.unwrap_or_default();
            env.jinghzhus().delete(&name, &Default::default()).await?;
        }
    }
    let offered = Instant::now();
    replace_configmap(&env, "plugin", v2.clone()).await?;
    phase_is(&env, &name, "Promoted", &v2).await?;
    let rollout_done = rollout_of(&env, &name).await?.unwrap_or_default();
    let verdicts: Vec<&str> = rollout_done
        .history
        .iter()
        .map(|h| h.verdict.as_str())
        .collect();
    println!(
        "10 objects, steps [1, 5, 25] of 2 s: promoted {:.1} s after v2 was offered, verdicts {verdicts:?}",
        offered.elapsed().as_secs_f64()
    );
    assert!(verdicts.contains(&"Empty"), "{verdicts:?}");
    host.stop().await;
    delete_resource(&env, &name).await;

    // No object at all: the step waits, and says why.
    let empty = TestEnv::new("rollout-none").await?;
    let host = serve(&empty, &v1, rollout, Setup::default(), |_| {}).await?;
    replace_configmap(&empty, "plugin", v2.clone()).await?;
    phase_is(&empty, &empty.namespace, "Progressing", &v2).await?;
    wait_for(
        "a Warning naming rollout/too-little-traffic",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&empty.client, &empty.namespace)
                .await?
                .iter()
                .any(|m| m.contains("rollout/too-little-traffic")))
        },
    )
    .await?;
    let status = status_of(&empty, &empty.namespace).await?;
    assert_eq!(
        condition(&status, "Rollout"),
        Some(("True", "TooLittleTraffic"))
    );
    host.stop().await;
    delete_resource(&empty, &empty.namespace).await;
    Ok(())
}

/// Hazard 11: a canary about 10 ms slower per call, in a fleet too small
/// for a p99 (fewer than 100 calls a side): aborted by `rollout/latency`
/// on the medians.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_canary_is_aborted_in_a_small_fleet() -> anyhow::Result<()> {
    let env = TestEnv::new("rollout-slow").await?;
    let name = env.namespace.clone();
    let (v1, slow) = (misbehaving(&[]), misbehaving(&["slow"]));
    let rollout = RolloutSpec {
        steps: vec![50],
        step_seconds: 20,
        min_reconciles: 1,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout, Setup::default(), |_| {}).await?;
    objects(&env, 6, &[]).await?;
    replace_configmap(&env, "plugin", slow.clone()).await?;
    phase_is(&env, &name, "Progressing", &slow).await?;
    for i in 0..6 {
        env.scale(&format!("web-{i}"), 2).await?;
    }
    let rollout = verdict(&env, &name, &slow).await?;
    println!(
        "the slow canary: {} ({:?}): {:?}",
        rollout.phase, rollout.rule, rollout.message
    );
    assert_eq!(rollout.phase, "Aborted");
    assert_eq!(rollout.rule.as_deref(), Some("rollout/latency"));
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Hazard 11: an abort by annotation, then the explicit retry (an edit of
/// `spec.rollout`): the same canary rolls out again, and a restart does not
/// act on the annotation again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_action_is_not_replayed_after_a_restart() -> anyhow::Result<()> {
    use wasm_operator::delivery::resource::rollout_cli::{RolloutAction, apply};
    let env = TestEnv::new("rollout-replay").await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), v2());
    let rollout = RolloutSpec {
        steps: vec![50],
        step_seconds: 3600,
        min_reconciles: 1,
        ..RolloutSpec::default()
    };
    let host = serve(&env, &v1, rollout, Setup::default(), |_| {}).await?;
    objects(&env, 4, &[]).await?;
    replace_configmap(&env, "plugin", v2.clone()).await?;
    phase_is(&env, &name, "Progressing", &v2).await?;
    apply(&env.client, &name, RolloutAction::Abort).await?;
    phase_is(&env, &name, "Aborted", &v2).await?;
    // The retry: an edit of spec.rollout.
    let patch = serde_json::json!({"spec": {"rollout": {"stepSeconds": 3599}}});
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    phase_is(&env, &name, "Progressing", &v2).await?;
    let annotation = api
        .get(&name)
        .await?
        .metadata
        .annotations
        .and_then(|a| a.get(ROLLOUT_ACTION_ANNOTATION).cloned());
    assert!(annotation.is_some_and(|a| a.starts_with("abort ")));
    host.stop().await;

    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    wait_for("the restarted replica serving", CONVERGE, || async {
        Ok(host.active.serving().is_some() || host.active.canary().view().is_some())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rollout = rollout_of(&env, &name).await?.unwrap_or_default();
    println!(
        "after the restart: {} ({:?}), the canary rolling out here: {}",
        rollout.phase,
        rollout.rule,
        host.active.canary().view().is_some()
    );
    assert_eq!(
        rollout.phase, "Progressing",
        "the old abort is not replayed"
    );
    assert!(host.active.canary().view().is_some());
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}
