//! Structured logging from a plugin into the host's `tracing` output.
//!
//! On `wasm32` every call goes to the imported `jinghzhu:operator/log`
//! function; the host tags the line with the plugin and the object being
//! reconciled. On other targets (native `cargo test` of plugin logic) the
//! import does not exist, so a call is instead written to stderr (which the
//! test harness captures) and recorded in a per-thread buffer that tests read
//! with [`take_captured`]. The buffer keeps the most recent
//! [`CAPTURE_LIMIT`] records. A native program that runs plugin logic and
//! logs on its own (as the scale benchmark's kube-rs peer does) can turn the
//! stderr copy off with [`set_native_echo`] and forward the records it takes
//! at their levels, as the host forwards a plugin's.
//!
//! ```
//! use jinghzhu_plugin_sdk::log;
//!
//! log::info("scaling up", &[("from", "1"), ("to", "3")]);
//! # #[cfg(not(target_arch = "wasm32"))]
//! assert_eq!(log::take_captured()[0].message, "scaling up");
//! ```

pub use crate::types::Level;

/// One log call, as recorded on native targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Severity.
    pub level: Level,
    /// The message.
    pub message: String,
    /// Structured fields, in the order given.
    pub fields: Vec<(String, String)>,
}

impl Record {
    /// The value of field `key`, if the record has it.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// How many records the native capture buffer keeps per thread; older ones
/// are dropped first.
pub const CAPTURE_LIMIT: usize = 10_000;

/// Writes one log line at `level` with structured `fields`.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    imp::log(level, message, fields);
}

/// Logs at [`Level::Trace`].
pub fn trace(message: &str, fields: &[(&str, &str)]) {
    log(Level::Trace, message, fields);
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

/// The lower-case name of a level, as the host prints it.
pub fn level_name(level: Level) -> &'static str {
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

/// Whether native calls are also written to stderr (the default: yes).
/// Process-wide; the records are kept for [`take_captured`] either way.
#[cfg(not(target_arch = "wasm32"))]
pub fn set_native_echo(on: bool) {
    imp::ECHO.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Returns and clears the records this thread logged so far (native targets
/// only; each test runs on its own thread, so tests do not see each other's).
#[cfg(not(target_arch = "wasm32"))]
pub fn take_captured() -> Vec<Record> {
    imp::CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut()).into())
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use crate::bindings::jinghzhu::operator::log as host;
    use crate::types::Level;

    fn level_of(level: Level) -> host::Level {
        match level {
            Level::Trace => host::Level::Trace,
            Level::Debug => host::Level::Debug,
            Level::Info => host::Level::Info,
            Level::Warn => host::Level::Warn,
            Level::Error => host::Level::Error,
        }
    }

    #[cfg(not(feature = "contract-0-1"))]
    pub(super) fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<host::Field> = fields
            .iter()
            .map(|(k, v)| host::Field {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect();
        host::log(level_of(level), message, &fields);
    }

    #[cfg(feature = "contract-0-1")]
    pub(super) fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
        use crate::bindings::jinghzhu::operator::types::KeyValue;
        let fields: Vec<KeyValue> = fields
            .iter()
            .map(|(k, v)| KeyValue {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect();
        host::log(level_of(level), message, &fields);
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::fmt::Write as _;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::{CAPTURE_LIMIT, Record, level_name};
    use crate::types::Level;

    /// See [`super::set_native_echo`].
    pub(super) static ECHO: AtomicBool = AtomicBool::new(true);

    thread_local! {
        pub(super) static CAPTURED: RefCell<VecDeque<Record>> = const { RefCell::new(VecDeque::new()) };
    }

    pub(super) fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
        if ECHO.load(Ordering::Relaxed) {
            let mut line = format!("[plugin {}] {message}", level_name(level));
            for (k, v) in fields {
                // Writing into a `String` cannot fail.
                let _ = write!(line, " {k}={v:?}");
            }
            // `eprintln!` (not a raw stderr handle) so the test harness
            // captures the line and shows it only for failing tests.
            eprintln!("{line}");
        }
        let record = Record {
            level,
            message: message.to_owned(),
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        CAPTURED.with(|c| {
            let mut c = c.borrow_mut();
            while c.len() >= CAPTURE_LIMIT {
                c.pop_front();
            }
            c.push_back(record);
        });
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn captures_every_level_with_fields() {
        take_captured();
        trace("t", &[]);
        debug("d", &[("k", "v")]);
        info("i", &[("a", "1"), ("b", "2")]);
        warn("w", &[]);
        error("e", &[]);
        let got = take_captured();
        let levels: Vec<Level> = got.iter().map(|r| r.level).collect();
        assert_eq!(
            levels,
            [
                Level::Trace,
                Level::Debug,
                Level::Info,
                Level::Warn,
                Level::Error
            ]
        );
        assert_eq!(got[2].message, "i");
        assert_eq!(got[2].field("b"), Some("2"));
        assert_eq!(got[1].field("missing"), None);
        assert!(
            take_captured().is_empty(),
            "take_captured clears the buffer"
        );
    }

    #[test]
    fn without_the_stderr_echo_calls_are_still_captured() {
        take_captured();
        set_native_echo(false);
        debug("quiet", &[("k", "v")]);
        set_native_echo(true);
        let got = take_captured();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].level, got[0].message.as_str()),
            (Level::Debug, "quiet")
        );
        assert_eq!(got[0].field("k"), Some("v"));
    }

    #[test]
    fn capture_is_bounded() {
        take_captured();
        for _ in 0..CAPTURE_LIMIT + 5 {
            imp::CAPTURED.with(|c| {
                c.borrow_mut().push_back(Record {
                    level: Level::Info,
                    message: String::new(),
                    fields: Vec::new(),
                });
            });
        }
        info("last", &[]);
        let got = take_captured();
        assert_eq!(got.len(), CAPTURE_LIMIT);
        assert_eq!(got.last().map(|r| r.message.as_str()), Some("last"));
    }
}
