//! SDK for writing wasm-operator reconcile plugins.
//!
//! A plugin is a WebAssembly component of the `jinghzhu:operator@0.1.0` world
//! (see `wit/operator.wit`): it exports the `reconciler` interface (`info` and
//! `reconcile`) and may import `log`. This crate owns the Rust side of that
//! contract so that plugin crates never run `wit-bindgen` themselves:
//!
//! * [`bindings`]: the code `wit_bindgen::generate!` produces for the world,
//!   including the [`export!`] macro that turns a type implementing [`Guest`]
//!   into the component's exports;
//! * [`types`] and [`prelude`]: friendly paths to the generated records;
//! * [`kv`], [`pod`], [`status`] and [`output`]: helpers for the records a
//!   reconcile reads and writes;
//! * [`log`]: structured logging that goes to the host on `wasm32` and to a
//!   capture buffer (and stderr) in native `cargo test` runs;
//! * [`testing`]: builders for inputs, so plugin logic is unit-tested natively.
//!
//! # Writing a plugin
//!
//! ```
//! use jinghzhu_plugin_sdk::prelude::*;
//!
//! struct MyPlugin;
//!
//! impl Guest for MyPlugin {
//!     fn info() -> PluginInfo {
//!         PluginInfo::new("my-plugin", env!("CARGO_PKG_VERSION"))
//!     }
//!
//!     fn reconcile(input: ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
//!         jinghzhu_plugin_sdk::log::info("reconciling", &[("name", &input.jinghzhu.metadata.name)]);
//!         Ok(ReconcileOutput::empty())
//!     }
//! }
//!
//! jinghzhu_plugin_sdk::export!(MyPlugin);
//! # fn main() {}
//! ```
//!
//! The plugin crate needs `crate-type = ["cdylib"]` (add `"rlib"` to reuse its
//! logic natively) and builds with `cargo build --target wasm32-wasip2`.
//! The `export!` macro takes a plain identifier, and expects this crate under
//! its own name `jinghzhu_plugin_sdk` (do not rename the dependency). Call it
//! exactly once per component: two crates that both call it cannot be linked
//! into the same component.

#![warn(missing_docs)]

pub mod bindings {
    //! Generated bindings of the `jinghzhu:operator@0.1.0` world `operator`.
    //!
    //! Owned by `wit_bindgen::generate!`; prefer the paths in
    //! [`crate::types`]. On non-`wasm32` targets the imported functions are
    //! stubs that panic: use [`crate::log`] instead of calling them directly.
    #![allow(missing_docs, clippy::all, clippy::pedantic)]

    wit_bindgen::generate!({
        world: "operator",
        path: "../../wit",
        pub_export_macro: true,
        default_bindings_module: "$crate::bindings",
        additional_derives: [PartialEq, Eq],
        additional_type_attributes: {
            "jinghzhu:operator/types@0.1.0/key-value": [#[derive(Default, PartialOrd, Ord, Hash)]],
            "jinghzhu:operator/types@0.1.0/timestamp": [#[derive(Default, PartialOrd, Ord, Hash)]],
            "jinghzhu:operator/types@0.1.0/owner-reference": [#[derive(Default)]],
            "jinghzhu:operator/types@0.1.0/object-meta": [#[derive(Default)]],
            "jinghzhu:operator/types@0.1.0/pod-template": [#[derive(Default)]],
            "jinghzhu:operator/types@0.1.0/jinghzhu-spec": [#[derive(Default)]],
            "jinghzhu:operator/types@0.1.0/jinghzhu-status": [#[derive(Default)]],
            "jinghzhu:operator/types@0.1.0/pod-create": [#[derive(Default)]],
            "jinghzhu:operator/types@0.1.0/reconcile-output": [#[derive(Default)]],
            "jinghzhu:operator/types@0.1.0/plugin-info": [#[derive(Default)]],
        },
    });
}

pub mod kv;
pub mod log;
pub mod output;
pub mod pod;
pub mod status;
pub mod testing;

pub mod types {
    //! The records of the `jinghzhu:operator/types` interface, re-exported
    //! under short paths, plus the [`Level`] of the `log` interface.
    //!
    //! All records derive `Clone`, `Debug`, `PartialEq` and `Eq`; the plain
    //! ones (everything but those holding a [`PodPhase`] or [`EventType`])
    //! also derive `Default`. [`Timestamp`] and [`KeyValue`] are ordered.

    pub use crate::bindings::jinghzhu::operator::log::Level;
    pub use crate::bindings::jinghzhu::operator::types::{
        Event, EventType, Jinghzhu, JinghzhuSpec, JinghzhuStatus, KeyValue, ObjectMeta,
        OwnerReference, PluginInfo, Pod, PodCreate, PodPhase, PodTemplate, ReconcileError,
        ReconcileInput, ReconcileOutput, Timestamp,
    };
}

pub mod prelude {
    //! One-line import for plugin crates: `use jinghzhu_plugin_sdk::prelude::*;`
    //! brings the records, the [`Guest`] trait and the most used helpers.

    pub use crate::Guest;
    pub use crate::kv::{annotation, label};
    pub use crate::output::empty_output;
    pub use crate::status::status_equal;
    pub use crate::types::*;
}

/// The trait a plugin implements: `info()` and `reconcile(input)` of the
/// exported `jinghzhu:operator/reconciler@0.1.0` interface. Pass the
/// implementing type to [`export!`] to make it the component's export.
pub use bindings::exports::jinghzhu::operator::reconciler::Guest;

/// Exports a type implementing [`Guest`] as the component's
/// `jinghzhu:operator/reconciler@0.1.0` interface: `jinghzhu_plugin_sdk::export!(MyPlugin);`.
pub use bindings::export;

pub use kv::{annotation, label};
pub use output::empty_output;
pub use status::status_equal;

/// The WIT package this SDK implements.
pub const WIT_PACKAGE: &str = "jinghzhu:operator@0.1.0";

/// The fully qualified name of the interface a plugin exports.
pub const RECONCILER_INTERFACE: &str = "jinghzhu:operator/reconciler@0.1.0";
