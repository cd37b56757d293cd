//! Containment, round three (issue 40), hazards 1, 2 and 9: registries and
//! plugin files that try to stop or crash the host. Each test runs
//! `wasm-operator run` as a process of its own (`watched_host`: its probes
//! polled every 200 ms, its RSS watched, a watchdog killing it above
//! [`WATCHDOG`]) against the real control plane and the small hostile
//! registry of the harness (`hostile_registry`), and checks that the host
//! stays alive (`/healthz` 200 throughout), that a neighbour object
//! converges, that its peak RSS (`VmHWM`) stays within [`RSS_BOUND`], that
//! the refusal is named by its rule id (in the resource's conditions and a
//! `PluginRefused` Warning Event, or on `/status` and the host's Pod), and
//! that no pod exists beyond what the objects ask for.
//!
//! `cargo test -p e2e-tests --test supply_chain -- --nocapture` prints the
//! figures.

use std::path::Path;
use std::time::{Duration, Instant};

use e2e_tests::hostile_registry::{HOSTILE_TEXT, HostileRegistry, INTERNAL_SECRET, Mode};
use e2e_tests::watched_host::WatchedHost;
use e2e_tests::{TestEnv, plugin, plugin_configmap, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use wasm_operator::crd::plugin::{JinghzhuPlugin, JinghzhuPluginStatus};
use wasm_operator::runtime::digest_of;
use wasm_operator_testkit::plugin_resource;

/// The host under test: the host's `main` built beside these tests.
const BIN: &str = env!("CARGO_BIN_EXE_wasm-operator-under-test");
const CONVERGE: Duration = Duration::from_secs(60);
/// The peak RSS a host may reach in these tests (a debug build; its
/// peak with the replicaset plugin compiled was 52–58 MiB in these tests).
const RSS_BOUND: u64 = 200 << 20;
/// Above this the watchdog kills the host (the test then fails).
const WATCHDOG: u64 = 600 << 20;

fn v1() -> Vec<u8> {
    std::fs::read(plugin("replicaset-plugin", &[])).expect("v1 plugin")
}

fn v2() -> Vec<u8> {
    std::fs::read(plugin("replicaset-plugin", &["v2"])).expect("v2 plugin")
}

/// The environment of a host process named `name` in `env`'s namespace.
fn host_env(env: &TestEnv, name: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "KUBECONFIG",
            env.control_plane.kubeconfig_path().display().to_string(),
        ),
        ("POD_NAME", name.to_string()),
        ("POD_NAMESPACE", env.namespace.clone()),
        (
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        ),
    ]
}

/// `run`'s flags for `env`, the registry and the deadlines, then `more`.
fn args(env: &TestEnv, dir: &Path, registry: &HostileRegistry, more: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--namespace",
        &env.namespace,
        "--cache-dir",
        &dir.join("precompiled").display().to_string(),
        "--oci-insecure-registry",
        &registry.addr.to_string(),
        "--oci-poll-interval",
        "1s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

/// Checks the host is alive, within [`RSS_BOUND`], and that the
/// namespace holds exactly `pods` pods; prints the peak.
async fn check_host(env: &TestEnv, host: &mut WatchedHost, pods: usize) -> anyhow::Result<u64> {
    host.assert_alive_throughout()?;
    let peak = host.peak_rss();
    eprintln!("measured: {} peak RSS {} MiB", host.name, peak >> 20);
    anyhow::ensure!(
        peak <= RSS_BOUND,
        "{}: peak RSS {} MiB over the {} MiB bound",
        host.name,
        peak >> 20,
        RSS_BOUND >> 20
    );
    let all = env.pods().list(&ListParams::default()).await?.items;
    anyhow::ensure!(
        all.len() == pods,
        "{} pods in the namespace, the objects ask for {pods}",
        all.len()
    );
    Ok(peak)
}

/// Creates `name` with `desired` pods and waits until it converged; returns how long that took.
async fn neighbour(env: &TestEnv, name: &str, desired: u32) -> anyhow::Result<Duration> {
    let started = Instant::now();
    env.create(name, desired, &[]).await?;
    env.wait_converged(name, desired, CONVERGE).await?;
    Ok(started.elapsed())
}

// ---- JinghzhuPlugin helpers ----

async fn status_of(env: &TestEnv, name: &str) -> anyhow::Result<JinghzhuPluginStatus> {
    Ok(Api::<JinghzhuPlugin>::all(env.client.clone())
        .get(name)
        .await?
        .status
        .unwrap_or_default())
}

/// ConfigMaps `plugin-v1` and `plugin-v2`, and the resource (named after
/// the namespace) serving `plugin-v1`.
async fn resource_on_v1(env: &TestEnv) -> anyhow::Result<String> {
    e2e_tests::install_plugin_crd(&env.client).await?;
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    for (name, bytes) in [("plugin-v1", v1()), ("plugin-v2", v2())] {
        maps.create(&PostParams::default(), &plugin_configmap(name, bytes))
            .await?;
    }
    let resource = plugin_resource(&env.namespace)
        .config_map(&env.namespace, "plugin-v1")
        .build();
    Api::<JinghzhuPlugin>::all(env.client.clone())
        .create(&PostParams::default(), &resource)
        .await?;
    Ok(env.namespace.clone())
}

/// Points the resource's source at `source` (`{"oci": …}`, `{"file": …}`
/// or `{"configMap": …}`).
async fn set_source(env: &TestEnv, name: &str, source: serde_json::Value) -> anyhow::Result<()> {
    let mut all = serde_json::json!({"oci": null, "configMap": null, "file": null});
    if let (Some(all), Some(set)) = (all.as_object_mut(), source.as_object()) {
        all.extend(set.clone());
    }
    Api::<JinghzhuPlugin>::all(env.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"source": all}})),
        )
        .await?;
    Ok(())
}

fn configmap_source(env: &TestEnv, name: &str) -> serde_json::Value {
    serde_json::json!({"configMap": {"namespace": env.namespace, "name": name, "key": "plugin.wasm"}})
}

/// Waits until the resource says `digest` serves; returns how long that took.
async fn wait_serving(env: &TestEnv, name: &str, digest: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    wait_for(&format!("{name} serving {digest}"), CONVERGE, || async {
        let status = status_of(env, name).await?;
        Ok(status
            .replicas
            .iter()
            .any(|r| r.digest == digest && r.state == "Serving"))
    })
    .await?;
    Ok(started.elapsed())
}

/// Waits until the resource's conditions and a Warning Event name `rule`
/// (failing at once if `host` dies or fails its probe meanwhile); returns
/// (the condition's message, the Event's note, how long it took).
async fn wait_refused(
    env: &TestEnv,
    host: &mut WatchedHost,
    name: &str,
    rule: &str,
) -> anyhow::Result<(String, String, Duration)> {
    let started = Instant::now();
    let tag = format!("[{rule}]");
    let mut found = (String::new(), String::new());
    let mut last = String::new();
    while started.elapsed() < CONVERGE {
        let status = status_of(env, name).await?;
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Refused" && c.status == "True" && c.message.contains(&tag))
            .map(|c| c.message.clone());
        let event = e2e_tests::plugin_refusals(&env.client, name)
            .await?
            .into_iter()
            .find(|m| m.contains(&format!("rule {rule}")));
        if let (Some(condition), Some(event)) = (condition, event) {
            found = (condition, event);
            break;
        }
        last = format!("{:?}", status.conditions);
        host.assert_alive_throughout()
            .map_err(|err| err.context(format!("waiting for a refusal naming {rule}")))?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::ensure!(
        !found.0.is_empty(),
        "no refusal naming {rule} on {name} within {CONVERGE:?}: {last}"
    );
    Ok((found.0, found.1, started.elapsed()))
}

/// A host serving the resource `name`, with `more` flags.
async fn resource_host(
    env: &TestEnv,
    dir: &Path,
    registry: &HostileRegistry,
    name: &str,
    more: &[&str],
) -> anyhow::Result<WatchedHost> {
    let mut flags = vec!["--plugin-resource", name];
    flags.extend_from_slice(more);
    let host = WatchedHost::start(
        Path::new(BIN),
        "resource-host",
        dir,
        &args(env, dir, registry, &flags),
        &host_env(env, "resource-host"),
        WATCHDOG,
    )?;
    let healthy = host.wait_healthy(Duration::from_secs(30)).await?;
    eprintln!("measured: {} /healthz 200 after {healthy:?}", host.name);
    wait_serving(env, name, &digest_of(&v1())).await?;
    Ok(host)
}

/// The end of the first test: the registry recovers with v2 pushed (the
/// polls find it), then sends an endless manifest to the running host
/// (cut at 4 MiB, reported on its Pod).
async fn recovers_then_sends_an_endless_manifest(
    env: &TestEnv,
    registry: &HostileRegistry,
    second: &WatchedHost,
) -> anyhow::Result<()> {
    // The registry recovers with v2 pushed: the polls find it.
    let recovered = Instant::now();
    let v2_layer = digest_of(&v2());
    registry.push("plugins/p", "live", &v2());
    registry.set_mode(Mode::Good);
    wait_for(
        "v2 serving after the registry recovered",
        CONVERGE,
        || async {
            Ok(second
                .get("/status")
                .await
                .is_some_and(|(_, body)| body.contains(&v2_layer)))
        },
    )
    .await?;
    eprintln!(
        "measured: v2 served {:?} after the registry recovered",
        recovered.elapsed()
    );

    // An endless manifest against the running host: cut at 4 MiB, reported.
    registry.set_mode(Mode::Endless);
    wait_for(
        "a Warning naming oci/answer-too-large",
        CONVERGE,
        || async {
            Ok(
                e2e_tests::refusal_events(&env.client, &env.namespace, "Pod", "host-b")
                    .await?
                    .iter()
                    .any(|m| m.contains("oci/answer-too-large")),
            )
        },
    )
    .await?;
    eprintln!(
        "measured: the registry sent {} MiB of hostile bodies",
        registry.hostile_bytes_sent() >> 20
    );
    Ok(())
}

/// Hazard 1 (`run --plugin oci://…`): a registry that drips or hangs never
/// delays `/healthz`, polls go on while it drips (each request cut at its
/// deadline), a restart while it hangs binds its probes at once and serves
/// the verified local copy (at once: the registry is looked at behind it),
/// and a v2 pushed once the registry recovers is served. The same host then meets an endless
/// manifest (hazard 2, against a running host).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_registry_never_stops_a_host_that_polls_it_or_restarts() -> anyhow::Result<()> {
    let env = TestEnv::new("slow-registry").await?;
    let registry = HostileRegistry::start().await?;
    let dir = tempfile::tempdir()?;
    registry.push("plugins/p", "live", &v1());
    let reference = registry.reference("plugins/p", "live");
    let flags = |request: &'static str| {
        args(
            &env,
            dir.path(),
            &registry,
            &[
                "--plugin",
                &reference,
                "--oci-request-timeout",
                request,
                "--oci-pull-timeout",
                "8s",
            ],
        )
    };
    let first = WatchedHost::start(
        Path::new(BIN),
        "host-a",
        dir.path(),
        &flags("2s"),
        &host_env(&env, "host-a"),
        WATCHDOG,
    )?;
    first.wait_ready(CONVERGE).await?;
    neighbour(&env, "before", 1).await?;

    // The registry drips one byte every 3 s: each poll is cut at 2 s and
    // the next one asks again; v1 keeps serving.
    registry.set_mode(Mode::Drip {
        every: Duration::from_secs(3),
    });
    let asked = registry.requests();
    let during = neighbour(&env, "during", 1).await?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let polls = registry.requests() - asked;
    eprintln!(
        "measured: {polls} requests in a drip of ~{during:?} + 6 s; neighbour converged in {during:?}"
    );
    anyhow::ensure!(
        polls >= 4,
        "the polls stopped during the drip: {polls} requests"
    );

    // A restart while the registry hangs (accepts, never answers): probes
    // at once, the local copy (pulled by host-a) at once, the registry
    // looked at behind it (cut at its 6 s request deadline).
    registry.set_mode(Mode::Hang);
    first.kill().await;
    let mut second = WatchedHost::start(
        Path::new(BIN),
        "host-b",
        dir.path(),
        &flags("6s"),
        &host_env(&env, "host-b"),
        WATCHDOG,
    )?;
    let healthy = second.wait_healthy(Duration::from_secs(30)).await?;
    eprintln!("measured: restarted while the registry hangs, /healthz 200 after {healthy:?}");
    anyhow::ensure!(
        healthy < Duration::from_secs(4),
        "/healthz waited for the pull: {healthy:?}"
    );
    let first_answer = second.get("/readyz").await;
    eprintln!("measured: /readyz at once: {first_answer:?}");
    let ready = second.wait_ready(CONVERGE).await?;
    eprintln!("measured: ready (local copy) after {ready:?}");
    neighbour(&env, "restarted", 1).await?;
    wait_for(
        "a Warning naming oci/deadline on the host's Pod",
        CONVERGE,
        || async {
            Ok(
                e2e_tests::refusal_events(&env.client, &env.namespace, "Pod", "host-b")
                    .await?
                    .iter()
                    .any(|m| m.contains("oci/deadline")),
            )
        },
    )
    .await?;

    recovers_then_sends_an_endless_manifest(&env, &registry, &second).await?;
    neighbour(&env, "after", 1).await?;
    check_host(&env, &mut second, 4).await?;
    Ok(())
}

/// Hazard 1 (`--plugin-resource`): a resource whose registry drips never
/// blocks its driver (a spec change to a ConfigMap serves at once, the
/// pull in flight abandoned) nor a neighbour's reconcile; the drip itself
/// is refused at the deadline (`oci/deadline`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripping_source_never_blocks_its_resource_or_a_neighbour() -> anyhow::Result<()> {
    let env = TestEnv::new("drip-resource").await?;
    let registry = HostileRegistry::start().await?;
    registry.set_mode(Mode::Drip {
        every: Duration::from_secs(1),
    });
    let dir = tempfile::tempdir()?;
    let name = resource_on_v1(&env).await?;
    let mut host = resource_host(
        &env,
        dir.path(),
        &registry,
        &name,
        &["--oci-request-timeout", "6s", "--oci-pull-timeout", "12s"],
    )
    .await?;
    neighbour(&env, "a", 1).await?;
    // v2 once, so that going back to it later compiles nothing.
    set_source(&env, &name, configmap_source(&env, "plugin-v2")).await?;
    wait_serving(&env, &name, &digest_of(&v2())).await?;
    set_source(&env, &name, configmap_source(&env, "plugin-v1")).await?;
    wait_serving(&env, &name, &digest_of(&v1())).await?;

    let drip = serde_json::json!({"oci": {"reference": registry.reference("drip/p", "live")}});
    set_source(&env, &name, drip.clone()).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_source(&env, &name, configmap_source(&env, "plugin-v2")).await?;
    let took = wait_serving(&env, &name, &digest_of(&v2())).await?;
    eprintln!("measured: a spec change during a dripping pull served in {took:?}");
    anyhow::ensure!(
        took < Duration::from_secs(4),
        "the spec change waited for the pull: {took:?}"
    );

    set_source(&env, &name, drip).await?;
    let during = neighbour(&env, "b", 1).await?;
    eprintln!("measured: a neighbour converged in {during:?} during the drip");
    let (condition, event, after) = wait_refused(&env, &mut host, &name, "oci/deadline").await?;
    eprintln!("measured: refused after {after:?}: {condition}\n  event: {event}");
    anyhow::ensure!(
        status_of(&env, &name)
            .await?
            .replicas
            .iter()
            .any(|r| r.digest == digest_of(&v2())),
        "v2 stopped serving"
    );
    check_host(&env, &mut host, 2).await?;
    Ok(())
}

/// Hazard 2: giant answers and files are cut at their caps, each refusal
/// named: an endless manifest, a 4 GiB error body, an endless token, and
/// file sources naming `/dev/zero`, a FIFO and a 1 GiB file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giant_answers_and_files_are_cut_at_their_caps() -> anyhow::Result<()> {
    let env = TestEnv::new("giant-answers").await?;
    let registry = HostileRegistry::start().await?;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("plugins");
    std::fs::create_dir(&root)?;
    let fifo = root.join("fifo.wasm");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes())?;
    // SAFETY: a valid NUL-terminated path.
    anyhow::ensure!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0, "mkfifo");
    let big = root.join("big.wasm");
    std::fs::File::create(&big)?.set_len(1 << 30)?;
    let name = resource_on_v1(&env).await?;
    let root_text = root.display().to_string();
    let mut host = resource_host(
        &env,
        dir.path(),
        &registry,
        &name,
        &[
            "--plugin-file-root",
            &root_text,
            "--oci-request-timeout",
            "10s",
        ],
    )
    .await?;
    let oci =
        |repo: &str| serde_json::json!({"oci": {"reference": registry.reference(repo, "live")}});
    let file = |path: &Path| serde_json::json!({"file": {"path": path.display().to_string()}});
    let cases = [
        (
            "endless manifest",
            Mode::Endless,
            oci("endless/p"),
            "oci/answer-too-large",
        ),
        (
            "a 500 with a 4 GiB body",
            Mode::GiantError { bytes: 4 << 30 },
            oci("error/p"),
            "oci/unreachable",
        ),
        (
            "an endless token",
            Mode::GiantToken,
            oci("token/p"),
            "oci/answer-too-large",
        ),
        (
            "/dev/zero",
            Mode::Good,
            file(Path::new("/dev/zero")),
            "file/outside-root",
        ),
        ("a FIFO", Mode::Good, file(&fifo), "file/not-regular"),
        ("a 1 GiB file", Mode::Good, file(&big), "file/too-large"),
    ];
    for (what, mode, source, rule) in cases {
        registry.set_mode(mode);
        set_source(&env, &name, source).await?;
        let (condition, _, after) = wait_refused(&env, &mut host, &name, rule).await?;
        eprintln!(
            "measured: {what}: refused by {rule} after {after:?}, peak RSS {} MiB: {}",
            host.peak_rss() >> 20,
            &condition[..condition.len().min(300)]
        );
        host.assert_alive_throughout()?;
    }
    eprintln!(
        "measured: the registry sent {} MiB of hostile bodies",
        registry.hostile_bytes_sent() >> 20
    );
    neighbour(&env, "neighbour", 2).await?;
    check_host(&env, &mut host, 2).await?;
    Ok(())
}

/// Hazard 9: a registry's error text reaches the log, the status and the
/// Events cut and escaped (no forged line, no raw escape, no megabyte
/// line), and a redirect to an internal plain-HTTP service is refused
/// without a request to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_text_is_escaped_and_redirects_stay_home() -> anyhow::Result<()> {
    let env = TestEnv::new("registry-text").await?;
    let registry = HostileRegistry::start().await?;
    let dir = tempfile::tempdir()?;
    let name = resource_on_v1(&env).await?;
    let mut host = resource_host(&env, dir.path(), &registry, &name, &[]).await?;

    registry.set_mode(Mode::GiantError { bytes: 2 << 20 });
    let log_before = host.log_bytes().len();
    let error = serde_json::json!({"oci": {"reference": registry.reference("text/p", "live")}});
    set_source(&env, &name, error).await?;
    let (condition, event, _) = wait_refused(&env, &mut host, &name, "oci/unreachable").await?;
    // A few polls more, each meeting the same answer.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let log = host.log_bytes();
    let grown = log.len() - log_before;
    let text = String::from_utf8_lossy(&log);
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    let forged = text
        .lines()
        .filter(|l| l.trim_start().starts_with("ERROR wasm_operator: forged"))
        .count();
    let escapes = log.iter().filter(|b| **b == 0x1b).count();
    eprintln!(
        "measured: 2 MiB error bodies for ~6 s: {grown} bytes of log, longest line {longest}, \
         {forged} forged lines, {escapes} raw ESC; condition {} bytes, Event {} bytes",
        condition.len(),
        event.len()
    );
    anyhow::ensure!(
        forged == 0 && escapes == 0,
        "registry text reached the log raw"
    );
    anyhow::ensure!(longest < 8192, "a {longest}-byte log line");
    anyhow::ensure!(grown < 64 * 1024, "{grown} bytes of log in ~6 s");
    for shown in [&condition, &event] {
        anyhow::ensure!(
            !shown.chars().any(char::is_control) && shown.len() <= 2100,
            "unescaped or long: {shown:?}"
        );
        anyhow::ensure!(
            shown.contains("boom\\nERROR"),
            "the excerpt is not shown escaped: {shown}"
        );
    }
    anyhow::ensure!(HOSTILE_TEXT.contains('\n'));

    registry.set_mode(Mode::RedirectInternal);
    let redirect =
        serde_json::json!({"oci": {"reference": registry.reference("redirect/p", "live")}});
    set_source(&env, &name, redirect).await?;
    let (condition, event, _) = wait_refused(&env, &mut host, &name, "oci/redirect").await?;
    eprintln!("measured: redirect refused: {condition}");
    let status = serde_json::to_string(&status_of(&env, &name).await?)?;
    let log = String::from_utf8_lossy(&host.log_bytes()).into_owned();
    for (where_, text) in [("status", &status), ("Event", &event), ("log", &log)] {
        anyhow::ensure!(
            !text.contains(INTERNAL_SECRET),
            "the internal service's answer is in the {where_}"
        );
    }
    anyhow::ensure!(
        registry.internal_requests() == 0,
        "the internal service was asked {} times",
        registry.internal_requests()
    );
    neighbour(&env, "neighbour", 1).await?;
    check_host(&env, &mut host, 1).await?;
    Ok(())
}

/// Issue 40, hazard 11 (in part): a replica that stops gracefully removes
/// its entry from the resource's `status.replicas` (it stayed for good, and
/// with 256 entries left behind a new replica could never write its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_leaves_the_resources_status() -> anyhow::Result<()> {
    let env = TestEnv::new("leave-status").await?;
    let registry = HostileRegistry::start().await?;
    let name = resource_on_v1(&env).await?;
    let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let flags = ["--plugin-resource", name.as_str()];
    let start = |replica: &str, dir: &Path| {
        WatchedHost::start(
            Path::new(BIN),
            replica,
            dir,
            &args(&env, dir, &registry, &flags),
            &host_env(&env, replica),
            WATCHDOG,
        )
    };
    let a = start("host-a", dir_a.path())?;
    let mut b = start("host-b", dir_b.path())?;
    let entries = || async {
        let status = status_of(&env, &name).await?;
        let mut names: Vec<String> = status.replicas.into_iter().map(|r| r.name).collect();
        names.sort();
        anyhow::Ok(names)
    };
    wait_for("both replicas' entries", CONVERGE, || async {
        Ok(entries().await? == ["host-a", "host-b"])
    })
    .await?;
    let exit = a.terminate(Duration::from_secs(20)).await?;
    assert!(exit.success(), "host-a exited with {exit}");
    wait_for("host-a's entry to go", Duration::from_secs(10), || async {
        Ok(entries().await? == ["host-b"])
    })
    .await?;
    neighbour(&env, "after", 1).await?;
    b.assert_alive_throughout()?;
    Ok(())
}

/// Issue 40, hazard 11: the entry of a replica that crashed (SIGKILL: no
/// `leave`) is pruned by the holder of shard 0 once the replica has had no
/// live membership Lease for a lease duration (it stayed for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_entry_is_pruned_once_its_lease_is_gone() -> anyhow::Result<()> {
    let env = TestEnv::new("prune-status").await?;
    let registry = HostileRegistry::start().await?;
    let name = resource_on_v1(&env).await?;
    let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let flags = [
        "--plugin-resource",
        name.as_str(),
        "--shards",
        "4",
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "1s",
    ];
    let start = |replica: &str, dir: &Path| {
        WatchedHost::start(
            Path::new(BIN),
            replica,
            dir,
            &args(&env, dir, &registry, &flags),
            &host_env(&env, replica),
            WATCHDOG,
        )
    };
    let a = start("host-a", dir_a.path())?;
    let mut b = start("host-b", dir_b.path())?;
    let entries = || async {
        let status = status_of(&env, &name).await?;
        let mut names: Vec<String> = status.replicas.into_iter().map(|r| r.name).collect();
        names.sort();
        anyhow::Ok(names)
    };
    wait_for("both replicas' entries", CONVERGE, || async {
        Ok(entries().await? == ["host-a", "host-b"])
    })
    .await?;
    a.kill().await;
    let killed = Instant::now();
    // Lease 4 s + 4 s absent + the 5 s pruning period, and shard 0 taken
    // over if host-a held it (another lease duration and a sync).
    wait_for(
        "host-a's entry to be pruned",
        Duration::from_secs(45),
        || async { Ok(entries().await? == ["host-b"]) },
    )
    .await?;
    eprintln!(
        "measured: the killed replica's entry was pruned {:?} after SIGKILL",
        killed.elapsed()
    );
    neighbour(&env, "after", 1).await?;
    b.assert_alive_throughout()?;
    Ok(())
}

// ---- Round four: the store's bound, and a restart behind a hung registry ----

/// A `JinghzhuPlugin` named after the namespace, serving the OCI `reference`.
async fn resource_on_oci(env: &TestEnv, reference: &str) -> anyhow::Result<String> {
    e2e_tests::install_plugin_crd(&env.client).await?;
    let resource = plugin_resource(&env.namespace).oci(reference).build();
    Api::<JinghzhuPlugin>::all(env.client.clone())
        .create(&PostParams::default(), &resource)
        .await?;
    Ok(env.namespace.clone())
}

/// `wasm` (a component) with a custom section naming `n` appended, padded
/// to about `size` bytes: another digest, the same plugin.
fn padded(wasm: &[u8], n: usize, size: usize) -> Vec<u8> {
    fn leb128(mut value: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = format!("padding-{n}");
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.resize(size.saturating_sub(wasm.len()).max(body.len()), n as u8);
    let mut out = wasm.to_vec();
    out.push(0); // a custom section
    leb128(body.len(), &mut out);
    out.extend_from_slice(&body);
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

/// Round four, hazard 8: a resource's reference moved through 8 tags
/// (≈ 530 KB each) under `--oci-store-max-mib 1` held 4.15 MiB with 0
/// evictions: the last known good of every reference ever followed was
/// kept as a pin. Only what the slot holds (serving, its rollback target)
/// and the last known good of the reference followed now are pins: the
/// store stays within its bound and evicts the tags left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_moved_through_tags_keeps_the_store_within_its_bound() -> anyhow::Result<()> {
    const TAGS: usize = 8;
    const BOUND: u64 = 1 << 20;
    let env = TestEnv::new("store-tags").await?;
    let registry = HostileRegistry::start().await?;
    let dir = tempfile::tempdir()?;
    let builds: Vec<Vec<u8>> = (0..TAGS).map(|n| padded(&v1(), n, 300 << 10)).collect();
    for (n, build) in builds.iter().enumerate() {
        registry.push("plugins/moving", &format!("t{n}"), build);
    }
    let name = resource_on_oci(&env, &registry.reference("plugins/moving", "t0")).await?;
    let flags = args(
        &env,
        dir.path(),
        &registry,
        &["--plugin-resource", &name, "--oci-store-max-mib", "1"],
    );
    let mut host = WatchedHost::start(
        Path::new(BIN),
        "store-host",
        dir.path(),
        &flags,
        &host_env(&env, "store-host"),
        WATCHDOG,
    )?;
    wait_serving(&env, &name, &digest_of(&builds[0])).await?;
    for (n, build) in builds.iter().enumerate().skip(1) {
        let source = serde_json::json!({"oci": {"reference": registry.reference("plugins/moving", &format!("t{n}"))}});
        set_source(&env, &name, source).await?;
        wait_serving(&env, &name, &digest_of(build)).await?;
    }
    neighbour(&env, "after", 1).await?;
    let store = dir.path().join("precompiled").join("oci");
    let used = bytes_under(&store);
    let log = String::from_utf8_lossy(&host.log_bytes()).into_owned();
    let evictions = log
        .lines()
        .filter(|l| l.contains("evicted an artifact from the OCI store"))
        .count();
    let refs = std::fs::read_dir(store.join("refs"))?.count();
    eprintln!(
        "measured: {TAGS} tags of {} KiB each under --oci-store-max-mib 1: the store holds {} KiB \
         ({used} bytes), {evictions} evictions, {refs} refs",
        builds[0].len() >> 10,
        used >> 10
    );
    // The bound, plus the refs and the key (a few hundred bytes).
    anyhow::ensure!(
        used <= BOUND + 4096,
        "the store holds {used} bytes, over its {BOUND}-byte bound"
    );
    anyhow::ensure!(
        evictions >= TAGS - 3,
        "{evictions} evictions for {TAGS} tags"
    );
    check_host(&env, &mut host, 1).await?;
    Ok(())
}

/// Waits until the resource `name`'s entry for `replica` serves `digest`.
async fn wait_replica_serving(
    env: &TestEnv,
    name: &str,
    replica: &str,
    digest: &str,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    wait_for(&format!("{replica} serving {digest}"), CONVERGE, || async {
        Ok(status_of(env, name)
            .await?
            .replicas
            .iter()
            .any(|r| r.name == replica && r.digest == digest && r.state == "Serving"))
    })
    .await?;
    Ok(started.elapsed())
}

/// Starts `replica` with `flags`, waits until it serves, stops it, makes
/// the registry hang and starts it again: returns the restarted host and
/// how long after its start it was ready.
async fn restart_while_hung(
    env: &TestEnv,
    dir: &Path,
    registry: &HostileRegistry,
    replica: &str,
    flags: &[String],
) -> anyhow::Result<(WatchedHost, Duration)> {
    let first = WatchedHost::start(
        Path::new(BIN),
        replica,
        dir,
        flags,
        &host_env(env, replica),
        WATCHDOG,
    )?;
    first.wait_ready(CONVERGE).await?;
    first.kill().await;
    registry.set_mode(Mode::Hang);
    let second = WatchedHost::start(
        Path::new(BIN),
        replica,
        dir,
        flags,
        &host_env(env, replica),
        WATCHDOG,
    )?;
    let ready = second.wait_ready(CONVERGE).await?;
    Ok((second, ready))
}

/// Round four, hazard 13: a host restarted with a verified local copy in
/// its store while the registry accepts connections and never answers was
/// ready only after the pull's first request hit its deadline (30.2 s with
/// the defaults). It serves the local copy at once and looks at the
/// registry right behind it: ready within a couple of seconds for the
/// `--plugin oci://` flag and a resource's OCI source alike; the hung look
/// is reported (`oci/deadline`), and a new tag is served once the registry
/// answers. (`--oci-request-timeout 10s` here: the hung look ends sooner.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_the_registry_hangs_serves_the_local_copy_at_once() -> anyhow::Result<()> {
    const READY_WITHIN: Duration = Duration::from_secs(4);
    let env = TestEnv::new("hung-restart").await?;
    let registry = HostileRegistry::start().await?;
    let v2_layer = digest_of(&v2());

    // The `--plugin oci://…` flag.
    let flag_dir = tempfile::tempdir()?;
    registry.push("plugins/flag", "live", &v1());
    let reference = registry.reference("plugins/flag", "live");
    let flags = args(
        &env,
        flag_dir.path(),
        &registry,
        &["--plugin", &reference, "--oci-request-timeout", "10s"],
    );
    let (mut flag_host, flag_ready) =
        restart_while_hung(&env, flag_dir.path(), &registry, "flag-host", &flags).await?;
    neighbour(&env, "flag", 1).await?;
    wait_for("a Warning naming oci/deadline", CONVERGE, || async {
        Ok(
            e2e_tests::refusal_events(&env.client, &env.namespace, "Pod", "flag-host")
                .await?
                .iter()
                .any(|m| m.contains("oci/deadline")),
        )
    })
    .await?;
    registry.push("plugins/flag", "live", &v2());
    registry.set_mode(Mode::Good);
    let recovered = Instant::now();
    wait_for("v2 serving once the registry answers", CONVERGE, || async {
        Ok(flag_host
            .get("/status")
            .await
            .is_some_and(|(_, body)| body.contains(&v2_layer)))
    })
    .await?;
    let flag_v2 = recovered.elapsed();
    check_host(&env, &mut flag_host, 1).await?;
    flag_host.kill().await;

    // A resource's OCI source.
    let resource_dir = tempfile::tempdir()?;
    registry.push("plugins/resource", "live", &v1());
    let name = resource_on_oci(&env, &registry.reference("plugins/resource", "live")).await?;
    let flags = args(
        &env,
        resource_dir.path(),
        &registry,
        &["--plugin-resource", &name, "--oci-request-timeout", "10s"],
    );
    let (mut resource_host, resource_ready) = restart_while_hung(
        &env,
        resource_dir.path(),
        &registry,
        "resource-host",
        &flags,
    )
    .await?;
    neighbour(&env, "resource", 1).await?;
    wait_refused(&env, &mut resource_host, &name, "oci/deadline").await?;
    registry.push("plugins/resource", "live", &v2());
    registry.set_mode(Mode::Good);
    let resource_v2 = wait_replica_serving(&env, &name, "resource-host", &v2_layer).await?;
    eprintln!(
        "measured: restarted while the registry hangs: --plugin oci:// ready after \
         {flag_ready:?}, a resource's OCI source ready after {resource_ready:?}; v2 served \
         {flag_v2:?} / {resource_v2:?} after the registry answered"
    );
    anyhow::ensure!(
        flag_ready < READY_WITHIN && resource_ready < READY_WITHIN,
        "readiness waited on the hung registry: {flag_ready:?} (flag), {resource_ready:?} (resource)"
    );
    check_host(&env, &mut resource_host, 2).await?;
    Ok(())
}
