//! Bytes from outside the host, read with a cap and a deadline: the one
//! place that reads a registry's answer (manifests, blobs, token answers,
//! signature artifacts, error bodies) or a plugin file.
//!
//! - [`within`]: an overall deadline around a whole piece of work (a
//!   request and its body, or a whole pull), not a per-read timeout: a
//!   server that sends one byte every few seconds is cut when the deadline
//!   passes, however steady its drip.
//! - [`collect`] / [`stream`]: a body read in chunks with a running count
//!   against a cap; a declared `Content-Length` over the cap is refused
//!   before a byte is read, and an undeclared (chunked, endless) body is
//!   cut as soon as the count passes the cap. Nothing holds more than the
//!   cap plus one chunk.
//! - [`excerpt`]: at most [`ERROR_READ`] bytes of an error body, shown as
//!   at most [`ERROR_SHOWN`] bytes through [`crate::plugin_text::escape`],
//!   the one escaping path, before any log line, status or Event.
//! - [`read_file`]: a plugin file: opened without blocking (a FIFO cannot
//!   wedge the open), refused unless it is a regular file, its size checked
//!   from the open file's metadata before it is read, and read through the
//!   same cap (a file growing meanwhile is cut). [`FileRules`] adds where a
//!   `JinghzhuPlugin`'s file may be: under `--plugin-file-root`.
//!
//! The caps and deadlines themselves are the callers' (see
//! `docs/security.md`, "Supply chain and fleet").

use std::future::Future;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

/// Most bytes of an error body read (the rest is never asked for).
pub const ERROR_READ: u64 = 4096;
/// Most bytes of an error body shown in a message (escaped, marker aside).
pub const ERROR_SHOWN: usize = 256;

/// Why a bounded read stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// The body is (or declares to be) larger than `cap`: `declared` is its
    /// `Content-Length` (or a file's size), `None` when it never said and
    /// was cut while streaming.
    TooLarge {
        /// The cap.
        cap: u64,
        /// The declared size, if any.
        declared: Option<u64>,
    },
    /// The deadline passed after `after`.
    Deadline {
        /// How long the work had.
        after: Duration,
    },
    /// Reading failed (network, I/O): why.
    Failed(String),
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::TooLarge {
                cap,
                declared: Some(size),
            } => write!(
                f,
                "{size} bytes declared, more than the {cap}-byte cap; nothing read"
            ),
            Cut::TooLarge {
                cap,
                declared: None,
            } => write!(f, "more than the {cap}-byte cap; stopped reading there"),
            Cut::Deadline { after } => write!(
                f,
                "no complete answer within {:.1} s; cut at the deadline",
                after.as_secs_f64()
            ),
            Cut::Failed(why) => f.write_str(why),
        }
    }
}

/// Runs `work` until `deadline` (set `budget` after its start: for the
/// message); past it, `work` is dropped (its connection closed) and the
/// result is `on_deadline(Cut::Deadline)`.
pub async fn within<T, E>(
    deadline: Instant,
    budget: Duration,
    work: impl Future<Output = Result<T, E>>,
    on_deadline: impl FnOnce(Cut) -> E,
) -> Result<T, E> {
    match tokio::time::timeout_at(deadline, work).await {
        Ok(result) => result,
        Err(_) => Err(on_deadline(Cut::Deadline { after: budget })),
    }
}

/// The deadline `budget` from now, or `outer` if that comes first.
pub fn deadline_in(budget: Duration, outer: Option<Instant>) -> Instant {
    let own = Instant::now() + budget;
    outer.map_or(own, |outer| own.min(outer))
}

/// Streams `response`'s body to `each`, at most `cap` bytes; returns how
/// many were read. The caller's [`within`] bounds the time.
pub async fn stream(
    mut response: reqwest::Response,
    cap: u64,
    mut each: impl FnMut(&[u8]),
) -> Result<u64, Cut> {
    if let Some(length) = response.content_length()
        && length > cap
    {
        return Err(Cut::TooLarge {
            cap,
            declared: Some(length),
        });
    }
    let mut read: u64 = 0;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| Cut::Failed(error_chain(&err)))?
    {
        read = read.saturating_add(chunk.len() as u64);
        if read > cap {
            return Err(Cut::TooLarge {
                cap,
                declared: None,
            });
        }
        each(&chunk);
    }
    Ok(read)
}

/// `response`'s whole body, at most `cap` bytes.
pub async fn collect(response: reqwest::Response, cap: u64) -> Result<Vec<u8>, Cut> {
    let start = response.content_length().unwrap_or(0).min(cap);
    let mut bytes = Vec::with_capacity(usize::try_from(start).unwrap_or(0));
    stream(response, cap, |chunk| bytes.extend_from_slice(chunk)).await?;
    Ok(bytes)
}

/// At most [`ERROR_READ`] bytes of an error answer's body, as escaped text
/// of at most [`ERROR_SHOWN`] bytes (empty when there is none or it cannot
/// be read); the rest of the body is never read.
pub async fn error_excerpt(mut response: reqwest::Response) -> String {
    let mut bytes: Vec<u8> = Vec::new();
    while (bytes.len() as u64) < ERROR_READ {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = usize::try_from(ERROR_READ).unwrap_or(usize::MAX) - bytes.len();
                bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    excerpt(&bytes)
}

/// `bytes` as text for a message: lossy UTF-8, escaped and cut to
/// [`ERROR_SHOWN`] bytes by [`crate::plugin_text::escape`].
pub fn excerpt(bytes: &[u8]) -> String {
    crate::plugin_text::escape(&String::from_utf8_lossy(bytes), ERROR_SHOWN)
}

/// An error and its causes on one line (reqwest's `Display` hides them).
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Why a plugin file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRefusal {
    /// It does not exist (yet).
    Missing(String),
    /// Outside the directory file sources must be under.
    OutsideRoot(String),
    /// Not a regular file (a FIFO, a device, a directory, a socket).
    NotRegular(String),
    /// Larger than the cap.
    TooLarge(String),
    /// Another I/O error.
    Unreadable(String),
}

impl FileRefusal {
    /// The rule id (one of [`crate::rules`]).
    pub fn rule(&self) -> &'static str {
        match self {
            FileRefusal::Missing(_) | FileRefusal::Unreadable(_) => super::rules::FILE_UNREADABLE,
            FileRefusal::OutsideRoot(_) => super::rules::FILE_OUTSIDE_ROOT,
            FileRefusal::NotRegular(_) => super::rules::FILE_NOT_REGULAR,
            FileRefusal::TooLarge(_) => super::rules::FILE_TOO_LARGE,
        }
    }

    /// What happened.
    pub fn message(&self) -> &str {
        match self {
            FileRefusal::Missing(m)
            | FileRefusal::OutsideRoot(m)
            | FileRefusal::NotRegular(m)
            | FileRefusal::TooLarge(m)
            | FileRefusal::Unreadable(m) => m,
        }
    }
}

impl std::fmt::Display for FileRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.rule(), self.message())
    }
}

impl std::error::Error for FileRefusal {}

/// Reads the plugin file at `path`: opened with `O_NONBLOCK` (a FIFO with
/// no writer does not block the open), refused unless the open file is a
/// regular file of at most `cap` bytes (checked before reading), read
/// through the cap. Blocking I/O: call it off the async threads for big
/// files ([`read_file_async`]).
pub fn read_file(path: &Path, cap: u64) -> Result<Vec<u8>, FileRefusal> {
    let shown = path.display();
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => FileRefusal::Missing(format!("{shown} does not exist")),
            _ => FileRefusal::Unreadable(format!("opening {shown}: {err}")),
        })?;
    let meta = file.metadata().map_err(|err| {
        FileRefusal::Unreadable(format!("reading the metadata of {shown}: {err}"))
    })?;
    if !meta.file_type().is_file() {
        return Err(FileRefusal::NotRegular(format!(
            "{shown} is not a regular file ({}); a plugin file must be one",
            kind_of(&meta.file_type())
        )));
    }
    if meta.len() > cap {
        return Err(FileRefusal::TooLarge(format!(
            "{shown} is {} bytes, more than the {cap}-byte cap (--plugin-file-max-mib); nothing read",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&mut file)
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|err| FileRefusal::Unreadable(format!("reading {shown}: {err}")))?;
    if bytes.len() as u64 > cap {
        return Err(FileRefusal::TooLarge(format!(
            "{shown} grew past the {cap}-byte cap (--plugin-file-max-mib) while read; dropped"
        )));
    }
    Ok(bytes)
}

/// [`read_file`] on the blocking pool.
pub async fn read_file_async(path: PathBuf, cap: u64) -> Result<Vec<u8>, FileRefusal> {
    tokio::task::spawn_blocking(move || read_file(&path, cap))
        .await
        .unwrap_or_else(|err| {
            Err(FileRefusal::Unreadable(format!(
                "the read task failed: {err}"
            )))
        })
}

fn kind_of(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// Default cap of a plugin file, in MiB (as `--oci-max-artifact-mib`'s).
pub const DEFAULT_MAX_FILE_MIB: u64 = 128;

/// Where a `JinghzhuPlugin`'s `spec.source.file` may point, and how big it
/// may be.
#[derive(Debug, Clone)]
pub struct FileRules {
    /// File sources must resolve (symlinks followed) to a path under this
    /// directory (`--plugin-file-root`).
    pub root: Option<PathBuf>,
    /// Any path is allowed (`--plugin-file-any-path`, for development).
    pub any_path: bool,
    /// Largest file read.
    pub max_bytes: u64,
}

impl Default for FileRules {
    fn default() -> Self {
        Self {
            root: None,
            any_path: false,
            max_bytes: DEFAULT_MAX_FILE_MIB << 20,
        }
    }
}

impl FileRules {
    /// The path to read for `path`: itself when any path is allowed, else
    /// its canonical form, which must be under the canonical root. A path
    /// that does not exist yet is [`FileRefusal::Missing`] (a ConfigMap
    /// volume may bring it); with no root configured nothing is allowed.
    pub fn allowed(&self, path: &Path) -> Result<PathBuf, FileRefusal> {
        if self.any_path {
            return Ok(path.to_path_buf());
        }
        let Some(root) = &self.root else {
            return Err(FileRefusal::OutsideRoot(format!(
                "{}: this host takes file sources only under --plugin-file-root, and none is set",
                path.display()
            )));
        };
        let written_root = root;
        let root = root.canonicalize().map_err(|err| {
            FileRefusal::Unreadable(format!("--plugin-file-root {}: {err}", root.display()))
        })?;
        if !path.is_absolute() {
            return Err(FileRefusal::OutsideRoot(format!(
                "{}: a file source must be an absolute path under {}",
                path.display(),
                root.display()
            )));
        }
        let real = match path.canonicalize() {
            Ok(real) => real,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                // Not there yet: allowed only if the path as written is
                // under the root (its symlinks are checked once it exists).
                let climbs = path
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir));
                if (path.starts_with(&root) || path.starts_with(written_root)) && !climbs {
                    return Err(FileRefusal::Missing(format!(
                        "{} does not exist",
                        path.display()
                    )));
                }
                return Err(outside(path, &root));
            }
            Err(err) => {
                return Err(FileRefusal::Unreadable(format!(
                    "resolving {}: {err}",
                    path.display()
                )));
            }
        };
        if real.starts_with(&root) && real != root {
            Ok(real)
        } else {
            Err(outside(path, &root))
        }
    }

    /// [`FileRules::allowed`], then [`read_file`] within the cap.
    pub async fn read(&self, path: &Path) -> Result<Vec<u8>, FileRefusal> {
        let real = self.allowed(path)?;
        read_file_async(real, self.max_bytes).await
    }
}

fn outside(path: &Path, root: &Path) -> FileRefusal {
    FileRefusal::OutsideRoot(format!(
        "{} is not under --plugin-file-root {} (symlinks followed)",
        path.display(),
        root.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_device_and_a_big_file_are_refused_without_reading() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let err = read_file(&fifo, 1024).expect_err("a FIFO");
        assert_eq!(err.rule(), super::super::rules::FILE_NOT_REGULAR, "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let err = read_file(Path::new("/dev/zero"), 1024).expect_err("a device");
        assert_eq!(err.rule(), super::super::rules::FILE_NOT_REGULAR, "{err}");
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .and_then(|f| f.set_len(1 << 30))
            .expect("sparse file");
        let err = read_file(&big, 1024).expect_err("too large");
        assert_eq!(err.rule(), super::super::rules::FILE_TOO_LARGE, "{err}");
        let small = dir.path().join("small");
        std::fs::write(&small, b"plugin").expect("write");
        assert_eq!(read_file(&small, 1024).expect("read"), b"plugin");
        assert!(matches!(
            read_file(&dir.path().join("none"), 1024),
            Err(FileRefusal::Missing(_))
        ));
    }

    #[test]
    fn file_sources_must_resolve_under_the_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::write(root.join("p.wasm"), b"x").expect("write");
        std::os::unix::fs::symlink("/dev/zero", root.join("zero")).expect("symlink");
        std::os::unix::fs::symlink(root.join("p.wasm"), root.join("link")).expect("symlink");
        let rules = FileRules {
            root: Some(root.clone()),
            ..FileRules::default()
        };
        assert!(rules.allowed(&root.join("p.wasm")).is_ok());
        assert!(rules.allowed(&root.join("link")).is_ok());
        for outside in [
            root.join("zero"),
            PathBuf::from("/etc/hostname"),
            root.join("../root/../x"),
            PathBuf::from("relative.wasm"),
        ] {
            let err = rules.allowed(&outside).expect_err("outside");
            assert!(
                matches!(err, FileRefusal::OutsideRoot(_)),
                "{}: {err}",
                outside.display()
            );
        }
        assert!(matches!(
            rules.allowed(&root.join("later.wasm")),
            Err(FileRefusal::Missing(_))
        ));
        assert!(matches!(
            FileRules::default().allowed(&root.join("p.wasm")),
            Err(FileRefusal::OutsideRoot(_))
        ));
    }

    #[test]
    fn an_excerpt_is_escaped_and_cut() {
        let mut body = b"line one\nERROR forged \x1b[31mred\r\n".to_vec();
        body.extend(std::iter::repeat_n(b'x', 3000));
        let shown = excerpt(&body);
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert!(shown.len() <= ERROR_SHOWN + crate::plugin_text::MARKER_MAX);
        assert!(
            shown.contains("\\n") && shown.contains("\\u{1b}"),
            "{shown}"
        );
        assert!(shown.ends_with(" bytes more)"), "{shown}");
    }
}
