//! One call at a time for plugins whose fresh instances start from a big
//! memory image (an interpreter's pre-initialised heap: Python, JavaScript).
//!
//! Each call of such a plugin writes pages all over that image (CPython's
//! reference counts), and each page it writes is a copy-on-write fault;
//! resetting the slot afterwards unmaps them again. Every such change of a
//! mapping makes the kernel flush the TLB of each other CPU running a thread
//! of this process. Two of these calls side by side on two cores interrupt
//! each other hundreds of times per call: measured with the Python plugin
//! (10 pods), 2.2 ms per call one at a time against 5.3–5.8 ms each when two
//! threads call at once, i.e. fewer calls per second for twice the CPU
//! (`cargo test --release -p e2e-tests --test languages keep_resident --
//! --ignored --nocapture`, docs/performance.md). A plugin with a small image
//! (Rust: about 1 MiB, a few pages written per call) is not gated.
//!
//! The gate is patient only for a while: a call that has waited
//! [`PATIENCE`] runs anyway, beside the one in progress, so one slow call
//! (a plugin spending its deadline on one object) never holds the others of
//! the same plugin back by more than that.

use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Initial linear memory from which a plugin's calls take turns: above the
/// Rust and Go plugins' (about 1 and 2 MiB), below the interpreters' (10 MiB
/// and more, most of it their pre-initialised heap).
pub const HEAVY_INITIAL_MEMORY_BYTES: u64 = 8 << 20;

/// How long a call waits for its turn before running beside the call in
/// progress: a few of the interpreters' calls (2–5 ms each).
pub const PATIENCE: Duration = Duration::from_millis(10);

/// Whether, and how, one plugin's calls take turns.
#[derive(Debug)]
pub struct CallGate {
    turn: Option<Semaphore>,
}

impl CallGate {
    /// The gate for a plugin whose largest memory starts at
    /// `initial_memory_bytes` (`None`: unknown, not gated).
    pub fn for_initial_memory(initial_memory_bytes: Option<u64>) -> Self {
        let heavy = initial_memory_bytes.is_some_and(|b| b >= HEAVY_INITIAL_MEMORY_BYTES);
        Self {
            turn: heavy.then(|| Semaphore::new(1)),
        }
    }

    /// A gate that lets every call through at once.
    pub fn open() -> Self {
        Self { turn: None }
    }

    /// Whether calls take turns.
    pub fn takes_turns(&self) -> bool {
        self.turn.is_some()
    }

    /// Waits for this call's turn, at most [`PATIENCE`]. Hold the returned
    /// permit until the call's store is dropped (the slot's reset is part
    /// of the work); `None` means the call goes ahead without a turn.
    pub async fn enter(&self) -> Option<SemaphorePermit<'_>> {
        let turn = self.turn.as_ref()?;
        match tokio::time::timeout(PATIENCE, turn.acquire()).await {
            Ok(Ok(permit)) => Some(permit),
            // Waited long enough (or the semaphore closed, which never
            // happens): run beside the call in progress.
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_big_images_take_turns() {
        assert!(!CallGate::for_initial_memory(None).takes_turns());
        assert!(!CallGate::for_initial_memory(Some(17 * 65536)).takes_turns());
        assert!(CallGate::for_initial_memory(Some(HEAVY_INITIAL_MEMORY_BYTES)).takes_turns());
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_call_waits_for_the_first_but_not_past_its_patience() {
        let gate = CallGate::for_initial_memory(Some(64 << 20));
        let first = gate.enter().await;
        assert!(first.is_some());
        // The turn is taken: the second waits its patience, then goes ahead.
        let started = tokio::time::Instant::now();
        assert!(gate.enter().await.is_none());
        assert_eq!(started.elapsed(), PATIENCE);
        drop(first);
        assert!(gate.enter().await.is_some(), "the turn is free again");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ungated_plugin_never_waits() {
        let gate = CallGate::for_initial_memory(Some(1 << 20));
        let started = tokio::time::Instant::now();
        let (a, b) = tokio::join!(gate.enter(), gate.enter());
        assert!(a.is_none() && b.is_none());
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
