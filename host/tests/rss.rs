//! The host's memory after hostile outputs: a plugin that proposes 200 000
//! creates must not leave the host's resident memory inflated once the
//! output is refused. One test in its own binary, so no other test shares
//! the process whose RSS it reads.

mod support;

use std::sync::Arc;
use std::time::SystemTime;

use support::*;
use wasm_operator::apply::validate::{self, Limits};
use wasm_operator::crd::Jinghzhu;
use wasm_operator::runtime::{
    LoadedPlugin, PluginError, Runtime, RuntimeConfig, convert, engine, reclaim,
};

/// Resident set size of this process, from `/proc/self/statm`.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm has a resident field");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// What the controller does with one call: bounds first, then (for a
/// refused, large output) the memory back. `Ok(true)` = accepted.
fn reconcile_like_the_controller(
    plugin: &LoadedPlugin,
    jz: &Jinghzhu,
) -> Result<bool, PluginError> {
    let input = convert::input(jz, &[], SystemTime::now());
    let output = match wasm_operator::runtime::block_on(plugin.call_reconcile(&input, "rss/obj"))? {
        Ok(output) => output,
        Err(err) => {
            if matches!(err, PluginError::OutputTooLarge(_)) {
                reclaim::release_free_memory();
            }
            return Err(err);
        }
    };
    let large = reclaim::is_large(&output);
    let checked = validate::check_bounds(&output, jz, &[], &Limits::default());
    drop(output);
    if checked.is_err() && large {
        reclaim::release_free_memory();
    }
    Ok(checked.is_ok())
}

fn warm(plugin: &LoadedPlugin) {
    for _ in 0..20 {
        assert!(
            reconcile_like_the_controller(plugin, &jinghzhu("web", 3)).expect("reconciles"),
            "an ordinary output is accepted"
        );
    }
}

#[test]
fn rss_returns_to_baseline_after_200000_create_proposals() {
    // What `main` does first in the host binary.
    reclaim::pin_allocator_thresholds();
    // Both ways a 200 000-create output ends: over the default output limit
    // (refused while the host copies it), and under a limit an admin has
    // loosened to 256 MiB (copied whole, then refused by the count check).
    let runtimes: Vec<(&str, Runtime)> = [
        (
            "default output limit",
            RuntimeConfig::default().output_limit_bytes,
        ),
        ("output limit loosened to 256 MiB", 256 * 1024 * 1024),
    ]
    .into_iter()
    .map(|(name, limit)| {
        let config = RuntimeConfig {
            cache_dir: None,
            output_limit_bytes: limit,
            ..RuntimeConfig::default()
        };
        (name, Runtime::new(config).expect("runtime"))
    })
    .collect();
    let bytes = std::fs::read(misbehaving()).expect("misbehaving plugin");
    let plugins: Vec<(&str, Arc<LoadedPlugin>)> = runtimes
        .iter()
        .map(|(name, runtime)| (*name, runtime.load(&bytes, "misbehaving").expect("load")))
        .collect();
    for (_, plugin) in &plugins {
        warm(plugin);
    }
    let baseline = rss_bytes();

    let mut peak = baseline;
    for (name, plugin) in &plugins {
        for _ in 0..3 {
            let outcome = reconcile_like_the_controller(plugin, &misbehaving_jinghzhu("many"));
            match (name.starts_with("default"), outcome) {
                (true, Err(PluginError::OutputTooLarge(_))) => {}
                (false, Ok(false)) => {}
                (_, other) => panic!("{name}: unexpected outcome {other:?}"),
            }
            peak = peak.max(rss_bytes());
        }
        warm(plugin);
    }
    let after = rss_bytes();
    eprintln!(
        "RSS: baseline {:.1} MiB, highest seen between calls {:.1} MiB, after {:.1} MiB",
        mib(baseline),
        mib(peak),
        mib(after)
    );
    // The pool keeps the first pages of a slot's memory resident for the
    // next call (reset in place, not unmapped): a plugin that touched them
    // leaves them resident, bounded by the pool's settings whatever it
    // proposed. The calls here are sequential, so each runtime warmed one
    // slot. Anything beyond that, plus 10% noise, is the output's memory
    // kept: without the allocator settings that was 20 MiB.
    let kept_by_pool = (plugins.len() * engine::LINEAR_MEMORY_KEEP_RESIDENT) as u64;
    let allowed = baseline as f64 * 1.10 + kept_by_pool as f64;
    eprintln!(
        "allowed: baseline + 10% + {:.1} MiB the pool keeps resident = {:.1} MiB",
        mib(kept_by_pool),
        mib(allowed as u64)
    );
    assert!(
        after as f64 <= allowed,
        "RSS {:.1} MiB after the hostile outputs is more than the baseline {:.1} MiB + 10% + \
         the {:.1} MiB the instance pool may keep resident",
        mib(after),
        mib(baseline),
        mib(kept_by_pool)
    );
}
