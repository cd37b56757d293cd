//! What each plugin call's `Store` holds: a WASI context that grants
//! nothing, stdout/stderr forwarded to `tracing`, the memory cap, and the
//! host side of the `log` import.

use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{self, Level};
use super::output::{LineForwarder, StreamKind};
use super::tags::CallTags;

/// Log calls honoured per call; later ones are counted and dropped.
pub const MAX_LOG_CALLS: u32 = 1000;
/// Most table elements an instance may have (tables hold function
/// references; real plugins need a few hundred).
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Per-call store state.
pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryCap,
    stdout: LineForwarder,
    stderr: LineForwarder,
    tags: Arc<CallTags>,
    log_calls: u32,
}

impl PluginState {
    /// A state whose WASI context grants nothing: no preopened directories,
    /// no environment variables, no arguments, no sockets or name lookups,
    /// an empty stdin. Only the clocks and random numbers every WASI program
    /// may read are there (a plugin is told the time in its input anyway).
    pub fn new(tags: CallTags, memory_limit: usize) -> Self {
        let tags = Arc::new(tags);
        let stdout = LineForwarder::new(StreamKind::Stdout, Arc::clone(&tags));
        let stderr = LineForwarder::new(StreamKind::Stderr, Arc::clone(&tags));
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
            tags,
            log_calls: 0,
        }
    }

    /// The tags of this call.
    pub fn tags(&self) -> &CallTags {
        &self.tags
    }

    /// Ends the call's output: forwards unterminated last lines, reports
    /// dropped output and log calls, and returns the last lines of stderr
    /// (where a Rust panic's message is).
    pub fn finish_output(&self) -> Vec<String> {
        self.stdout.finish();
        self.stderr.finish();
        if self.log_calls > MAX_LOG_CALLS {
            let tags = &self.tags;
            tracing::warn!(
                target: "plugin",
                plugin = %tags.plugin,
                digest = %tags.digest,
                object = %tags.object,
                dropped = self.log_calls - MAX_LOG_CALLS,
                "plugin log calls over the limit of {MAX_LOG_CALLS} per call were dropped"
            );
        }
        self.stderr.tail()
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
        self.log_calls = self.log_calls.saturating_add(1);
        if self.log_calls > MAX_LOG_CALLS {
            return;
        }
        let fields = format_fields(&fields);
        let CallTags {
            plugin,
            digest,
            object,
        } = &*self.tags;
        // `tracing` needs field names known at compile time, so the plugin's
        // own fields travel as one `fields` value: `key=value key="a b"`.
        macro_rules! forward {
            ($macro:ident) => {
                tracing::$macro!(
                    target: "plugin",
                    plugin = %plugin,
                    digest = %digest,
                    object = %object,
                    fields = %fields,
                    "{message}"
                )
            };
        }
        match level {
            Level::Trace => forward!(trace),
            Level::Debug => forward!(debug),
            Level::Info => forward!(info),
            Level::Warn => forward!(warn),
            Level::Error => forward!(error),
        }
    }
}

/// `key=value` pairs separated by spaces; values with spaces, quotes or
/// `=` are quoted.
pub fn format_fields(fields: &[bindings::KeyValue]) -> String {
    fields
        .iter()
        .map(|kv| {
            let plain = !kv.value.is_empty()
                && !kv
                    .value
                    .contains(|c: char| c.is_whitespace() || c == '"' || c == '=');
            if plain {
                format!("{}={}", kv.key, kv.value)
            } else {
                format!("{}={:?}", kv.key, kv.value)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Caps a store's linear memories (the total of all of them: a component
/// may have several); remembers whether the cap was hit so the resulting
/// trap can be reported as what it is.
pub struct MemoryCap {
    limit: usize,
    in_use: usize,
    pub(crate) hit: bool,
}

impl MemoryCap {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            in_use: 0,
            hit: false,
        }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Growing past the cap traps at once (rather than making
        // `memory.grow` return -1): a Rust guest would abort on allocation
        // failure anyway, and the trap names the cause.
        let growth = desired.saturating_sub(current);
        let total = self.in_use.saturating_add(growth);
        if total > self.limit {
            self.hit = true;
            return Err(wasmtime::Error::msg(format!(
                "memory cap of {} MiB reached",
                self.limit / (1024 * 1024)
            )));
        }
        self.in_use = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_when_needed() {
        let kv = |k: &str, v: &str| bindings::KeyValue {
            key: k.into(),
            value: v.into(),
        };
        assert_eq!(
            format_fields(&[kv("a", "1"), kv("b", "two words"), kv("c", "")]),
            r#"a=1 b="two words" c="""#
        );
    }
}
