//! The wasm-operator host: a Kubernetes operator whose reconcile logic is a
//! sandboxed WebAssembly component.
//!
//! The shared model ([`crd`], [`actions`], [`ownership`], [`observed`],
//! [`cached_pod`], [`plugin_text`], [`disk`], [`locks`]) is the
//! `wasm-operator-model` crate, the Wasm side ([`runtime`]) the
//! `wasm-operator-runtime` crate and plugins from outside the cluster
//! ([`registry`]) the `wasm-operator-registry` crate (`host/crates/`),
//! re-exported here under their module names.
//!
//! Rooms, from the ground up:
//! - the shared model: [`crd`] (the `Jinghzhu`, `JinghzhuPlugin` and
//!   `PluginController` resources), [`actions`] (what a plugin proposes), [`ownership`] (what
//!   makes a Pod ours), [`cached_pod`], [`observed`] (what the host counts
//!   itself for the status), [`plugin_text`] (escaping and bounding text
//!   from a plugin or a Jinghzhu author), [`locks`] (locks that outlive a
//!   panic), [`disk`] (files the host keeps and trusts later: private
//!   directories, keyed files, bounds in bytes, pins).
//! - [`runtime`] and [`registry`], beside the model: the Wasm side (engine,
//!   loading, limits, calling `reconcile`); plugins from OCI registries,
//!   cosign signatures, the local store of pulled artifacts, `wasm-operator
//!   push`.
//! - [`refusal`], [`tasks`], [`event_reasons`]: a refusal and its rule,
//!   named tasks, the Event reasons the host reserves for itself.
//! - [`kube_api`]: the Kubernetes client (deadlines, retries) and the
//!   bounds every list and watch is read through.
//! - [`judging`]: the pure rules of a canary rollout: plans, tallies, criteria.
//! - [`telemetry`]: metrics, the Events queue and writer, probe state.
//! - [`apply`]: validating and applying a proposal, and remembering what was
//!   written (expectations, our own status writes).
//! - [`slot`]: which plugin serves now: stable, probation, shadow, canary,
//!   and the router of tenant slots.
//! - [`leader`] and [`shards`]: leader election on a Lease; objects split
//!   between replicas.
//! - [`delivery`]: plugin sources watched, vetted, damped, swapped in or
//!   refused; the `JinghzhuPlugin` resource as a source, with its status,
//!   rollouts and tenants.
//! - [`controller`]: informers, workqueue, the reconcile loop.
//! - [`declared`]: controllers of any kind, declared by `PluginController`
//!   resources: their kinds resolved, watched, reconciled by contract 0.3
//!   plugins, their outputs checked and applied.
//! - [`serve`] and [`run`]: the metrics/status endpoint and the `run` command.
//! - [`offline`]: running a plugin on files, golden fixtures, comparing plugins
//!   (`wasm-operator reconcile`), recording cases from a cluster (`record`).
//! - [`scaffold`]: a new plugin crate (`wasm-operator new`).
//! - [`cli`]: the command line.

// The walled crates under the paths the host's rooms name them by.
pub use wasm_operator_model::{
    actions, cached_pod, crd, disk, locks, observed, ownership, plugin_text,
};
pub use wasm_operator_registry as registry;
pub use wasm_operator_runtime as runtime;

pub mod apply;
pub mod cli;
pub mod controller;
pub mod declared;
pub mod delivery;
pub mod event_reasons;
pub mod judging;
pub mod kube_api;
pub mod leader;
pub mod offline;
pub mod refusal;
pub mod run;
pub mod scaffold;
pub mod serve;
pub mod shards;
pub mod slot;
pub mod tasks;
pub mod telemetry;
