//! Tenant plugins (`--tenant-plugins`, issue 41) on the real control
//! plane, two replicas sharing the objects by shard: two `JinghzhuPlugin`s
//! selecting two namespaces serve their own plugins, a third namespace gets
//! the default plugin, and one tenant's broken plugin touches no other
//! tenant's objects.
//!
//! The host watches every namespace here, so this binary holds this one
//! test (each test binary has a control plane of its own).

// Shared with rollouts.rs, which uses all of it.
#[allow(dead_code)]
mod tenant_host;

use std::time::Duration;

use e2e_tests::{TestEnv, plugin, wait_for};
use kube::api::{Api, DeleteParams, PostParams};
use tenant_host::{TenantHost, create_configmap, tenant};
use wasm_operator::crd::plugin::JinghzhuPlugin;
use wasm_operator::runtime::digest_of;
use wasm_operator::telemetry::metrics::PluginObjectsLabels;

const CONVERGE: Duration = Duration::from_secs(90);
const V2_PREFIX: &str = "[v2] ";
const MISBEHAVE: &str = "test.jinghzhu.io/misbehave";

/// The status message of `name` in `env`'s namespace.
async fn message(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    let jz = env.jinghzhus().get(name).await?;
    Ok(jz.status.map(|s| s.message).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_plugins_serve_their_own_namespaces_and_the_default_the_rest() -> anyhow::Result<()>
{
    let (team_a, team_b, others) = (
        TestEnv::new("tenant-a").await?,
        TestEnv::new("tenant-b").await?,
        TestEnv::new("tenant-none").await?,
    );
    e2e_tests::install_plugin_crd(&team_a.client).await?;
    let v1 = plugin("replicaset-plugin", &[]);
    let v2 = std::fs::read(plugin("replicaset-plugin", &["v2"]))?;
    let broken = std::fs::read(plugin("misbehaving-plugin", &[]))?;
    create_configmap(&team_a, v2.clone()).await?;
    create_configmap(&team_b, broken.clone()).await?;
    let resources: Api<JinghzhuPlugin> = Api::all(team_a.client.clone());
    let (a_name, b_name) = (team_a.namespace.clone(), team_b.namespace.clone());
    resources
        .create(&PostParams::default(), &tenant(&team_a, &a_name))
        .await?;
    resources
        .create(&PostParams::default(), &tenant(&team_b, &b_name))
        .await?;
    // Two replicas sharing the objects by shard: each routes every object
    // the same way (the rule reads the resources alone).
    let replicas = [
        TenantHost::start(&others, &v1, "replica-a").await?,
        TenantHost::start(&others, &v1, "replica-b").await?,
    ];
    for host in &replicas {
        wait_for("both tenants served", CONVERGE, || async {
            let names = host.router.tenant_names();
            Ok(names.contains(&a_name) && names.contains(&b_name))
        })
        .await?;
    }
    let host = &replicas[0];

    an_unusable_selector_serves_nothing(&team_a, &resources, &replicas).await?;

    // Team A's objects get v2, the others' the default v1; team B's plugin
    // fails on its objects (they ask it to).
    team_a.create("web", 2, &[]).await?;
    others.create("web", 2, &[]).await?;
    team_b.create("web", 2, &[(MISBEHAVE, "error")]).await?;
    team_a.wait_converged("web", 2, CONVERGE).await?;
    others.wait_converged("web", 2, CONVERGE).await?;
    assert!(message(&team_a, "web").await?.starts_with(V2_PREFIX));
    assert!(!message(&others, "web").await?.starts_with(V2_PREFIX));
    team_b
        .wait_event("web", "PluginFailed", "", CONVERGE)
        .await?;
    assert!(
        team_b.owned_pods("web").await?.is_empty(),
        "B's plugin failed"
    );

    // Each tenant's entries count the objects it selects and serves, each
    // replica its own shards' (one object each here, on one replica).
    for name in [&a_name, &b_name] {
        wait_for(
            "the tenant's objects counted in its status",
            CONVERGE,
            || async {
                let status = resources.get_status(name).await?.status.unwrap_or_default();
                let sum = |f: fn(&wasm_operator::crd::plugin::ReplicaStatus) -> Option<i64>| {
                    status.replicas.iter().filter_map(f).sum::<i64>()
                };
                Ok(status.replicas.len() == 2
                    && sum(|r| r.objects_selected) == 1
                    && sum(|r| r.objects_served) == 1)
            },
        )
        .await?;
    }

    // The same counts as metrics, summed over the replicas.
    let served = |resource: &str| -> i64 {
        replicas
            .iter()
            .filter_map(|r| {
                r.metrics
                    .plugin_objects
                    .get(&PluginObjectsLabels {
                        resource: resource.to_string(),
                        count: "served".into(),
                    })
                    .map(|g| g.get())
            })
            .sum()
    };
    wait_for(
        "the objects served counted in the metrics",
        CONVERGE,
        || async { Ok(served(&a_name) == 1 && served(&b_name) == 1 && served("") >= 1) },
    )
    .await?;

    // Team B's failures touch nobody else: A and the default keep serving
    // what they served (no rollback), and keep converging.
    team_a.scale("web", 3).await?;
    others.scale("web", 3).await?;
    team_a.wait_converged("web", 3, CONVERGE).await?;
    others.wait_converged("web", 3, CONVERGE).await?;
    let route = |env: &TestEnv| {
        let mut jz = wasm_operator::crd::Jinghzhu::new("web", Default::default());
        jz.metadata.namespace = Some(env.namespace.clone());
        host.router.route(&jz)
    };
    assert_eq!(
        route(&team_a)
            .slot
            .serving()
            .map(|p| p.digest().to_string()),
        Some(digest_of(&v2))
    );
    assert_eq!(
        route(&others)
            .slot
            .serving()
            .map(|p| p.digest().to_string()),
        Some(digest_of(&std::fs::read(&v1)?))
    );
    assert_eq!(
        route(&team_b)
            .slot
            .serving()
            .map(|p| p.digest().to_string()),
        Some(digest_of(&broken))
    );

    // Team A's resource deleted: its objects go back to the default (v1).
    resources.delete(&a_name, &DeleteParams::default()).await?;
    wait_for(
        "team A's object reconciled by v1 again",
        CONVERGE,
        || async { Ok(!message(&team_a, "web").await?.starts_with(V2_PREFIX)) },
    )
    .await?;
    team_a.wait_converged("web", 3, CONVERGE).await?;
    let [first, second] = replicas;
    first.stop().await;
    second.stop().await;
    resources.delete(&b_name, &DeleteParams::default()).await?;
    Ok(())
}

/// A selector that selects everything is not usable: the resource serves
/// nothing and says so (rule tenant/selector), the others go on.
async fn an_unusable_selector_serves_nothing(
    team_a: &TestEnv,
    resources: &Api<JinghzhuPlugin>,
    replicas: &[TenantHost; 2],
) -> anyhow::Result<()> {
    let everything = format!("{}-everything", team_a.namespace);
    let mut unusable = tenant(team_a, &everything);
    unusable.spec.selector = Some(Default::default());
    resources.create(&PostParams::default(), &unusable).await?;
    wait_for("a Warning naming tenant/selector", CONVERGE, || async {
        Ok(e2e_tests::plugin_refusals(&team_a.client, &everything)
            .await?
            .iter()
            .any(|m| m.contains("tenant/selector")))
    })
    .await?;
    for replica in replicas {
        assert!(!replica.router.tenant_names().contains(&everything));
    }
    let status = resources
        .get_status(&everything)
        .await?
        .status
        .unwrap_or_default();
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Refused" && c.reason == "TenantSelector"),
        "{:?}",
        status.conditions
    );
    resources
        .delete(&everything, &DeleteParams::default())
        .await?;
    Ok(())
}
