//! The wasmtime [`Engine`] of a runtime and its epoch ticker.
//!
//! Epoch interruption bounds each call's time far more cheaply than fuel
//! (no counting in the generated code, only a check at loop headers and
//! function entries): a background thread bumps the epoch every [`TICK`],
//! and at every tick a running guest yields to the async executor (see
//! [`plugin`](super::plugin)), which abandons the call once its deadline has
//! passed. A guest blocked in a host function (a WASI sleep or poll) is
//! abandoned the same way, by the outer timeout around the call.
//!
//! Calls are synchronous component calls made through `call_async` (the
//! guest runs on a fiber so epoch ticks can suspend it); the component
//! model's concurrency support is off (see [`new_engine`]).
//!
//! Guests run on fibers of [`ASYNC_STACK`] bytes, of which at most
//! [`MAX_WASM_STACK`] may be used by Wasm frames: the rest is headroom for the
//! host functions a guest calls, so recursion that exhausts the guest's
//! stack traps cleanly instead of hitting the fiber's guard page.

use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::config::RuntimeConfig;

/// How often the epoch advances: the resolution of the deadline.
pub const TICK: Duration = Duration::from_millis(10);

/// Most native stack Wasm frames of one call may use.
pub const MAX_WASM_STACK: usize = 1024 * 1024;
/// The stack of the fiber a call runs on: [`MAX_WASM_STACK`] plus 1 MiB for
/// host functions called from the guest.
pub const ASYNC_STACK: usize = 2 * 1024 * 1024;
/// Default bytes of a pooled linear memory that stay resident between calls
/// (reset in place instead of unmapped;
/// [`RuntimeConfig::keep_resident_bytes`]). A plugin that touched that much
/// memory leaves it resident in each warm slot it ran in: at most
/// [`MAX_WARM_SLOTS`] × this per memory, bounded whatever the plugin does.
pub const LINEAR_MEMORY_KEEP_RESIDENT: usize = super::config::DEFAULT_KEEP_RESIDENT_BYTES;
/// Most pool slots kept warm (resident pages kept) for reuse.
pub const MAX_WARM_SLOTS: u32 = 16;

/// The engine settings this runtime chooses that generated code depends on
/// (the rest are wasmtime's defaults for its version and target). Every
/// engine of [`new_engine`] applies them, in the serving host and in its
/// compile helper alike, and [`engine_key`] hashes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeSettings {
    /// The component model's task machinery (off: the contract is synchronous).
    pub concurrency_support: bool,
    /// Loop headers and function entries check the epoch (the deadline).
    pub epoch_interruption: bool,
    /// Memory images mapped copy-on-write instead of data segments copied.
    pub memory_init_cow: bool,
    /// Most native stack Wasm frames may use.
    pub max_wasm_stack: usize,
}

/// What [`new_engine`] sets.
pub const CODE_SETTINGS: CodeSettings = CodeSettings {
    concurrency_support: false,
    epoch_interruption: true,
    memory_init_cow: true,
    max_wasm_stack: MAX_WASM_STACK,
};

/// The version of wasmtime this runtime is built with (from `Cargo.lock`).
pub const WASMTIME_VERSION: &str = env!("WASM_OPERATOR_WASMTIME_VERSION");

/// A short key of what an engine of this runtime generates code for: this
/// runtime's and wasmtime's versions, the target and [`CODE_SETTINGS`].
/// Part of every cached artifact's file name, and what the compile helper
/// must match before it compiles for a host. It is the same with and
/// without the `compile` feature (Cranelift's own
/// `Engine::precompile_compatibility_hash` exists only with it), and the
/// instance allocator and memory cap stay out of it (they do not change the
/// code). `Component::deserialize` checks everything again (wasmtime's
/// version, the target, the CPU features, the tunables), so an artifact
/// from a helper this key misjudged is refused, never run.
pub fn engine_key(_engine: &Engine) -> String {
    use sha2::{Digest, Sha256};
    let described = format!(
        "wasm-operator-runtime {}; wasmtime {WASMTIME_VERSION}; {}-{}; {CODE_SETTINGS:?}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
    );
    hex::encode(&Sha256::digest(described.as_bytes())[..8])
}

/// Builds the engine for `config` and starts its epoch ticker.
pub fn new_engine(config: &RuntimeConfig) -> anyhow::Result<Engine> {
    let CodeSettings {
        concurrency_support,
        epoch_interruption,
        memory_init_cow,
        max_wasm_stack,
    } = CODE_SETTINGS;
    let mut wasm = Config::new();
    wasm.wasm_component_model(true);
    // The contract is synchronous: no Store needs the component model's
    // async task machinery (with it, wasmtime runs every `call_async`
    // through `run_concurrent`'s task bookkeeping). wasmtime is built
    // without its `component-model-async` feature, which already makes
    // `false` the default; saying so keeps it off should a dependency ever
    // turn that feature on (wasmtime-wasi's `p3` does), and the engine's
    // tunables, hence the precompiled artifacts' key, stay the same.
    wasm.concurrency_support(concurrency_support);
    wasm.epoch_interruption(epoch_interruption);
    // Fresh instances map their initial memory copy-on-write from the
    // compiled image instead of copying data segments.
    wasm.memory_init_cow(memory_init_cow);
    wasm.max_wasm_stack(max_wasm_stack);
    wasm.async_stack_size(ASYNC_STACK);
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
        .total_stacks(slots)
        .max_memory_size(max_memory)
        // Keep some slots' pages resident for reuse, zeroed lazily.
        .max_unused_warm_slots(slots.min(MAX_WARM_SLOTS))
        // Reset only the pages a call touched (Linux 6.7+ PAGEMAP_SCAN)
        // instead of memsetting the first `keep_resident` bytes every time.
        .pagemap_scan(Enabled::Auto)
        .linear_memory_keep_resident(config.keep_resident_bytes)
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
