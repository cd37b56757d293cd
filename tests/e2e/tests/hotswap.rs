//! Hot-swapping plugins in a running host against the real control plane:
//! file and ConfigMap sources, refusals, automatic rollback, shadow mode.

use std::path::Path;
use std::time::{Duration, Instant};

use e2e_tests::{HostOptions, RunningHost, TestEnv, plugin, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use wasm_operator::crd::Jinghzhu;
use wasm_operator::delivery::damper;
use wasm_operator::delivery::setup::PluginSource;
use wasm_operator::runtime::digest_of;
use wasm_operator::slot::RollbackPolicy;

const V2_PREFIX: &str = "[v2] ";

fn v1() -> Vec<u8> {
    std::fs::read(plugin("replicaset-plugin", &[])).expect("v1 plugin")
}

fn v2() -> Vec<u8> {
    std::fs::read(plugin("replicaset-plugin", &["v2"])).expect("v2 plugin")
}

/// Replaces `path` the way editors and `cp` onto a new inode do: write a
/// temporary file next to it, then rename it over.
fn replace_file(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename");
}

/// Creates `count` objects with `desired` pods, 20 at a time.
async fn create_many(
    env: &TestEnv,
    prefix: &str,
    count: usize,
    desired: u32,
    annotations: &[(&str, &str)],
) -> anyhow::Result<()> {
    for chunk in (0..count).collect::<Vec<_>>().chunks(20) {
        let creates = chunk
            .iter()
            .map(|i| env.create_owned(format!("{prefix}-{i:03}"), desired, annotations));
        for result in futures::future::join_all(creates).await {
            result?;
        }
    }
    Ok(())
}

/// Waits until every Jinghzhu of the namespace is converged and its message
/// satisfies `message_ok`.
async fn wait_all(
    env: &TestEnv,
    count: usize,
    timeout: Duration,
    message_ok: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    let converged = |jz: &&Jinghzhu| {
        jz.status.as_ref().is_some_and(|s| {
            s.state == "Running" && s.current == jz.spec.desired && message_ok(&s.message)
        })
    };
    let deadline = Instant::now() + timeout;
    loop {
        let list = env.jinghzhus().list(&Default::default()).await?.items;
        let (done, behind): (Vec<&Jinghzhu>, Vec<&Jinghzhu>) = list.iter().partition(converged);
        if list.len() == count && done.len() == count {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let behind: Vec<String> = behind
                .iter()
                .take(5)
                .map(|jz| {
                    format!(
                        "{} (rv {:?}, reconciled-by {:?}): {:?}",
                        jz.name_any(),
                        jz.metadata.resource_version,
                        jz.status.as_ref().and_then(|s| s.reconciled_by.as_deref()),
                        jz.status
                    )
                })
                .collect();
            anyhow::bail!(
                "only {} of {count} objects converged with the expected message within {timeout:?}; \
                 some that did not: {behind:#?}",
                done.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_the_plugin_file_while_200_objects_reconcile() -> anyhow::Result<()> {
    let env = TestEnv::new("swap-file").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    std::fs::write(&live, v1())?;
    let (v1_digest, v2_bytes) = (digest_of(&v1()), v2());
    let v2_digest = digest_of(&v2_bytes);
    let host = RunningHost::start_with(&env, HostOptions::file(&live)).await?;

    create_many(&env, "jz", 200, 1, &[]).await?;
    // Swap while the host is still working through the creates.
    let changed = Instant::now();
    replace_file(&live, &v2_bytes);
    while host.calls_by(&v2_digest) == 0 {
        anyhow::ensure!(
            changed.elapsed() < Duration::from_secs(30),
            "v2 never reconciled"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let first_v2 = changed.elapsed();
    println!(
        "file change -> first v2 reconcile: {} ms",
        first_v2.as_millis()
    );

    wait_all(&env, 200, Duration::from_secs(300), |m| {
        m.starts_with(V2_PREFIX)
    })
    .await?;
    assert_eq!(
        host.errors_by(&v1_digest) + host.errors_by(&v2_digest),
        0,
        "no reconcile error"
    );
    assert_eq!(host.metrics.plugin_swaps.get(), 1);
    let pods = env.pods().list(&Default::default()).await?.items;
    assert_eq!(pods.len(), 200, "exactly one pod per object");
    assert_eq!(host.metrics.pods_created.get(), 200, "no pod over-created");
    assert_eq!(host.metrics.pods_deleted.get(), 0);
    let stamped = env.jinghzhus().list(&Default::default()).await?.items;
    assert!(
        stamped.iter().all(|jz| jz
            .status
            .as_ref()
            .and_then(|s| s.reconciled_by.as_deref())
            .is_some_and(|by| by.contains(&v2_digest[..19]))),
        "every object names the plugin that reconciled it"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_through_a_configmap_and_refusing_a_corrupt_one() -> anyhow::Result<()> {
    let env = TestEnv::new("swap-cm").await?;
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    // What `kubectl create configmap ... --dry-run=client -o yaml | kubectl apply -f -` sends.
    let apply = PatchParams::apply("kubectl-client-side-apply").force();
    maps.patch(
        "operator-plugin",
        &apply,
        &Patch::Apply(&e2e_tests::plugin_configmap("operator-plugin", v1())),
    )
    .await?;

    let mut options = HostOptions::file(Path::new("-"));
    options.source = PluginSource::ConfigMap {
        namespace: env.namespace.clone(),
        name: "operator-plugin".into(),
        key: "plugin.wasm".into(),
    };
    let host = RunningHost::start_with(&env, options).await?;
    create_many(&env, "jz", 20, 1, &[]).await?;
    wait_all(&env, 20, Duration::from_secs(120), |m| {
        !m.starts_with(V2_PREFIX)
    })
    .await?;

    maps.patch(
        "operator-plugin",
        &apply,
        &Patch::Apply(&e2e_tests::plugin_configmap("operator-plugin", v2())),
    )
    .await?;
    wait_all(&env, 20, Duration::from_secs(120), |m| {
        m.starts_with(V2_PREFIX)
    })
    .await?;
    assert_eq!(host.metrics.plugin_swaps.get(), 1);

    // A corrupt plugin is refused, visibly, and v2 keeps serving.
    maps.patch(
        "operator-plugin",
        &apply,
        &Patch::Apply(&e2e_tests::plugin_configmap(
            "operator-plugin",
            b"not a plugin".to_vec(),
        )),
    )
    .await?;
    wait_for(
        "a PluginRefused Event on the ConfigMap",
        Duration::from_secs(30),
        || async {
            Ok(env
                .events_on("ConfigMap", "operator-plugin")
                .await?
                .iter()
                .any(|e| e.reason.as_deref() == Some("PluginRefused")))
        },
    )
    .await?;
    assert_eq!(host.metrics.plugin_swaps_refused.get(), 1);
    assert!(host.plugin.current().info().version.ends_with("+v2"));
    env.create("after-refusal", 2, &[]).await?;
    let (jz, _) = env
        .wait_converged("after-refusal", 2, Duration::from_secs(60))
        .await?;
    assert!(jz.status.expect("status").message.starts_with(V2_PREFIX));
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_candidates_are_refused_and_v1_keeps_working() -> anyhow::Result<()> {
    let env = TestEnv::new("refuse").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    let v1_bytes = v1();
    std::fs::write(&live, &v1_bytes)?;
    let mut options = HostOptions::file(&live);
    // Only v1 may load: pins are how a cluster admin says "this and nothing else".
    options.pinned_sha256 = Some(digest_of(&v1_bytes));
    let host = RunningHost::start_with(&env, options).await?;
    env.create("web", 1, &[]).await?;
    env.wait_converged("web", 1, Duration::from_secs(60))
        .await?;

    let candidates: Vec<(&str, Vec<u8>)> = vec![
        (
            "corrupt file",
            b"\0asm garbage that is no component".to_vec(),
        ),
        (
            "component for another world",
            std::fs::read(plugin("other-world-plugin", &[]))?,
        ),
        ("digest mismatch (v2 is not pinned)", v2()),
    ];
    for (expected_refusals, (what, bytes)) in candidates.into_iter().enumerate() {
        replace_file(&live, &bytes);
        wait_for(
            &format!("the {what} to be refused"),
            Duration::from_secs(30),
            || async {
                Ok(host.metrics.plugin_swaps_refused.get() == expected_refusals as u64 + 1)
            },
        )
        .await?;
        let refusal = host
            .history
            .lock()
            .map(|h| h.last_refusal.clone())
            .ok()
            .flatten()
            .map(|r| r.outcome)
            .unwrap_or_default();
        println!("{what}: refused: {refusal}");
        assert_eq!(
            host.plugin.current().digest(),
            digest_of(&v1_bytes),
            "v1 still serves"
        );
    }
    let refusal = host
        .history
        .lock()
        .map(|h| h.last_refusal.clone())
        .ok()
        .flatten();
    assert!(refusal.is_some_and(|r| r.outcome.contains("digest mismatch")));

    env.scale("web", 3).await?;
    env.wait_converged("web", 3, Duration::from_secs(60))
        .await?;
    assert_eq!(host.metrics.plugin_swaps.get(), 0);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_traps_is_refused_or_rolled_back() -> anyhow::Result<()> {
    let env = TestEnv::new("rollback").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    let v1_bytes = v1();
    std::fs::write(&live, &v1_bytes)?;
    let mut options = HostOptions::file(&live);
    options.rollback = RollbackPolicy {
        window: Duration::from_secs(120),
        max_failure_ratio: 0.5,
        min_calls: 5,
    };
    let host = RunningHost::start_with(&env, options).await?;
    // v1 ignores this annotation; the misbehaving plugin panics on it.
    create_many(
        &env,
        "jz",
        10,
        1,
        &[("test.jinghzhu.io/misbehave", "panic")],
    )
    .await?;
    wait_all(&env, 10, Duration::from_secs(120), |_| true).await?;

    // One that traps on every call does not even pass the smoke reconcile.
    replace_file(
        &live,
        &std::fs::read(plugin("misbehaving-plugin", &["always-trap"]))?,
    );
    wait_for(
        "the always-trapping plugin to be refused",
        Duration::from_secs(30),
        || async { Ok(host.metrics.plugin_swaps_refused.get() == 1) },
    )
    .await?;

    // One that passes the smoke reconcile but traps on the real objects is
    // swapped in, then rolled back.
    replace_file(&live, &std::fs::read(plugin("misbehaving-plugin", &[]))?);
    wait_for(
        "the automatic rollback",
        Duration::from_secs(60),
        || async { Ok(host.metrics.plugin_rollbacks.get() == 1) },
    )
    .await?;
    assert_eq!(host.metrics.plugin_swaps.get(), 1);
    assert_eq!(
        host.plugin.current().digest(),
        digest_of(&v1_bytes),
        "back on v1"
    );
    env.create("after-rollback", 2, &[]).await?;
    env.wait_converged("after-rollback", 2, Duration::from_secs(60))
        .await?;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_compares_and_applies_nothing() -> anyhow::Result<()> {
    let env = TestEnv::new("shadow").await?;
    let mut options = HostOptions::file(&plugin("replicaset-plugin", &[]));
    options.shadow = Some(plugin("replicaset-plugin", &["v2"]));
    let host = RunningHost::start_with(&env, options).await?;
    create_many(&env, "jz", 5, 2, &[]).await?;
    wait_all(&env, 5, Duration::from_secs(120), |m| {
        !m.starts_with(V2_PREFIX)
    })
    .await?;
    // The shadow runs in its own queue, after the reconciles that offered
    // it their input: its comparisons may land a little later.
    wait_for(
        "the v2 shadow's different message to be noticed 5 times",
        Duration::from_secs(30),
        || async { Ok(host.metrics.shadow_differences.get() >= 5) },
    )
    .await?;
    let pods = env.pods().list(&Default::default()).await?.items;
    assert_eq!(pods.len(), 10, "only the active plugin's pods exist");
    host.stop().await;
    Ok(())
}

/// Issue 40, hazard 4: one tenant's objects that fail under every build,
/// edited twice a second, do not roll back an upgrade that serves everyone
/// else. v1 and v2 are two builds of the misbehaving plugin (healthy,
/// except that both panic on the tenant's annotation); the probation
/// judges each object once and not the objects already failing under v1.
/// Counted per reconcile, as before, the tenant's failures outnumbered the
/// healthy objects' successes and v2 was rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_failing_objects_do_not_roll_back_an_upgrade() -> anyhow::Result<()> {
    const HEALTHY: usize = 5;
    const TENANT: usize = 10;
    let env = TestEnv::new("fair-rollback").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    let v1_bytes = std::fs::read(plugin("misbehaving-plugin", &[]))?;
    let v2_bytes = std::fs::read(plugin("misbehaving-plugin", &["v2"]))?;
    std::fs::write(&live, &v1_bytes)?;
    let mut options = HostOptions::file(&live);
    options.rollback = RollbackPolicy {
        window: Duration::from_secs(60),
        max_failure_ratio: 0.5,
        min_calls: 5,
    };
    let host = RunningHost::start_with(&env, options).await?;
    create_many(&env, "app", HEALTHY, 1, &[]).await?;
    create_many(
        &env,
        "tenant",
        TENANT,
        1,
        &[("test.jinghzhu.io/misbehave", "panic")],
    )
    .await?;
    let (v1, v2) = (digest_of(&v1_bytes), digest_of(&v2_bytes));
    wait_for(
        "each of the tenant's objects to fail under v1",
        Duration::from_secs(60),
        || async {
            for i in 0..TENANT {
                let events = env.events_of(&format!("tenant-{i:03}")).await?;
                if !events
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("PluginFailed"))
                {
                    return Ok(false);
                }
            }
            Ok(host.errors_by(&v1) >= TENANT as u64)
        },
    )
    .await?;
    wait_healthy(&env, HEALTHY, |m| !m.starts_with(V2_PREFIX)).await?;

    // The tenant edits its objects twice a second throughout.
    let editor = tokio::spawn(edit_twice_a_second(env.jinghzhus(), TENANT));
    replace_file(&live, &v2_bytes);
    wait_for("the swap to v2", Duration::from_secs(30), || async {
        Ok(host.metrics.plugin_swaps.get() == 1)
    })
    .await?;
    let v2_serving = wait_healthy(&env, HEALTHY, |m| m.starts_with(V2_PREFIX)).await;
    assert_eq!(
        host.metrics.plugin_rollbacks.get(),
        0,
        "v2 rolled back: {} failures under v2, {} calls",
        host.errors_by(&v2),
        host.calls_by(&v2)
    );
    v2_serving?;
    // Half the window, with the tenant's objects failing under v2 all along.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(20) {
        assert_eq!(
            host.metrics.plugin_rollbacks.get(),
            0,
            "v2 rolled back: {} failures under v2, {} calls",
            host.errors_by(&v2),
            host.calls_by(&v2)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    editor.abort();
    let (failures, calls) = (host.errors_by(&v2), host.calls_by(&v2));
    println!("under v2 in 20 s: {failures} failed calls of {calls} (all the tenant's)");
    assert!(
        failures > 2 * HEALTHY as u64 && 2 * failures > calls,
        "the tenant's objects kept failing under v2, more calls than not: {failures} of {calls}"
    );
    assert_eq!(host.plugin.current().digest(), v2, "v2 still serves");
    env.wait_event(
        "tenant-000",
        "PluginFailed",
        "misbehaving plugin: asked to panic",
        Duration::from_secs(10),
    )
    .await?;
    env.create("after-upgrade", 2, &[]).await?;
    env.wait_converged("after-upgrade", 2, Duration::from_secs(60))
        .await?;
    host.stop().await;
    Ok(())
}

/// Waits until the `count` objects named `app-…` run with a status message
/// that satisfies `message_ok`.
async fn wait_healthy(
    env: &TestEnv,
    count: usize,
    message_ok: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    wait_for(
        "the healthy objects to converge",
        Duration::from_secs(90),
        || async {
            let list = env.jinghzhus().list(&Default::default()).await?.items;
            Ok(list
                .iter()
                .filter(|jz| jz.name_any().starts_with("app-"))
                .filter(|jz| {
                    jz.status.as_ref().is_some_and(|s| {
                        s.state == "Running"
                            && s.current == jz.spec.desired
                            && message_ok(&s.message)
                    })
                })
                .count()
                == count)
        },
    )
    .await
}

/// Bumps an annotation on `tenant-000…` twice a second until aborted.
async fn edit_twice_a_second(api: Api<Jinghzhu>, count: usize) {
    for round in 0u64.. {
        for i in 0..count {
            let patch = serde_json::json!({
                "metadata": { "annotations": { "test.jinghzhu.io/edit": round.to_string() } }
            });
            let _ = api
                .patch(
                    &format!("tenant-{i:03}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Issue 40, hazard 6 (the downgrade policy): a source moving back to an
/// older version of the plugin that serves (same name, a lower version) is
/// refused by `plugin/downgrade` and the serving plugin keeps serving;
/// once the admin allows downgrades (`--plugin-allow-downgrade`) the older
/// build offered again serves. (A tag moved back to an older signed version
/// served again, and nothing said whether that was allowed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_version_of_the_serving_plugin_is_refused_unless_allowed() -> anyhow::Result<()> {
    let env = TestEnv::new("downgrade").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    let current = std::fs::read(plugin("misbehaving-plugin", &[]))?;
    let older = std::fs::read(plugin("misbehaving-plugin", &["older"]))?;
    std::fs::write(&live, &current)?;
    let host = RunningHost::start(&env, &live).await?;
    env.create("web", 1, &[]).await?;
    env.wait_converged("web", 1, Duration::from_secs(60))
        .await?;

    replace_file(&live, &older);
    wait_for(
        "the downgrade's refusal",
        Duration::from_secs(30),
        || async { Ok(host.metrics.plugin_swaps_refused.get() == 1) },
    )
    .await?;
    let refusal = host
        .history
        .lock()
        .map_err(|_| anyhow::anyhow!("history lock"))?
        .last_refusal
        .as_ref()
        .map(|r| r.outcome.clone())
        .unwrap_or_default();
    assert!(refusal.contains("plugin/downgrade"), "{refusal}");
    assert_eq!(host.plugin.current().digest(), digest_of(&current));
    env.scale("web", 2).await?;
    env.wait_converged("web", 2, Duration::from_secs(60))
        .await?;

    // The admin allows downgrades: the older build offered again serves
    // (the file moves away from it and back: a source offers what changed).
    host.plugin.allow_downgrades(true);
    replace_file(&live, &current);
    tokio::time::sleep(Duration::from_secs(1)).await;
    replace_file(&live, &older);
    wait_for("the allowed downgrade", Duration::from_secs(30), || async {
        Ok(host.plugin.current().digest() == digest_of(&older))
    })
    .await?;
    host.stop().await;
    Ok(())
}

/// `bytes` (a component) with a custom section `name` holding `payload`
/// appended: another digest, the same plugin.
fn with_custom_section(bytes: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut out = bytes.to_vec();
    out.push(0); // custom section
    leb128(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// Issue 40, hazard 8: a plugin source flipping between two builds of the
/// same plugin (two digests, one outcome) every second over converged
/// objects. A swap whose plugin reaches the same outcome writes no status
/// (the `reconciledBy` stamp alone is no change), and a flapping source's
/// moves are held and coalesced (counted in
/// `wasm_operator_plugin_swaps_coalesced_total`, shown on `/status` under
/// `swap/flapping`): the push, the one swap back, and the newest once the
/// source is quiet; not one swap per move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_plugin_source_costs_no_status_writes_and_few_swaps() -> anyhow::Result<()> {
    const OBJECTS: usize = 30;
    const FLIPS: usize = 11;
    let env = TestEnv::new("flap").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    let a = v1();
    let b = with_custom_section(&a, "build", b"a second build of the same plugin");
    let (a_digest, b_digest) = (digest_of(&a), digest_of(&b));
    std::fs::write(&live, &a)?;
    let host = RunningHost::start_with(&env, HostOptions::file(&live)).await?;
    create_many(&env, "jz", OBJECTS, 1, &[]).await?;
    wait_all(&env, OBJECTS, Duration::from_secs(120), |_| true).await?;
    // Settled: the last status writes and reconciles of the creates are done.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let patches = host.metrics.status_patches.get();
    let reconciles = host.metrics.reconciles.get();
    let started = Instant::now();

    // Flip every second: b, a, b, …, ending on b.
    for flip in 0..FLIPS {
        replace_file(&live, if flip % 2 == 0 { &b } else { &a });
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The newest offer serves once the interval since the last swap ends.
    wait_for(
        "the last build to serve",
        Duration::from_secs(60),
        || async { Ok(host.plugin.current().digest() == b_digest) },
    )
    .await?;
    wait_for(
        "every object reconciled by it",
        Duration::from_secs(60),
        || async { Ok(host.calls_by(&b_digest) >= OBJECTS as u64) },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.create("good", 2, &[]).await?;
    env.wait_converged("good", 2, Duration::from_secs(60))
        .await?;

    let swaps = host.metrics.plugin_swaps.get();
    let coalesced = host.metrics.plugin_swaps_coalesced.get();
    // The good object's own writes (its status, as its pods come up) aside.
    let writes = host.metrics.status_patches.get() - patches;
    let calls = host.metrics.reconciles.get() - reconciles;
    let history = host.history.lock().map(|h| h.clone()).unwrap_or_default();
    eprintln!(
        "flapping source: {FLIPS} moves in {:?} over {OBJECTS} converged objects: {swaps} swaps, \
         {coalesced} coalesced, {writes} status writes (the good neighbour's included), \
         {calls} reconciles; last coalesced: {:?}",
        started.elapsed(),
        history.last_coalesced.as_ref().map(|r| &r.outcome)
    );
    assert!(
        swaps <= 3,
        "{swaps} swaps for {FLIPS} moves: the push, the swap back and the newest"
    );
    assert!(coalesced >= 6, "{coalesced} coalesced");
    assert_eq!(history.swaps_coalesced, coalesced);
    assert!(
        history
            .last_coalesced
            .is_some_and(|r| r.outcome.contains(damper::RULE)),
        "the coalescing is reported on /status under its rule"
    );
    // The neighbour's status takes a few writes; the 30 converged objects none.
    assert!(
        writes <= 4,
        "{writes} status writes: the swaps restamped the converged objects"
    );
    let pods = env.pods().list(&Default::default()).await?.items;
    assert_eq!(
        pods.len(),
        OBJECTS + 2,
        "no pod beyond what the objects ask"
    );
    assert_eq!(host.errors_by(&a_digest) + host.errors_by(&b_digest), 0);
    host.stop().await;
    Ok(())
}

/// Issue 40, "bookkeeping that forgets": every plugin that ever served kept
/// its per-plugin metric series (calls, errors, durations, outcomes) for
/// the life of the host, so a long life of pushes grew `/metrics` without
/// end. The serving and previous plugins and the last
/// `RETIRED_PLUGIN_SERIES_KEPT` retired ones keep theirs; older ones' go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_series_of_long_retired_plugins_are_dropped() -> anyhow::Result<()> {
    use wasm_operator::slot::RETIRED_PLUGIN_SERIES_KEPT;
    use wasm_operator::telemetry::metrics::PluginLabels;
    let builds: Vec<Vec<u8>> = (0..RETIRED_PLUGIN_SERIES_KEPT + 4)
        .map(|i| with_custom_section(&v1(), "build", format!("build {i}").as_bytes()))
        .collect();
    let env = TestEnv::new("series").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    std::fs::write(&live, &builds[0])?;
    let host = RunningHost::start_with(&env, HostOptions::file(&live)).await?;
    host.plugin.set_min_swap_interval(Duration::ZERO);
    env.create("web", 1, &[]).await?;
    env.wait_converged("web", 1, Duration::from_secs(60))
        .await?;
    let calls = |digest: &str| {
        host.metrics
            .plugin_calls
            .get(&PluginLabels {
                plugin: digest.to_string(),
            })
            .map(|c| c.get())
    };
    for build in &builds[1..] {
        replace_file(&live, build);
        let digest = digest_of(build);
        // A swap re-queues the object: the new build is called.
        wait_for(
            "the build serving and called",
            Duration::from_secs(60),
            || async { Ok(host.plugin.current().digest() == digest && calls(&digest).is_some()) },
        )
        .await?;
    }
    let digests: Vec<String> = builds.iter().map(|b| digest_of(b)).collect();
    let (dropped, kept) = digests.split_at(2);
    for digest in dropped {
        assert_eq!(calls(digest), None, "{digest}'s series dropped");
    }
    for digest in kept {
        assert!(calls(digest).is_some(), "{digest}'s series kept");
    }
    host.stop().await;
    Ok(())
}

/// Replaces `cm`'s `plugin.wasm` with `bytes` as `kubectl apply` would.
async fn apply_plugin_configmap(
    maps: &Api<ConfigMap>,
    cm: &str,
    bytes: Vec<u8>,
) -> anyhow::Result<()> {
    let apply = PatchParams::apply("kubectl-client-side-apply").force();
    maps.patch(
        cm,
        &apply,
        &Patch::Apply(&e2e_tests::plugin_configmap(cm, bytes)),
    )
    .await?;
    Ok(())
}

/// Writes `bytes` to the plugin file and waits until they serve; returns
/// how long that took and the swap latency the host recorded.
async fn swap_file_and_wait(
    host: &RunningHost,
    live: &Path,
    bytes: &[u8],
) -> anyhow::Result<(Duration, u64)> {
    let digest = digest_of(bytes);
    let started = Instant::now();
    replace_file(live, bytes);
    wait_for(
        "the new plugin serving",
        Duration::from_secs(30),
        || async { Ok(host.plugin.serving().is_some_and(|p| p.digest() == digest)) },
    )
    .await?;
    let took = started.elapsed();
    let latency = host
        .history
        .lock()
        .map_err(|_| anyhow::anyhow!("history lock"))?
        .last_swap
        .as_ref()
        .map_or(u64::MAX, |r| r.latency_ms);
    Ok((took, latency))
}

/// Round four, hazard 12: the swap back to v1 that a person made 10 s
/// after swapping to v2 waited 9.7 s for `--min-swap-interval-secs`
/// (`swap_latency_ms=9700`); the README promises swaps in milliseconds.
/// Under the default quiet interval (10 s), a push after a quiet period
/// swaps at once, and so does going back to the plugin before it 2 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_swapping_back_within_seconds_is_not_held() -> anyhow::Result<()> {
    let env = TestEnv::new("swap-back").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    std::fs::write(&live, v1())?;
    let host = RunningHost::start(&env, &live).await?;
    assert_eq!(
        host.plugin.quiet_interval(),
        wasm_operator::slot::DEFAULT_MIN_SWAP_INTERVAL,
        "the default quiet interval"
    );
    env.create("web", 1, &[]).await?;
    env.wait_converged("web", 1, Duration::from_secs(60))
        .await?;
    let (push, push_latency) = swap_file_and_wait(&host, &live, &v2()).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (back, back_latency) = swap_file_and_wait(&host, &live, &v1()).await?;
    eprintln!(
        "measured: push to v2 served in {push:?} (swap_latency_ms={push_latency}); the swap back \
         to v1 2 s later served in {back:?} (swap_latency_ms={back_latency})"
    );
    anyhow::ensure!(
        back < Duration::from_secs(1) && back_latency < 1000,
        "the swap back was held: {back:?} (swap_latency_ms={back_latency})"
    );
    env.scale("web", 2).await?;
    let (jz, _) = env
        .wait_converged("web", 2, Duration::from_secs(60))
        .await?;
    let message = jz.status.map(|s| s.message).unwrap_or_default();
    anyhow::ensure!(!message.starts_with(V2_PREFIX), "v1 serves: {message}");
    anyhow::ensure!(host.metrics.plugin_swaps_coalesced.get() == 0);
    host.stop().await;
    Ok(())
}

/// Round four, hazard 12: a tag flipping between two signed plugins every
/// 4 s for 40 s (50 objects) made 4 swaps and 200 status patches: a fixed
/// interval let a flapping source through once per interval for as long
/// as it flapped. A ConfigMap flipped between v1 and v2 (other messages:
/// every swap restamps every object) every second for 20 s, with a quiet
/// interval of 2 s: the push and the swap back pass, the rest is held as
/// flapping (`swap/flapping`: a Warning on the ConfigMap, `/status`
/// `flapping`, the metrics) and only the newest is swapped in once the
/// source is quiet. At most 3 swaps, and status patches that follow the
/// swaps, not the moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_configmap_is_held_and_swaps_a_bounded_number_of_times() -> anyhow::Result<()> {
    const OBJECTS: usize = 20;
    const FLIPS: usize = 21; // v2, v1, …, v2
    const QUIET: Duration = Duration::from_secs(2);
    const MOST_SWAPS: u64 = 3;
    let env = TestEnv::new("flap-cm").await?;
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let cm = "operator-plugin";
    apply_plugin_configmap(&maps, cm, v1()).await?;
    let mut options = HostOptions::file(Path::new("-"));
    options.source = PluginSource::ConfigMap {
        namespace: env.namespace.clone(),
        name: cm.into(),
        key: "plugin.wasm".into(),
    };
    let host = RunningHost::start_with(&env, options).await?;
    host.plugin.set_min_swap_interval(QUIET);
    create_many(&env, "jz", OBJECTS, 1, &[]).await?;
    wait_all(&env, OBJECTS, Duration::from_secs(120), |m| {
        !m.starts_with(V2_PREFIX)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (patches, reconciles) = (
        host.metrics.status_patches.get(),
        host.metrics.reconciles.get(),
    );
    let started = Instant::now();
    let mut seen_flapping = None;
    // Moves meant 1 s apart; on a loaded machine an apply can take longer
    // than the quiet interval, and a move after a quiet interval is a
    // person's, which swaps at once: each such move may add one swap.
    let mut last_move: Option<Instant> = None;
    let mut quiet_moves = 0u64;
    for flip in 0..FLIPS {
        let bytes = if flip % 2 == 0 { v2() } else { v1() };
        apply_plugin_configmap(&maps, cm, bytes).await?;
        if last_move.is_some_and(|at| at.elapsed() >= QUIET) {
            quiet_moves += 1;
        }
        last_move = Some(Instant::now());
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(flap) = host.history.lock().ok().and_then(|h| h.flapping.clone()) {
            seen_flapping = Some(flap);
        }
    }
    let flapped = started.elapsed();
    wait_all(&env, OBJECTS, Duration::from_secs(90), |m| {
        m.starts_with(V2_PREFIX)
    })
    .await?;
    let settled = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let warning = env
        .events_on("ConfigMap", cm)
        .await?
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(damper::FLAPPING_REASON))
        .and_then(|e| e.message)
        .unwrap_or_default();
    let swaps = host.metrics.plugin_swaps.get();
    let writes = host.metrics.status_patches.get() - patches;
    let calls = host.metrics.reconciles.get() - reconciles;
    let coalesced = host.metrics.plugin_swaps_coalesced.get();
    let flaps = host.metrics.plugin_source_flaps.get();
    eprintln!(
        "measured: {FLIPS} moves in {flapped:?} over {OBJECTS} objects (quiet {QUIET:?}): {swaps} swaps, \
         {writes} status patches, {calls} reconciles, {coalesced} coalesced, {flaps} flaps; v2 \
         everywhere {settled:?} after the first move; {quiet_moves} moves after a quiet interval; \
         /status flapping: {seen_flapping:?}; Warning: {warning}"
    );
    let flap = seen_flapping.ok_or_else(|| anyhow::anyhow!("/status never showed the flap"))?;
    anyhow::ensure!(flap.rule == damper::RULE, "{flap:?}");
    let most_swaps = MOST_SWAPS + quiet_moves;
    anyhow::ensure!(
        swaps <= most_swaps,
        "{swaps} swaps for {FLIPS} moves of a flapping source ({quiet_moves} of them after a quiet interval)"
    );
    anyhow::ensure!(
        writes <= swaps * OBJECTS as u64 + 2,
        "{writes} status patches for {swaps} swaps over {OBJECTS} objects"
    );
    anyhow::ensure!(flaps >= 1 && coalesced >= (FLIPS as u64).saturating_sub(most_swaps + 1));
    anyhow::ensure!(
        warning.contains(damper::RULE),
        "no Warning naming {} on the ConfigMap: {warning:?}",
        damper::RULE
    );
    // The flap ends once the source has been quiet for its hold (at most
    // 8 quiet intervals after the last move).
    wait_for(
        "the flap ended",
        QUIET * 8 + Duration::from_secs(10),
        || async {
            Ok(host
                .history
                .lock()
                .map(|h| h.flapping.is_none())
                .unwrap_or(false))
        },
    )
    .await?;
    host.stop().await;
    Ok(())
}
