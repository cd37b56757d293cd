//! The swapper: takes candidates from the sources one at a time, vets them
//! and either switches the active plugin or refuses the candidate — with an
//! error log, a counter, the last refusal kept for `/status`, and a Warning
//! Event on the ConfigMap when that was the source. A plugin refused at
//! start ([`crate::delivery::setup::start`]) is reported the same way.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::delivery::sources::Candidate;
use crate::delivery::vetting::vet_for_slot;
use crate::locks::MutexExt;
use crate::plugin_text;
use crate::refusal::Refusal;
use crate::runtime::{Runtime, digest_of};
use crate::slot::ActivePlugin;
use crate::telemetry::metrics::Metrics;

/// The last swap and the last refusal, for the status endpoint.
#[derive(Debug, Default, Clone, Serialize)]
pub struct SwapHistory {
    /// The last candidate that was swapped in.
    pub last_swap: Option<SwapRecord>,
    /// The last candidate that was refused.
    pub last_refusal: Option<SwapRecord>,
    /// Why no plugin serves, while none does (set at a refused start,
    /// cleared by the first swap).
    pub not_serving: Option<String>,
    /// The shadow plugin refused at start, if it was.
    pub shadow_refusal: Option<SwapRecord>,
    /// Candidates coalesced so far ([`crate::delivery::damper`]).
    pub swaps_coalesced: u64,
    /// The last candidate coalesced: never swapped in, a newer one (or the
    /// plugin serving) took its place.
    pub last_coalesced: Option<SwapRecord>,
    /// A source flapping now, its moves held ([`crate::delivery::damper`]).
    pub flapping: Option<FlapRecord>,
}

/// A flapping source whose moves are held (rule `swap/flapping`).
#[derive(Debug, Clone, Serialize)]
pub struct FlapRecord {
    /// The source.
    pub source: String,
    /// The rule holding it.
    pub rule: String,
    /// Unix time the flap was seen.
    pub since_unix: u64,
    /// Moves held so far in this flap (only the newest may be offered).
    pub held_moves: u32,
    /// How long the source must now be quiet before its newest is offered.
    pub hold_ms: u64,
    /// The newest plugin held (its digest).
    pub held: String,
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
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

impl SwapRecord {
    /// A record of an outcome reached now, for a change seen at `seen_at`.
    pub fn now(source: String, digest: String, outcome: String, seen_at: Instant) -> Self {
        Self {
            source,
            digest,
            outcome,
            latency_ms: u64::try_from(seen_at.elapsed().as_millis()).unwrap_or(u64::MAX),
            at_unix: unix_now(),
        }
    }
}

/// The object a delivery Warning Event is recorded on.
#[derive(Debug, Clone, Copy)]
pub enum WarnOn<'a> {
    /// The source's ConfigMap, `(namespace, name)`.
    ConfigMap(&'a (String, String)),
    /// An object the source names (an OCI source's: the host's Pod, a
    /// `JinghzhuPlugin`).
    Object(&'a ObjectReference),
    /// None: the reporter records its own (a resource's driver, on the
    /// resource with its status), or there is no object to name.
    Nowhere,
}

impl<'a> WarnOn<'a> {
    /// The ConfigMap when that is the source, else `regarding`.
    pub fn of(
        configmap: Option<&'a (String, String)>,
        regarding: Option<&'a ObjectReference>,
    ) -> Self {
        match (configmap, regarding) {
            (Some(configmap), _) => Self::ConfigMap(configmap),
            (None, Some(object)) => Self::Object(object),
            (None, None) => Self::Nowhere,
        }
    }
}

/// A refused candidate, for [`refused`].
pub struct Refused<'a> {
    /// Where it came from.
    pub source: &'a str,
    /// Where its Warning Event goes.
    pub warn_on: WarnOn<'a>,
    /// Its digest.
    pub digest: &'a str,
    /// Why it was refused.
    pub refusal: &'a Refusal,
    /// When the change was seen.
    pub seen_at: Instant,
    /// The plugin that keeps serving (`None`: nothing serves).
    pub keeping: Option<String>,
}

/// Reports a refusal: an error log, `wasm_operator_plugin_swaps_refused`,
/// `lastRefusal` on `/status` (and `notServing` while nothing serves), and a
/// `PluginRefused` Warning Event on the ConfigMap when that was the source.
pub async fn refused(
    refusal: Refused<'_>,
    client: Option<&Client>,
    metrics: &Metrics,
    history: &Mutex<SwapHistory>,
) {
    metrics.plugin_swaps_refused.inc();
    let consequence = match &refusal.keeping {
        Some(keeping) => {
            tracing::error!(
                source = %refusal.source,
                candidate = %refusal.digest,
                keeping = %keeping,
                rule = refusal.refusal.rule,
                reason = %plugin_text::shown(&refusal.refusal.message),
                "plugin swap refused; the current plugin keeps serving"
            );
            "the current plugin keeps serving"
        }
        None => {
            tracing::error!(
                source = %refusal.source,
                candidate = %refusal.digest,
                rule = refusal.refusal.rule,
                reason = %plugin_text::shown(&refusal.refusal.message),
                "plugin refused; no plugin serves, the host stays unready and waits for a good one from the source"
            );
            "no plugin serves until a good one arrives"
        }
    };
    if let Some(client) = client {
        publish_refusal(
            client,
            refusal.warn_on,
            (refusal.digest, consequence, &refusal.refusal.to_string()),
        )
        .await;
    }
    let mut history = lock(history);
    if refusal.keeping.is_none() {
        history.not_serving = Some(format!(
            "the plugin {} from {} was refused: {}",
            refusal.digest, refusal.source, refusal.refusal
        ));
    }
    history.last_refusal = Some(SwapRecord::now(
        refusal.source.to_string(),
        refusal.digest.to_string(),
        refusal.refusal.to_string(),
        refusal.seen_at,
    ));
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
        if let Some(refusal) = &candidate.refusal {
            // Refused by the source itself (an OCI artifact's signature,
            // size, digest or credentials): nothing to vet.
            refused(
                Refused {
                    source: &candidate.source,
                    warn_on: WarnOn::of(candidate.configmap.as_ref(), candidate.regarding.as_ref()),
                    digest: &refusal.digest,
                    refusal: &refusal.refusal,
                    seen_at: candidate.seen_at,
                    keeping: active.serving().map(|plugin| plugin.describe()),
                },
                client.as_ref(),
                &metrics,
                &history,
            )
            .await;
            continue;
        }
        let digest = digest_of(&candidate.bytes);
        let started = Instant::now();
        let outcome = vet_for_slot(
            &runtime,
            &active,
            &candidate.bytes,
            &candidate.source,
            pinned_sha256.as_deref(),
        )
        .await;
        let at_unix = unix_now();
        match outcome {
            Ok(plugin) => {
                let old = active
                    .serving()
                    .map_or_else(|| "nothing".to_string(), |old| old.describe());
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
                let mut history = lock(&history);
                history.not_serving = None;
                history.last_swap = Some(SwapRecord {
                    source: candidate.source,
                    digest,
                    outcome: "swapped".into(),
                    latency_ms: latency.as_millis() as u64,
                    at_unix,
                });
            }
            Err(refusal) => {
                refused(
                    Refused {
                        source: &candidate.source,
                        warn_on: WarnOn::of(
                            candidate.configmap.as_ref(),
                            candidate.regarding.as_ref(),
                        ),
                        digest: &digest,
                        refusal: &refusal,
                        seen_at: candidate.seen_at,
                        keeping: active.serving().map(|plugin| plugin.describe()),
                    },
                    client.as_ref(),
                    &metrics,
                    &history,
                )
                .await;
            }
        }
    }
}

/// The history, even if a holder panicked.
pub fn lock(history: &Mutex<SwapHistory>) -> std::sync::MutexGuard<'_, SwapHistory> {
    history.lock_unpoisoned()
}

/// Records a `PluginRefused` Warning Event on the object the refusal names.
async fn publish_refusal(
    client: &Client,
    on: WarnOn<'_>,
    (digest, consequence, reason): (&str, &str, &str),
) {
    let note = format!("plugin {digest} refused, {consequence}: {reason}");
    warn_on(client, on, "PluginRefused", &note).await;
}

/// Records a Warning Event with `reason` and `note` on `on`.
pub async fn warn_on(client: &Client, on: WarnOn<'_>, reason: &str, note: &str) {
    let regarding = match on {
        WarnOn::ConfigMap((namespace, name)) => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let Ok(cm) = api.get(name).await else { return };
            cm.object_ref(&())
        }
        WarnOn::Object(object) => object.clone(),
        WarnOn::Nowhere => return,
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "wasm-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(crate::plugin_text::escape_within(
            note,
            crate::plugin_text::MAX_EVENT_NOTE,
        )),
        action: "HotSwap".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, &regarding).await {
        tracing::warn!(error = %err, reason, "could not record the Warning Event");
    }
}
