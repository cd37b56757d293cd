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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::hotswap::RollbackPolicy;
    use crate::hotswap::sources::SourceRefusal;

    fn candidate(bytes: &[u8]) -> Candidate {
        Candidate {
            bytes: bytes.to_vec(),
            source: "file:/plugin.wasm".into(),
            configmap: None,
            regarding: None,
            refusal: None,
            verified_by: Vec::new(),
            seen_at: Instant::now(),
        }
    }

    fn damping(interval: Duration) -> Damping {
        let metrics = Arc::new(Metrics::default());
        let active = Arc::new(ActivePlugin::empty(
            RollbackPolicy::default(),
            metrics.clone(),
        ));
        active.set_min_swap_interval(interval);
        Damping {
            active,
            history: Arc::default(),
            metrics,
        }
    }

    #[tokio::test]
    async fn moves_within_the_interval_are_coalesced_to_the_newest() {
        let damping = damping(Duration::from_millis(300));
        let (tx, input) = mpsc::channel(8);
        let mut out = damped(input, damping.clone(), None);
        // No swap yet: the first move passes at once.
        tx.send(candidate(b"a")).await.expect("send");
        let first = tokio::time::timeout(Duration::from_millis(100), out.recv())
            .await
            .expect("at once")
            .expect("a candidate");
        assert_eq!(first.bytes, b"a");
        // It was swapped in: three moves within the interval, one offered.
        damping.active.swapped_now();
        let swapped = Instant::now();
        for bytes in [b"b", b"c", b"d"] {
            tx.send(candidate(bytes)).await.expect("send");
        }
        let newest = out.recv().await.expect("the newest");
        assert_eq!(newest.bytes, b"d");
        assert!(swapped.elapsed() >= Duration::from_millis(250));
        assert_eq!(damping.metrics.plugin_swaps_coalesced.get(), 2);
        let history = lock(&damping.history).clone();
        assert_eq!(history.swaps_coalesced, 2);
        assert!(
            history
                .last_coalesced
                .is_some_and(|r| r.outcome.contains(RULE) && r.digest == digest_of(b"c"))
        );
        // A refusal during a hold passes at once and drops the held one.
        damping.active.swapped_now();
        tx.send(candidate(b"e")).await.expect("send");
        let mut refused = candidate(b"");
        refused.refusal = Some(SourceRefusal {
            digest: "sha256:f00".into(),
            reason: "[oci/unsigned] no signature".into(),
        });
        tx.send(refused).await.expect("send");
        let next = tokio::time::timeout(Duration::from_millis(150), out.recv())
            .await
            .expect("the refusal is not held")
            .expect("a candidate");
        assert!(next.refusal.is_some());
        assert_eq!(damping.metrics.plugin_swaps_coalesced.get(), 3);
        // The source ends: so does the forwarder.
        drop(tx);
        assert!(out.recv().await.is_none());
    }

    #[tokio::test]
    async fn no_interval_holds_nothing() {
        let damping = damping(Duration::ZERO);
        damping.active.swapped_now();
        let (tx, input) = mpsc::channel(8);
        let mut out = damped(input, damping.clone(), None);
        for bytes in [b"a", b"b"] {
            tx.send(candidate(bytes)).await.expect("send");
        }
        for bytes in [b"a", b"b"] {
            let next = tokio::time::timeout(Duration::from_millis(100), out.recv())
                .await
                .expect("at once")
                .expect("a candidate");
            assert_eq!(next.bytes, bytes);
        }
        assert_eq!(damping.metrics.plugin_swaps_coalesced.get(), 0);
    }
}
