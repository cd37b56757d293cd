//! Local copies of pulled artifacts, kept by digest next to the precompiled
//! cache (`<precompiled dir>/oci` unless `--oci-store-dir` says otherwise),
//! so a host restarted while its registry is down still serves the plugin
//! it last pulled.
//!
//! Layout: `manifests/sha256-<hex>.json` (the manifest as pulled),
//! `blobs/sha256-<hex>` (the `.wasm` layer), `signatures/sha256-<hex>.json`
//! (the cosign signatures it was verified with) and `refs/<hash of the
//! reference>` (the manifest digest a tag last resolved to: the last known
//! good of that reference).
//!
//! Trusted like the precompiled cache, with its checks
//! ([`crate::disk::private`]): the directory and its subdirectories are
//! private to the host's user and not symlinks (tightened to `0700`, or the
//! store is not used, with a warning); every file is opened without
//! following symlinks, must be a regular file of the host's user nobody
//! else can write, and carries an HMAC-SHA256 over its path in the store
//! and its content under the precompiled cache's key
//! (`--precompiled-cache-key-file`, else the cache directory's `.key`; a
//! store without a cache keeps its own `.key`). A file failing any check is treated as absent and
//! removed, with a warning naming it. On top of that the manifest and blob
//! must hash to their names, and the caller checks the layout, size and
//! signatures again under the current policy. Files are written to a
//! temporary name and renamed.
//!
//! Bounded: after each save, whole artifacts (manifest, signatures, blob)
//! least recently used first (the files' mtime, set on every load) are
//! removed until the store holds at most `--oci-store-max-mib`
//! ([`DEFAULT_MAX_BYTES`]), and with them the refs that resolved to them.
//! Never removed ([`crate::disk::pins`]): an artifact whose plugin a
//! hot-swap slot serves, had before (rollback target), shadows or rolls out
//! as a canary; one being vetted (staged); and the last known good of each
//! reference a live source still follows. The last known good of a
//! reference nobody follows any more (a resource moved to another tag) is
//! evictable like anything else.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::http::MAX_MANIFEST_BYTES;
use super::reference::OciRef;
use super::sha256_digest;
use super::signature::CosignSignature;
use crate::disk::private::{self, Key};
use crate::disk::{pins, prune};

/// Default bound of the store (`--oci-store-max-mib`): with the precompiled
/// cache's (128 MiB) well under the shipped `emptyDir`'s 256 MiB; three
/// 20 MB Python components (serving, previous, shadow) fit.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// First bytes of every store file, then the HMAC, then the content.
const FILE_MAGIC: &[u8] = b"wasm-operator oci store v1\n";
/// Largest stored signature list read back.
const MAX_SIGNATURES_FILE_BYTES: u64 = 4 << 20;
/// Largest ref file read back (a digest).
const MAX_REF_BYTES: u64 = 256;
/// Bytes of a store file before its content (the magic and the MAC).
const OVERHEAD: u64 = FILE_MAGIC.len() as u64 + 32;
const SUBDIRS: [&str; 4] = ["manifests", "blobs", "signatures", "refs"];

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

/// Where the store's key comes from: the precompiled cache's.
#[derive(Debug, Clone, Default)]
pub struct StoreKey {
    /// `--precompiled-cache-key-file`.
    pub file: Option<PathBuf>,
    /// The precompiled cache directory whose `.key` is used (`None`: one in
    /// the store's own directory).
    pub dir: Option<PathBuf>,
}

/// The directory of local copies.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    key: Key,
    max_bytes: u64,
}

fn file_name(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

/// Whether `digest` is `sha256:<64 hex>` (it becomes part of a path).
fn is_digest(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl Store {
    /// The store under `dir` (private, with its subdirectories), keyed as
    /// `key` says and bounded by `max_bytes`. `Err` says why it cannot be
    /// trusted or made (the caller runs without a store).
    pub fn open(dir: PathBuf, key: &StoreKey, max_bytes: u64) -> Result<Self, String> {
        private::private_dir(&dir, "OCI store")?;
        for sub in SUBDIRS {
            private::private_dir(&dir.join(sub), "OCI store")?;
        }
        let key_dir = match &key.dir {
            Some(cache) if cache != &dir => {
                private::private_dir(cache, "precompiled cache")?;
                cache.clone()
            }
            _ => dir.clone(),
        };
        let key = private::key(&key_dir, key.file.as_deref())?;
        Ok(Self {
            dir,
            key,
            max_bytes,
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `rel` (`<subdir>/<file>`), which is also the name its MAC is over.
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn ref_rel(reference: &OciRef) -> String {
        Self::ref_rel_of(&reference.to_string())
    }

    /// The ref file of the reference printed as `reference`.
    fn ref_rel_of(reference: &str) -> String {
        let key = sha256_digest(reference.as_bytes());
        format!("refs/{}", file_name(&key))
    }

    fn manifest_rel(digest: &str) -> String {
        format!("manifests/{}.json", file_name(digest))
    }

    fn signatures_rel(digest: &str) -> String {
        format!("signatures/{}.json", file_name(digest))
    }

    fn blob_rel(digest: &str) -> String {
        format!("blobs/{}", file_name(digest))
    }

    /// Where the blob with `digest` is kept.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        self.path(&Self::blob_rel(digest))
    }

    fn write(&self, rel: &str, content: &[u8]) -> std::io::Result<()> {
        private::write_keyed(&self.path(rel), rel, FILE_MAGIC, content, &self.key)
    }

    /// The content of `rel` if it is there and passes every check; a file
    /// that fails one is removed (with a warning naming it) and is absent
    /// (one that cannot be read now is absent and kept).
    fn read(&self, rel: &str, max_bytes: u64) -> Option<Vec<u8>> {
        let path = self.path(rel);
        let meta = fs::symlink_metadata(&path).ok()?;
        if meta.is_file() && meta.len() > max_bytes.saturating_add(OVERHEAD) {
            // Over the caller's cap (which may have been lowered): not
            // served, but not proven untrusted either.
            return None;
        }
        match private::read_keyed(&path, rel, FILE_MAGIC, &self.key, max_bytes) {
            Ok(content) => Some(content),
            Err(private::ReadError::Untrusted(why)) => {
                self.discard(rel, &why);
                None
            }
            Err(private::ReadError::Unreadable(why)) => {
                // Not proven bad (a descriptor limit, an I/O error): absent
                // this time, kept.
                tracing::warn!(file = %path.display(), reason = %why, "cannot read a file of the OCI store; treated as absent");
                None
            }
        }
    }

    /// Removes `rel`, which failed a check, saying why.
    fn discard(&self, rel: &str, why: &str) {
        tracing::warn!(
            file = %self.path(rel).display(),
            reason = %why,
            "untrusted or corrupt file in the OCI store; treated as absent and removed"
        );
        if let Err(err) = fs::remove_file(self.path(rel))
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(file = %self.path(rel).display(), error = %err, "could not remove it");
        }
    }

    /// Keeps a verified artifact, remembers that `reference` resolved to it,
    /// then brings the store back under its bound.
    pub fn save(
        &self,
        reference: &OciRef,
        manifest_digest: &str,
        manifest: &[u8],
        layer_digest: &str,
        blob: &[u8],
        signatures: &[CosignSignature],
    ) -> std::io::Result<()> {
        if !is_digest(manifest_digest) || !is_digest(layer_digest) {
            return Err(std::io::Error::other("not sha256 digests"));
        }
        self.write(&Self::blob_rel(layer_digest), blob)?;
        let sigs = serde_json::to_vec(signatures).map_err(std::io::Error::other)?;
        self.write(&Self::signatures_rel(manifest_digest), &sigs)?;
        self.write(&Self::manifest_rel(manifest_digest), manifest)?;
        self.write(&Self::ref_rel(reference), manifest_digest.as_bytes())?;
        self.prune(&pins::pinned(), &pins::followed());
        Ok(())
    }

    /// The manifest `reference` last resolved to, if it was stored and
    /// passes every check (the manifest re-hashed too).
    pub fn load(&self, reference: &OciRef) -> Option<Stored> {
        let manifest_digest = match &reference.digest {
            Some(digest) => digest.clone(),
            None => {
                let rel = Self::ref_rel(reference);
                let text = String::from_utf8(self.read(&rel, MAX_REF_BYTES)?).ok()?;
                text.trim().to_string()
            }
        };
        if !is_digest(&manifest_digest) {
            return None;
        }
        let rel = Self::manifest_rel(&manifest_digest);
        let manifest = self.read(&rel, MAX_MANIFEST_BYTES)?;
        if sha256_digest(&manifest) != manifest_digest {
            self.discard(&rel, "it does not hash to its name");
            return None;
        }
        private::touch(&self.path(&rel));
        let sig_rel = Self::signatures_rel(&manifest_digest);
        let signatures = self
            .read(&sig_rel, MAX_SIGNATURES_FILE_BYTES)
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        private::touch(&self.path(&sig_rel));
        Some(Stored {
            manifest_digest,
            manifest,
            signatures,
        })
    }

    /// The blob `digest` if stored, at most `max_bytes`, passing every
    /// check and hashing to its name.
    pub fn blob(&self, digest: &str, max_bytes: u64) -> Option<Vec<u8>> {
        if !is_digest(digest) {
            return None;
        }
        let rel = Self::blob_rel(digest);
        let bytes = self.read(&rel, max_bytes)?;
        if sha256_digest(&bytes) != digest {
            self.discard(&rel, "it does not hash to its name");
            return None;
        }
        private::touch(&self.path(&rel));
        Some(bytes)
    }
}

/// One artifact of the store, as the pruner sees it.
struct Unit {
    /// Its manifest digest (empty for an orphan file).
    manifest_digest: String,
    /// Its files (`<subdir>/<file>`), the manifest first: removed in this
    /// order, so a crash midway leaves no manifest without its blob.
    files: Vec<String>,
    /// Its blobs (kept while another kept unit names them).
    blobs: Vec<String>,
    entry: prune::Entry,
}

impl Store {
    /// Size and mtime of `rel`, if it is there.
    fn stat(&self, rel: &str) -> Option<(u64, SystemTime)> {
        let meta = fs::symlink_metadata(self.path(rel)).ok()?;
        Some((
            meta.len(),
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        ))
    }

    /// The names of the files in `sub` (temporary files aside).
    fn list(&self, sub: &str) -> Vec<String> {
        fs::read_dir(self.dir.join(sub))
            .map(|listing| {
                listing
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| !name.starts_with('.'))
                    .map(|name| format!("{sub}/{name}"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every ref (`refs/<file>`) and the manifest digest it resolves to;
    /// refs that fail a check, or whose manifest is gone, are removed.
    fn refs(&self) -> Vec<(String, String)> {
        let mut refs = Vec::new();
        for rel in self.list("refs") {
            let Some(text) = self.read(&rel, MAX_REF_BYTES) else {
                continue;
            };
            let digest = String::from_utf8_lossy(&text).trim().to_string();
            if is_digest(&digest) && self.stat(&Self::manifest_rel(&digest)).is_some() {
                refs.push((rel, digest));
            } else {
                let _ = fs::remove_file(self.path(&rel));
            }
        }
        refs
    }

    /// The store's artifacts (one per manifest) and its orphan files (a
    /// blob or signatures no manifest names: an interrupted save), each a
    /// unit; pinned when its manifest is in `kept_manifests` or its layer
    /// in `pinned`.
    fn units(&self, pinned: &BTreeSet<String>, kept_manifests: &BTreeSet<String>) -> Vec<Unit> {
        let mut orphans: BTreeSet<String> = self
            .list("blobs")
            .into_iter()
            .chain(self.list("signatures"))
            .collect();
        let mut units = Vec::new();
        for rel in self.list("manifests") {
            let Some(manifest) = self.read(&rel, MAX_MANIFEST_BYTES) else {
                continue;
            };
            let digest = rel
                .trim_start_matches("manifests/")
                .trim_end_matches(".json")
                .replacen('-', ":", 1);
            let layers = layer_digests(&manifest);
            let blobs: Vec<String> = layers.iter().map(|l| Self::blob_rel(l)).collect();
            let files: Vec<String> = std::iter::once(rel.clone())
                .chain(std::iter::once(Self::signatures_rel(&digest)))
                .chain(blobs.iter().cloned())
                .collect();
            let is_pinned = is_kept(&digest, &layers, pinned, kept_manifests);
            units.push(self.unit(digest, files, blobs, is_pinned, &mut orphans));
        }
        for rel in std::mem::take(&mut orphans) {
            let blobs = if rel.starts_with("blobs/") {
                vec![rel.clone()]
            } else {
                Vec::new()
            };
            units.push(self.unit(String::new(), vec![rel], blobs, false, &mut BTreeSet::new()));
        }
        units
    }

    fn unit(
        &self,
        manifest_digest: String,
        files: Vec<String>,
        blobs: Vec<String>,
        pinned: bool,
        orphans: &mut BTreeSet<String>,
    ) -> Unit {
        let (mut bytes, mut last_used) = (0, SystemTime::UNIX_EPOCH);
        for file in &files {
            orphans.remove(file);
            if let Some((size, modified)) = self.stat(file) {
                bytes += size;
                last_used = last_used.max(modified);
            }
        }
        Unit {
            manifest_digest,
            files,
            blobs,
            entry: prune::Entry {
                bytes,
                last_used,
                pinned,
            },
        }
    }

    /// Removes the least recently used artifacts until the store holds at
    /// most its bound, keeping those whose layer is in `pinned` (plugins a
    /// slot holds, candidates being vetted) and the last known good of each
    /// reference in `followed`; a ref whose artifact goes goes with it.
    pub fn prune(&self, pinned: &BTreeSet<String>, followed: &BTreeSet<String>) {
        let refs = self.refs();
        let kept_manifests = last_known_good(&refs, followed, Self::ref_rel_of);
        let units = self.units(pinned, &kept_manifests);
        let entries: Vec<prune::Entry> = units.iter().map(|u| u.entry.clone()).collect();
        let evicted: BTreeSet<usize> = prune::choose(&entries, self.max_bytes)
            .into_iter()
            .collect();
        let kept_blobs: BTreeSet<&String> = units
            .iter()
            .enumerate()
            .filter(|(i, _)| !evicted.contains(i))
            .flat_map(|(_, u)| &u.blobs)
            .collect();
        let mut gone = BTreeSet::new();
        for &i in &evicted {
            let unit = &units[i];
            self.remove_files(unit.files.iter().filter(|f| !kept_blobs.contains(f)));
            gone.insert(unit.manifest_digest.as_str());
            tracing::info!(
                artifact = %unit.files.first().map(String::as_str).unwrap_or_default(),
                bytes = unit.entry.bytes,
                bound = self.max_bytes,
                "evicted an artifact from the OCI store (least recently used, not pinned; over --oci-store-max-mib)"
            );
        }
        // A ref resolving to an evicted artifact names nothing any more.
        self.remove_files(
            refs.iter()
                .filter(|(_, digest)| gone.contains(digest.as_str()))
                .map(|(rel, _)| rel),
        );
    }

    fn remove_files<'a>(&self, files: impl Iterator<Item = &'a String>) {
        for file in files {
            if let Err(err) = fs::remove_file(self.path(file))
                && err.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(file = %self.path(file).display(), error = %err, "could not evict it from the OCI store");
            }
        }
    }
}

/// The manifest digests the store keeps as last known good: what the refs
/// of the `followed` references (as printed; `rel_of` names their ref
/// files) resolve to. The refs of references nobody follows keep nothing.
fn last_known_good(
    refs: &[(String, String)],
    followed: &BTreeSet<String>,
    rel_of: impl Fn(&str) -> String,
) -> BTreeSet<String> {
    let followed_rels: BTreeSet<String> = followed.iter().map(|r| rel_of(r)).collect();
    refs.iter()
        .filter(|(rel, _)| followed_rels.contains(rel))
        .map(|(_, digest)| digest.clone())
        .collect()
}

/// Whether the artifact `manifest_digest` (with `layers`) is never evicted:
/// its plugin is pinned (`pinned` layer digests), or it is the last known
/// good of a followed reference (`kept_manifests`).
fn is_kept(
    manifest_digest: &str,
    layers: &[String],
    pinned: &BTreeSet<String>,
    kept_manifests: &BTreeSet<String>,
) -> bool {
    kept_manifests.contains(manifest_digest) || layers.iter().any(|l| pinned.contains(l))
}

/// The layer digests a stored manifest names (unparsable: none).
fn layer_digests(manifest: &[u8]) -> Vec<String> {
    serde_json::from_slice::<serde_json::Value>(manifest)
        .ok()
        .and_then(|m| {
            m.get("layers")?.as_array().map(|layers| {
                layers
                    .iter()
                    .filter_map(|l| l.get("digest")?.as_str().map(str::to_string))
                    .filter(|d| is_digest(d))
                    .collect()
            })
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    /// A manifest naming a blob of `size` bytes made from `seed`, and the blob.
    fn artifact(seed: u8, size: usize) -> (Vec<u8>, Vec<u8>, String, String) {
        let mut blob = b"\0asm".to_vec();
        blob.resize(size, seed);
        let bd = sha256_digest(&blob);
        let manifest = serde_json::json!({"layers": [{"digest": bd, "size": size}]})
            .to_string()
            .into_bytes();
        let md = sha256_digest(&manifest);
        (manifest, blob, md, bd)
    }

    fn open(dir: &Path, max_bytes: u64) -> Store {
        Store::open(dir.join("oci"), &StoreKey::default(), max_bytes).expect("opens")
    }

    fn reference(tag: &str) -> OciRef {
        OciRef::parse(&format!("oci://reg:5000/p:{tag}")).expect("ref")
    }

    /// A store holding `p:v1`, and its digests.
    fn with_v1(dir: &Path) -> (Store, String, String) {
        let store = open(dir, DEFAULT_MAX_BYTES);
        let (manifest, blob, md, bd) = artifact(1, 64);
        store
            .save(&reference("v1"), &md, &manifest, &bd, &blob, &[])
            .expect("saves");
        (store, md, bd)
    }

    #[test]
    fn keeps_and_rechecks_artifacts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path(), DEFAULT_MAX_BYTES);
        assert!(store.load(&reference("v1")).is_none());
        let (manifest, blob, md, bd) = artifact(1, 64);
        store
            .save(&reference("v1"), &md, &manifest, &bd, &blob, &[])
            .expect("saves");
        let stored = store.load(&reference("v1")).expect("stored");
        assert_eq!(stored.manifest_digest, md);
        assert_eq!(store.blob(&bd, 1024).as_deref(), Some(&blob[..]));
        assert!(store.load(&reference("v1").at_digest(&md)).is_some());
        // Over the cap: not served, but kept.
        assert!(store.blob(&bd, 4).is_none());
        assert!(store.blob(&bd, 1024).is_some());
        for sub in SUBDIRS {
            let mode = fs::metadata(store.dir().join(sub)).expect("meta").mode();
            assert_eq!(mode & 0o777, 0o700, "{sub} is private");
        }
    }

    /// Issue 40: the store was served without the precompiled cache's
    /// protections. A planted artifact (the old plain layout: right names,
    /// right hashes, no MAC) under a reference is absent, and removed.
    #[test]
    fn a_planted_artifact_is_not_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path(), DEFAULT_MAX_BYTES);
        let (manifest, blob, md, bd) = artifact(9, 64);
        let plant = |rel: &str, bytes: &[u8]| {
            let path = store.path(rel);
            fs::write(&path, bytes).expect("plant");
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        };
        plant(&Store::blob_rel(&bd), &blob);
        plant(&Store::manifest_rel(&md), &manifest);
        plant(&Store::ref_rel(&reference("v1")), md.as_bytes());
        assert!(store.load(&reference("v1")).is_none());
        assert!(store.load(&reference("v1").at_digest(&md)).is_none());
        assert!(store.blob(&bd, 1024).is_none());
        for rel in [
            Store::blob_rel(&bd),
            Store::manifest_rel(&md),
            Store::ref_rel(&reference("v1")),
        ] {
            assert!(!store.path(&rel).exists(), "{rel} removed");
        }
    }

    #[test]
    fn a_file_with_a_bad_mac_is_not_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, md, bd) = with_v1(dir.path());
        // Another host's store (another key), same names and contents.
        let other = Store::open(
            dir.path().join("other"),
            &StoreKey::default(),
            DEFAULT_MAX_BYTES,
        )
        .expect("opens");
        let (manifest, blob, ..) = artifact(1, 64);
        other.write(&Store::blob_rel(&bd), &blob).expect("writes");
        fs::copy(other.blob_path(&bd), store.blob_path(&bd)).expect("copy");
        assert!(store.blob(&bd, 1024).is_none());
        // A manifest moved to another name (the MAC binds the path).
        let (_, _, md2, _) = artifact(2, 64);
        store
            .write(&Store::manifest_rel(&md), &manifest)
            .expect("writes");
        fs::rename(
            store.path(&Store::manifest_rel(&md)),
            store.path(&Store::manifest_rel(&md2)),
        )
        .expect("rename");
        assert!(store.load(&reference("v1").at_digest(&md2)).is_none());
    }

    #[test]
    fn symlinks_and_files_others_can_write_are_not_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, md, bd) = with_v1(dir.path());
        // The blob made writable by others.
        fs::set_permissions(store.blob_path(&bd), fs::Permissions::from_mode(0o666))
            .expect("chmod");
        assert!(store.blob(&bd, 1024).is_none());
        assert!(!store.blob_path(&bd).exists(), "removed");
        // The manifest replaced by a symlink to the host's own good copy.
        let rel = Store::manifest_rel(&md);
        let good = dir.path().join("good.json");
        fs::rename(store.path(&rel), &good).expect("move");
        std::os::unix::fs::symlink(&good, store.path(&rel)).expect("symlink");
        assert!(store.load(&reference("v1")).is_none());
        assert!(good.exists(), "the link's target is left alone");
    }

    #[test]
    fn a_symlinked_or_open_store_directory_is_refused_or_tightened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        fs::create_dir(&real).expect("mkdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let err = Store::open(link, &StoreKey::default(), DEFAULT_MAX_BYTES).expect_err("refused");
        assert!(err.contains("symlink"), "{err}");
        fs::set_permissions(&real, fs::Permissions::from_mode(0o777)).expect("chmod");
        Store::open(real.clone(), &StoreKey::default(), DEFAULT_MAX_BYTES).expect("opens");
        assert_eq!(fs::metadata(&real).expect("meta").mode() & 0o777, 0o700);
        // A subdirectory that is a symlink: refused too.
        let blobs = real.join("blobs");
        fs::remove_dir(&blobs).expect("rmdir");
        std::os::unix::fs::symlink(dir.path(), &blobs).expect("symlink");
        assert!(Store::open(real, &StoreKey::default(), DEFAULT_MAX_BYTES).is_err());
    }

    #[test]
    fn the_store_shares_the_precompiled_cache_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = dir.path().join("precompiled");
        let key = StoreKey {
            file: None,
            dir: Some(cache.clone()),
        };
        let store = Store::open(cache.join("oci"), &key, DEFAULT_MAX_BYTES).expect("opens");
        assert!(cache.join(private::KEY_FILE).exists());
        assert!(!store.dir().join(private::KEY_FILE).exists());
        assert_eq!(Ok(store.key), private::key(&cache, None));
    }

    /// Issue 40: the store was never pruned. Many pushes to one tag: the
    /// store stays under its bound, keeping the tag's last known good, the
    /// pinned plugins and the most recently used.
    #[test]
    fn the_store_stays_under_its_bound_and_keeps_what_is_pinned() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Room for four artifacts of ~3.3 KiB.
        let bound = 14 * 1024;
        let store = open(dir.path(), bound);
        let live = reference("live");
        // Both references are followed by a live source.
        let _following = [
            pins::Following::new(live.to_string()),
            pins::Following::new(reference("stable").to_string()),
        ];
        // Another reference, saved once and never used again: its last
        // known good is the least recently used artifact, and kept.
        let (manifest, blob, stable_md, stable_bd) = artifact(100, 3000);
        store
            .save(
                &reference("stable"),
                &stable_md,
                &manifest,
                &stable_bd,
                &blob,
                &[],
            )
            .expect("saves");
        let mut saved: Vec<(String, String)> = Vec::new();
        let holder = pins::PinHolder::new();
        for seed in 0..12u8 {
            let (manifest, blob, md, bd) = artifact(seed, 3000);
            if seed > 5 {
                // The artifact of push 5 is used again and again (loaded
                // by digest): the most recently used.
                assert!(store.load(&live.at_digest(&saved[5].0)).is_some());
                assert!(store.blob(&saved[5].1, 1 << 20).is_some());
            }
            store
                .save(&live, &md, &manifest, &bd, &blob, &[])
                .expect("saves");
            saved.push((md, bd));
            if seed == 0 {
                // The first plugin still serves (or is the rollback target).
                holder.set([saved[0].1.clone()]);
            }
        }
        let used: u64 = SUBDIRS
            .iter()
            .flat_map(|sub| store.list(sub))
            .filter_map(|rel| store.stat(&rel).map(|(size, _)| size))
            .sum();
        // The bound, plus the refs (a few hundred bytes; not artifacts).
        assert!(used <= bound + 512, "{used} bytes in the store");
        let (last_md, last_bd) = saved.last().cloned().expect("saved");
        let stored = store.load(&live).expect("the last known good is kept");
        assert_eq!(stored.manifest_digest, last_md);
        assert!(store.blob(&last_bd, 1 << 20).is_some());
        assert!(
            store.blob(&saved[0].1, 1 << 20).is_some(),
            "the pinned one is kept"
        );
        let stable = store
            .load(&reference("stable"))
            .expect("the other reference's last known good");
        assert_eq!(stable.manifest_digest, stable_md);
        assert!(
            store.blob(&saved[5].1, 1 << 20).is_some(),
            "the one used again is kept"
        );
        for (i, (_, bd)) in saved.iter().enumerate().take(11).skip(1) {
            if i != 5 {
                assert!(store.blob(bd, 1 << 20).is_none(), "push {i} was evicted");
            }
        }
    }

    /// Bytes of every file of the store.
    fn used(store: &Store) -> u64 {
        SUBDIRS
            .iter()
            .flat_map(|sub| store.list(sub))
            .filter_map(|rel| store.stat(&rel).map(|(size, _)| size))
            .sum()
    }

    /// Hazard: the last known good of every reference ever followed was a
    /// pin, so a resource moved through eight tags kept all eight over the
    /// bound. Only the followed reference's last known good and what the
    /// slot holds (serving, previous) are kept; the other tags' artifacts
    /// are evicted and their refs go with them.
    #[test]
    fn references_nobody_follows_keep_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Room for three artifacts of ~3.3 KiB.
        let bound = 11 * 1024;
        let store = open(dir.path(), bound);
        let slot = pins::PinHolder::new();
        let mut saved: Vec<(OciRef, String, String)> = Vec::new();
        for seed in 0..8u8 {
            // The resource moves to the next tag: a new source follows it,
            // the old one is dropped.
            let tag = reference(&format!("moved-{seed}"));
            let _following = pins::Following::new(tag.to_string());
            let (manifest, blob, md, bd) = artifact(50 + seed, 3000);
            store
                .save(&tag, &md, &manifest, &bd, &blob, &[])
                .expect("saves");
            saved.push((tag, md, bd.clone()));
            // It serves; the one before is the rollback target.
            let held: Vec<String> = saved.iter().rev().take(2).map(|s| s.2.clone()).collect();
            slot.set(held);
        }
        assert!(used(&store) <= bound + 512, "{} bytes", used(&store));
        for (i, (tag, _, bd)) in saved.iter().enumerate() {
            let kept = i >= 5; // the two pinned and the newest that fits
            assert_eq!(store.blob(bd, 1 << 20).is_some(), kept, "tag {i}'s blob");
            if i < 5 {
                // Evicted: its ref went with it.
                assert!(!store.path(&Store::ref_rel(tag)).exists(), "tag {i}'s ref");
                assert!(store.load(tag).is_none());
            }
        }
    }

    /// A followed reference's last known good is kept even when it is the
    /// least recently used artifact and the store is over its bound; once
    /// nobody follows it, it goes at the next save.
    #[test]
    fn a_followed_references_last_known_good_is_kept_until_unfollowed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bound = 7 * 1024; // two artifacts
        let store = open(dir.path(), bound);
        let old = reference("followed-old");
        let following = pins::Following::new(old.to_string());
        let (manifest, blob, old_md, old_bd) = artifact(70, 3000);
        store
            .save(&old, &old_md, &manifest, &old_bd, &blob, &[])
            .expect("saves");
        for seed in 71..74u8 {
            let (manifest, blob, md, bd) = artifact(seed, 3000);
            let tag = reference(&format!("followed-{seed}"));
            store
                .save(&tag, &md, &manifest, &bd, &blob, &[])
                .expect("saves");
        }
        // (Looked at without a load, which would make it the most recently used.)
        assert!(
            store.path(&Store::manifest_rel(&old_md)).exists()
                && store.path(&Store::ref_rel(&old)).exists(),
            "the followed reference's last known good is kept"
        );
        drop(following);
        let (manifest, blob, md, bd) = artifact(75, 3000);
        store
            .save(&reference("followed-75"), &md, &manifest, &bd, &blob, &[])
            .expect("saves");
        assert!(store.load(&old).is_none(), "unfollowed: evicted");
        assert!(
            !store.path(&Store::ref_rel(&old)).exists(),
            "its ref went too"
        );
        assert!(used(&store) <= bound + 512, "{} bytes", used(&store));
    }

    #[test]
    fn the_pruning_choice_keeps_pins_and_followed_last_known_goods_only() {
        let rel_of = |r: &str| format!("refs/{r}");
        let refs = vec![
            ("refs/a".to_string(), "sha256:ma".to_string()),
            ("refs/b".to_string(), "sha256:mb".to_string()),
        ];
        let followed: BTreeSet<String> = ["b".to_string(), "c".to_string()].into();
        let kept = last_known_good(&refs, &followed, rel_of);
        assert_eq!(kept, BTreeSet::from(["sha256:mb".to_string()]));
        let pinned = BTreeSet::from(["sha256:layer-serving".to_string()]);
        let layers = |l: &str| vec![l.to_string()];
        assert!(is_kept("sha256:mb", &layers("sha256:x"), &pinned, &kept));
        assert!(is_kept(
            "sha256:mz",
            &layers("sha256:layer-serving"),
            &pinned,
            &kept
        ));
        assert!(!is_kept("sha256:ma", &layers("sha256:y"), &pinned, &kept));
    }
}
