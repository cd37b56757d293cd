//! Containment, round two (issue 22), hazard 2: labels and annotations a
//! plugin writes, charged per object; what the pod cache keeps per pod; creates
//! in bounded batches.
//!
//! The host runs in the test process ([`RunningHost`]), so its resident
//! memory is that process's (`/proc/self/status`); the control plane and
//! kwok are other processes. Other tests of the suite would count in it too,
//! so each test here runs itself again alone, in a child process of the test
//! binary ([`run_alone`]), with a control plane of its own. The tests keep their
//! own allocations small while they measure (no pod lists of fat pods).

#[allow(unused_imports)]
use super::*;

use e2e_tests::memory::{mib, peak_rss, reset_peak, rss, run_alone};
use kube::ResourceExt;
use wasm_operator::apply::validate::{Limits, MAX_POD_METADATA_BYTES};
use wasm_operator::cached_pod::MAX_CACHED_METADATA_BYTES;
use wasm_operator::runtime::RuntimeConfig;
use wasm_operator::runtime::engine::{LINEAR_MEMORY_KEEP_RESIDENT, MAX_WARM_SLOTS};
use wasm_operator_testkit::jinghzhu;

/// Objects whose plugin writes 256 KiB of annotations on every pod (what the
/// host accepted before the per-pod and per-object limits).
const FAT_OBJECTS: usize = 8;
/// Pods each of them asks for.
const FAT_PODS: u32 = 12;
/// Pods of the object whose pods someone else annotates.
const FOREIGN_PODS: u32 = 10;
/// What someone else writes on each of those pods.
const FOREIGN_ANNOTATION_BYTES: usize = 250 * 1024;
/// What the host's other documented bounds let its memory move by,
/// whatever the plugin does: an output of up to the output limit in flight
/// per worker, and the pages the instance pool keeps resident in its warm
/// slots.
fn other_bounds(workers: u16) -> u64 {
    let outputs = u64::from(workers) * RuntimeConfig::default().output_limit_bytes as u64;
    let pool = u64::from(MAX_WARM_SLOTS) * LINEAR_MEMORY_KEEP_RESIDENT as u64;
    outputs + pool
}

/// Waits until `name` was either refused (a `RejectedOutput` Event) or has a
/// status with `desired` current pods, and says which.
async fn settled(env: &TestEnv, name: &str, desired: u32) -> anyhow::Result<&'static str> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let jz = env.jinghzhus().get(name).await?;
        if jz.status.as_ref().is_some_and(|s| s.current == desired) {
            return Ok("created");
        }
        if env
            .events_of(name)
            .await?
            .iter()
            .any(|e| e.reason.as_deref() == Some("RejectedOutput"))
        {
            return Ok("refused");
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name} neither refused nor at {desired} pods"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fat_pod_metadata_is_refused_and_the_host_memory_stays_bounded() -> anyhow::Result<()> {
    if let Some(outcome) =
        run_alone("pod_metadata::fat_pod_metadata_is_refused_and_the_host_memory_stays_bounded")
    {
        return outcome;
    }
    let env = TestEnv::new("pod-metadata").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    // Warm up: the good neighbour and an object someone else will annotate
    // converge; the instance pool and the caches have their working size.
    env.create("good", 2, &[]).await?;
    env.create("foreign", FOREIGN_PODS, &[]).await?;
    env.wait_converged("good", 2, CONVERGE).await?;
    env.wait_converged("foreign", FOREIGN_PODS, CONVERGE)
        .await?;
    let foreign_pods: Vec<String> = env
        .live_pods("foreign")
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = rss()?;
    reset_peak()?;

    // 1. Plugins writing 256 KiB of annotations on every pod.
    let fat = format!("fat-annotations:{}", 256 * 1024 - 100);
    for i in 0..FAT_OBJECTS {
        env.create(&format!("fat-{i}"), FAT_PODS, &[(MISBEHAVE, &fat)])
            .await?;
    }
    // 2. Someone else annotating every pod of an ordinary object with 250 KiB.
    let blob = "y".repeat(FOREIGN_ANNOTATION_BYTES);
    for pod in &foreign_pods {
        env.annotate_pod(pod, "example.com/blob", &blob).await?;
    }
    drop(blob);
    let mut outcomes = Vec::new();
    for i in 0..FAT_OBJECTS {
        outcomes.push(settled(&env, &format!("fat-{i}"), FAT_PODS).await?);
    }
    // Every pod event of `foreign` reconciles it again with what the cache kept.
    // (Nothing here lists the fat pods: that would be this process's memory.)
    env.scale("foreign", FOREIGN_PODS + 1).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = rss()?;
    let peak = peak_rss()?.max(after);
    let fat_pods = outcomes.iter().filter(|o| **o == "created").count() * FAT_PODS as usize;
    eprintln!(
        "measured: RSS baseline {:.1} MiB, peak {:.1} MiB (+{:.1}), after {:.1} MiB (+{:.1}); \
         {fat_pods} pods with 256 KiB of plugin annotations created, {} pods with {} KiB of \
         someone else's; outcomes {outcomes:?}",
        mib(baseline),
        mib(peak),
        mib(peak.saturating_sub(baseline)),
        mib(after),
        mib(after.saturating_sub(baseline)),
        foreign_pods.len(),
        FOREIGN_ANNOTATION_BYTES / 1024,
    );
    // What the documented limits allow these objects to make the host keep:
    // each object's plugin budget, and what the cache keeps of each pod's
    // labels and annotations.
    let objects = FAT_OBJECTS as u64 + 1;
    let pods = u64::from(FAT_PODS) * FAT_OBJECTS as u64 + u64::from(FOREIGN_PODS) + 1;
    let allowance = objects * Limits::default().pod_metadata_budget as u64
        + pods * MAX_CACHED_METADATA_BYTES as u64;
    let others = other_bounds(ControllerConfig::default().workers);
    eprintln!(
        "allowed: baseline + {:.1} MiB (per-object limits) + {:.1} MiB (outputs in flight, warm pool slots)",
        mib(allowance),
        mib(others)
    );
    // Before the limits: +59 MiB peak with 6 × 10 fat pods and the 10
    // annotated ones (0.7–0.85 MiB a pod), so 96 fat pods go well over.
    assert!(
        peak <= baseline + allowance + others,
        "host RSS peaked at {:.1} MiB, more than the baseline {:.1} MiB + {:.1} MiB the per-object \
         limits allow + {:.1} MiB of outputs in flight and warm pool slots",
        mib(peak),
        mib(baseline),
        mib(allowance),
        mib(others)
    );
    env.wait_converged("good", 2, CONVERGE).await?;
    for i in 0..FAT_OBJECTS {
        let name = format!("fat-{i}");
        env.wait_event(
            &name,
            "RejectedOutput",
            "limits/pod-metadata-size",
            CONVERGE,
        )
        .await?;
        assert!(
            env.owned_pods(&name).await?.is_empty(),
            "{name}: nothing applied"
        );
    }

    // 3. A plugin writing the most one pod may carry, on every pod: pods
    // within the object's budget are made; the proposal beyond it is refused.
    let per_pod = MAX_POD_METADATA_BYTES;
    let within = u32::try_from(Limits::default().pod_metadata_budget / per_pod)?;
    env.create("budget", within, &[(MISBEHAVE, "fat-annotations")])
        .await?;
    env.wait_converged("budget", within, CONVERGE).await?;
    env.scale("budget", within + 2).await?;
    env.wait_event(
        "budget",
        "RejectedOutput",
        "limits/pod-metadata-budget",
        CONVERGE,
    )
    .await?;
    assert_eq!(env.live_pods("budget").await?.len(), within as usize);
    env.wait_converged("foreign", FOREIGN_PODS + 1, CONVERGE)
        .await?;
    env.scale("good", 3).await?;
    env.wait_converged("good", 3, CONVERGE).await?;
    host.stop().await;
    Ok(())
}

/// A template whose spec is ~60 KiB as JSON: one container with 650
/// environment variables.
fn wide_template() -> anyhow::Result<k8s_openapi::api::core::v1::PodTemplateSpec> {
    let env: Vec<serde_json::Value> = (0..650)
        .map(|i| serde_json::json!({"name": format!("V{i:04}"), "value": "v".repeat(64)}))
        .collect();
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"labels": {"app": "wide"}},
        "spec": {
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65535,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "env": env,
                "securityContext": {"allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}}
            }]
        }
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_creates_of_a_wide_template_go_out_in_bounded_batches() -> anyhow::Result<()> {
    const PODS: u32 = 500;
    if let Some(outcome) =
        run_alone("pod_metadata::five_hundred_creates_of_a_wide_template_go_out_in_bounded_batches")
    {
        return outcome;
    }
    let env = TestEnv::new("wide-creates").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    env.create("good", 2, &[]).await?;
    env.wait_converged("good", 2, CONVERGE).await?;
    let template = wide_template()?;
    let spec_bytes = serde_json::to_string(&template.spec)?.len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let created_before = host.metrics.pods_created.get();
    let baseline = rss()?;
    reset_peak()?;

    // The plugin leaves each create's spec empty (the template's): a tiny
    // output the host expands into 500 pods of ~60 KiB.
    let wide = jinghzhu("wide")
        .desired(PODS)
        .template(template)
        .annotations(&[(MISBEHAVE, "empty-spec")])
        .build();
    env.jinghzhus()
        .create(&PostParams::default(), &wide)
        .await?;
    let started = Instant::now();
    e2e_tests::wait_for("500 pods created", CONVERGE, || async {
        Ok(host.metrics.pods_created.get() >= created_before + u64::from(PODS))
    })
    .await?;
    let took = started.elapsed();
    let peak = peak_rss()?;
    eprintln!(
        "measured: {PODS} creates of a {} KiB spec in {took:.1?}: RSS baseline {:.1} MiB, peak {:.1} MiB (+{:.1})",
        spec_bytes / 1024,
        mib(baseline),
        mib(peak),
        mib(peak.saturating_sub(baseline)),
    );
    // One batch's request bodies and answers (≤ 1 MiB of JSON each way),
    // the typed pod being written, the watch events of the new pods, with
    // room for the allocator. Before the batches were bounded: +279 MiB.
    let batch = 16 * wasm_operator::apply::MAX_CREATE_BATCH_BYTES as u64;
    let others = other_bounds(ControllerConfig::default().workers);
    let pods = u64::from(PODS) * 2048;
    assert!(
        peak <= baseline + batch + others + pods,
        "host RSS peaked at {:.1} MiB while creating, more than the baseline {:.1} MiB + {:.1} MiB",
        mib(peak),
        mib(baseline),
        mib(batch + others + pods)
    );
    env.wait_converged("good", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}
