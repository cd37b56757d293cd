//! The `replicaset` reconcile plugin of wasm-operator: a WebAssembly
//! component of the `jinghzhu:operator@0.2.0` world (`@0.1.0` with the
//! cargo feature `contract-0-1`) that keeps
//! `spec.desired` Pods of a Jinghzhu alive, like a Kubernetes ReplicaSet.
//!
//! The logic is in the `replicaset-logic` crate (re-exported here); this
//! crate adds the plugin's identity ([`plugin_info`]), the build variant
//! ([`VARIANT`], cargo feature `v2`) and the component export, which reads
//! the input through the SDK's borrowed view (no string copied out of the
//! host's table; the cargo feature `owned-input` builds the same plugin on
//! the SDK's owned records instead, for the `contract` benchmark). Its tests
//! (`tests/scenarios.rs`, `tests/fixtures.rs`) run natively with
//! `cargo test -p replicaset-plugin`.
//!
//! Build the component with
//! `cargo build --release --target wasm32-wasip2 -p replicaset-plugin` or
//! `cargo component build --release -p replicaset-plugin`.
//!
//! Do not depend on this crate from another plugin: it is a `cdylib`, and
//! cargo would rebuild its `.wasm` in place without this crate's features.
//! Depend on `replicaset-logic` instead.

use jinghzhu_plugin_sdk::prelude::*;

pub use replicaset_logic::*;

/// The name the plugin reports in [`PluginInfo`].
pub const PLUGIN_NAME: &str = "replicaset";

/// The variant this crate was built as: [`Variant::V2`] with the cargo
/// feature `v2` (status messages start with `[v2] `), else [`Variant::V1`].
pub const VARIANT: Variant = if cfg!(feature = "v2") {
    Variant::V2
} else {
    Variant::V1
};

/// [`reconcile_with`] this build's [`VARIANT`].
pub fn reconcile(input: &ReconcileInput) -> ReconcileOutput {
    reconcile_with(input, VARIANT)
}

/// Name and version of this build: `replicaset` and the crate version, with
/// `+v2` appended when built with the `v2` feature.
pub fn plugin_info() -> PluginInfo {
    PluginInfo::new(
        PLUGIN_NAME,
        format!("{}{}", env!("CARGO_PKG_VERSION"), VARIANT.version_suffix()),
    )
}

/// The plugin: implements the exported `reconciler` interface.
pub struct ReplicaSetPlugin;

impl Guest for ReplicaSetPlugin {
    fn info() -> PluginInfo {
        plugin_info()
    }

    fn reconcile(input: ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
        Ok(reconcile(&input))
    }

    #[cfg(not(feature = "owned-input"))]
    fn reconcile_view(input: &InputView<'_>) -> Result<ReconcileOutput, ReconcileError> {
        Ok(reconcile_view(input, VARIANT))
    }
}

jinghzhu_plugin_sdk::export!(ReplicaSetPlugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_names_the_plugin_and_variant() {
        let info = <ReplicaSetPlugin as Guest>::info();
        assert_eq!(info.name, "replicaset");
        assert!(info.version.starts_with(env!("CARGO_PKG_VERSION")));
        assert_eq!(info.version.ends_with("+v2"), cfg!(feature = "v2"));
        assert_eq!(VARIANT == Variant::V2, cfg!(feature = "v2"));
    }

    #[test]
    fn guest_reconcile_is_the_variant_reconcile() {
        let input = jinghzhu_plugin_sdk::testing::jinghzhu("web", "default", 1)
            .input()
            .build();
        let out = <ReplicaSetPlugin as Guest>::reconcile(input.clone());
        assert_eq!(out, Ok(reconcile_with(&input, VARIANT)));
        let message = out
            .ok()
            .and_then(|o| o.status)
            .map(|s| s.message)
            .unwrap_or_default();
        assert_eq!(message.starts_with("[v2] "), cfg!(feature = "v2"));
    }
}
