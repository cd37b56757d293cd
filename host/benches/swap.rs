//! Swap latency: from the plugin file changing on disk to the new plugin
//! serving (the file watcher sees the rename, reads and vets the bytes —
//! compile or precompiled-cache load, world check, smoke reconcile — and
//! switches the active plugin). No cluster is involved: this is the host's
//! own part of a swap.
//!
//! Alternates between the example plugin v1 and v2 (`--features v2`), 20
//! swaps per mode, and prints p50 and max for
//! - cold: an empty precompiled cache for every swap (Cranelift compile included),
//! - warm: both plugins already in the precompiled cache.
//!
//! Run: `cargo bench -p wasm-operator --bench swap`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use wasm_artifacts::{Toolchain, build};
use wasm_operator::delivery::swapper::{self, SwapHistory};
use wasm_operator::delivery::{sources, vetting};
use wasm_operator::runtime::{Runtime, RuntimeConfig, digest_of};
use wasm_operator::slot::{ActivePlugin, RollbackPolicy};
use wasm_operator::telemetry::metrics::Metrics;

const SWAPS: usize = 20;

fn main() -> anyhow::Result<()> {
    let v1 = std::fs::read(build("replicaset-plugin", &[], Toolchain::Wasip2))?;
    let v2 = std::fs::read(build("replicaset-plugin", &["v2"], Toolchain::Wasip2))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    for (mode, warm) in [
        ("cold cache (compile included)", false),
        ("warm precompiled cache", true),
    ] {
        let latencies = rt.block_on(measure(&v1, &v2, warm))?;
        report(mode, &latencies);
    }
    Ok(())
}

async fn measure(v1: &[u8], v2: &[u8], warm: bool) -> anyhow::Result<Vec<Duration>> {
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    std::fs::write(&live, v1)?;
    let mut latencies = Vec::with_capacity(SWAPS);
    let cache_root = tempfile::tempdir()?;
    let config = |n: usize| RuntimeConfig {
        cache_dir: Some(if warm {
            cache_root.path().join("shared")
        } else {
            cache_root.path().join(format!("cold-{n}"))
        }),
        ..RuntimeConfig::default()
    };
    let runtime = Arc::new(Runtime::new(config(0))?);
    if warm {
        // Fill the cache with both plugins first.
        runtime.load(v1, "v1")?;
        runtime.load(v2, "v2")?;
    }
    let metrics = Arc::new(Metrics::default());
    let first = vetting::vet(&runtime, v1, "v1", None).await?;
    let active = Arc::new(ActivePlugin::new(
        first,
        RollbackPolicy::default(),
        metrics.clone(),
    ));
    let (tx, rx) = mpsc::channel(4);
    let rules = wasm_operator::registry::bounded::FileRules {
        any_path: true,
        ..Default::default()
    };
    sources::watch_file(live.clone(), digest_of(v1), rules, tx)?;
    let history = Arc::new(Mutex::new(SwapHistory::default()));
    let swapper_runtime = if warm {
        runtime.clone()
    } else {
        Arc::new(Runtime::new(config(1))?)
    };
    tokio::spawn(swapper::run(
        rx,
        swapper_runtime,
        active.clone(),
        None,
        None,
        metrics,
        history,
    ));
    // Cold: every candidate gets a unique trailing custom section, so its
    // digest (the cache key) is new and it must be compiled. Warm: plain
    // v1/v2, both already precompiled.
    for i in 0..SWAPS {
        let base = if i % 2 == 0 { v2 } else { v1 };
        let bytes = if warm { base.to_vec() } else { unique(base, i) };
        let digest = digest_of(&bytes);
        let tmp = live.with_extension("tmp");
        std::fs::write(&tmp, &bytes)?;
        let changed = Instant::now();
        std::fs::rename(&tmp, &live)?;
        while active.current().digest() != digest {
            anyhow::ensure!(
                changed.elapsed() < Duration::from_secs(30),
                "swap {i} never happened"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        latencies.push(changed.elapsed());
    }
    Ok(latencies)
}

/// `bytes` with a custom section appended (a valid component, new digest).
fn unique(bytes: &[u8], n: usize) -> Vec<u8> {
    let name = b"bench-nonce";
    let payload = n.to_le_bytes();
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push((1 + name.len() + payload.len()) as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

fn report(mode: &str, latencies: &[Duration]) {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "swap latency, {mode}: p50 {:.1} ms, max {:.1} ms, min {:.1} ms over {} swaps",
        ms(sorted[sorted.len() / 2]),
        ms(sorted[sorted.len() - 1]),
        ms(sorted[0]),
        sorted.len()
    );
}
