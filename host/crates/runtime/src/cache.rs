//! Precompiled plugins on disk, so a restart (or a swap back to a plugin
//! seen before) skips Cranelift.
//!
//! A precompiled artifact is native code that runs outside the sandbox, so
//! the cache is trusted only as far as the host can prove it wrote it:
//!
//! - the directory is private: created `0700`, owned by the host's user, not
//!   a symlink (a directory of the host's user that is group- or
//!   world-accessible is tightened to `0700`; one owned by someone else, or a
//!   symlink, disables the cache with a warning);
//! - every artifact carries an HMAC-SHA256 over its file name and content,
//!   keyed by a random secret the host keeps in the directory (`.key`,
//!   `0600`) or reads from `--precompiled-cache-key-file` (e.g. a mounted
//!   Secret). An artifact planted by anyone without the key, or copied under
//!   another name, fails the check and is recompiled and replaced;
//! - files are opened without following symlinks, and must be regular files
//!   of the host's user that nobody else can write.
//!
//! These checks are [`crate::disk::private`]'s, shared with the OCI store
//! (which uses the same key). The cache is bounded: after each artifact it
//! stores, the least recently used artifacts (by mtime, set on each load)
//! are removed until all add up to `--precompiled-cache-max-mib`
//! ([`DEFAULT_MAX_BYTES`]); the plugins a hot-swap slot serves, had before
//! or shadows ([`crate::disk::pins`]) are never removed.
//!
//! The file name binds the sha256 of the component's bytes and the
//! [`engine_key`] (this runtime's and wasmtime's versions, the target and
//! the settings that affect generated code), so an artifact is only offered
//! to an engine that could have produced it (and `Component::deserialize`
//! checks again). Files are written to a
//! temporary name in the same directory and renamed into place.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::disk::private::{self, Key};
use crate::disk::{pins, prune};

/// How a plugin's component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadOutcome {
    /// Compiled now (and stored, when a cache is configured).
    Compiled,
    /// Deserialized from the on-disk cache.
    FromCache,
}

/// Default bound of the cache's artifacts (`--precompiled-cache-max-mib`):
/// with the default OCI store bound (64 MiB) well under the shipped
/// `emptyDir`'s 256 MiB, and room for three precompiled Python plugins
/// (~36 MB each: serving, previous, shadow).
pub const DEFAULT_MAX_BYTES: u64 = 128 << 20;

/// The on-disk cache of precompiled components (or none).
#[derive(Debug, Clone)]
pub struct PrecompiledCache {
    dir: Option<PathBuf>,
    key_file: Option<PathBuf>,
    /// The artifacts' bound in bytes (pinned ones excepted).
    max_bytes: u64,
    /// The checked directory's key, once (None inside: the cache is unusable).
    key: std::sync::Arc<OnceLock<Option<Key>>>,
}

impl PrecompiledCache {
    /// A cache in `dir`; `None` disables caching. The key is kept in the
    /// directory.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self::with_key_file(dir, None)
    }

    /// A cache in `dir` whose HMAC key is read from `key_file` (at least 32
    /// bytes) instead of the directory.
    pub fn with_key_file(dir: Option<PathBuf>, key_file: Option<PathBuf>) -> Self {
        Self {
            dir,
            key_file,
            max_bytes: DEFAULT_MAX_BYTES,
            key: std::sync::Arc::new(OnceLock::new()),
        }
    }

    /// The same cache, keeping its artifacts under `max_bytes` (least
    /// recently used go first; the pinned plugins' never).
    pub fn bounded(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The key file given (`--precompiled-cache-key-file`), if any.
    pub fn key_file(&self) -> Option<&Path> {
        self.key_file.as_deref()
    }

    /// The default directory: `$XDG_CACHE_HOME/wasm-operator/precompiled`, or
    /// `$HOME/.cache/wasm-operator/precompiled`.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("wasm-operator").join("precompiled"))
    }

    /// The cache directory, if caching is on.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Where the artifact for the component whose sha256 is `digest_hex`
    /// lives (for this engine), if caching is on.
    pub fn path_for(&self, engine: &Engine, digest_hex: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(dir.join(format!("{digest_hex}-{}.cwasm", engine_key(engine))))
    }

    /// The key, after checking the directory once (`None`: do not use the
    /// cache; the reason was logged).
    fn key(&self) -> Option<&Key> {
        self.key
            .get_or_init(|| {
                let dir = self.dir.as_ref()?;
                match prepare(dir, self.key_file.as_deref()) {
                    Ok(key) => Some(key),
                    Err(why) => {
                        tracing::warn!(
                            dir = %dir.display(),
                            reason = %why,
                            "not using the precompiled plugin cache (plugins are compiled at every load)"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The component whose sha256 is `digest_hex`, if a trusted artifact
    /// of it is in the cache (for this engine); untrusted or unusable ones
    /// are reported and treated as absent.
    pub fn cached(&self, engine: &Engine, digest_hex: &str) -> Option<Component> {
        let path = self.path_for(engine, digest_hex)?;
        let key = self.key()?;
        fs::symlink_metadata(&path).ok()?;
        match read_artifact(&path, key) {
            Ok(precompiled) => {
                // SAFETY: `Component::deserialize` trusts its input to be
                // wasmtime's own output: it checks the header, the
                // wasmtime version and the engine's settings, but not the
                // machine code. These bytes carry an HMAC under a key
                // only this host's user can read, over this very file
                // name, and `store` only ever signs what
                // `Engine::precompile_component` produced; the file name
                // binds the engine's key. The bytes are
                // read into memory first rather than mapped, so nothing
                // done to the file later can change code in use.
                match unsafe { Component::deserialize(engine, &precompiled) } {
                    Ok(component) => {
                        private::touch(&path);
                        Some(component)
                    }
                    Err(err) => {
                        tracing::warn!(
                            path = %path.display(),
                            error = %format!("{err:#}"),
                            "unusable precompiled plugin in the cache; compiling again"
                        );
                        None
                    }
                }
            }
            Err(why) => {
                tracing::warn!(
                    path = %path.display(),
                    error = %why,
                    "untrusted or corrupt precompiled plugin in the cache; compiling again"
                );
                None
            }
        }
    }

    /// The component for `bytes` (whose sha256 is `digest_hex`): from the
    /// cache when a trusted artifact is there, else compiled by `compile`
    /// (and stored).
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest_hex: &str,
        compile: impl FnOnce(&[u8]) -> anyhow::Result<Vec<u8>>,
    ) -> anyhow::Result<(Component, LoadOutcome)> {
        if let Some(component) = self.cached(engine, digest_hex) {
            return Ok((component, LoadOutcome::FromCache));
        }
        let path = self.path_for(engine, digest_hex);
        let key = path.as_ref().and_then(|_| self.key());
        let precompiled = compile(bytes)?;
        // Checked before it is signed: nothing the compiler returns is
        // stored unless this engine accepts it as a component.
        let component = checked_artifact(engine, &precompiled)?;
        if let (Some(path), Some(key)) = (path, key)
            && let Err(err) = store(&path, &precompiled, key)
        {
            tracing::warn!(
                path = %path.display(),
                error = %err,
                "could not store the precompiled plugin (continuing without the cache)"
            );
        }
        if let Some(dir) = self.dir.as_deref()
            && key.is_some()
        {
            prune_dir(dir, self.max_bytes, &pins::pinned());
        }
        Ok((component, LoadOutcome::Compiled))
    }
}

/// Removes the least recently used artifacts of `dir` until they add up
/// to at most `max_bytes`, never one of a `pinned` plugin (by the
/// `sha256:<hex>` of its component; the file name starts with the hex).
/// Only `*.cwasm` files count: the key, temporary files and the OCI store
/// (`oci/`, bounded on its own) are not the cache's.
pub fn prune_dir(dir: &Path, max_bytes: u64, pinned: &std::collections::BTreeSet<String>) {
    let Ok(listing) = fs::read_dir(dir) else {
        return;
    };
    let mut paths = Vec::new();
    let mut entries = Vec::new();
    for item in listing.flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        let Ok(meta) = fs::symlink_metadata(item.path()) else {
            continue;
        };
        if !name.ends_with(".cwasm") || name.starts_with('.') || meta.is_dir() {
            continue;
        }
        let digest = format!("sha256:{}", name.split('-').next().unwrap_or_default());
        entries.push(prune::Entry {
            bytes: meta.len(),
            last_used: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
            pinned: pinned.contains(&digest),
        });
        paths.push(item.path());
    }
    for i in prune::choose(&entries, max_bytes) {
        match fs::remove_file(&paths[i]) {
            Ok(()) => tracing::info!(
                path = %paths[i].display(),
                bytes = entries[i].bytes,
                bound = max_bytes,
                "evicted a precompiled plugin from the cache (least recently used; over --precompiled-cache-max-mib)"
            ),
            Err(err) => {
                tracing::warn!(path = %paths[i].display(), error = %err, "could not evict a precompiled plugin")
            }
        }
    }
}

/// The component in `artifact`, which a compiler just returned, if this
/// engine accepts it: wasmtime's precompiled header for a component (not a
/// core module), then [`Component::deserialize`]'s checks of the wasmtime
/// version, the target and every setting that affects generated code.
/// Anything else is refused with rule `limits/compile-output` and is never
/// signed or stored.
///
/// What stays trusted: the machine code inside a well-formed artifact is not
/// (and cannot be) verified; it is as trusted as the compiler that made it
/// (see docs/security.md, "The precompiled cache").
pub fn checked_artifact(engine: &Engine, artifact: &[u8]) -> anyhow::Result<Component> {
    match Engine::detect_precompiled(artifact) {
        Some(wasmtime::Precompiled::Component) => {}
        other => anyhow::bail!(
            "the compiler returned {} ({} bytes), not a precompiled component \
             (rule limits/compile-output); nothing was stored",
            match other {
                Some(wasmtime::Precompiled::Module) => "a precompiled core module",
                _ => "something that is not a wasmtime artifact",
            },
            artifact.len()
        ),
    }
    // SAFETY: `Component::deserialize` trusts its input to be wasmtime's own
    // output. The bytes come from `Engine::precompile_component`, in this
    // process or in a child compiler (this same executable, sandboxed) for
    // an engine whose compatibility key it checked equals `engine`'s;
    // deserialize checks the header, version and settings again. Only the
    // machine code itself is taken on trust (documented above).
    unsafe { Component::deserialize(engine, artifact) }.map_err(|err| {
        anyhow::anyhow!(
            "the compiler's output is not a component this engine can load \
             (rule limits/compile-output; nothing was stored): {err:#}"
        )
    })
}

pub use super::engine::engine_key;

/// First bytes of every cache file, then the HMAC, then the artifact.
const FILE_MAGIC: &[u8] = b"wasm-operator precompiled v2\n";
/// Largest artifact read back (a precompiled 20 MB Python component is ~36 MB).
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// Makes sure `dir` is a private directory of ours and returns the key.
fn prepare(dir: &Path, key_file: Option<&Path>) -> Result<Key, String> {
    private::private_dir(dir, "precompiled cache")?;
    private::key(dir, key_file)
}

/// The name an artifact's MAC is over: its file name, so an artifact
/// cannot be moved to another name either.
fn mac_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The artifact in a cache file, if the file is ours and its MAC holds.
fn read_artifact(path: &Path, key: &Key) -> Result<Vec<u8>, private::ReadError> {
    private::read_keyed(path, &mac_name(path), FILE_MAGIC, key, MAX_ARTIFACT_BYTES)
}

/// Writes a cache file atomically: a temporary file in the same directory,
/// synced, then renamed over `path`.
fn store(path: &Path, artifact: &[u8], key: &Key) -> std::io::Result<()> {
    private::write_keyed(path, &mac_name(path), FILE_MAGIC, artifact, key)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::{Duration, SystemTime};

    use super::*;

    /// Issue 40: eight swaps left eight artifacts in the cache (nothing
    /// evicted). Past the bound the least recently used go, never a pinned
    /// plugin's, and nothing but `*.cwasm` artifacts is touched.
    #[test]
    fn the_cache_evicts_the_least_recently_used_but_never_a_pinned_plugin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let artifact = |n: usize, age_secs: u64| {
            let path = dir.path().join(format!("{n:064x}-0123456789abcdef.cwasm"));
            fs::write(&path, vec![0u8; 1000]).expect("write");
            let when = SystemTime::now() - Duration::from_secs(age_secs);
            fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(when))
                .expect("mtime");
            path
        };
        // Oldest first: 0 (pinned: still serving), 1, 2, 3, 4 (newest).
        let paths: Vec<PathBuf> = (0..5).map(|n| artifact(n, 100 - 10 * n as u64)).collect();
        fs::write(dir.path().join(".key"), [0u8; 32]).expect("key");
        fs::create_dir(dir.path().join("oci")).expect("store");
        fs::write(dir.path().join("oci").join("big"), vec![0u8; 10_000]).expect("store file");
        let pinned = BTreeSet::from([format!("sha256:{:064x}", 0)]);
        prune_dir(dir.path(), 3000, &pinned);
        let left: Vec<bool> = paths.iter().map(|p| p.exists()).collect();
        assert_eq!(left, [true, false, false, true, true]);
        assert!(dir.path().join(".key").exists() && dir.path().join("oci/big").exists());
        // Under the bound: nothing goes.
        prune_dir(dir.path(), 3000, &pinned);
        assert!(paths[3].exists() && paths[4].exists());
    }
}
