//! Swaps damped (issue 40, hazard 8): a source whose plugin moves faster
//! than `--min-swap-interval` (a tag flipped between two signed digests, a
//! ConfigMap rewritten in a loop) costs at most one swap per interval, not
//! one per move. Each swap re-queues every object (a plugin call each), so
//! a flapping tag was a plugin call per object per move.
//!
//! It owns the forwarder between a source and what vets its candidates
//! ([`damped`]): a candidate arriving within the interval of the last swap
//! or rollback ([`super::ActivePlugin::swap_wait`]) is held until the
//! interval ends; a newer one arriving meanwhile takes its place, and the
//! one it replaces is *coalesced* (never vetted nor swapped in). When the
//! interval ends, the newest is offered, unless the source is back at the
//! plugin it offered last and that plugin serves: then nothing moved, and
//! it is coalesced too. A candidate arriving after the interval passes at
//! once (a single push is never delayed). A source's own refusal passes at
//! once and drops a held candidate (the source's newest offer is the
//! refused one). Every coalesced candidate is counted in
//! `wasm_operator_plugin_swaps_coalesced_total`, logged, and shown on
//! `/status` (`swapsCoalesced`, `lastCoalesced`), under the rule
//! [`RULE`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::ActivePlugin;
use super::sources::Candidate;
use super::swapper::{SwapHistory, SwapRecord, lock};
use crate::runtime::digest_of;
use crate::telemetry::metrics::Metrics;

/// The shortest time between two swaps by default (`--min-swap-interval`).
pub const DEFAULT_MIN_SWAP_INTERVAL: Duration = Duration::from_secs(10);

/// The rule named when a candidate is coalesced.
pub const RULE: &str = "swap/min-interval";

/// Where coalesced candidates are reported.
#[derive(Clone)]
pub struct Damping {
    /// The slot whose last swap starts the interval.
    pub active: Arc<ActivePlugin>,
    /// `/status`'s `swapsCoalesced` and `lastCoalesced`.
    pub history: Arc<Mutex<SwapHistory>>,
    /// `wasm_operator_plugin_swaps_coalesced_total`.
    pub metrics: Arc<Metrics>,
}

/// The candidates of `input`, damped: see the module. `last` is the digest
/// the source offered last (at start), if known. The forwarder ends when
/// the source's channel ends or the returned receiver is dropped.
pub fn damped(
    input: mpsc::Receiver<Candidate>,
    damping: Damping,
    last: Option<String>,
) -> mpsc::Receiver<Candidate> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(forward(input, tx, damping, last));
    rx
}

/// What a hold ended with.
enum Held {
    /// Offer this candidate.
    Offer(Candidate),
    /// A refusal came: offer it; the held candidate was dropped.
    Refusal(Candidate),
    /// The source or the receiver is gone.
    Gone,
}

async fn forward(
    mut input: mpsc::Receiver<Candidate>,
    tx: mpsc::Sender<Candidate>,
    damping: Damping,
    mut last: Option<String>,
) {
    loop {
        let next = tokio::select! {
            next = input.recv() => next,
            () = tx.closed() => None,
        };
        let Some(candidate) = next else { return };
        if candidate.refusal.is_some() {
            if tx.send(candidate).await.is_err() {
                return;
            }
            continue;
        }
        let wait = damping.active.swap_wait();
        let offer = if wait.is_zero() {
            candidate
        } else {
            match hold(&mut input, &tx, &damping, candidate, wait).await {
                Held::Offer(candidate) => {
                    let digest = digest_of(&candidate.bytes);
                    let serving = damping
                        .active
                        .serving()
                        .is_some_and(|p| p.digest() == digest);
                    if serving && last.as_deref() == Some(digest.as_str()) {
                        coalesced(
                            &damping,
                            &candidate,
                            &digest,
                            "the source is back at the plugin that serves: nothing to swap",
                        );
                        continue;
                    }
                    candidate
                }
                Held::Refusal(refusal) => refusal,
                Held::Gone => return,
            }
        };
        last = Some(digest_of(&offer.bytes));
        if tx.send(offer).await.is_err() {
            return;
        }
    }
}

/// Holds `candidate` until the interval ends (`wait` from now, longer if a
/// swap happens meanwhile); a newer candidate replaces it (the older one is
/// coalesced), a refusal ends the hold.
async fn hold(
    input: &mut mpsc::Receiver<Candidate>,
    tx: &mpsc::Sender<Candidate>,
    damping: &Damping,
    mut candidate: Candidate,
    mut wait: Duration,
) -> Held {
    tracing::info!(
        source = %candidate.source,
        candidate = %digest_of(&candidate.bytes),
        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        rule = RULE,
        "plugin candidate held: the last swap was less than the minimum swap interval ago; a newer one from the source takes its place"
    );
    while !wait.is_zero() {
        tokio::select! {
            next = input.recv() => match next {
                None => return Held::Gone,
                Some(next) => {
                    let reason = if next.refusal.is_some() {
                        "the source's newer offer was refused"
                    } else {
                        "a newer candidate from the source took its place"
                    };
                    coalesced(damping, &candidate, &digest_of(&candidate.bytes), reason);
                    if next.refusal.is_some() {
                        return Held::Refusal(next);
                    }
                    candidate = next;
                }
            },
            () = tokio::time::sleep(wait) => {}
            () = tx.closed() => return Held::Gone,
        }
        wait = damping.active.swap_wait();
    }
    Held::Offer(candidate)
}

/// Counts, logs and records a coalesced candidate.
fn coalesced(damping: &Damping, candidate: &Candidate, digest: &str, why: &str) {
    damping.metrics.plugin_swaps_coalesced.inc();
    tracing::info!(
        source = %candidate.source,
        candidate = %digest,
        rule = RULE,
        reason = why,
        "plugin candidate coalesced: not swapped in"
    );
    let mut history = lock(&damping.history);
    history.swaps_coalesced = history.swaps_coalesced.saturating_add(1);
    history.last_coalesced = Some(SwapRecord::now(
        candidate.source.clone(),
        digest.to_string(),
        format!("coalesced ({RULE}): {why}"),
        candidate.seen_at,
    ));
}
