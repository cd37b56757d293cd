//! kube-rs-peer: the Jinghzhu operator written natively with kube-rs, the
//! replicaset logic (`replicaset-logic` and the plugin SDK's types) compiled
//! in, no Wasm. The scale benchmark (`tests/scale-bench`) runs it next to the
//! Wasm host to separate what the sandbox costs from what kube-rs costs.
//!
//! The same Jinghzhu API, pods, Events and annotation as `wasm-operator run`
//! with the replicaset plugin, and the same knobs: `--workers`,
//! `--namespace`, `--metrics-addr`. Watches Jinghzhus and the pods labelled
//! `app.kubernetes.io/managed-by=wasm-operator`, managedFields stripped, with
//! kube's `Controller` as the workqueue; the kube client is unthrottled.
//!
//! - [`convert`]: Kubernetes objects to and from the SDK's records.
//! - [`reconcile`]: one reconcile and what it writes.
//! - [`metrics`]: `controller_runtime_reconcile_total` on `/metrics`.
//! - [`ready`]: the pod cache's initial-list gate.
//! - [`floor`]: `--floor`, the controller with no logic that makes only
//!   the writes converging needs (the benchmark's `floor`).

mod convert;
mod floor;
mod metrics;
mod ready;
mod reconcile;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use wasm_operator::crd::Jinghzhu;

/// Flags, as `wasm-operator run` names them.
#[derive(Debug, Parser)]
#[command(name = "kube-rs-peer", version, about)]
struct Args {
    /// Reconciles running at once (one per object at a time regardless).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: u16,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Serve `/metrics` (Prometheus) here.
    #[arg(long, default_value = "127.0.0.1:9090")]
    metrics_addr: SocketAddr,
    /// Run as the floor: no logic, only the writes converging needs.
    #[arg(long)]
    floor: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(false)
        .init();
    // The logic's log lines go through `tracing` (reconcile::forward_logs).
    jinghzhu_plugin_sdk::log::set_native_echo(false);

    let client = Client::try_default()
        .await
        .context("no Kubernetes configuration found: set KUBECONFIG")?;
    let metrics = Arc::new(metrics::Metrics::default());
    let bound = metrics::serve(args.metrics_addr, metrics.clone()).await?;
    tracing::info!(addr = %bound, "serving /metrics");

    let (jinghzhu_api, pod_api): (Api<Jinghzhu>, Api<Pod>) = match &args.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (pod_cache, pod_writer) = reflector::store();
    let floor_index = Arc::new(floor::OwnerIndex::default());
    let index = args.floor.then(|| floor_index.clone());
    let pod_events = watcher(
        pod_api,
        watcher::Config::default().labels(&format!(
            "{}={}",
            reconcile::MANAGED_BY_LABEL,
            reconcile::MANAGED_BY
        )),
    )
    .default_backoff()
    .modify(|pod: &mut Pod| pod.managed_fields_mut().clear())
    .reflect(pod_writer)
    .inspect(move |event| {
        if let (Some(index), Ok(event)) = (&index, event) {
            index.observe(event);
        }
    })
    .touched_objects();

    let ctx = Arc::new(reconcile::Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "kube-rs-peer".to_owned(),
                instance: None,
            },
        ),
        client,
        pods_ready: ready::CacheReady::new(&pod_cache),
        pods: pod_cache,
        metrics,
        floor: args.floor,
        floor_expected: Default::default(),
        floor_index,
    });
    tracing::info!(
        workers = args.workers,
        namespace = args.namespace.as_deref().unwrap_or("<all>"),
        "controller starting"
    );
    let (jinghzhu_cache, jinghzhu_writer) = reflector::store();
    let jinghzhu_events = watcher(jinghzhu_api, watcher::Config::default())
        .default_backoff()
        .modify(|jz: &mut Jinghzhu| jz.managed_fields_mut().clear())
        .reflect(jinghzhu_writer)
        .applied_objects();
    Controller::for_stream(jinghzhu_events, jinghzhu_cache)
        .owns_stream(pod_events)
        .with_config(ControllerConfig::default().concurrency(args.workers))
        .shutdown_on_signal()
        .run(reconcile::reconcile_as_set, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = ?err, "controller");
            }
        })
        .await;
    Ok(())
}
