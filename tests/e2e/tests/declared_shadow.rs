//! Shadow plugins of a declared controller (`PluginController.spec.shadow`)
//! end to end. The Memcached plugin serves; beside it a shadow runs on the
//! same input and nothing of it is applied:
//! - the same plugin as shadow agrees, counted in `status.shadow` and the
//!   metrics;
//! - the `v2` build (an annotation on its Deployments) differs: each
//!   difference is counted and shown in short, and the Deployments stay as
//!   the serving plugin wrote them (no annotation, no write at all when
//!   the serving plugin has nothing to change);
//! - the misbehaving plugin (a ConfigMap the controller does not declare)
//!   is refused by rule `child/kind`, named on the status and in one
//!   Warning `ShadowOutputRefused` (rate-bounded), while the serving plugin
//!   keeps converging;
//! - with `spec.rollout.shadowStable` the stable plugin shadows a canary:
//!   the `v2` build as canary differs and is aborted by
//!   `rollout/difference`; a rebuild of the stable plugin (the same code,
//!   another digest) agrees and is promoted;
//! - a slow shadow (the misbehaving plugin's `slow` build, each call ended
//!   by the host's deadline) behind a queue of one: its calls are dropped
//!   (`status.shadow.dropped`, the metric, one Warning `ShadowCallsDropped`
//!   naming `shadow/queue-full`) while the serving plugin's parents
//!   converge at the pace they had without it, and a neighbour controller
//!   converges too.
//!
//! A control plane of this binary's own and one manager, one test at a
//! time: the three controllers serve the same parent kind, so each test
//! removes its controller and its parents before the next begins.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use e2e_tests::declared::{
    Manager, apply_crd, crd_file, declare, memcached_controller, memcacheds, trial_crd, trials,
    wait_state,
};
use e2e_tests::{ControlPlaneSlot, TestEnv, events_on, own_control_plane, plugin, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use local_control_plane::ControlPlaneOptions;
use serde_json::json;
use tokio::sync::OnceCell;
use wasm_operator::crd::controller::{PluginController, ShadowStatus};
use wasm_operator::crd::plugin::RolloutStatus;
use wasm_operator::runtime::digest_of;
use wasm_operator::telemetry::metrics::Metrics;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

/// One test at a time (the controllers share the parent kind).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const BUILD_ANNOTATION: &str = "cache.example.com/plugin-build";

/// A namespace, the CRDs and the manager (started once); its metrics.
async fn setup(prefix: &str) -> Result<(TestEnv, Arc<Metrics>)> {
    let plane = own_control_plane(&PLANE, ControlPlaneOptions::default).await?;
    let env = TestEnv::new_on(plane, prefix).await?;
    static MANAGER: OnceCell<Arc<Metrics>> = OnceCell::const_new();
    let metrics = MANAGER
        .get_or_try_init(|| async {
            apply_crd(&env.client, PluginController::crd()).await?;
            apply_crd(&env.client, crd_file("examples/memcached/crd.yaml")?).await?;
            let manager = Manager::start(plane, None)?;
            let metrics = manager.metrics().clone();
            // Serves every test of this binary until the process ends.
            std::mem::forget(manager);
            anyhow::Ok(metrics)
        })
        .await?
        .clone();
    clean_slate(&env.client).await?;
    Ok((env, metrics))
}

/// Removes every controller and Memcached an earlier test left (one that
/// failed before its clean-up), so this test's controller is alone.
async fn clean_slate(client: &Client) -> Result<()> {
    let controllers: Api<PluginController> = Api::all(client.clone());
    for controller in controllers.list(&ListParams::default()).await?.items {
        controllers
            .delete(&controller.name_any(), &DeleteParams::default())
            .await?;
    }
    let parents: Api<DynamicObject> = Api::all_with(client.clone(), &memcacheds());
    for parent in parents.list(&ListParams::default()).await?.items {
        let namespace = parent.namespace().unwrap_or_default();
        Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &memcacheds())
            .delete(&parent.name_any(), &DeleteParams::default())
            .await?;
    }
    wait_for("no Memcached left", Duration::from_secs(30), || async {
        Ok(parents.list(&ListParams::default()).await?.items.is_empty())
    })
    .await
}

/// Copies `from` to `dir/name` (each plugin file a path of its own).
fn placed(from: &Path, dir: &Path, name: &str) -> Result<std::path::PathBuf> {
    let path = dir.join(name);
    std::fs::copy(from, &path).with_context(|| format!("copying {}", from.display()))?;
    Ok(path)
}

/// The Memcached controller `name` serving `serving`, with `shadow` as its
/// shadow plugin.
async fn declare_with_shadow(
    client: &Client,
    name: &str,
    serving: &Path,
    shadow: &Path,
) -> Result<()> {
    let mut spec = memcached_controller(serving);
    spec["shadow"] = json!({"source": {"file": {"path": shadow.display().to_string()}}});
    declare(client, name, spec).await?;
    wait_state(client, name, "Serving").await?;
    let digest = digest_of(&std::fs::read(shadow)?);
    shadow_until(client, name, "the shadow running", |s| s.digest == digest).await?;
    Ok(())
}

async fn shadow_of(client: &Client, name: &str) -> Result<ShadowStatus> {
    let api: Api<PluginController> = Api::all(client.clone());
    Ok(api
        .get(name)
        .await?
        .status
        .and_then(|s| s.shadow)
        .unwrap_or_default())
}

/// Waits until `status.shadow` of `name` satisfies `check`; returns it.
async fn shadow_until(
    client: &Client,
    name: &str,
    what: &str,
    check: impl Fn(&ShadowStatus) -> bool,
) -> Result<ShadowStatus> {
    let waited = wait_for(
        &format!("{name}'s status.shadow: {what}"),
        Duration::from_secs(60),
        || async { Ok(check(&shadow_of(client, name).await?)) },
    )
    .await;
    let shown = shadow_of(client, name).await?;
    waited.with_context(|| format!("status.shadow is {shown:?}"))?;
    Ok(shown)
}

async fn create_memcached(env: &TestEnv, name: &str, size: i64) -> Result<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": name}, "spec": {"size": size}
    }))?;
    api.create(&PostParams::default(), &object).await?;
    Ok(())
}

/// Waits until the Deployment `name` exists with `replicas`; returns it.
async fn deployment(env: &TestEnv, name: &str, replicas: i32) -> Result<Deployment> {
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for(
        &format!("Deployment {name} with {replicas} replicas"),
        Duration::from_secs(60),
        || async {
            Ok(api
                .get_opt(name)
                .await?
                .and_then(|d| d.spec)
                .and_then(|s| s.replicas)
                == Some(replicas))
        },
    )
    .await?;
    Ok(api.get(name).await?)
}

/// Removes the controller `name` and the namespace's Memcacheds, so the
/// next test's controller starts alone.
async fn clean_up(env: &TestEnv, name: &str) -> Result<()> {
    let controllers: Api<PluginController> = Api::all(env.client.clone());
    controllers.delete(name, &DeleteParams::default()).await?;
    let parents: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    parents
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    wait_for("the Memcacheds gone", Duration::from_secs(30), || async {
        Ok(parents.list(&ListParams::default()).await?.items.is_empty())
    })
    .await
}

#[tokio::test]
async fn a_shadow_that_agrees_shows_agreements() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let (env, metrics) = setup("shadow-agrees").await?;
    let dir = tempfile::tempdir()?;
    let built = plugin("memcached-plugin", &[]);
    let serving = placed(&built, dir.path(), "serving.wasm")?;
    let shadow = placed(&built, dir.path(), "shadow.wasm")?;
    let name = "memcached-shadow-agrees";
    declare_with_shadow(&env.client, name, &serving, &shadow).await?;
    create_memcached(&env, "first", 1).await?;
    create_memcached(&env, "second", 2).await?;
    deployment(&env, "first", 1).await?;
    deployment(&env, "second", 2).await?;
    let shown = shadow_until(&env.client, name, "two agreements", |s| s.agreed >= 2).await?;
    assert_eq!(
        shown.digest,
        digest_of(&std::fs::read(&built)?),
        "{shown:?}"
    );
    assert_eq!(
        (shown.differed, shown.refused, shown.failed),
        (0, 0, 0),
        "{shown:?}"
    );
    assert!(shown.calls >= shown.agreed, "{shown:?}");
    assert!(shown.last_difference.is_none(), "{shown:?}");
    assert!(metrics.declared_shadow_outcome(name, "agreed") >= 2);
    assert_eq!(metrics.declared_shadow_outcome(name, "differed"), 0);
    clean_up(&env, name).await
}

#[tokio::test]
async fn a_shadow_that_differs_shows_differences_and_writes_nothing() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let (env, metrics) = setup("shadow-differs").await?;
    let dir = tempfile::tempdir()?;
    let serving = placed(&plugin("memcached-plugin", &[]), dir.path(), "serving.wasm")?;
    let shadow = placed(
        &plugin("memcached-plugin", &["v2"]),
        dir.path(),
        "shadow.wasm",
    )?;
    let name = "memcached-shadow-differs";
    declare_with_shadow(&env.client, name, &serving, &shadow).await?;
    create_memcached(&env, "cache", 1).await?;
    deployment(&env, "cache", 1).await?;
    let first = shadow_until(&env.client, name, "a difference", |s| s.differed >= 1).await?;
    let difference = first.last_difference.clone().context("lastDifference")?;
    assert!(
        difference.message.contains(BUILD_ANNOTATION),
        "{difference:?}"
    );
    assert_eq!(difference.object, format!("{}/cache", env.namespace));

    // The serving plugin scales the Deployment; the shadow's annotation is
    // an update that differs, never written.
    let parents: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    parents
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 3}})),
        )
        .await?;
    deployment(&env, "cache", 3).await?;
    let second = shadow_until(&env.client, name, "an update that differs", |s| {
        s.differed > first.differed
            && s.last_difference
                .as_ref()
                .is_some_and(|d| d.message.contains("updates:"))
    })
    .await?;
    let settled = deployment(&env, "cache", 3).await?;
    assert!(
        !settled.annotations().contains_key(BUILD_ANNOTATION),
        "the shadow's annotation was written: {:?}",
        settled.annotations()
    );

    // A reconcile where the serving plugin has nothing to change: the
    // shadow still differs, and the Deployment is not written at all.
    parents
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"poke": "1"}}})),
        )
        .await?;
    let third = shadow_until(&env.client, name, "one more difference", |s| {
        s.differed > second.differed
    })
    .await?;
    let after = deployment(&env, "cache", 3).await?;
    assert_eq!(
        after.resource_version(),
        settled.resource_version(),
        "the Deployment was written while only the shadow differed"
    );
    assert!(!after.annotations().contains_key(BUILD_ANNOTATION));
    assert_eq!((third.agreed, third.refused), (0, 0), "{third:?}");
    assert!(metrics.declared_shadow_outcome(name, "differed") >= 3);
    clean_up(&env, name).await
}

#[tokio::test]
async fn a_refused_shadow_is_named_by_rule_while_the_serving_plugin_converges() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let (env, metrics) = setup("shadow-refused").await?;
    let dir = tempfile::tempdir()?;
    let serving = placed(&plugin("memcached-plugin", &[]), dir.path(), "serving.wasm")?;
    let shadow = placed(
        &plugin("misbehaving-controller-plugin", &[]),
        dir.path(),
        "shadow.wasm",
    )?;
    let name = "memcached-shadow-refused";
    declare_with_shadow(&env.client, name, &serving, &shadow).await?;
    for (parent, size) in [("one", 1), ("two", 2), ("three", 1)] {
        create_memcached(&env, parent, size).await?;
    }
    let shown = shadow_until(&env.client, name, "three refusals", |s| s.refused >= 3).await?;
    let refused = shown.last_refused.clone().context("lastRefused")?;
    assert_eq!(refused.rule.as_deref(), Some("child/kind"), "{refused:?}");
    assert_eq!((shown.agreed, shown.differed), (0, 0), "{shown:?}");
    // The serving plugin converged every parent; nothing of the shadow's
    // output (its ConfigMaps) exists.
    for (parent, size) in [("one", 1), ("two", 2), ("three", 1)] {
        deployment(&env, parent, size).await?;
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    for parent in ["one", "two", "three"] {
        assert!(
            configmaps.get_opt(parent).await?.is_none(),
            "ConfigMap {parent} written"
        );
    }
    wait_for(
        "the ShadowOutputRefused Warning",
        Duration::from_secs(30),
        || async { Ok(!shadow_refusals(&env.client, name).await?.is_empty()) },
    )
    .await?;
    let events = shadow_refusals(&env.client, name).await?;
    assert_eq!(events.len(), 1, "one Warning a minute: {events:?}");
    assert!(events[0].contains("child/kind"), "{events:?}");
    assert!(metrics.declared_shadow_outcome(name, "refused") >= 3);
    let api: Api<PluginController> = Api::all(env.client.clone());
    let state = api.get(name).await?.status.unwrap_or_default();
    assert_eq!(state.state, "Serving", "{state:?}");
    clean_up(&env, name).await
}

#[tokio::test]
async fn shadow_stable_aborts_a_canary_that_differs_and_promotes_one_that_agrees() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let (env, _metrics) = setup("shadow-stable").await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memcached.wasm");
    let v1_bytes = std::fs::read(plugin("memcached-plugin", &[]))?;
    let v1 = place(&v1_bytes, &path)?;
    let name = "memcached-shadow-stable";
    let mut spec = memcached_controller(&path);
    spec["rollout"] = json!({
        "steps": [50], "stepSeconds": 2, "minReconciles": 1,
        "maxLatencyIncreasePercent": 10000, "maxWritesIncreasePercent": 10000,
        "shadowStable": true, "maxDifferencePercent": 10,
    });
    declare(&env.client, name, spec).await?;
    wait_state(&env.client, name, "Serving").await?;
    let parents = ["s0", "s1", "s2", "s3", "s4", "s5"];
    for parent in parents {
        create_memcached(&env, parent, 1).await?;
    }
    for parent in parents {
        deployment(&env, parent, 1).await?;
    }

    // The v2 build adds an annotation: its outputs differ from v1's.
    let v2 = place(&std::fs::read(plugin("memcached-plugin", &["v2"]))?, &path)?;
    let aborted = rollout_until(&env.client, name, "Aborted", &v2).await?;
    assert_eq!(
        aborted.rule.as_deref(),
        Some("rollout/difference"),
        "{aborted:?}"
    );
    assert!(
        aborted
            .message
            .as_deref()
            .is_some_and(|m| m.contains("differed from the stable shadow")),
        "{aborted:?}"
    );

    // The same code with another digest (a custom section appended, as a
    // rebuild with other metadata would be): no output differs.
    let mut rebuilt = v1_bytes.clone();
    rebuilt.extend_from_slice(&[0, 12, 4]);
    rebuilt.extend_from_slice(b"noterebuild");
    let rebuilt = place(&rebuilt, &path)?;
    assert_ne!(rebuilt, v1);
    let promoted = rollout_until(&env.client, name, "Promoted", &rebuilt).await?;
    assert!(
        promoted.history.iter().all(|h| h.verdict != "Aborted"),
        "{promoted:?}"
    );
    // The aborted canary's annotation is gone again from its cohort.
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for(
        "no Deployment annotated by v2",
        Duration::from_secs(60),
        || async {
            for parent in parents {
                if deployments
                    .get(parent)
                    .await?
                    .annotations()
                    .contains_key(BUILD_ANNOTATION)
                {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await?;
    clean_up(&env, name).await
}

/// Puts `bytes` at `path` in one rename (the file source sees whole files
/// only); their digest.
fn place(bytes: &[u8], path: &Path) -> Result<String> {
    let staged = path.with_extension("new");
    std::fs::write(&staged, bytes)?;
    std::fs::rename(&staged, path)?;
    Ok(digest_of(bytes))
}

/// Waits until the rollout of `canary` on `name` reaches `phase`.
async fn rollout_until(
    client: &Client,
    name: &str,
    phase: &str,
    canary: &str,
) -> Result<RolloutStatus> {
    let api: Api<PluginController> = Api::all(client.clone());
    let rollout = || async { anyhow::Ok(api.get(name).await?.status.and_then(|s| s.rollout)) };
    wait_for(
        &format!("{name}'s rollout of {canary} {phase}"),
        Duration::from_secs(90),
        || async {
            Ok(rollout()
                .await?
                .is_some_and(|r| r.phase == phase && r.canary.as_deref() == Some(canary)))
        },
    )
    .await?;
    Ok(rollout().await?.unwrap_or_default())
}

/// The `ShadowOutputRefused` Warnings on the controller `name`.
async fn shadow_refusals(client: &Client, name: &str) -> Result<Vec<String>> {
    shadow_warnings(client, name, "ShadowOutputRefused").await
}

/// The Warnings `reason` on the controller `name` (cluster scoped: its
/// Events are in `default`), counting each Event's repeats.
async fn shadow_warnings(client: &Client, name: &str, reason: &str) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for event in events_on(client, "default", "PluginController", name).await? {
        if event.type_.as_deref() == Some("Warning") && event.reason.as_deref() == Some(reason) {
            let repeats = event.count.unwrap_or(1).max(1);
            for _ in 0..repeats {
                notes.push(event.message.clone().unwrap_or_default());
            }
        }
    }
    Ok(notes)
}

/// Parents of the slow shadow's test: enough that a serving path waiting
/// a shadow call (a second) in each reconcile, four workers at a time,
/// would take about 20 s (two reconciles a parent), a shadow's one call at
/// a time much longer.
const PACED: usize = 40;

/// The misbehaving plugin at `path` serving `kind` (ConfigMap children).
fn trial_controller(kind: &str, path: &Path) -> serde_json::Value {
    json!({
        "parent": {"apiVersion": "e2e.wasm-operator.io/v1", "kind": kind},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap", "maxCount": 2}],
        "source": {"file": {"path": path.display().to_string()}},
    })
}

/// Creates the parents `names` of `kind` (in `api`) holding `value`.
async fn create_trials(
    api: &Api<DynamicObject>,
    kind: &str,
    names: &[String],
    value: &str,
) -> Result<()> {
    for name in names {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "e2e.wasm-operator.io/v1", "kind": kind,
            "metadata": {"name": name}, "spec": {"value": value}
        }))?;
        api.create(&PostParams::default(), &object).await?;
    }
    Ok(())
}

/// Waits until every parent of `api` named in `names` shows `value` in its
/// status (its ConfigMap holds it: the plugin's convergence); how long.
async fn converged(api: &Api<DynamicObject>, names: &[String], value: &str) -> Result<Duration> {
    let started = Instant::now();
    wait_for(
        &format!("{} parents with status.value {value:?}", names.len()),
        Duration::from_secs(120),
        || async {
            let shown = api.list(&ListParams::default()).await?.items;
            Ok(names.iter().all(|name| {
                shown.iter().any(|p| {
                    p.name_any() == *name && p.data.pointer("/status/value") == Some(&json!(value))
                })
            }))
        },
    )
    .await?;
    Ok(started.elapsed())
}

/// Sets every parent's `spec.value` to `value` and measures how long until
/// all have converged again.
async fn pace(api: &Api<DynamicObject>, names: &[String], value: &str) -> Result<Duration> {
    let started = Instant::now();
    for name in names {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"value": value}})),
        )
        .await?;
    }
    converged(api, names, value).await?;
    Ok(started.elapsed())
}

#[tokio::test]
async fn a_slow_shadow_drops_calls_while_the_serving_plugin_keeps_its_pace() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let (env, metrics) = setup("shadow-slow").await?;
    apply_crd(&env.client, trial_crd("Paced", "paceds")).await?;
    apply_crd(&env.client, trial_crd("Steady", "steadies")).await?;
    let dir = tempfile::tempdir()?;
    let built = plugin("misbehaving-controller-plugin", &[]);
    let serving = placed(&built, dir.path(), "serving.wasm")?;
    let slow = placed(
        &plugin("misbehaving-controller-plugin", &["slow"]),
        dir.path(),
        "slow.wasm",
    )?;
    let name = "paced-shadow-slow";
    declare(&env.client, name, trial_controller("Paced", &serving)).await?;
    wait_state(&env.client, name, "Serving").await?;
    let paced: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &trials("Paced", "paceds"),
    );
    let names: Vec<String> = (0..PACED).map(|i| format!("paced-{i:02}")).collect();
    create_trials(&paced, "Paced", &names, "a").await?;
    converged(&paced, &names, "a").await?;

    // The pace of the same parents without a shadow, then with the slow
    // shadow behind a queue of one.
    let without = pace(&paced, &names, "b").await?;
    let mut spec = trial_controller("Paced", &serving);
    spec["shadow"] = json!({
        "source": {"file": {"path": slow.display().to_string()}},
        "queue": 1,
    });
    let shadowed_at = Instant::now();
    declare(&env.client, name, spec).await?;
    let digest = digest_of(&std::fs::read(&slow)?);
    let started = shadow_until(&env.client, name, "the slow shadow running", |s| {
        s.digest == digest
    })
    .await?;
    let with = pace(&paced, &names, "c").await?;
    // Generous for a loaded machine, and still well under a serving path
    // that waits for the shadow (see PACED).
    let bound = without * 3 + Duration::from_secs(5);
    assert!(
        with <= bound,
        "with the slow shadow the parents took {with:?}, without {without:?} (bound {bound:?})"
    );

    let shown = shadow_until(&env.client, name, "calls dropped and failed", |s| {
        s.dropped > started.dropped && s.failed >= 1
    })
    .await?;
    assert_eq!(
        (shown.agreed, shown.differed, shown.refused),
        (0, 0, 0),
        "every slow call ends at the deadline: {shown:?}"
    );
    assert!(
        metrics.declared_shadow_outcome(name, "dropped") >= shown.dropped,
        "the metric counts every drop the status shows: {shown:?}"
    );
    wait_for(
        "the ShadowCallsDropped Warning",
        Duration::from_secs(30),
        || async {
            Ok(!shadow_warnings(&env.client, name, "ShadowCallsDropped")
                .await?
                .is_empty())
        },
    )
    .await?;
    let warnings = shadow_warnings(&env.client, name, "ShadowCallsDropped").await?;
    let minutes = shadowed_at.elapsed().as_secs() / 60 + 1;
    assert!(
        !warnings.is_empty() && warnings.len() as u64 <= minutes,
        "one Warning a minute ({minutes} minutes): {warnings:?}"
    );
    assert!(warnings[0].contains("shadow/queue-full"), "{warnings:?}");

    // The host is up: a neighbour converges, and so does the serving
    // plugin once more, the shadow still slow beside it.
    let neighbour = "steady-neighbour";
    declare(&env.client, neighbour, trial_controller("Steady", &serving)).await?;
    wait_state(&env.client, neighbour, "Serving").await?;
    let steady: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &trials("Steady", "steadies"),
    );
    let steadies: Vec<String> = (0..3).map(|i| format!("steady-{i}")).collect();
    create_trials(&steady, "Steady", &steadies, "n").await?;
    converged(&steady, &steadies, "n").await?;
    pace(&paced, &names, "d").await?;
    let state = Api::<PluginController>::all(env.client.clone())
        .get(name)
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(state.state, "Serving", "{state:?}");
    eprintln!(
        "paced {PACED} parents: without a shadow {without:?}, with the slow shadow {with:?}; {shown:?}"
    );

    let controllers: Api<PluginController> = Api::all(env.client.clone());
    controllers
        .delete(neighbour, &DeleteParams::default())
        .await?;
    controllers.delete(name, &DeleteParams::default()).await?;
    for api in [&paced, &steady] {
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
    }
    Ok(())
}
