//! The two ways the runtime fails: bytes that cannot become a plugin
//! ([`LoadError`]) and a call that did not produce a proposal
//! ([`PluginError`]). Each message says what happened and, for load errors,
//! what to do about it.
//!
//! Text that came from the plugin (its returned error, its panic message,
//! what the compiler or the world check found in its bytes) is kept as it
//! is in the fields but always displayed through [`shown`]: escaped and cut
//! to [`crate::plugin_text::MAX_LOG_TEXT`] bytes, so every `to_string()` of
//! these errors is safe to put in a log line or an Event.

use std::time::Duration;

use super::contract;
use crate::plugin_text::shown;

/// Why bytes could not become a plugin.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not Wasm at all.
    #[error(
        "{from} is not a WebAssembly file ({}): build the plugin with `cargo component build --release` or `cargo build --release --target wasm32-wasip2` and give the .wasm it writes (target/<triple>/release/<crate>.wasm)",
        shown(.what)
    )]
    NotWasm {
        /// Where the bytes came from.
        from: String,
        /// What the bytes look like instead.
        what: String,
    },
    /// A core module, not a component.
    #[error(
        "{from} is a core Wasm module, not a component: {}. Build with `cargo build --release --target wasm32-wasip2` (rustc links a component) or `cargo component build --release` (it componentizes a wasm32-wasip1 build); plain wasm32-wasip1 and wasm32-unknown-unknown builds produce core modules",
        shown(.diagnosis)
    )]
    CoreModule {
        /// Where the bytes came from.
        from: String,
        /// What the module is, and the likely cause.
        diagnosis: String,
    },
    /// Cranelift or the validator refused it.
    #[error("{from} does not compile: {}", shown(.message))]
    Compile {
        /// Where the bytes came from.
        from: String,
        /// The compiler's message.
        message: String,
    },
    /// A component, but not of our world.
    #[error(
        "{from} does not implement a world this host runs: this host serves contract versions {} (a component exporting `jinghzhu:operator/reconciler@VERSION`: wit/0.2/operator.wit for 0.2.0, wit/operator.wit for 0.1.0; for any kind, `wasm-operator:controller/reconciler@0.3.0`: wit/0.3/controller.wit); {}",
        contract::supported(),
        shown(.found)
    )]
    WrongWorld {
        /// Where the bytes came from.
        from: String,
        /// What the component targets and what to do.
        found: String,
    },
    /// Its `info()` returned a name or version the host will not write into
    /// annotations, logs and metric labels.
    #[error("{from}: {}; fix the plugin's info() and rebuild it", shown(.problem))]
    BadInfo {
        /// Where the bytes came from.
        from: String,
        /// What is wrong.
        problem: String,
    },
    /// Its `info()` failed.
    #[error("{from}: calling info() failed: {source}")]
    Info {
        /// Where the bytes came from.
        from: String,
        /// What happened.
        source: PluginError,
    },
}

/// Why one call failed. The host keeps running in every case; the instance
/// of the call is dropped.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The CPU deadline hit.
    #[error("the plugin exceeded its CPU deadline of {0:?}")]
    Deadline(Duration),
    /// The memory cap hit.
    #[error("the plugin exceeded its memory cap of {} MiB", .0 / (1024 * 1024))]
    MemoryCap(u64),
    /// The plugin handed the host more bytes in one transfer (its whole
    /// output, or one `log` call) than the limit; nothing of it was used.
    #[error("the plugin's output is larger than the limit of {} KiB (--plugin-output-limit-kib)", .0 / 1024)]
    OutputTooLarge(usize),
    /// The plugin asked the host, through a WASI import, for more than a
    /// per-call WASI limit allows (see
    /// [`state::WasiLimit`](super::state::WasiLimit)); `rule` follows
    /// `limits/`.
    #[error("the plugin went over a WASI limit: {message}")]
    WasiLimit {
        /// `wasi-buffer` or `wasi-resources`.
        rule: &'static str,
        /// What it did, and the limit.
        message: String,
    },
    /// The plugin trapped (a Rust panic aborts, which traps).
    #[error("the plugin trapped: {}", shown(.message))]
    Trap {
        /// The panic message when the plugin printed one, else the trap.
        message: String,
    },
    /// The plugin's output breaks the contract's rules (a 0.2 string id or
    /// span outside its table, text that is not UTF-8); nothing of it is
    /// used.
    #[error("the plugin's output breaks the contract: {}", shown(.0))]
    BadOutput(String),
    /// The plugin returned an error value.
    #[error("the plugin returned an error{}: {}", if *.retryable { " (retryable)" } else { " (not retryable)" }, shown(.message))]
    Returned {
        /// Its message.
        message: String,
        /// Whether it says retrying makes sense.
        retryable: bool,
    },
    /// The host could not set up or finish the call (e.g. no free instance
    /// slot, or the blocking task was lost).
    #[error("the host could not run the plugin: {}", shown(.0))]
    Host(String),
}

impl PluginError {
    /// Whether trying again (with backoff) can help.
    pub fn retryable(&self) -> bool {
        match self {
            PluginError::Returned { retryable, .. } => *retryable,
            // Traps and limits may depend on the input; a changed object or a
            // new plugin may fix them, and backoff keeps retries cheap.
            _ => true,
        }
    }

    /// True when the plugin itself returned the error (it ran fine).
    pub fn is_returned_error(&self) -> bool {
        matches!(self, PluginError::Returned { .. })
    }

    /// A short machine-friendly kind, for metrics and log fields.
    pub fn kind(&self) -> &'static str {
        match self {
            PluginError::Deadline(_) => "deadline",
            PluginError::MemoryCap(_) => "memory-cap",
            PluginError::OutputTooLarge(_) => "output-too-large",
            PluginError::Trap { .. } => "trap",
            PluginError::BadOutput(_) => "bad-output",
            PluginError::Returned { .. } => "returned",
            PluginError::Host(_) => "host",
            PluginError::WasiLimit { rule, .. } => rule,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_text_in_errors_is_escaped_and_bounded_when_displayed() {
        let forged = format!(
            "no\n2026-11-25T00:00:00Z ERROR forged\x1b[31m{}",
            "A".repeat(3 << 20)
        );
        for err in [
            PluginError::Returned {
                message: forged.clone(),
                retryable: true,
            },
            PluginError::Trap {
                message: forged.clone(),
            },
            PluginError::Host(forged.clone()),
        ] {
            let shown = err.to_string();
            assert!(!shown.contains(['\n', '\x1b']), "{}", &shown[..200]);
            assert!(shown.contains("no\\n2026"), "{}", &shown[..200]);
            assert!(
                shown.len() < crate::plugin_text::MAX_LOG_TEXT + 128,
                "{}",
                shown.len()
            );
        }
        let load = LoadError::Compile {
            from: "plugin.wasm".into(),
            message: forged,
        };
        assert!(load.to_string().len() < crate::plugin_text::MAX_LOG_TEXT + 128);
    }
}
