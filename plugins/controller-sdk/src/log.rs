//! Structured logging from a plugin into the host's `tracing` output.
//!
//! On `wasm32` a call goes to the imported `wasm-operator:controller/log`;
//! the host tags the line with the plugin and the parent. Natively (`cargo
//! test`) the import does not exist: a call is written to stderr, which the
//! test harness captures, and kept in a per-thread buffer that tests read
//! with [`take_captured`] (the newest [`CAPTURE_LIMIT`] lines).

pub use crate::bindings::wasm_operator::controller::log::Level;

/// How many lines the native capture buffer keeps per thread.
pub const CAPTURE_LIMIT: usize = 10_000;

/// One log call, as captured natively.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Severity.
    pub level: Level,
    /// The message.
    pub message: String,
    /// Structured fields, in the order given.
    pub fields: Vec<(String, String)>,
}

/// Writes one log line at `level` with structured `fields`.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    imp::log(level, message, fields);
}

/// Logs at [`Level::Debug`].
pub fn debug(message: &str, fields: &[(&str, &str)]) {
    log(Level::Debug, message, fields);
}

/// Logs at [`Level::Info`].
pub fn info(message: &str, fields: &[(&str, &str)]) {
    log(Level::Info, message, fields);
}

/// Logs at [`Level::Warn`].
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    log(Level::Warn, message, fields);
}

/// Logs at [`Level::Error`].
pub fn error(message: &str, fields: &[(&str, &str)]) {
    log(Level::Error, message, fields);
}

/// The lines captured on this thread since the last call (always empty on
/// `wasm32`).
pub fn take_captured() -> Vec<Record> {
    imp::take()
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::{Level, Record};
    use crate::bindings::wasm_operator::controller::log as host;

    pub(super) fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<host::Field> = fields
            .iter()
            .map(|(key, value)| host::Field {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect();
        host::log(level, message, &fields);
    }

    pub(super) fn take() -> Vec<Record> {
        Vec::new()
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    use super::{CAPTURE_LIMIT, Level, Record};

    thread_local! {
        static CAPTURED: RefCell<VecDeque<Record>> = const { RefCell::new(VecDeque::new()) };
    }

    pub(super) fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
        let shown: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        eprintln!("[{level:?}] {message} {}", shown.join(" "));
        CAPTURED.with(|captured| {
            let mut captured = captured.borrow_mut();
            if captured.len() == CAPTURE_LIMIT {
                captured.pop_front();
            }
            captured.push_back(Record {
                level,
                message: message.to_owned(),
                fields: fields
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            });
        });
    }

    pub(super) fn take() -> Vec<Record> {
        CAPTURED.with(|captured| captured.borrow_mut().drain(..).collect())
    }
}
