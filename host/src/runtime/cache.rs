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
//! The file name binds the sha256 of the component's bytes and a hash of
//! [`Engine::precompile_compatibility_hash`] (wasmtime version, target, and
//! every setting that affects generated code), so an artifact is only ever
//! offered to an engine that could have produced it. Files are written to a
//! temporary name in the same directory and renamed into place.

use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hmac::{Hmac, Mac};
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
    key_file: Option<PathBuf>,
    /// The checked directory's key, once (None inside: the cache is unusable).
    key: std::sync::Arc<OnceLock<Option<[u8; KEY_LEN]>>>,
}

/// Bytes of the HMAC key.
const KEY_LEN: usize = 32;
/// Name of the key file inside the cache directory.
const KEY_FILE: &str = ".key";

type HmacSha256 = Hmac<Sha256>;

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
            key: std::sync::Arc::new(OnceLock::new()),
        }
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
    fn key(&self) -> Option<&[u8; KEY_LEN]> {
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
        let path = self.path_for(engine, digest_hex);
        let key = path.as_ref().and_then(|_| self.key());
        if let (Some(path), Some(key)) = (path.as_deref(), key)
            && fs::symlink_metadata(path).is_ok()
        {
            match read_artifact(path, key) {
                Ok(precompiled) => {
                    // SAFETY: `Component::deserialize` trusts its input to be
                    // wasmtime's own output: it checks the header, the
                    // wasmtime version and the engine's settings, but not the
                    // machine code. These bytes carry an HMAC under a key
                    // only this host's user can read, over this very file
                    // name, and `store` only ever signs what
                    // `Engine::precompile_component` produced; the file name
                    // binds the engine's compatibility hash. The bytes are
                    // read into memory first rather than mapped, so nothing
                    // done to the file later can change code in use.
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
                    "untrusted or corrupt precompiled plugin in the cache; compiling again"
                ),
            }
        }
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
        Ok((component, LoadOutcome::Compiled))
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

/// A short key of everything about `engine` that generated code depends on
/// ([`Engine::precompile_compatibility_hash`]): part of every artifact's
/// file name, and what a child compiler must match.
pub fn engine_key(engine: &Engine) -> String {
    let mut hasher = Sha256Hasher::default();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..8])
}

/// First bytes of every cache file, then the HMAC, then the artifact.
const FILE_MAGIC: &[u8] = b"wasm-operator precompiled v2\n";
const MAC_LEN: usize = 32;

/// The effective user id of the host.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Makes sure `dir` is a private directory of ours and returns the key.
fn prepare(dir: &Path, key_file: Option<&Path>) -> Result<[u8; KEY_LEN], String> {
    if fs::symlink_metadata(dir).is_err() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create it: {e}"))?;
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err("it is a symlink or not a directory".into());
    }
    if meta.uid() != euid() {
        return Err(format!(
            "it is owned by uid {}, not by the host's user ({})",
            meta.uid(),
            euid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make it private (0700): {e}"))?;
        tracing::warn!(dir = %dir.display(), "precompiled cache directory was accessible to others; made it 0700");
    }
    match key_file {
        Some(file) => {
            let bytes = read_private(file, false)?;
            if bytes.len() < KEY_LEN {
                return Err(format!(
                    "the key file {} holds {} bytes; it needs at least {KEY_LEN}",
                    file.display(),
                    bytes.len()
                ));
            }
            let mut key = [0u8; KEY_LEN];
            key.copy_from_slice(&Sha256::digest(&bytes));
            Ok(key)
        }
        None => dir_key(&dir.join(KEY_FILE)),
    }
}

/// The key kept in the directory, created (random, `0600`) if missing.
fn dir_key(path: &Path) -> Result<[u8; KEY_LEN], String> {
    let mut key = [0u8; KEY_LEN];
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(mut file) => {
            File::open("/dev/urandom")
                .and_then(|mut random| random.read_exact(&mut key))
                .map_err(|e| format!("cannot read random bytes for the key: {e}"))?;
            file.write_all(&key)
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot write the key: {e}"))?;
            Ok(key)
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            let bytes = read_private(path, true)?;
            if bytes.len() != KEY_LEN {
                return Err(format!(
                    "{} is not a key of {KEY_LEN} bytes",
                    path.display()
                ));
            }
            key.copy_from_slice(&bytes);
            Ok(key)
        }
        Err(err) => Err(format!("cannot create the key {}: {err}", path.display())),
    }
}

/// Reads a regular file of the host's user without following symlinks;
/// nobody else may write it (nor read it, when `secret`).
fn read_private(path: &Path, secret: bool) -> Result<Vec<u8>, String> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot open {} (symlinks are refused): {e}", path.display()))?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let forbidden = if secret { 0o077 } else { 0o022 };
    if !meta.is_file() || meta.uid() != euid() || meta.mode() & forbidden != 0 {
        return Err(format!(
            "{} is not a regular file of the host's user that only it can {}",
            path.display(),
            if secret { "access" } else { "write" }
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The MAC of an artifact stored under `path`: over the file name and the
/// artifact, so an artifact cannot be moved to another name either.
fn mac(key: &[u8; KEY_LEN], path: &Path, artifact: &[u8]) -> Result<HmacSha256, String> {
    let mut mac = HmacSha256::new_from_slice(key).map_err(|e| e.to_string())?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    mac.update(&(name.len() as u64).to_le_bytes());
    mac.update(name.as_bytes());
    mac.update(artifact);
    Ok(mac)
}

/// The artifact in a cache file, if the file is ours and its MAC holds.
fn read_artifact(path: &Path, key: &[u8; KEY_LEN]) -> Result<Vec<u8>, String> {
    let file = read_private(path, false)?;
    let rest = file
        .strip_prefix(FILE_MAGIC)
        .ok_or("not a wasm-operator cache file (or an older format)")?;
    if rest.len() < MAC_LEN {
        return Err("truncated".into());
    }
    let (tag, artifact) = rest.split_at(MAC_LEN);
    mac(key, path, artifact)?.verify_slice(tag).map_err(|_| {
        "its HMAC does not match: not written by this host, or modified".to_string()
    })?;
    Ok(artifact.to_vec())
}

/// Writes a cache file atomically: a temporary file in the same directory,
/// synced, then renamed over `path`.
fn store(path: &Path, artifact: &[u8], key: &[u8; KEY_LEN]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tag = mac(key, path, artifact)
        .map_err(std::io::Error::other)?
        .finalize()
        .into_bytes();
    let mut file = tempfile::Builder::new()
        .prefix(".partial-")
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    file.write_all(FILE_MAGIC)?;
    file.write_all(&tag)?;
    file.write_all(artifact)?;
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
