//! The `JinghzhuPlugin` resource on the real control plane: a host started
//! with `--plugin-resource` (in-process, wired as `wasm-operator run` wires
//! it) serves the plugin the resource names, reports conditions and the
//! digest each replica serves in its status, follows ConfigMap and spec
//! changes through the hot-swap path, refuses a broken plugin with a
//! `Refused` condition and a Warning Event while the previous plugin keeps
//! serving, and two replicas with leader election both show their entry.

use std::sync::Arc;
use std::time::Duration;

use e2e_tests::{TestEnv, plugin, wait_for};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use wasm_operator::apply::policy::PodPolicy;
use wasm_operator::crd::plugin::{JinghzhuPlugin, PluginMode};
use wasm_operator::registry::OciOptions;
use wasm_operator::runtime::digest_of;

mod resource_host;

use resource_host::*;
use wasm_operator_testkit::plugin_resource;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_resource_serves_and_follows_configmap_and_spec_changes() -> anyhow::Result<()>
{
    let env = TestEnv::new("jzp-serve").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), v2());
    create_configmap(&env, "plugin-v1", v1.clone()).await?;
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &resource(&env, "plugin-v1"))
        .await?;
    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;

    // v1 serves: the conditions say so and the digest is the bytes'.
    let status = wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v1)).await?;
    assert_eq!(condition(&status, "Resolved"), Some(("True", "Resolved")));
    assert_eq!(condition(&status, "Compiled"), Some(("True", "Compiled")));
    assert_eq!(condition(&status, "Serving"), Some(("True", "Serving")));
    assert_eq!(condition(&status, "Refused"), Some(("False", "Accepted")));
    assert_eq!(status.digest.as_deref(), Some(digest_of(&v1).as_str()));
    assert_eq!(status.state.as_deref(), Some("Serving"));
    assert_eq!(status.observed_generation, Some(1));
    assert!(status.replicas[0].since.is_some());
    env.create("web", 2, &[]).await?;
    env.wait_converged("web", 2, CONVERGE).await?;

    // The ConfigMap's bytes move to v2: the replica follows, objects show it.
    replace_configmap(&env, "plugin-v1", v2.clone()).await?;
    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v2)).await?;
    let short_v2 = &digest_of(&v2)["sha256:".len().."sha256:".len() + 12];
    env.scale("web", 3).await?;
    wait_for("web reconciled by v2", CONVERGE, || async {
        let jz = env.jinghzhus().get("web").await?;
        Ok(jz.status.is_some_and(|s| {
            s.message.starts_with(V2_PREFIX)
                && s.reconciled_by
                    .as_deref()
                    .is_some_and(|by| by.contains(short_v2))
                && s.current == 3
        }))
    })
    .await?;

    // The spec moves to another ConfigMap holding v1, pinned: a new
    // generation through the same path.
    create_configmap(&env, "plugin-other", v1.clone()).await?;
    let patch = serde_json::json!({"spec": {
        "source": {"configMap": {"namespace": env.namespace, "name": "plugin-other", "key": "plugin.wasm"}},
        "digest": digest_of(&v1),
    }});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let status = wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v1)).await?;
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(
        condition(&status, "Verified"),
        Some(("True", "DigestPinned"))
    );
    let short_v1 = &digest_of(&v1)["sha256:".len().."sha256:".len() + 12];
    wait_for("web reconciled by v1 again", CONVERGE, || async {
        let jz = env.jinghzhus().get("web").await?;
        Ok(jz.status.is_some_and(|s| {
            !s.message.starts_with(V2_PREFIX)
                && s.reconciled_by
                    .as_deref()
                    .is_some_and(|by| by.contains(short_v1))
        }))
    })
    .await?;
    env.wait_converged("web", 3, CONVERGE).await?;
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_plugin_is_refused_on_the_resource_and_the_previous_keeps_serving()
-> anyhow::Result<()> {
    let env = TestEnv::new("jzp-refuse").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let v1 = v1();
    create_configmap(&env, "plugin", v1.clone()).await?;
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &resource(&env, "plugin"))
        .await?;
    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v1)).await?;

    // Not a component: refused by the load rule, v1 keeps serving.
    let broken = b"\0asm\x0d\0\x01\0 truncated".to_vec();
    replace_configmap(&env, "plugin", broken.clone()).await?;
    wait_for("the Refused condition", CONVERGE, || async {
        let status = status_of(&env, &name).await?;
        Ok(condition(&status, "Refused") == Some(("True", "Load")))
    })
    .await?;
    let status = status_of(&env, &name).await?;
    assert_eq!(condition(&status, "Compiled"), Some(("False", "Load")));
    assert_eq!(condition(&status, "Serving"), Some(("True", "Serving")));
    assert_eq!(status.state.as_deref(), Some("Refused"));
    let refusal = status.last_refusal.clone().expect("lastRefusal");
    assert_eq!(refusal.rule, "plugin/load");
    assert_eq!(refusal.digest, digest_of(&broken));
    assert_eq!(refusal.replica, "replica-a");
    let entry = &status.replicas[0];
    assert_eq!(entry.digest, digest_of(&v1), "v1 keeps serving");
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(digest_of(&v1))
    );
    wait_for(
        "a PluginRefused Warning naming the rule",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&env.client, &name)
                .await?
                .iter()
                .any(|m| m.contains("rule plugin/load") && m.contains(&digest_of(&broken))))
        },
    )
    .await?;
    env.create("web", 2, &[]).await?;
    env.wait_converged("web", 2, CONVERGE).await?;

    // A pin, then bytes the pin does not match: refused by the pin rule
    // (the pin first, so v2 is never offered unpinned).
    let pin = format!("sha256:{}", "0".repeat(64));
    let patch = serde_json::json!({"spec": {"digest": pin}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let v2 = v2();
    replace_configmap(&env, "plugin", v2.clone()).await?;
    wait_for("the pin refusal of v2", CONVERGE, || async {
        let status = status_of(&env, &name).await?;
        Ok(condition(&status, "Refused") == Some(("True", "DigestPin"))
            && condition(&status, "Verified") == Some(("False", "DigestPin"))
            && status
                .last_refusal
                .is_some_and(|r| r.digest == digest_of(&v2) && r.rule == "plugin/digest-pin"))
    })
    .await?;
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(digest_of(&v1))
    );

    // A mode the flag does not match: refused by the mode rule.
    let patch = serde_json::json!({"spec": {"mode": "shadow", "digest": null}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for("the mode refusal", CONVERGE, || async {
        Ok(e2e_tests::plugin_refusals(&env.client, &name)
            .await?
            .iter()
            .any(|m| m.contains("rule resource/mode")))
    })
    .await?;
    // Exactly one source: the API server refuses two.
    let mut two = resource(&env, "plugin");
    two.metadata.name = Some(format!("{name}-two"));
    two.spec.source.file = Some(wasm_operator::crd::plugin::FileSourceSpec {
        path: "/tmp/p.wasm".into(),
    });
    let err = api
        .create(&PostParams::default(), &two)
        .await
        .expect_err("two sources");
    assert!(err.to_string().contains("exactly one"), "{err}");
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_with_leader_election_each_show_the_digest_they_serve() -> anyhow::Result<()> {
    let env = TestEnv::new("jzp-replicas").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), v2());
    create_configmap(&env, "plugin", v1.clone()).await?;
    Api::<JinghzhuPlugin>::all(env.client.clone())
        .create(&PostParams::default(), &resource(&env, "plugin"))
        .await?;
    let a = ResourceHost::start(&env, &name, "replica-a", true).await?;
    let b = ResourceHost::start(&env, &name, "replica-b", true).await?;
    let status =
        wait_replicas_on(&env, &name, &["replica-a", "replica-b"], &digest_of(&v1)).await?;
    assert_eq!(status.replicas.len(), 2, "{:?}", status.replicas);
    env.create("web", 2, &[]).await?;
    env.wait_converged("web", 2, CONVERGE).await?;

    // A new plugin reaches both replicas, leader and standby, each entry on its own.
    replace_configmap(&env, "plugin", v2.clone()).await?;
    let status =
        wait_replicas_on(&env, &name, &["replica-a", "replica-b"], &digest_of(&v2)).await?;
    assert_eq!(status.replicas.len(), 2, "{:?}", status.replicas);
    env.scale("web", 3).await?;
    wait_for("web reconciled by v2", CONVERGE, || async {
        let jz = env.jinghzhus().get("web").await?;
        Ok(jz
            .status
            .is_some_and(|s| s.message.starts_with(V2_PREFIX) && s.current == 3))
    })
    .await?;
    // Each entry is its own replica's: field managers per replica.
    let managed = Api::<JinghzhuPlugin>::all(env.client.clone())
        .get(&name)
        .await?
        .metadata
        .managed_fields
        .unwrap_or_default();
    for replica in ["replica-a", "replica-b"] {
        assert!(
            managed
                .iter()
                .any(|m| m.manager.as_deref() == Some(&format!("wasm-operator/{replica}"))),
            "no field manager for {replica}"
        );
    }
    a.stop().await;
    b.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_resource_is_verified_with_keys_from_a_secret_and_an_unsigned_push_refused()
-> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    use local_control_plane::registry::{LocalRegistry, RegistryOptions};

    const REPO: &str = "plugins/replicaset";
    let env = TestEnv::new("jzp-oci").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let registry = LocalRegistry::start(RegistryOptions {
        basic_auth: Some(("pusher".into(), "s3cret".into())),
        ..RegistryOptions::default()
    })?;
    let keys = tempfile::tempdir()?;
    let (key, public) = registry.cosign_key_pair(keys.path())?;
    let (v1, v2) = (
        plugin("replicaset-plugin", &[]),
        plugin("replicaset-plugin", &["v2"]),
    );
    let (v1_digest, v2_digest) = (
        digest_of(&std::fs::read(&v1)?),
        digest_of(&std::fs::read(&v2)?),
    );
    let store = tempfile::tempdir()?;
    let options = OciOptions {
        ca_files: vec![registry.ca_cert.clone()],
        docker_config: Some(std::fs::read(registry.docker_config_file())?),
        store_dir: Some(store.path().to_path_buf()),
        ..OciOptions::default()
    };
    registry.oras_push(&format!("{REPO}:live"), &v1, true)?;
    let reference = format!("{}/{REPO}:live", registry.addr);
    let m1 = wasm_operator::registry::OciPuller::new(options.clone())?
        .resolve(&wasm_operator::registry::OciRef::parse(&format!(
            "oci://{reference}"
        ))?)
        .await?;
    registry.cosign_sign(&key, REPO, &m1)?;

    // The trusted key, as a Secret the resource names.
    let mut secret = Secret::default();
    secret.metadata.name = Some("release-key".into());
    secret.string_data = Some(std::collections::BTreeMap::from([(
        "cosign.pub".to_string(),
        std::fs::read_to_string(&public)?,
    )]));
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &secret)
        .await?;
    let resource = plugin_resource(&name)
        .oci(&reference)
        .verified_by(&env.namespace, "release-key")
        .build();
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &resource).await?;
    let host = ResourceHost::start_with(
        &env,
        &name,
        "replica-a",
        Setup {
            oci: Some((options, Duration::from_secs(1))),
            ..Setup::default()
        },
    )
    .await?;

    // v1, signed by the key in the Secret, serves.
    let status = wait_replicas_on(&env, &name, &["replica-a"], &v1_digest).await?;
    assert_eq!(condition(&status, "Verified"), Some(("True", "Signed")));
    let verified = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Verified")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(verified.contains("release"), "{verified}");
    env.create("web", 2, &[]).await?;
    env.wait_converged("web", 2, CONVERGE).await?;

    // v2 pushed under the same tag, unsigned: refused, v1 keeps serving.
    registry.oras_push(&format!("{REPO}:live"), &v2, true)?;
    wait_for("the unsigned v2 refused", CONVERGE, || async {
        let status = status_of(&env, &name).await?;
        Ok(condition(&status, "Refused") == Some(("True", "Unsigned"))
            && condition(&status, "Verified") == Some(("False", "Unsigned")))
    })
    .await?;
    wait_for(
        "a PluginRefused Warning naming oci/unsigned",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&env.client, &name)
                .await?
                .iter()
                .any(|m| m.contains("rule oci/unsigned")))
        },
    )
    .await?;
    let status = status_of(&env, &name).await?;
    assert_eq!(status.replicas[0].digest, v1_digest, "v1 keeps serving");
    assert_ne!(v1_digest, v2_digest);
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(v1_digest.clone())
    );

    // allOf and anyOf together: v2 signed by the release key only is
    // refused while the policy also wants one of anyOf (the QA key) ...
    let resolver = wasm_operator::registry::OciPuller::new(OciOptions {
        ca_files: vec![registry.ca_cert.clone()],
        docker_config: Some(std::fs::read(registry.docker_config_file())?),
        ..OciOptions::default()
    })?;
    let m2 = resolver
        .resolve(&wasm_operator::registry::OciRef::parse(&format!(
            "oci://{reference}"
        ))?)
        .await?;
    let qa_dir = keys.path().join("qa");
    std::fs::create_dir_all(&qa_dir)?;
    let (qa_key, qa_public) = registry.cosign_key_pair(&qa_dir)?;
    let mut qa_secret = Secret::default();
    qa_secret.metadata.name = Some("qa-key".into());
    qa_secret.string_data = Some(std::collections::BTreeMap::from([(
        "cosign.pub".to_string(),
        std::fs::read_to_string(&qa_public)?,
    )]));
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &qa_secret)
        .await?;
    // The QA key's name in the policy; renaming it makes a new generation.
    let verification = |qa: &str| {
        serde_json::json!({"spec": {"verification": {
            "keys": [
                {"name": "release", "secretRef": {"namespace": env.namespace, "name": "release-key"}},
                {"name": qa, "secretRef": {"namespace": env.namespace, "name": "qa-key"}},
            ],
            "policy": {"allOf": ["release"], "anyOf": [qa], "minimumMatches": 1},
        }}})
    };
    // The stricter policy is in force before the release key signs v2: a
    // poll of the tag between that signature and the policy change would
    // find v2 good enough for the release-key-only policy.
    let generation = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&verification("qa")),
        )
        .await?
        .metadata
        .generation;
    wait_for("the host acts on the stricter policy", CONVERGE, || async {
        Ok(status_of(&env, &name).await?.observed_generation >= generation)
    })
    .await?;
    registry.cosign_sign(&key, REPO, &m2)?;
    // A new generation re-verifies v2, now signed by the release key only.
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&verification("qa-lead")),
    )
    .await?;
    wait_for(
        "v2 refused: the anyOf group is not satisfied",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&env.client, &name)
                .await?
                .iter()
                .any(|m| m.contains("rule oci/signature") && m.contains("not satisfied: qa-lead")))
        },
    )
    .await?;
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(v1_digest)
    );
    // ... and serves once QA signed it too (a new generation re-verifies).
    registry.cosign_sign(&qa_key, REPO, &m2)?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&verification("qa-team")),
    )
    .await?;
    let status = wait_replicas_on(&env, &name, &["replica-a"], &v2_digest).await?;
    let verified = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Verified")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        verified.contains("release") && verified.contains("qa-team"),
        "{verified}"
    );

    // The release key rotated in its Secret, no spec change (issue 40,
    // hazard 5: the key was read once, and the revoked key kept counting).
    // v3 signed by the old release key and QA is refused ...
    let new_dir = keys.path().join("release-2");
    std::fs::create_dir_all(&new_dir)?;
    let (new_key, new_public) = registry.cosign_key_pair(&new_dir)?;
    let rotated =
        serde_json::json!({"stringData": {"cosign.pub": std::fs::read_to_string(&new_public)?}});
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .patch(
            "release-key",
            &PatchParams::default(),
            &Patch::Merge(&rotated),
        )
        .await?;
    // Refreshed within a poll interval (1 s here); a margin for the read.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let v3 = plugin("misbehaving-plugin", &["v2"]);
    let v3_digest = digest_of(&std::fs::read(&v3)?);
    registry.oras_push(&format!("{REPO}:v3"), &v3, false)?;
    let m3 = resolver
        .resolve(&wasm_operator::registry::OciRef::parse(&format!(
            "oci://{}/{REPO}:v3",
            registry.addr
        ))?)
        .await?;
    registry.cosign_sign(&key, REPO, &m3)?;
    registry.cosign_sign(&qa_key, REPO, &m3)?;
    registry.oras_tag(&format!("{REPO}:v3"), "live")?;
    wait_for(
        "v3, signed by the revoked release key, refused",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&env.client, &name)
                .await?
                .iter()
                .any(|m| m.contains("rule oci/signature") && m.contains(&m3)))
        },
    )
    .await?;
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(v2_digest.clone()),
        "v2 keeps serving"
    );
    // ... and serves once signed by the key the Secret holds now.
    registry.cosign_sign(&new_key, REPO, &m3)?;
    wait_replicas_on(&env, &name, &["replica-a"], &v3_digest).await?;
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// `--shadow-plugin-resource`: a second resource in `mode: shadow` runs its
/// plugin beside the active one. Its status shows the replica running it as
/// the shadow; its different proposals are counted, none applied; a
/// resource whose mode does not match the flag that names it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_resource_runs_its_candidate_beside_the_active_plugin() -> anyhow::Result<()> {
    let env = TestEnv::new("jzp-shadow").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let shadow_name = format!("{name}-shadow");
    let (v1, v2) = (v1(), v2());
    create_configmap(&env, "plugin-v1", v1.clone()).await?;
    create_configmap(&env, "plugin-v2", v2.clone()).await?;
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &resource(&env, "plugin-v1"))
        .await?;
    let mut shadow = resource(&env, "plugin-v2");
    shadow.metadata.name = Some(shadow_name.clone());
    shadow.spec.mode = PluginMode::Shadow;
    api.create(&PostParams::default(), &shadow).await?;
    let host = ResourceHost::start_with(
        &env,
        &name,
        "replica-a",
        Setup {
            shadow: Some(&shadow_name),
            ..Setup::default()
        },
    )
    .await?;

    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v1)).await?;
    let status = wait_replicas_on(&env, &shadow_name, &["replica-a"], &digest_of(&v2)).await?;
    let serving = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Serving")
        .map(|c| (c.status.clone(), c.message.clone()));
    assert!(
        serving
            .as_ref()
            .is_some_and(|(s, m)| s == "True" && m.contains("runs as the shadow")),
        "the shadow's Serving condition: {serving:?}"
    );

    for i in 0..4 {
        env.create(&format!("web-{i}"), 2, &[]).await?;
    }
    for i in 0..4 {
        env.wait_converged(&format!("web-{i}"), 2, CONVERGE).await?;
    }
    // v2 prefixes its status message: seen by the shadow, never applied.
    wait_for(
        "the shadow's different proposals counted for every object",
        CONVERGE,
        || async { Ok(host.metrics.shadow_differences.get() >= 4) },
    )
    .await?;
    for i in 0..4 {
        let jz = env.jinghzhus().get(&format!("web-{i}")).await?;
        let message = jz.status.map(|s| s.message).unwrap_or_default();
        assert!(!message.starts_with(V2_PREFIX), "web-{i}: {message}");
        assert_eq!(env.owned_pods(&format!("web-{i}")).await?.len(), 2);
    }

    // The shadow resource asks to be active: refused, the active plugin
    // keeps reconciling.
    let patch = serde_json::json!({"spec": {"mode": "active"}});
    api.patch(&shadow_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for("the mode refusal", CONVERGE, || async {
        Ok(e2e_tests::plugin_refusals(&env.client, &shadow_name)
            .await?
            .iter()
            .any(|m| m.contains("resource/mode")))
    })
    .await?;
    env.scale("web-0", 3).await?;
    env.wait_converged("web-0", 3, CONVERGE).await?;
    host.stop().await;
    delete_resource(&env, &shadow_name).await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// `spec.podPolicy` stricter than the host's `--pod-policy` holds the
/// plugin: with the host at `baseline` and the resource at `restricted`, a
/// pod running as root is refused naming the restricted rule (and nothing
/// is created); once the resource asks for `baseline`, the same object
/// gets its pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stricter_pod_policy_on_the_resource_holds_its_plugin() -> anyhow::Result<()> {
    use wasm_operator::crd::plugin::PodPolicySpec;
    let env = TestEnv::new("jzp-podpolicy").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let misbehaving = std::fs::read(plugin("misbehaving-plugin", &[]))?;
    create_configmap(&env, "plugin", misbehaving).await?;
    let mut restricted = resource(&env, "plugin");
    restricted.spec.pod_policy = Some(PodPolicySpec {
        policy: "restricted".into(),
    });
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &restricted).await?;
    // A shadow resource on the same bytes (so the same digest) asking for
    // no pod policy: it must not loosen the active resource's (issue 40,
    // hazard 7: the policies were kept per digest, and the shadow's erased
    // the active one's).
    let shadow_name = format!("{name}-shadow");
    let mut shadow = resource(&env, "plugin");
    shadow.metadata.name = Some(shadow_name.clone());
    shadow.spec.mode = PluginMode::Shadow;
    api.create(&PostParams::default(), &shadow).await?;
    let host = ResourceHost::start_with(
        &env,
        &name,
        "replica-a",
        Setup {
            pod_policy: PodPolicy::Baseline,
            shadow: Some(&shadow_name),
            ..Setup::default()
        },
    )
    .await?;
    let status = wait_for_effective(&env, &name, "restricted").await?;
    assert!(status.is_empty(), "nothing clamped: {status}");
    let digest = digest_of(&std::fs::read(plugin("misbehaving-plugin", &[]))?);
    wait_replicas_on(&env, &shadow_name, &["replica-a"], &digest).await?;
    // The shadow vetted again after the active resource: its narrowing is
    // the latest.
    let generation = api
        .patch(
            &shadow_name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"limits": {"timeoutMs": 900}}})),
        )
        .await?
        .metadata
        .generation;
    wait_for("the shadow resource vetted again", CONVERGE, || async {
        Ok(status_of(&env, &shadow_name).await?.observed_generation >= generation)
    })
    .await?;

    env.create("good", 1, &[]).await?;
    env.create("root", 1, &[(MISBEHAVE, "escalate:run-as-root")])
        .await?;
    env.wait_converged("good", 1, CONVERGE).await?;
    env.wait_event("root", "RejectedOutput", "run-as", CONVERGE)
        .await?;
    assert!(env.owned_pods("root").await?.is_empty(), "nothing applied");

    // Asking for the host's own baseline: a root pod is admitted.
    let patch = serde_json::json!({"spec": {"podPolicy": {"policy": "baseline"}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    env.wait_converged("root", 1, CONVERGE).await?;
    wait_for_effective(&env, &name, "baseline").await?;
    host.stop().await;
    delete_resource(&env, &name).await;
    delete_resource(&env, &shadow_name).await;
    Ok(())
}

/// Waits for `status.effectiveLimits.podPolicy` to be `policy`; returns
/// `effectiveLimits.clamped`.
async fn wait_for_effective(env: &TestEnv, name: &str, policy: &str) -> anyhow::Result<String> {
    wait_for(
        &format!("the effective pod policy {policy}"),
        CONVERGE,
        || async {
            let status = status_of(env, name).await?;
            Ok(status
                .effective_limits
                .is_some_and(|l| l.pod_policy.as_deref() == Some(policy)))
        },
    )
    .await
    .map_err(|err| anyhow::anyhow!("{err}"))?;
    Ok(status_of(env, name)
        .await?
        .effective_limits
        .map(|l| l.clamped)
        .unwrap_or_default())
}

/// A trusted key of the admin's (`--plugin-verify-key`): any P-256 public
/// key will do, nothing here is signed.
const ADMIN_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEJh4Uk4899GBJjBONrLtoU5Ufvhhn
hJXKUuHYSBNjl2ufrM3Y9Pa1goyqYsekz6aLqGn4GlTchKYO78S/gPTuOg==
-----END PUBLIC KEY-----";

/// Issue 40, hazard 7: with the host's verification keys, a resource whose
/// source carries no signature (a ConfigMap) is refused by
/// `verification/unsigned-source` (a resource editor cannot loosen what the
/// admin requires; it was served as `NotRequired`), and serves once the
/// admin opts in with `--plugin-resource-allow-unsigned`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_keys_refuse_an_unsigned_resource_source_unless_the_admin_allows_it()
-> anyhow::Result<()> {
    use wasm_operator::registry::signature::{
        PublicKeyVerifier, Threshold, VerificationPolicy, Verifier,
    };
    let env = TestEnv::new("plugin-resource-unsigned").await?;
    install_plugin_crd(&env).await?;
    create_configmap(&env, "plugin", v1()).await?;
    let name = env.namespace.clone();
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &resource(&env, "plugin"))
        .await?;
    let admin: Arc<dyn Verifier> = Arc::new(PublicKeyVerifier::from_pem("admin", ADMIN_KEY)?);
    let with_keys = |allow_unsigned| -> anyhow::Result<Setup<'static>> {
        Ok(Setup {
            oci: Some((
                OciOptions {
                    verification: Some(Arc::new(VerificationPolicy::new(
                        vec![admin.clone()],
                        Threshold::All,
                    )?)),
                    ..OciOptions::default()
                },
                Duration::from_secs(1),
            )),
            allow_unsigned,
            ..Setup::default()
        })
    };
    let host = ResourceHost::start_with(&env, &name, "replica-a", with_keys(false)?).await?;
    wait_for("the unsigned-source refusal", CONVERGE, || async {
        let status = status_of(&env, &name).await?;
        Ok(
            condition(&status, "Refused") == Some(("True", "UnsignedSource"))
                && condition(&status, "Verified") == Some(("False", "UnsignedSource"))
                && e2e_tests::plugin_refusals(&env.client, &name)
                    .await?
                    .iter()
                    .any(|m| m.contains("rule verification/unsigned-source")),
        )
    })
    .await?;
    assert!(host.active.serving().is_none(), "nothing unsigned serves");
    host.stop().await;

    // The admin opts in: the same resource serves.
    let host = ResourceHost::start_with(&env, &name, "replica-a", with_keys(true)?).await?;
    env.create("web", 2, &[]).await?;
    env.wait_converged("web", 2, CONVERGE).await?;
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(digest_of(&v1()))
    );
    host.stop().await;
    Ok(())
}

/// Issue 41: canary rollouts. A good v2 goes through every step to 100%
/// (each object moving to v2 once, never back), exact pod counts; then a
/// v3 that fails on the objects of its first cohort is aborted at its
/// first step by the failure-rate criterion, every object back on v2 and
/// v3 called no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_is_promoted_step_by_step_and_a_failing_one_aborted() -> anyhow::Result<()> {
    use std::collections::HashMap;
    use wasm_operator::crd::plugin::RolloutSpec;
    const OBJECTS: usize = 12;
    let env = TestEnv::new("jzp-canary").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), v2());
    let v3 = std::fs::read(plugin("misbehaving-plugin", &[]))?;
    create_configmap(&env, "plugin", v1.clone()).await?;
    let mut resource = resource(&env, "plugin");
    resource.spec.rollout = Some(RolloutSpec {
        steps: vec![25, 50],
        step_seconds: 2,
        min_reconciles: 1,
        max_failure_increase_percent: 10,
        ..RolloutSpec::default()
    });
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &resource).await?;
    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v1)).await?;
    for i in 0..OBJECTS {
        env.create(&format!("web-{i}"), 1, &[]).await?;
    }
    for i in 0..OBJECTS {
        env.wait_converged(&format!("web-{i}"), 1, CONVERGE).await?;
    }

    // v2: watched every 200 ms, no object goes back from v2 to v1.
    replace_configmap(&env, "plugin", v2.clone()).await?;
    let mut on_v2: HashMap<String, bool> = HashMap::new();
    let deadline = std::time::Instant::now() + CONVERGE;
    let mut weights = Vec::new();
    loop {
        let status = status_of(&env, &name).await?;
        if let Some(rollout) = &status.rollout
            && weights.last() != Some(&rollout.weight)
        {
            weights.push(rollout.weight);
        }
        for jz in env.jinghzhus().list(&ListParams::default()).await? {
            let now_v2 = jz
                .status
                .as_ref()
                .is_some_and(|s| s.message.starts_with(V2_PREFIX));
            let before = on_v2.insert(jz.metadata.name.clone().unwrap_or_default(), now_v2);
            assert!(
                before != Some(true) || now_v2,
                "{:?} went back from v2 to v1",
                jz.metadata.name
            );
        }
        let done = status
            .rollout
            .as_ref()
            .is_some_and(|r| r.phase == "Promoted")
            && on_v2.values().filter(|v| **v).count() == OBJECTS;
        if done {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "v2 not promoted within {CONVERGE:?}: {:?}, {} of {OBJECTS} on v2",
            status.rollout,
            on_v2.values().filter(|v| **v).count()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(weights.first(), Some(&25), "the first step: {weights:?}");
    assert!(weights.contains(&50), "every step: {weights:?}");
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(digest_of(&v2))
    );
    for i in 0..OBJECTS {
        env.wait_converged(&format!("web-{i}"), 1, CONVERGE).await?;
    }

    a_canary_failing_its_first_cohort_is_aborted(&env, &host, &name, (&v2, &v3)).await?;
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// v3 fails on the objects of its first cohort (25%): aborted at its first
/// step by the failure rate, v2 keeps serving, v3 is called no more.
async fn a_canary_failing_its_first_cohort_is_aborted(
    env: &TestEnv,
    host: &ResourceHost,
    name: &str,
    (v2, v3): (&[u8], &[u8]),
) -> anyhow::Result<()> {
    use wasm_operator::judging::plan::in_cohort;
    use wasm_operator::telemetry::metrics::PluginLabels;
    const OBJECTS: usize = 12;
    // v3 fails on the objects of its first cohort (25%): they ask the
    // misbehaving plugin to fail; v2 ignores the annotation.
    let mut cohort = Vec::new();
    for jz in env.jinghzhus().list(&ListParams::default()).await? {
        let uid = jz.metadata.uid.clone().unwrap_or_default();
        if in_cohort(&uid, 25) {
            let name = jz.metadata.name.clone().unwrap_or_default();
            let patch = serde_json::json!({"metadata": {"annotations": {MISBEHAVE: "error"}}});
            env.jinghzhus()
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            cohort.push(name);
        }
    }
    anyhow::ensure!(!cohort.is_empty(), "no object in a 25% cohort of {OBJECTS}");
    replace_configmap(env, "plugin", v3.to_vec()).await?;
    wait_for("v3 aborted", CONVERGE, || async {
        let status = status_of(env, name).await?;
        Ok(status.rollout.is_some_and(|r| r.phase == "Aborted"))
    })
    .await?;
    wait_for(
        "a PluginRefused Warning naming rollout/failure-rate",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&env.client, name)
                .await?
                .iter()
                .any(|m| m.contains("rule rollout/failure-rate")))
        },
    )
    .await?;
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(digest_of(v2)),
        "v2 keeps serving"
    );
    let v3_calls = || {
        host.metrics
            .plugin_calls
            .get(&PluginLabels {
                plugin: digest_of(v3),
            })
            .map_or(0, |c| c.get())
    };
    let after_abort = v3_calls();
    assert!(after_abort > 0, "v3 served its cohort before the abort");
    // Every object back on v2: edits converge, and v3 is called no more.
    for i in 0..OBJECTS {
        env.scale(&format!("web-{i}"), 2).await?;
    }
    for i in 0..OBJECTS {
        env.wait_converged(&format!("web-{i}"), 2, CONVERGE).await?;
    }
    assert_eq!(
        v3_calls(),
        after_abort,
        "no object reconciled by v3 after the abort"
    );
    Ok(())
}

/// Issue 41: a rollout driven by hand (`wasm-operator rollout pause |
/// resume | promote | abort`, which only patch the resource): a step that
/// would hold for an hour is paused, resumed and promoted at once; the next
/// canary is aborted, every object back on the stable plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_is_paused_promoted_and_aborted_by_hand() -> anyhow::Result<()> {
    use wasm_operator::crd::plugin::RolloutSpec;
    use wasm_operator::delivery::resource::rollout_cli::{RolloutAction, apply};
    let env = TestEnv::new("jzp-rollout-cli").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), v2());
    let v3 = std::fs::read(plugin("misbehaving-plugin", &[]))?;
    create_configmap(&env, "plugin", v1.clone()).await?;
    let mut resource = resource(&env, "plugin");
    resource.spec.rollout = Some(RolloutSpec {
        steps: vec![50],
        step_seconds: 3600,
        min_reconciles: 1,
        ..RolloutSpec::default()
    });
    let api: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &resource).await?;
    let host = ResourceHost::start(&env, &name, "replica-a", false).await?;
    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v1)).await?;
    for i in 0..6 {
        env.create(&format!("web-{i}"), 1, &[]).await?;
    }
    let phase_is = |phase: &'static str, canary: String| {
        let (env, name) = (&env, &name);
        async move {
            wait_for(phase, CONVERGE, || async {
                let rollout = status_of(env, name).await?.rollout;
                Ok(rollout
                    .is_some_and(|r| r.phase == phase && r.canary.as_deref() == Some(&canary)))
            })
            .await
        }
    };
    let no_canary = apply(&env.client, &name, RolloutAction::Promote).await;
    assert!(no_canary.is_err(), "nothing to promote yet: {no_canary:?}");

    replace_configmap(&env, "plugin", v2.clone()).await?;
    phase_is("Progressing", digest_of(&v2)).await?;
    apply(&env.client, &name, RolloutAction::Pause).await?;
    phase_is("Paused", digest_of(&v2)).await?;
    apply(&env.client, &name, RolloutAction::Resume).await?;
    phase_is("Progressing", digest_of(&v2)).await?;
    apply(&env.client, &name, RolloutAction::Promote).await?;
    phase_is("Promoted", digest_of(&v2)).await?;
    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v2)).await?;
    for i in 0..6 {
        env.wait_converged(&format!("web-{i}"), 1, CONVERGE).await?;
    }
    wait_for("every object on v2", CONVERGE, || async {
        let all = env.jinghzhus().list(&ListParams::default()).await?;
        Ok(all.items.iter().all(|jz| {
            jz.status
                .as_ref()
                .is_some_and(|s| s.message.starts_with(V2_PREFIX))
        }))
    })
    .await?;

    // The next canary, aborted by hand: v2 keeps serving every object.
    replace_configmap(&env, "plugin", v3.clone()).await?;
    phase_is("Progressing", digest_of(&v3)).await?;
    apply(&env.client, &name, RolloutAction::Abort).await?;
    phase_is("Aborted", digest_of(&v3)).await?;
    wait_for(
        "a PluginRefused Warning naming rollout/manual-abort",
        CONVERGE,
        || async {
            Ok(e2e_tests::plugin_refusals(&env.client, &name)
                .await?
                .iter()
                .any(|m| m.contains("rule rollout/manual-abort")))
        },
    )
    .await?;
    assert_eq!(
        host.active.serving().map(|p| p.digest().to_string()),
        Some(digest_of(&v2))
    );
    assert!(
        host.active.canary().view().is_none(),
        "no canary after the abort"
    );
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}

/// Issue 52, hazard 12: a resource whose ConfigMap keeps flipping between
/// two plugins is held (the `Flapping` condition and a
/// `PluginSourceFlapping` Warning name `swap/flapping`) and settles on the
/// newest; the condition turns `False` once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_resource_source_says_so_and_settles() -> anyhow::Result<()> {
    const QUIET: Duration = Duration::from_secs(2);
    let env = TestEnv::new("jzp-flapping").await?;
    install_plugin_crd(&env).await?;
    let name = env.namespace.clone();
    let (v1, v2) = (v1(), v2());
    create_configmap(&env, "plugin", v1.clone()).await?;
    Api::<JinghzhuPlugin>::all(env.client.clone())
        .create(&PostParams::default(), &resource(&env, "plugin"))
        .await?;
    let setup = Setup {
        min_swap_interval: Some(QUIET),
        ..Setup::default()
    };
    let host = ResourceHost::start_with(&env, &name, "replica-a", setup).await?;
    wait_replicas_on(&env, &name, &["replica-a"], &digest_of(&v1)).await?;
    let mut seen = None;
    for flip in 0..8 {
        let bytes = if flip % 2 == 0 {
            v2.clone()
        } else {
            v1.clone()
        };
        replace_configmap(&env, "plugin", bytes).await?;
        tokio::time::sleep(Duration::from_millis(700)).await;
        let status = status_of(&env, &name).await?;
        if let Some(flapping) = condition(&status, "Flapping").filter(|(s, _)| *s == "True") {
            seen = Some(flapping.1.to_string());
        }
    }
    wait_for("the Flapping condition", CONVERGE, || async {
        let status = status_of(&env, &name).await?;
        if condition(&status, "Flapping") == Some(("True", "Flapping")) {
            return Ok(true);
        }
        Ok(seen.is_some())
    })
    .await?;
    wait_for("the source settled on v1", CONVERGE, || async {
        let status = status_of(&env, &name).await?;
        Ok(condition(&status, "Flapping") == Some(("False", "Settled"))
            && host
                .active
                .serving()
                .is_some_and(|p| p.digest() == digest_of(&v1)))
    })
    .await?;
    // Events go out from a queue after the status: wait for the Warning.
    let warned = wait_for(
        "a PluginSourceFlapping Warning naming swap/flapping",
        Duration::from_secs(30),
        || async {
            Ok(
                e2e_tests::events_on(&env.client, "default", "JinghzhuPlugin", &name)
                    .await?
                    .into_iter()
                    .any(|e| {
                        e.reason.as_deref() == Some("PluginSourceFlapping")
                            && e.message.is_some_and(|m| m.contains("swap/flapping"))
                    }),
            )
        },
    )
    .await
    .is_ok();
    println!(
        "8 moves 0.7 s apart: Flapping condition seen, settled on v1, swaps {}",
        host.metrics.plugin_swaps.get()
    );
    assert!(warned, "a PluginSourceFlapping Warning on the resource");
    assert!(host.metrics.plugin_swaps.get() <= 3);
    host.stop().await;
    delete_resource(&env, &name).await;
    Ok(())
}
