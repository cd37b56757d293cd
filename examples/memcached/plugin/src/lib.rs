//! The `memcached` example plugin of wasm-operator: a WebAssembly component
//! of the `wasm-operator:controller@0.3.0` world (`wit/0.3/controller.wit`),
//! written on the controller SDK (`plugins/controller-sdk`), that
//! reconciles a `Memcached` (`cache.example.com/v1alpha1`, see
//! `examples/memcached/crd.yaml`) the way the Operator SDK tutorial's Go
//! operator does: `spec.size` becomes a memcached Deployment of that many
//! replicas, and the status reports its ready replicas and the names of
//! its pods.
//!
//! The crate is split so that the logic runs natively in `cargo test`:
//!
//! * [`spec`]: reading and checking the parent's `spec`;
//! * [`deployment`]: the desired Deployment and its labels;
//! * [`status`]: the fields of `status` the plugin owns;
//! * [`reconcile`](mod@reconcile): `reconcile`, a pure function of the input;
//! * this file: the plugin's identity and the component export.
//!
//! Build the component with
//! `cargo build --release --target wasm32-wasip2 -p memcached-plugin`.

pub mod deployment;
pub mod reconcile;
pub mod spec;
pub mod status;

pub use reconcile::reconcile;

use wasm_operator_controller_sdk::prelude::*;

/// The name the plugin reports in [`PluginInfo`].
pub const PLUGIN_NAME: &str = "memcached";

/// The version this build reports: the crate's, `+v2` for the `v2` build
/// of the hot-swap tests.
pub const VERSION: &str = if cfg!(feature = "v2") {
    concat!(env!("CARGO_PKG_VERSION"), "+v2")
} else {
    env!("CARGO_PKG_VERSION")
};

/// The plugin: the SDK's `export!` makes it the component's `reconciler`.
pub struct Memcached;

impl Controller for Memcached {
    fn info() -> PluginInfo {
        PluginInfo::new(PLUGIN_NAME, VERSION)
    }

    fn reconcile(input: &Input) -> Result<Output, ReconcileError> {
        reconcile(input)
    }
}

wasm_operator_controller_sdk::export!(Memcached);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_names_the_plugin() {
        let info = Memcached::info();
        assert_eq!(info.name, "memcached");
        assert!(info.version.starts_with(env!("CARGO_PKG_VERSION")));
        assert_eq!(info.version, VERSION);
    }
}
