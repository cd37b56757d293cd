//! Support for the golden-fixture test: reading kubectl-style YAML into the
//! SDK's input records, writing outputs in the proposed-actions shape, and
//! applying an output as the API server would (see `plugins/FIXTURES.md`
//! and `plugins/README.md`).

pub mod actions;
pub mod kube;
pub mod time;
