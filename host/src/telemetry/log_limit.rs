//! Per-object rate limits for log lines at info and above: the lines a
//! person acts on (pods created or deleted, failures) are kept, but one
//! object that fails or churns every few hundred milliseconds cannot fill
//! the log. It owns the counting only; callers log, at debug, what it
//! holds back, and name in the next line they emit how many were held.
//!
//! An object may emit [`BURST`] lines per [`WINDOW`]; lines past that are
//! held back until the window ends. Entries are dropped with the object
//! ([`LogLimit::forget`]) and, past [`MAX_TRACKED`] objects, any whose window
//! has ended; when every tracked object is inside its window, a new one is
//! not tracked and its lines pass (the limit never hides the first line of
//! an object).

use crate::locks::MutexExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines one object may emit per window.
pub const BURST: u32 = 5;

/// The window.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Objects tracked at most (about 100 bytes each).
pub const MAX_TRACKED: usize = 65_536;

/// Whether a line may be emitted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Emit it; `held_back` lines of this object were held back since the
    /// last one emitted (name them in the line).
    Emit {
        /// Lines held back before this one.
        held_back: u64,
    },
    /// Hold it back (log it at debug).
    HoldBack,
}

#[derive(Debug)]
struct Slot {
    window_start: Instant,
    used: u32,
    held_back: u64,
}

/// The per-object line budget; cheap to share behind the controller's
/// per-object state.
#[derive(Debug, Default)]
pub struct LogLimit {
    slots: Mutex<HashMap<String, Slot>>,
}

impl LogLimit {
    /// Whether `key` (an object's UID) may emit a line now.
    pub fn check(&self, key: &str) -> Verdict {
        self.check_at(key, Instant::now())
    }

    /// Drops what is kept for `key`.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Objects tracked now.
    pub fn tracked(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock_unpoisoned()
    }

    fn check_at(&self, key: &str, now: Instant) -> Verdict {
        let mut slots = self.lock();
        if !slots.contains_key(key) && slots.len() >= MAX_TRACKED {
            slots.retain(|_, slot| now.duration_since(slot.window_start) < WINDOW);
            if slots.len() >= MAX_TRACKED {
                return Verdict::Emit { held_back: 0 };
            }
        }
        let slot = slots.entry(key.to_string()).or_insert(Slot {
            window_start: now,
            used: 0,
            held_back: 0,
        });
        if now.duration_since(slot.window_start) >= WINDOW {
            slot.window_start = now;
            slot.used = 0;
        }
        if slot.used >= BURST {
            slot.held_back += 1;
            return Verdict::HoldBack;
        }
        slot.used += 1;
        Verdict::Emit {
            held_back: std::mem::take(&mut slot.held_back),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_lines_are_held_back_until_the_window_ends() {
        let limit = LogLimit::default();
        let start = Instant::now();
        for _ in 0..BURST {
            assert_eq!(limit.check_at("a", start), Verdict::Emit { held_back: 0 });
        }
        assert_eq!(limit.check_at("a", start), Verdict::HoldBack);
        assert_eq!(limit.check_at("a", start + WINDOW / 2), Verdict::HoldBack);
        // Another object has its own budget.
        assert_eq!(limit.check_at("b", start), Verdict::Emit { held_back: 0 });
        // The next window: the first line names the two held back.
        assert_eq!(
            limit.check_at("a", start + WINDOW),
            Verdict::Emit { held_back: 2 }
        );
        assert_eq!(
            limit.check_at("a", start + WINDOW),
            Verdict::Emit { held_back: 0 }
        );
    }

    #[test]
    fn forgetting_an_object_drops_its_entry() {
        let limit = LogLimit::default();
        let now = Instant::now();
        for _ in 0..=BURST {
            limit.check_at("a", now);
        }
        limit.forget("a");
        assert_eq!(limit.tracked(), 0);
        assert_eq!(limit.check_at("a", now), Verdict::Emit { held_back: 0 });
    }

    #[test]
    fn past_the_cap_ended_windows_are_dropped_and_untracked_objects_pass() {
        let limit = LogLimit::default();
        let start = Instant::now();
        {
            let mut slots = limit.lock();
            for i in 0..MAX_TRACKED {
                slots.insert(
                    format!("o{i}"),
                    Slot {
                        window_start: start,
                        used: BURST,
                        held_back: 0,
                    },
                );
            }
        }
        // Every window still open: the new object passes, untracked.
        for _ in 0..=BURST {
            assert_eq!(limit.check_at("new", start), Verdict::Emit { held_back: 0 });
        }
        assert_eq!(limit.tracked(), MAX_TRACKED);
        // Once they ended, they are dropped to make room.
        assert_eq!(
            limit.check_at("new", start + WINDOW),
            Verdict::Emit { held_back: 0 }
        );
        assert_eq!(limit.tracked(), 1);
    }
}
