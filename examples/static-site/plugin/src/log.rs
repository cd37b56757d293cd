//! Logging to the host through the `log` import, on `wasm32` only: off
//! `wasm32` the generated import is a stub that panics, so native builds
//! (the tests) log nothing.

use crate::{ReconcileError, ReconcileOutput};

/// One line per reconcile: what was proposed, or why it failed.
pub fn outcome(name: &str, result: &Result<ReconcileOutput, ReconcileError>) {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::bindings::wasm_operator::controller::log::{Field, Level, log};
        let field = |key: &str, value: String| Field {
            key: key.to_string(),
            value,
        };
        match result {
            Ok(out) => log(
                Level::Debug,
                "reconciled",
                &[
                    field("name", name.to_string()),
                    field("apply", out.apply.len().to_string()),
                    field("delete", out.delete.len().to_string()),
                    field("status_write", out.status_json.is_some().to_string()),
                ],
            ),
            Err(error) => log(
                Level::Warn,
                &error.message,
                &[field("name", name.to_string())],
            ),
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (name, result);
}
