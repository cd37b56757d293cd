//! Local copies of pulled artifacts, kept by digest next to the precompiled
//! cache (`<precompiled dir>/oci` unless `--oci-store-dir` says otherwise),
//! so a host restarted while its registry is down still serves the plugin
//! it last pulled.
//!
//! Layout: `manifests/sha256-<hex>.json` (the manifest as pulled),
//! `blobs/sha256-<hex>` (the `.wasm` layer), `signatures/sha256-<hex>.json`
//! (the cosign signatures it was verified with) and `refs/<hash of the
//! reference>` (the manifest digest a tag last resolved to). Everything is
//! re-checked when read: the manifest and blob must hash to their names,
//! and the caller checks the layout, size and signatures again under the
//! current policy. Files are written to a temporary name and renamed.

use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::reference::OciRef;
use super::signature::CosignSignature;
use super::{OciError, rules, sha256_digest};

/// A stored artifact.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The manifest digest.
    pub manifest_digest: String,
    /// The manifest bytes (hash to `manifest_digest`).
    pub manifest: Vec<u8>,
    /// The signatures stored with it.
    pub signatures: Vec<CosignSignature>,
}

/// The directory of local copies.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

fn file_name(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

impl Store {
    /// The store under `dir` (created `0700` with its subdirectories).
    pub fn open(dir: PathBuf) -> Result<Self, OciError> {
        for sub in ["manifests", "blobs", "signatures", "refs"] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir.join(sub))
                .map_err(|err| {
                    OciError::new(
                        rules::CONFIG,
                        format!(
                            "creating the OCI artifact store {}: {err} (set --oci-store-dir to a \
                             writable directory)",
                            dir.display()
                        ),
                    )
                })?;
        }
        Ok(Self { dir })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ref_path(&self, reference: &OciRef) -> PathBuf {
        let key = sha256_digest(reference.to_string().as_bytes());
        self.dir.join("refs").join(file_name(&key))
    }

    /// Where the blob with `digest` is kept.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        self.dir.join("blobs").join(file_name(digest))
    }

    /// Keeps a verified artifact and remembers that `reference` resolved to it.
    pub fn save(
        &self,
        reference: &OciRef,
        manifest_digest: &str,
        manifest: &[u8],
        layer_digest: &str,
        blob: &[u8],
        signatures: &[CosignSignature],
    ) -> std::io::Result<()> {
        write_atomic(&self.blob_path(layer_digest), blob)?;
        let sigs = serde_json::to_vec(signatures).map_err(std::io::Error::other)?;
        write_atomic(
            &self
                .dir
                .join("signatures")
                .join(format!("{}.json", file_name(manifest_digest))),
            &sigs,
        )?;
        write_atomic(
            &self
                .dir
                .join("manifests")
                .join(format!("{}.json", file_name(manifest_digest))),
            manifest,
        )?;
        write_atomic(&self.ref_path(reference), manifest_digest.as_bytes())
    }

    /// The manifest `reference` last resolved to, if it was stored (the
    /// manifest re-hashed; a file that does not hash to its name is ignored).
    pub fn load(&self, reference: &OciRef) -> Option<Stored> {
        let manifest_digest = match &reference.digest {
            Some(digest) => digest.clone(),
            None => fs::read_to_string(self.ref_path(reference)).ok()?,
        };
        let manifest_digest = manifest_digest.trim().to_string();
        let manifest = fs::read(
            self.dir
                .join("manifests")
                .join(format!("{}.json", file_name(&manifest_digest))),
        )
        .ok()?;
        if sha256_digest(&manifest) != manifest_digest {
            tracing::warn!(digest = %manifest_digest, "a stored OCI manifest does not hash to its name; ignoring it");
            return None;
        }
        let signatures = fs::read(
            self.dir
                .join("signatures")
                .join(format!("{}.json", file_name(&manifest_digest))),
        )
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
        Some(Stored {
            manifest_digest,
            manifest,
            signatures,
        })
    }

    /// The blob `digest` if stored, at most `max_bytes`, and hashing to its name.
    pub fn blob(&self, digest: &str, max_bytes: u64) -> Option<Vec<u8>> {
        let path = self.blob_path(digest);
        if fs::metadata(&path).ok()?.len() > max_bytes {
            return None;
        }
        let bytes = fs::read(path).ok()?;
        (sha256_digest(&bytes) == digest).then_some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_and_rechecks_artifacts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path().join("oci")).expect("opens");
        let reference = OciRef::parse("oci://reg:5000/p:v1").expect("ref");
        let manifest = b"{\"m\":1}".to_vec();
        let blob = b"\0asm plugin".to_vec();
        let (md, bd) = (sha256_digest(&manifest), sha256_digest(&blob));
        assert!(store.load(&reference).is_none());
        store
            .save(&reference, &md, &manifest, &bd, &blob, &[])
            .expect("saves");
        let stored = store.load(&reference).expect("stored");
        assert_eq!(stored.manifest_digest, md);
        assert_eq!(store.blob(&bd, 1024).as_deref(), Some(&blob[..]));
        assert!(store.load(&reference.at_digest(&md)).is_some());
        // Over the cap, or changed on disk: not served.
        assert!(store.blob(&bd, 4).is_none());
        fs::write(store.blob_path(&bd), b"tampered").expect("write");
        assert!(store.blob(&bd, 1024).is_none());
    }
}
