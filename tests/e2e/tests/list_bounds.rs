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
use e2e_tests::{HostOptions, LogCapture, RunningHost, TestEnv, plugin, wait_for};
use futures::future::try_join_all;
use wasm_operator::controller::ControllerConfig;
use wasm_operator::list_bounds::{Bound, ListBounds, ListLimits};
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
    let client = wasm_operator::api_client::build_bounded(
        setup.proxy.host_config(&setup.env.namespace)?,
        wasm_operator::api_client::MAX_RETRY_WAIT,
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
