//! The wasm-operator host: a Kubernetes operator whose reconcile logic is a
//! sandboxed WebAssembly component.
//!
//! The shared model ([`crd`], [`actions`], [`ownership`], [`observed`],
//! [`cached_pod`], [`plugin_text`], [`disk`]) is the `wasm-operator-model`
//! crate and the Wasm side ([`runtime`]) the `wasm-operator-runtime` crate
//! (`host/crates/`), re-exported here under their module names.
//!
//! - [`api_client`]: the Kubernetes client: read timeout, which failed
//!   answers it repeats (never a create that may have been made).
//! - [`crd`]: the `Jinghzhu` custom resource.
//! - [`actions`]: what a plugin proposes, in the host's types.
//! - [`ownership`]: what makes a Pod ours (labels, controller ownerReference).
//! - [`observed`]: what the host counts itself for the status (`readyReplicas`).
//! - [`plugin_text`]: escaping and bounding text from a plugin or a Jinghzhu
//!   author before it reaches a log line, an Event or a metric label.
//! - [`event_reasons`]: the Event reasons the host reserves for itself.
//! - [`disk`]: files the host keeps and trusts later (the precompiled
//!   cache, the OCI store): private directories, keyed files, bounds in
//!   bytes and what is pinned.
//! - [`runtime`]: the Wasm side: engine, loading, limits, calling `reconcile`.
//! - [`controller`]: the Kubernetes side: informers, workqueue, reconcile loop.
//! - [`apply`]: validating and applying a proposal, and remembering what was
//!   written (expectations, our own status writes).
//! - [`telemetry`]: metrics, the Events queue and writer, probe state.
//! - [`hotswap`]: plugin sources, vetting, the atomic switch, shadow mode, rollback.
//! - [`leader`]: leader election on a Lease; standbys stay warm.
//! - [`list_bounds`]: bounds on one list (pages, items, bytes, repeated
//!   `continue` tokens), in the client and on the watch streams.
//! - [`sources`]: plugins from OCI registries, cosign signature checks, the
//!   local copies of pulled artifacts, `wasm-operator push`.
//! - [`plugin_resource`]: the `JinghzhuPlugin` resource as the plugin source,
//!   and its status.
//! - [`offline`]: running a plugin on files, golden fixtures, comparing plugins
//!   (`wasm-operator reconcile`), recording cases from a cluster (`record`).
//! - [`scaffold`]: a new plugin crate (`wasm-operator new`).
//! - [`run`] and [`serve`]: the `run` command and its metrics/status endpoint.
//! - [`cli`]: the command line.

// The walled crates under the paths the host's rooms name them by.
pub use wasm_operator_model::{actions, cached_pod, crd, disk, observed, ownership, plugin_text};
pub use wasm_operator_runtime as runtime;

pub mod api_client;
pub mod apply;
pub mod cli;
pub mod controller;
pub mod event_reasons;
pub mod hotswap;
pub mod leader;
pub mod list_bounds;
pub mod offline;
pub mod plugin_resource;
pub mod run;
pub mod scaffold;
pub mod serve;
pub mod shards;
pub mod sources;
pub mod tasks;
pub mod telemetry;
