//! The one wasmtime [`Engine`] of the process and its epoch ticker.
//!
//! Epoch interruption bounds each call's CPU time far more cheaply than
//! fuel: a background thread bumps the epoch every [`TICK`], and each store
//! gets a deadline of `deadline / TICK` ticks.

use std::sync::OnceLock;
use std::time::Duration;

use wasmtime::{Config, Engine};

/// How often the epoch advances: the resolution of the CPU deadline.
pub const TICK: Duration = Duration::from_millis(10);

/// Builds the engine: component model, epoch interruption, copy-on-write
/// memory images (fast fresh instances).
pub fn new_engine() -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.memory_init_cow(true);
    // Guests get no more than a few MiB of stack.
    config.max_wasm_stack(2 * 1024 * 1024);
    let engine = Engine::new(&config)?;
    start_ticker(&engine);
    Ok(engine)
}

/// Starts (once per engine) the thread that advances the epoch.
fn start_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("wasm-epoch-ticker".into())
        .spawn(move || {
            // Stops when the engine is dropped.
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(TICK);
            }
        });
    if let Err(err) = spawned {
        // Without the ticker no deadline ever fires; refuse loudly instead.
        static WARNED: OnceLock<()> = OnceLock::new();
        WARNED.get_or_init(|| tracing::error!(error = %err, "cannot start the epoch ticker: plugin deadlines will not fire"));
    }
}

/// Ticks for a deadline (at least one).
pub fn deadline_ticks(deadline: Duration) -> u64 {
    (deadline.as_millis() / TICK.as_millis()).max(1) as u64
}
