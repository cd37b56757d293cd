//! The swapper: takes candidates from the sources one at a time, vets them
//! and either switches the active plugin or refuses the candidate — with an
//! error log, a counter, the last refusal kept for `/status`, and a Warning
//! Event on the ConfigMap when that was the source.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde::Serialize;
use tokio::sync::mpsc;

use super::ActivePlugin;
use super::candidate::vet;
use super::sources::Candidate;
use crate::controller::metrics::Metrics;
use crate::runtime::{Runtime, digest_of};

/// The last swap and the last refusal, for the status endpoint.
#[derive(Debug, Default, Clone, Serialize)]
pub struct SwapHistory {
    /// The last candidate that was swapped in.
    pub last_swap: Option<SwapRecord>,
    /// The last candidate that was refused.
    pub last_refusal: Option<SwapRecord>,
}

/// One swap or refusal.
#[derive(Debug, Clone, Serialize)]
pub struct SwapRecord {
    /// Where the candidate came from.
    pub source: String,
    /// Its digest.
    pub digest: String,
    /// What happened (`swapped` or why it was refused).
    pub outcome: String,
    /// Milliseconds from the change being seen to the new plugin serving (or the refusal).
    pub latency_ms: u64,
    /// Unix time of the outcome.
    pub at_unix: u64,
}

/// Runs until every source is gone.
pub async fn run(
    mut rx: mpsc::Receiver<Candidate>,
    runtime: Arc<Runtime>,
    active: Arc<ActivePlugin>,
    pinned_sha256: Option<String>,
    client: Option<Client>,
    metrics: Arc<Metrics>,
    history: Arc<Mutex<SwapHistory>>,
) {
    while let Some(candidate) = rx.recv().await {
        let digest = digest_of(&candidate.bytes);
        let started = Instant::now();
        let outcome = vet(
            &runtime,
            &candidate.bytes,
            &candidate.source,
            pinned_sha256.as_deref(),
        )
        .await;
        let at_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        match outcome {
            Ok(plugin) => {
                let old = active.current().describe();
                active.swap(plugin.clone());
                let latency = candidate.seen_at.elapsed();
                tracing::info!(
                    source = %candidate.source,
                    old = %old,
                    new = %plugin.describe(),
                    vet_ms = started.elapsed().as_millis() as u64,
                    swap_latency_ms = latency.as_millis() as u64,
                    "plugin swap: new plugin serving"
                );
                lock(&history).last_swap = Some(SwapRecord {
                    source: candidate.source,
                    digest,
                    outcome: "swapped".into(),
                    latency_ms: latency.as_millis() as u64,
                    at_unix,
                });
            }
            Err(refusal) => {
                metrics.plugin_swaps_refused.inc();
                tracing::error!(
                    source = %candidate.source,
                    candidate = %digest,
                    keeping = %active.current().describe(),
                    reason = %refusal,
                    "plugin swap refused; the current plugin keeps serving"
                );
                if let (Some(client), Some((ns, name))) = (&client, &candidate.configmap) {
                    record_refusal(client, ns, name, &digest, &refusal.to_string()).await;
                }
                lock(&history).last_refusal = Some(SwapRecord {
                    source: candidate.source,
                    digest,
                    outcome: refusal.to_string(),
                    latency_ms: candidate.seen_at.elapsed().as_millis() as u64,
                    at_unix,
                });
            }
        }
    }
}

fn lock(history: &Mutex<SwapHistory>) -> std::sync::MutexGuard<'_, SwapHistory> {
    history.lock().unwrap_or_else(|e| e.into_inner())
}

async fn record_refusal(client: &Client, namespace: &str, name: &str, digest: &str, reason: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Ok(cm) = api.get(name).await else { return };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "wasm-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: "PluginRefused".into(),
        note: Some(
            format!("plugin {digest} refused, the current plugin keeps serving: {reason}")
                .chars()
                .take(1000)
                .collect(),
        ),
        action: "HotSwap".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, &cm.object_ref(&())).await {
        tracing::warn!(error = %err, "could not record the refusal Event on the ConfigMap");
    }
}
