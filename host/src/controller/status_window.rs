//! Status writes coalesced per object: a status on its way somewhere (pods
//! created but not all ready, pods going Pending → Running → Ready one
//! after another) is held for up to the window (`--status-coalesce-ms`,
//! [`DEFAULT_WINDOW`]) and the object reconciled again when it ends, so a
//! burst of changes costs one write, not one per step. A status that says
//! the object has settled (as many live pods as desired, all of them ready)
//! is written at once, and so is any status once the window since the first
//! held one has passed: the last state is always written, at most one
//! window late.
//!
//! It owns only the per-object "held since" instants; the reconcile asks
//! [`StatusWindow::admit`] before it applies a proposal and requeues the
//! object for the time it returns. A reconcile runs one object at a time, so
//! a window cannot close during that object's write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::crd::JinghzhuStatus;
use crate::locks::MutexExt;

/// The window by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(1000);

/// What to do with a status change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Write it now.
    Write,
    /// Hold it: reconcile the object again after this long.
    Hold(Duration),
}

/// Per-object windows of held status changes.
#[derive(Debug)]
pub struct StatusWindow {
    window: Duration,
    held_since: Mutex<HashMap<String, Instant>>,
}

impl StatusWindow {
    /// Windows of `window` (zero: every status is written at once).
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            held_since: Mutex::default(),
        }
    }

    /// Whether the object `uid`, which wants `desired` pods, writes `status`
    /// now or holds it.
    pub fn admit(&self, uid: &str, status: &JinghzhuStatus, desired: u32) -> Admit {
        self.admit_at(uid, status, desired, Instant::now())
    }

    /// Drops what is kept for `uid`.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Objects holding a status now.
    pub fn holding(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.held_since.lock_unpoisoned()
    }

    fn admit_at(&self, uid: &str, status: &JinghzhuStatus, desired: u32, now: Instant) -> Admit {
        if self.window.is_zero() || settled(status, desired) {
            self.forget(uid);
            return Admit::Write;
        }
        let mut held = self.lock();
        let since = *held.entry(uid.to_string()).or_insert(now);
        let waited = now.saturating_duration_since(since);
        if waited >= self.window {
            held.remove(uid);
            return Admit::Write;
        }
        Admit::Hold(self.window - waited)
    }
}

/// The status of an object that has got where it was going: as many live
/// pods as desired, every one ready.
fn settled(status: &JinghzhuStatus, desired: u32) -> bool {
    status.current == desired && status.ready_replicas.unwrap_or(0) == desired
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(current: u32, ready: u32) -> JinghzhuStatus {
        JinghzhuStatus {
            current,
            ready_replicas: Some(ready),
            ..JinghzhuStatus::default()
        }
    }

    const WINDOW: Duration = Duration::from_millis(1000);

    #[test]
    fn a_settled_status_is_written_at_once_and_ends_the_window() {
        let w = StatusWindow::new(WINDOW);
        let t = Instant::now();
        assert_eq!(w.admit_at("a", &status(3, 0), 3, t), Admit::Hold(WINDOW));
        assert_eq!(w.admit_at("a", &status(3, 3), 3, t), Admit::Write);
        assert_eq!(w.holding(), 0);
        // Scaled to zero: settled with no pods.
        assert_eq!(w.admit_at("b", &status(0, 0), 0, t), Admit::Write);
    }

    #[test]
    fn steps_inside_the_window_are_held_and_the_state_at_its_end_is_written() {
        let w = StatusWindow::new(WINDOW);
        let t = Instant::now();
        assert_eq!(w.admit_at("a", &status(3, 0), 3, t), Admit::Hold(WINDOW));
        assert_eq!(
            w.admit_at("a", &status(3, 1), 3, t + Duration::from_millis(400)),
            Admit::Hold(Duration::from_millis(600))
        );
        // The pods stop changing at 2/3: the requeue at the window's end
        // writes what there is.
        assert_eq!(w.admit_at("a", &status(3, 2), 3, t + WINDOW), Admit::Write);
        // A new window starts with the next change.
        assert_eq!(
            w.admit_at("a", &status(3, 2), 3, t + WINDOW * 2),
            Admit::Hold(WINDOW)
        );
    }

    #[test]
    fn windows_are_per_object_and_a_zero_window_writes_everything() {
        let w = StatusWindow::new(WINDOW);
        let t = Instant::now();
        assert!(matches!(
            w.admit_at("a", &status(3, 0), 3, t),
            Admit::Hold(_)
        ));
        assert_eq!(
            w.admit_at("b", &status(2, 0), 2, t + Duration::from_millis(900)),
            Admit::Hold(WINDOW)
        );
        w.forget("a");
        assert_eq!(w.holding(), 1);
        let off = StatusWindow::new(Duration::ZERO);
        assert_eq!(off.admit_at("a", &status(3, 0), 3, t), Admit::Write);
        assert_eq!(off.holding(), 0);
    }
}
