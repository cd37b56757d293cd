//! SDK for writing wasm-operator controller plugins of any kind: WebAssembly
//! components of the `wasm-operator:controller@0.3.0` world
//! (`wit/0.3/controller.wit`), which reconcile a parent of any namespaced
//! kind into the children a `PluginController` declares.
//!
//! A plugin implements [`Controller`] and calls [`export!`] once:
//!
//! ```
//! use wasm_operator_controller_sdk::prelude::*;
//!
//! struct Hello;
//!
//! impl Controller for Hello {
//!     fn info() -> PluginInfo {
//!         PluginInfo::new("hello", env!("CARGO_PKG_VERSION"))
//!     }
//!
//!     fn reconcile(input: &Input) -> Result<Output, ReconcileError> {
//!         let mut out = Output::new();
//!         let greeting = input.spec().get("greeting").and_then(|g| g.as_str()).unwrap_or("hi");
//!         out.apply(
//!             Desired::new("v1", "ConfigMap", format!("{}-greeting", input.name()))
//!                 .body(json!({ "data": { "greeting": greeting } })),
//!         );
//!         out.set_status(input, json!({ "observedGeneration": input.generation() }));
//!         Ok(out)
//!     }
//! }
//!
//! wasm_operator_controller_sdk::export!(Hello);
//! # fn main() {}
//! ```
//!
//! * [`Input`]: the parent (typed metadata, its `spec` and `status` as
//!   JSON, or deserialized with [`Input::spec_as`]) and its children by
//!   kind ([`Input::children`]);
//! * [`Output`] and [`Desired`]: the children as they should be, deletes,
//!   the new status (written only when it differs: whole with
//!   [`Output::set_status`], or the plugin's fields merged into the stored
//!   status with [`Output::merge_status`]), [`Event`]s, requeue;
//! * [`log`]: structured logs to the host (captured natively in tests);
//! * [`testing`]: a parent with its children as the host would pass them,
//!   built in code or from Kubernetes manifests, and [`testing::reconcile`]
//!   to run a [`Controller`] natively in `cargo test`;
//! * [`bindings`]: the raw records `wit-bindgen` generates for the world.
//!
//! The plugin crate has `crate-type = ["cdylib", "rlib"]` and builds with
//! `cargo build --target wasm32-wasip2` or `cargo component build`.
//! `wasm-operator new NAME --kind GROUP/VERSION/KIND --owns KINDS` scaffolds
//! one. On other targets [`export!`] expands to nothing, so the same crate
//! runs its tests natively.

#![warn(missing_docs)]

pub mod bindings {
    //! Generated bindings of the `wasm-operator:controller@0.3.0` world
    //! `controller` (`wit/0.3/controller.wit`). On non-`wasm32` targets the
    //! imported `log` function is a stub that panics: use [`crate::log`].
    #![allow(missing_docs, clippy::all, clippy::pedantic)]

    wit_bindgen::generate!({
        world: "controller",
        path: "../../wit/0.3",
        pub_export_macro: true,
        default_bindings_module: "$crate::bindings",
        additional_derives: [PartialEq, Eq],
    });
}

mod input;
pub mod log;
mod output;
mod status;
pub mod testing;
#[cfg(test)]
mod tests;

pub use bindings::wasm_operator::controller::types::{
    Children, Event, EventType, KeyValue, Object, ObjectMeta, OwnerReference, PluginInfo,
    ReconcileError, ReconcileInput, ReconcileOutput, Timestamp,
};
pub use input::{Child, Input};
pub use output::{Desired, Output};
pub use serde_json::{self, Value, json};

/// The WIT package this SDK implements.
pub const WIT_PACKAGE: &str = "wasm-operator:controller@0.3.0";

/// Everything a plugin usually needs, in one `use`.
pub mod prelude {
    pub use crate::{
        Child, Controller, Desired, Event, EventType, Input, Output, PluginInfo, ReconcileError,
        Value, json,
    };
}

/// A controller plugin: its identity and its reconcile.
pub trait Controller {
    /// Name and version, shown in logs and on the `PluginController`.
    fn info() -> PluginInfo;

    /// The children and status that bring the cluster towards the parent's
    /// spec. A pure, idempotent function of `input`: the host calls it again
    /// on every change and after every requeue.
    fn reconcile(input: &Input) -> Result<Output, ReconcileError>;
}

impl PluginInfo {
    /// A plugin's name and version.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
        }
    }
}

impl ReconcileError {
    /// An error that trying again without a change will not fix (e.g. an
    /// invalid spec).
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }

    /// An error that may go away (the host retries with backoff).
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }
}

impl Event {
    /// A Normal Event with an UpperCamelCase `reason`.
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            event_type: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A Warning Event with an UpperCamelCase `reason`.
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            event_type: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// One reconcile of `C` on the wire records: what [`export!`] calls. Reads
/// the input ([`Input::new`]), calls [`Controller::reconcile`], logs the
/// outcome and encodes the output.
pub fn run<C: Controller>(raw: ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
    let input = Input::new(raw)?;
    let result = C::reconcile(&input).and_then(Output::into_wire);
    let name = input.name();
    match &result {
        Ok(out) => log::debug(
            "reconciled",
            &[
                ("parent", name),
                ("apply", &out.apply.len().to_string()),
                ("delete", &out.delete.len().to_string()),
                (
                    "status",
                    if out.status_json.is_some() {
                        "changed"
                    } else {
                        "unchanged"
                    },
                ),
            ],
        ),
        Err(err) => log::warn(
            "reconcile failed",
            &[("parent", name), ("error", &err.message)],
        ),
    }
    // The host calls every reconcile in a fresh instance and drops the
    // instance after it: freeing the input's strings one by one first
    // would be wasted work (a few thousand frees at 100 children).
    #[cfg(target_arch = "wasm32")]
    core::mem::forget(input);
    result
}

/// Exports a type implementing [`Controller`] as the component's
/// `wasm-operator:controller/reconciler@0.3.0`. Call it once per component.
/// On targets other than `wasm32` it expands to nothing, so the crate's
/// tests run natively.
#[macro_export]
macro_rules! export {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        #[allow(non_camel_case_types)]
        struct __wasm_operator_controller_export;

        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::exports::wasm_operator::controller::reconciler::Guest
            for __wasm_operator_controller_export
        {
            fn info() -> $crate::PluginInfo {
                <$ty as $crate::Controller>::info()
            }

            fn reconcile(
                input: $crate::ReconcileInput,
            ) -> ::core::result::Result<$crate::ReconcileOutput, $crate::ReconcileError> {
                $crate::run::<$ty>(input)
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export!(__wasm_operator_controller_export with_types_in $crate::bindings);
    };
}
