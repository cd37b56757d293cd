//! Tenants of a declared controller end to end: a namespace an admin
//! labelled `tenant.wasm-operator.io/<base>=<tenant>` is served by the
//! tenant's plugin while the other namespaces keep the base's, and goes
//! back to the base when the label goes; a tenant asking for more than its
//! base, a rival controller of the same parent kind and a namespace that
//! did not opt in are refused by name; a noisy namespace is held to its
//! share of the write budget while another namespace keeps converging.
//!
//! A control plane of this binary's own with one in-process manager; each
//! test has a parent kind of its own, so they run side by side.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use e2e_tests::declared::{
    apply_crd, crd_file, declare, memcached_controller, memcacheds, start_manager, status_field,
    trial_crd, trials, wait_state,
};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use wasm_operator::crd::controller::PluginController;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

/// The annotation the Memcached plugin built with `v2` sets on its
/// Deployment (the tenant's plugin here).
const BUILD_ANNOTATION: &str = "cache.example.com/plugin-build";

async fn setup(prefix: &str) -> Result<TestEnv> {
    let plane = own_control_plane(&PLANE, Default::default).await?;
    let env = TestEnv::new_on(plane, prefix).await?;
    static READY: OnceCell<()> = OnceCell::const_new();
    READY
        .get_or_try_init(|| async {
            apply_crd(&env.client, PluginController::crd()).await?;
            apply_crd(&env.client, crd_file("examples/memcached/crd.yaml")?).await?;
            apply_crd(&env.client, trial_crd("Guarded", "guardeds")).await?;
            apply_crd(&env.client, trial_crd("Churn", "churns")).await?;
            start_manager(plane)
        })
        .await?;
    Ok(env)
}

/// Creates the namespace `name` with `labels`.
async fn namespace(client: &Client, name: &str, labels: Value) -> Result<()> {
    let object: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await?;
    Ok(())
}

/// Sets (`Some`) or removes (`None`) one label of a namespace.
async fn label(client: &Client, namespace: &str, key: &str, value: Option<&str>) -> Result<()> {
    let patch = json!({"metadata": {"labels": {key: value}}});
    Api::<Namespace>::all(client.clone())
        .patch(namespace, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn create(api: &Api<DynamicObject>, body: Value) -> Result<()> {
    api.create(&PostParams::default(), &serde_json::from_value(body)?)
        .await?;
    Ok(())
}

/// Waits until the Deployment `namespace/name` was made by the build
/// `build` (`None`: the base's plugin, which sets no annotation).
async fn made_by(client: &Client, namespace: &str, name: &str, build: Option<&str>) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    wait_for(
        &format!("the Deployment {namespace}/{name} made by {build:?}"),
        Duration::from_secs(90),
        || async {
            let Some(deployment) = api.get_opt(name).await? else {
                return Ok(false);
            };
            Ok(deployment
                .annotations()
                .get(BUILD_ANNOTATION)
                .map(String::as_str)
                == build)
        },
    )
    .await
}

async fn controller(client: &Client, name: &str) -> Result<PluginController> {
    Ok(Api::<PluginController>::all(client.clone())
        .get(name)
        .await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_labelled_namespace_is_served_by_the_tenant_and_goes_back_to_the_base() -> Result<()> {
    let env = setup("routes").await?;
    let client = &env.client;
    let (opted, asked_only) = (
        format!("{}-team-a", env.namespace),
        format!("{}-team-b", env.namespace),
    );
    let key = "tenant.wasm-operator.io/memcached";
    namespace(client, &opted, json!({key: "team-a"})).await?;
    namespace(client, &asked_only, json!({})).await?;
    declare(
        client,
        "memcached",
        memcached_controller(&plugin("memcached-plugin", &[])),
    )
    .await?;
    wait_state(client, "memcached", "Serving").await?;
    let mut tenant = memcached_controller(&plugin("memcached-plugin", &["v2"]));
    tenant["tenant"] = json!({"of": "memcached", "namespaces": [opted, asked_only]});
    declare(client, "team-a", tenant).await?;
    wait_state(client, "team-a", "Serving").await?;

    let memcached = |ns: &str| {
        json!({
            "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": "cache", "namespace": ns}, "spec": {"size": 1}
        })
    };
    for ns in [&opted, &asked_only, &env.namespace] {
        create(
            &Api::namespaced_with(client.clone(), ns, &memcacheds()),
            memcached(ns),
        )
        .await?;
    }
    made_by(client, &opted, "cache", Some("v2")).await?;
    made_by(client, &asked_only, "cache", None).await?;
    made_by(client, &env.namespace, "cache", None).await?;

    // The namespace asked for but not labelled is refused by name.
    wait_for(
        "team-a's status.tenant",
        Duration::from_secs(30),
        || async {
            let status = controller(client, "team-a")
                .await?
                .status
                .unwrap_or_default();
            Ok(status.tenant.is_some_and(|t| {
                t.serving == [opted.clone()]
                    && t.refused == [asked_only.clone()]
                    && t.rule.as_deref() == Some("tenant/namespace-not-allowed")
            }))
        },
    )
    .await?;
    warning_naming(
        client,
        "team-a",
        &["[tenant/namespace-not-allowed]", &asked_only],
    )
    .await?;

    // The label removed: back to the base's plugin, at once.
    label(client, &opted, key, None).await?;
    made_by(client, &opted, "cache", None).await?;
    // And set again: the tenant's.
    label(client, &opted, key, Some("team-a")).await?;
    made_by(client, &opted, "cache", Some("v2")).await?;
    made_by(client, &env.namespace, "cache", None).await?;
    Ok(())
}

/// A controller of `Guarded` parents with the misbehaving plugin.
fn guarded(extra: Value) -> Value {
    let mut spec = json!({
        "parent": {"apiVersion": "e2e.wasm-operator.io/v1", "kind": "Guarded"},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap", "maxCount": 2}],
        "source": {"file": {"path": plugin("misbehaving-controller-plugin", &[]).display().to_string()}},
        "podPolicy": {"policy": "restricted"},
        "limits": {"timeoutMs": 1000},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

/// Waits until `name` is refused; returns its rule and message.
async fn refused(client: &Client, name: &str) -> Result<(String, String)> {
    let refused = wait_state(client, name, "Refused").await?;
    let last = refused
        .status
        .and_then(|s| s.last_refusal)
        .context("no lastRefusal")?;
    Ok((last.rule, last.message))
}

/// Waits for a `PluginRefused` Warning on the PluginController `name` whose
/// message holds every one of `needles` (the host sends Events from a queue,
/// after the status is written).
async fn warning_naming(client: &Client, name: &str, needles: &[&str]) -> Result<()> {
    wait_for(
        &format!("a PluginRefused Warning on {name} naming {needles:?}"),
        Duration::from_secs(30),
        || async {
            let warnings =
                e2e_tests::refusal_events(client, "default", "PluginController", name).await?;
            Ok(warnings
                .iter()
                .any(|m| needles.iter().all(|needle| m.contains(needle))))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_loosening_its_base_and_a_rival_of_the_kind_are_refused_by_name() -> Result<()> {
    let env = setup("looser").await?;
    let client = &env.client;
    declare(client, "guarded", guarded(json!({}))).await?;
    wait_state(client, "guarded", "Serving").await?;
    let tenant = |extra: Value| {
        let mut spec = guarded(json!({"tenant": {"of": "guarded", "namespaces": [env.namespace]}}));
        spec.as_object_mut().map(|s| s.remove("podPolicy"));
        spec.as_object_mut().map(|s| s.remove("limits"));
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        spec
    };
    for (name, extra, names) in [
        (
            "looser-kind",
            json!({"children": [{"apiVersion": "v1", "kind": "Service"}]}),
            "v1/Service",
        ),
        (
            "looser-count",
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap", "maxCount": 5}]}),
            "maxCount 5",
        ),
        (
            "looser-pods",
            json!({"podPolicy": {"policy": "baseline"}}),
            "pod policy baseline",
        ),
        (
            "looser-time",
            json!({"limits": {"timeoutMs": 5000}}),
            "timeoutMs 5000",
        ),
    ] {
        declare(client, name, tenant(extra)).await?;
        let (rule, message) = refused(client, name).await?;
        if rule != "tenant/looser-than-base" || !message.contains(names) {
            bail!(
                "{name}: refused by {rule} ({message}), expected tenant/looser-than-base naming {names}"
            );
        }
        warning_naming(client, name, &["[tenant/looser-than-base]"]).await?;
    }
    // Within the base: served (and it inherits the base's restricted policy).
    declare(
        client,
        "within",
        tenant(json!({"limits": {"timeoutMs": 500}})),
    )
    .await?;
    wait_state(client, "within", "Serving").await?;
    let spec = json!({"tenant": {"of": "nobody", "namespaces": [env.namespace]}});
    declare(client, "orphan-tenant", tenant(spec)).await?;
    assert_eq!(refused(client, "orphan-tenant").await?.0, "tenant/base");
    // A second controller of the kind that is not a tenant: refused.
    declare(client, "rival", guarded(json!({}))).await?;
    let (rule, message) = refused(client, "rival").await?;
    if rule != "controller/parent-taken" || !message.contains("\"guarded\"") {
        bail!("rival: refused by {rule} ({message}), expected controller/parent-taken");
    }
    // The base still serves its parents.
    let api = Api::namespaced_with(
        client.clone(),
        &env.namespace,
        &trials("Guarded", "guardeds"),
    );
    create(
        &api,
        json!({
            "apiVersion": "e2e.wasm-operator.io/v1", "kind": "Guarded",
            "metadata": {"name": "kept"}, "spec": {"value": "v1"}
        }),
    )
    .await?;
    wait_for("the Guarded converged", Duration::from_secs(60), || async {
        Ok(status_field(&api, "kept", "/status/value").await? == json!("v1"))
    })
    .await
}

/// `WriteBudgetExceeded` Warnings on `Churn` parents of `namespace`.
async fn budget_warnings(client: &Client, namespace: &str, name: &str) -> Result<Vec<String>> {
    let events = e2e_tests::events_on(client, namespace, "Churn", name).await?;
    Ok(events
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("WriteBudgetExceeded"))
        .filter_map(|e| e.message)
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_noisy_namespace_is_held_to_its_share_while_another_keeps_converging() -> Result<()> {
    let env = setup("fair").await?;
    let client = &env.client;
    let noisy = format!("{}-noisy", env.namespace);
    namespace(client, &noisy, json!({})).await?;
    // 40 writes/s, bursts of 160: a reserve of 40 no namespace may spend
    // but from its share (10/s, 10 at once).
    declare(
        client,
        "fair",
        json!({
            "parent": {"apiVersion": "e2e.wasm-operator.io/v1", "kind": "Churn"},
            "children": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "source": {"file": {"path": plugin("misbehaving-controller-plugin", &[]).display().to_string()}},
            "writeBudget": {"perSecond": 40, "burst": 160},
        }),
    )
    .await?;
    wait_state(client, "fair", "Serving").await?;
    let kind = trials("Churn", "churns");
    let churn = |name: &str, misbehave: &str| {
        json!({
            "apiVersion": "e2e.wasm-operator.io/v1", "kind": "Churn",
            "metadata": {"name": name}, "spec": {"misbehave": misbehave, "value": "v1"}
        })
    };
    let loud = Api::namespaced_with(client.clone(), &noisy, &kind);
    for i in 0..8 {
        create(&loud, churn(&format!("loud-{i}"), "churn")).await?;
    }
    // The noisy namespace spends the burst and then its share.
    wait_for(
        "the noisy namespace held by its share",
        Duration::from_secs(60),
        || async {
            let warnings = budget_warnings(client, &noisy, "loud-0").await?;
            Ok(warnings.iter().any(|m| {
                m.contains("[writes/namespace-budget]") && m.contains(&format!("namespace {noisy}"))
            }))
        },
    )
    .await?;
    let quiet = Api::namespaced_with(client.clone(), &env.namespace, &kind);
    let started = Instant::now();
    let names = ["quiet-0", "quiet-1", "quiet-2"];
    for name in names {
        create(&quiet, churn(name, "")).await?;
    }
    for name in names {
        wait_for(
            &format!("{name} converged"),
            Duration::from_secs(30),
            || async { Ok(status_field(&quiet, name, "/status/value").await? == json!("v1")) },
        )
        .await?;
    }
    let converged = started.elapsed();
    for name in names {
        let warnings = budget_warnings(client, &env.namespace, name).await?;
        if !warnings.is_empty() {
            bail!("{name} was held by the budget the noisy namespace spent: {warnings:?}");
        }
    }
    // The noisy namespace is still churning (it was held, not stopped).
    let before = status_field(&loud, "loud-0", "/status/tick").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    if status_field(&loud, "loud-0", "/status/tick").await? == before {
        bail!("the noisy namespace stopped writing");
    }
    eprintln!("the quiet namespace converged in {converged:?} beside the noisy one");
    Ok(())
}
