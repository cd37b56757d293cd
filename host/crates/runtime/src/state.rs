//! What each plugin call's `Store` holds: a WASI context that grants
//! nothing, stdout/stderr forwarded to `tracing`, the resource cap (memory,
//! table elements, instance/memory/table counts), the caps on host work
//! done through WASI imports (random buffers, live WASI resources and
//! component handles), and the host side of the `log` import with its
//! per-call budget.
//!
//! WASI imports run on the host's side, outside the guest's memory cap and
//! (being synchronous) outside the deadline while they run. So each is kept
//! small: a `get-random-bytes`/`get-insecure-random-bytes` call may ask for
//! at most [`MAX_RANDOM_BYTES`] (rule `limits/wasi-buffer`), and a call may
//! hold at most [`MAX_WASI_RESOURCES`] WASI resources (pollables, streams)
//! and [`MAX_COMPONENT_HANDLES`] component handles at once (rule
//! `limits/wasi-resources`). Going over either traps the call; a loop of
//! many small calls is cut by the deadline, which fires between calls
//! (see [`engine`](super::engine)).

use std::sync::Arc;

use wasmtime::component::{ResourceTable, ResourceTableError};
use wasmtime::{ResourceLimiter, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{self, Level};
use super::output::{LineForwarder, StreamKind};
use super::tags::CallTags;
use crate::plugin_text::escape;

/// Log calls honoured per call; later ones are counted and dropped.
pub const MAX_LOG_CALLS: u32 = 1000;
/// Bytes of log messages and fields forwarded per call (after escaping);
/// lines beyond it are counted and dropped.
pub const LOG_BUDGET_BYTES: usize = 64 * 1024;
/// Longest log message forwarded; longer ones are cut.
pub const MAX_LOG_MESSAGE: usize = 4 * 1024;
/// Most fields of one log line, and the longest field key and value.
pub const MAX_LOG_FIELDS: usize = 32;
const MAX_FIELD_KEY: usize = 128;
const MAX_FIELD_VALUE: usize = 1024;
/// Bytes a table element is charged against the memory cap (a function
/// reference is at most two words).
const TABLE_ELEMENT_BYTES: usize = 16;
/// Most table elements of all tables together (real plugins need a few
/// hundred).
pub const MAX_TABLE_ELEMENTS: usize = 100_000;
/// Most core instances one call may create (a Rust component has a handful:
/// the program and, for cargo-component builds, the WASI adapter's shims).
pub const MAX_INSTANCES: usize = 32;
/// Most linear memories, and most tables, of one call.
pub const MAX_MEMORIES: usize = 4;
/// Most tables of one call.
pub const MAX_TABLES: usize = 32;

/// Most bytes one `wasi:random` `get-random-bytes` or
/// `get-insecure-random-bytes` call may ask for (wasmtime's default is
/// 64 MiB, built synchronously on the host). Rust's std asks for 16 bytes
/// at a time; a guest that wants more asks again.
pub const MAX_RANDOM_BYTES: u64 = 64 * 1024;
/// Most WASI resources (pollables, streams, …) one call may hold at once in
/// the host's resource table (wasmtime's default: one million). A Rust
/// guest holds a handful.
pub const MAX_WASI_RESOURCES: usize = 1024;
/// Most component-model handles one call's store may hold at once
/// (wasmtime's default: 100 000).
pub const MAX_COMPONENT_HANDLES: usize = 4096;

/// A WASI limit a call went over, and the rule it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WasiLimit {
    /// A random buffer over [`MAX_RANDOM_BYTES`].
    Buffer,
    /// More live resources or handles than [`MAX_WASI_RESOURCES`] or
    /// [`MAX_COMPONENT_HANDLES`].
    Resources,
}

impl WasiLimit {
    /// The rule id after `limits/`.
    pub fn rule(self) -> &'static str {
        match self {
            WasiLimit::Buffer => "wasi-buffer",
            WasiLimit::Resources => "wasi-resources",
        }
    }

    /// What the limit is, for messages.
    pub fn describe(self) -> String {
        match self {
            WasiLimit::Buffer => {
                format!("it asked wasi:random for more than {MAX_RANDOM_BYTES} bytes in one call")
            }
            WasiLimit::Resources => format!(
                "it held more than {MAX_WASI_RESOURCES} WASI resources \
                 (pollables, streams) or {MAX_COMPONENT_HANDLES} component handles at once"
            ),
        }
    }

    /// The limit behind `err`, if a call failed because it went over one.
    /// wasmtime reports these as plain errors of the host function (not
    /// traps); their messages are wasmtime's and wasmtime-wasi's own.
    pub fn of(err: &wasmtime::Error) -> Option<WasiLimit> {
        if matches!(
            err.downcast_ref::<ResourceTableError>(),
            Some(ResourceTableError::Full)
        ) {
            return Some(WasiLimit::Resources);
        }
        let text = format!("{err:#}");
        if text.contains("resource table has no free keys")
            || text.contains("store handle limit exceeded")
        {
            Some(WasiLimit::Resources)
        } else if text.contains("requested len") && text.contains("exceeds limit") {
            Some(WasiLimit::Buffer)
        } else {
            None
        }
    }
}

/// Applies the per-store WASI caps that live on the [`Store`] rather than in
/// its state (the component handle limit).
pub fn cap_store(store: &mut Store<PluginState>) {
    store.set_max_component_handles(MAX_COMPONENT_HANDLES);
}

/// Per-call store state.
pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryCap,
    stdout: LineForwarder,
    stderr: LineForwarder,
    tags: Arc<CallTags>,
    log_calls: u32,
    log_bytes: usize,
    log_dropped: u32,
}

impl PluginState {
    /// A state whose WASI context grants nothing: no preopened directories,
    /// no environment variables, no arguments, no sockets or name lookups,
    /// an empty stdin. Only the clocks and random numbers every WASI program
    /// may read are there (a plugin is told the time in its input anyway),
    /// random buffers capped at [`MAX_RANDOM_BYTES`] and live resources at
    /// [`MAX_WASI_RESOURCES`].
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
            .max_random_size(MAX_RANDOM_BYTES)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_WASI_RESOURCES);
        Self {
            wasi,
            table,
            limiter: MemoryCap::new(memory_limit),
            stdout,
            stderr,
            tags,
            log_calls: 0,
            log_bytes: 0,
            log_dropped: 0,
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
        if self.log_dropped > 0 {
            let tags = &self.tags;
            tracing::warn!(
                target: "plugin",
                plugin = %tags.plugin,
                digest = %tags.digest,
                object = %tags.object,
                dropped = self.log_dropped,
                "plugin log lines over the budget of {MAX_LOG_CALLS} lines or {LOG_BUDGET_BYTES} bytes per call were dropped"
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
        self.forward_log(level, message, &fields);
    }
}

impl bindings::v2::jinghzhu::operator::types::Host for PluginState {}

/// The 0.2 `log` import: the same line as 0.1's, fields named `field`.
impl bindings::v2::jinghzhu::operator::log::Host for PluginState {
    fn log(
        &mut self,
        level: bindings::v2::Level,
        message: String,
        fields: Vec<bindings::v2::Field>,
    ) {
        let level = match level {
            bindings::v2::Level::Trace => Level::Trace,
            bindings::v2::Level::Debug => Level::Debug,
            bindings::v2::Level::Info => Level::Info,
            bindings::v2::Level::Warn => Level::Warn,
            bindings::v2::Level::Error => Level::Error,
        };
        self.forward_pairs(level, message, fields.into_iter().map(|f| (f.key, f.value)));
    }
}

impl bindings::v3::wasm_operator::controller::types::Host for PluginState {}

/// The generic contract's `log` import (0.3): the same line as 0.2's.
impl bindings::v3::wasm_operator::controller::log::Host for PluginState {
    fn log(
        &mut self,
        level: bindings::v3::Level,
        message: String,
        fields: Vec<bindings::v3::Field>,
    ) {
        let level = match level {
            bindings::v3::Level::Trace => Level::Trace,
            bindings::v3::Level::Debug => Level::Debug,
            bindings::v3::Level::Info => Level::Info,
            bindings::v3::Level::Warn => Level::Warn,
            bindings::v3::Level::Error => Level::Error,
        };
        self.forward_pairs(level, message, fields.into_iter().map(|f| (f.key, f.value)));
    }
}

impl PluginState {
    /// A `log` call whose fields come as key/value pairs (contracts 0.2 and
    /// 0.3): at most [`MAX_LOG_FIELDS`] of them, then [`Self::forward_log`].
    fn forward_pairs(
        &mut self,
        level: Level,
        message: String,
        fields: impl Iterator<Item = (String, String)>,
    ) {
        let fields: Vec<bindings::KeyValue> = fields
            .take(MAX_LOG_FIELDS)
            .map(|(key, value)| bindings::KeyValue { key, value })
            .collect();
        self.forward_log(level, message, &fields);
    }

    /// One `log` call of any contract version, within the call's budget.
    fn forward_log(&mut self, level: Level, message: String, fields: &[bindings::KeyValue]) {
        self.log_calls = self.log_calls.saturating_add(1);
        if self.log_calls > MAX_LOG_CALLS || self.log_bytes >= LOG_BUDGET_BYTES {
            self.log_dropped = self.log_dropped.saturating_add(1);
            return;
        }
        let message = escape(&message, MAX_LOG_MESSAGE);
        let fields = format_fields(fields);
        self.log_bytes = self.log_bytes.saturating_add(message.len() + fields.len());
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
/// `=` are quoted. At most [`MAX_LOG_FIELDS`] fields; keys and values are
/// cut to a bounded length and control characters escaped, so a plugin can
/// neither flood the host log nor forge host log lines.
pub fn format_fields(fields: &[bindings::KeyValue]) -> String {
    let mut out: Vec<String> = fields
        .iter()
        .take(MAX_LOG_FIELDS)
        .map(|kv| {
            let key = escape(&kv.key, MAX_FIELD_KEY);
            let value = escape(&kv.value, MAX_FIELD_VALUE);
            let plain = !value.is_empty()
                && !value.contains(|c: char| c.is_whitespace() || c == '"' || c == '=');
            if plain {
                format!("{key}={value}")
            } else {
                format!("{key}={value:?}")
            }
        })
        .collect();
    if fields.len() > MAX_LOG_FIELDS {
        out.push(format!("…{}_more_fields", fields.len() - MAX_LOG_FIELDS));
    }
    out.join(" ")
}

/// Caps what one call may allocate: the total of its linear memories and
/// tables (a component may have several of each; table elements are
/// charged at [`TABLE_ELEMENT_BYTES`]) against one byte limit, the number of
/// table elements, and the number of instances, memories and tables.
/// Remembers whether the memory cap was hit so the resulting trap can be
/// reported as what it is.
pub struct MemoryCap {
    limit: usize,
    in_use: usize,
    table_elements: usize,
    pub(crate) hit: bool,
}

impl MemoryCap {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            in_use: 0,
            table_elements: 0,
            hit: false,
        }
    }

    fn charge(&mut self, bytes: usize) -> wasmtime::Result<()> {
        let total = self.in_use.saturating_add(bytes);
        if total > self.limit {
            self.hit = true;
            return Err(wasmtime::Error::msg(format!(
                "memory cap of {} MiB reached",
                self.limit / (1024 * 1024)
            )));
        }
        self.in_use = total;
        Ok(())
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
        self.charge(desired.saturating_sub(current))?;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let elements = self.table_elements.saturating_add(growth);
        if elements > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        self.charge(growth.saturating_mul(TABLE_ELEMENT_BYTES))?;
        self.table_elements = elements;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_elements_count_against_the_memory_cap() {
        let mut cap = MemoryCap::new(1024);
        assert!(cap.table_growing(0, 10, None).expect("ok"));
        assert_eq!(cap.in_use, 160);
        assert!(
            cap.table_growing(10, 100, None).is_err(),
            "1600 bytes > 1024"
        );
        assert!(cap.hit);
        let mut big = MemoryCap::new(usize::MAX);
        assert!(
            !big.table_growing(0, MAX_TABLE_ELEMENTS + 1, None)
                .expect("ok")
        );
    }

    #[test]
    fn wasi_limit_errors_name_their_rule() {
        let of = |err: wasmtime::Error| WasiLimit::of(&err).map(WasiLimit::rule);
        assert_eq!(
            of(wasmtime::Error::msg(
                "requested len 33554432 exceeds limit 65536"
            )),
            Some("wasi-buffer")
        );
        assert_eq!(
            of(wasmtime::Error::from(ResourceTableError::Full)),
            Some("wasi-resources")
        );
        assert_eq!(
            of(wasmtime::Error::msg(
                "cannot allocate another handle: store handle limit exceeded"
            )),
            Some("wasi-resources")
        );
        assert_eq!(of(wasmtime::Error::msg("something else")), None);
    }

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
