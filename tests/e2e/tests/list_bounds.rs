//! An endless `continue` chain (issue 43, case 4), against the real control
//! plane: pod lists answered by [`EndlessLists`] with a page of 500 fake
//! pods and a new `continue` token every time (or the same token again),
//! watches and everything else forwarded. The host must cut each list at
//! its bound (its memory bounded), say so (warning, metric), try again with
//! backoff and not in a hot loop, stay unready meanwhile, and once lists are
//! sane again become ready and converge.
//!
//! The memory test runs alone in a child process of this binary
//! ([`run_alone`]), so no other test's allocations count in its RSS.
//!
//! `cargo test -p e2e-tests --test list_bounds -- --nocapture` prints the figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use e2e_tests::endless_list::{EndlessLists, ListMode};
use e2e_tests::faults::ApiProxy;
use e2e_tests::memory::{mib, peak_rss, reset_peak, rss, run_alone};
use e2e_tests::watched_host::WatchedHost;
use e2e_tests::{HostOptions, LogCapture, RunningHost, TestEnv, plugin, wait_for};
use futures::future::try_join_all;
use wasm_operator::controller::ControllerConfig;
use wasm_operator::kube_api::list_bounds::{Bound, ListBounds, ListLimits};
use wasm_operator::telemetry::health::Health;

/// One test at a time (each starts a host whose lists never end).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Pods in a fabricated page (the watcher's page size).
const PAGE: usize = 500;

/// More than the host may grow by while its lists never end, at the
/// default bounds: the test fails (and stops the host) past it.
const CEILING: u64 = 800 << 20;

struct Setup {
    env: TestEnv,
    proxy: EndlessLists,
    bounds: ListBounds,
    health: Arc<Health>,
    names: Vec<String>,
}

/// A namespace with `objects` Jinghzhus of 2 pods, a proxy answering pod
/// lists as `mode` says, and the bounds a host through it will use.
async fn setup(prefix: &str, mode: ListMode, limits: ListLimits) -> Result<Setup> {
    let env = TestEnv::new(prefix).await?;
    let names: Vec<String> = (0..3).map(|i| format!("{prefix}-{i}")).collect();
    try_join_all(names.iter().map(|n| env.create(n, 2, &[]))).await?;
    let upstream = ApiProxy::upstream_client(env.control_plane).await?;
    let proxy = EndlessLists::start(upstream, mode).await?;
    let bounds = ListBounds::new(limits, Default::default());
    Ok(Setup {
        env,
        proxy,
        bounds,
        health: Arc::new(Health::default()),
        names,
    })
}

async fn start_host(setup: &Setup) -> Result<RunningHost> {
    let client = wasm_operator::kube_api::client::build_bounded(
        setup.proxy.host_config(&setup.env.namespace)?,
        wasm_operator::kube_api::client::MAX_RETRY_WAIT,
        setup.bounds.clone(),
    )?;
    let options = HostOptions {
        client: Some(client),
        controller: ControllerConfig {
            list_bounds: setup.bounds.clone(),
            health: setup.health.clone(),
            ..ControllerConfig::default()
        },
        ..HostOptions::file(&plugin("replicaset-plugin", &[]))
    };
    RunningHost::start_with(&setup.env, options).await
}

/// Turns the lie off and waits for the host to be ready and every object
/// converged; how long it took to be ready.
async fn recover(setup: &Setup) -> Result<Duration> {
    setup.proxy.set_mode(ListMode::Forward);
    let stopped = Instant::now();
    let health = setup.health.clone();
    wait_for(
        "the host ready once lists end again",
        Duration::from_secs(60),
        || {
            let health = health.clone();
            async move { Ok(health.caches_synced()) }
        },
    )
    .await?;
    let ready = stopped.elapsed();
    for name in &setup.names {
        setup
            .env
            .wait_converged(name, 2, Duration::from_secs(60))
            .await?;
    }
    Ok(ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_continue_chain_is_cut_at_its_bound_and_the_host_recovers() -> Result<()> {
    if let Some(alone) =
        run_alone("an_endless_continue_chain_is_cut_at_its_bound_and_the_host_recovers")
    {
        return alone;
    }
    let _turn = SERIAL.lock().await;
    let log = LogCapture::start();
    let setup = setup(
        "endless",
        ListMode::Endless { page: PAGE },
        ListLimits::default(),
    )
    .await?;
    reset_peak()?;
    let before = rss()?;
    let started = Instant::now();
    let host = start_host(&setup).await?;
    // Two lists cut at the bound (and a third begun after the backoff).
    let refused = || setup.bounds.refused_total();
    while refused() < 2 {
        let grown = peak_rss()?.saturating_sub(before);
        if grown > CEILING || started.elapsed() > Duration::from_secs(240) {
            let pages = setup.proxy.pages();
            host.crash().await;
            bail!(
                "after {:.1} s: {} refusals, {pages} pages ({} pods, {:.0} MiB) served, RSS +{:.0} MiB",
                started.elapsed().as_secs_f64(),
                refused(),
                pages * PAGE as u64,
                mib(setup.proxy.bytes()),
                mib(grown)
            );
        }
        ensure!(
            !setup.health.caches_synced(),
            "ready with a list that never ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cut_after = started.elapsed();
    let grown = peak_rss()?.saturating_sub(before);
    let pages = setup.proxy.pages();
    let chains = setup.proxy.chains();
    let max_items = ListLimits::default().max_items;
    let per_chain = max_items / PAGE as u64 + 1;
    eprintln!(
        "endless chain: {} lists cut ({} at the items bound) after {:.1} s; {pages} pages ({} pods, {:.0} MiB) \
         served in {} chains (at most {per_chain} a chain); RSS {:.0} MiB before, +{:.0} MiB at the peak \
         ({:.0} bytes per buffered pod)",
        refused(),
        setup.bounds.refused_of("pods", Bound::Items),
        cut_after.as_secs_f64(),
        pages * PAGE as u64,
        mib(setup.proxy.bytes()),
        chains.len(),
        mib(before),
        mib(grown),
        grown as f64 / max_items as f64,
    );
    ensure!(setup.bounds.refused_of("pods", Bound::Items) >= 2);
    ensure!(
        pages <= per_chain * chains.len() as u64,
        "{pages} pages in {} chains: more than {per_chain} a chain",
        chains.len()
    );
    ensure!(
        chains.len() <= 3,
        "{} lists started for 2 refusals: a hot loop",
        chains.len()
    );
    ensure!(
        grown < CEILING,
        "RSS grew {:.0} MiB at the peak",
        mib(grown)
    );
    let text = log.text();
    ensure!(
        text.contains("list of pods abandoned") && text.contains("--list-max-items"),
        "no warning naming the bound and its flag"
    );
    let ready = recover(&setup).await?;
    eprintln!(
        "endless chain: ready {:.1} s after the lists ended again; every object converged",
        ready.as_secs_f64()
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_continue_token_is_refused_at_once_and_retried_with_backoff() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let setup = setup(
        "looping",
        ListMode::RepeatedToken { page: PAGE },
        ListLimits::default(),
    )
    .await?;
    let host = start_host(&setup).await?;
    let refused = || setup.bounds.refused_of("pods", Bound::RepeatedToken);
    wait_for(
        "four lists refused for a repeated token",
        Duration::from_secs(60),
        || async { Ok(refused() >= 4) },
    )
    .await?;
    let chains = setup.proxy.chains();
    let pages = setup.proxy.pages();
    let gaps: Vec<Duration> = chains.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!(
        "repeated token: {} refusals, {pages} pages in {} chains, gaps between lists {gaps:?}",
        refused(),
        chains.len()
    );
    // The page that repeats the token is followed once; the next request
    // carrying it is not sent.
    ensure!(
        pages <= 2 * chains.len() as u64,
        "{pages} pages in {} chains",
        chains.len()
    );
    ensure!(!setup.health.caches_synced(), "ready with a looping list");
    // A backoff, not a hot loop: 0.8 s doubling (with jitter).
    ensure!(
        gaps.iter().all(|g| *g >= Duration::from_millis(700)),
        "{gaps:?}"
    );
    ensure!(gaps.len() >= 3 && gaps[2] > gaps[0], "{gaps:?}");
    let ready = recover(&setup).await?;
    eprintln!(
        "repeated token: ready {:.1} s after the lists ended again",
        ready.as_secs_f64()
    );
    host.stop().await;
    Ok(())
}

// ---- Pods the host does not control, and pod lists sized to the work ----

/// The host under test, as a process of its own (its RSS, `/readyz`, `/metrics`).
const BIN: &str = env!("CARGO_BIN_EXE_wasm-operator-under-test");

/// Above this the watchdog kills a host run as a process (the test then fails).
const WATCHDOG: u64 = 1536 << 20;

/// Most a host may grow by while a pod list chain never ends, with pod
/// lists sized to three Jinghzhus: (3 + 1) × 2000 pods buffered.
const NEAR_THE_WORK: u64 = 64 << 20;

/// `run`'s flags for a host of `env`'s namespace, its files in `dir`, then `more`.
fn host_args(env: &TestEnv, dir: &std::path::Path, more: &[&str]) -> Vec<String> {
    let plugin = plugin("replicaset-plugin", &[]).display().to_string();
    let cache = dir.join("precompiled").display().to_string();
    let mut args: Vec<String> = [
        "--namespace",
        &env.namespace,
        "--plugin",
        &plugin,
        "--cache-dir",
        &cache,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

/// The environment of a host process named `name` reaching the API server
/// through `kubeconfig`.
fn host_env(
    name: &str,
    namespace: &str,
    kubeconfig: &std::path::Path,
) -> Vec<(&'static str, String)> {
    vec![
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("POD_NAME", name.to_string()),
        ("POD_NAMESPACE", namespace.to_string()),
        (
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        ),
    ]
}

/// The sum of the samples of the counter `name` whose labels contain
/// `labels`, in the host's `/metrics` (0 when it does not answer).
async fn counter(host: &WatchedHost, name: &str, labels: &str) -> u64 {
    let Some((200, text)) = host.get("/metrics").await else {
        return 0;
    };
    let (labelled, bare) = (format!("{name}{{"), format!("{name} "));
    text.lines()
        .filter(|line| {
            (line.starts_with(&labelled) || line.starts_with(&bare)) && line.contains(labels)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// Pod lists the host refused so far.
async fn pods_refused(host: &WatchedHost) -> u64 {
    counter(
        host,
        "wasm_operator_list_refused_total",
        r#"resource="pods""#,
    )
    .await
}

/// Creates `count` pods nobody owns, labelled as the host's pods are,
/// each with an annotation of `bytes` bytes (what any user who may create
/// pods in the namespace can do).
async fn create_unowned_fat_pods(env: &TestEnv, count: usize, bytes: usize) -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use wasm_operator::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
    let blob = "x".repeat(bytes);
    let pods: Vec<Pod> = (0..count)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": format!("stray-{i}"),
                    "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                    "annotations": {"example.com/blob": blob},
                },
                "spec": {"containers": [{"name": "c", "image": "pause"}]},
            }))
        })
        .collect::<Result<_, _>>()?;
    let api = env.pods();
    let params = kube::api::PostParams::default();
    for batch in pods.chunks(8) {
        try_join_all(batch.iter().map(|pod| api.create(&params, pod))).await?;
    }
    Ok(())
}

/// 40 pods nobody owns, labelled `app.kubernetes.io/managed-by=wasm-operator`,
/// 240 KiB of annotation each, under `--list-max-mib 8`: the host leaves
/// them out of its pod list as it reads it (rule `pods/not-controlled`),
/// so the list is 8 MiB short of its bound by nothing, the host becomes
/// ready and a neighbour object converges and scales.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fat_pods_nobody_controls_cost_the_host_nothing() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let env = TestEnv::new("fat-strays").await?;
    create_unowned_fat_pods(&env, 40, 240 * 1024).await?;
    env.create("neighbour", 2, &[]).await?;
    let dir = tempfile::tempdir()?;
    let host = WatchedHost::start(
        std::path::Path::new(BIN),
        "fat-strays",
        dir.path(),
        &host_args(&env, dir.path(), &["--list-max-mib", "8"]),
        &host_env(
            "fat-strays",
            &env.namespace,
            env.control_plane.kubeconfig_path(),
        ),
        WATCHDOG,
    )?;
    let ready = host.wait_ready(Duration::from_secs(40)).await?;
    env.wait_converged("neighbour", 2, Duration::from_secs(60))
        .await?;
    env.scale("neighbour", 4).await?;
    let scaled = Instant::now();
    env.wait_converged("neighbour", 4, Duration::from_secs(60))
        .await?;
    let dropped = counter(
        &host,
        "wasm_operator_pods_dropped_total",
        r#"reason="not-controlled""#,
    )
    .await;
    let refused = counter(
        &host,
        "wasm_operator_list_refused_total",
        r#"resource="pods""#,
    )
    .await;
    eprintln!(
        "fat strays: /readyz 200 {:.1} s after the start; neighbour scaled 2 -> 4 in {:.1} s; \
         {dropped} pods and pod events left out (not-controlled), {refused} pod lists refused, peak RSS {:.0} MiB",
        ready.as_secs_f64(),
        scaled.elapsed().as_secs_f64(),
        mib(host.peak_rss())
    );
    ensure!(dropped >= 40, "only {dropped} pods left out");
    ensure!(refused == 0, "{refused} pod lists refused");
    let log = String::from_utf8_lossy(&host.log_bytes()).into_owned();
    ensure!(
        log.contains("pods/not-controlled"),
        "no log line naming pods/not-controlled"
    );
    let mut host = host;
    host.assert_alive_throughout()?;
    host.terminate(Duration::from_secs(30)).await?;
    Ok(())
}

/// A pod list chain whose every page carries a new `continue` token (500
/// fake pods a page, each controlled by a Jinghzhu nobody has): with 3
/// Jinghzhus served, the host refuses it at (3 + 1) × 2000 pods (rule
/// `list/sized-to-work`), not at the flags' 200 000, stays unready
/// meanwhile, and once lists are sane converges. Prints the RSS figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_pod_list_is_refused_near_the_working_set() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let setup = setup(
        "near-work",
        ListMode::Endless { page: PAGE },
        ListLimits::default(),
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = setup.proxy.kubeconfig(dir.path(), &setup.env.namespace)?;
    let mut host = WatchedHost::start(
        std::path::Path::new(BIN),
        "near-work",
        dir.path(),
        &host_args(&setup.env, dir.path(), &[]),
        &host_env("near-work", &setup.env.namespace, &kubeconfig),
        WATCHDOG,
    )?;
    host.wait_healthy(Duration::from_secs(30)).await?;
    let before = e2e_tests::watched_host::proc_status_bytes(host.pid(), "VmRSS").unwrap_or(0);
    let started = Instant::now();
    while pods_refused(&host).await < 2 {
        if let Some((200, _)) = host.get("/readyz").await {
            bail!("ready with a pod list that never ended");
        }
        if started.elapsed() > Duration::from_secs(240) {
            bail!(
                "after {:.0} s: {} pod lists refused, {} pages served, peak RSS {:.0} MiB",
                started.elapsed().as_secs_f64(),
                pods_refused(&host).await,
                setup.proxy.pages(),
                mib(host.peak_rss())
            );
        }
        host.assert_alive_throughout()?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peak = host.peak_rss();
    let grown = peak.saturating_sub(before);
    let pages = setup.proxy.pages();
    let chains = setup.proxy.chains().len() as u64;
    eprintln!(
        "endless pod list, 3 Jinghzhus served: 2 lists refused after {:.1} s; {pages} pages ({} pods, {:.0} MiB) \
         in {chains} chains; RSS {:.0} MiB at /healthz, peak {:.0} MiB (+{:.0} MiB)",
        started.elapsed().as_secs_f64(),
        pages * PAGE as u64,
        mib(setup.proxy.bytes()),
        mib(before),
        mib(peak),
        mib(grown),
    );
    ensure!(grown < NEAR_THE_WORK, "RSS grew {:.0} MiB", mib(grown));
    let log = String::from_utf8_lossy(&host.log_bytes()).into_owned();
    ensure!(
        log.contains("list/sized-to-work") && log.contains("--list-pods-per-object"),
        "no warning naming list/sized-to-work and its flag"
    );
    // (3 + 1) × 2000 pods is 16 pages of 500; the 17th is refused.
    ensure!(
        pages <= 17 * chains,
        "{pages} pages in {chains} chains: more than 17 a chain"
    );
    setup.proxy.set_mode(ListMode::Forward);
    let stopped = Instant::now();
    host.wait_ready(Duration::from_secs(60)).await?;
    eprintln!(
        "endless pod list: /readyz 200 {:.1} s after the lists ended again",
        stopped.elapsed().as_secs_f64()
    );
    for name in &setup.names {
        setup
            .env
            .wait_converged(name, 2, Duration::from_secs(60))
            .await?;
    }
    host.assert_alive_throughout()?;
    host.terminate(Duration::from_secs(30)).await?;
    Ok(())
}

/// Through the host's pod filter, the API server's watch semantics still
/// hold: a pod that loses its managed-by label alive (a `DELETED` event
/// with its owner) gets it back and is not replaced (`pods/lost-labels`);
/// a pod released by its owner (its controller reference removed: a
/// `MODIFIED` event the filter turns into a `DELETED` one without an
/// owner) leaves the cache, and its former owner replaces it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlabelled_and_released_pods_are_handled_through_the_filter() -> Result<()> {
    use kube::ResourceExt;
    use kube::api::{Patch, PatchParams};
    use wasm_operator::ownership::MANAGED_BY_LABEL;
    let _turn = SERIAL.lock().await;
    let env = TestEnv::new("released").await?;
    env.create("web", 2, &[]).await?;
    let dir = tempfile::tempdir()?;
    let mut host = WatchedHost::start(
        std::path::Path::new(BIN),
        "released",
        dir.path(),
        &host_args(&env, dir.path(), &[]),
        &host_env(
            "released",
            &env.namespace,
            env.control_plane.kubeconfig_path(),
        ),
        WATCHDOG,
    )?;
    host.wait_ready(Duration::from_secs(40)).await?;
    let (_, pods) = env
        .wait_converged("web", 2, Duration::from_secs(60))
        .await?;
    let (unlabelled, released) = (pods[0].name_any(), pods[1].name_any());

    let unlabel = serde_json::json!({"metadata": {"labels": {MANAGED_BY_LABEL: null}}});
    env.pods()
        .patch(
            &unlabelled,
            &PatchParams::default(),
            &Patch::Merge(&unlabel),
        )
        .await?;
    wait_for("the label back", Duration::from_secs(20), || async {
        let pod = env.pods().get(&unlabelled).await?;
        Ok(pod.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some("wasm-operator"))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        env.live_pods("web").await?.len() == 2,
        "an unlabelled pod was replaced"
    );

    let release = serde_json::json!({"metadata": {"ownerReferences": null}});
    env.pods()
        .patch(&released, &PatchParams::default(), &Patch::Merge(&release))
        .await?;
    let at = Instant::now();
    let (_, now) = env
        .wait_converged("web", 2, Duration::from_secs(20))
        .await?;
    let replaced_after = at.elapsed();
    ensure!(
        now.iter().all(|p| p.name_any() != released),
        "the released pod still counts as the owner's"
    );
    ensure!(
        env.pods()
            .get(&released)
            .await?
            .owner_references()
            .is_empty(),
        "the released pod was adopted back"
    );
    let relabelled = counter(&host, "wasm_operator_pods_relabelled_total", "").await;
    let dropped = counter(
        &host,
        "wasm_operator_pods_dropped_total",
        r#"reason="not-controlled""#,
    )
    .await;
    eprintln!(
        "released: the unlabelled pod got its label back (relabelled {relabelled}); the released pod was \
         replaced {:.1} s after its release ({dropped} events of pods nobody controls left out)",
        replaced_after.as_secs_f64()
    );
    ensure!(dropped >= 1, "the released pod's event was not left out");
    host.assert_alive_throughout()?;
    host.terminate(Duration::from_secs(30)).await?;
    Ok(())
}
