//! `examples/deploy` end to end, on the real control plane: the kustomize base
//! is accepted by the API server and meets the restricted Pod Security
//! profile; the Dockerfile's build command produces the binary these tests
//! run; and that binary, run as the Deployment runs it (its environment, its
//! ServiceAccount and RBAC, the plugin from the generated ConfigMap), elects
//! one leader among two processes, hands over after `kill -9` and SIGTERM
//! without over-creating, and serves controller-runtime's metrics and the
//! probes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use e2e_tests::deploy::{
    Installed, Kustomization, ProcessHost, apply_chart, dockerfile_binary,
    dockerfile_build_command, host_binary, install, kubectl, object_of,
};
use e2e_tests::{TestEnv, plugin, wait_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use openmetrics_parser::OpenMetricsType;
use wasm_operator::runtime::digest_of;

const CONVERGE: Duration = Duration::from_secs(120);
/// The Deployment's lease duration (controller-runtime's default).
const LEASE_DURATION: Duration = Duration::from_secs(15);

fn replicaset() -> std::path::PathBuf {
    plugin("replicaset-plugin", &[])
}

/// Renders the base with the example plugin and installs its RBAC,
/// ServiceAccount and plugin ConfigMap in a fresh namespace.
async fn installed(prefix: &str) -> anyhow::Result<(TestEnv, Installed)> {
    let env = TestEnv::new(prefix).await?;
    let base = Kustomization::with_plugin(&replicaset())?;
    let objects = base.render(env.control_plane)?;
    let installed = install(&env, &objects).await?;
    Ok((env, installed))
}

/// Who holds the Lease the Deployment configures.
async fn lease_holder(env: &TestEnv) -> anyhow::Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    Ok(leases
        .get_opt("wasm-operator")
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// Waits until `host` holds the Lease; returns how long that took.
async fn wait_holder(env: &TestEnv, host: &str, timeout: Duration) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        if lease_holder(env).await?.as_deref() == Some(host) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            anyhow::bail!(
                "{host} did not take the Lease within {timeout:?} (holder: {:?})",
                lease_holder(env).await?
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Reconciles a host did, by `controller_runtime_reconcile_total`.
async fn reconciles(host: &mut ProcessHost) -> anyhow::Result<f64> {
    Ok(host.scrape().await?.sum("controller_runtime_reconcile"))
}

/// Every pod UID ever seen per owning Jinghzhu (by the `jinghzhu.io/owner`
/// label), from a watch: a create that was undone quickly still counts.
#[derive(Clone, Default)]
struct CreatedPods(Arc<Mutex<BTreeMap<String, HashSet<String>>>>);

impl CreatedPods {
    fn watch(env: &TestEnv) -> Self {
        let seen = Self::default();
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
        let record = seen.clone();
        tokio::spawn(async move {
            let mut stream = watcher(pods, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(pod)) = stream.next().await {
                if let (Some(owner), Some(uid)) = (pod.labels().get("jinghzhu.io/owner"), pod.uid())
                {
                    record
                        .0
                        .lock()
                        .expect("lock")
                        .entry(owner.clone())
                        .or_default()
                        .insert(uid);
                }
            }
        });
        seen
    }

    fn of(&self, owner: &str) -> usize {
        self.0
            .lock()
            .expect("lock")
            .get(owner)
            .map_or(0, HashSet::len)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kustomize_base_is_accepted_by_the_api_server_and_meets_the_restricted_profile()
-> anyhow::Result<()> {
    let env = TestEnv::new("deploy-dry-run").await?;
    let cp = env.control_plane;
    let plugin_path = replicaset();
    let base = Kustomization::with_plugin(&plugin_path)?;
    let objects = base.render(cp)?;

    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    ] {
        assert!(kinds.contains(kind), "no {kind} in the base: {kinds:?}");
    }
    // The plugin travels as binaryData under a stable name the host watches.
    let configmap: ConfigMap = object_of(&objects, "ConfigMap")?;
    assert_eq!(configmap.name_any(), "wasm-operator-plugin");
    let bytes = configmap
        .binary_data
        .as_ref()
        .and_then(|d| d.get("plugin.wasm"))
        .map(|b| b.0.clone())
        .expect("plugin.wasm in binaryData");
    assert_eq!(digest_of(&bytes), digest_of(&std::fs::read(&plugin_path)?));
    let deployment: Deployment = object_of(&objects, "Deployment")?;
    let spec = deployment.spec.clone().expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let container = &spec.template.spec.as_ref().expect("pod spec").containers[0];
    let env_of = |name: &str| {
        container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not set on the container"))
    };
    assert_eq!(
        env_of("WASM_OPERATOR_LEADER_ELECT").value.as_deref(),
        Some("true")
    );
    assert_eq!(
        env_of("POD_NAME")
            .value_from
            .and_then(|v| v.field_ref)
            .map(|f| f.field_path),
        Some("metadata.name".to_string())
    );
    assert_eq!(
        env_of("WASM_OPERATOR_PLUGIN_CONFIGMAP").value.as_deref(),
        Some("$(POD_NAMESPACE)/wasm-operator-plugin")
    );
    // Every WASM_OPERATOR_* variable the manifest sets is one `run` reads
    // (a retired or misspelt name would be ignored, with at most a warning).
    let help = std::process::Command::new(host_binary())
        .args(["run", "--help"])
        .output()?;
    let help = String::from_utf8_lossy(&help.stdout);
    for var in container.env.iter().flatten() {
        if var.name.starts_with("WASM_OPERATOR_") {
            assert!(
                help.contains(&format!("[env: {}=", var.name)),
                "the Deployment sets {}, which `wasm-operator run` does not read",
                var.name
            );
        }
    }

    // The namespace for real (its Pod Security labels apply to the dry run),
    // then everything as a server-side dry run.
    let dir = tempfile::TempDir::new()?;
    let namespace_file = dir.path().join("namespace.yaml");
    let namespace = objects
        .iter()
        .find(|o| o["kind"].as_str() == Some("Namespace"))
        .expect("namespace");
    std::fs::write(&namespace_file, serde_yaml::to_string(namespace)?)?;
    let out = kubectl(cp, &["apply", "-f", &namespace_file.to_string_lossy()])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(
        cp,
        &[
            "apply",
            "--dry-run=server",
            "-k",
            &base.path().to_string_lossy(),
        ],
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "dry run refused:\n{stdout}\n{stderr}");
    for accepted in [
        "deployment.apps/wasm-operator",
        "configmap/wasm-operator-plugin",
        "role.rbac.authorization.k8s.io/wasm-operator",
        "poddisruptionbudget.policy/wasm-operator",
        "service/wasm-operator-metrics",
    ] {
        assert!(
            stdout.contains(accepted),
            "{accepted} missing from:\n{stdout}"
        );
    }
    assert!(
        !stderr.contains("would violate PodSecurity"),
        "the Deployment breaks the restricted profile:\n{stderr}"
    );

    // The same check catches a pod template that is not restricted.
    let mut loose = serde_yaml::to_value(&deployment)?;
    loose["spec"]["template"]["spec"]["containers"][0]
        .as_mapping_mut()
        .expect("container")
        .remove("securityContext");
    let loose_file = dir.path().join("loose.yaml");
    std::fs::write(&loose_file, serde_yaml::to_string(&loose)?)?;
    let out = kubectl(
        cp,
        &[
            "apply",
            "--dry-run=server",
            "-f",
            &loose_file.to_string_lossy(),
        ],
    )?;
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("would violate PodSecurity"),
        "a container without a securityContext was not flagged: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn the_dockerfile_builds_the_binary_these_tests_run() -> anyhow::Result<()> {
    let argv = dockerfile_build_command()?;
    // The `dist` profile: release with whole-program LTO (see Cargo.toml).
    assert_eq!(
        &argv[..5],
        ["cargo", "build", "--profile", "dist", "--locked"],
        "{argv:?}"
    );
    let binary = host_binary();
    assert_eq!(binary, dockerfile_binary()?);
    let out = std::process::Command::new(&binary)
        .arg("--version")
        .output()?;
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("wasm-operator "));
    // The compile helper ships beside it, from a build of its own.
    let commands = e2e_tests::deploy::dockerfile_build_commands()?;
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert!(
        commands[1].contains(&"wasm-operator-compile".to_string()),
        "{commands:?}"
    );
    let helper = e2e_tests::deploy::compile_helper_binary();
    let out = std::process::Command::new(&helper)
        .arg("--version")
        .output()?;
    assert!(out.status.success(), "{}: {out:?}", helper.display());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("wasm-operator-compile "));
    let dockerfile = std::fs::read_to_string(e2e_tests::deploy::deploy_dir().join("Dockerfile"))?;
    assert!(dockerfile.contains("FROM gcr.io/distroless/cc-debian12:nonroot"));
    assert!(dockerfile.contains("USER 65532:65532"), "a non-root user");
    assert!(dockerfile.contains("ENTRYPOINT [\"/usr/local/bin/wasm-operator\"]"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_serves_controller_runtime_metrics_probes_and_its_bound_address()
-> anyhow::Result<()> {
    let (env, installed) = installed("deploy-metrics").await?;
    let mut host = ProcessHost::start(&host_binary(), &installed, "replica-a", &[])?;
    let addr = host.metrics_addr(Duration::from_secs(60)).await?;
    assert_ne!(addr.port(), 0, "the log gives the bound port");
    host.wait_ready().await?;
    let (code, body) = host.get("/healthz").await?;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("[+]controller-loop ok"), "{body}");
    wait_holder(&env, "replica-a", Duration::from_secs(30)).await?;
    let (_, status) = host.get("/status").await?;
    let status: serde_json::Value = serde_json::from_str(&status)?;
    assert_eq!(status["metricsAddr"], addr.to_string());
    assert_eq!(status["leaderElection"]["leading"], true);
    assert_eq!(
        status["leaderElection"]["lease"],
        format!("{}/wasm-operator", env.namespace)
    );

    env.create("web", 2, &[]).await?;
    env.wait_converged("web", 2, CONVERGE).await?;
    let scrape = host.scrape().await?;
    use OpenMetricsType::{Counter, Gauge, Histogram};
    for (name, kind, labels) in [
        (
            "controller_runtime_reconcile",
            Counter,
            &["controller", "result"][..],
        ),
        (
            "controller_runtime_reconcile_errors",
            Counter,
            &["controller"][..],
        ),
        (
            "controller_runtime_terminal_reconcile_errors",
            Counter,
            &["controller"][..],
        ),
        (
            "controller_runtime_reconcile_time_seconds",
            Histogram,
            &["controller"][..],
        ),
        (
            "controller_runtime_max_concurrent_reconciles",
            Gauge,
            &["controller"][..],
        ),
        (
            "controller_runtime_active_workers",
            Gauge,
            &["controller"][..],
        ),
        ("workqueue_depth", Gauge, &["name", "controller"][..]),
        ("workqueue_adds", Counter, &["name", "controller"][..]),
        (
            "workqueue_queue_duration_seconds",
            Histogram,
            &["name", "controller"][..],
        ),
        (
            "workqueue_work_duration_seconds",
            Histogram,
            &["name", "controller"][..],
        ),
        ("workqueue_retries", Counter, &["name", "controller"][..]),
        (
            "workqueue_unfinished_work_seconds",
            Gauge,
            &["name", "controller"][..],
        ),
        (
            "workqueue_longest_running_processor_seconds",
            Gauge,
            &["name", "controller"][..],
        ),
        ("leader_election_master_status", Gauge, &["name"][..]),
        (
            "wasm_operator_plugin_call_duration_seconds",
            Histogram,
            &["plugin", "version", "digest"][..],
        ),
        (
            "wasm_operator_plugin_call_outcomes",
            Counter,
            &["plugin", "version", "digest", "outcome"][..],
        ),
        ("wasm_operator_reconciles", Counter, &[][..]),
    ] {
        let family = scrape.family(name)?;
        assert_eq!(family.family_type, kind, "{name}");
        let mut names: Vec<&str> = family
            .get_label_names()
            .iter()
            .map(String::as_str)
            .filter(|l| *l != "le")
            .collect();
        names.sort_unstable();
        let mut expected = labels.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected, "labels of {name}");
        assert!(
            family.iter_samples().next().is_some(),
            "{name} has no sample"
        );
    }
    let controller = [("controller", "jinghzhu")];
    assert!(
        scrape.values(
            "controller_runtime_reconcile",
            &[("controller", "jinghzhu"), ("result", "success")]
        )[0] >= 1.0
    );
    assert_eq!(
        scrape.values("controller_runtime_max_concurrent_reconciles", &controller),
        [4.0]
    );
    assert!(scrape.values("controller_runtime_reconcile_time_seconds", &controller)[0] >= 1.0);
    assert_eq!(
        scrape.values(
            "leader_election_master_status",
            &[("name", "wasm-operator")]
        ),
        [1.0]
    );
    let digest = digest_of(&std::fs::read(replicaset())?);
    let ok = scrape.values(
        "wasm_operator_plugin_call_outcomes",
        &[("digest", digest.as_str()), ("outcome", "ok")],
    );
    assert!(
        ok.first().is_some_and(|v| *v >= 1.0),
        "ok outcomes for {digest}: {ok:?}"
    );
    assert!(
        scrape.values(
            "wasm_operator_plugin_call_duration_seconds",
            &[("digest", digest.as_str())]
        )[0] >= 1.0
    );
    assert!(scrape.sum("workqueue_adds") >= 1.0);

    host.sigterm();
    let exit = host.wait_exit(Duration::from_secs(30)).await?;
    assert!(exit.success(), "{exit}: {}", host.log_tail(20));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_after_kill_9_the_standby_takes_over_without_over_creating()
-> anyhow::Result<()> {
    let (env, installed) = installed("deploy-kill").await?;
    let binary = host_binary();
    let mut a = ProcessHost::start(&binary, &installed, "replica-a", &[])?;
    wait_holder(&env, "replica-a", Duration::from_secs(60)).await?;
    let mut b = ProcessHost::start(&binary, &installed, "replica-b", &[])?;
    b.wait_ready().await?;

    let created = CreatedPods::watch(&env);
    env.create("web", 3, &[]).await?;
    env.wait_converged("web", 3, CONVERGE).await?;
    assert!(reconciles(&mut a).await? >= 1.0, "the leader reconciled");
    assert_eq!(
        reconciles(&mut b).await?,
        0.0,
        "the standby never reconciles"
    );
    let standby = b.scrape().await?;
    assert_eq!(standby.sum("wasm_operator_plugin_call_outcomes"), 0.0);
    assert_eq!(
        standby.values(
            "leader_election_master_status",
            &[("name", "wasm-operator")]
        ),
        [0.0]
    );
    assert!(
        standby.sum("workqueue_depth") >= 1.0,
        "the standby's queue holds the object, warm"
    );

    // Scale 0 -> 50 and kill the leader while it creates: once its first
    // three slow-start batches (1 + 2 + 4) are in, more than the 3 the
    // standby saw when `web` was created, so a new leader that acted on the
    // spec it was first handed (not the one cached when it took over)
    // would delete pods and make them again.
    env.scale("web", 0).await?;
    env.wait_converged("web", 0, CONVERGE).await?;
    let before = created.of("web");
    env.scale("web", 50).await?;
    let deadline = Instant::now() + CONVERGE;
    while created.of("web") - before < 7 {
        assert!(
            Instant::now() < deadline,
            "the leader never started creating"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.kill9();
    let killed = Instant::now();
    let at_kill = created.of("web") - before;
    let takeover = wait_holder(&env, "replica-b", LEASE_DURATION + Duration::from_secs(10)).await?;
    println!("kill -9 with {at_kill} of 50 pods created; the standby took over after {takeover:?}");
    assert!(
        takeover <= LEASE_DURATION + Duration::from_secs(5),
        "takeover took {takeover:?}"
    );
    env.wait_converged("web", 50, CONVERGE).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        created.of("web") - before,
        50,
        "exactly 50 pods were ever created for the scale-up (no double creates across the takeover); \
         replica-b's last log lines:\n{}\n(kill -9 with {at_kill} created, takeover after {takeover:?}) timelines:\n{}{}",
        b.log_tail(40),
        a.timeline(),
        b.timeline()
    );
    assert!(
        reconciles(&mut b).await? >= 1.0,
        "the new leader reconciled"
    );
    assert!(killed.elapsed() < CONVERGE + LEASE_DURATION);
    b.sigterm();
    assert!(b.wait_exit(Duration::from_secs(30)).await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_running_reconciles_finish_releases_the_lease_and_hands_over_in_under_3s()
-> anyhow::Result<()> {
    let (env, installed) = installed("deploy-term").await?;
    let binary = host_binary();
    // Each reconcile's start and end are debug lines: counted below.
    let reconciles_logged = [(
        "RUST_LOG",
        "info,wasm_operator::controller::reconcile=debug",
    )];
    let mut a = ProcessHost::start(&binary, &installed, "replica-a", &reconciles_logged)?;
    wait_holder(&env, "replica-a", Duration::from_secs(60)).await?;
    let mut b = ProcessHost::start(&binary, &installed, "replica-b", &[])?;
    b.wait_ready().await?;

    let created = CreatedPods::watch(&env);
    let names: Vec<String> = (0..8).map(|i| format!("web-{i}")).collect();
    futures::future::try_join_all(names.iter().map(|n| env.create_owned(n.clone(), 10, &[])))
        .await?;
    wait_for("reconciles running on the leader", CONVERGE, || async {
        Ok(a.count_logged("reconcile start") > 0)
    })
    .await
    .with_context(|| format!("replica-a's last lines:\n{}", a.log_tail(20)))?;
    let started = a.count_logged("reconcile start");
    let done = a.count_logged("reconcile done");
    a.sigterm();
    let signalled = Instant::now();
    let handover = wait_holder(&env, "replica-b", Duration::from_secs(10)).await?;
    let exit = a.wait_exit(Duration::from_secs(30)).await?;
    let exited = signalled.elapsed();
    println!(
        "SIGTERM with {} reconciles running: handover after {handover:?}, exit {exit} after {exited:?}",
        started.saturating_sub(done)
    );
    assert!(
        exit.success(),
        "exit 0 after a graceful stop: {exit}\n{}",
        a.log_tail(30)
    );
    assert!(
        exited < Duration::from_secs(15),
        "well within the 30 s grace period: {exited:?}"
    );
    assert!(
        handover < Duration::from_secs(3),
        "handover took {handover:?}"
    );
    assert_eq!(
        a.count_logged("leader election: released the Lease for the next host"),
        1
    );
    assert_eq!(
        a.count_logged("leadership lost mid-reconcile; cancelled (the next leader reconciles it)"),
        0,
        "no reconcile was cut short"
    );
    // Every reconcile that started on the old leader ended (done or a logged failure).
    let ended = a.count_logged("reconcile done")
        + a.count_logged("plugin failed")
        + a.count_logged("applying failed part-way; will retry")
        + a.count_logged("plugin output rejected; nothing applied");
    assert_eq!(
        a.count_logged("reconcile start"),
        ended,
        "{}",
        a.log_tail(40)
    );

    for name in &names {
        env.wait_converged(name, 10, CONVERGE).await?;
        assert_eq!(created.of(name), 10, "{name}: exactly 10 pods ever created");
    }
    assert!(reconciles(&mut b).await? >= 1.0);
    b.sigterm();
    assert!(b.wait_exit(Duration::from_secs(30)).await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_and_a_standby_with_different_plugin_versions_do_not_ping_pong()
-> anyhow::Result<()> {
    let (env, installed) = installed("deploy-versions").await?;
    let binary = host_binary();
    let v2 = plugin("replicaset-plugin", &["v2"]);
    let v2_path = v2.to_string_lossy().into_owned();
    let mut a = ProcessHost::start(&binary, &installed, "replica-a", &[])?;
    wait_holder(&env, "replica-a", Duration::from_secs(60)).await?;
    // The standby runs another build (as during a rolling update to a new image).
    let mut b = ProcessHost::start(
        &binary,
        &installed,
        "replica-b",
        &[
            ("WASM_OPERATOR_PLUGIN_CONFIGMAP", ""),
            ("WASM_OPERATOR_PLUGIN", &v2_path),
        ],
    )?;
    b.wait_ready().await?;

    let names: Vec<String> = (0..4).map(|i| format!("web-{i}")).collect();
    futures::future::try_join_all(names.iter().map(|n| env.create_owned(n.clone(), 1, &[])))
        .await?;
    for name in &names {
        env.wait_converged(name, 1, CONVERGE).await?;
    }
    let snapshot = || async {
        let mut seen = BTreeMap::new();
        for jz in env.jinghzhus().list(&Default::default()).await?.items {
            seen.insert(
                jz.name_any(),
                (
                    jz.resource_version().unwrap_or_default(),
                    jz.status.and_then(|s| s.reconciled_by).unwrap_or_default(),
                ),
            );
        }
        anyhow::Ok(seen)
    };
    let settled = snapshot().await?;
    assert!(
        settled.values().all(|(_, by)| !by.contains("+v2")),
        "the v1 leader reconciled everything: {settled:?}"
    );
    // Three renew periods: nothing changes hands, nothing is rewritten.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        snapshot().await?,
        settled,
        "objects were rewritten while nothing changed"
    );
    assert_eq!(reconciles(&mut b).await?, 0.0);

    // After a handover the v2 host reconciles everything once, and it stays that way.
    a.sigterm();
    wait_holder(&env, "replica-b", Duration::from_secs(10)).await?;
    wait_for(
        "the new leader's plugin on every object",
        CONVERGE,
        || async { Ok(snapshot().await?.values().all(|(_, by)| by.contains("+v2"))) },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = snapshot().await?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(snapshot().await?, after, "no ping-pong after the handover");
    assert!(a.wait_exit(Duration::from_secs(30)).await?.success());
    b.sigterm();
    assert!(b.wait_exit(Duration::from_secs(30)).await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_swap_through_the_configmap_reaches_the_leader_and_the_standby()
-> anyhow::Result<()> {
    let (env, installed) = installed("deploy-swap").await?;
    let binary = host_binary();
    let mut a = ProcessHost::start(&binary, &installed, "replica-a", &[])?;
    wait_holder(&env, "replica-a", Duration::from_secs(60)).await?;
    let mut b = ProcessHost::start(&binary, &installed, "replica-b", &[])?;
    b.wait_ready().await?;
    env.create("web", 1, &[]).await?;
    env.wait_converged("web", 1, CONVERGE).await?;

    let v2 = std::fs::read(plugin("replicaset-plugin", &["v2"]))?;
    let v2_digest = digest_of(&v2);
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let patch = serde_json::json!({ "binaryData": { "plugin.wasm": k8s_openapi::ByteString(v2) } });
    configmaps
        .patch(
            &installed.plugin_configmap,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    for host in [&mut a, &mut b] {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, status) = host.get("/status").await?;
            let status: serde_json::Value = serde_json::from_str(&status)?;
            if status["plugin"]["digest"] == v2_digest.as_str() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} still serves {}",
                host.name,
                status["plugin"]
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The leader reconciles with it; the standby vetted and loaded it too, without reconciling.
    wait_for(
        "the object reconciled by the new plugin",
        CONVERGE,
        || async {
            let jz = env.jinghzhus().get("web").await?;
            Ok(jz
                .status
                .and_then(|s| s.reconciled_by)
                .is_some_and(|by| by.contains("+v2")))
        },
    )
    .await?;
    assert_eq!(reconciles(&mut b).await?, 0.0);
    assert_eq!(b.scrape().await?.sum("wasm_operator_plugin_swaps"), 1.0);
    for host in [&a, &b] {
        host.sigterm();
    }
    assert!(a.wait_exit(Duration::from_secs(30)).await?.success());
    assert!(b.wait_exit(Duration::from_secs(30)).await?.success());
    Ok(())
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// The figures in docs/performance.md: takeover after `kill -9` and after SIGTERM
/// (median of 5 each) and the standby's memory next to the leader's, with
/// 20 objects of 5 pods in the caches. Run with
/// `cargo test -p e2e-tests --test deploy measure -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement (about 2 minutes); run it on purpose"]
async fn measure_takeover_times_and_standby_memory() -> anyhow::Result<()> {
    let (env, installed) = installed("deploy-measure").await?;
    let binary = host_binary();
    let mut serial = 0;
    fn next(serial: &mut u32) -> String {
        *serial += 1;
        format!("replica-{serial}")
    }
    let mut leader = ProcessHost::start(&binary, &installed, &next(&mut serial), &[])?;
    let leader_name = leader.name.clone();
    wait_holder(&env, &leader_name, Duration::from_secs(60)).await?;
    let mut standby = ProcessHost::start(&binary, &installed, &next(&mut serial), &[])?;
    standby.wait_ready().await?;

    let names: Vec<String> = (0..20).map(|i| format!("web-{i}")).collect();
    futures::future::try_join_all(names.iter().map(|n| env.create_owned(n.clone(), 5, &[])))
        .await?;
    for name in &names {
        env.wait_converged(name, 5, CONVERGE).await?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (leader_rss, standby_rss) = (leader.rss_kib(), standby.rss_kib());
    println!(
        "RSS with 20 objects / 100 pods cached: leader {leader_rss:?} KiB, standby {standby_rss:?} KiB"
    );

    let mut results = BTreeMap::new();
    for (how, kill) in [("kill -9", true), ("SIGTERM", false)] {
        let mut times = Vec::new();
        for _ in 0..5 {
            if kill {
                leader.kill9();
            } else {
                leader.sigterm();
            }
            let took = wait_holder(
                &env,
                &standby.name,
                LEASE_DURATION + Duration::from_secs(10),
            )
            .await?;
            times.push(took);
            let _ = leader.wait_exit(Duration::from_secs(30)).await;
            leader = standby;
            standby = ProcessHost::start(&binary, &installed, &next(&mut serial), &[])?;
            standby.wait_ready().await?;
            tokio::time::sleep(Duration::from_secs(3)).await; // a few renewals seen
        }
        println!(
            "takeover after {how}: {times:?}, median {:?}",
            median(times.clone())
        );
        results.insert(how, median(times));
    }
    println!("SUMMARY {results:?}; RSS leader {leader_rss:?} KiB, standby {standby_rss:?} KiB");
    Ok(())
}

/// The Helm chart, rendered with `helm template` and applied for real: the
/// API server accepts every object (the CRDs, the JinghzhuPlugin, RBAC named
/// after the release, the Deployment, with no restricted Pod Security
/// warning), and the binary run as the chart's Deployment runs it (its
/// environment, its ServiceAccount) serves the plugin the chart's
/// JinghzhuPlugin names, reports it in the resource's status, and converges
/// objects.
/// The chart rendered as release `release` into `ns`, serving the
/// replicaset plugin from the chart's ConfigMap through the JinghzhuPlugin
/// named after `ns`, with `values` (`--set` pairs) on top.
fn render_chart(
    release: &str,
    ns: &str,
    values: &[&str],
) -> anyhow::Result<Vec<serde_yaml::Value>> {
    let plugin_wasm = format!("plugin.wasm={}", replicaset().display());
    let resource_name = format!("plugin.resourceName={ns}");
    let mut args = vec!["--set-file", &plugin_wasm, "--set", &resource_name];
    for value in values {
        args.extend(["--set", value]);
    }
    e2e_tests::deploy::helm_template(release, ns, &args)
}

/// The operator container of the chart's Deployment.
fn operator_container(
    objects: &[serde_yaml::Value],
) -> anyhow::Result<k8s_openapi::api::core::v1::Container> {
    let deployment: Deployment = object_of(objects, "Deployment")?;
    deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .ok_or_else(|| anyhow::anyhow!("the chart's Deployment has no container"))
}

/// Deletes the cluster-scoped objects of release `release` (its
/// JinghzhuPlugin `plugin`, ClusterRole and ClusterRoleBinding).
async fn remove_cluster_objects(env: &TestEnv, release: &str, plugin: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use wasm_operator::crd::plugin::JinghzhuPlugin;
    let name = format!("{release}-wasm-operator");
    let _ = Api::<JinghzhuPlugin>::all(env.client.clone())
        .delete(plugin, &Default::default())
        .await;
    let _ = Api::<ClusterRoleBinding>::all(env.client.clone())
        .delete(&name, &Default::default())
        .await;
    let _ = Api::<ClusterRole>::all(env.client.clone())
        .delete(&name, &Default::default())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helm_chart_installs_and_its_host_serves_the_plugin_resource() -> anyhow::Result<()> {
    use wasm_operator::crd::plugin::JinghzhuPlugin;

    let env = TestEnv::new("helm").await?;
    let cp = env.control_plane;
    let ns = env.namespace.clone();
    let release = "e2e";
    let plugin_path = replicaset();
    let objects = render_chart(
        release,
        &ns,
        &["podPolicy.policy=restricted", "plugin.podPolicy=baseline"],
    )?;
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "JinghzhuPlugin",
    ] {
        assert!(kinds.contains(kind), "no {kind} in the chart: {kinds:?}");
    }
    let configmap: ConfigMap = object_of(&objects, "ConfigMap")?;
    let bytes = configmap
        .binary_data
        .as_ref()
        .and_then(|d| d.get("plugin.wasm"))
        .map(|b| b.0.clone())
        .expect("plugin.wasm in binaryData");
    let v1 = std::fs::read(&plugin_path)?;
    assert_eq!(
        digest_of(&bytes),
        digest_of(&v1),
        "--set-file keeps the bytes"
    );

    let out = apply_chart(cp, &ns, &objects)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    for applied in [
        "deployment.apps/e2e-wasm-operator",
        "clusterrole.rbac.authorization.k8s.io/e2e-wasm-operator",
        &format!("jinghzhuplugin.jinghzhu.io/{ns}"),
    ] {
        assert!(
            stdout.contains(applied),
            "{applied} missing from:\n{stdout}"
        );
    }

    // The pod template meets the restricted profile (the namespace warns).
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("would violate PodSecurity"),
        "the chart's Deployment breaks the restricted profile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &ns);
    let applied = deployments.get("e2e-wasm-operator").await?;
    assert_eq!(applied.spec.and_then(|s| s.replicas), Some(2));

    // The binary as the chart's Deployment runs it, with its ServiceAccount.
    let container = operator_container(&objects)?;
    let installed = Installed {
        namespace: ns.clone(),
        kubeconfig: cp
            .kubeconfig_for_service_account(&ns, "e2e-wasm-operator")
            .await?,
        env: container.env.unwrap_or_default(),
        args: container.args.unwrap_or_default(),
        plugin_configmap: configmap.name_any(),
    };
    assert!(
        installed
            .env
            .iter()
            .any(|v| v.name == "WASM_OPERATOR_PLUGIN_RESOURCE" && v.value.as_deref() == Some(&ns)),
        "the chart serves its JinghzhuPlugin"
    );
    // `WASM_OPERATOR_BIN` runs another build of the host (e.g. target/debug/wasm-operator).
    let binary = std::env::var_os("WASM_OPERATOR_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(host_binary);
    let mut host = ProcessHost::start(&binary, &installed, "helm-replica", &[])?;
    host.wait_ready().await?;
    env.create("web", 2, &[]).await?;
    env.wait_converged("web", 2, CONVERGE).await?;
    let plugins: Api<JinghzhuPlugin> = Api::all(env.client.clone());
    wait_for(
        "the replica's entry in the JinghzhuPlugin status",
        CONVERGE,
        || async {
            let status = plugins.get(&ns).await?.status.unwrap_or_default();
            Ok(status.replicas.iter().any(|r| {
                r.name == "helm-replica" && r.digest == digest_of(&v1) && r.state == "Serving"
            }))
        },
    )
    .await?;
    // `kubectl get jinghzhuplugins` shows the digest and the state.
    let out = kubectl(cp, &["get", "jinghzhuplugins", &ns])?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("DIGEST") && table.contains("STATE"),
        "{table}"
    );
    assert!(
        table.contains(&digest_of(&v1)) && table.contains("Serving"),
        "{table}"
    );
    // A looser podPolicy than the host's is clamped, and the status says so.
    let status = plugins.get(&ns).await?.status.unwrap_or_default();
    let effective = status.effective_limits.expect("effectiveLimits");
    assert_eq!(effective.pod_policy.as_deref(), Some("restricted"));
    assert!(
        effective.clamped.contains("looser"),
        "{}",
        effective.clamped
    );

    host.sigterm();
    let _ = host.wait_exit(Duration::from_secs(30)).await;
    remove_cluster_objects(&env, release, &ns).await;
    Ok(())
}

/// The chart with `shards` set: the Deployment runs `--shards` instead of
/// leader election, and two replicas started as it runs them, each with
/// the chart's ServiceAccount (so its RBAC is what is tested), split the
/// shard Leases between them and converge every object.
/// The chart rendered with `shards=<shards>` as release `release` and
/// applied in a fresh namespace: the Deployment's environment (shards on,
/// no election), its ServiceAccount's kubeconfig and the plugin ConfigMap.
async fn installed_with_shards(
    prefix: &str,
    release: &str,
    shards: u32,
) -> anyhow::Result<(TestEnv, Installed)> {
    let env = TestEnv::new(prefix).await?;
    let cp = env.control_plane;
    let ns = env.namespace.clone();
    let lease = format!("leaderElection.leaseName={release}");
    let objects = render_chart(release, &ns, &[&format!("shards={shards}"), &lease])?;
    let container = operator_container(&objects)?;
    let env_vars = container.env.clone().unwrap_or_default();
    let value = |name: &str| {
        env_vars
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.value.clone())
    };
    assert_eq!(value("WASM_OPERATOR_SHARDS"), Some(shards.to_string()));
    assert_eq!(
        value("WASM_OPERATOR_LEADER_ELECT"),
        None,
        "shards replace the election"
    );
    apply_chart(cp, &ns, &objects)?;
    let installed = Installed {
        namespace: ns.clone(),
        kubeconfig: cp
            .kubeconfig_for_service_account(&ns, &format!("{release}-wasm-operator"))
            .await?,
        env: env_vars,
        args: container.args.unwrap_or_default(),
        plugin_configmap: object_of::<ConfigMap>(&objects, "ConfigMap")?.name_any(),
    };
    Ok((env, installed))
}

/// The holder of each of the `shards` Leases of `release`.
async fn shard_holders(env: &TestEnv, release: &str, shards: u32) -> anyhow::Result<Vec<String>> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut holders = Vec::new();
    for shard in 0..shards {
        let lease = leases
            .get_opt(&format!("{release}-shard-{shard:02}"))
            .await?;
        holders.push(
            lease
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .unwrap_or_default(),
        );
    }
    Ok(holders)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helm_chart_with_shards_splits_the_work_under_its_own_rbac() -> anyhow::Result<()> {
    let release = "e2e-shards";
    let (env, installed) = installed_with_shards("helm-shards", release, 4).await?;
    let ns = env.namespace.clone();
    let binary = std::env::var_os("WASM_OPERATOR_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(host_binary);
    let mut a = ProcessHost::start(&binary, &installed, "shards-a", &[])?;
    let mut b = ProcessHost::start(&binary, &installed, "shards-b", &[])?;
    a.wait_ready().await?;
    b.wait_ready().await?;
    for i in 0..8 {
        env.create(&format!("web-{i}"), 2, &[]).await?;
    }
    for i in 0..8 {
        env.wait_converged(&format!("web-{i}"), 2, CONVERGE).await?;
    }
    // Both replicas hold shard Leases, and together all four.
    wait_for(
        "the four shards split between the two replicas",
        CONVERGE,
        || async {
            let holders = shard_holders(&env, release, 4).await?;
            Ok(holders.iter().any(|h| h == "shards-a")
                && holders.iter().any(|h| h == "shards-b")
                && holders.iter().all(|h| h == "shards-a" || h == "shards-b"))
        },
    )
    .await?;
    let pods = env.pods().list(&Default::default()).await?.items;
    assert_eq!(pods.len(), 16, "exact pod count");

    for host in [&mut a, &mut b] {
        host.sigterm();
    }
    let _ = a.wait_exit(Duration::from_secs(30)).await;
    let _ = b.wait_exit(Duration::from_secs(30)).await;
    remove_cluster_objects(&env, release, &ns).await;
    Ok(())
}

/// A rolling update as the chart's Deployment does it (`maxSurge: 1`,
/// `maxUnavailable: 0`), from the host of an earlier commit
/// (`tests/e2e/previous-host`, built from this clone's history) to this
/// checkout's, with shards: two old replicas split the work; a new one
/// joins, then an old one gets SIGTERM while every object scales up; twice.
/// The objects end exact, no pod was ever created twice, and the new
/// replicas hold every shard. What old and new share here is the protocol
/// between replicas (shard Leases, the shard label, the hash) and the
/// objects' status; both run the new chart's environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_from_the_previous_host_to_this_one_loses_and_doubles_nothing()
-> anyhow::Result<()> {
    const SHARDS: u32 = 4;
    let release = "e2e-rolling";
    let old = e2e_tests::previous_host::previous_host_binary();
    let new = host_binary();
    let (env, installed) = installed_with_shards("helm-rolling", release, SHARDS).await?;
    let names: Vec<String> = (0..8).map(|i| format!("web-{i}")).collect();
    let scale_all = |desired: u32| {
        let env = &env;
        let names = &names;
        async move {
            for name in names {
                env.scale(name, desired).await?;
            }
            anyhow::Ok(())
        }
    };
    let converge_all = |desired: u32| {
        let env = &env;
        let names = &names;
        async move {
            for name in names {
                env.wait_converged(name, desired, CONVERGE).await?;
            }
            anyhow::Ok(())
        }
    };
    let held_by_only = |replicas: &'static [&'static str]| {
        let env = &env;
        async move {
            wait_for(
                &format!("the {SHARDS} shards held by {replicas:?}, each by some"),
                CONVERGE,
                || async {
                    let holders = shard_holders(env, release, SHARDS).await?;
                    Ok(replicas.iter().all(|r| holders.iter().any(|h| h == r))
                        && holders.iter().all(|h| replicas.contains(&h.as_str())))
                },
            )
            .await
        }
    };

    let created = CreatedPods::watch(&env);
    let mut old_a = ProcessHost::start(&old, &installed, "old-a", &[])?;
    let mut old_b = ProcessHost::start(&old, &installed, "old-b", &[])?;
    old_a.wait_ready().await?;
    old_b.wait_ready().await?;
    held_by_only(&["old-a", "old-b"]).await?;
    for name in &names {
        env.create(name, 1, &[]).await?;
    }
    converge_all(1).await?;
    assert!(
        reconciles(&mut old_a).await? + reconciles(&mut old_b).await? >= names.len() as f64,
        "the old replicas did the work before the update"
    );

    // Surge: new-c starts; once it is ready, old-a is stopped while the
    // objects scale up.
    let mut new_c = ProcessHost::start(&new, &installed, "new-c", &[])?;
    new_c.wait_ready().await?;
    scale_all(2).await?;
    old_a.sigterm();
    assert!(old_a.wait_exit(Duration::from_secs(30)).await?.success());
    converge_all(2).await?;

    // Again: new-d, then old-b.
    let mut new_d = ProcessHost::start(&new, &installed, "new-d", &[])?;
    new_d.wait_ready().await?;
    scale_all(3).await?;
    old_b.sigterm();
    assert!(old_b.wait_exit(Duration::from_secs(30)).await?.success());
    converge_all(3).await?;
    held_by_only(&["new-c", "new-d"]).await?;

    let pods = env.pods().list(&Default::default()).await?.items;
    assert_eq!(pods.len(), 3 * names.len(), "exact pod count");
    for name in &names {
        assert_eq!(
            created.of(name),
            3,
            "{name}: 1 -> 2 -> 3 pods, none ever created twice; timelines:\n{}{}",
            new_c.timeline(),
            new_d.timeline()
        );
    }
    assert!(reconciles(&mut new_c).await? + reconciles(&mut new_d).await? >= 1.0);
    for host in [&mut new_c, &mut new_d] {
        host.sigterm();
    }
    assert!(new_c.wait_exit(Duration::from_secs(30)).await?.success());
    assert!(new_d.wait_exit(Duration::from_secs(30)).await?.success());
    remove_cluster_objects(&env, release, &env.namespace).await;
    Ok(())
}
