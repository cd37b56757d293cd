//! Probe state: the controller loop's heartbeat (liveness) and whether
//! both caches have had their initial list (readiness). The controller
//! writes it; [`crate::serve`] reads it for `/healthz` and `/readyz`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A heartbeat older than this fails `/healthz`.
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(10);

/// What the probes report on; the controller updates it.
#[derive(Debug)]
pub struct Health {
    base: Instant,
    /// Milliseconds after `base` of the last heartbeat.
    last_beat_ms: AtomicU64,
    caches_synced: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            last_beat_ms: AtomicU64::new(0),
            caches_synced: AtomicBool::new(false),
        }
    }
}

impl Health {
    /// The controller loop is alive.
    pub fn beat(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_beat_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the last heartbeat (creation counts as one).
    pub fn since_last_beat(&self) -> Duration {
        let last = Duration::from_millis(self.last_beat_ms.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(last)
    }

    /// Both caches have had their initial list.
    pub fn set_caches_synced(&self) {
        self.caches_synced.store(true, Ordering::Relaxed);
    }

    /// Whether both caches have had their initial list.
    pub fn caches_synced(&self) -> bool {
        self.caches_synced.load(Ordering::Relaxed)
    }

    /// Whether the controller loop beat recently.
    pub fn alive(&self) -> bool {
        self.since_last_beat() < HEARTBEAT_STALE
    }
}
