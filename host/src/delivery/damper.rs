//! Swaps damped where a source flaps, never where a person swaps: the
//! forwarder between a source and what vets its candidates ([`damped`]).
//! Each swap re-queues every object (a plugin call each, and a status
//! write each when the plugins say different things), so a source that
//! keeps moving (a tag flipped between two signed digests, a ConfigMap
//! rewritten in a loop) must cost a bounded number of swaps, whatever the
//! number of its moves; and a person's swap, or swap back, must not wait.
//!
//! The rules, per source, with `quiet` the quiet interval
//! (`--min-swap-interval-secs`, [`crate::slot::DEFAULT_MIN_SWAP_INTERVAL`]):
//!
//! - a move that follows a quiet period of its source (no move for
//!   `quiet`) passes at once: a single push is never delayed;
//! - a move back to the plugin the slot held before the source's last
//!   offer passes at once, once per busy streak (a person undoing a swap);
//! - any other move within `quiet` of the one before makes the source
//!   **flapping** (rule [`RULE`]): its moves are held until it has been
//!   quiet for the hold ([`SourceMoves::hold`]: `quiet`, doubled for each
//!   `quiet` the flap has lasted, at most [`MAX_HOLD_FACTOR`] × `quiet`);
//!   a newer move replaces the held one, which is coalesced (never vetted
//!   nor swapped in). When the hold has passed, the newest is offered,
//!   unless it is what the slot holds and what the source offered last
//!   (nothing moved): at most one swap per flap.
//!
//! A source's own refusal passes at once and drops a held candidate (the
//! source's newest offer is the refused one). A source's first read (its
//! initial candidate) passes and is not a move. A flap is logged, shown on
//! `/status` (`flapping`, and `lastCoalesced`/`swapsCoalesced` for what it
//! coalesced), counted (`wasm_operator_plugin_source_flaps_total`,
//! `wasm_operator_plugin_swaps_coalesced_total`) and recorded as a
//! `PluginSourceFlapping` Warning Event on the source's object (its
//! ConfigMap, the host's Pod for an OCI flag, the `JinghzhuPlugin`).
//! A quiet interval of zero holds nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use tokio::sync::mpsc;

use crate::delivery::report::{WarnOn, warn_on};
use crate::delivery::sources::Candidate;
use crate::delivery::swapper::{FlapRecord, SwapHistory, SwapRecord, lock, unix_now};
use crate::runtime::digest_of;
use crate::slot::ActivePlugin;
use crate::telemetry::metrics::Metrics;

/// The rule named when a flapping source is held and its moves coalesced.
pub const RULE: &str = "swap/flapping";

/// The longest hold, as a multiple of the quiet interval (80 s by default).
pub const MAX_HOLD_FACTOR: u32 = 8;

/// The Warning Event reason of a flapping source.
pub const FLAPPING_REASON: &str = "PluginSourceFlapping";

/// Where a source's flapping is reported, and the slot it swaps into.
#[derive(Clone)]
pub struct Damping {
    /// The slot (what it holds, and the quiet interval).
    pub active: Arc<ActivePlugin>,
    /// `/status`'s `flapping`, `swapsCoalesced` and `lastCoalesced`.
    pub history: Arc<Mutex<SwapHistory>>,
    /// `wasm_operator_plugin_source_flaps_total`,
    /// `wasm_operator_plugin_swaps_coalesced_total`.
    pub metrics: Arc<Metrics>,
    /// Records the Warning Event (none: logs and `/status` only).
    pub client: Option<Client>,
    /// The object the Warning goes on (a `JinghzhuPlugin` whose driver
    /// follows the source); none: the ConfigMap or the object the
    /// candidate names.
    pub events_on: Option<ObjectReference>,
}

/// The candidates of `input`, damped: see the module. `last` is the digest
/// the source offered at start, if known. The forwarder ends when the
/// source's channel ends or the returned receiver is dropped.
pub fn damped(
    input: mpsc::Receiver<Candidate>,
    damping: Damping,
    last: Option<String>,
) -> mpsc::Receiver<Candidate> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(forward(input, tx, damping, last));
    rx
}

/// Why a move passed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The quiet interval is zero: nothing is held.
    NotDamped,
    /// The source had been quiet for the interval.
    AfterQuiet,
    /// Back to the plugin held before the last offer, once per streak.
    BackToPrevious,
}

/// What happens to a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Offered now.
    Pass(Pass),
    /// Held: the source flaps (`started`: this move made it flap).
    Hold {
        /// This move began the flap.
        started: bool,
    },
}

/// What the damper knows of one source's moves (pure: the forwarder feeds
/// it the moves and the clock).
#[derive(Debug, Default, Clone)]
pub struct SourceMoves {
    /// The last move's time.
    last_move: Option<Instant>,
    /// The first move after the source was last quiet.
    streak_since: Option<Instant>,
    /// The one quick return of this streak is spent.
    returned: bool,
    /// Since when the source flaps (the start of its streak), while it does.
    flapping_since: Option<Instant>,
    /// Moves held in this flap.
    held_moves: u32,
    /// What the slot held before the source's last offer.
    previous: Option<String>,
    /// The digest the source offered last.
    last_offered: Option<String>,
}

impl SourceMoves {
    /// A source that offered `last_offered` at start (if known).
    pub fn new(last_offered: Option<String>) -> Self {
        Self {
            last_offered,
            ..Self::default()
        }
    }

    /// Judges a move to `digest` seen at `now`.
    pub fn on_move(&mut self, now: Instant, quiet: Duration, digest: &str) -> Verdict {
        let after_quiet = self
            .last_move
            .is_none_or(|at| now.saturating_duration_since(at) >= quiet);
        self.last_move = Some(now);
        if quiet.is_zero() {
            return Verdict::Pass(Pass::NotDamped);
        }
        if self.flapping_since.is_some() {
            self.held_moves = self.held_moves.saturating_add(1);
            return Verdict::Hold { started: false };
        }
        if after_quiet {
            self.streak_since = Some(now);
            self.returned = false;
            return Verdict::Pass(Pass::AfterQuiet);
        }
        let back = self.previous.as_deref() == Some(digest)
            && self.last_offered.as_deref() != Some(digest);
        if back && !self.returned {
            self.returned = true;
            return Verdict::Pass(Pass::BackToPrevious);
        }
        self.flapping_since = Some(self.streak_since.unwrap_or(now));
        self.held_moves = 1;
        Verdict::Hold { started: true }
    }

    /// Whether the source flaps now (its moves are held).
    pub fn flapping(&self) -> bool {
        self.flapping_since.is_some()
    }

    /// Moves held in the current flap.
    pub fn held_moves(&self) -> u32 {
        self.held_moves
    }

    /// How long a flapping source must be quiet before its newest move is
    /// offered: `quiet`, doubled for each whole `quiet` the flap has lasted
    /// up to its last move, at most [`MAX_HOLD_FACTOR`] × `quiet`.
    pub fn hold(&self, quiet: Duration) -> Duration {
        let (Some(since), Some(last)) = (self.flapping_since, self.last_move) else {
            return Duration::ZERO;
        };
        let lasted = last.saturating_duration_since(since).as_nanos();
        let periods = lasted / quiet.as_nanos().max(1);
        let factor = (1u128 << periods.min(31)).min(u128::from(MAX_HOLD_FACTOR));
        quiet.saturating_mul(u32::try_from(factor).unwrap_or(MAX_HOLD_FACTOR))
    }

    /// When a flapping source's newest move may be offered (`None`: not
    /// flapping).
    pub fn release_at(&self, quiet: Duration) -> Option<Instant> {
        self.flapping_since?;
        Some(self.last_move? + self.hold(quiet))
    }

    /// The hold has passed: the flap ends.
    pub fn end_flap(&mut self) {
        self.flapping_since = None;
        self.held_moves = 0;
    }

    /// `digest` was offered while the slot held `holding`.
    /// While nothing is held (no plugin serves yet), the source's own
    /// last offer counts as what was held before.
    pub fn offered(&mut self, digest: &str, holding: Option<String>) {
        let before = holding.or_else(|| self.last_offered.clone());
        if before.as_deref() != Some(digest) {
            self.previous = before;
        }
        self.last_offered = Some(digest.to_string());
    }

    /// Whether the newest move of a flap, `digest`, changes anything: not
    /// when the slot holds it and it is what the source offered last.
    pub fn worth_offering(&self, digest: &str, holding: Option<&str>) -> bool {
        !(holding == Some(digest) && self.last_offered.as_deref() == Some(digest))
    }
}

/// What the slot holds: the canary a rollout moves to, else what serves.
fn holding(active: &ActivePlugin) -> Option<String> {
    active
        .canary()
        .view()
        .map(|view| view.canary)
        .or_else(|| active.serving().map(|plugin| plugin.digest().to_string()))
}

/// What the forwarder does next.
enum Step {
    /// A flap's hold has passed.
    Release,
    /// A candidate from the source.
    Next(Box<Candidate>),
}

async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

async fn forward(
    mut input: mpsc::Receiver<Candidate>,
    tx: mpsc::Sender<Candidate>,
    damping: Damping,
    last: Option<String>,
) {
    let mut moves = SourceMoves::new(last);
    let mut held: Option<Candidate> = None;
    loop {
        let quiet = damping.active.quiet_interval();
        let release = moves.release_at(quiet);
        let step = tokio::select! {
            biased;
            () = until(release) => Step::Release,
            next = input.recv() => match next {
                Some(candidate) => Step::Next(Box::new(candidate)),
                None => break,
            },
            () = tx.closed() => break,
        };
        let offer = match step {
            Step::Release => release_newest(&damping, &mut moves, held.take(), quiet),
            Step::Next(candidate) => {
                on_candidate(&damping, &mut moves, &mut held, *candidate, quiet)
            }
        };
        if let Some(offer) = offer {
            if offer.refusal.is_none() {
                moves.offered(&digest_of(&offer.bytes), holding(&damping.active));
            }
            if tx.send(offer).await.is_err() {
                break;
            }
        }
    }
    // The source was replaced or stopped: a flap it was in is over.
    if moves.flapping() {
        lock(&damping.history).flapping = None;
    }
}

/// A candidate from the source: what to offer now, if anything (a held
/// one waits in `held`).
fn on_candidate(
    damping: &Damping,
    moves: &mut SourceMoves,
    held: &mut Option<Candidate>,
    candidate: Candidate,
    quiet: Duration,
) -> Option<Candidate> {
    if candidate.refusal.is_some() {
        if let Some(dropped) = held.take() {
            coalesced(damping, &dropped, "the source's newer offer was refused");
        }
        return Some(candidate);
    }
    if candidate.initial {
        return Some(candidate);
    }
    let digest = digest_of(&candidate.bytes);
    match moves.on_move(candidate.seen_at, quiet, &digest) {
        Verdict::Pass(why) => {
            if why == Pass::BackToPrevious {
                tracing::info!(
                    source = %candidate.source,
                    candidate = %digest,
                    "the source went back to the plugin held before its last change: offered at once (once per busy streak)"
                );
            }
            Some(candidate)
        }
        Verdict::Hold { started } => {
            if let Some(replaced) = held.replace(candidate) {
                coalesced(
                    damping,
                    &replaced,
                    "a newer candidate from the flapping source took its place",
                );
            }
            if let Some(candidate) = held.as_ref() {
                note_flap(damping, moves, candidate, &digest, quiet, started);
            }
            None
        }
    }
}

/// A flap's hold has passed: its newest candidate, if it changes anything.
fn release_newest(
    damping: &Damping,
    moves: &mut SourceMoves,
    newest: Option<Candidate>,
    quiet: Duration,
) -> Option<Candidate> {
    let hold = moves.hold(quiet);
    moves.end_flap();
    lock(&damping.history).flapping = None;
    let candidate = newest?;
    let digest = digest_of(&candidate.bytes);
    let now_held = holding(&damping.active);
    if !moves.worth_offering(&digest, now_held.as_deref()) {
        coalesced(
            damping,
            &candidate,
            "the flapping source settled on the plugin the slot holds: nothing to swap",
        );
        return None;
    }
    tracing::info!(
        source = %candidate.source,
        candidate = %digest,
        quiet_for_ms = millis(hold),
        rule = RULE,
        "the flapping plugin source has been quiet long enough: offering its newest plugin"
    );
    Some(candidate)
}

/// Records a held move of a flapping source on `/status`; a flap that
/// `started` with it is also logged, counted and recorded as a Warning.
fn note_flap(
    damping: &Damping,
    moves: &SourceMoves,
    candidate: &Candidate,
    digest: &str,
    quiet: Duration,
    started: bool,
) {
    let hold = moves.hold(quiet);
    {
        let mut history = lock(&damping.history);
        let since_unix = match (&history.flapping, started) {
            (Some(flap), false) => flap.since_unix,
            _ => unix_now(),
        };
        history.flapping = Some(FlapRecord {
            source: candidate.source.clone(),
            rule: RULE.to_string(),
            since_unix,
            held_moves: moves.held_moves(),
            hold_ms: millis(hold),
            held: digest.to_string(),
        });
    }
    if !started {
        return;
    }
    damping.metrics.plugin_source_flaps.inc();
    tracing::warn!(
        source = %candidate.source,
        candidate = %digest,
        quiet_ms = millis(quiet),
        hold_ms = millis(hold),
        last_swap_ms_ago = damping.active.since_last_swap().map(millis),
        rule = RULE,
        "plugin source is flapping: its changes are held until it has been quiet long enough, then only its newest plugin is offered"
    );
    let Some(client) = damping.client.clone() else {
        return;
    };
    let note = format!(
        "plugin source {} is flapping (it moved again within {} s of its last change): rule {RULE} holds its changes until it has been quiet for {} s (longer the longer it flaps, at most {} s); only its newest plugin is then offered. Holding {digest}",
        candidate.source,
        quiet.as_secs(),
        hold.as_secs(),
        quiet.saturating_mul(MAX_HOLD_FACTOR).as_secs(),
    );
    // A resource's flap is recorded on the resource, as its refusals are;
    // otherwise on the ConfigMap or the object the candidate names.
    let (configmap, regarding) = match damping.events_on.clone() {
        Some(resource) => (None, Some(resource)),
        None => (candidate.configmap.clone(), candidate.regarding.clone()),
    };
    tokio::spawn(async move {
        warn_on(
            &client,
            WarnOn::of(configmap.as_ref(), regarding.as_ref()),
            FLAPPING_REASON,
            &note,
        )
        .await;
    });
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Counts, logs and records a coalesced candidate.
fn coalesced(damping: &Damping, candidate: &Candidate, why: &str) {
    let digest = digest_of(&candidate.bytes);
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
        digest,
        format!("coalesced ({RULE}): {why}"),
        candidate.seen_at,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::sources::SourceRefusal;
    use crate::slot::RollbackPolicy;

    const QUIET: Duration = Duration::from_secs(10);

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    /// A person's push, then their swap back a few seconds later: both at once.
    #[test]
    fn a_push_and_a_swap_back_pass_at_once() {
        let t0 = Instant::now();
        let mut moves = SourceMoves::new(Some("v1".into()));
        assert_eq!(
            moves.on_move(at(t0, 60), QUIET, "v2"),
            Verdict::Pass(Pass::AfterQuiet)
        );
        moves.offered("v2", Some("v1".into()));
        assert_eq!(
            moves.on_move(at(t0, 63), QUIET, "v1"),
            Verdict::Pass(Pass::BackToPrevious)
        );
        moves.offered("v1", Some("v2".into()));
        assert!(!moves.flapping());
        // Quiet again later: the next push passes at once too.
        assert_eq!(
            moves.on_move(at(t0, 80), QUIET, "v3"),
            Verdict::Pass(Pass::AfterQuiet)
        );
    }

    /// A third move within the interval is flapping: held, and the one
    /// quick return is spent for the streak.
    #[test]
    fn moves_within_the_quiet_interval_beyond_one_return_flap() {
        let t0 = Instant::now();
        let mut moves = SourceMoves::new(Some("v1".into()));
        assert!(matches!(moves.on_move(t0, QUIET, "v2"), Verdict::Pass(_)));
        moves.offered("v2", Some("v1".into()));
        assert!(matches!(
            moves.on_move(at(t0, 4), QUIET, "v1"),
            Verdict::Pass(Pass::BackToPrevious)
        ));
        moves.offered("v1", Some("v2".into()));
        assert_eq!(
            moves.on_move(at(t0, 8), QUIET, "v2"),
            Verdict::Hold { started: true }
        );
        assert!(moves.flapping());
        assert_eq!(
            moves.on_move(at(t0, 12), QUIET, "v1"),
            Verdict::Hold { started: false }
        );
        assert_eq!(moves.held_moves(), 2);
        // A new plugin (not a return) within the interval flaps as well.
        let mut other = SourceMoves::new(Some("v1".into()));
        assert!(matches!(other.on_move(t0, QUIET, "v2"), Verdict::Pass(_)));
        other.offered("v2", Some("v1".into()));
        assert_eq!(
            other.on_move(at(t0, 3), QUIET, "v3"),
            Verdict::Hold { started: true }
        );
    }

    /// The hold doubles with each quiet interval the flap lasted, capped.
    #[test]
    fn the_hold_grows_the_longer_the_source_flaps() {
        let t0 = Instant::now();
        let mut moves = SourceMoves::new(Some("a".into()));
        assert!(matches!(moves.on_move(t0, QUIET, "b"), Verdict::Pass(_)));
        moves.offered("b", Some("a".into()));
        let _ = moves.on_move(at(t0, 4), QUIET, "c");
        assert!(moves.flapping());
        assert_eq!(
            moves.hold(QUIET),
            QUIET,
            "a flap of 4 s: the quiet interval"
        );
        assert_eq!(moves.release_at(QUIET), Some(at(t0, 14)));
        let _ = moves.on_move(at(t0, 12), QUIET, "b");
        assert_eq!(moves.hold(QUIET), 2 * QUIET);
        let _ = moves.on_move(at(t0, 24), QUIET, "c");
        assert_eq!(moves.hold(QUIET), 4 * QUIET);
        let _ = moves.on_move(at(t0, 40), QUIET, "b");
        assert_eq!(moves.hold(QUIET), 8 * QUIET);
        let _ = moves.on_move(at(t0, 400), QUIET, "c");
        assert_eq!(moves.hold(QUIET), MAX_HOLD_FACTOR * QUIET, "capped");
        moves.end_flap();
        assert!(!moves.flapping());
        assert_eq!(moves.release_at(QUIET), None);
        // After the hold, the next move follows a quiet period: at once.
        assert_eq!(
            moves.on_move(at(t0, 500), QUIET, "d"),
            Verdict::Pass(Pass::AfterQuiet)
        );
    }

    #[test]
    fn the_newest_of_a_flap_is_offered_only_if_it_changes_something() {
        let mut moves = SourceMoves::new(None);
        moves.offered("v1", Some("v2".into()));
        assert!(
            !moves.worth_offering("v1", Some("v1")),
            "settled where it was"
        );
        assert!(moves.worth_offering("v2", Some("v1")));
        // The slot rolls out another plugin than the source offered last.
        assert!(moves.worth_offering("v1", Some("v3")));
    }

    #[test]
    fn a_zero_interval_holds_nothing() {
        let t0 = Instant::now();
        let mut moves = SourceMoves::new(None);
        for (i, digest) in ["a", "b", "c", "a"].iter().enumerate() {
            assert_eq!(
                moves.on_move(at(t0, i as u64), Duration::ZERO, digest),
                Verdict::Pass(Pass::NotDamped)
            );
        }
    }

    fn candidate(bytes: &[u8]) -> Candidate {
        Candidate {
            bytes: bytes.to_vec(),
            source: "file:/plugin.wasm".into(),
            configmap: None,
            regarding: None,
            refusal: None,
            verified_by: Vec::new(),
            seen_at: Instant::now(),
            initial: false,
            staged: None,
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
            client: None,
            events_on: None,
        }
    }

    async fn next_within(out: &mut mpsc::Receiver<Candidate>, wait: Duration) -> Option<Candidate> {
        tokio::time::timeout(wait, out.recv()).await.ok().flatten()
    }

    /// Through the forwarder: a push and a swap back pass at once; then a
    /// flap is held, coalesced to its newest, reported, and offered once
    /// quiet; a refusal during a flap passes at once.
    #[tokio::test]
    async fn the_forwarder_passes_people_and_holds_a_flap() {
        let damping = damping(Duration::from_millis(300));
        let (tx, input) = mpsc::channel(8);
        let mut out = damped(input, damping.clone(), Some(digest_of(b"a")));
        let fast = Duration::from_millis(100);
        tx.send(candidate(b"b")).await.expect("send");
        assert_eq!(
            next_within(&mut out, fast).await.map(|c| c.bytes),
            Some(b"b".to_vec())
        );
        tx.send(candidate(b"a")).await.expect("send");
        assert_eq!(
            next_within(&mut out, fast).await.map(|c| c.bytes),
            Some(b"a".to_vec()),
            "the swap back is not held"
        );
        let flap_started = Instant::now();
        for bytes in [b"b", b"c", b"d"] {
            tx.send(candidate(bytes)).await.expect("send");
        }
        assert!(next_within(&mut out, fast).await.is_none(), "held");
        assert!(
            lock(&damping.history)
                .flapping
                .as_ref()
                .is_some_and(|f| f.rule == RULE && f.held_moves == 3)
        );
        let newest = next_within(&mut out, Duration::from_secs(3))
            .await
            .expect("the newest");
        assert_eq!(newest.bytes, b"d");
        assert!(flap_started.elapsed() >= Duration::from_millis(250));
        assert_eq!(damping.metrics.plugin_swaps_coalesced.get(), 2);
        assert_eq!(damping.metrics.plugin_source_flaps.get(), 1);
        let history = lock(&damping.history).clone();
        assert_eq!(history.swaps_coalesced, 2);
        assert!(history.flapping.is_none(), "the flap ended");
        assert!(
            history
                .last_coalesced
                .is_some_and(|r| r.outcome.contains(RULE) && r.digest == digest_of(b"c"))
        );
        // A new flap; a refusal during it passes at once and drops the held one.
        tx.send(candidate(b"e")).await.expect("send");
        tx.send(candidate(b"f")).await.expect("send");
        let mut refused = candidate(b"");
        refused.refusal = Some(SourceRefusal {
            digest: "sha256:f00".into(),
            refusal: crate::refusal::Refusal::new("oci/unsigned", "no signature"),
        });
        tx.send(refused).await.expect("send");
        let mut got = Vec::new();
        while let Some(next) = next_within(&mut out, Duration::from_millis(150)).await {
            got.push(next);
        }
        assert!(
            got.iter().any(|c| c.refusal.is_some()),
            "the refusal is not held"
        );
        // The source ends: so does the forwarder.
        drop(tx);
        assert!(
            next_within(&mut out, Duration::from_secs(2))
                .await
                .is_none()
        );
    }

    #[tokio::test]
    async fn no_interval_holds_nothing() {
        let damping = damping(Duration::ZERO);
        let (tx, input) = mpsc::channel(8);
        let mut out = damped(input, damping.clone(), None);
        for bytes in [b"a", b"b", b"a", b"b"] {
            tx.send(candidate(bytes)).await.expect("send");
        }
        for bytes in [b"a", b"b", b"a", b"b"] {
            let next = next_within(&mut out, Duration::from_millis(100))
                .await
                .expect("at once");
            assert_eq!(next.bytes, bytes);
        }
        assert_eq!(damping.metrics.plugin_swaps_coalesced.get(), 0);
    }

    /// A source's first read (a local copy, a first pull) is not a move:
    /// a change right after it passes at once.
    #[tokio::test]
    async fn the_initial_candidate_is_not_a_move() {
        let damping = damping(Duration::from_secs(10));
        let (tx, input) = mpsc::channel(8);
        let mut out = damped(input, damping, None);
        let mut first = candidate(b"local");
        first.initial = true;
        tx.send(first).await.expect("send");
        tx.send(candidate(b"registry")).await.expect("send");
        for bytes in [&b"local"[..], b"registry"] {
            let next = next_within(&mut out, Duration::from_millis(100))
                .await
                .expect("at once");
            assert_eq!(next.bytes, bytes);
        }
    }
}
