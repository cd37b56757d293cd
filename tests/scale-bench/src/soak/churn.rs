//! The soak's churn: what users do to the objects while the faults run.
//! At `--churn-per-sec`, one change at a time: a scale edit (`desired` to
//! another value in 1–5; 80%), a create of a new object (fresh name, never
//! reused; more likely while there are fewer than N), a delete (more
//! likely while there are more); and every `--swap-interval` a hot swap of
//! the plugin file every replica runs from, between two good builds of the
//! replicaset plugin (without and with its `v2` feature), written next to
//! it and renamed over it. Every desired count is recorded with the checker
//! *before* it is sent. Each change goes to the API server directly (not
//! through the replicas' proxies) with a 10 s timeout; one that fails is
//! counted and the churn goes on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use wasm_operator::crd::{Jinghzhu, JinghzhuSpec};

use super::Ctx;
use super::rng::Rng;

/// The highest `desired` the churn sets.
pub const MAX_DESIRED: u32 = 5;

/// What the churn did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChurnCounts {
    /// Scale edits sent.
    pub scales: u64,
    /// Objects created (the initial N included).
    pub creates: u64,
    /// Objects deleted.
    pub deletes: u64,
    /// Plugin hot swaps.
    pub swaps: u64,
    /// Changes that failed or timed out (the API server was down).
    pub failed: u64,
}

/// The two plugin builds the churn swaps between, and the file the replicas run.
#[derive(Debug, Clone)]
pub struct Plugins {
    /// The plugin file every replica's `--plugin` names.
    pub path: PathBuf,
    /// The two builds' bytes.
    pub builds: [Vec<u8>; 2],
}

impl Plugins {
    /// Writes build `which` over the plugin file (write, then rename).
    pub fn install(&self, which: usize) -> Result<()> {
        let staging = self.path.with_extension("wasm.new");
        std::fs::write(&staging, &self.builds[which % 2])
            .with_context(|| format!("writing {}", staging.display()))?;
        std::fs::rename(&staging, &self.path)
            .with_context(|| format!("renaming over {}", self.path.display()))
    }
}

/// The name of the `i`-th object ever created.
pub fn object_name(i: u64) -> String {
    format!("soak-{i:06}")
}

/// The churn's own state: the objects it made and has not deleted.
pub struct Churn {
    api: Api<Jinghzhu>,
    /// Object names alive, with the desired count last written.
    pub alive: Vec<(String, u32)>,
    next: u64,
    /// What it did.
    pub counts: ChurnCounts,
    swaps: usize,
}

impl Churn {
    /// A churn over `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            alive: Vec::new(),
            next: 0,
            counts: ChurnCounts::default(),
            swaps: 0,
        }
    }

    /// Creates `n` objects (16 in flight) with desired counts from `rng`.
    pub async fn create_initial(&mut self, ctx: &Ctx, n: usize, rng: &mut Rng) -> Result<()> {
        use futures::StreamExt;
        let mut specs = Vec::with_capacity(n);
        for _ in 0..n {
            let name = object_name(self.next);
            self.next += 1;
            let desired = rng.between(1, u64::from(MAX_DESIRED)) as u32;
            ctx.state().checker.desired_set(&name, desired);
            specs.push((name, desired));
        }
        let api = self.api.clone();
        let results: Vec<Result<()>> = futures::stream::iter(specs.clone())
            .map(|(name, desired)| {
                let api = api.clone();
                async move { create(&api, &name, desired).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for result in results {
            result?;
        }
        self.counts.creates += n as u64;
        self.alive = specs;
        Ok(())
    }

    /// Changes things until `until`, `per_sec` changes a second, swapping
    /// the plugin every `swap_every`.
    pub async fn run_until(
        &mut self,
        ctx: Arc<Ctx>,
        mut rng: Rng,
        per_sec: f64,
        swap_every: Duration,
        until: Instant,
    ) {
        let pace = Duration::from_secs_f64(1.0 / per_sec.max(0.01));
        let mut next_swap = Instant::now() + swap_every;
        while Instant::now() < until {
            if Instant::now() >= next_swap {
                next_swap += swap_every;
                self.swaps += 1;
                match ctx.plugins.install(self.swaps) {
                    Ok(()) => self.counts.swaps += 1,
                    Err(err) => {
                        eprintln!("chaos-soak: plugin swap failed: {err:#}");
                        self.counts.failed += 1;
                    }
                }
            }
            let changed =
                tokio::time::timeout(Duration::from_secs(10), self.change(&ctx, &mut rng))
                    .await
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("timed out")));
            if changed.is_err() {
                self.counts.failed += 1;
            }
            tokio::time::sleep(pace).await;
        }
    }

    async fn change(&mut self, ctx: &Ctx, rng: &mut Rng) -> Result<()> {
        let target = ctx.objects;
        let roll = rng.unit();
        let (create_p, delete_p) = if self.alive.len() < target {
            (0.15, 0.05)
        } else if self.alive.len() > target {
            (0.05, 0.15)
        } else {
            (0.1, 0.1)
        };
        if roll < create_p || self.alive.is_empty() {
            let name = object_name(self.next);
            self.next += 1;
            let desired = rng.between(1, u64::from(MAX_DESIRED)) as u32;
            ctx.state().checker.desired_set(&name, desired);
            create(&self.api, &name, desired).await?;
            self.counts.creates += 1;
            self.alive.push((name, desired));
        } else if roll < create_p + delete_p {
            let i = rng.between(0, self.alive.len() as u64 - 1) as usize;
            let (name, _) = self.alive.swap_remove(i);
            self.api.delete(&name, &DeleteParams::default()).await?;
            // Only once it is gone: until then its pods are judged.
            ctx.state().checker.object_deleted(&name);
            self.counts.deletes += 1;
        } else {
            let i = rng.between(0, self.alive.len() as u64 - 1) as usize;
            let old = self.alive[i].1;
            let mut desired = rng.between(1, u64::from(MAX_DESIRED) - 1) as u32;
            if desired >= old {
                desired += 1;
            }
            let name = self.alive[i].0.clone();
            ctx.state().checker.desired_set(&name, desired);
            self.alive[i].1 = desired;
            let patch = serde_json::json!({ "spec": { "desired": desired } });
            self.api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            self.counts.scales += 1;
        }
        Ok(())
    }
}

async fn create(api: &Api<Jinghzhu>, name: &str, desired: u32) -> Result<()> {
    let jz = Jinghzhu::new(
        name,
        JinghzhuSpec {
            desired,
            template: None,
        },
    );
    api.create(&PostParams::default(), &jz)
        .await
        .with_context(|| format!("creating {name}"))?;
    Ok(())
}

/// The plugin file's directory holds nothing else.
pub fn plugin_path(dir: &Path) -> PathBuf {
    dir.join("plugin").join("plugin.wasm")
}
