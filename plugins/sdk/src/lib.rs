//! SDK for writing wasm-operator reconcile plugins.
//!
//! A plugin is a WebAssembly component of the `jinghzhu:operator@0.2.0` world
//! (see `wit/0.2/operator.wit`; `@0.1.0`, `wit/operator.wit`, with the cargo
//! feature `contract-0-1`): it exports the `reconciler` interface (`info` and
//! `reconcile`) and may import `log`. Plugin code sees owned, friendly
//! records ([`types`]) whatever the contract version: the SDK decodes the
//! wire input (0.2: one string table, shared lists) before calling the
//! plugin and encodes its output after. A plugin that wants to skip that
//! decoding (one allocation per string) reads the same input in place
//! through a borrowed [`view`] instead, by overriding
//! [`Guest::reconcile_view`]. This crate owns the Rust side of that
//! contract so that plugin crates never run `wit-bindgen` themselves:
//!
//! * [`bindings`]: the code `wit_bindgen::generate!` produces for the world,
//!   including the [`export!`] macro that turns a type implementing [`Guest`]
//!   into the component's exports;
//! * [`types`] and [`prelude`]: the owned records a plugin reads and writes
//!   (the same for both contract versions; [`wire`] converts them);
//! * [`view`]: the input as borrowed views (`&'a str` names read in place
//!   from the 0.2 string table, or from owned records), beside [`types`];
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
//! The plugin crate needs `crate-type = ["cdylib"]` (add `"rlib"` so its
//! `tests/` can call it natively) and builds with
//! `cargo build --target wasm32-wasip2`, or `cargo component build` (see
//! `plugins/README.md`). Logic other plugins should reuse belongs in a
//! separate library crate (see below).
//!
//! `wasm-operator new NAME` scaffolds such a crate: the logic in a testable
//! `pub fn reconcile`, native tests, a golden fixture (format:
//! `plugins/FIXTURES.md`) and this SDK as a dependency, either
//!
//! * a git dependency on the wasm-operator repository at the host's release
//!   tag: `jinghzhu-plugin-sdk = { git = "https://github.com/wasm-operator/wasm-operator", tag = "v0.1.0" }`
//!   (cargo finds this crate among that repository's workspace members), or
//! * a path dependency on a checkout (`new --sdk-path DIR`):
//!   `jinghzhu-plugin-sdk = { path = "../wasm-operator/plugins/sdk" }`.
//!
//! Inside the wasm-operator workspace a plugin is a member and writes
//! `jinghzhu-plugin-sdk.workspace = true`.
//!
//! # How `export!` works
//!
//! [`export!`] takes a plain identifier and expands, on `wasm32` only, to an
//! adapter type implementing the generated bindings' `Guest` through
//! [`wire`] (decode the input into [`types`], call your [`Guest`], encode the
//! output), passed to the macro `wit_bindgen::generate!` produced for the
//! world. That emits the
//! component's export functions (`jinghzhu:operator/reconciler@0.2.0#reconcile`
//! and `#info`, plus their `cabi_post_` cleanup functions) which call the
//! type's [`Guest`] methods, and a custom section describing the world, from
//! which the component is assembled at link time (`wasm32-wasip2`) or by
//! `cargo component`. On other targets it expands to nothing, so a `cdylib`
//! plugin crate unit-tests natively with plain `cargo test` (natively, those
//! `:`/`@`/`#` symbol names would not even link into a shared library).
//!
//! Call it exactly once per component: two crates that both call it cannot
//! be linked into one component (duplicate export symbols).
//!
//! # Reusing a plugin's logic in another plugin
//!
//! Put the logic in a plain library crate (rlib only) and keep the plugin
//! crate a thin `cdylib` that calls `export!`; other plugins depend on the
//! library. Do not depend on a plugin `cdylib` crate, even with its `export!`
//! behind a cargo feature: cargo builds every crate-type of a dependency, and
//! a path `cdylib`'s output carries no hash in its file name, so building the
//! dependent rebuilds `target/<triple>/<profile>/<plugin>.wasm` in place with
//! the dependent's feature set (observed: the replicaset component silently
//! replaced by a 14 KB module without exports). This workspace does it with
//! `plugins/replicaset-logic` (library), `plugins/replicaset` (component) and
//! `tests/plugins/misbehaving` (another component reusing the library).
//!
//! The macro refers to this crate only through `$crate`, so renaming the
//! dependency is fine.

#![warn(missing_docs)]

#[cfg(not(feature = "contract-0-1"))]
pub mod bindings {
    //! Generated bindings of the `jinghzhu:operator@0.2.0` world `operator`
    //! (`wit/0.2/operator.wit`): the wire records, strings as ids into one
    //! table. Owned by `wit_bindgen::generate!`; plugins use [`crate::types`]
    //! (what [`crate::wire`] decodes them into). On non-`wasm32` targets the
    //! imported functions are stubs that panic: use [`crate::log`].
    #![allow(missing_docs, clippy::all, clippy::pedantic)]

    wit_bindgen::generate!({
        world: "operator",
        path: "../../wit/0.2",
        pub_export_macro: true,
        default_bindings_module: "$crate::bindings",
        additional_derives: [PartialEq, Eq],
    });
}

#[cfg(feature = "contract-0-1")]
pub mod bindings {
    //! Generated bindings of the `jinghzhu:operator@0.1.0` world `operator`
    //! (`wit/operator.wit`; cargo feature `contract-0-1`). Owned by
    //! `wit_bindgen::generate!`; plugins use [`crate::types`].
    #![allow(missing_docs, clippy::all, clippy::pedantic)]

    wit_bindgen::generate!({
        world: "operator",
        path: "../../wit",
        pub_export_macro: true,
        default_bindings_module: "$crate::bindings",
        additional_derives: [PartialEq, Eq],
    });
}

pub mod kv;
pub mod log;
mod model;
pub mod output;
pub mod pod;
pub mod status;
pub mod testing;
pub mod view;
#[doc(hidden)]
pub mod wire;

pub mod types {
    //! The records of the `jinghzhu:operator/types` interface, re-exported
    //! under short paths, plus the [`Level`] of the `log` interface.
    //!
    //! All records derive `Clone`, `Debug`, `PartialEq` and `Eq`; the plain
    //! ones (everything but those holding a [`PodPhase`] or [`EventType`])
    //! also derive `Default`. [`Timestamp`] and [`KeyValue`] are ordered.

    pub use crate::model::{
        Event, EventType, Jinghzhu, JinghzhuSpec, JinghzhuStatus, KeyValue, Level, ObjectMeta,
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
    pub use crate::view::{InputView, JinghzhuView, PodView};
}

/// The trait a plugin implements: `info()` and `reconcile(input)` of the
/// exported `jinghzhu:operator/reconciler` interface, on the SDK's owned
/// records ([`types`]). Pass the implementing type to [`export!`] to make
/// it the component's export; the SDK converts to and from the wire.
pub trait Guest {
    /// Name and version of the plugin.
    fn info() -> types::PluginInfo;

    /// Computes the actions that bring the cluster towards the spec; a
    /// pure, idempotent function of `input`.
    fn reconcile(
        input: types::ReconcileInput,
    ) -> Result<types::ReconcileOutput, types::ReconcileError>;

    /// The same reconcile on a borrowed [`view::InputView`] of the input:
    /// what the component calls on contract 0.2. The default decodes the
    /// view into the owned records (one allocation per string) and calls
    /// [`Guest::reconcile`]. A plugin that reads the view itself overrides
    /// it, and skips that decoding; its `reconcile` is then usually
    /// `Self::reconcile_view(&InputView::of(&input))`, so native tests on
    /// owned inputs run the same code. With the cargo feature
    /// `contract-0-1` the component calls [`Guest::reconcile`] (0.1
    /// records arrive as owned strings already).
    fn reconcile_view(
        input: &view::InputView<'_>,
    ) -> Result<types::ReconcileOutput, types::ReconcileError> {
        Self::reconcile(input.owned())
    }
}

/// Exports a type implementing [`Guest`] as the component's
/// `jinghzhu:operator/reconciler` interface (of [`WIT_PACKAGE`]):
/// `jinghzhu_plugin_sdk::export!(MyPlugin);` at the plugin crate's top level.
///
/// Expands, on `wasm32` targets only (elsewhere to nothing), to an adapter
/// implementing the generated bindings' `Guest` through [`wire`] (decode
/// the input, call `MyPlugin`, encode the output) and the `export!` macro
/// `wit-bindgen` generated for the world. Call it once per component; see
/// the [crate documentation](crate#how-export-works) for how it works and
/// how to reuse a plugin's logic without linking its export twice.
#[macro_export]
macro_rules! export {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        #[allow(non_camel_case_types)]
        struct __jinghzhu_plugin_export;

        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::exports::jinghzhu::operator::reconciler::Guest
            for __jinghzhu_plugin_export
        {
            fn info() -> $crate::bindings::jinghzhu::operator::types::PluginInfo {
                $crate::wire::info::<$ty>()
            }

            fn reconcile(
                input: $crate::bindings::jinghzhu::operator::types::ReconcileInput,
            ) -> ::core::result::Result<
                $crate::bindings::jinghzhu::operator::types::ReconcileOutput,
                $crate::bindings::jinghzhu::operator::types::ReconcileError,
            > {
                $crate::wire::reconcile::<$ty>(input)
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export!(__jinghzhu_plugin_export with_types_in $crate::bindings);
    };
}

pub use kv::{annotation, label};
pub use output::empty_output;
pub use status::status_equal;

/// The WIT package this SDK implements: `jinghzhu:operator@0.2.0`, or
/// `@0.1.0` with the cargo feature `contract-0-1`.
pub const WIT_PACKAGE: &str = if cfg!(feature = "contract-0-1") {
    "jinghzhu:operator@0.1.0"
} else {
    "jinghzhu:operator@0.2.0"
};

/// The fully qualified name of the interface a plugin exports.
pub const RECONCILER_INTERFACE: &str = if cfg!(feature = "contract-0-1") {
    "jinghzhu:operator/reconciler@0.1.0"
} else {
    "jinghzhu:operator/reconciler@0.2.0"
};
