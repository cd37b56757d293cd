//! Finding or building the control plane's binaries and the tests' Go tools.
//!
//! `etcd` comes from the `etcd-bin-vendored-linux-amd64` crate. Everything
//! else written in Go is built from the one small Go module in
//! `tests/control-plane/kubernetes/`, which requires each command as a tool:
//! the Kubernetes binaries (kube-apiserver, kube-controller-manager,
//! kube-scheduler, kubectl) and `kwok`, which simulates the nodes
//! ([`CONTROL_PLANE`]); and the OCI registry, oras, cosign and Helm that only
//! the tests use ([`TOOLS`]). One module means one version of every library
//! they share (the Kubernetes client libraries, gRPC, protobuf, OpenTelemetry,
//! golang.org/x), so Go's build cache compiles each once for all nine. Each
//! set is built by one `go build` into a cache directory outside the
//! repository, keyed by a hash of `go.mod`/`go.sum`, the set's commands and
//! the linker flags, so a second run takes no time; the demo builds only the
//! first set. A file lock keeps concurrent test binaries from building twice.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The Kubernetes release the local control plane runs.
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// The kwok release that simulates the nodes (required in the same Go
/// module; it and Kubernetes v1.36 need Go 1.26 or newer).
pub const KWOK_VERSION: &str = "v0.8.0";

/// The oldest Go that builds the module (its `go` line; oras v1.3.6 asks
/// for 1.26.7).
const MIN_GO: &str = "1.26.7";

/// The Helm release the chart tests render `examples/deploy/helm` with
/// (required in the Go module: the v3.21 line is the one built against the
/// same Kubernetes client libraries as [`KUBERNETES_VERSION`]).
pub const HELM_VERSION: &str = "v3.21.4";

/// Builds the tools (once) and returns Helm's path.
pub fn ensure_helm() -> anyhow::Result<PathBuf> {
    crate::registry::HELM.ensure()
}

/// Directory of the Go module that builds the Kubernetes binaries and tools.
const GO_MODULE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/kubernetes");

/// Go commands built together by one `go build` of the module and cached in
/// one directory.
#[derive(Debug, Clone, Copy)]
pub struct GoCommands {
    /// What the set is, for messages.
    pub what: &'static str,
    /// The cache directory's name before its hash.
    pub dir_prefix: &'static str,
    /// The file name of each binary and its Go package.
    pub commands: &'static [(&'static str, &'static str)],
    /// Names of cache directories this set's directory replaces: its own
    /// under other versions or module contents, and older layouts. Those
    /// unused for [`CACHE_KEEP_DAYS`] are removed when the set is ensured.
    pub replaces: &'static [&'static str],
}

/// Days a replaced cache directory ([`GoCommands::replaces`]) may stay
/// unused before it is removed: an older checkout still using it keeps it.
pub const CACHE_KEEP_DAYS: u64 = 7;

/// The file whose modification time says when a cache directory was last
/// used ([`stamp_used`]).
pub const LAST_USED: &str = "last-used";

/// The local control plane: the Kubernetes binaries and kwok.
pub const CONTROL_PLANE: GoCommands = GoCommands {
    what: "the Kubernetes binaries (v1.36.3) and kwok (v0.8.0)",
    dir_prefix: "kubernetes-v1.36.3",
    commands: &GO_COMMANDS,
    // Other Kubernetes versions and go.mod contents; kwok once had its own.
    replaces: &["kubernetes-v", "kwok-v"],
};

/// The tools only the tests use: the OCI registry, oras, cosign and Helm.
pub const TOOLS: GoCommands = GoCommands {
    what: "the OCI registry, oras, cosign and Helm",
    dir_prefix: "go-tools",
    commands: &[
        (
            "registry",
            "github.com/distribution/distribution/v3/cmd/registry",
        ),
        ("oras", "oras.land/oras/cmd/oras"),
        ("cosign", "github.com/sigstore/cosign/v2/cmd/cosign"),
        ("helm", "helm.sh/helm/v3/cmd/helm"),
    ],
    // Other go.mod contents; each tool once had its own `go install`.
    replaces: &["go-tools-", "registry-v", "oras-v", "cosign-v", "helm-v"],
};

/// The Go packages we build, and the file name of each binary.
const GO_COMMANDS: [(&str, &str); 5] = [
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
    (
        "kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
    ),
    ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
    ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    ("kwok", "sigs.k8s.io/kwok/cmd/kwok"),
];

/// Paths of every binary the control plane needs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kubectl: PathBuf,
    /// kwok, the simulated kubelets of the fake nodes.
    pub kwok: PathBuf,
}

/// Why the binaries could not be had. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum BinaryBuildError {
    #[error(
        "the Go toolchain was not found (tried `{go}`): the local control plane builds \
         kube-apiserver, kube-controller-manager, kube-scheduler and kubectl {version} from the \
         k8s.io/kubernetes Go module, and kwok {KWOK_VERSION} (the tests also build the OCI \
         registry, oras, cosign and Helm there). Install Go {MIN_GO} or newer \
         and put `go` on PATH (or set GO=/path/to/go), or set WASM_OPERATOR_KUBE_BIN_DIR to a \
         directory that already holds those five binaries"
    )]
    GoMissing { go: String, version: &'static str },
    #[error(
        "building {what} with `{command}` failed (exit status {status}). Check that the \
         Go module proxy is reachable (GOPROXY), that `go version` is {min_go} or newer, and \
         that there is disk space, then run `cargo run -p local-control-plane -- build` to retry. \
         Last lines of the build output:\n{output_tail}"
    )]
    BuildFailed {
        what: String,
        command: &'static str,
        min_go: &'static str,
        status: String,
        output_tail: String,
    },
    #[error(
        "WASM_OPERATOR_KUBE_BIN_DIR={dir} does not contain `{missing}`: put kube-apiserver, \
         kube-controller-manager, kube-scheduler, kubectl and kwok there, or unset the variable \
         to build them"
    )]
    PrebuiltMissing { dir: String, missing: String },
    #[error("cache directory {dir}: {source}")]
    Cache {
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

/// Builds the Kubernetes binaries on demand and caches them.
#[derive(Debug, Clone)]
pub struct BinaryBuilder {
    /// The `go` command to run.
    pub go: OsString,
    /// Root of the cache; each [`GoCommands`] set goes in `<root>/<prefix>-<hash>/`.
    pub cache_root: PathBuf,
    /// The Go module to build from.
    pub module_dir: PathBuf,
}

impl Default for BinaryBuilder {
    fn default() -> Self {
        Self {
            go: std::env::var_os("GO").unwrap_or_else(|| "go".into()),
            cache_root: default_cache_root(),
            module_dir: PathBuf::from(GO_MODULE_DIR),
        }
    }
}

/// The environment variable naming the Kubernetes binary cache.
pub const KUBE_CACHE_DIR_ENV: &str = "WASM_OPERATOR_KUBE_CACHE_DIR";

/// The old name of [`KUBE_CACHE_DIR_ENV`]. It meant this cache in the README
/// and the host's precompiled-plugin cache in `run --help`; it is still read
/// here (with a warning) when the new name is unset, and no longer read by
/// the host.
pub const DEPRECATED_CACHE_DIR_ENV: &str = "WASM_OPERATOR_CACHE_DIR";

/// `$WASM_OPERATOR_KUBE_CACHE_DIR`, else the deprecated
/// `$WASM_OPERATOR_CACHE_DIR` (with a warning), else
/// `$XDG_CACHE_HOME/wasm-operator`, else `~/.cache/wasm-operator`, else the
/// system temp dir.
pub fn default_cache_root() -> PathBuf {
    cache_root_from(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

/// [`default_cache_root`] with the environment given as a lookup function.
fn cache_root_from(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    if let Some(dir) = var(KUBE_CACHE_DIR_ENV) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = var(DEPRECATED_CACHE_DIR_ENV) {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            eprintln!(
                "warning: {DEPRECATED_CACHE_DIR_ENV} is deprecated: set {KUBE_CACHE_DIR_ENV} for \
                 the Kubernetes binary cache (the host's precompiled-plugin cache is \
                 WASM_OPERATOR_PRECOMPILED_DIR)"
            );
        });
        return PathBuf::from(dir);
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("wasm-operator");
    }
    if let Some(home) = var("HOME") {
        return PathBuf::from(home).join(".cache").join("wasm-operator");
    }
    std::env::temp_dir().join("wasm-operator-cache")
}

/// The etcd binary shipped inside the `etcd-bin-vendored-linux-amd64` crate.
pub fn etcd_path() -> PathBuf {
    match etcd_bin_vendored_linux_amd64::etcd_bin_path() {
        Ok(path) => path.to_path_buf(),
        Err(never) => match never {},
    }
}

/// Returns every binary, building the Kubernetes ones first if needed.
///
/// Honours `WASM_OPERATOR_KUBE_BIN_DIR` (use prebuilt binaries from there).
pub fn ensure_binaries() -> Result<Binaries, BinaryBuildError> {
    if let Some(dir) = std::env::var_os("WASM_OPERATOR_KUBE_BIN_DIR") {
        return prebuilt(Path::new(&dir));
    }
    BinaryBuilder::default().ensure()
}

fn prebuilt(dir: &Path) -> Result<Binaries, BinaryBuildError> {
    for (name, _) in GO_COMMANDS {
        if !dir.join(name).is_file() {
            return Err(BinaryBuildError::PrebuiltMissing {
                dir: dir.display().to_string(),
                missing: name.to_string(),
            });
        }
    }
    Ok(binaries_in(dir))
}

fn binaries_in(dir: &Path) -> Binaries {
    Binaries {
        etcd: etcd_path(),
        kube_apiserver: dir.join("kube-apiserver"),
        kube_controller_manager: dir.join("kube-controller-manager"),
        kube_scheduler: dir.join("kube-scheduler"),
        kubectl: dir.join("kubectl"),
        kwok: dir.join("kwok"),
    }
}

impl BinaryBuilder {
    /// The directory the control plane's binaries are cached in.
    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir_of(&CONTROL_PLANE)
    }

    /// The directory `set` is cached in for this module's pins.
    pub fn cache_dir_of(&self, set: &GoCommands) -> PathBuf {
        let mut hasher = Sha256::new();
        for file in ["go.mod", "go.sum"] {
            // A missing file just changes the key; `go build` reports it.
            hasher.update(fs::read(self.module_dir.join(file)).unwrap_or_default());
        }
        // A cache from before a command was added is another key, not an
        // incomplete copy of this one.
        for (name, package) in set.commands {
            hasher.update(format!("{name}={package}\n"));
        }
        hasher.update(format!("ldflags={}\n", version_ldflags()));
        let hash = hex::encode(hasher.finalize());
        self.cache_root
            .join(format!("{}-{}", set.dir_prefix, &hash[..12]))
    }

    /// Returns the cached binaries, building whatever is missing.
    pub fn ensure(&self) -> Result<Binaries, BinaryBuildError> {
        Ok(binaries_in(&self.ensure_built(&CONTROL_PLANE)?))
    }

    /// Builds whatever is missing of `set`; returns its directory.
    pub fn ensure_built(&self, set: &GoCommands) -> Result<PathBuf, BinaryBuildError> {
        let dir = self.cache_dir_of(set);
        let cache_err = |source| BinaryBuildError::Cache {
            dir: dir.display().to_string(),
            source,
        };
        fs::create_dir_all(&dir).map_err(cache_err)?;
        let _lock = FileLock::acquire(&dir.join(".lock")).map_err(cache_err)?;

        let missing: Vec<_> = set
            .commands
            .iter()
            .filter(|(name, _)| !dir.join(name).is_file())
            .collect();
        if !missing.is_empty() {
            self.check_go()?;
            let staging = dir.join(".building");
            let _ = fs::remove_dir_all(&staging);
            fs::create_dir_all(&staging).map_err(cache_err)?;
            let names: Vec<_> = missing.iter().map(|(name, _)| *name).collect();
            eprintln!(
                "local-control-plane: building {} ({}) with Go into {} (once; takes several \
                 minutes on a cold cache)",
                names.join(", "),
                set.what,
                dir.display()
            );
            let mut cmd = Command::new(&self.go);
            cmd.current_dir(&self.module_dir)
                .arg("build")
                .arg("-trimpath")
                .arg("-ldflags")
                .arg(version_ldflags())
                .arg("-o")
                .arg(&staging)
                .args(missing.iter().map(|(_, pkg)| *pkg))
                .env("CGO_ENABLED", "0")
                .env("GOTOOLCHAIN", "local")
                .env("GOFLAGS", "-mod=readonly");
            let output = output_with_progress(&mut cmd, "go build").map_err(|_| {
                BinaryBuildError::GoMissing {
                    go: self.go.to_string_lossy().into_owned(),
                    version: KUBERNETES_VERSION,
                }
            })?;
            if !output.status.success() {
                let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
                text.push_str(&String::from_utf8_lossy(&output.stdout));
                return Err(BinaryBuildError::BuildFailed {
                    what: format!("{} ({})", names.join(", "), set.what),
                    command: "go build",
                    min_go: MIN_GO,
                    status: output.status.to_string(),
                    output_tail: tail_lines(&text, 20),
                });
            }
            for name in names {
                fs::rename(staging.join(name), dir.join(name)).map_err(cache_err)?;
            }
            let _ = fs::remove_dir_all(&staging);
        }
        // Best effort: a cache that cannot be stamped or swept still works.
        let _ = stamp_used(&dir);
        remove_unused_dirs(&self.cache_root, &dir, CACHE_KEEP_DAYS, |name| {
            set.replaces.iter().any(|prefix| name.starts_with(prefix))
        });
        Ok(dir)
    }

    fn check_go(&self) -> Result<(), BinaryBuildError> {
        let found = Command::new(&self.go)
            .arg("version")
            .output()
            .map(|out| out.status.success())
            .unwrap_or(false);
        if found {
            Ok(())
        } else {
            Err(BinaryBuildError::GoMissing {
                go: self.go.to_string_lossy().into_owned(),
                version: KUBERNETES_VERSION,
            })
        }
    }
}

/// Linker flags of every Go binary built here: no symbol table and no DWARF
/// (panics still name their functions). Linking kube-apiserver took 13.8 s
/// with them and 4.3 s without on this 2-core machine (Go's build cache warm).
pub(crate) const STRIPPED: &str = "-s -w";

/// Marks the cache directory `dir` used now (its [`LAST_USED`] file).
pub fn stamp_used(dir: &Path) -> std::io::Result<()> {
    // The time as content; writing moves the file's modification time on.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    fs::write(dir.join(LAST_USED), now.to_string())
}

/// Removes the cache directories in `parent` other than `keep` whose names
/// `chosen` accepts and that were not used for `keep_days` days: by their
/// [`LAST_USED`] stamp, or their own modification time when they have none
/// (older layouts, or one another run has just made). Best effort: another
/// run may be removing one too.
pub fn remove_unused_dirs(
    parent: &Path,
    keep: &Path,
    keep_days: u64,
    chosen: impl Fn(&str) -> bool,
) {
    let max_age = std::time::Duration::from_secs(keep_days * 24 * 3600);
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path == keep || !name.to_str().is_some_and(&chosen) || !path.is_dir() {
            continue;
        }
        let unused_for = fs::metadata(path.join(LAST_USED))
            .or_else(|_| fs::metadata(&path))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if unused_for.is_some_and(|age| age > max_age) {
            eprintln!(
                "removing {} (unused for more than {keep_days} days)",
                path.display()
            );
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// Stamps the version into the binaries as Kubernetes' own release build does
/// (the tools do not read these variables),
/// so `--version` and the API's `/version` report it instead of `v0.0.0`;
/// stripped ([`STRIPPED`]).
fn version_ldflags() -> String {
    let (major, minor) = KUBERNETES_VERSION
        .trim_start_matches('v')
        .split_once('.')
        .map(|(major, rest)| (major, rest.split('.').next().unwrap_or(rest)))
        .unwrap_or(("1", "0"));
    let base = "k8s.io/client-go/pkg/version";
    let component = "k8s.io/component-base/version";
    let mut flags = Vec::new();
    for pkg in [base, component] {
        flags.push(format!("-X {pkg}.gitVersion={KUBERNETES_VERSION}"));
        flags.push(format!("-X {pkg}.gitMajor={major}"));
        flags.push(format!("-X {pkg}.gitMinor={minor}"));
        flags.push(format!("-X {pkg}.gitTreeState=clean"));
    }
    format!("{STRIPPED} {}", flags.join(" "))
}

/// The last `n` lines of `text`.
pub(crate) fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `cmd` to completion like [`Command::output`], printing a line every
/// 30 s while it runs (a cold Go build takes minutes and prints nothing).
fn output_with_progress(cmd: &mut Command, what: &str) -> std::io::Result<std::process::Output> {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(30);
    let started = std::time::Instant::now();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(EVERY)
            {
                eprintln!(
                    "local-control-plane: {what} still running ({} s)",
                    started.elapsed().as_secs()
                );
            }
        });
        let output = cmd.output();
        drop(done);
        output
    })
}

/// An exclusive `flock(2)` on a file, released on drop.
pub(crate) struct FileLock(fs::File);

impl FileLock {
    pub(crate) fn acquire(path: &Path) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        // SAFETY: flock on a file descriptor we own; no memory is shared.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut file = file;
        let _ = writeln!(file, "{}", std::process::id());
        Ok(Self(file))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The first line each binary prints for `--version`.
pub fn versions(bins: &Binaries) -> Vec<(String, String)> {
    let run = |path: &Path, args: &[&str]| -> String {
        Command::new(path)
            .args(args)
            .output()
            .ok()
            .map(|out| {
                let text = String::from_utf8_lossy(&out.stdout);
                text.lines().next().unwrap_or("").trim().to_string()
            })
            .unwrap_or_else(|| "unknown".into())
    };
    vec![
        ("etcd".into(), run(&bins.etcd, &["--version"])),
        (
            "kube-apiserver".into(),
            run(&bins.kube_apiserver, &["--version"]),
        ),
        (
            "kube-controller-manager".into(),
            run(&bins.kube_controller_manager, &["--version"]),
        ),
        (
            "kube-scheduler".into(),
            run(&bins.kube_scheduler, &["--version"]),
        ),
        (
            "kubectl".into(),
            run(&bins.kubectl, &["version", "--client"]),
        ),
        ("kwok".into(), run(&bins.kwok, &["--version"])),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kube_cache_has_its_own_variable_and_the_old_one_still_works() {
        fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
            move |name| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        }
        let both = [
            (KUBE_CACHE_DIR_ENV, "/new"),
            (DEPRECATED_CACHE_DIR_ENV, "/old"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(cache_root_from(env(&both)), PathBuf::from("/new"));
        let old_only = [(DEPRECATED_CACHE_DIR_ENV, "/old"), ("HOME", "/home/u")];
        assert_eq!(cache_root_from(env(&old_only)), PathBuf::from("/old"));
        let xdg = [("XDG_CACHE_HOME", "/xdg"), ("HOME", "/home/u")];
        assert_eq!(
            cache_root_from(env(&xdg)),
            PathBuf::from("/xdg/wasm-operator")
        );
        let home = [("HOME", "/home/u")];
        assert_eq!(
            cache_root_from(env(&home)),
            PathBuf::from("/home/u/.cache/wasm-operator")
        );
    }

    #[test]
    fn missing_go_names_the_fix() {
        let builder = BinaryBuilder {
            go: "/nonexistent/go-toolchain/bin/go".into(),
            cache_root: tempfile::tempdir().expect("tempdir").keep(),
            module_dir: PathBuf::from(GO_MODULE_DIR),
        };
        let err = builder.ensure().expect_err("must fail without Go");
        let msg = err.to_string();
        assert!(matches!(err, BinaryBuildError::GoMissing { .. }), "{msg}");
        assert!(msg.contains("Install Go"), "{msg}");
        assert!(msg.contains("WASM_OPERATOR_KUBE_BIN_DIR"), "{msg}");
        let _ = fs::remove_dir_all(&builder.cache_root);
    }

    #[test]
    fn failed_build_shows_output_and_the_fix() {
        let root = tempfile::tempdir().expect("tempdir");
        // A stand-in `go` that answers `version` but fails to build.
        let fake_go = root.path().join("go");
        fs::write(
            &fake_go,
            "#!/bin/sh\nif [ \"$1\" = version ]; then echo go version fake; exit 0; fi\n\
             echo 'cannot find module providing package k8s.io/kubernetes/cmd/kube-apiserver' >&2\nexit 1\n",
        )
        .expect("write fake go");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&fake_go, fs::Permissions::from_mode(0o755)).expect("chmod");
        let builder = BinaryBuilder {
            go: fake_go.into_os_string(),
            cache_root: root.path().join("cache"),
            module_dir: PathBuf::from(GO_MODULE_DIR),
        };
        let err = builder.ensure().expect_err("must fail");
        let msg = err.to_string();
        assert!(matches!(err, BinaryBuildError::BuildFailed { .. }), "{msg}");
        assert!(
            msg.contains("cannot find module providing package"),
            "{msg}"
        );
        assert!(msg.contains("GOPROXY"), "{msg}");
        assert!(!builder.cache_dir().join("kube-apiserver").exists());
    }

    #[test]
    fn prebuilt_dir_must_hold_every_binary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = prebuilt(dir.path()).expect_err("empty dir");
        assert!(err.to_string().contains("kube-apiserver"), "{err}");
        for (name, _) in GO_COMMANDS.iter().filter(|(name, _)| *name != "kwok") {
            fs::write(dir.path().join(name), "").expect("write");
        }
        let err = prebuilt(dir.path()).expect_err("no kwok");
        assert!(err.to_string().contains("`kwok`"), "{err}");
        fs::write(dir.path().join("kwok"), "").expect("write");
        let bins = prebuilt(dir.path()).expect("complete");
        assert_eq!(bins.kube_scheduler, dir.path().join("kube-scheduler"));
        assert_eq!(bins.kwok, dir.path().join("kwok"));
    }

    #[test]
    fn a_too_old_go_is_named_with_the_version_needed() {
        let root = tempfile::tempdir().expect("tempdir");
        // A stand-in `go` too old for the module: `go build` fails as Go 1.24 would.
        let fake_go = root.path().join("go");
        fs::write(
            &fake_go,
            "#!/bin/sh\nif [ \"$1\" = version ]; then echo go version go1.24.0; exit 0; fi\n\
             echo \"go: go.mod requires go >= 1.26.0 (running go 1.24.0; GOTOOLCHAIN=local)\" >&2\nexit 1\n",
        )
        .expect("write fake go");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&fake_go, fs::Permissions::from_mode(0o755)).expect("chmod");
        let builder = BinaryBuilder {
            go: fake_go.into_os_string(),
            cache_root: root.path().join("cache"),
            module_dir: PathBuf::from(GO_MODULE_DIR),
        };
        let err = builder.ensure().expect_err("must fail");
        let msg = err.to_string();
        assert!(matches!(err, BinaryBuildError::BuildFailed { .. }), "{msg}");
        assert!(msg.contains("go build"), "{msg}");
        assert!(msg.contains("1.26.7 or newer"), "{msg}");
        assert!(msg.contains("requires go >= 1.26"), "{msg}");
        assert!(!builder.cache_dir().join("kwok").exists());
    }

    #[test]
    fn ldflags_stamp_the_version() {
        let flags = version_ldflags();
        assert!(flags.contains("gitVersion=v1.36.3"), "{flags}");
        assert!(flags.contains("gitMinor=36"), "{flags}");
        assert!(flags.starts_with("-s -w "), "{flags}");
    }

    #[test]
    fn the_go_module_requires_the_versions_named_here() {
        let go_mod = fs::read_to_string(Path::new(GO_MODULE_DIR).join("go.mod")).expect("go.mod");
        let requires = |module: &str, version: &str| {
            go_mod
                .lines()
                .any(|l| l.split_whitespace().take(2).eq([module, version]))
        };
        assert!(
            requires("k8s.io/kubernetes", KUBERNETES_VERSION),
            "{go_mod}"
        );
        assert!(requires("sigs.k8s.io/kwok", KWOK_VERSION), "{go_mod}");
        // Each staging module at the matching v0 release, the one kwok is built against.
        let staging = KUBERNETES_VERSION.replacen("v1.", "v0.", 1);
        assert!(go_mod.contains(&format!("k8s.io/client-go => k8s.io/client-go {staging}")));
        assert!(go_mod.contains(&format!("go {MIN_GO}")), "{go_mod}");
        for (_, package) in CONTROL_PLANE.commands.iter().chain(TOOLS.commands) {
            assert!(
                go_mod.contains(&format!("\t{package}\n")),
                "no tool line for {package}"
            );
        }
        use crate::registry::{COSIGN_VERSION, ORAS_VERSION, REGISTRY_VERSION};
        assert!(requires("helm.sh/helm/v3", HELM_VERSION), "{go_mod}");
        assert!(requires("oras.land/oras", ORAS_VERSION), "{go_mod}");
        assert!(
            requires("github.com/sigstore/cosign/v2", COSIGN_VERSION),
            "{go_mod}"
        );
        assert!(
            requires("github.com/distribution/distribution/v3", REGISTRY_VERSION),
            "{go_mod}"
        );
        assert_eq!(
            CONTROL_PLANE.dir_prefix,
            format!("kubernetes-{KUBERNETES_VERSION}")
        );
        assert!(CONTROL_PLANE.what.contains(KUBERNETES_VERSION));
        assert!(CONTROL_PLANE.what.contains(KWOK_VERSION));
    }

    #[test]
    fn replaced_caches_unused_for_a_week_are_removed_and_the_rest_stay() {
        let root = tempfile::tempdir().expect("tempdir");
        let eight_days_ago =
            std::time::SystemTime::now() - std::time::Duration::from_secs(8 * 24 * 3600);
        let make = |name: &str, stamp: Option<bool>| {
            let dir = root.path().join(name);
            fs::create_dir_all(&dir).expect("mkdir");
            match stamp {
                // A stamp, old or fresh.
                Some(old) => {
                    let file = fs::File::create(dir.join(LAST_USED)).expect("stamp");
                    if old {
                        file.set_modified(eight_days_ago).expect("age the stamp");
                    }
                }
                // No stamp (an older layout): the directory's own time counts.
                None => fs::File::open(&dir)
                    .and_then(|d| d.set_modified(eight_days_ago))
                    .expect("age the directory"),
            }
            dir
        };
        let keep = make("kubernetes-v1.36.3-000000000000", Some(true));
        let old_version = make("kubernetes-v1.35.0-aaaaaaaaaaaa", Some(true));
        let recent = make("kubernetes-v1.36.3-bbbbbbbbbbbb", Some(false));
        let old_layout = make("kwok-v0.8.0", None);
        let unrelated = make("cargo-target", None);
        let tools_layout = make("cosign-v2.6.5", None);

        let replaced_by = |set: GoCommands| {
            move |name: &str| set.replaces.iter().any(|prefix| name.starts_with(prefix))
        };
        remove_unused_dirs(
            root.path(),
            &keep,
            CACHE_KEEP_DAYS,
            replaced_by(CONTROL_PLANE),
        );
        assert!(keep.exists(), "the directory in use stays");
        assert!(
            !old_version.exists(),
            "another version unused for 8 days goes"
        );
        assert!(recent.exists(), "one used within the week stays");
        assert!(
            !old_layout.exists(),
            "an older layout unused for 8 days goes"
        );
        assert!(unrelated.exists(), "what the set does not replace stays");
        assert!(tools_layout.exists(), "another set's directories stay");

        remove_unused_dirs(root.path(), &keep, CACHE_KEEP_DAYS, replaced_by(TOOLS));
        assert!(!tools_layout.exists(), "the tools' older layout goes");
        assert!(unrelated.exists() && recent.exists());
    }

    #[test]
    fn the_tools_have_a_cache_directory_of_their_own() {
        let builder = BinaryBuilder {
            go: "go".into(),
            cache_root: PathBuf::from("/cache"),
            module_dir: PathBuf::from(GO_MODULE_DIR),
        };
        let tools = builder.cache_dir_of(&TOOLS);
        assert_ne!(tools, builder.cache_dir());
        let control_plane = builder.cache_dir();
        let tools = tools.to_string_lossy();
        let control_plane = control_plane.to_string_lossy();
        assert!(tools.starts_with("/cache/go-tools-"), "{tools}");
        assert!(
            control_plane.starts_with("/cache/kubernetes-v1.36.3-"),
            "{control_plane}"
        );
    }
}
