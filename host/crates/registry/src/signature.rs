//! cosign signatures, checked before a pulled plugin is compiled.
//!
//! The `.sig` tag convention: the signatures of manifest `sha256:<hex>` are
//! the layers of the manifest tagged `sha256-<hex>.sig` in the same
//! repository. Each layer is a "simple signing" payload (JSON whose
//! `critical.image.docker-manifest-digest` names the signed manifest and
//! `critical.identity.docker-reference` the repository it was signed for)
//! and carries the annotation `dev.cosignproject.cosign/signature`: the
//! base64 of an ECDSA signature (DER) over the payload's bytes. A signature
//! counts only for the manifest *and the repository* it names (cosign's own
//! rule): an artifact copied with its `.sig` into another repository is not
//! signed there ([`Subject`]).
//!
//! A [`VerificationPolicy`] holds trusted [`Verifier`]s and a [`Threshold`]
//! (all of them, any of them, or at least N, as Kubewarden's `allOf`,
//! `anyOf` and `minimumMatches`). Key-based verification
//! ([`PublicKeyVerifier`], ECDSA P-256 as `cosign generate-key-pair` makes)
//! is built in; a keyless verifier (Fulcio certificate + Rekor inclusion
//! proof, read from the same layer's `dev.sigstore.cosign/certificate`,
//! `…/chain` and `…/bundle` annotations) is another implementation of the
//! trait and needs no change here.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;
use serde::{Deserialize, Serialize};

use super::{OciError, rules};

/// The annotation holding a layer's base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The media type of a simple-signing payload layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Most signature layers read from one `.sig` manifest.
pub const MAX_SIGNATURES: usize = 32;
/// Most bytes of one payload.
pub const MAX_PAYLOAD_BYTES: i64 = 64 * 1024;

/// The tag under which cosign stores the signatures of `manifest_digest`
/// (`sha256:<hex>` → `sha256-<hex>.sig`).
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replacen(':', "-", 1))
}

/// One signature layer: its payload, the base64 signature and the layer's
/// annotations (where keyless verifiers find certificates and bundles).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CosignSignature {
    /// The simple-signing payload, as signed.
    pub payload: Vec<u8>,
    /// The base64 signature (`dev.cosignproject.cosign/signature`).
    pub signature: String,
    /// Every annotation of the layer.
    pub annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}
#[derive(Deserialize)]
struct Critical {
    image: Image,
    identity: Option<Identity>,
}
#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}
#[derive(Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: Option<String>,
}

/// What a signature must be for: a manifest, in a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject<'a> {
    /// The manifest digest (`sha256:<hex>`).
    pub manifest_digest: &'a str,
    /// The repository as cosign names it (`registry/repository`; see
    /// [`docker_reference`]).
    pub repository: &'a str,
}

/// The repository of `registry`/`repository` as cosign writes it in a
/// payload's `docker-reference`: Docker Hub as `index.docker.io`, its
/// official images under `library/`.
pub fn docker_reference(registry: &str, repository: &str) -> String {
    match registry {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" if !repository.contains('/') => {
            format!("index.docker.io/library/{repository}")
        }
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => {
            format!("index.docker.io/{repository}")
        }
        _ => format!("{registry}/{repository}"),
    }
}

/// A `docker-reference` without a tag or digest (older signers wrote one).
fn repository_of(reference: &str) -> &str {
    let name = reference.split('@').next().unwrap_or(reference);
    match name.rfind(':') {
        Some(colon) if !name[colon..].contains('/') => &name[..colon],
        _ => name,
    }
}

impl CosignSignature {
    /// The manifest digest the payload says was signed.
    pub fn signed_digest(&self) -> Result<String, String> {
        self.payload()
            .map(|p| p.critical.image.docker_manifest_digest)
    }

    /// The repository the payload says the manifest was signed for.
    pub fn signed_repository(&self) -> Result<String, String> {
        self.payload()?
            .critical
            .identity
            .and_then(|identity| identity.docker_reference)
            .map(|reference| repository_of(&reference).to_string())
            .ok_or_else(|| {
                "the payload names no repository (critical.identity.docker-reference)".to_string()
            })
    }

    fn payload(&self) -> Result<Payload, String> {
        serde_json::from_slice::<Payload>(&self.payload)
            .map_err(|err| format!("the payload is not a cosign simple-signing payload: {err}"))
    }

    /// Whether the (verified) payload is for `subject`: its manifest and
    /// its repository; else why not.
    pub fn check_subject(&self, subject: &Subject<'_>) -> Result<(), String> {
        let signed = self.signed_digest()?;
        if signed != subject.manifest_digest {
            return Err(format!(
                "the signature is for {signed}, not for {}",
                subject.manifest_digest
            ));
        }
        let repository = self.signed_repository()?;
        if repository != subject.repository {
            return Err(format!(
                "the signature is for repository {repository}, not for {} (an artifact copied \
                 with its signature into another repository is not signed there)",
                subject.repository
            ));
        }
        Ok(())
    }
}

/// Something that can tell whether one signature is a valid signature of a
/// manifest by someone it trusts. Key-based today; keyless (Fulcio/Rekor)
/// later, as another implementation.
pub trait Verifier: Send + Sync + fmt::Debug {
    /// A name for logs and refusals (a key file, a fingerprint, an identity).
    fn name(&self) -> &str;
    /// Ok when `signature` is valid, made by this verifier's signer, and its
    /// payload names `subject` (manifest and repository); else why not.
    fn verify(&self, subject: &Subject<'_>, signature: &CosignSignature) -> Result<(), String>;
}

/// Most bytes of a key file (a PEM public key is a few hundred).
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// An ECDSA P-256 public key (the `cosign.pub` of `cosign generate-key-pair`).
/// One made from a file ([`PublicKeyVerifier::from_file`]) reads the file
/// again at every verification: a key file rewritten (a mounted Secret
/// updated to revoke a key) counts from the next artifact checked, and an
/// unreadable one verifies nothing.
pub struct PublicKeyVerifier {
    name: String,
    key: VerifyingKey,
    /// The file the key is read from at each verification, if any.
    file: Option<PathBuf>,
}

impl fmt::Debug for PublicKeyVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKeyVerifier")
            .field("name", &self.name)
            .finish()
    }
}

impl PublicKeyVerifier {
    /// A verifier for the PEM public key `pem` (`-----BEGIN PUBLIC KEY-----`), called `name`.
    pub fn from_pem(name: &str, pem: &str) -> Result<Self, OciError> {
        let key = VerifyingKey::from_public_key_pem(pem.trim()).map_err(|err| {
            OciError::new(
                rules::CONFIG,
                format!(
                    "the verification key {name} is not an ECDSA P-256 public key in PEM \
                     (-----BEGIN PUBLIC KEY-----, as `cosign generate-key-pair` writes cosign.pub): {err}"
                ),
            )
        })?;
        Ok(Self {
            name: name.to_string(),
            key,
            file: None,
        })
    }

    /// A verifier for the PEM public key in `path`, read now (a bad key
    /// stops the start) and again at each verification.
    pub fn from_file(path: &Path) -> Result<Self, OciError> {
        let mut verifier = Self::read_key(path)?;
        verifier.file = Some(path.to_path_buf());
        Ok(verifier)
    }

    fn read_key(path: &Path) -> Result<Self, OciError> {
        let read = || -> std::io::Result<String> {
            let file = std::fs::File::open(path)?;
            let size = file.metadata()?.len();
            if size > MAX_KEY_FILE_BYTES {
                return Err(std::io::Error::other(format!(
                    "{size} bytes, more than a key file's {MAX_KEY_FILE_BYTES}"
                )));
            }
            let mut pem = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(file, MAX_KEY_FILE_BYTES),
                &mut pem,
            )?;
            Ok(pem)
        };
        let pem = read().map_err(|err| {
            OciError::new(
                rules::CONFIG,
                format!("reading the verification key {}: {err}", path.display()),
            )
        })?;
        Self::from_pem(&path.display().to_string(), &pem)
    }

    /// The key to verify with now: the file's current key, if from a file.
    fn current_key(&self) -> Result<VerifyingKey, String> {
        match &self.file {
            None => Ok(self.key),
            Some(path) => Self::read_key(path)
                .map(|verifier| verifier.key)
                .map_err(|err| format!("the key is not usable now: {}", err.message)),
        }
    }
}

impl Verifier for PublicKeyVerifier {
    fn name(&self) -> &str {
        &self.name
    }

    fn verify(&self, subject: &Subject<'_>, signature: &CosignSignature) -> Result<(), String> {
        let der = base64::engine::general_purpose::STANDARD
            .decode(signature.signature.trim())
            .map_err(|err| format!("the signature is not base64: {err}"))?;
        let sig = Signature::from_der(&der)
            .map_err(|_| "the signature is not a DER ECDSA signature".to_string())?;
        self.current_key()?
            .verify(&signature.payload, &sig)
            .map_err(|_| "not signed by this key".to_string())?;
        // Only a valid signature's payload is worth reading.
        signature.check_subject(subject)
    }
}

/// How many trusted verifiers must be satisfied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threshold {
    /// Every one (`allOf`; the default).
    All,
    /// At least one (`anyOf`).
    Any,
    /// At least this many (`minimumMatches`).
    AtLeast(usize),
}

impl FromStr for Threshold {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "all" => Ok(Self::All),
            "any" => Ok(Self::Any),
            other => other
                .strip_prefix("at-least=")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n >= 1)
                .map(Self::AtLeast)
                .ok_or_else(|| format!("{other:?}: the policy is all, any or at-least=N (N >= 1)")),
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => write!(f, "all"),
            Self::Any => write!(f, "any"),
            Self::AtLeast(n) => write!(f, "at-least={n}"),
        }
    }
}

/// Trusted verifiers and how many must agree; optionally, a second group
/// that must agree as well (Kubewarden's `allOf` together with `anyOf`).
#[derive(Debug, Clone)]
pub struct VerificationPolicy {
    /// The trusted verifiers.
    pub verifiers: Vec<Arc<dyn Verifier>>,
    /// How many of them must be satisfied.
    pub threshold: Threshold,
    /// Another group that must be satisfied too ([`VerificationPolicy::and`]).
    pub and_also: Option<Box<VerificationPolicy>>,
}

impl VerificationPolicy {
    /// A policy over `verifiers`; refuses a threshold no signature set could meet.
    pub fn new(verifiers: Vec<Arc<dyn Verifier>>, threshold: Threshold) -> Result<Self, OciError> {
        if verifiers.is_empty() {
            return Err(OciError::new(
                rules::CONFIG,
                "a verification policy needs at least one key (--plugin-verify-key FILE)",
            ));
        }
        if let Threshold::AtLeast(n) = threshold
            && n > verifiers.len()
        {
            return Err(OciError::new(
                rules::CONFIG,
                format!(
                    "--plugin-verify-policy at-least={n} needs at least {n} keys, {} given",
                    verifiers.len()
                ),
            ));
        }
        Ok(Self {
            verifiers,
            threshold,
            and_also: None,
        })
    }

    /// This policy and `other` both: a signature set passes when it
    /// satisfies each (e.g. every key of `allOf` and `minimumMatches` of
    /// `anyOf`).
    pub fn and(mut self, other: VerificationPolicy) -> Self {
        self.and_also = Some(Box::new(match self.and_also.take() {
            Some(also) => also.and(other),
            None => other,
        }));
        self
    }

    /// A policy over the PEM public keys in `paths`.
    pub fn from_key_files(paths: &[PathBuf], threshold: Threshold) -> Result<Self, OciError> {
        let verifiers = paths
            .iter()
            .map(|path| {
                PublicKeyVerifier::from_file(path).map(|v| Arc::new(v) as Arc<dyn Verifier>)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(verifiers, threshold)
    }

    /// How many verifiers must be satisfied.
    pub fn required(&self) -> usize {
        match self.threshold {
            Threshold::All => self.verifiers.len(),
            Threshold::Any => 1,
            Threshold::AtLeast(n) => n,
        }
    }

    /// Checks `signatures` of `subject` (a manifest in a repository): the
    /// names of the satisfied verifiers, or `oci/unsigned` (none at all) /
    /// `oci/signature`.
    pub fn check(
        &self,
        subject: &Subject<'_>,
        signatures: &[CosignSignature],
    ) -> Result<Vec<String>, OciError> {
        let manifest_digest = subject.manifest_digest;
        if signatures.is_empty() {
            return Err(OciError::new(
                rules::UNSIGNED,
                format!(
                    "{manifest_digest} has no cosign signature, and the policy needs {} of {} keys; \
                     sign it with `cosign sign --key cosign.key REGISTRY/REPO@{manifest_digest}`",
                    self.required(),
                    self.verifiers.len()
                ),
            ));
        }
        let mut satisfied = self.check_group(subject, signatures)?;
        if let Some(also) = &self.and_also {
            for name in also.check(subject, signatures)? {
                if !satisfied.contains(&name) {
                    satisfied.push(name);
                }
            }
        }
        Ok(satisfied)
    }

    /// [`VerificationPolicy::check`] of this group alone (not `and_also`).
    fn check_group(
        &self,
        subject: &Subject<'_>,
        signatures: &[CosignSignature],
    ) -> Result<Vec<String>, OciError> {
        let manifest_digest = subject.manifest_digest;
        let mut satisfied = Vec::new();
        let mut missing = Vec::new();
        for verifier in &self.verifiers {
            let mut why = Vec::new();
            let ok = signatures.iter().any(|signature| {
                verifier
                    .verify(subject, signature)
                    .map_err(|err| why.push(err))
                    .is_ok()
            });
            if ok {
                satisfied.push(verifier.name().to_string());
            } else {
                why.sort();
                why.dedup();
                missing.push(format!("{} ({})", verifier.name(), why.join("; ")));
            }
        }
        if satisfied.len() >= self.required() {
            return Ok(satisfied);
        }
        Err(OciError::new(
            rules::SIGNATURE,
            format!(
                "{manifest_digest}: {} signature(s), {} of the {} required trusted keys (policy {}) \
                 signed it; not satisfied: {}",
                signatures.len(),
                satisfied.len(),
                self.required(),
                self.threshold,
                missing.join(", ")
            ),
        ))
    }
}

/// A simple-signing payload for `manifest_digest` of `reference` (as cosign writes it).
pub fn simple_signing_payload(reference: &str, manifest_digest: &str) -> Vec<u8> {
    serde_json::json!({
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": "cosign container image signature"
        },
        "optional": null
    })
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::SigningKey;
    use p256::ecdsa::signature::Signer as _;
    use p256::pkcs8::{EncodePublicKey, LineEnding};
    use sha2::{Digest, Sha256};

    const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    const SUBJECT: Subject<'static> = Subject {
        manifest_digest: DIGEST,
        repository: "reg/repo",
    };

    /// A key made in the test from a seed (a P-256 scalar from its hash).
    fn key(seed: &str) -> SigningKey {
        SigningKey::from_slice(&Sha256::digest(seed.as_bytes())).expect("a valid scalar")
    }

    fn verifier(name: &str, key: &SigningKey) -> Arc<dyn Verifier> {
        let pem = key
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .expect("pem");
        Arc::new(PublicKeyVerifier::from_pem(name, &pem).expect("parses"))
    }

    fn sign(key: &SigningKey, digest: &str) -> CosignSignature {
        let payload = simple_signing_payload("reg/repo", digest);
        let sig: Signature = key.sign(&payload);
        CosignSignature {
            payload,
            signature: base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes()),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn a_signature_by_a_trusted_key_over_the_digest_passes() {
        let alice = key("alice");
        let policy = VerificationPolicy::new(vec![verifier("alice", &alice)], Threshold::All)
            .expect("policy");
        let ok = policy
            .check(&SUBJECT, &[sign(&alice, DIGEST)])
            .expect("verified");
        assert_eq!(ok, vec!["alice".to_string()]);
    }

    #[test]
    fn unsigned_unknown_key_wrong_digest_and_tampering_are_refused_by_rule() {
        let alice = key("alice");
        let mallory = key("mallory");
        let policy = VerificationPolicy::new(vec![verifier("alice", &alice)], Threshold::All)
            .expect("policy");
        assert_eq!(
            policy.check(&SUBJECT, &[]).expect_err("x").rule,
            rules::UNSIGNED
        );
        let err = policy
            .check(&SUBJECT, &[sign(&mallory, DIGEST)])
            .expect_err("unknown key");
        assert_eq!(err.rule, rules::SIGNATURE);
        assert!(err.message.contains("not signed by this key"), "{err}");
        // Alice signed another manifest: the payload names the wrong digest.
        let err = policy
            .check(&SUBJECT, &[sign(&alice, OTHER)])
            .expect_err("wrong digest");
        assert_eq!(err.rule, rules::SIGNATURE);
        assert!(err.message.contains("not for"), "{err}");
        // A payload changed after signing.
        let mut tampered = sign(&alice, OTHER);
        tampered.payload = simple_signing_payload("reg/repo", DIGEST);
        assert_eq!(
            policy.check(&SUBJECT, &[tampered]).expect_err("x").rule,
            rules::SIGNATURE
        );
        let mut garbage = sign(&alice, DIGEST);
        garbage.signature = "!!".into();
        assert_eq!(
            policy.check(&SUBJECT, &[garbage]).expect_err("x").rule,
            rules::SIGNATURE
        );
    }

    #[test]
    fn a_signature_counts_only_in_the_repository_it_was_made_for() {
        let alice = key("alice");
        let policy = VerificationPolicy::new(vec![verifier("alice", &alice)], Threshold::All)
            .expect("policy");
        let signed_here = sign(&alice, DIGEST);
        let copied = Subject {
            manifest_digest: DIGEST,
            repository: "reg/other",
        };
        let err = policy
            .check(&copied, std::slice::from_ref(&signed_here))
            .expect_err("copied into another repository");
        assert_eq!(err.rule, rules::SIGNATURE);
        assert!(
            err.message
                .contains("for repository reg/repo, not for reg/other"),
            "{err}"
        );
        // A payload naming the repository with a tag still names it.
        let payload = simple_signing_payload("reg/repo:v1", DIGEST);
        let tagged = CosignSignature {
            signature: base64::engine::general_purpose::STANDARD.encode(
                {
                    let sig: Signature = key("alice").sign(&payload);
                    sig
                }
                .to_der()
                .as_bytes(),
            ),
            payload,
            annotations: BTreeMap::new(),
        };
        assert!(policy.check(&SUBJECT, &[tagged]).is_ok());
        // A payload without an identity names no repository.
        let payload =
            serde_json::json!({"critical": {"image": {"docker-manifest-digest": DIGEST}}})
                .to_string()
                .into_bytes();
        let anonymous = CosignSignature {
            signature: base64::engine::general_purpose::STANDARD.encode(
                {
                    let sig: Signature = alice.sign(&payload);
                    sig
                }
                .to_der()
                .as_bytes(),
            ),
            payload,
            annotations: BTreeMap::new(),
        };
        let err = policy
            .check(&SUBJECT, &[anonymous])
            .expect_err("no identity");
        assert!(err.message.contains("names no repository"), "{err}");
    }

    /// Issue 40, hazard 5: a key file rewritten (a mounted Secret updated to
    /// revoke a key) counts from the next verification.
    #[test]
    fn a_key_file_is_read_again_at_each_verification() {
        let (old, new) = (key("old"), key("new"));
        let pem = |key: &SigningKey| {
            key.verifying_key()
                .to_public_key_pem(LineEnding::LF)
                .expect("pem")
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cosign.pub");
        std::fs::write(&path, pem(&old)).expect("write");
        let verifier: Arc<dyn Verifier> =
            Arc::new(PublicKeyVerifier::from_file(&path).expect("a key"));
        let policy = VerificationPolicy::new(vec![verifier], Threshold::All).expect("policy");
        assert!(policy.check(&SUBJECT, &[sign(&old, DIGEST)]).is_ok());
        std::fs::write(&path, pem(&new)).expect("rewrite");
        let err = policy
            .check(&SUBJECT, &[sign(&old, DIGEST)])
            .expect_err("the old key is revoked");
        assert!(err.message.contains("not signed by this key"), "{err}");
        assert!(policy.check(&SUBJECT, &[sign(&new, DIGEST)]).is_ok());
        std::fs::remove_file(&path).expect("remove");
        let err = policy
            .check(&SUBJECT, &[sign(&new, DIGEST)])
            .expect_err("no key file, no trust");
        assert!(err.message.contains("not usable now"), "{err}");
    }

    #[test]
    fn repositories_are_named_as_cosign_names_them() {
        assert_eq!(
            docker_reference("localhost:5000", "plugins/rs"),
            "localhost:5000/plugins/rs"
        );
        assert_eq!(
            docker_reference("docker.io", "team/rs"),
            "index.docker.io/team/rs"
        );
        assert_eq!(
            docker_reference("docker.io", "rs"),
            "index.docker.io/library/rs"
        );
        assert_eq!(
            repository_of("localhost:5000/plugins/rs:v1"),
            "localhost:5000/plugins/rs"
        );
        assert_eq!(
            repository_of("localhost:5000/plugins/rs"),
            "localhost:5000/plugins/rs"
        );
        assert_eq!(repository_of("reg/rs@sha256:1111"), "reg/rs");
    }

    #[test]
    fn all_any_and_at_least_count_distinct_trusted_keys() {
        let (a, b, c) = (key("a"), key("b"), key("c"));
        let keys = || vec![verifier("a", &a), verifier("b", &b), verifier("c", &c)];
        let only_a = [sign(&a, DIGEST)];
        let a_and_b = [sign(&a, DIGEST), sign(&b, DIGEST)];
        let all = VerificationPolicy::new(keys(), Threshold::All).expect("policy");
        assert!(all.check(&SUBJECT, &a_and_b).is_err());
        let every = [sign(&a, DIGEST), sign(&b, DIGEST), sign(&c, DIGEST)];
        assert_eq!(all.check(&SUBJECT, &every).expect("all").len(), 3);
        let any = VerificationPolicy::new(keys(), Threshold::Any).expect("policy");
        assert!(any.check(&SUBJECT, &only_a).is_ok());
        let two = VerificationPolicy::new(keys(), Threshold::AtLeast(2)).expect("policy");
        assert!(two.check(&SUBJECT, &only_a).is_err());
        // The same key signing twice is still one key.
        assert!(
            two.check(&SUBJECT, &[sign(&a, DIGEST), sign(&a, DIGEST)])
                .is_err()
        );
        assert_eq!(two.check(&SUBJECT, &a_and_b).expect("two"), vec!["a", "b"]);
        assert_eq!(
            VerificationPolicy::new(keys(), Threshold::AtLeast(4))
                .expect_err("impossible")
                .rule,
            rules::CONFIG
        );
    }

    #[test]
    fn all_of_and_any_of_together_need_both_groups() {
        let (a, b, c, d) = (key("a"), key("b"), key("c"), key("d"));
        // Every one of a and b, and at least one of c and d.
        let policy =
            VerificationPolicy::new(vec![verifier("a", &a), verifier("b", &b)], Threshold::All)
                .expect("allOf")
                .and(
                    VerificationPolicy::new(
                        vec![verifier("c", &c), verifier("d", &d)],
                        Threshold::AtLeast(1),
                    )
                    .expect("anyOf"),
                );
        let signed = |keys: &[&SigningKey]| -> Vec<CosignSignature> {
            keys.iter().map(|k| sign(k, DIGEST)).collect()
        };
        assert_eq!(
            policy
                .check(&SUBJECT, &signed(&[&a, &b, &d]))
                .expect("both"),
            vec!["a", "b", "d"]
        );
        let err = policy
            .check(&SUBJECT, &signed(&[&a, &b]))
            .expect_err("no anyOf key");
        assert_eq!(err.rule, rules::SIGNATURE);
        assert!(err.message.contains("not satisfied: c"), "{err}");
        let err = policy
            .check(&SUBJECT, &signed(&[&a, &c, &d]))
            .expect_err("b missing");
        assert!(err.message.contains("not satisfied: b"), "{err}");
        assert_eq!(
            policy.check(&SUBJECT, &[]).expect_err("unsigned").rule,
            rules::UNSIGNED
        );
    }

    #[test]
    fn parses_policies_and_keys() {
        assert_eq!("all".parse::<Threshold>(), Ok(Threshold::All));
        assert_eq!("any".parse::<Threshold>(), Ok(Threshold::Any));
        assert_eq!("at-least=2".parse::<Threshold>(), Ok(Threshold::AtLeast(2)));
        assert!("at-least=0".parse::<Threshold>().is_err());
        assert!("most".parse::<Threshold>().is_err());
        let err = PublicKeyVerifier::from_pem(
            "k",
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----",
        )
        .expect_err("not a key");
        assert_eq!(err.rule, rules::CONFIG);
        assert_eq!(
            signature_tag(DIGEST),
            format!("sha256-{}.sig", &DIGEST[7..])
        );
    }
}
