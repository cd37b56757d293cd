//! Plugins from a real OCI registry (distribution, over TLS with basic
//! auth), pushed with oras and signed with cosign, served by a host that
//! verifies signatures before compiling, polls its tag, swaps, refuses what
//! it must (naming the rule), and serves its local copy when the registry
//! is down.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use e2e_tests::{HostOptions, RunningHost, TestEnv, plugin, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, ObjectMeta, PostParams};
use local_control_plane::registry::{LocalRegistry, RegistryOptions};
use wasm_operator::delivery::setup::PluginSource;
use wasm_operator::delivery::sources::{OciFirstRead, OciSource, read_oci};
use wasm_operator::registry::signature::{Threshold, VerificationPolicy};
use wasm_operator::registry::{OciOptions, OciPuller, OciRef, rules};
use wasm_operator::runtime::digest_of;

const REPO: &str = "plugins/replicaset";
const POLL: Duration = Duration::from_secs(1);

fn options(registry: &LocalRegistry, store: &Path, trusted: &Path) -> OciOptions {
    OciOptions {
        max_artifact_bytes: 1024 * 1024,
        ca_files: vec![registry.ca_cert.clone()],
        docker_config: Some(std::fs::read(registry.docker_config_file()).expect("docker config")),
        store_dir: Some(store.to_path_buf()),
        verification: Some(Arc::new(
            VerificationPolicy::from_key_files(&[trusted.to_path_buf()], Threshold::All)
                .expect("policy"),
        )),
        ..OciOptions::default()
    }
}

fn source(
    registry: &LocalRegistry,
    options: OciOptions,
    events_on: &ObjectReference,
) -> anyhow::Result<OciSource> {
    Ok(OciSource {
        reference: OciRef::parse(&format!("oci://{}/{REPO}:live", registry.addr))?,
        puller: OciPuller::new(options)?,
        poll_interval: POLL,
        events_on: Some(events_on.clone()),
    })
}

/// The manifest digest `tag` names now.
async fn digest_of_tag(registry: &LocalRegistry, tag: &str, opts: &OciOptions) -> String {
    digest_in(registry, REPO, tag, opts).await
}

/// The manifest digest `repository:tag` names now.
async fn digest_in(
    registry: &LocalRegistry,
    repository: &str,
    tag: &str,
    opts: &OciOptions,
) -> String {
    let reference =
        OciRef::parse(&format!("oci://{}/{repository}:{tag}", registry.addr)).expect("ref");
    OciPuller::new(opts.clone())
        .expect("puller")
        .resolve(&reference)
        .await
        .expect("resolves")
}

/// A host serving the plugin `source` delivers (`fallback` is never read).
async fn start_on_oci(
    env: &TestEnv,
    fallback: &Path,
    source: OciSource,
) -> anyhow::Result<RunningHost> {
    let mut options = HostOptions::file(fallback);
    options.source = PluginSource::Oci(Box::new(source));
    RunningHost::start_with(env, options).await
}

/// Checks that `host` serves `digest` (`what`, for the message), then that
/// `web` scales to `desired`.
async fn serves_and_scales(
    env: &TestEnv,
    host: &RunningHost,
    digest: &str,
    desired: u32,
    what: &str,
) -> anyhow::Result<()> {
    assert_eq!(host.plugin.current().digest(), digest, "{what} serves");
    env.scale("web", desired).await?;
    env.wait_converged("web", desired, Duration::from_secs(60))
        .await?;
    Ok(())
}

/// Waits for a refusal naming `rule` on `/status` and as a Warning Event.
async fn wait_refusal(env: &TestEnv, host: &RunningHost, rule: &str) -> anyhow::Result<()> {
    wait_refusal_saying(env, host, rule, "").await
}

/// [`wait_refusal`], whose text also says `needle`.
async fn wait_refusal_saying(
    env: &TestEnv,
    host: &RunningHost,
    rule: &str,
    needle: &str,
) -> anyhow::Result<()> {
    wait_for(
        &format!("a refusal naming {rule} (saying {needle:?})"),
        Duration::from_secs(30),
        || async {
            let seen = host
                .history
                .lock()
                .map(|h| {
                    h.last_refusal
                        .as_ref()
                        .is_some_and(|r| r.outcome.contains(rule) && r.outcome.contains(needle))
                })
                .unwrap_or(false);
            let event = env
                .events_on("ConfigMap", "oci-host")
                .await?
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("PluginRefused")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains(rule) && m.contains(needle))
                });
            Ok(seen && event)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_plugin_is_verified_swapped_refused_and_kept() -> anyhow::Result<()> {
    let env = TestEnv::new("oci").await?;
    let registry = LocalRegistry::start(RegistryOptions {
        basic_auth: Some(("pusher".into(), "s3cret".into())),
        ..RegistryOptions::default()
    })?;
    let keys = tempfile::tempdir()?;
    let (trusted_dir, unknown_dir) = (keys.path().join("trusted"), keys.path().join("unknown"));
    std::fs::create_dir_all(&trusted_dir)?;
    std::fs::create_dir_all(&unknown_dir)?;
    let (key, public) = registry.cosign_key_pair(&trusted_dir)?;
    let (unknown_key, unknown_public) = registry.cosign_key_pair(&unknown_dir)?;
    let store = tempfile::tempdir()?;
    let opts = options(&registry, store.path(), &public);
    // Refusals are recorded on this object (the host's Pod in a cluster).
    let events_on = Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("oci-host".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
    let events_ref = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some("oci-host".into()),
        namespace: Some(env.namespace.clone()),
        uid: events_on.metadata.uid.clone(),
        ..Default::default()
    };

    // v1: the CNCF layout, signed.
    let (v1, v2) = (
        plugin("replicaset-plugin", &[]),
        plugin("replicaset-plugin", &["v2"]),
    );
    let (v1_digest, v2_digest) = (
        digest_of(&std::fs::read(&v1)?),
        digest_of(&std::fs::read(&v2)?),
    );
    registry.oras_push(&format!("{REPO}:live"), &v1, true)?;
    let m1 = digest_of_tag(&registry, "live", &opts).await;
    registry.cosign_sign(&key, REPO, &m1)?;

    let host = start_on_oci(&env, &v1, source(&registry, opts.clone(), &events_ref)?).await?;
    env.create("web", 2, &[]).await?;
    env.wait_converged("web", 2, Duration::from_secs(60))
        .await?;
    assert!(host.calls_by(&v1_digest) > 0, "v1 from the registry serves");

    // v2 under the same tag, a plain oras artifact: every object moves to v2.
    registry.oras_push(&format!("{REPO}:live"), &v2, false)?;
    let moved = Instant::now();
    let m2 = digest_of_tag(&registry, "live", &opts).await;
    registry.cosign_sign(&key, REPO, &m2)?;
    wait_for("v2 reconciles", Duration::from_secs(30), || async {
        Ok(host.calls_by(&v2_digest) > 0)
    })
    .await?;
    println!(
        "tag move (+ cosign sign) -> first v2 reconcile: {} ms (poll {} ms)",
        moved.elapsed().as_millis(),
        POLL.as_millis()
    );
    wait_for("web on v2", Duration::from_secs(60), || async {
        let jz = env.jinghzhus().get("web").await?;
        Ok(jz.status.is_some_and(|s| s.message.starts_with("[v2] ")))
    })
    .await?;

    // v3 unsigned, then v3 signed by a key the host does not trust.
    let v3 = plugin("misbehaving-plugin", &[]);
    registry.oras_push(&format!("{REPO}:live"), &v3, false)?;
    wait_refusal(&env, &host, rules::UNSIGNED).await?;
    registry.oras_push(&format!("{REPO}:live"), &v3, true)?;
    let m3 = digest_of_tag(&registry, "live", &opts).await;
    registry.cosign_sign(&unknown_key, REPO, &m3)?;
    // The unsigned refusal of this digest may come first: wait for the key's.
    wait_refusal(&env, &host, rules::SIGNATURE).await?;
    assert_eq!(
        host.plugin.current().digest(),
        v2_digest,
        "v2 keeps serving"
    );

    // v3 signed by the trusted key in another repository, copied here with
    // its signature: signed for that repository, not this one (issue 40,
    // hazard 6; served before the payload's repository was compared).
    const OTHER_REPO: &str = "plugins/other";
    registry.oras_push(&format!("{OTHER_REPO}:v3"), &v3, true)?;
    let m_other = digest_in(&registry, OTHER_REPO, "v3", &opts).await;
    registry.cosign_sign(&key, OTHER_REPO, &m_other)?;
    let sig_tag = wasm_operator::registry::signature::signature_tag(&m_other);
    registry.oras_copy(
        &format!("{OTHER_REPO}:{sig_tag}"),
        &format!("{REPO}:{sig_tag}"),
    )?;
    registry.oras_copy(&format!("{OTHER_REPO}@{m_other}"), &format!("{REPO}:live"))?;
    wait_refusal_saying(
        &env,
        &host,
        rules::SIGNATURE,
        &format!("is for repository {}/{OTHER_REPO}", registry.addr),
    )
    .await?;
    serves_and_scales(&env, &host, &v2_digest, 1, "v2").await?;

    // The admin revokes the key: the key file now holds another one (as a
    // mounted Secret updated). An artifact signed only by the revoked key
    // is refused from the next check (issue 40, hazard 5: it served).
    let trusted_pem = std::fs::read(&public)?;
    std::fs::copy(&unknown_public, &public)?;
    let v4 = plugin("misbehaving-plugin", &["v2"]);
    registry.oras_push(&format!("{REPO}:revoked"), &v4, false)?;
    let m_revoked = digest_of_tag(&registry, "revoked", &opts).await;
    registry.cosign_sign(&key, REPO, &m_revoked)?;
    registry.oras_tag(&format!("{REPO}:revoked"), "live")?;
    wait_refusal_saying(&env, &host, rules::SIGNATURE, &m_revoked).await?;
    assert_eq!(
        host.plugin.current().digest(),
        v2_digest,
        "v2 keeps serving"
    );
    // Back to v2 before the key is: else the next poll looks at the revoked
    // one's artifact again with the old key and serves it.
    registry.oras_tag(&format!("{REPO}@{m2}"), "live")?;
    tokio::time::sleep(2 * POLL).await;
    std::fs::write(&public, trusted_pem)?;

    // A signed artifact whose blob was changed in the registry's storage.
    let work = tempfile::tempdir()?;
    let fake = work.path().join("fake.wasm");
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.extend((0..4096u32).map(|i| (i * 7 % 251) as u8));
    std::fs::write(&fake, &bytes)?;
    registry.oras_push(&format!("{REPO}:tampered"), &fake, false)?;
    let m4 = digest_of_tag(&registry, "tampered", &opts).await;
    registry.cosign_sign(&key, REPO, &m4)?;
    let data = registry.blob_data_path(&digest_of(&bytes));
    let mut stored = std::fs::read(&data)?;
    stored[100] ^= 0xff; // same size, other bytes
    std::fs::write(&data, &stored)?;
    registry.oras_tag(&format!("{REPO}:tampered"), "live")?;
    wait_refusal(&env, &host, rules::DIGEST_MISMATCH).await?;

    // Over the 1 MiB cap: refused from the manifest, the blob never requested.
    let big = work.path().join("big.wasm");
    let mut bytes = b"\0asm".to_vec();
    bytes.resize(2 * 1024 * 1024, 7);
    std::fs::write(&big, &bytes)?;
    registry.oras_push(&format!("{REPO}:big"), &big, false)?;
    let m5 = digest_of_tag(&registry, "big", &opts).await;
    registry.cosign_sign(&key, REPO, &m5)?;
    let before = registry.log();
    registry.oras_tag(&format!("{REPO}:big"), "live")?;
    wait_refusal(&env, &host, rules::TOO_LARGE).await?;
    let big_blob = digest_of(&bytes);
    let after = registry.log();
    assert!(
        !after[before.len()..].contains(&format!("blobs/{big_blob}")),
        "the host requested the over-size blob"
    );
    assert_eq!(host.plugin.current().digest(), v2_digest, "v2 still serves");

    // A publisher without the key pushes an unsigned artifact to the tag: a
    // restarted host serves the last artifact it verified (v2, from its
    // store, re-verified) and reports the refusal (issue 40, hazard 3: it
    // served nothing, unready).
    registry.oras_push(&format!("{REPO}:live"), &v3, false)?;
    host.stop().await;
    let host = start_on_oci(&env, &v1, source(&registry, opts.clone(), &events_ref)?).await?;
    wait_refusal(&env, &host, rules::UNSIGNED).await?;
    serves_and_scales(&env, &host, &v2_digest, 2, "the last known good").await?;

    // The registry goes away; a restarted host serves v2 from its local copy.
    host.stop().await;
    let mut registry = registry;
    registry.stop();
    let host = start_on_oci(&env, &v1, source(&registry, opts.clone(), &events_ref)?).await?;
    serves_and_scales(&env, &host, &v2_digest, 3, "the local copy").await?;
    assert!(host.calls_by(&v2_digest) > 0);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_refused_with_a_clear_reason() -> anyhow::Result<()> {
    let registry = LocalRegistry::start(RegistryOptions {
        basic_auth: Some(("pusher".into(), "s3cret".into())),
        ..RegistryOptions::default()
    })?;
    let v1 = plugin("replicaset-plugin", &[]);
    registry.oras_push(&format!("{REPO}:v1"), &v1, true)?;
    let reference = OciRef::parse(&format!("oci://{}/{REPO}:v1", registry.addr))?;
    let wrong = serde_json::json!({"auths": {registry.addr.clone(): {"username": "pusher", "password": "nope"}}});
    for docker_config in [None, Some(wrong.to_string().into_bytes())] {
        let source = OciSource {
            reference: reference.clone(),
            puller: OciPuller::new(OciOptions {
                ca_files: vec![registry.ca_cert.clone()],
                docker_config,
                ..OciOptions::default()
            })?,
            poll_interval: POLL,
            events_on: None,
        };
        match read_oci(&source).await {
            OciFirstRead::Refused { error, .. } => {
                assert_eq!(error.rule, rules::AUTH, "{error}");
                assert!(error.message.contains("--oci-docker-config"), "{error}");
            }
            other => anyhow::bail!("expected an auth refusal, got {other:?}"),
        }
    }
    // Without the CA the registry's certificate is not trusted: unreachable, said so.
    let source = OciSource {
        reference,
        puller: OciPuller::new(OciOptions::default())?,
        poll_interval: POLL,
        events_on: None,
    };
    match read_oci(&source).await {
        OciFirstRead::Missing(why) => assert!(why.message.contains("--oci-ca-file"), "{why}"),
        other => anyhow::bail!("expected an unreachable registry, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_operator_push_makes_what_the_host_pulls_and_cosign_signs() -> anyhow::Result<()> {
    let registry = LocalRegistry::start(RegistryOptions {
        basic_auth: Some(("pusher".into(), "s3cret".into())),
        ..RegistryOptions::default()
    })?;
    let keys = tempfile::tempdir()?;
    let (key, public) = registry.cosign_key_pair(keys.path())?;
    let store = tempfile::tempdir()?;
    let opts = options(&registry, store.path(), &public);
    let v1 = plugin("replicaset-plugin", &[]);
    // The command as an author runs it.
    let reference = format!("oci://{}/{REPO}:pushed", registry.addr);
    let args = [
        "wasm-operator".to_string(),
        "push".into(),
        v1.display().to_string(),
        reference.clone(),
        "--oci-ca-file".into(),
        registry.ca_cert.display().to_string(),
        "--oci-docker-config".into(),
        registry.docker_config_file().display().to_string(),
    ];
    tokio::task::spawn_blocking(move || wasm_operator::cli::execute_args(args)).await??;
    let digest = digest_of_tag(&registry, "pushed", &opts).await;
    registry.cosign_sign(&key, REPO, &digest)?;
    let puller = OciPuller::new(opts)?;
    let pulled = puller.pull(&OciRef::parse(&reference)?).await?;
    assert_eq!(pulled.manifest_digest, digest);
    assert_eq!(pulled.layer_digest, digest_of(&std::fs::read(&v1)?));
    assert_eq!(pulled.verified_by.len(), 1);
    // Pinned by digest, the same artifact.
    let pinned = OciRef::parse(&format!("oci://{}/{REPO}@{digest}", registry.addr))?;
    assert_eq!(puller.pull(&pinned).await?.bytes, pulled.bytes);
    Ok(())
}

/// A plain-HTTP registry is used only when named as insecure: without the
/// name the puller and `wasm-operator push` refuse it as unreachable (and
/// say which flag would allow it); named, the push and the pull work and
/// the host serves the plugin from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_registry_is_used_only_when_named_insecure() -> anyhow::Result<()> {
    let env = TestEnv::new("oci-plain").await?;
    let registry = LocalRegistry::start(RegistryOptions {
        plain_http: true,
        ..RegistryOptions::default()
    })?;
    let v1 = plugin("replicaset-plugin", &[]);
    let bytes = std::fs::read(&v1)?;
    let reference = OciRef::parse(&format!("oci://{}/{REPO}:plain", registry.addr))?;

    // Not named: HTTPS is spoken to it and fails, with the way out named.
    let strict = OciPuller::new(OciOptions::default())?;
    let refused = wasm_operator::registry::push::push(&strict, &reference, &bytes)
        .await
        .expect_err("a push over HTTPS to a plain-HTTP registry fails");
    assert_eq!(refused.rule, rules::UNREACHABLE, "{refused}");
    let other = OciPuller::new(OciOptions {
        insecure_registries: vec!["127.0.0.1:1".into()],
        ..OciOptions::default()
    })?;
    assert!(
        wasm_operator::registry::push::push(&other, &reference, &bytes)
            .await
            .is_err(),
        "naming another registry insecure does not make this one plain HTTP"
    );

    // Named: the push and the pull work.
    let insecure = OciOptions {
        insecure_registries: vec![registry.addr.clone()],
        ..OciOptions::default()
    };
    let puller = OciPuller::new(insecure.clone())?;
    let pushed = wasm_operator::registry::push::push(&puller, &reference, &bytes).await?;
    let pulled = puller.pull(&reference).await?;
    assert_eq!(pulled.manifest_digest, pushed);
    assert_eq!(pulled.bytes, bytes);
    match read_oci(&OciSource {
        reference: reference.clone(),
        puller: strict,
        poll_interval: POLL,
        events_on: None,
    })
    .await
    {
        OciFirstRead::Missing(why) => {
            assert!(why.message.contains("--oci-insecure-registry"), "{why}")
        }
        other => anyhow::bail!("expected an unreachable registry, got {other:?}"),
    }

    // The host serves from it.
    env.create("web", 2, &[]).await?;
    let mut host_options = HostOptions::file(&v1);
    host_options.source = PluginSource::Oci(Box::new(OciSource {
        reference,
        puller,
        poll_interval: POLL,
        events_on: None,
    }));
    let host = RunningHost::start_with(&env, host_options).await?;
    env.wait_converged("web", 2, Duration::from_secs(90))
        .await?;
    anyhow::ensure!(
        host.calls_by(&digest_of(&bytes)) > 0,
        "served from the registry"
    );
    host.stop().await;
    Ok(())
}

/// Tag move → first reconcile on the new plugin, 10 swaps between v1 and v2
/// (signed, staged under their own tags, then `oras tag … live`), with a
/// warm precompiled cache and with none (every swap compiles).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo test -p e2e-tests --test oci measure -- --ignored --nocapture"]
async fn measure_tag_move_to_first_reconcile() -> anyhow::Result<()> {
    let env = TestEnv::new("oci-bench").await?;
    let registry = LocalRegistry::start(RegistryOptions::default())?;
    let keys = tempfile::tempdir()?;
    let (key, public) = registry.cosign_key_pair(keys.path())?;
    let (v1, v2) = (
        plugin("replicaset-plugin", &[]),
        plugin("replicaset-plugin", &["v2"]),
    );
    let digests = [
        digest_of(&std::fs::read(&v1)?),
        digest_of(&std::fs::read(&v2)?),
    ];
    let store = tempfile::tempdir()?;
    let opts = options(&registry, store.path(), &public);
    let stage = |tag: &str, wasm: &Path| -> anyhow::Result<()> {
        registry.oras_push(&format!("{REPO}:{tag}"), wasm, true)?;
        Ok(())
    };
    stage("live", &v1)?;
    let m = digest_of_tag(&registry, "live", &opts).await;
    registry.cosign_sign(&key, REPO, &m)?;
    env.create("web", 1, &[]).await?;
    let events_ref = ObjectReference::default();
    let cache = tempfile::tempdir()?;
    for (label, cache_dir) in [("warm", Some(cache.path().to_path_buf())), ("cold", None)] {
        let mut host_options = HostOptions::file(&v1);
        host_options.runtime.cache_dir = cache_dir;
        host_options.source =
            PluginSource::Oci(Box::new(source(&registry, opts.clone(), &events_ref)?));
        let host = RunningHost::start_with(&env, host_options).await?;
        env.wait_converged("web", 1, Duration::from_secs(60))
            .await?;
        let mut samples = Vec::new();
        // The warm round first loads both plugins once, unmeasured.
        let rounds = if label == "warm" { 12 } else { 10 };
        for i in 0..rounds {
            let target = (i + 1) % 2; // v2, v1, v2, …
            let tag = format!("{label}-{i}");
            stage(&tag, if target == 1 { &v2 } else { &v1 })?;
            let m = digest_of_tag(&registry, &tag, &opts).await;
            registry.cosign_sign(&key, REPO, &m)?;
            let before = host.calls_by(&digests[target]);
            registry.oras_tag(&format!("{REPO}:{tag}"), "live")?;
            let moved = Instant::now();
            while host.calls_by(&digests[target]) == before {
                anyhow::ensure!(moved.elapsed() < Duration::from_secs(30), "no swap");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if label == "cold" || i >= 2 {
                samples.push(moved.elapsed().as_millis() as u64);
            }
        }
        samples.sort_unstable();
        println!(
            "OCI tag move -> first reconcile on the new plugin ({label} precompiled cache, poll {} ms, \
             {} swaps): p50 {} ms, min {} ms, max {} ms; all {samples:?}",
            POLL.as_millis(),
            samples.len(),
            samples[samples.len() / 2],
            samples[0],
            samples[samples.len() - 1]
        );
        host.stop().await;
    }
    Ok(())
}

/// Pull + verify + compile of a 20 MB component: the Python replicaset
/// plugin (18 MB), pushed with oras and signed with cosign. Each round
/// pulls it once without a signature policy and once with one (so the
/// difference is what verifying costs: fetching the `.sig` artifact and
/// checking its ECDSA signature), with no local store, then compiles the
/// bytes in process with no precompiled cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo test --release -p e2e-tests --test oci pull_verify_compile -- --ignored --nocapture"]
async fn measure_pull_verify_compile_of_a_20_mb_component() -> anyhow::Result<()> {
    use wasm_artifacts::{Language, build_language};
    use wasm_operator::runtime::{Runtime, RuntimeConfig};
    let registry = LocalRegistry::start(RegistryOptions::default())?;
    let keys = tempfile::tempdir()?;
    let (key, public) = registry.cosign_key_pair(keys.path())?;
    let wasm = build_language(Language::Python);
    let size = std::fs::metadata(&wasm)?.len();
    registry.oras_push(&format!("{REPO}:python"), &wasm, true)?;
    let store = tempfile::tempdir()?;
    let verified_opts = OciOptions {
        max_artifact_bytes: 128 * 1024 * 1024,
        store_dir: None,
        ..options(&registry, store.path(), &public)
    };
    let manifest = digest_of_tag(&registry, "python", &verified_opts).await;
    registry.cosign_sign(&key, REPO, &manifest)?;
    let plain_opts = OciOptions {
        verification: None,
        ..verified_opts.clone()
    };
    let reference = OciRef::parse(&format!("oci://{}/{REPO}:python", registry.addr))?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })?;
    let (mut plain, mut verified, mut compile) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..4 {
        let started = Instant::now();
        let pulled = OciPuller::new(plain_opts.clone())?.pull(&reference).await?;
        let plain_took = started.elapsed();
        let started = Instant::now();
        let pulled_verified = OciPuller::new(verified_opts.clone())?
            .pull(&reference)
            .await?;
        let verified_took = started.elapsed();
        anyhow::ensure!(
            pulled.bytes.len() as u64 == size && pulled_verified.verified_by.len() == 1
        );
        let started = Instant::now();
        drop(runtime.load(&pulled_verified.bytes, "python")?);
        let compile_took = started.elapsed();
        // The first round warms the registry's and the kernel's caches.
        if round > 0 {
            plain.push(plain_took);
            verified.push(verified_took);
            compile.push(compile_took);
        }
    }
    for list in [&mut plain, &mut verified, &mut compile] {
        list.sort();
    }
    let p50 = |list: &[Duration]| list[list.len() / 2].as_secs_f64() * 1e3;
    println!(
        "| {:.1} MB component, 3 rounds, p50 | ms |",
        size as f64 / 1e6
    );
    println!("| --- | --- |");
    println!(
        "| pull (resolve, manifest, layer, digest check) | {:.0} |",
        p50(&plain)
    );
    println!(
        "| pull + verify (cosign .sig, ECDSA P-256) | {:.0} |",
        p50(&verified)
    );
    println!(
        "| compile (Cranelift, in process, no cache) | {:.0} |",
        p50(&compile)
    );
    println!(
        "| pull + verify + compile | {:.0} |",
        p50(&verified) + p50(&compile)
    );
    Ok(())
}

/// `wasm` with a custom section naming `n` appended: the same plugin under
/// another digest (a new push of the same code).
fn variant(wasm: &[u8], n: u32) -> Vec<u8> {
    const NAME: &[u8] = b"wasm-operator-test-variant";
    let mut out = wasm.to_vec();
    out.push(0); // a custom section
    out.push((1 + NAME.len() + 4) as u8); // its size (one LEB128 byte)
    out.push(NAME.len() as u8);
    out.extend_from_slice(NAME);
    out.extend_from_slice(&n.to_le_bytes());
    out
}

/// Bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|listing| {
            listing
                .flatten()
                .map(|entry| match entry.metadata() {
                    Ok(meta) if meta.is_dir() => bytes_under(&entry.path()),
                    Ok(meta) => meta.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Copies every file of the store at `from` into the store at `to`, over
/// what is there (a planted artifact).
fn plant(from: &Path, to: &Path) -> anyhow::Result<()> {
    for sub in ["refs", "manifests", "signatures", "blobs"] {
        for entry in std::fs::read_dir(from.join(sub))? {
            let entry = entry?;
            let target = to.join(sub).join(entry.file_name());
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// An in-process host following `live` (swaps not held), with a precompiled
/// cache of its own in `cache`.
async fn host_on_store(
    env: &TestEnv,
    fallback: &Path,
    cache: &Path,
    live: &OciRef,
    opts: OciOptions,
) -> anyhow::Result<RunningHost> {
    let mut host_options = HostOptions::file(fallback);
    host_options.runtime.cache_dir = Some(cache.to_path_buf());
    host_options.source = PluginSource::Oci(Box::new(OciSource {
        reference: live.clone(),
        puller: OciPuller::new(opts)?,
        poll_interval: POLL,
        events_on: None,
    }));
    let host = RunningHost::start_with(env, host_options).await?;
    host.plugin.set_min_swap_interval(Duration::ZERO);
    Ok(host)
}

/// Issue 40: the OCI store was served without the precompiled cache's
/// protections and never pruned. Many pushes to the followed tag keep the
/// store under its bound, and the plugin serving still restarts from the
/// store with the registry down; an artifact planted in the store (signed
/// with another key, as anyone without the host's key must) is not served:
/// the host serves nothing while the registry is down, then pulls again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oci_store_is_bounded_and_a_planted_copy_is_not_served() -> anyhow::Result<()> {
    let env = TestEnv::new("oci-store").await?;
    let mut registry = LocalRegistry::start(RegistryOptions::default())?;
    let work = tempfile::tempdir()?;
    let store = work.path().join("store");
    let v1_path = plugin("replicaset-plugin", &[]);
    let v1 = std::fs::read(&v1_path)?;
    // Room for three artifacts of this plugin, not for the eight pushed.
    let bound = 3 * v1.len() as u64 + 16 * 1024;
    let opts = OciOptions {
        max_artifact_bytes: 16 << 20,
        ca_files: vec![registry.ca_cert.clone()],
        store_dir: Some(store.clone()),
        store_max_bytes: bound,
        ..OciOptions::default()
    };
    let live = OciRef::parse(&format!("oci://{}/{REPO}:live", registry.addr))?;
    let cache = work.path().join("precompiled");
    let start = |opts: OciOptions| host_on_store(&env, &v1_path, &cache, &live, opts);

    // Nine pushes to `live`, each served in turn. Variants of v1 that only
    // this test serves: the pins are process-wide, and other tests of this
    // binary serve v1 itself at the same time (its copy here would be kept).
    let mut host = None;
    let mut last = String::new();
    for n in 0..=8u32 {
        let bytes = variant(&v1, n);
        let path = work.path().join(format!("v1-{n}.wasm"));
        std::fs::write(&path, &bytes)?;
        registry.oras_push(&format!("{REPO}:live"), &path, true)?;
        last = digest_of(&bytes);
        if n == 0 {
            host = Some(start(opts.clone()).await?);
            env.create("web", 1, &[]).await?;
            env.wait_converged("web", 1, Duration::from_secs(60))
                .await?;
        }
        let host = host.as_ref().context("started")?;
        wait_for(
            &format!("push {n} serving"),
            Duration::from_secs(60),
            || async { Ok(host.plugin.serving().is_some_and(|p| p.digest() == last)) },
        )
        .await?;
    }
    let used = bytes_under(&store);
    println!(
        "OCI store after 9 pushes of a {} KiB plugin: {} KiB (bound {} KiB)",
        v1.len() >> 10,
        used >> 10,
        bound >> 10
    );
    // The bound, plus the refs and the key (a few hundred bytes).
    anyhow::ensure!(
        used <= bound + 4096,
        "the store holds {used} bytes, over its {bound}-byte bound"
    );

    // The registry goes away: a restarted host serves the last push from the store.
    host.context("started")?.stop().await;
    registry.stop();
    let host = start(opts.clone()).await?;
    serves_and_scales(&env, &host, &last, 2, "the last push, from the store").await?;
    host.stop().await;

    // An artifact planted in the store by someone without the host's key
    // (the v2 plugin under the followed tag, in a store of their own, its
    // files copied over the host's): not served. The host serves nothing
    // while the registry is down, and the planted files are gone.
    let v2 = std::fs::read(plugin("replicaset-plugin", &["v2"]))?;
    let (v2_digest, size) = (digest_of(&v2), v2.len());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                   "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                   "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": v2_digest, "size": size}],
    })
    .to_string()
    .into_bytes();
    let theirs = wasm_operator::registry::store::Store::open(
        work.path().join("theirs"),
        &wasm_operator::registry::store::StoreKey::default(),
        u64::MAX,
    )
    .map_err(anyhow::Error::msg)?;
    theirs.save(
        &live,
        &digest_of(&manifest),
        &manifest,
        &v2_digest,
        &v2,
        &[],
    )?;
    plant(theirs.dir(), &store)?;
    let host = start(opts.clone()).await?;
    anyhow::ensure!(
        host.plugin.serving().is_none(),
        "a planted artifact serves: {:?}",
        host.plugin.serving().map(|p| p.describe())
    );
    anyhow::ensure!(
        std::fs::read_dir(store.join("refs"))?.count() == 0,
        "the planted ref was removed"
    );
    // The registry is back: the host pulls again and serves the last push.
    registry.restart()?;
    wait_for(
        "the last push serving again",
        Duration::from_secs(60),
        || async { Ok(host.plugin.serving().is_some_and(|p| p.digest() == last)) },
    )
    .await?;
    host.stop().await;
    Ok(())
}
