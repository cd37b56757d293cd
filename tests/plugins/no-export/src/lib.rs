//! A plugin that forgets `export!`: it implements [`Guest`] and builds
//! without a warning, but its component exports nothing, so the host
//! refuses it at load. `host/tests/load_errors.rs` checks that the error
//! names the missing `export!` and the fix.

use jinghzhu_plugin_sdk::prelude::*;

/// A plugin the crate never exports.
pub struct Forgotten;

impl Guest for Forgotten {
    fn info() -> PluginInfo {
        PluginInfo::new("no-export", env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_input: ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
        Ok(ReconcileOutput::empty())
    }
}

// Missing on purpose: jinghzhu_plugin_sdk::export!(Forgotten);
