//! Serve and refuse, written once for every front end: [`serve`] puts a
//! vetted plugin in the slot (first, swapped, or as the shadow) and
//! [`refuse`] leaves what serves serving; each logs, counts, keeps the
//! outcome for `/status`, and tells the rest through a
//! [`crate::delivery::report::Report`] (a Warning on the source's
//! ConfigMap, the resource's status and Event). [`run`] takes the flags'
//! candidates from their sources one at a time, vets, then serves or
//! refuses them.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use kube::Client;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::delivery::report::{Quietly, RefusedCandidate, Report, SourceEvents};
use crate::delivery::sources::Candidate;
use crate::delivery::vetting::vet_for_slot;
use crate::locks::MutexExt;
use crate::plugin_text;
use crate::refusal::Refusal;
use crate::runtime::{LoadedPlugin, Runtime, digest_of};
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

/// A refused candidate, for [`refuse`].
pub struct Refused<'a> {
    /// Where it came from.
    pub source: &'a str,
    /// Its digest.
    pub digest: &'a str,
    /// Why it was refused.
    pub refusal: &'a Refusal,
    /// When the change was seen.
    pub seen_at: Instant,
    /// The plugin that keeps serving (`None`: nothing serves).
    pub keeping: Option<String>,
    /// A candidate for the shadow: its refusal is kept apart on `/status`
    /// and never makes the host unready.
    pub shadow: bool,
}

/// Refuses a candidate, what served serving on: an error log,
/// `wasm_operator_plugin_swaps_refused`, the refusal on `/status`
/// (`lastRefusal`, `notServing` while nothing serves; `shadowRefusal` for
/// a shadow), then whatever `report` tells its front end.
pub async fn refuse(
    refused: Refused<'_>,
    metrics: &Metrics,
    history: &Mutex<SwapHistory>,
    report: &mut dyn Report,
) {
    metrics.plugin_swaps_refused.inc();
    let shown = plugin_text::shown(&refused.refusal.message);
    match (&refused.keeping, refused.shadow) {
        (_, true) => tracing::error!(
            source = %refused.source,
            candidate = %refused.digest,
            rule = refused.refusal.rule,
            reason = %shown,
            "shadow plugin refused; the host runs without it (or with the shadow it had)"
        ),
        (Some(keeping), false) => tracing::error!(
            source = %refused.source,
            candidate = %refused.digest,
            keeping = %keeping,
            rule = refused.refusal.rule,
            reason = %shown,
            "plugin swap refused; the current plugin keeps serving"
        ),
        (None, false) => tracing::error!(
            source = %refused.source,
            candidate = %refused.digest,
            rule = refused.refusal.rule,
            reason = %shown,
            "plugin refused; no plugin serves, the host stays unready and waits for a good one from the source"
        ),
    }
    {
        let mut history = lock(history);
        let record = SwapRecord::now(
            refused.source.to_string(),
            refused.digest.to_string(),
            refused.refusal.to_string(),
            refused.seen_at,
        );
        if refused.shadow {
            history.shadow_refusal = Some(record);
        } else {
            if refused.keeping.is_none() {
                history.not_serving = Some(format!(
                    "the plugin {} from {} was refused: {}",
                    refused.digest, refused.source, refused.refusal
                ));
            }
            history.last_refusal = Some(record);
        }
    }
    report
        .refused(RefusedCandidate {
            digest: refused.digest,
            refusal: refused.refusal,
            keeping: refused.keeping.as_deref(),
        })
        .await;
}

/// Where a vetted plugin goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeAs {
    /// The first plugin of a slot that may be empty (a start).
    First,
    /// In place of the active plugin, the old one on probation.
    Swap,
    /// The shadow, run in its own queue of `queue` calls, never applied.
    Shadow {
        /// Calls that may wait in the shadow's queue.
        queue: usize,
    },
}

/// Serves a vetted plugin (from `source`, its change seen at `seen_at`):
/// into the slot as `how`, a log line, the swap on `/status`, then
/// whatever `report` tells its front end.
pub async fn serve(
    slot: &ActivePlugin,
    (plugin, how): (Arc<LoadedPlugin>, ServeAs),
    (source, seen_at): (&str, Instant),
    history: &Mutex<SwapHistory>,
    report: &mut dyn Report,
) {
    let old = match how {
        ServeAs::Shadow { .. } => slot.shadow(),
        ServeAs::First | ServeAs::Swap => slot.serving(),
    }
    .map_or_else(|| "nothing".to_string(), |old| old.describe());
    let latency_ms = u64::try_from(seen_at.elapsed().as_millis()).unwrap_or(u64::MAX);
    match how {
        ServeAs::First => {
            tracing::info!(plugin = %plugin.describe(), source = %source, outcome = ?plugin.load_outcome(), "plugin loaded");
            slot.load_first(plugin.clone());
        }
        ServeAs::Swap => {
            tracing::info!(source = %source, old = %old, new = %plugin.describe(), swap_latency_ms = latency_ms, "plugin swap: new plugin serving");
            slot.swap(plugin.clone());
        }
        ServeAs::Shadow { queue } => {
            tracing::info!(source = %source, old = %old, shadow = %plugin.describe(), queue, "shadow plugin runs in its own queue beside the active one; nothing of it is applied");
            slot.set_shadow(Some(plugin.clone()), queue);
        }
    }
    if !matches!(how, ServeAs::Shadow { .. }) {
        let mut history = lock(history);
        history.not_serving = None;
        if how == ServeAs::Swap {
            history.last_swap = Some(SwapRecord::now(
                source.to_string(),
                plugin.digest().to_string(),
                "swapped".into(),
                seen_at,
            ));
        }
    }
    report.served(&plugin).await;
}

/// Runs until every source is gone: each candidate vetted, then served
/// or refused; refusals told as Warning Events on the source's ConfigMap
/// or object when there is a `client`.
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
        let mut events = client.as_ref().map(|client| {
            SourceEvents::new(
                client,
                candidate.configmap.as_ref(),
                candidate.regarding.as_ref(),
            )
        });
        let report: &mut dyn Report = match events.as_mut() {
            Some(events) => events,
            None => &mut Quietly,
        };
        let keeping = active.serving().map(|plugin| plugin.describe());
        // Refused by the source itself (an OCI artifact's signature, size,
        // digest or credentials): nothing to vet.
        let vetted = match &candidate.refusal {
            Some(refused) => Err((refused.digest.clone(), refused.refusal.clone())),
            None => vet_for_slot(
                &runtime,
                &active,
                &candidate.bytes,
                &candidate.source,
                pinned_sha256.as_deref(),
            )
            .await
            .map_err(|refusal| (digest_of(&candidate.bytes), refusal)),
        };
        match vetted {
            Ok(plugin) => {
                let how = (plugin, ServeAs::Swap);
                serve(
                    &active,
                    how,
                    (&candidate.source, candidate.seen_at),
                    &history,
                    report,
                )
                .await;
            }
            Err((digest, refusal)) => {
                let refused = Refused {
                    source: &candidate.source,
                    digest: &digest,
                    refusal: &refusal,
                    seen_at: candidate.seen_at,
                    keeping,
                    shadow: false,
                };
                refuse(refused, &metrics, &history, report).await;
            }
        }
    }
}

/// The history, even if a holder panicked.
pub fn lock(history: &Mutex<SwapHistory>) -> std::sync::MutexGuard<'_, SwapHistory> {
    history.lock_unpoisoned()
}
