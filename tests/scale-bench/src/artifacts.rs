//! Building what the benchmark runs, from the checkout it runs in: the host
//! binary and the kube-rs peer with `cargo build` (the benchmark's own
//! profile by default), the replicaset plugin for `wasm32-wasip2` through
//! `wasm-artifacts`, the memcached plugin for `wasm32-wasip2` in release,
//! and the controller-runtime peers (Jinghzhu, Memcached) with `go build`
//! into a cache directory outside the repository, keyed by a hash of their
//! `go.mod`, `go.sum` and sources (under a file lock, so concurrent runs
//! build once).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};

/// The cargo profile binaries are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// `cargo build` (unoptimised; what the CI smoke test uses).
    Dev,
    /// `cargo build --release`.
    Release,
    /// `cargo build --profile dist`: release with whole-program LTO, what
    /// the container image ships and what the measured runs use.
    Dist,
}

impl Profile {
    /// The profile for the controllers when the benchmark itself was built
    /// this way: `dev` for a debug build (the smoke test), else `dist`.
    pub fn of_this_build() -> Self {
        if cfg!(debug_assertions) {
            Profile::Dev
        } else {
            Profile::Dist
        }
    }
}

/// The workspace root (this crate lives in `tests/scale-bench`).
pub fn workspace_root() -> PathBuf {
    wasm_artifacts::workspace_root()
}

/// Builds binary `bin` of `package` with cargo and returns its path (taken
/// from cargo's JSON messages, so `CARGO_TARGET_DIR` is honoured).
pub fn cargo_binary(package: &str, bin: &str, profile: Profile) -> Result<PathBuf> {
    let mut cmd = nested_cargo();
    cmd.args([
        "build",
        "--message-format=json-render-diagnostics",
        "-p",
        package,
        "--bin",
        bin,
    ]);
    match profile {
        Profile::Dev => {}
        Profile::Release => {
            cmd.arg("--release");
        }
        Profile::Dist => {
            cmd.args(["--profile", "dist"]);
        }
    }
    eprintln!("scale-bench: cargo build -p {package} ({profile:?})");
    let output = cmd.output().context("running cargo")?;
    if !output.status.success() {
        bail!(
            "`cargo build -p {package}` failed:\n{}",
            tail(&String::from_utf8_lossy(&output.stderr), 30)
        );
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact" && msg["target"]["name"] == bin)
        .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| anyhow!("cargo built {package} but reported no executable `{bin}`"))
}

/// A `cargo` command in the workspace root that builds as a plain `cargo`
/// from a shell would (see [`wasm_artifacts::as_from_a_shell`]).
pub fn nested_cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root());
    wasm_artifacts::as_from_a_shell(&mut cmd);
    cmd
}

/// The replicaset plugin, built for `wasm32-wasip2`.
pub fn replicaset_plugin() -> Result<PathBuf> {
    wasm_artifacts::try_build("replicaset-plugin", &[], wasm_artifacts::Toolchain::Wasip2)
        .map_err(|err| anyhow!("{err}"))
}

/// The replicaset plugin in `language` (built by its toolchain from `tests/setup.sh`).
pub fn language_plugin(language: wasm_artifacts::Language) -> Result<PathBuf> {
    wasm_artifacts::try_build_language(language).map_err(|err| anyhow!("{err}"))
}

/// The Go module of the controller-runtime peer.
pub fn go_peer_dir() -> PathBuf {
    workspace_root().join("tests/peers/controller-runtime")
}

/// Builds (or finds in the cache) the controller-runtime peer.
pub fn controller_runtime_peer() -> Result<PathBuf> {
    go_command_cached(
        ".",
        "controller-runtime-peer",
        &module_hash(&go_peer_dir())?,
    )
}

/// Builds (or finds in the cache) the controller-runtime Memcached peer
/// (`tests/peers/controller-runtime/cmd/memcached`, same module).
pub fn memcached_peer() -> Result<PathBuf> {
    let module = go_peer_dir();
    let package = module.join("cmd/memcached");
    let hash = format!("{}-{}", module_hash(&module)?, &source_hash(&package)?[..8]);
    go_command_cached("./cmd/memcached", "memcached-peer", &hash)
}

/// The memcached example's plugin, built for `wasm32-wasip2` in release
/// (as `examples/memcached/demo.sh` builds it); its path from cargo's
/// JSON messages, so `CARGO_TARGET_DIR` is honoured.
pub fn memcached_plugin() -> Result<PathBuf> {
    let mut cmd = nested_cargo();
    cmd.args([
        "build",
        "--release",
        "--message-format=json-render-diagnostics",
        "--target",
        "wasm32-wasip2",
        "-p",
        "memcached-plugin",
    ]);
    eprintln!("scale-bench: cargo build --release --target wasm32-wasip2 -p memcached-plugin");
    let output = cmd.output().context("running cargo")?;
    if !output.status.success() {
        bail!(
            "`cargo build -p memcached-plugin` failed (is the wasm32-wasip2 target installed? \
             tests/setup.sh):\n{}",
            tail(&String::from_utf8_lossy(&output.stderr), 30)
        );
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact")
        .flat_map(|msg| {
            msg["filenames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
        })
        .find(|path| path.extension().is_some_and(|ext| ext == "wasm"))
        .ok_or_else(|| anyhow!("cargo built memcached-plugin but reported no .wasm file"))
}

/// `go build` of `package` (relative to the peers' module) into the cache
/// directory `<name>-<hash>`, once; the binary's path.
fn go_command_cached(package: &str, name: &str, hash: &str) -> Result<PathBuf> {
    let source = go_peer_dir();
    let root = local_control_plane::binaries::default_cache_root();
    let dir = root.join(format!("{name}-{hash}"));
    let binary = dir.join(name);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock = fs::File::create(dir.join(".lock"))?;
    lock.lock()
        .with_context(|| format!("locking the cache of {name}"))?;
    if binary.is_file() {
        return Ok(binary);
    }
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    let staging = dir.join(format!("{name}.building"));
    eprintln!(
        "scale-bench: go build of {name} into {} (once; a few minutes on a cold Go cache)",
        dir.display()
    );
    let output = Command::new(&go)
        .current_dir(&source)
        .args(["build", "-trimpath", "-o"])
        .arg(&staging)
        .arg(package)
        .env("CGO_ENABLED", "0")
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        .output()
        .map_err(|err| {
            anyhow!(
                "cannot run `{}` ({err}): the controller-runtime peers are built with Go 1.26 or \
                 newer from the Go module proxy; install Go or leave the peer out",
                go.to_string_lossy()
            )
        })?;
    if !output.status.success() {
        let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stdout));
        bail!(
            "`go build {package}` of {name} in {} failed (is the Go module proxy reachable? \
             GOPROXY): {}",
            source.display(),
            tail(&text, 20)
        );
    }
    fs::rename(&staging, &binary)?;
    Ok(binary)
}

/// A digest of what every peer of the module `module` builds from: its
/// top-level files and the package the peers share (`internal/peer`).
fn module_hash(module: &Path) -> Result<String> {
    let shared = source_hash(&module.join("internal/peer"))?;
    Ok(format!("{}-{}", source_hash(module)?, &shared[..8]))
}

/// A hash of the `go.mod`, `go.sum` and `.go` files of `dir` (names and contents).
fn source_hash(dir: &Path) -> Result<String> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name == "go.mod" || name == "go.sum" || name.ends_with(".go")
        })
        .collect();
    files.sort();
    let mut hasher = Sha256::new();
    for file in &files {
        hasher.update(
            file.file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or_default(),
        );
        hasher.update(fs::read(file)?);
    }
    Ok(hex::encode(hasher.finalize())[..12].to_owned())
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_go_peers_hash_follows_its_sources() {
        let dir = tempfile_dir();
        fs::write(dir.join("go.mod"), "module x\n").expect("write");
        fs::write(dir.join("main.go"), "package main\n").expect("write");
        fs::write(dir.join("README.md"), "ignored").expect("write");
        let first = source_hash(&dir).expect("hash");
        fs::write(dir.join("README.md"), "still ignored").expect("write");
        assert_eq!(source_hash(&dir).expect("hash"), first);
        fs::write(dir.join("main.go"), "package main // changed\n").expect("write");
        assert_ne!(source_hash(&dir).expect("hash"), first);
        let _ = fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("scale-bench-hash-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        dir
    }
}
