//! Canary rollouts (issue 41) across a fleet: two replicas share the
//! objects by shard, a tenant resource rolls its plugin out, the holder of
//! shard 0 judges every step on both replicas' figures and the other
//! follows. In one run: a good v2 goes through every step to promotion
//! while two of the tenant's objects fail under every version (each
//! object's `reconciledBy` moves once, never back); a v3 failing on a fifth
//! of the objects by name is aborted at its first step by the failure
//! rate, every object back on v2 and v3 called no more; a canary whose
//! proposals differ from the stable plugin's on every object is aborted by
//! the difference criterion with the stable shadow on; that canary retried
//! and promoted by hand.
//!
//! The hosts watch every namespace, so this binary holds this one test.

mod tenant_host;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use e2e_tests::{TestEnv, plugin, wait_for};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use tenant_host::{TenantHost, create_configmap, replace_configmap, tenant};
use wasm_operator::crd::plugin::{JinghzhuPlugin, RolloutSpec, RolloutStatus};
use wasm_operator::judging::plan::{fnv1a, in_cohort};
use wasm_operator::runtime::digest_of;
use wasm_operator::telemetry::metrics::PluginLabels;
use wasm_operator_testkit::jinghzhu;

const CONVERGE: Duration = Duration::from_secs(90);
const MISBEHAVE: &str = "test.jinghzhu.io/misbehave";
/// Objects that fail under no version (but v3 on a fifth of them).
const HEALTHY: usize = 16;
/// The first step's cohort.
const FIRST_STEP: u32 = 25;

/// Whether the misbehaving plugin built with `fail-fifth` fails `name`
/// (its `variants::fails_by_name`: FNV-1a 64 of the name, modulo 5, is 0).
fn fails_by_name(name: &str) -> bool {
    fnv1a(name).is_multiple_of(5)
}

/// The short digest a `reconciledBy` stamp carries.
fn stamp_of(bytes: &[u8]) -> String {
    digest_of(bytes)
        .chars()
        .take("sha256:".len() + 12)
        .collect()
}

async fn rollout_of(
    api: &Api<JinghzhuPlugin>,
    name: &str,
) -> anyhow::Result<Option<RolloutStatus>> {
    Ok(api.get_status(name).await?.status.and_then(|s| s.rollout))
}

/// Calls of the plugin `bytes` on both replicas.
fn calls(replicas: &[TenantHost; 2], bytes: &[u8]) -> u64 {
    let labels = PluginLabels {
        plugin: digest_of(bytes),
    };
    replicas
        .iter()
        .filter_map(|r| r.metrics.plugin_calls.get(&labels).map(|c| c.get()))
        .sum()
}

/// Failed calls of the plugin `bytes` on both replicas.
fn errors(replicas: &[TenantHost; 2], bytes: &[u8]) -> u64 {
    let labels = PluginLabels {
        plugin: digest_of(bytes),
    };
    replicas
        .iter()
        .filter_map(|r| r.metrics.plugin_errors.get(&labels).map(|c| c.get()))
        .sum()
}

/// Waits (15 s at most) until every healthy object's stamp names `plugin`.
async fn every_object_on(team: &TestEnv, plugin: &[u8]) -> anyhow::Result<()> {
    let stamp = stamp_of(plugin);
    wait_for(
        "every object back on v2",
        Duration::from_secs(15),
        || async { Ok(stamps(team).await?.values().all(|s| s.contains(&stamp))) },
    )
    .await
}

/// The canary (digest) a replica routes part of `team`'s objects to, if any.
fn canary_on(team: &TestEnv) -> impl Fn(&TenantHost) -> Option<String> {
    let jz = jinghzhu("web-0").namespace(&team.namespace).build();
    move |host| {
        host.router
            .route(&jz)
            .slot
            .canary()
            .view()
            .map(|v| v.canary)
    }
}

/// The `reconciledBy` of each healthy object.
async fn stamps(env: &TestEnv) -> anyhow::Result<HashMap<String, String>> {
    Ok(env
        .jinghzhus()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|jz| {
            jz.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web-"))
        })
        .map(|jz| {
            let stamp = jz.status.and_then(|s| s.reconciled_by).unwrap_or_default();
            (jz.metadata.name.unwrap_or_default(), stamp)
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_are_judged_on_the_whole_fleet() -> anyhow::Result<()> {
    let (team, leases) = (
        TestEnv::new("rollout-team").await?,
        TestEnv::new("rollout-leases").await?,
    );
    e2e_tests::install_plugin_crd(&team.client).await?;
    let v1 = std::fs::read(plugin("misbehaving-plugin", &[]))?;
    let v2 = std::fs::read(plugin("misbehaving-plugin", &["v2"]))?;
    let v3 = std::fs::read(plugin("misbehaving-plugin", &["v2", "fail-fifth"]))?;
    let differs = std::fs::read(plugin("misbehaving-plugin", &["differ"]))?;
    create_configmap(&team, v1.clone()).await?;
    let resources: Api<JinghzhuPlugin> = Api::all(team.client.clone());
    let name = team.namespace.clone();
    let mut resource = tenant(&team, &name);
    resource.spec.rollout = Some(RolloutSpec {
        steps: vec![FIRST_STEP, 50],
        step_seconds: 3,
        min_reconciles: 3,
        max_failure_increase_percent: 10,
        ..RolloutSpec::default()
    });
    resources.create(&PostParams::default(), &resource).await?;
    let default_plugin = plugin("replicaset-plugin", &[]);
    let replicas = [
        TenantHost::start(&leases, &default_plugin, "replica-a").await?,
        TenantHost::start(&leases, &default_plugin, "replica-b").await?,
    ];
    for host in &replicas {
        wait_for("the tenant served", CONVERGE, || async {
            Ok(host.router.tenant_names().contains(&name))
        })
        .await?;
    }
    // Healthy objects, and two that fail under every version (they ask to).
    let mut healthy: Vec<String> = (0..HEALTHY).map(|i| format!("web-{i}")).collect();
    for object in &healthy {
        team.create(object, 1, &[]).await?;
    }
    for i in 0..2 {
        team.create(&format!("broken-{i}"), 1, &[(MISBEHAVE, "error")])
            .await?;
    }
    // v3 must fail more than 10% of its first cohort: add objects until so.
    while !first_cohort_fails(&team, &healthy).await? {
        let object = format!("web-{}", healthy.len());
        team.create(&object, 1, &[]).await?;
        healthy.push(object);
    }
    for object in &healthy {
        team.wait_converged(object, 1, CONVERGE).await?;
    }

    promote_v2(&team, &resources, &name, (&v1, &v2)).await?;
    for object in &healthy {
        team.wait_converged(object, 1, CONVERGE).await?;
    }
    abort_v3(&team, &resources, &replicas, &healthy, (&v2, &v3)).await?;
    abort_by_difference(&team, &resources, &replicas, (&v2, &differs)).await?;
    promote_by_hand(&team, &resources, &replicas, &differs).await?;

    let [first, second] = replicas;
    first.stop().await;
    second.stop().await;
    resources.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// Whether `fail-fifth` fails more than the allowed 10% of the healthy
/// objects in the first step's cohort (with one failing object among
/// many, the failure rate could stay within the allowed increase).
async fn first_cohort_fails(env: &TestEnv, healthy: &[String]) -> anyhow::Result<bool> {
    let (mut cohort, mut failing) = (0usize, 0usize);
    for object in healthy {
        let jz = env.jinghzhus().get(object).await?;
        if in_cohort(jz.metadata.uid.as_deref().unwrap_or_default(), FIRST_STEP) {
            cohort += 1;
            failing += usize::from(fails_by_name(object));
        }
    }
    Ok(failing * 10 > cohort)
}

/// A good v2 through every step to promotion, judged on both replicas'
/// objects: every healthy object's stamp moves from v1 to v2 once, never
/// back (sampled every 200 ms), though two objects fail all along.
async fn promote_v2(
    team: &TestEnv,
    resources: &Api<JinghzhuPlugin>,
    name: &str,
    (v1, v2): (&[u8], &[u8]),
) -> anyhow::Result<()> {
    replace_configmap(team, v2.to_vec()).await?;
    let (old, new) = (stamp_of(v1), stamp_of(v2));
    let mut on_v2: HashMap<String, bool> = HashMap::new();
    let mut weights = Vec::new();
    let deadline = Instant::now() + CONVERGE;
    loop {
        let rollout = rollout_of(resources, name).await?;
        if let Some(r) = &rollout
            && weights.last() != Some(&r.weight)
        {
            weights.push(r.weight);
        }
        for (object, stamp) in stamps(team).await? {
            let now_v2 = stamp.contains(&new);
            anyhow::ensure!(now_v2 || stamp.contains(&old), "{object}: stamp {stamp}");
            let before = on_v2.insert(object.clone(), now_v2);
            anyhow::ensure!(
                before != Some(true) || now_v2,
                "{object} went back from v2 to v1"
            );
        }
        let promoted = rollout.as_ref().is_some_and(|r| r.phase == "Promoted");
        if promoted && on_v2.values().all(|v| *v) {
            let rollout = rollout.unwrap_or_default();
            assert_eq!(weights.first(), Some(&FIRST_STEP), "{weights:?}");
            assert!(weights.contains(&50), "every step: {weights:?}");
            let judged: Vec<&str> = rollout.history.iter().map(|h| h.verdict.as_str()).collect();
            assert_eq!(
                judged,
                ["Passed", "Passed", "Promoted"],
                "{:?}",
                rollout.history
            );
            assert!(
                ["replica-a", "replica-b"].contains(&rollout.judge.as_deref().unwrap_or_default()),
                "{:?}",
                rollout.judge
            );
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "v2 not promoted within {CONVERGE:?}: {rollout:?}, {} objects on v2",
            on_v2.values().filter(|v| **v).count()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// v3 fails on a fifth of the objects by name: aborted at its first step
/// by `rollout/failure-rate`; every object back on v2 within seconds and
/// v3 called no more. Prints the time from its first failure to the abort.
async fn abort_v3(
    team: &TestEnv,
    resources: &Api<JinghzhuPlugin>,
    replicas: &[TenantHost; 2],
    healthy: &[String],
    (v2, v3): (&[u8], &[u8]),
) -> anyhow::Result<()> {
    let name = team.namespace.clone();
    let offered = Instant::now();
    replace_configmap(team, v3.to_vec()).await?;
    let canary_of = canary_on(team);
    let mut first_failure = None;
    let (aborted, canaries_at_abort) = loop {
        if first_failure.is_none() && errors(replicas, v3) > 0 {
            first_failure = Some(Instant::now());
        }
        let rollout = rollout_of(resources, &name).await?;
        if let Some(r) = rollout.filter(|r| r.phase == "Aborted") {
            break (r, replicas.iter().map(&canary_of).collect::<Vec<_>>());
        }
        anyhow::ensure!(
            offered.elapsed() < CONVERGE,
            "v3 not aborted within {CONVERGE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let at = Instant::now();
    let first_failure = first_failure.unwrap_or(at);
    println!(
        "v3 aborted {} ms after its first failing reconcile ({} ms after it was offered): {:?}",
        at.duration_since(first_failure).as_millis(),
        at.duration_since(offered).as_millis(),
        aborted.message
    );
    assert_eq!(aborted.rule.as_deref(), Some("rollout/failure-rate"));
    assert_eq!(
        aborted.step.as_deref(),
        Some("1/3"),
        "aborted at its first step"
    );
    wait_for(
        "a Warning naming rollout/failure-rate",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&team.client, &name)
                .await?
                .iter()
                .any(|m| m.contains("rollout/failure-rate")))
        },
    )
    .await?;
    // Every object back on v2 within seconds, on both replicas.
    let back = Instant::now();
    every_object_on(team, v2).await?;
    println!(
        "every object back on v2 {} ms after the abort was seen",
        back.elapsed().as_millis()
    );
    // Each replica has followed the abort (none routes to v3), and none that
    // had no canary when the abort was seen took v3 up after it.
    let following = Instant::now();
    loop {
        let now: Vec<Option<String>> = replicas.iter().map(&canary_of).collect();
        for (at_abort, now) in canaries_at_abort.iter().zip(&now) {
            anyhow::ensure!(
                at_abort.is_some() || now.is_none(),
                "a replica started the canary {now:?} after the judge aborted it"
            );
        }
        if now.iter().all(Option::is_none) {
            break;
        }
        anyhow::ensure!(
            following.elapsed() < CONVERGE,
            "a replica still routes to the aborted canary: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after_abort = calls(replicas, v3);
    assert!(after_abort > 0, "v3 served its cohort before the abort");
    for object in healthy {
        team.scale(object, 2).await?;
    }
    for object in healthy {
        team.wait_converged(object, 2, CONVERGE).await?;
    }
    assert_eq!(
        calls(replicas, v3),
        after_abort,
        "no object reconciled by v3 after the abort"
    );
    Ok(())
}

/// With the stable shadow turned on during its rollout, a canary whose
/// proposals differ from v2's on every object is aborted by
/// `rollout/difference`; v2 keeps serving.
async fn abort_by_difference(
    team: &TestEnv,
    resources: &Api<JinghzhuPlugin>,
    replicas: &[TenantHost; 2],
    (v2, differs): (&[u8], &[u8]),
) -> anyhow::Result<()> {
    let name = team.namespace.clone();
    // The canary first (an edit of spec.rollout before would retry v3),
    // then the stable shadow, which applies to the rollout going on; its
    // steps held long enough that the difference decides.
    replace_configmap(team, differs.to_vec()).await?;
    wait_for("the differing canary rolling out", CONVERGE, || async {
        let rollout = rollout_of(resources, &name).await?;
        Ok(rollout.is_some_and(|r| r.canary.as_deref() == Some(digest_of(differs).as_str())))
    })
    .await?;
    let patch = serde_json::json!({"spec": {"rollout": {
        "shadowStable": true, "maxDifferencePercent": 10, "stepSeconds": 60
    }}});
    resources
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for("the differing canary aborted", CONVERGE, || async {
        let rollout = rollout_of(resources, &name).await?;
        Ok(rollout.is_some_and(|r| {
            r.phase == "Aborted"
                && r.canary.as_deref() == Some(digest_of(differs).as_str())
                && r.rule.as_deref() == Some("rollout/difference")
        }))
    })
    .await?;
    every_object_on(team, v2).await?;
    let jz = jinghzhu("web-0").namespace(&name).build();
    for host in replicas {
        let serving = host.router.route(&jz).slot.serving();
        assert_eq!(serving.map(|p| p.digest().to_string()), Some(digest_of(v2)));
    }
    Ok(())
}

/// By hand on the fleet: an edit of `spec.rollout` retries the aborted
/// canary, held at its first step for an hour; `wasm-operator rollout
/// promote` (a patch of the resource) makes both replicas serve it to every
/// object.
async fn promote_by_hand(
    team: &TestEnv,
    resources: &Api<JinghzhuPlugin>,
    replicas: &[TenantHost; 2],
    canary: &[u8],
) -> anyhow::Result<()> {
    use wasm_operator::delivery::resource::rollout_cli::{RolloutAction, apply};
    let name = team.namespace.clone();
    let patch =
        serde_json::json!({"spec": {"rollout": {"shadowStable": false, "stepSeconds": 3600}}});
    resources
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for("the canary retried", CONVERGE, || async {
        let rollout = rollout_of(resources, &name).await?;
        Ok(rollout.is_some_and(|r| {
            r.phase == "Progressing" && r.canary.as_deref() == Some(digest_of(canary).as_str())
        }))
    })
    .await?;
    apply(&team.client, &name, RolloutAction::Promote).await?;
    let jz = jinghzhu("web-0").namespace(&name).build();
    for host in replicas {
        wait_for(
            "each replica serving the promoted canary",
            CONVERGE,
            || async {
                let serving = host.router.route(&jz).slot.serving();
                Ok(serving.is_some_and(|p| p.digest() == digest_of(canary)))
            },
        )
        .await?;
    }
    every_object_on(team, canary).await
}
