//! The `replicaset` example as a contract 0.3 controller plugin: a
//! WebAssembly component of the `wasm-operator:controller@0.3.0` world that
//! keeps `spec.desired` Pods of a `Jinghzhu` alive when a `PluginController`
//! declares it (parent `jinghzhu.io/v1` `Jinghzhu`, child `v1` `Pod`; see
//! `controller.yaml`).
//!
//! The decisions are `replicaset-logic`'s, the same as the 0.2 plugin's:
//! this crate reads the 0.3 input into that logic's records
//! ([`convert::input`]) and turns its proposal into a desired state
//! ([`convert::output`]). It calls the logic without its log lines
//! (`propose_with`): those go to contract 0.2's `log`, which a 0.3
//! component must not import. Two things differ because the contract does:
//!
//! * a new Pod needs an exact name (server-side apply): `<jinghzhu>-<n>`
//!   with the smallest `n` no child holds, so a reconcile on a cache that
//!   has not seen the last creates yet proposes the same Pods again, which
//!   the host's apply leaves as they are;
//! * the plugin writes the whole status, `readyReplicas` included (the
//!   0.2 host counted that itself), and a Jinghzhu without a template gets
//!   a default pod spec from the plugin ([`convert::DEFAULT_POD_SPEC`]), as
//!   the 0.2 host filled in its own.
//!
//! Build it with
//! `cargo build --release --target wasm32-wasip2 -p replicaset-controller-plugin`.

pub mod convert;

use replicaset_logic::message::Variant;
use replicaset_logic::plan;
use wasm_operator_controller_sdk::prelude::*;

/// The name the plugin reports.
pub const PLUGIN_NAME: &str = "replicaset-controller";

/// The plugin.
pub struct ReplicaSetController;

impl Controller for ReplicaSetController {
    fn info() -> PluginInfo {
        PluginInfo::new(PLUGIN_NAME, env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(input: &Input) -> Result<Output, ReconcileError> {
        let legacy = convert::input(input)?;
        let proposal = plan::propose_with(&legacy, Variant::V1);
        convert::output(input, &legacy, proposal)
    }
}

wasm_operator_controller_sdk::export!(ReplicaSetController);

#[cfg(test)]
mod tests;
