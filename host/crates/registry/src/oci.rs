//! Pulling a Wasm plugin from an OCI registry, checked at every step before
//! a byte of it is trusted:
//!
//! 1. the tag is resolved to a manifest digest (a digest reference is used
//!    as is), and the manifest's bytes must hash to it;
//! 2. the manifest must be a Wasm artifact: the CNCF layout (config
//!    `application/vnd.wasm.config.v0+json`, one `application/wasm` layer)
//!    or any single-layer artifact whose layer is `application/wasm` (what
//!    `oras push plugin.wasm:application/wasm` makes);
//! 3. the layer's declared size must be within `--oci-max-artifact-mib`
//!    before it is requested;
//! 4. with a [`VerificationPolicy`], the cosign signatures (`.sig` tag)
//!    must satisfy it, before the layer is downloaded;
//! 5. the layer is streamed with a running limit (its declared size, which
//!    is within the cap) and hashed as it comes; bytes that do not hash to
//!    the layer's digest are refused;
//! 6. the verified artifact is kept in the [`Store`] by digest.
//!
//! Registry auth comes from a dockerconfigjson document, extra CA
//! certificates from PEM files; plain HTTP only for registries named as
//! insecure. Nothing here compiles anything: the bytes go to the hot-swap
//! path's vetting like a file's.
//!
//! Every request of a pull goes through [`super::http`] (deadlines,
//! caps on every answer, the redirect policy, escaped error bodies); a
//! whole pull ends within `--oci-pull-timeout`. `oci-client` (the ORAS
//! project's) is kept for `wasm-operator push` only: its pulls read
//! manifests, token answers and error bodies whole before any check.
//! `oci-wasm` 0.6 would add little (the media types and config above) and
//! pulls `oci-client` 0.17 beside 0.18 plus `wit-component`/`wit-parser`
//! 0.253, a second copy of the wasm-tools crates next to wasmtime 48's 0.254.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::auth::Credentials;
use super::http::{
    DEFAULT_PULL_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, MAX_MANIFEST_BYTES, Registry, RegistryConfig,
    by_deadline,
};
use super::reference::OciRef;
use super::signature::{
    CosignSignature, MAX_PAYLOAD_BYTES, MAX_SIGNATURES, SIGNATURE_ANNOTATION, Subject,
    VerificationPolicy, docker_reference, signature_tag,
};
use super::store::{self, Store, StoreKey};
use super::{OciError, rules, sha256_digest};

/// Largest artifact pulled unless `--oci-max-artifact-mib` says otherwise.
pub const DEFAULT_MAX_ARTIFACT_BYTES: u64 = 128 * 1024 * 1024;
/// How often a tag is checked for a new digest by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// The CNCF Wasm artifact's config media type.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The Wasm layer media type.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The OCI image manifest media type.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.v2+json";
const OCI_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// What a manifest request accepts.
const MANIFEST_TYPES: [&str; 4] = [
    OCI_MANIFEST_MEDIA_TYPE,
    DOCKER_MANIFEST_MEDIA_TYPE,
    OCI_INDEX_MEDIA_TYPE,
    DOCKER_LIST_MEDIA_TYPE,
];

/// How the puller reaches registries and what it accepts.
#[derive(Debug, Clone)]
pub struct OciOptions {
    /// Largest artifact (layer) accepted, checked before it is read.
    pub max_artifact_bytes: u64,
    /// Registries (`host[:port]`) reached over plain HTTP.
    pub insecure_registries: Vec<String>,
    /// Extra trusted CA certificates (PEM files).
    pub ca_files: Vec<PathBuf>,
    /// A dockerconfigjson document with registry credentials.
    pub docker_config: Option<Vec<u8>>,
    /// Where pulled artifacts are kept by digest (`None`: nowhere).
    pub store_dir: Option<PathBuf>,
    /// The key the store's files are signed with (the precompiled cache's).
    pub store_key: StoreKey,
    /// The store's bound in bytes (`--oci-store-max-mib`).
    pub store_max_bytes: u64,
    /// The signatures an artifact needs (`None`: none checked).
    pub verification: Option<Arc<VerificationPolicy>>,
    /// Hosts (`host[:port]`) a registry may redirect downloads to, besides itself.
    pub blob_hosts: Vec<String>,
    /// Each request's deadline, its answer's body included.
    pub request_timeout: Duration,
    /// A whole pull's deadline (resolving aside): manifest, signatures, blob.
    pub pull_timeout: Duration,
}

impl Default for OciOptions {
    fn default() -> Self {
        Self {
            max_artifact_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
            blob_hosts: Vec::new(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            pull_timeout: DEFAULT_PULL_TIMEOUT,
            insecure_registries: Vec::new(),
            ca_files: Vec::new(),
            docker_config: None,
            store_dir: None,
            store_key: StoreKey::default(),
            store_max_bytes: store::DEFAULT_MAX_BYTES,
            verification: None,
        }
    }
}

/// A pulled (or locally kept) artifact whose digests, size and signatures were checked.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// `oci://REGISTRY/REPO[:TAG]@sha256:<manifest digest>`.
    pub reference: String,
    /// The manifest digest.
    pub manifest_digest: String,
    /// The layer digest: the sha256 of `bytes`.
    pub layer_digest: String,
    /// The `.wasm` bytes.
    pub bytes: Vec<u8>,
    /// The trusted keys whose signatures were verified (empty without a policy).
    pub verified_by: Vec<String>,
    /// Served from the local store (the registry was not asked or not reachable).
    pub from_local_copy: bool,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(rename = "mediaType")]
    media_type: Option<String>,
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    manifests: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize, Clone)]
struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// Pulls and verifies plugins; cheap to clone.
#[derive(Clone)]
pub struct OciPuller {
    inner: Arc<Inner>,
}

struct Inner {
    client: oci_client::Client,
    registry: Registry,
    pull_timeout: Duration,
    credentials: Credentials,
    max_artifact_bytes: u64,
    store: Option<Store>,
    verification: Option<Arc<VerificationPolicy>>,
}

impl std::fmt::Debug for OciPuller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OciPuller")
            .field("max_artifact_bytes", &self.inner.max_artifact_bytes)
            .field("credentials_for", &self.inner.credentials)
            .field("store", &self.inner.store.as_ref().map(Store::dir))
            .field("verification", &self.inner.verification)
            .finish()
    }
}

impl OciPuller {
    /// A puller with `options` (reads the CA files, parses the credentials,
    /// opens the store).
    pub fn new(options: OciOptions) -> Result<Self, OciError> {
        // reqwest is built without a default crypto provider: use ring, as kube does.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = Vec::new();
        let mut ca_pems = Vec::new();
        for path in &options.ca_files {
            let data = std::fs::read(path).map_err(|err| {
                OciError::new(
                    rules::CONFIG,
                    format!("reading the CA file {}: {err}", path.display()),
                )
            })?;
            if !String::from_utf8_lossy(&data).contains("-----BEGIN CERTIFICATE-----") {
                return Err(OciError::new(
                    rules::CONFIG,
                    format!(
                        "the CA file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                        path.display()
                    ),
                ));
            }
            ca_pems.push(data.clone());
            roots.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data,
            });
        }
        let config = ClientConfig {
            protocol: if options.insecure_registries.is_empty() {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(options.insecure_registries.clone())
            },
            extra_root_certificates: roots,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            user_agent: concat!("wasm-operator/", env!("CARGO_PKG_VERSION")),
            ..ClientConfig::default()
        };
        let client = oci_client::Client::try_from(config).map_err(|err| {
            OciError::new(
                rules::CONFIG,
                format!("setting up the registry client: {err}"),
            )
        })?;
        let credentials = match &options.docker_config {
            Some(json) => Credentials::parse(json)?,
            None => Credentials::default(),
        };
        let registry = Registry::new(
            RegistryConfig {
                insecure: options.insecure_registries.clone(),
                blob_hosts: options.blob_hosts.clone(),
                roots: ca_pems,
                request_timeout: options.request_timeout,
            },
            credentials.clone(),
        )?;
        let store = options.store_dir.clone().and_then(|dir| {
            Store::open(dir.clone(), &options.store_key, options.store_max_bytes)
                .map_err(|why| {
                    tracing::warn!(
                        dir = %dir.display(),
                        reason = %why,
                        "not using the OCI store: pulled artifacts are not kept, a restart needs the registry"
                    );
                })
                .ok()
        });
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                registry,
                pull_timeout: options.pull_timeout,
                credentials,
                max_artifact_bytes: options.max_artifact_bytes,
                store,
                verification: options.verification,
            }),
        })
    }

    /// The underlying client and the credentials for `reference`'s registry (for `push`).
    pub(crate) fn client_and_auth(
        &self,
        reference: &OciRef,
    ) -> (&oci_client::Client, RegistryAuth) {
        (
            &self.inner.client,
            self.inner.credentials.for_registry(&reference.registry),
        )
    }

    /// The store of local copies, if any.
    pub fn store(&self) -> Option<&Store> {
        self.inner.store.as_ref()
    }

    /// The manifest digest `reference` names now (a digest reference
    /// names itself), within one request deadline.
    pub async fn resolve(&self, reference: &OciRef) -> Result<String, OciError> {
        if let Some(digest) = &reference.digest {
            return Ok(digest.clone());
        }
        let tag = reference.tag.as_deref().unwrap_or("latest");
        let digest = self
            .inner
            .registry
            .manifest_digest(
                reference,
                &format!("manifests/{tag}"),
                &MANIFEST_TYPES,
                &format!("resolving {reference}"),
            )
            .await?;
        if !digest.starts_with("sha256:") {
            return Err(OciError::new(
                rules::LAYOUT,
                format!("{reference} resolved to {digest}: only sha256 digests are accepted"),
            ));
        }
        Ok(digest)
    }

    /// Pulls `reference` (resolving a tag), checking layout, size,
    /// signatures and digests, and keeps it in the store.
    pub async fn pull(&self, reference: &OciRef) -> Result<Pulled, OciError> {
        let manifest_digest = self.resolve(reference).await?;
        self.pull_digest(reference, &manifest_digest).await
    }

    /// [`OciPuller::pull`] of the manifest `manifest_digest` that
    /// `reference` resolved to, within `--oci-pull-timeout`.
    pub async fn pull_digest(
        &self,
        reference: &OciRef,
        manifest_digest: &str,
    ) -> Result<Pulled, OciError> {
        let budget = self.inner.pull_timeout;
        let deadline = tokio::time::Instant::now() + budget;
        let label = OciRef {
            digest: Some(manifest_digest.to_string()),
            ..reference.clone()
        }
        .to_string();
        let what = format!("pulling {label}");
        by_deadline(
            deadline,
            budget,
            &what,
            self.pull_by(reference, manifest_digest, &label, deadline),
        )
        .await
    }

    async fn pull_by(
        &self,
        reference: &OciRef,
        manifest_digest: &str,
        label: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Pulled, OciError> {
        let manifest_bytes = self
            .inner
            .registry
            .get_bytes(
                reference,
                &format!("manifests/{manifest_digest}"),
                &MANIFEST_TYPES,
                MAX_MANIFEST_BYTES,
                &format!("pulling the manifest of {label}"),
                Some(deadline),
            )
            .await?;
        let actual = sha256_digest(&manifest_bytes);
        if actual != manifest_digest {
            return Err(OciError::new(
                rules::DIGEST_MISMATCH,
                format!("the registry sent a manifest for {label} that hashes to {actual}"),
            ));
        }
        let layer = self.wasm_layer(label, &manifest_bytes)?;
        let (signatures, verified_by) = match &self.inner.verification {
            Some(policy) => {
                let signatures = self
                    .signatures(reference, manifest_digest, deadline)
                    .await?;
                let repository = docker_reference(&reference.registry, &reference.repository);
                let subject = Subject {
                    manifest_digest,
                    repository: &repository,
                };
                let verified_by = policy
                    .check(&subject, &signatures)
                    .map_err(|err| OciError::new(err.rule, format!("{label}: {}", err.message)))?;
                (signatures, verified_by)
            }
            None => (Vec::new(), Vec::new()),
        };
        let bytes = self.layer_bytes(reference, label, &layer, deadline).await?;
        if let Some(store) = &self.inner.store
            && let Err(err) = store.save(
                reference,
                manifest_digest,
                &manifest_bytes,
                &layer.digest,
                &bytes,
                &signatures,
            )
        {
            tracing::warn!(store = %store.dir().display(), error = %err, "could not keep a local copy of the OCI artifact");
        }
        Ok(Pulled {
            reference: label.to_string(),
            manifest_digest: manifest_digest.to_string(),
            layer_digest: layer.digest,
            bytes,
            verified_by,
            from_local_copy: false,
        })
    }

    /// The one Wasm layer of a manifest, its declared size within the cap.
    fn wasm_layer(&self, label: &str, manifest_bytes: &[u8]) -> Result<Descriptor, OciError> {
        let manifest: Manifest = serde_json::from_slice(manifest_bytes).map_err(|err| {
            OciError::new(
                rules::LAYOUT,
                format!("the manifest of {label} is not an OCI image manifest: {err}"),
            )
        })?;
        let media_type = manifest
            .media_type
            .as_deref()
            .unwrap_or(OCI_MANIFEST_MEDIA_TYPE);
        if manifest.manifests.is_some()
            || media_type == OCI_INDEX_MEDIA_TYPE
            || media_type == DOCKER_LIST_MEDIA_TYPE
        {
            return Err(OciError::new(
                rules::LAYOUT,
                format!(
                    "{label} is an image index, not a Wasm artifact; push the .wasm as one \
                     application/wasm layer (`wasm-operator push` or `oras push … plugin.wasm:application/wasm`)"
                ),
            ));
        }
        let wasm: Vec<&Descriptor> = manifest
            .layers
            .iter()
            .filter(|l| l.media_type == WASM_LAYER_MEDIA_TYPE)
            .collect();
        let config_type = manifest.config.as_ref().map(|c| c.media_type.as_str());
        let [layer] = wasm.as_slice() else {
            return Err(OciError::new(
                rules::LAYOUT,
                format!(
                    "{label} is not a Wasm artifact: it needs exactly one {WASM_LAYER_MEDIA_TYPE} \
                     layer, it has {} (layers: {}; config {})",
                    wasm.len(),
                    manifest
                        .layers
                        .iter()
                        .map(|l| l.media_type.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    config_type.unwrap_or("none")
                ),
            ));
        };
        if manifest.layers.len() != 1 && config_type != Some(WASM_CONFIG_MEDIA_TYPE) {
            return Err(OciError::new(
                rules::LAYOUT,
                format!(
                    "{label} has {} layers: a plain Wasm artifact has one application/wasm layer",
                    manifest.layers.len()
                ),
            ));
        }
        let valid_digest = layer
            .digest
            .strip_prefix("sha256:")
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        if !valid_digest {
            return Err(OciError::new(
                rules::LAYOUT,
                format!(
                    "{label}: the layer digest {:?} is not sha256:<hex>",
                    layer.digest
                ),
            ));
        }
        let size = u64::try_from(layer.size).unwrap_or(0);
        if size == 0 {
            return Err(OciError::new(
                rules::LAYOUT,
                format!("{label}: the Wasm layer declares size {}", layer.size),
            ));
        }
        if size > self.inner.max_artifact_bytes {
            return Err(too_large(label, size, self.inner.max_artifact_bytes));
        }
        Ok((*layer).clone())
    }

    /// The cosign signatures of `manifest_digest` (`.sig` tag); none when
    /// the tag is absent. The signature manifest is capped like any
    /// manifest, each payload at [`MAX_PAYLOAD_BYTES`].
    async fn signatures(
        &self,
        reference: &OciRef,
        manifest_digest: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<CosignSignature>, OciError> {
        let sig_ref = reference.at_tag(&signature_tag(manifest_digest));
        let tag = signature_tag(manifest_digest);
        let bytes = match self
            .inner
            .registry
            .get_bytes(
                reference,
                &format!("manifests/{tag}"),
                &[OCI_MANIFEST_MEDIA_TYPE, DOCKER_MANIFEST_MEDIA_TYPE],
                MAX_MANIFEST_BYTES,
                &format!("reading the signatures {sig_ref}"),
                Some(deadline),
            )
            .await
        {
            Ok(bytes) => bytes,
            Err(err) if err.rule == rules::NOT_FOUND => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|err| {
            OciError::new(
                rules::SIGNATURE,
                format!("the signature manifest {sig_ref} is not a manifest: {err}"),
            )
        })?;
        let mut out = Vec::new();
        for layer in manifest
            .layers
            .iter()
            .filter(|l| l.annotations.contains_key(SIGNATURE_ANNOTATION))
            .take(MAX_SIGNATURES)
        {
            if layer.size <= 0 || layer.size > MAX_PAYLOAD_BYTES {
                continue;
            }
            let payload = self
                .layer_bytes(&sig_ref, &sig_ref.to_string(), layer, deadline)
                .await?;
            out.push(CosignSignature {
                payload,
                signature: layer
                    .annotations
                    .get(SIGNATURE_ANNOTATION)
                    .cloned()
                    .unwrap_or_default(),
                annotations: layer.annotations.clone(),
            });
        }
        Ok(out)
    }

    /// Streams `layer` by the pull's `deadline`, never holding more than
    /// its declared size, and checks its digest.
    async fn layer_bytes(
        &self,
        reference: &OciRef,
        label: &str,
        layer: &Descriptor,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<u8>, OciError> {
        let limit = u64::try_from(layer.size).unwrap_or(0);
        let mut bytes = Vec::with_capacity(usize::try_from(limit).unwrap_or(0));
        let mut hasher = Sha256::new();
        let read = self
            .inner
            .registry
            .get_stream(
                reference,
                &format!("blobs/{}", layer.digest),
                limit,
                &format!("{label}: reading {}", layer.digest),
                (deadline, self.inner.pull_timeout),
                |chunk| {
                    hasher.update(chunk);
                    bytes.extend_from_slice(chunk);
                },
            )
            .await;
        match read {
            Ok(_) => {}
            Err(err) if err.rule == rules::ANSWER_TOO_LARGE => {
                return Err(OciError::new(
                    rules::DIGEST_MISMATCH,
                    format!(
                        "{label}: the registry sends more than the {limit} bytes the manifest \
                         declares for {}; stopped reading",
                        layer.digest
                    ),
                ));
            }
            Err(err) => return Err(err),
        }
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != layer.digest {
            return Err(OciError::new(
                rules::DIGEST_MISMATCH,
                format!(
                    "{label}: the layer's bytes hash to {actual}, not to {} as the manifest says",
                    layer.digest
                ),
            ));
        }
        Ok(bytes)
    }

    /// The copy of `reference` kept in the store (the last digest a tag
    /// resolved to), re-checked: digests, layout, size and, with a policy,
    /// the stored signatures. `Ok(None)`: nothing kept.
    pub fn local_copy(&self, reference: &OciRef) -> Result<Option<Pulled>, OciError> {
        let Some(store) = &self.inner.store else {
            return Ok(None);
        };
        let Some(stored) = store.load(reference) else {
            return Ok(None);
        };
        let label = format!("{reference} (local copy {})", stored.manifest_digest);
        let layer = self.wasm_layer(&label, &stored.manifest)?;
        let verified_by = match &self.inner.verification {
            Some(policy) => policy
                .check(
                    &Subject {
                        manifest_digest: &stored.manifest_digest,
                        repository: &docker_reference(&reference.registry, &reference.repository),
                    },
                    &stored.signatures,
                )
                .map_err(|err| OciError::new(err.rule, format!("{label}: {}", err.message)))?,
            None => Vec::new(),
        };
        let Some(bytes) = store.blob(&layer.digest, self.inner.max_artifact_bytes) else {
            return Ok(None);
        };
        Ok(Some(Pulled {
            reference: format!("{reference}@{}", stored.manifest_digest),
            manifest_digest: stored.manifest_digest,
            layer_digest: layer.digest,
            bytes,
            verified_by,
            from_local_copy: true,
        }))
    }
}

fn too_large(label: &str, size: u64, cap: u64) -> OciError {
    OciError::new(
        rules::TOO_LARGE,
        format!(
            "{label}: the Wasm layer is {size} bytes, more than the {cap}-byte cap \
             (--oci-max-artifact-mib {}); nothing was read",
            cap / (1024 * 1024)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn puller(cap: u64) -> OciPuller {
        OciPuller::new(OciOptions {
            max_artifact_bytes: cap,
            ..OciOptions::default()
        })
        .expect("puller")
    }

    fn manifest(config: &str, layers: &[(&str, i64)]) -> Vec<u8> {
        let digest = format!("sha256:{}", "a".repeat(64));
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": config, "digest": digest, "size": 2},
            "layers": layers.iter().map(|(t, s)| serde_json::json!({"mediaType": t, "digest": digest, "size": s})).collect::<Vec<_>>(),
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn accepts_the_cncf_layout_and_a_plain_wasm_layer() {
        let p = puller(1024);
        for config in [WASM_CONFIG_MEDIA_TYPE, "application/vnd.oci.empty.v1+json"] {
            let layer = p
                .wasm_layer("x", &manifest(config, &[(WASM_LAYER_MEDIA_TYPE, 10)]))
                .expect("accepted");
            assert_eq!(layer.size, 10);
        }
    }

    #[test]
    fn refuses_other_layouts_and_sizes_over_the_cap_before_reading() {
        let p = puller(1024);
        let cases = [
            (manifest(WASM_CONFIG_MEDIA_TYPE, &[]), rules::LAYOUT),
            (
                manifest(
                    "application/vnd.oci.image.config.v1+json",
                    &[("application/vnd.oci.image.layer.v1.tar+gzip", 10)],
                ),
                rules::LAYOUT,
            ),
            (
                manifest(
                    WASM_CONFIG_MEDIA_TYPE,
                    &[(WASM_LAYER_MEDIA_TYPE, 10), (WASM_LAYER_MEDIA_TYPE, 10)],
                ),
                rules::LAYOUT,
            ),
            (
                manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, 0)]),
                rules::LAYOUT,
            ),
            (
                manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, 1025)]),
                rules::TOO_LARGE,
            ),
            (
                br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#.to_vec(),
                rules::LAYOUT,
            ),
            (b"nope".to_vec(), rules::LAYOUT),
        ];
        for (bytes, rule) in cases {
            let err = p.wasm_layer("x", &bytes).expect_err("refused");
            assert_eq!(err.rule, rule, "{err}");
        }
    }

    #[test]
    fn a_missing_ca_file_or_bad_credentials_are_config_errors() {
        let err = OciPuller::new(OciOptions {
            ca_files: vec!["/nonexistent/ca.pem".into()],
            ..OciOptions::default()
        })
        .expect_err("refused");
        assert_eq!(err.rule, rules::CONFIG);
        let err = OciPuller::new(OciOptions {
            docker_config: Some(b"{".to_vec()),
            ..OciOptions::default()
        })
        .expect_err("refused");
        assert_eq!(err.rule, rules::CONFIG);
    }
}
