//! The wasm-operator host: a Kubernetes operator whose reconcile logic is a
//! sandboxed WebAssembly component.
//!
//! Rooms, from the ground up:
//! - the shared model: [`crd`] (the `Jinghzhu` and `JinghzhuPlugin`
//!   resources), [`actions`] (what a plugin proposes), [`ownership`] (what
//!   makes a Pod ours), [`cached_pod`], [`observed`] (what the host counts
//!   itself for the status), [`plugin_text`] (escaping and bounding text
//!   from a plugin or a Jinghzhu author), [`event_reasons`].
//! - [`refusal`], [`locks`], [`tasks`], [`disk`]: a refusal and its rule,
//!   locks that outlive a panic, named tasks,
//!   files the host keeps and trusts later (private directories, keyed
//!   files, bounds in bytes, pins).
//! - [`kube_api`]: the Kubernetes client (deadlines, retries) and the
//!   bounds every list and watch is read through.
//! - [`judging`]: the pure rules of a canary rollout: plans, tallies, criteria.
//! - [`runtime`]: the Wasm side: engine, loading, limits, calling `reconcile`.
//! - [`telemetry`]: metrics, the Events queue and writer, probe state.
//! - [`apply`]: validating and applying a proposal, and remembering what was
//!   written (expectations, our own status writes).
//! - [`registry`]: plugins from OCI registries, cosign signatures, the local
//!   store of pulled artifacts, `wasm-operator push`.
//! - [`slot`]: which plugin serves now: stable, probation, shadow, canary,
//!   and the router of tenant slots.
//! - [`leader`] and [`shards`]: leader election on a Lease; objects split
//!   between replicas.
//! - [`delivery`]: plugin sources watched, vetted, damped, swapped in or
//!   refused; the `JinghzhuPlugin` resource as a source, with its status,
//!   rollouts and tenants.
//! - [`controller`]: informers, workqueue, the reconcile loop.
//! - [`serve`] and [`run`]: the metrics/status endpoint and the `run` command.
//! - [`offline`]: running a plugin on files, golden fixtures, comparing plugins
//!   (`wasm-operator reconcile`), recording cases from a cluster (`record`).
//! - [`scaffold`]: a new plugin crate (`wasm-operator new`).
//! - [`cli`]: the command line.

pub mod actions;
pub mod apply;
pub mod cached_pod;
pub mod cli;
pub mod controller;
pub mod crd;
pub mod delivery;
pub mod disk;
pub mod event_reasons;
pub mod judging;
pub mod kube_api;
pub mod leader;
pub mod locks;
pub mod observed;
pub mod offline;
pub mod ownership;
pub mod plugin_text;
pub mod refusal;
pub mod registry;
pub mod run;
pub mod runtime;
pub mod scaffold;
pub mod serve;
pub mod shards;
pub mod slot;
pub mod tasks;
pub mod telemetry;
