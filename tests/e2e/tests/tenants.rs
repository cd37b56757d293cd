//! Tenant plugins (`--tenant-plugins`) on the real control plane: two
//! `JinghzhuPlugin`s selecting two namespaces that opt in serve their own
//! plugins (two replicas sharing the objects by shard), a third namespace
//! gets the default plugin, and one tenant's broken plugin touches no other
//! tenant's objects; a tenant serves no namespace that does not opt in
//! (rule `tenant/namespace-not-allowed`); a tenant's keys name only the
//! Secrets the admin allows (rule `verification/secret-not-allowed`).
//!
//! The hosts watch every namespace and follow every JinghzhuPlugin, and
//! the tests of a binary share its control plane: the tests here run one
//! at a time ([`SERIAL`]) and delete their resources.

// Shared with rollouts.rs, which uses all of it.
#[allow(dead_code)]
mod tenant_host;

use std::time::Duration;

use e2e_tests::{TestEnv, plugin, wait_for};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use tenant_host::{
    HostOptions, TenantHost, create_configmap, create_configmap_only, opt_in, tenant,
};
use wasm_operator::crd::plugin::{JinghzhuPlugin, JinghzhuPluginStatus};
use wasm_operator::runtime::digest_of;
use wasm_operator::telemetry::metrics::PluginObjectsLabels;
use wasm_operator_testkit::{jinghzhu, plugin_resource};

const CONVERGE: Duration = Duration::from_secs(90);
const V2_PREFIX: &str = "[v2] ";
const MISBEHAVE: &str = "test.jinghzhu.io/misbehave";

/// One test at a time: each one's hosts serve every namespace.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The status and reason of the condition `type_` of `status`.
fn condition<'a>(status: &'a JinghzhuPluginStatus, type_: &str) -> Option<(&'a str, &'a str)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

/// The status of the resource `name`.
async fn status_of(
    resources: &Api<JinghzhuPlugin>,
    name: &str,
) -> anyhow::Result<JinghzhuPluginStatus> {
    Ok(resources.get_status(name).await?.status.unwrap_or_default())
}

/// The status message of `name` in `env`'s namespace.
async fn message(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    let jz = env.jinghzhus().get(name).await?;
    Ok(jz.status.map(|s| s.message).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_plugins_serve_their_own_namespaces_and_the_default_the_rest() -> anyhow::Result<()>
{
    let _serial = SERIAL.lock().await;
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
        let jz = jinghzhu("web").namespace(&env.namespace).build();
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

/// Hazard: a tenant resource naming a namespace that never opted in, with
/// a source that is not even a plugin, took the namespace's objects from
/// the default plugin (their scale waited until the resource went). Now
/// the namespace keeps its default plugin and the resource is told why
/// (rule tenant/namespace-not-allowed); a namespace the admin labels for a
/// tenant is served by it, and removing the label gives its objects back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_serves_only_the_namespaces_that_opt_in_to_it() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let (victim, team, leases) = (
        TestEnv::new("victim").await?,
        TestEnv::new("opted").await?,
        TestEnv::new("tenant-leases").await?,
    );
    e2e_tests::install_plugin_crd(&victim.client).await?;
    let v1 = plugin("replicaset-plugin", &[]);
    let v2 = std::fs::read(plugin("replicaset-plugin", &["v2"]))?;
    let resources: Api<JinghzhuPlugin> = Api::all(victim.client.clone());
    let host = TenantHost::start(&leases, &v1, "replica-a").await?;
    victim.create("web", 1, &[]).await?;
    victim.wait_converged("web", 1, CONVERGE).await?;

    // The claim: the claimer's own ConfigMap holds no plugin.
    create_configmap_only(&team, b"not a plugin".to_vec()).await?;
    let claim = format!("{}-claim", team.namespace);
    let mut claiming = tenant(&team, &claim);
    if let Some(selector) = claiming.spec.selector.as_mut() {
        selector.namespaces = vec![victim.namespace.clone()];
    }
    resources.create(&PostParams::default(), &claiming).await?;
    wait_for("the claim followed", CONVERGE, || async {
        Ok(host.router.tenant_names().contains(&claim))
    })
    .await?;
    let started = std::time::Instant::now();
    victim.scale("web", 3).await?;
    victim.wait_converged("web", 3, CONVERGE).await?;
    println!(
        "victim scaled 1 -> 3 under the default plugin in {} ms while a tenant claims its namespace",
        started.elapsed().as_millis()
    );
    wait_for(
        "a Warning naming tenant/namespace-not-allowed and the victim",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&victim.client, &claim)
                .await?
                .iter()
                .any(|m| {
                    m.contains("tenant/namespace-not-allowed") && m.contains(&victim.namespace)
                }))
        },
    )
    .await?;
    let status = status_of(&resources, &claim).await?;
    assert_eq!(
        condition(&status, "Namespaces"),
        Some(("False", "NamespaceNotAllowed")),
        "{:?}",
        status.conditions
    );

    // A namespace that opts in is served by its tenant (v2), and given
    // back to the default (v1) when the label goes; no restart.
    create_configmap_only(&victim, v2).await?;
    let owner = victim.namespace.clone();
    resources
        .create(&PostParams::default(), &tenant(&victim, &owner))
        .await?;
    wait_for("the owner's tenant followed", CONVERGE, || async {
        Ok(host.router.tenant_names().contains(&owner))
    })
    .await?;
    victim.scale("web", 2).await?;
    victim.wait_converged("web", 2, CONVERGE).await?;
    assert!(
        !message(&victim, "web").await?.starts_with(V2_PREFIX),
        "served by its tenant before the namespace opted in"
    );
    opt_in(&victim, Some(&owner)).await?;
    wait_for("the object served by its tenant (v2)", CONVERGE, || async {
        Ok(message(&victim, "web").await?.starts_with(V2_PREFIX))
    })
    .await?;
    wait_for(
        "the owner's Namespaces condition True",
        CONVERGE,
        || async {
            let status = status_of(&resources, &owner).await?;
            Ok(condition(&status, "Namespaces") == Some(("True", "OptedIn")))
        },
    )
    .await?;
    opt_in(&victim, None).await?;
    wait_for(
        "the object given back to the default (v1)",
        CONVERGE,
        || async { Ok(!message(&victim, "web").await?.starts_with(V2_PREFIX)) },
    )
    .await?;
    victim.scale("web", 1).await?;
    victim.wait_converged("web", 1, CONVERGE).await?;
    host.stop().await;
    for name in [&claim, &owner] {
        resources.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// Hazard: a tenant's key `secretRef` could name any Secret the host may
/// read and learn from the refusal whether it exists and parses. Now a
/// tenant names only the Secrets the admin allows (--tenant-key-secret):
/// any other is refused before it is read (rule
/// verification/secret-not-allowed), in the same words whether it exists
/// or not; an allowed one verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_keys_name_only_the_secrets_the_admin_allows() -> anyhow::Result<()> {
    use local_control_plane::registry::{LocalRegistry, RegistryOptions};
    use wasm_operator::delivery::resource::keys::AllowedKeySecrets;
    use wasm_operator::registry::{OciOptions, OciPuller, OciRef};

    const REPO: &str = "plugins/replicaset";
    let _serial = SERIAL.lock().await;
    let env = TestEnv::new("tenant-keys").await?;
    e2e_tests::install_plugin_crd(&env.client).await?;
    let registry = LocalRegistry::start(RegistryOptions::default())?;
    let dir = tempfile::tempdir()?;
    let (key, public) = registry.cosign_key_pair(dir.path())?;
    let public = std::fs::read_to_string(&public)?;
    let v1 = plugin("replicaset-plugin", &[]);
    let store = tempfile::tempdir()?;
    let options = OciOptions {
        ca_files: vec![registry.ca_cert.clone()],
        docker_config: Some(std::fs::read(registry.docker_config_file())?),
        store_dir: Some(store.path().to_path_buf()),
        ..OciOptions::default()
    };
    registry.oras_push(&format!("{REPO}:live"), &v1, true)?;
    let reference = format!("{}/{REPO}:live", registry.addr);
    let manifest = OciPuller::new(options.clone())?
        .resolve(&OciRef::parse(&format!("oci://{reference}"))?)
        .await?;
    registry.cosign_sign(&key, REPO, &manifest)?;
    create_key_secret(&env, "allowed-key", &public).await?;
    let host = TenantHost::start_with(
        &env,
        &v1,
        "replica-a",
        HostOptions {
            oci: Some((options, Duration::from_secs(1))),
            key_secrets: AllowedKeySecrets::parse(&[format!("{}/allowed-key", env.namespace)])
                .map_err(anyhow::Error::msg)?,
        },
    )
    .await?;
    let resources: Api<JinghzhuPlugin> = Api::all(env.client.clone());

    // Not allowed and missing; then not allowed and there, with a valid key.
    let probe = format!("{}-probe", env.namespace);
    resources
        .create(
            &PostParams::default(),
            &signed_by(&env, &probe, &reference, "probe-key"),
        )
        .await?;
    let missing = last_refusal(&resources, &probe).await?;
    println!("a tenant naming a missing Secret: {missing:?}");
    resources.delete(&probe, &DeleteParams::default()).await?;
    wait_for("the probe gone", CONVERGE, || async {
        Ok(resources.get_opt(&probe).await?.is_none())
    })
    .await?;
    create_key_secret(&env, "probe-key", &public).await?;
    resources
        .create(
            &PostParams::default(),
            &signed_by(&env, &probe, &reference, "probe-key"),
        )
        .await?;
    let existing = last_refusal(&resources, &probe).await?;
    println!("a tenant naming an existing Secret: {existing:?}");
    assert_eq!(missing.0, "verification/secret-not-allowed");
    assert!(missing.1.contains("--tenant-key-secret"), "{}", missing.1);
    assert_eq!(
        missing, existing,
        "the refusal tells whether the Secret exists"
    );
    wait_for(
        "a Warning naming verification/secret-not-allowed",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&env.client, &probe)
                .await?
                .iter()
                .any(|m| m.contains("rule verification/secret-not-allowed")))
        },
    )
    .await?;

    // An allowed Secret verifies the signed plugin.
    let allowed = format!("{}-allowed", env.namespace);
    resources
        .create(
            &PostParams::default(),
            &signed_by(&env, &allowed, &reference, "allowed-key"),
        )
        .await?;
    let v1_digest = digest_of(&std::fs::read(&v1)?);
    wait_for(
        "the allowed tenant verified and serving",
        CONVERGE,
        || async {
            let status = status_of(&resources, &allowed).await?;
            Ok(condition(&status, "Verified") == Some(("True", "Signed"))
                && status.replicas.iter().any(|r| r.digest == v1_digest))
        },
    )
    .await?;
    host.stop().await;
    for name in [&probe, &allowed] {
        resources.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// A Secret `name` in `env`'s namespace holding the cosign public key `pem`.
async fn create_key_secret(env: &TestEnv, name: &str, pem: &str) -> anyhow::Result<()> {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.into());
    secret.string_data = Some(std::collections::BTreeMap::from([(
        "cosign.pub".to_string(),
        pem.to_string(),
    )]));
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// A tenant `name` of `env`'s namespace serving the OCI artifact
/// `reference`, signed by the key in the Secret `secret` of that namespace.
fn signed_by(env: &TestEnv, name: &str, reference: &str, secret: &str) -> JinghzhuPlugin {
    plugin_resource(name)
        .oci(reference)
        .verified_by(&env.namespace, secret)
        .serving_namespaces(&[&env.namespace])
        .build()
}

/// The rule and message of the resource `name`'s last refusal, once it has one.
async fn last_refusal(
    resources: &Api<JinghzhuPlugin>,
    name: &str,
) -> anyhow::Result<(String, String)> {
    let refusal = std::sync::Mutex::new(None);
    wait_for("a refusal", CONVERGE, || async {
        let status = status_of(resources, name).await?;
        let found = status.last_refusal.map(|r| (r.rule, r.message));
        let seen = found.is_some();
        *refusal.lock().unwrap_or_else(|e| e.into_inner()) = found;
        Ok(seen)
    })
    .await?;
    let found = refusal.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok(found.unwrap_or_default())
}
