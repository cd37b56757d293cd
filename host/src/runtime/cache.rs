//! Precompiled plugins on disk, so a restart (or a swap back to a plugin
//! seen before) skips Cranelift.
//!
//! The file name binds the sha256 of the component's bytes and a hash of
//! [`Engine::precompile_compatibility_hash`] (wasmtime version, target, and
//! every setting that affects generated code), so an artifact is only ever
//! offered to an engine that could have produced it. Files are written to a
//! temporary name in the same directory and renamed into place, so a crash
//! never leaves half an artifact and a file is never changed once it has
//! its final name. Each file carries a checksum of the artifact; a file
//! that fails it (or that wasmtime refuses) is recompiled and replaced.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// How a plugin's component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadOutcome {
    /// Compiled now (and stored, when a cache is configured).
    Compiled,
    /// Deserialized from the on-disk cache.
    FromCache,
}

/// The on-disk cache of precompiled components (or none).
#[derive(Debug, Clone)]
pub struct PrecompiledCache {
    dir: Option<PathBuf>,
}

impl PrecompiledCache {
    /// A cache in `dir`; `None` disables caching.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self { dir }
    }

    /// `$XDG_CACHE_HOME/wasm-operator/precompiled`, or
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
        let mut hasher = Sha256Hasher::default();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        Some(dir.join(format!("{digest_hex}-{engine_key}.cwasm")))
    }

    /// The component for `bytes` (whose sha256 is `digest_hex`): from the
    /// cache when a usable artifact is there, else compiled (and stored).
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest_hex: &str,
    ) -> anyhow::Result<(Component, LoadOutcome)> {
        let path = self.path_for(engine, digest_hex);
        if let Some(path) = path.as_deref().filter(|p| p.is_file()) {
            match read_artifact(path) {
                Ok(precompiled) => {
                    // SAFETY: `Component::deserialize` trusts its input to be
                    // wasmtime's own output: it checks the header, the
                    // wasmtime version and the engine's settings, but not the
                    // machine code. These bytes are exactly what `store`
                    // wrote (the checksum in the file proves it, so a file
                    // cut short or mangled on disk never gets here), and
                    // `store` only ever writes what
                    // `Engine::precompile_component` produced. The file name
                    // binds the engine's compatibility hash, so the artifact
                    // is only offered to an engine that could have produced
                    // it. The bytes are read into memory first rather than
                    // mapped with `deserialize_file`, so nothing done to the
                    // file later can change code in use (a mapped file
                    // truncated underneath would crash the host with SIGBUS).
                    // As for any code cache, the directory must be writable
                    // only by the host's own user: someone who can write a
                    // matching checksum can run code in the host.
                    match unsafe { Component::deserialize(engine, &precompiled) } {
                        Ok(component) => return Ok((component, LoadOutcome::FromCache)),
                        Err(err) => tracing::warn!(
                            path = %path.display(),
                            error = %format!("{err:#}"),
                            "unusable precompiled plugin in the cache; compiling again"
                        ),
                    }
                }
                Err(why) => tracing::warn!(
                    path = %path.display(),
                    error = %why,
                    "corrupt precompiled plugin in the cache; compiling again"
                ),
            }
        }
        let precompiled = engine.precompile_component(bytes)?;
        // SAFETY: the bytes were produced just now by this same engine.
        let component = unsafe { Component::deserialize(engine, &precompiled)? };
        if let Some(path) = path
            && let Err(err) = store(&path, &precompiled)
        {
            tracing::warn!(
                path = %path.display(),
                error = %err,
                "could not store the precompiled plugin (continuing without the cache)"
            );
        }
        Ok((component, LoadOutcome::Compiled))
    }
}

/// First bytes of every cache file, then the sha256 of the artifact, then
/// the artifact.
const FILE_MAGIC: &[u8] = b"wasm-operator precompiled v1\n";
const CHECKSUM_LEN: usize = 32;

/// The artifact in a cache file, if the file is whole.
fn read_artifact(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::read(path).map_err(|e| e.to_string())?;
    let rest = file
        .strip_prefix(FILE_MAGIC)
        .ok_or("not a wasm-operator cache file")?;
    if rest.len() < CHECKSUM_LEN {
        return Err("truncated".into());
    }
    let (checksum, artifact) = rest.split_at(CHECKSUM_LEN);
    if Sha256::digest(artifact).as_slice() != checksum {
        return Err("checksum mismatch (truncated or modified)".into());
    }
    Ok(artifact.to_vec())
}

/// Writes a cache file atomically: a temporary file in the same directory,
/// synced, then renamed over `path`.
fn store(path: &Path, artifact: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(dir)?;
    std::io::Write::write_all(&mut file, FILE_MAGIC)?;
    std::io::Write::write_all(&mut file, &Sha256::digest(artifact))?;
    std::io::Write::write_all(&mut file, artifact)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Feeds `Hash` output into sha256, for a stable on-disk key.
#[derive(Default)]
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0_u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
