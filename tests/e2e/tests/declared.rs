//! Declared controllers end to end (`run --plugin-controllers`): the
//! Memcached example converges (its `status.nodes` read through observed
//! Pods), scales, takes a new plugin without a restart, repairs a deleted
//! child, stops and starts with its `PluginController` and adopts its
//! orphaned child; a plugin breaking a rule is refused with a
//! Warning naming it while its neighbours converge.
//!
//! A control plane of this binary's own: it runs the Deployment and
//! ReplicaSet controllers (pods then run on kwok's nodes), which the shared
//! one does not. One host (the declared controllers' manager) per binary.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use e2e_tests::declared::{
    apply_crd, crd_file, declare, memcached_controller, memcacheds, resource, start_manager,
    status_field, wait_ready, wait_state, with_workload_controllers,
};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::{CustomResourceExt, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;
use wasm_operator::crd::controller::PluginController;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

/// A namespace on this binary's control plane, the CRDs installed and the
/// manager running.
async fn setup(prefix: &str) -> Result<TestEnv> {
    let plane = own_control_plane(&PLANE, with_workload_controllers).await?;
    let env = TestEnv::new_on(plane, prefix).await?;
    static READY: OnceCell<()> = OnceCell::const_new();
    READY
        .get_or_try_init(|| async {
            apply_crd(&env.client, PluginController::crd()).await?;
            apply_crd(&env.client, crd_file("examples/memcached/crd.yaml")?).await?;
            apply_crd(&env.client, crd_file("examples/static-site/crd.yaml")?).await?;
            apply_crd(&env.client, trial_crd()).await?;
            start_manager(plane)
        })
        .await?;
    Ok(env)
}

/// `Trial` (`e2e.wasm-operator.io/v1`): the misbehaving plugin's parent.
fn trial_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "trials.e2e.wasm-operator.io"},
        "spec": {
            "group": "e2e.wasm-operator.io",
            "scope": "Namespaced",
            "names": {"plural": "trials", "singular": "trial", "kind": "Trial"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .expect("the Trial CRD")
}

fn static_sites() -> ApiResource {
    resource("web.example.com", "v1alpha1", "StaticSite", "staticsites")
}

fn trials() -> ApiResource {
    resource("e2e.wasm-operator.io", "v1", "Trial", "trials")
}

async fn deployment_with(env: &TestEnv, name: &str, replicas: i32) -> Result<Deployment> {
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

#[tokio::test(flavor = "multi_thread")]
async fn memcached_converges_scales_repairs_adopts_and_follows_its_resource() -> Result<()> {
    let env = setup("memcached").await?;
    // A copy the test replaces to hot-swap the plugin.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memcached.wasm");
    std::fs::copy(plugin("memcached-plugin", &[]), &path)?;
    declare(&env.client, "memcached", memcached_controller(&path)).await?;
    let declared = wait_state(&env.client, "memcached", "Serving").await?;
    let status = declared.status.unwrap_or_default();
    assert!(status.plugin.starts_with("memcached@"), "{status:?}");
    assert_eq!(
        status.resources,
        [
            "memcacheds.cache.example.com/v1alpha1",
            "deployments.apps/v1",
            "pods/v1",
            "replicasets.apps/v1"
        ]
    );

    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &memcacheds());
    let cache: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "cache"}, "spec": {"size": 2}
    }))?;
    let created = api.create(&PostParams::default(), &cache).await?;
    let deployment = deployment_with(&env, "cache", 2).await?;
    let owner = deployment
        .owner_references()
        .first()
        .cloned()
        .context("no owner")?;
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        (
            "Memcached",
            created.uid().unwrap_or_default().as_str(),
            Some(true)
        )
    );
    assert_eq!(
        deployment
            .labels()
            .get("wasm-operator.io/controller")
            .map(String::as_str),
        Some("memcached")
    );
    wait_ready(&api, "cache", 2).await?;
    // status.nodes: the Deployment's pods, read through their ReplicaSet.
    wait_for(
        "status.nodes lists 2 pods",
        Duration::from_secs(60),
        || async {
            let nodes = status_field(&api, "cache", "/status/nodes").await?;
            Ok(nodes.as_array().is_some_and(|n| {
                n.len() == 2
                    && n.iter()
                        .all(|p| p.as_str().is_some_and(|p| p.starts_with("cache-")))
            }))
        },
    )
    .await?;

    // Scale.
    api.patch(
        "cache",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 3}})),
    )
    .await?;
    deployment_with(&env, "cache", 3).await?;
    wait_ready(&api, "cache", 3).await?;

    // Hot swap: new bytes at the source serve without a restart, and every
    // Memcached is reconciled again by them.
    let staged = dir.path().join("memcached.wasm.new");
    std::fs::copy(plugin("memcached-plugin", &["v2"]), &staged)?;
    std::fs::rename(&staged, &path)?;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for(
        "the v2 plugin's annotation on the Deployment",
        Duration::from_secs(60),
        || async {
            Ok(deployments
                .get("cache")
                .await?
                .annotations()
                .get("cache.example.com/plugin-build")
                .is_some_and(|v| v == "v2"))
        },
    )
    .await?;
    let swapped = wait_state(&env.client, "memcached", "Serving").await?;
    assert!(swapped.status.unwrap_or_default().plugin.contains("+v2"));

    // Repair: a deleted child comes back.
    let old_uid = deployments.get("cache").await?.uid();
    deployments
        .delete("cache", &DeleteParams::foreground())
        .await?;
    wait_for(
        "the Deployment recreated",
        Duration::from_secs(60),
        || async {
            Ok(deployments
                .get_opt("cache")
                .await?
                .is_some_and(|d| d.uid() != old_uid && d.metadata.deletion_timestamp.is_none()))
        },
    )
    .await?;

    // The resource goes: the controller stops (the Deployment no longer follows).
    let controllers: Api<PluginController> = Api::all(env.client.clone());
    controllers
        .delete("memcached", &DeleteParams::default())
        .await?;
    wait_for(
        "the PluginController gone",
        Duration::from_secs(30),
        || async { Ok(controllers.get_opt("memcached").await?.is_none()) },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    api.patch(
        "cache",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 1}})),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let replicas = deployments
        .get("cache")
        .await?
        .spec
        .and_then(|s| s.replicas);
    assert_eq!(replicas, Some(3), "a stopped controller still reconciled");

    // Orphaned (the owner reference removed, the label kept), then
    // declared again: the new controller adopts it and scales it.
    deployments
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
        )
        .await?;
    declare(&env.client, "memcached", memcached_controller(&path)).await?;
    let adopted = deployment_with(&env, "cache", 1).await?;
    assert_eq!(adopted.uid(), deployments.get("cache").await?.uid());
    assert!(
        adopted
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && o.kind == "Memcached")
    );
    wait_ready(&api, "cache", 1).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_static_site_owns_three_kinds_and_rolls_its_pods_on_new_content() -> Result<()> {
    let env = setup("static-site").await?;
    let path = plugin("static-site-plugin", &[]);
    let kind = |api_version: &str, kind: &str| json!({"apiVersion": api_version, "kind": kind, "maxCount": 2});
    declare(
        &env.client,
        "static-site",
        json!({
            "parent": {"apiVersion": "web.example.com/v1alpha1", "kind": "StaticSite"},
            "children": [kind("v1", "ConfigMap"), kind("apps/v1", "Deployment"), kind("v1", "Service")],
            "source": {"file": {"path": path.display().to_string()}},
        }),
    )
    .await?;
    wait_state(&env.client, "static-site", "Serving").await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &static_sites());
    let site: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "web.example.com/v1alpha1", "kind": "StaticSite",
        "metadata": {"name": "hello"},
        "spec": {"replicas": 2, "content": {"index.html": "<h1>one</h1>"}}
    }))?;
    api.create(&PostParams::default(), &site).await?;
    wait_ready(&api, "hello", 2).await?;
    let url = status_field(&api, "hello", "/status/url").await?;
    assert_eq!(url, json!(format!("http://hello.{}.svc:80", env.namespace)));
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let content = configmaps.get("hello-content").await?;
    assert_eq!(
        content
            .data
            .unwrap_or_default()
            .get("index.html")
            .map(String::as_str),
        Some("<h1>one</h1>")
    );
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(env.client.clone(), &env.namespace);
    assert!(
        services
            .get("hello")
            .await?
            .owner_references()
            .iter()
            .any(|o| o.kind == "StaticSite")
    );

    // New content: the ConfigMap follows and the pod template's hash
    // changes, so the Deployment rolls its pods.
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    let hash = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("web.example.com/content-hash").cloned())
    };
    let before = hash(&deployments.get("hello").await?);
    api.patch(
        "hello",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"content": {"index.html": "<h1>two</h1>"}}})),
    )
    .await?;
    wait_for(
        "the new content served",
        Duration::from_secs(60),
        || async {
            let content = configmaps
                .get("hello-content")
                .await?
                .data
                .unwrap_or_default();
            let rolled = hash(&deployments.get("hello").await?) != before;
            Ok(rolled && content.get("index.html").map(String::as_str) == Some("<h1>two</h1>"))
        },
    )
    .await?;

    // Repair: a deleted Service comes back.
    services.delete("hello", &DeleteParams::default()).await?;
    wait_for("the Service recreated", Duration::from_secs(60), || async {
        Ok(services
            .get_opt("hello")
            .await?
            .is_some_and(|s| s.metadata.deletion_timestamp.is_none()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_breaking_a_rule_is_refused_by_name_while_its_neighbours_converge() -> Result<()> {
    let env = setup("containment").await?;
    let path = plugin("misbehaving-controller-plugin", &[]);
    declare(
        &env.client,
        "trials",
        json!({
            "parent": {"apiVersion": "e2e.wasm-operator.io/v1", "kind": "Trial"},
            "children": [
                {"apiVersion": "v1", "kind": "ConfigMap", "maxBytes": 4096},
                {"apiVersion": "apps/v1", "kind": "Deployment"}
            ],
            "source": {"file": {"path": path.display().to_string()}},
        }),
    )
    .await?;
    wait_state(&env.client, "trials", "Serving").await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "someone-elses"}, "data": {"keep": "me"}
            }))?,
        )
        .await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &trials());
    let cases = [
        ("good", "", "child"),
        ("secret", "secret", "child/kind"),
        ("cluster-role", "cluster-role", "child/kind"),
        ("other-namespace", "other-namespace", "child/body"),
        ("privileged", "privileged", "baseline/privileged"),
        ("oversized", "oversized", "child/size"),
        ("foreign", "foreign", "child/not-owned"),
    ];
    for (name, misbehave, _) in cases {
        let trial: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "e2e.wasm-operator.io/v1", "kind": "Trial",
            "metadata": {"name": name},
            "spec": {"misbehave": misbehave, "value": if name == "foreign" { "someone-elses" } else { "v1" }}
        }))?;
        api.create(&PostParams::default(), &trial).await?;
    }
    // The neighbour converges.
    wait_for(
        "the good Trial's status",
        Duration::from_secs(60),
        || async { Ok(status_field(&api, "good", "/status/value").await? == json!("v1")) },
    )
    .await?;
    // Each offender gets a Warning naming its rule, and nothing of it is written.
    for (name, _, rule) in cases.iter().skip(1) {
        wait_for(
            &format!("a Warning naming {rule} on {name}"),
            Duration::from_secs(60),
            || async {
                let events =
                    e2e_tests::events_on(&env.client, &env.namespace, "Trial", name).await?;
                Ok(events.iter().any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains(&format!("[{rule}]")))
                }))
            },
        )
        .await?;
    }
    assert!(configmaps.get_opt("other-namespace").await?.is_none());
    assert!(configmaps.get_opt("oversized").await?.is_none());
    let kept = configmaps.get("someone-elses").await?;
    assert_eq!(
        kept.data
            .unwrap_or_default()
            .get("keep")
            .map(String::as_str),
        Some("me")
    );
    assert!(kept.metadata.owner_references.is_none());
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    assert!(deployments.get_opt("privileged").await?.is_none());

    // Declarations of a cluster-scoped child kind, or of one that
    // carries authority, are refused whole.
    for (name, child, rule) in [
        (
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace"}),
            "controller/cluster-scoped",
        ),
        (
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret"}),
            "controller/sensitive-kind",
        ),
    ] {
        declare(
            &env.client,
            name,
            json!({
                "parent": {"apiVersion": "e2e.wasm-operator.io/v1", "kind": "Trial"},
                "children": [child],
                "source": {"file": {"path": path.display().to_string()}},
            }),
        )
        .await?;
        let refused = wait_state(&env.client, name, "Refused").await?;
        let last = refused
            .status
            .and_then(|s| s.last_refusal)
            .context("no lastRefusal")?;
        if last.rule != rule {
            bail!(
                "{name}: refused by {} ({}), expected {rule}",
                last.rule,
                last.message
            );
        }
        Api::<PluginController>::all(env.client.clone())
            .delete(name, &DeleteParams::default())
            .await?;
    }
    Ok(())
}
