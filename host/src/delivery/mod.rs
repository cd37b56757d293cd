//! Delivering plugins to the serving slot: sources watched for new bytes
//! ([`sources`]: a file, a ConfigMap, an OCI reference), each candidate
//! vetted ([`vetting`]), damped where a source flaps ([`damper`]), then
//! swapped in or refused with a record of why ([`swapper`]); the wiring of
//! one host's sources ([`setup`]); and the `JinghzhuPlugin` resource as a
//! source with a status, rollouts and tenants ([`resource`]).
//!
//! What it may import: the slot it delivers to (`slot/`), `registry/`
//! (pulls, signatures, the store), `shards/` and `leader/` (who judges a
//! rollout), and everything below them. Never `controller/`, `serve.rs`
//! or `run.rs`: they use it.

pub mod damper;
pub mod report;
pub mod resource;
pub mod setup;
pub mod sources;
pub mod swapper;
pub mod vetting;
