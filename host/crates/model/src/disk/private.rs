//! Private directories and keyed files: the checks every file the host
//! wrote and reads back later goes through (the precompiled cache, the OCI
//! store).
//!
//! - [`private_dir`]: created `0700`; refused when it is a symlink, not a
//!   directory, or owned by another user; tightened to `0700` (with a
//!   warning) when the host's user owns it but others may enter it.
//! - [`key`]: the HMAC key, from a key file (at least 32 bytes, e.g. a
//!   mounted Secret) or a random one kept as `.key` (`0600`) in a private
//!   directory, created atomically (a crash never leaves a short key).
//! - [`write_keyed`] / [`read_keyed`]: a file is a magic line, an
//!   HMAC-SHA256 over its name and content, then the content; it is written
//!   to a temporary name in the same directory and renamed, and read back
//!   only if it is a regular file of the host's user that nobody else can
//!   write, opened without following symlinks, within a size cap, whose MAC
//!   holds for the name it is asked under.
//! - [`touch`]: marks a file used now (its mtime), which [`super::prune`]
//!   reads as recency.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Bytes of the HMAC key.
pub const KEY_LEN: usize = 32;
/// An HMAC key.
pub type Key = [u8; KEY_LEN];
/// Name of the key file inside a private directory.
pub const KEY_FILE: &str = ".key";
/// Bytes of a MAC.
const MAC_LEN: usize = 32;
/// Largest key file read.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

type HmacSha256 = Hmac<Sha256>;

/// The effective user id of the host.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Makes sure `dir` is a private directory of the host's user: created
/// `0700` if missing, refused when it is a symlink, not a directory or
/// someone else's, tightened to `0700` when others may enter it (`what`
/// names it in the warning).
pub fn private_dir(dir: &Path, what: &str) -> Result<(), String> {
    if fs::symlink_metadata(dir).is_err() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(format!("{} is a symlink or not a directory", dir.display()));
    }
    if meta.uid() != euid() {
        return Err(format!(
            "{} is owned by uid {}, not by the host's user ({})",
            dir.display(),
            meta.uid(),
            euid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private (0700): {e}", dir.display()))?;
        tracing::warn!(dir = %dir.display(), "{what} directory was accessible to others; made it 0700");
    }
    Ok(())
}

/// The key: the sha256 of `key_file` when given (a private file of at least
/// [`KEY_LEN`] bytes), else the random key kept in `dir` (checked with
/// [`private_dir`] by the caller), created if missing.
pub fn key(dir: &Path, key_file: Option<&Path>) -> Result<Key, String> {
    match key_file {
        Some(file) => {
            let bytes = read_private(file, true, MAX_KEY_FILE_BYTES)?;
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

/// The key kept at `path`, created (random, `0600`) if missing: written to
/// a temporary file and linked into place only if no key is there yet, so
/// two openers (the cache and the store) agree and a crash leaves no half
/// key.
fn dir_key(path: &Path) -> Result<Key, String> {
    let mut key = [0u8; KEY_LEN];
    if fs::symlink_metadata(path).is_err() {
        File::open("/dev/urandom")
            .and_then(|mut random| random.read_exact(&mut key))
            .map_err(|e| format!("cannot read random bytes for the key: {e}"))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut file = tempfile::Builder::new()
            .prefix(".partial-key-")
            .permissions(fs::Permissions::from_mode(0o600))
            .tempfile_in(dir)
            .map_err(|e| format!("cannot create the key in {}: {e}", dir.display()))?;
        file.write_all(&key)
            .and_then(|()| file.as_file().sync_all())
            .map_err(|e| format!("cannot write the key: {e}"))?;
        match file.persist_noclobber(path) {
            Ok(_) => return Ok(key),
            Err(err) if err.error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => {
                return Err(format!(
                    "cannot create the key {}: {}",
                    path.display(),
                    err.error
                ));
            }
        }
    }
    let bytes = read_private(path, true, KEY_LEN as u64)?;
    if bytes.len() != KEY_LEN {
        return Err(format!(
            "{} is not a key of {KEY_LEN} bytes",
            path.display()
        ));
    }
    key.copy_from_slice(&bytes);
    Ok(key)
}

/// Why a private file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// It cannot be read now (gone, no descriptor left, an I/O error):
    /// nothing says it is not the host's.
    Unreadable(String),
    /// It is not what the host wrote: a symlink, not a regular file,
    /// someone else's or writable by others, over its size, another format
    /// or a MAC that does not hold. Never to be used.
    Untrusted(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Unreadable(why) | ReadError::Untrusted(why) => f.write_str(why),
        }
    }
}

impl From<ReadError> for String {
    fn from(err: ReadError) -> Self {
        err.to_string()
    }
}

/// Opens `path` for reading without following symlinks; it must be a
/// regular file of the host's user that nobody else may write (nor read,
/// when `secret`).
fn open_private(path: &Path, secret: bool) -> Result<(File, fs::Metadata), ReadError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            let why = format!("cannot open {} (symlinks are refused): {e}", path.display());
            match e.raw_os_error() {
                Some(libc::ELOOP) => ReadError::Untrusted(why),
                _ => ReadError::Unreadable(why),
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|e| ReadError::Unreadable(format!("{}: {e}", path.display())))?;
    let forbidden = if secret { 0o077 } else { 0o022 };
    if !meta.is_file() || meta.uid() != euid() || meta.mode() & forbidden != 0 {
        return Err(ReadError::Untrusted(format!(
            "{} is not a regular file of the host's user that only it can {}",
            path.display(),
            if secret { "access" } else { "write" }
        )));
    }
    Ok((file, meta))
}

/// Reads a private file ([`open_private`]) of at most `max_bytes`.
pub fn read_private(path: &Path, secret: bool, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let (file, meta) = open_private(path, secret)?;
    if meta.len() > max_bytes {
        return Err(ReadError::Untrusted(format!(
            "{} holds {} bytes, more than the {max_bytes} expected",
            path.display(),
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Unreadable(format!("{}: {e}", path.display())))?;
    if bytes.len() as u64 > max_bytes {
        return Err(ReadError::Untrusted(format!(
            "{} grew while read",
            path.display()
        )));
    }
    Ok(bytes)
}

/// The MAC of `content` stored under `name`: over the name and the content,
/// so a file cannot be moved to another name either.
fn mac(key: &Key, name: &str, content: &[u8]) -> Result<HmacSha256, String> {
    let mut mac = HmacSha256::new_from_slice(key).map_err(|e| e.to_string())?;
    mac.update(&(name.len() as u64).to_le_bytes());
    mac.update(name.as_bytes());
    mac.update(content);
    Ok(mac)
}

/// Writes `content` to `path` as `magic`, its MAC under `name`, then the
/// content: to a `0600` temporary file in the same directory, synced, then
/// renamed over `path`.
pub fn write_keyed(
    path: &Path,
    name: &str,
    magic: &[u8],
    content: &[u8],
    key: &Key,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tag = mac(key, name, content)
        .map_err(std::io::Error::other)?
        .finalize()
        .into_bytes();
    let mut file = tempfile::Builder::new()
        .prefix(".partial-")
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    file.write_all(magic)?;
    file.write_all(&tag)?;
    file.write_all(content)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The content of a file [`write_keyed`] wrote under `name` with `magic`,
/// if the file is a private one of the host ([`open_private`]), holds at
/// most `max_content` bytes of content and its MAC holds.
pub fn read_keyed(
    path: &Path,
    name: &str,
    magic: &[u8],
    key: &Key,
    max_content: u64,
) -> Result<Vec<u8>, ReadError> {
    let overhead = (magic.len() + MAC_LEN) as u64;
    let file = read_private(path, false, max_content.saturating_add(overhead))?;
    let untrusted = |why: &str| ReadError::Untrusted(why.to_string());
    let rest = file.strip_prefix(magic).ok_or_else(|| {
        untrusted("not a file of this kind written by wasm-operator (or an older format)")
    })?;
    if rest.len() < MAC_LEN {
        return Err(untrusted("truncated"));
    }
    let (tag, content) = rest.split_at(MAC_LEN);
    mac(key, name, content)
        .map_err(|e| untrusted(&e))?
        .verify_slice(tag)
        .map_err(|_| untrusted("its HMAC does not match: not written by this host, or modified"))?;
    Ok(content.to_vec())
}

/// Marks `path` used now: sets its modification time (recency for
/// [`super::prune`]). Best effort: a file that cannot be touched only
/// looks older.
pub fn touch(path: &Path) {
    let touched = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .and_then(|file| file.set_modified(std::time::SystemTime::now()));
    if let Err(err) = touched {
        tracing::debug!(path = %path.display(), error = %err, "could not mark a cache file used");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Key {
        [7u8; KEY_LEN]
    }

    #[test]
    fn a_keyed_file_reads_back_only_under_its_name_and_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        write_keyed(&path, "a/f", b"magic\n", b"content", &secret()).expect("writes");
        assert_eq!(
            read_keyed(&path, "a/f", b"magic\n", &secret(), 64).as_deref(),
            Ok(&b"content"[..])
        );
        let mode = fs::metadata(&path).expect("meta").mode();
        assert_eq!(mode & 0o777, 0o600);
        // Another name, another key, another magic, over the cap: refused.
        assert!(read_keyed(&path, "b/f", b"magic\n", &secret(), 64).is_err());
        assert!(read_keyed(&path, "a/f", b"magic\n", &[8u8; KEY_LEN], 64).is_err());
        assert!(read_keyed(&path, "a/f", b"other\n", &secret(), 64).is_err());
        assert!(read_keyed(&path, "a/f", b"magic\n", &secret(), 3).is_err());
    }

    #[test]
    fn symlinks_and_files_others_can_write_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        write_keyed(&path, "f", b"m\n", b"x", &secret()).expect("writes");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        let err = read_keyed(&link, "f", b"m\n", &secret(), 64).expect_err("symlink");
        assert!(
            matches!(&err, ReadError::Untrusted(why) if why.contains("symlinks are refused")),
            "{err}"
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o622)).expect("chmod");
        let err = read_keyed(&path, "f", b"m\n", &secret(), 64).expect_err("writable");
        assert!(
            matches!(&err, ReadError::Untrusted(why) if why.contains("only it can write")),
            "{err}"
        );
        // A file that is not there is unreadable, not untrusted.
        let gone = read_keyed(&dir.path().join("gone"), "gone", b"m\n", &secret(), 64);
        assert!(matches!(gone, Err(ReadError::Unreadable(_))));
    }

    #[test]
    fn a_private_dir_is_tightened_and_a_symlinked_one_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let open = dir.path().join("open");
        fs::create_dir(&open).expect("mkdir");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).expect("chmod");
        private_dir(&open, "test").expect("tightened");
        assert_eq!(fs::metadata(&open).expect("meta").mode() & 0o777, 0o700);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&open, &link).expect("symlink");
        assert!(private_dir(&link, "test").is_err());
    }

    #[test]
    fn the_directory_key_is_made_once_and_shared() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = key(dir.path(), None).expect("made");
        assert_eq!(key(dir.path(), None), Ok(first));
        let mode = fs::metadata(dir.path().join(KEY_FILE))
            .expect("meta")
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let short = dir.path().join("short");
        fs::write(&short, b"too short").expect("write");
        fs::set_permissions(&short, fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(key(dir.path(), Some(&short)).is_err());
    }
}
