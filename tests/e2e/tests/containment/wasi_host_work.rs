//! Containment, round two (issue 22), hazard 2: host work and memory a
//! plugin causes through its WASI imports. Four objects whose plugin asks
//! the host for 32 MiB random buffers in a loop and one that keeps
//! pollables alive are stopped by rule (`limits/wasi-buffer`,
//! `limits/wasi-resources`) at their first call over the limit; a good
//! neighbour created meanwhile converges in normal time, and the host's
//! peak RSS stays within 100 MiB of its baseline.

use super::*;

use e2e_tests::memory::{peak_rss, reset_peak, rss, run_alone};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasi_floods_are_stopped_by_rule_and_host_rss_stays_bounded() -> anyhow::Result<()> {
    // Alone in a process of its own: other tests' hosts would count in the RSS.
    if let Some(outcome) =
        run_alone("wasi_host_work::wasi_floods_are_stopped_by_rule_and_host_rss_stays_bounded")
    {
        return outcome;
    }
    let env = TestEnv::new("wasi-host-work").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    // The baseline: a running host that reconciled one object.
    env.create("warm", 1, &[]).await?;
    env.wait_converged("warm", 1, CONVERGE).await?;
    reset_peak()?;
    let baseline = rss()?;

    let offenders = [
        ("random-a", "random-flood", "limits/wasi-buffer"),
        ("random-b", "random-flood", "limits/wasi-buffer"),
        ("random-c", "random-flood", "limits/wasi-buffer"),
        ("random-d", "random-flood", "limits/wasi-buffer"),
        ("pollables", "pollable-flood", "limits/wasi-resources"),
    ];
    let modes: Vec<(&str, &str)> = offenders.iter().map(|(n, m, _)| (*n, *m)).collect();
    let started = Instant::now();
    with_good_neighbour(&env, &modes).await?;
    let good_took = started.elapsed();
    eprintln!(
        "wasi floods: good neighbour converged in {good_took:?}; peak RSS so far {} MiB over a \
         baseline of {} MiB",
        peak_rss()?.saturating_sub(baseline) >> 20,
        baseline >> 20
    );
    for (name, _, rule) in offenders {
        env.wait_event(name, "PluginFailed", rule, CONVERGE).await?;
    }
    // The offenders keep being retried (with backoff) while this runs.
    env.create("later", 2, &[]).await?;
    let later = Instant::now();
    env.wait_converged("later", 2, CONVERGE).await?;
    let later_took = later.elapsed();
    let peak = peak_rss()?;
    let over = peak.saturating_sub(baseline);
    eprintln!(
        "wasi floods: good neighbour converged in {good_took:?}, a later object in {later_took:?}; \
         peak RSS {} MiB over a baseline of {} MiB",
        over >> 20,
        baseline >> 20
    );
    assert!(
        good_took < Duration::from_secs(30) && later_took < Duration::from_secs(30),
        "workers were held: {good_took:?}, {later_took:?}"
    );
    assert!(
        over <= 100 << 20,
        "peak RSS {} MiB over the baseline of {} MiB",
        over >> 20,
        baseline >> 20
    );
    host.stop().await;
    Ok(())
}
