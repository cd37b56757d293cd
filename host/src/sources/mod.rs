//! Plugin bytes from outside the cluster: OCI registries ([`oci`]), the
//! cosign signatures that say who built them ([`signature`]), the local
//! copies a host serves from when the registry is down ([`store`]), and
//! `wasm-operator push` ([`push`]).
//!
//! Nothing here compiles or runs a plugin: this room hands over bytes whose
//! digest, size and signatures were checked, and the hot-swap path vets them
//! like bytes from a file. Every failure is an [`OciError`] naming a rule
//! ([`rules`]), so a `PluginRefused` Event, a log line and `/status` say
//! which check refused the artifact.
//!
//! What it may import: `runtime` (the precompiled cache's directory, next to
//! which artifacts are kept). Used by `hotswap` (the OCI source), `run` and
//! `cli` (flags, `push`).

pub mod args;
mod auth;
pub mod oci;
pub mod push;
pub mod reference;
pub mod signature;
pub mod store;

pub use args::OciArgs;
pub use oci::{OciOptions, OciPuller, Pulled};
pub use reference::{OciRef, is_oci};

/// The rule ids an [`OciError`] names.
pub mod rules {
    /// The `oci://` reference cannot be parsed.
    pub const REFERENCE: &str = "oci/reference";
    /// A CA file, docker config, key file or policy given to the host is unusable.
    pub const CONFIG: &str = "oci/config";
    /// The registry refused the credentials (or none were given and it needs some).
    pub const AUTH: &str = "oci/auth";
    /// The registry cannot be reached (network, TLS, 5xx).
    pub const UNREACHABLE: &str = "oci/unreachable";
    /// The tag, manifest or blob is not in the registry.
    pub const NOT_FOUND: &str = "oci/not-found";
    /// Not a Wasm artifact: no single `application/wasm` layer.
    pub const LAYOUT: &str = "oci/layout";
    /// The artifact is larger than `--oci-max-artifact-mib`.
    pub const TOO_LARGE: &str = "oci/too-large";
    /// Bytes that do not hash to the digest that names them.
    pub const DIGEST_MISMATCH: &str = "oci/digest-mismatch";
    /// Keys are configured but the artifact has no signature.
    pub const UNSIGNED: &str = "oci/unsigned";
    /// Signatures exist but do not satisfy the policy (unknown key, bad
    /// signature, signed payload naming another digest).
    pub const SIGNATURE: &str = "oci/signature";
}

/// Why an artifact could not be had; `rule` is one of [`rules`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[{rule}] {message}")]
pub struct OciError {
    /// The rule id.
    pub rule: &'static str,
    /// What happened and what to do.
    pub message: String,
}

impl OciError {
    /// An error under `rule`.
    pub fn new(rule: &'static str, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
        }
    }

    /// The rule id.
    pub fn rule(&self) -> &'static str {
        self.rule
    }

    /// Whether the registry could not be asked at all (a host may then
    /// serve its local copy).
    pub fn is_unreachable(&self) -> bool {
        self.rule == rules::UNREACHABLE
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}
