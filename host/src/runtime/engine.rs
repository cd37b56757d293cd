//! The wasmtime [`Engine`] of a runtime and its epoch ticker.
//!
//! Epoch interruption bounds each call's time far more cheaply than fuel
//! (no counting in the generated code, only a check at loop headers and
//! function entries): a background thread bumps the epoch every [`TICK`],
//! and each store traps once its deadline of ticks has passed. The deadline
//! is wall-clock time while the guest runs, so it is at most one tick late.

use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::config::RuntimeConfig;

/// How often the epoch advances: the resolution of the deadline.
pub const TICK: Duration = Duration::from_millis(10);

/// Guest stack limit.
const MAX_WASM_STACK: usize = 2 * 1024 * 1024;

/// Builds the engine for `config` and starts its epoch ticker.
pub fn new_engine(config: &RuntimeConfig) -> anyhow::Result<Engine> {
    let mut wasm = Config::new();
    wasm.wasm_component_model(true);
    wasm.epoch_interruption(true);
    // Fresh instances map their initial memory copy-on-write from the
    // compiled image instead of copying data segments.
    wasm.memory_init_cow(true);
    wasm.max_wasm_stack(MAX_WASM_STACK);
    if let Some(slots) = config.allocator.pool_size() {
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(config, slots)));
    }
    let engine = Engine::new(&wasm)?;
    start_ticker(&engine)?;
    Ok(engine)
}

/// A pool of `slots` component instances. A Rust component has a handful of
/// core instances (the program, plus the wasip1 adapter's shims for
/// cargo-component builds), usually one memory and a few tables each.
fn pooling(config: &RuntimeConfig, slots: u32) -> PoolingAllocationConfig {
    let max_memory = usize::try_from(config.memory_limit_bytes).unwrap_or(usize::MAX);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(8))
        .total_memories(slots.saturating_mul(2))
        .total_tables(slots.saturating_mul(8))
        .max_memory_size(max_memory)
        // Keep some slots' pages resident for reuse, zeroed lazily.
        .max_unused_warm_slots(slots.min(16))
        .linear_memory_keep_resident(2 << 20)
        .table_keep_resident(64 << 10);
    pool
}

/// Starts the thread that advances `engine`'s epoch. It holds only a weak
/// reference and stops when the engine is dropped.
fn start_ticker(engine: &Engine) -> anyhow::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch-ticker".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(TICK);
            }
        })
        .map_err(|err| {
            anyhow::anyhow!("cannot start the epoch ticker (plugin deadlines need it): {err}")
        })?;
    Ok(())
}

/// Ticks for a deadline: rounded up, plus one because the first tick may
/// come at any moment after the deadline is set.
pub fn deadline_ticks(deadline: Duration) -> u64 {
    let tick = TICK.as_nanos();
    let ticks = deadline.as_nanos().div_ceil(tick);
    u64::try_from(ticks)
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_never_fires_early() {
        assert_eq!(deadline_ticks(Duration::from_secs(1)), 101);
        assert_eq!(deadline_ticks(Duration::from_millis(1)), 2);
        assert_eq!(deadline_ticks(Duration::from_millis(15)), 3);
    }
}
