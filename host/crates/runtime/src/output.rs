//! A plugin's stdout and stderr: forwarded to `tracing` line by line as the
//! plugin writes them, tagged with the plugin and the object, within a
//! per-call byte budget.
//!
//! Writes never fail: once the budget is spent the rest is counted and
//! dropped (a failing stdout would make a Rust guest's `println!` panic, so
//! a chatty plugin would trap instead of being merely muted). The last lines
//! of stderr are also kept, because a Rust panic's message is printed there
//! just before the trap that the host then reports.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::tags::CallTags;

/// Bytes of output forwarded per stream and call; the rest is dropped.
pub const OUTPUT_BUDGET: usize = 64 * 1024;
/// A line longer than this is forwarded in pieces of this size.
const MAX_LINE: usize = 4 * 1024;
/// Lines of stderr kept for error messages.
const KEPT_TAIL_LINES: usize = 16;

/// Which standard stream a forwarder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// stdout: forwarded at INFO.
    Stdout,
    /// stderr: forwarded at WARN.
    Stderr,
}

impl StreamKind {
    fn name(self) -> &'static str {
        match self {
            StreamKind::Stdout => "stdout",
            StreamKind::Stderr => "stderr",
        }
    }
}

/// One standard stream of one call. Clones share the same state, as WASI
/// hands out a new stream handle each time the guest asks for stdout.
#[derive(Clone)]
pub struct LineForwarder {
    state: Arc<Mutex<ForwarderState>>,
}

struct ForwarderState {
    kind: StreamKind,
    tags: Arc<CallTags>,
    partial: Vec<u8>,
    budget_left: usize,
    dropped_bytes: usize,
    tail: VecDeque<String>,
}

impl LineForwarder {
    /// A forwarder for `kind`, reporting under `tags`.
    pub fn new(kind: StreamKind, tags: Arc<CallTags>) -> Self {
        Self {
            state: Arc::new(Mutex::new(ForwarderState {
                kind,
                tags,
                partial: Vec::new(),
                budget_left: OUTPUT_BUDGET,
                dropped_bytes: 0,
                tail: VecDeque::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ForwarderState> {
        // A poisoned lock only means a tracing subscriber panicked mid-line;
        // the buffered text is still fine to use.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes in bytes the guest wrote, forwarding every completed line.
    pub fn accept(&self, bytes: &[u8]) {
        self.lock().accept(bytes);
    }

    /// Forwards an unterminated last line and reports dropped output; call
    /// once when the call is over (or trapped).
    pub fn finish(&self) {
        let mut state = self.lock();
        if !state.partial.is_empty() {
            state.emit_partial();
        }
        if state.dropped_bytes > 0 {
            let dropped = std::mem::take(&mut state.dropped_bytes);
            let tags = &state.tags;
            tracing::warn!(
                target: "plugin",
                plugin = %tags.plugin,
                digest = %tags.digest,
                object = %tags.object,
                stream = state.kind.name(),
                dropped_bytes = dropped,
                "plugin output over the {OUTPUT_BUDGET}-byte budget was dropped"
            );
        }
    }

    /// The last lines written (stderr: where a panic's message is).
    pub fn tail(&self) -> Vec<String> {
        self.lock().tail.iter().cloned().collect()
    }
}

impl ForwarderState {
    fn accept(&mut self, bytes: &[u8]) {
        let taken = bytes.len().min(self.budget_left);
        self.budget_left -= taken;
        self.dropped_bytes += bytes.len() - taken;
        for &byte in &bytes[..taken] {
            if byte == b'\n' {
                self.emit_partial();
            } else {
                self.partial.push(byte);
                if self.partial.len() >= MAX_LINE {
                    self.emit_partial();
                }
            }
        }
    }

    fn emit_partial(&mut self) {
        let raw = std::mem::take(&mut self.partial);
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            return;
        }
        // Escape control characters: a plugin's line stays one line of the
        // host's log and cannot forge host lines or recolour a terminal.
        let line = crate::plugin_text::escape(line, 2 * MAX_LINE);
        let tags = &self.tags;
        match self.kind {
            StreamKind::Stdout => tracing::info!(
                target: "plugin",
                plugin = %tags.plugin,
                digest = %tags.digest,
                object = %tags.object,
                stream = "stdout",
                "{line}"
            ),
            StreamKind::Stderr => tracing::warn!(
                target: "plugin",
                plugin = %tags.plugin,
                digest = %tags.digest,
                object = %tags.object,
                stream = "stderr",
                "{line}"
            ),
        }
        if self.tail.len() == KEPT_TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }
}

impl IsTerminal for LineForwarder {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LineForwarder {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineForwarder {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for LineForwarder {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.accept(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always ready: what is over the budget is dropped, not refused.
        Ok(MAX_LINE)
    }
}

impl AsyncWrite for LineForwarder {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.accept(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarder() -> LineForwarder {
        LineForwarder::new(
            StreamKind::Stderr,
            Arc::new(CallTags::new("p", "sha256:00", "ns/name")),
        )
    }

    #[test]
    fn splits_lines_across_writes_and_keeps_the_tail() {
        let out = forwarder();
        out.accept(b"first li");
        out.accept(b"ne\nsecond\n\nthird");
        assert_eq!(out.tail(), ["first line", "second"]);
        out.finish();
        assert_eq!(out.tail(), ["first line", "second", "third"]);
    }

    #[test]
    fn output_over_the_budget_is_dropped_not_refused() {
        let mut out = forwarder();
        let line = vec![b'x'; 1000];
        for _ in 0..(OUTPUT_BUDGET / 1000 + 10) {
            assert!(out.write(Bytes::from(line.clone())).is_ok());
            assert!(out.write(Bytes::from_static(b"\n")).is_ok());
        }
        let state = out.lock();
        assert_eq!(state.budget_left, 0);
        assert!(state.dropped_bytes > 9000);
    }

    #[test]
    fn long_lines_are_cut() {
        let out = forwarder();
        out.accept(&vec![b'y'; MAX_LINE + 10]);
        out.finish();
        let tail = out.tail();
        assert_eq!(tail.len(), 2);
        assert_eq!(tail[0].len(), MAX_LINE);
        assert_eq!(tail[1].len(), 10);
    }

    #[test]
    fn tail_is_bounded() {
        let out = forwarder();
        for i in 0..100 {
            out.accept(format!("line {i}\n").as_bytes());
        }
        let tail = out.tail();
        assert_eq!(tail.len(), KEPT_TAIL_LINES);
        assert_eq!(tail.last().map(String::as_str), Some("line 99"));
    }
}
