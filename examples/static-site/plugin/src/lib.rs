//! The `static-site` example plugin of wasm-operator: a WebAssembly
//! component of the `wasm-operator:controller@0.3.0` world
//! (`wit/0.3/controller.wit`), written on the controller SDK
//! (`plugins/controller-sdk`), that reconciles a `StaticSite`
//! (`web.example.com/v1alpha1`, see `examples/static-site/crd.yaml`), a
//! parent that owns three kinds: a ConfigMap holding `spec.content`, an
//! nginx Deployment serving it and a Service in front of it. The status
//! reports the site's URL, its ready replicas and a hash of the content.
//!
//! The crate is split so that the logic runs natively in `cargo test`:
//!
//! * [`spec`]: reading and checking the parent's name and `spec`;
//! * [`hash`]: the stable content hash (FNV-1a 64);
//! * [`children`]: the desired ConfigMap, Deployment and Service;
//! * [`status`]: the fields of `status` the plugin owns;
//! * [`reconcile`](mod@reconcile): `reconcile`, a pure function of the input;
//! * this file: the plugin's identity and the component export.
//!
//! Build the component with
//! `cargo build --release --target wasm32-wasip2 -p static-site-plugin`.

pub mod children;
pub mod hash;
pub mod reconcile;
pub mod spec;
pub mod status;

pub use reconcile::reconcile;

use wasm_operator_controller_sdk::prelude::*;

/// The name the plugin reports in [`PluginInfo`].
pub const PLUGIN_NAME: &str = "static-site";

/// The plugin: the SDK's `export!` makes it the component's `reconciler`.
pub struct StaticSite;

impl Controller for StaticSite {
    fn info() -> PluginInfo {
        PluginInfo::new(PLUGIN_NAME, env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(input: &Input) -> Result<Output, ReconcileError> {
        reconcile(input)
    }
}

wasm_operator_controller_sdk::export!(StaticSite);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_names_the_plugin() {
        let info = StaticSite::info();
        assert_eq!(info.name, "static-site");
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    }
}
