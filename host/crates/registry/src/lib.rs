//! Plugin bytes from outside the cluster: OCI registries ([`oci`], over
//! [`http`]'s HTTP client), the cosign signatures that say who built
//! them ([`signature`]), the local copies a host serves from when the
//! registry is down ([`store`]), `wasm-operator push` ([`push`]), and the
//! bounds every byte from outside is read through ([`bounded`]: caps,
//! deadlines, plugin files, error excerpts).
//!
//! Nothing here compiles or runs a plugin: this crate hands over bytes whose
//! digest, size and signatures were checked, and the host's hot-swap path
//! vets them like bytes from a file. Every failure is an [`OciError`]
//! naming a rule ([`rules`]), so a `PluginRefused` Event, a log line and
//! `/status` say which check refused the artifact (the host turns it into
//! its `Refusal`).
//!
//! What it may import: only the shared model of `wasm-operator-model`
//! (`disk` for the store's checks, bound and pins; `locks`; `plugin_text`
//! for escaping a registry's words). Not the host, not the runtime (the
//! precompiled cache's directory and key, next to which artifacts are
//! kept, come in as a [`store::StoreKey`]), no wasmtime, and no Kubernetes
//! client: registry credentials are a mounted dockerconfigjson file, not a
//! Secret read from the API. The host re-exports this crate as its
//! `registry` room; its `delivery` (the OCI source), `run` and `cli`
//! (flags, `push`) use it.

// The model's modules under the paths this crate's files name them by.
use wasm_operator_model::{disk, locks, plugin_text};

pub mod args;
mod auth;
pub mod bounded;
pub mod http;
pub mod oci;
pub mod push;
pub mod reference;
pub mod signature;
pub mod store;

pub use args::{FileSourceArgs, OciArgs};
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
    /// A request (`--oci-request-timeout`) or a whole pull
    /// (`--oci-pull-timeout`) did not finish in time: cut, retried at the
    /// next poll; at start the local copy serves.
    pub const DEADLINE: &str = "oci/deadline";
    /// A registry answer (manifest, token, signature artifact) larger than
    /// its cap: cut while read.
    pub const ANSWER_TOO_LARGE: &str = "oci/answer-too-large";
    /// A redirect to another origin than the registry's or a configured
    /// blob host (`--oci-blob-host`), or to plain HTTP for an origin not
    /// named insecure: not followed.
    pub const REDIRECT: &str = "oci/redirect";
    /// A file source outside `--plugin-file-root` (symlinks followed).
    pub const FILE_OUTSIDE_ROOT: &str = "file/outside-root";
    /// A file source that is not a regular file (FIFO, device, directory).
    pub const FILE_NOT_REGULAR: &str = "file/not-regular";
    /// A file source larger than `--plugin-file-max-mib`.
    pub const FILE_TOO_LARGE: &str = "file/too-large";
    /// A file source that cannot be read (missing, permissions).
    pub const FILE_UNREADABLE: &str = "file/unreadable";
}

/// Most bytes of an [`OciError`]'s message (escaped; a cut marker on top).
pub const MAX_ERROR_MESSAGE: usize = 2048;

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
    /// An error under `rule`. The message is escaped and cut
    /// ([`crate::plugin_text::escape`], [`MAX_ERROR_MESSAGE`]) here, once:
    /// it may quote a registry's words, and it goes to log lines, `/status`,
    /// a resource's conditions and Events as it is.
    pub fn new(rule: &'static str, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: crate::plugin_text::escape(&message.into(), MAX_ERROR_MESSAGE),
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

    /// Whether the registry did not answer in time or at all: the local
    /// copy may serve at start, and the next poll tries again.
    pub fn is_transient(&self) -> bool {
        self.rule == rules::UNREACHABLE || self.rule == rules::DEADLINE
    }

    /// Whether the registry misbehaved (too slow, too big, a redirect
    /// elsewhere): reported once per distinct error, retried each poll.
    pub fn is_misbehaving_registry(&self) -> bool {
        matches!(
            self.rule,
            rules::DEADLINE | rules::ANSWER_TOO_LARGE | rules::REDIRECT
        )
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}
