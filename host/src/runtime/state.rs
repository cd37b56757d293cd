//! What each plugin call's `Store` holds: a WASI context that grants
//! nothing, captured stdout/stderr, the memory cap, and the tags (plugin,
//! object) that the `log` import and captured output are reported under.

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{self, Level};

/// Bytes of stdout/stderr kept per call (the rest is dropped).
const OUTPUT_CAPACITY: usize = 64 * 1024;
/// Log calls honoured per reconcile; later ones are counted and dropped.
const MAX_LOG_CALLS: u32 = 1000;

/// Per-call store state.
pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryCap,
    pub(crate) stdout: MemoryOutputPipe,
    pub(crate) stderr: MemoryOutputPipe,
    pub(crate) plugin: String,
    pub(crate) object: String,
    log_calls: u32,
}

impl PluginState {
    /// A state with no filesystem, network, environment or arguments.
    pub fn new(plugin: &str, object: &str, memory_limit: usize) -> Self {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryCap::new(memory_limit),
            stdout,
            stderr,
            plugin: plugin.to_string(),
            object: object.to_string(),
            log_calls: 0,
        }
    }

    /// Sends what the plugin printed to `tracing`, line by line, and
    /// returns stderr's text (it holds a panic's message).
    pub fn flush_output(&self) -> String {
        let stdout = String::from_utf8_lossy(&self.stdout.contents()).into_owned();
        for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
            tracing::info!(target: "plugin", plugin = %self.plugin, object = %self.object, stream = "stdout", "{line}");
        }
        let stderr = String::from_utf8_lossy(&self.stderr.contents()).into_owned();
        for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
            tracing::warn!(target: "plugin", plugin = %self.plugin, object = %self.object, stream = "stderr", "{line}");
        }
        if self.log_calls > MAX_LOG_CALLS {
            tracing::warn!(
                plugin = %self.plugin,
                object = %self.object,
                dropped = self.log_calls - MAX_LOG_CALLS,
                "plugin log calls over the limit were dropped"
            );
        }
        stderr
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl bindings::jinghzhu::operator::types::Host for PluginState {}

impl bindings::jinghzhu::operator::log::Host for PluginState {
    fn log(&mut self, level: Level, message: String, fields: Vec<bindings::KeyValue>) {
        self.log_calls += 1;
        if self.log_calls > MAX_LOG_CALLS {
            return;
        }
        let fields = fields
            .iter()
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect::<Vec<_>>()
            .join(" ");
        let (plugin, object) = (&self.plugin, &self.object);
        match level {
            Level::Trace => {
                tracing::trace!(target: "plugin", plugin = %plugin, object = %object, fields = %fields, "{message}")
            }
            Level::Debug => {
                tracing::debug!(target: "plugin", plugin = %plugin, object = %object, fields = %fields, "{message}")
            }
            Level::Info => {
                tracing::info!(target: "plugin", plugin = %plugin, object = %object, fields = %fields, "{message}")
            }
            Level::Warn => {
                tracing::warn!(target: "plugin", plugin = %plugin, object = %object, fields = %fields, "{message}")
            }
            Level::Error => {
                tracing::error!(target: "plugin", plugin = %plugin, object = %object, fields = %fields, "{message}")
            }
        }
    }
}

/// Caps a store's linear memories; remembers whether the cap was hit so the
/// resulting trap can be reported as what it is.
pub struct MemoryCap {
    limit: usize,
    pub(crate) hit: bool,
}

impl MemoryCap {
    fn new(limit: usize) -> Self {
        Self { limit, hit: false }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.hit = true;
            return Err(wasmtime::Error::msg(format!(
                "memory cap of {} MiB reached",
                self.limit / (1024 * 1024)
            )));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}
