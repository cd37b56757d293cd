//! The wasm-operator's shared model and pure rules: what the host, the
//! runtime and the tools agree on. No async runtime, no Kubernetes client,
//! no wasmtime (kube's `CustomResource` derive and the k8s-openapi types are
//! types, not a client).
//!
//! - [`crd`]: the `Jinghzhu` and `JinghzhuPlugin` custom resources.
//! - [`actions`]: what a plugin proposes, in the host's types.
//! - [`ownership`]: what makes a Pod ours (labels, controller ownerReference).
//! - [`observed`]: what the host counts itself for the status (`readyReplicas`).
//! - [`cached_pod`]: the slim copy of a Pod the host's caches keep.
//! - [`plugin_text`]: escaping and bounding text from a plugin or a Jinghzhu
//!   author before it reaches a log line, an Event or a metric label.
//! - [`disk`]: files the host keeps and trusts later (the precompiled
//!   cache, the OCI store): private directories, keyed files, bounds in
//!   bytes and what is pinned.
//! - [`locks`]: locks that stay usable after a panic.

pub mod actions;
pub mod cached_pod;
pub mod crd;
pub mod disk;
pub mod locks;
pub mod observed;
pub mod ownership;
pub mod plugin_text;
