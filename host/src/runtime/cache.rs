//! Precompiled plugins on disk, so a restart (or a swap back to a plugin
//! seen before) skips Cranelift.
//!
//! The key is the sha256 of the component's bytes plus a hash of
//! [`Engine::precompile_compatibility_hash`] (wasmtime version, target and
//! every setting that affects code generation): an artifact is only ever
//! loaded into an engine that could have produced it. Files are written to
//! a temporary name and renamed, so a crash never leaves half an artifact;
//! an artifact that fails to deserialize is recompiled and replaced.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadOutcome {
    /// Compiled now (and stored, when a cache is configured).
    Compiled,
    /// Deserialized from the on-disk cache.
    FromCache,
}

/// The on-disk cache (or none).
#[derive(Debug, Clone)]
pub struct PrecompiledCache {
    dir: Option<PathBuf>,
}

impl PrecompiledCache {
    /// A cache in `dir`; `None` disables caching.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self { dir }
    }

    /// `$XDG_CACHE_HOME/wasm-operator/precompiled`, or `~/.cache/...`.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("wasm-operator").join("precompiled"))
    }

    /// Where the artifact for `digest_hex` would be.
    pub fn path_for(&self, engine: &Engine, digest_hex: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut hasher = Sha256Hasher::default();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        Some(dir.join(format!("{digest_hex}-{engine_key}.cwasm")))
    }

    /// The component for `bytes` (whose sha256 is `digest_hex`): from the
    /// cache when a good artifact is there, else compiled (and stored).
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest_hex: &str,
    ) -> anyhow::Result<(Component, LoadOutcome)> {
        let path = self.path_for(engine, digest_hex);
        if let Some(path) = path.as_deref().filter(|p| p.is_file()) {
            // SAFETY: `deserialize_file` trusts that the file is wasmtime's own
            // output for a compatible engine. Only this module writes into the
            // cache directory (atomically, via rename), file names bind the
            // source digest and the engine's compatibility hash, and wasmtime
            // itself re-checks the artifact header and engine compatibility.
            // The cache directory must not be writable by anyone the host
            // does not trust, as with any code cache.
            match unsafe { Component::deserialize_file(engine, path) } {
                Ok(component) => return Ok((component, LoadOutcome::FromCache)),
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "unusable precompiled artifact; recompiling")
                }
            }
        }
        let precompiled = engine.precompile_component(bytes)?;
        // SAFETY: the bytes were produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &precompiled)? };
        if let Some(path) = path
            && let Err(err) = store(&path, &precompiled)
        {
            tracing::warn!(path = %path.display(), error = %err, "could not store the precompiled plugin (continuing without cache)");
        }
        Ok((component, LoadOutcome::Compiled))
    }
}

fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Feeds `Hash` output into sha256, for a stable on-disk key.
#[derive(Default)]
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or([0; 8]))
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
