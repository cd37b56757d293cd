//! Replicas of `wasm-operator run --plugin-controllers --shards N` as
//! processes of their own (the real command line): started with Leases of a
//! few seconds, their held shards read from `/status`, their declared
//! writes by shard from `/metrics`; shared by the `declared_shards*` tests.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;

use crate::TestEnv;
use crate::watched_host::WatchedHost;

/// One replica: the process and its name (also its `POD_NAME`, so its
/// Events' `reportingInstance`).
pub struct Replica {
    /// Its `--leader-elect-identity`.
    pub name: String,
    /// The process.
    pub host: WatchedHost,
    shards: u32,
}

impl Replica {
    /// Starts the host `bin` as the replica `name` among `shards` shards,
    /// its log in `dir`.
    pub fn start(
        bin: &std::path::Path,
        env: &TestEnv,
        dir: &std::path::Path,
        name: &str,
        shards: u32,
    ) -> Result<Self> {
        let kubeconfig = env.control_plane.kubeconfig_path().display().to_string();
        let args: Vec<String> = [
            "--plugin-controllers",
            "--shards",
            &shards.to_string(),
            "--leader-elect-identity",
            name,
            "--leader-elect-namespace",
            &env.namespace,
            "--leader-elect-lease-duration",
            "4s",
            "--leader-elect-renew-deadline",
            "3s",
            "--leader-elect-retry-period",
            "1s",
            "--shutdown-timeout-secs",
            "30",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        let host = WatchedHost::start(
            bin,
            name,
            dir,
            &args,
            &[
                ("KUBECONFIG", kubeconfig),
                ("POD_NAME", name.to_string()),
                (
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
                ),
            ],
            512 * 1024 * 1024,
        )?;
        Ok(Self {
            name: name.to_string(),
            host,
            shards,
        })
    }

    /// The shards active here (`/status`'s `shards.owned`).
    pub async fn owned(&self) -> BTreeSet<u32> {
        let Some((200, body)) = self.host.get("/status").await else {
            return BTreeSet::new();
        };
        serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|status| status.pointer("/shards/owned").cloned())
            .and_then(|owned| serde_json::from_value(owned).ok())
            .unwrap_or_default()
    }

    /// This replica's declared writes by shard, for `controller`.
    pub async fn writes(&self, controller: &str) -> Result<BTreeMap<u32, u64>> {
        let Some((200, body)) = self.host.get("/metrics").await else {
            bail!("{}: /metrics did not answer", self.name);
        };
        Ok(declared_writes(&body, controller))
    }

    /// Reconciles it skipped for a shard it does not hold.
    pub async fn skipped(&self) -> u64 {
        let Some((200, body)) = self.host.get("/metrics").await else {
            return 0;
        };
        body.lines()
            .find_map(|line| line.strip_prefix("wasm_operator_shard_skipped_reconciles_total "))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .map_or(0, |value| value as u64)
    }
}

/// `wasm_operator_shard_declared_writes_total{controller,shard}` of one
/// controller, from a Prometheus text page.
pub fn declared_writes(page: &str, controller: &str) -> BTreeMap<u32, u64> {
    let mut writes = BTreeMap::new();
    for line in page.lines() {
        let Some(rest) = line.strip_prefix("wasm_operator_shard_declared_writes_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                (key == name).then(|| value.trim_matches('"').to_string())
            })
        };
        if label("controller").as_deref() != Some(controller) {
            continue;
        }
        if let (Some(shard), Ok(count)) = (
            label("shard").and_then(|s| s.parse::<u32>().ok()),
            value.trim().parse::<f64>(),
        ) {
            writes.insert(shard, count as u64);
        }
    }
    writes
}

/// Waits until `replicas` hold every shard between them, each active on
/// exactly one, in fair shares; their owned sets.
pub async fn wait_balanced(replicas: &[&Replica]) -> Result<Vec<BTreeSet<u32>>> {
    let n = replicas.len();
    let shards = replicas.first().map_or(0, |r| r.shards) as usize;
    let (lo, hi) = (shards / n, shards.div_ceil(n));
    let started = Instant::now();
    let mut last = Vec::new();
    while started.elapsed() < Duration::from_secs(90) {
        let mut sets = Vec::new();
        for replica in replicas {
            sets.push(replica.owned().await);
        }
        let all: usize = sets.iter().map(BTreeSet::len).sum();
        let distinct: BTreeSet<u32> = sets.iter().flatten().copied().collect();
        if all == shards
            && distinct.len() == shards
            && sets.iter().all(|s| (lo..=hi).contains(&s.len()))
        {
            return Ok(sets);
        }
        last = sets;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let tails: Vec<String> = replicas
        .iter()
        .map(|r| format!("--- {}:\n{}", r.name, r.host.log_tail(15)))
        .collect();
    bail!(
        "the shards never balanced over {n} replicas: last {last:?}\n{}",
        tails.join("\n")
    )
}

/// Checks that every shard of `parents` was written (for `controller`)
/// by exactly one of `replicas`, the one whose `owned` set holds it.
pub async fn check_one_writer_per_shard(
    controller: &str,
    replicas: &[&Replica],
    owned: &[BTreeSet<u32>],
    parents: &BTreeMap<String, u32>,
) -> Result<()> {
    let mut writes = Vec::new();
    for replica in replicas {
        writes.push(replica.writes(controller).await?);
    }
    for (parent, shard) in parents {
        let writers: Vec<&str> = replicas
            .iter()
            .zip(&writes)
            .filter(|(_, w)| w.get(shard).is_some_and(|n| *n > 0))
            .map(|(r, _)| r.name.as_str())
            .collect();
        let holder: Vec<&str> = replicas
            .iter()
            .zip(owned)
            .filter(|(_, o)| o.contains(shard))
            .map(|(r, _)| r.name.as_str())
            .collect();
        if writers.len() != 1 || writers != holder {
            bail!(
                "{parent} (shard {shard}): written by {writers:?}, held by {holder:?}; writes {writes:?}"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_writes_are_read_by_controller_and_shard() {
        let page = "# TYPE wasm_operator_shard_declared_writes counter\n\
            wasm_operator_shard_declared_writes_total{controller=\"x\",shard=\"2\"} 5\n\
            wasm_operator_shard_declared_writes_total{controller=\"y\",shard=\"3\"} 1\n\
            wasm_operator_shard_declared_writes_total{controller=\"x\",shard=\"4\"} 0\n";
        assert_eq!(declared_writes(page, "x"), BTreeMap::from([(2, 5), (4, 0)]));
    }
}
