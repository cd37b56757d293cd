//! Builds the workspace's Wasm plugins for tests and benchmarks, once per
//! process, and returns the artifact's path.
//!
//! Feature variants (e.g. the example plugin with `v2`) build into their own
//! target directory under `target/wasm-artifacts/` so they never overwrite
//! each other or the default artifacts. Running cargo from inside `cargo test`
//! is fine: the build lock is released while tests run.
//!
//! ```no_run
//! let wasm = wasm_artifacts::build("replicaset-plugin", &[], wasm_artifacts::Toolchain::Wasip2);
//! assert!(wasm.ends_with("replicaset_plugin.wasm"));
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// How a plugin is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Toolchain {
    /// `cargo build --release --target wasm32-wasip2`.
    Wasip2,
    /// `cargo component build --release` (wasm32-wasip1 + adapter).
    CargoComponent,
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// Builds `package` with `features` and returns the `.wasm` path. Panics
/// with the fix when the toolchain is missing (tests cannot go on without it).
pub fn build(package: &str, features: &[&str], toolchain: Toolchain) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<(String, Vec<String>, Toolchain), PathBuf>>> =
        OnceLock::new();
    let key = (
        package.to_string(),
        features.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
        toolchain,
    );
    let built = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(&key) {
        return path.clone();
    }
    let path = run_build(package, features, toolchain);
    built.insert(key, path.clone());
    path
}

fn run_build(package: &str, features: &[&str], toolchain: Toolchain) -> PathBuf {
    let root = workspace_root();
    let mut target_dir = root.join("target");
    if !features.is_empty() {
        target_dir = target_dir
            .join("wasm-artifacts")
            .join(format!("{package}-{}", features.join("-")));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    let triple = match toolchain {
        Toolchain::Wasip2 => {
            cmd.args(["build", "--release", "--target", "wasm32-wasip2"]);
            "wasm32-wasip2"
        }
        Toolchain::CargoComponent => {
            cmd.args(["component", "build", "--release"]);
            "wasm32-wasip1"
        }
    };
    cmd.current_dir(&root)
        .args(["-p", package])
        .arg("--target-dir")
        .arg(&target_dir);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let output = match cmd.output() {
        Ok(output) => output,
        Err(err) => panic!("could not run cargo to build {package}: {err}"),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("no such command: `component`") {
            "cargo-component is missing: run tests/setup.sh (or `cargo install cargo-component --locked`)"
        } else if stderr.contains("target may not be installed")
            || stderr.contains("can't find crate for `std`")
        {
            "the wasm targets are missing: run tests/setup.sh (or `rustup target add wasm32-wasip2 wasm32-wasip1`)"
        } else {
            "see the build output above"
        };
        panic!("building {package} ({toolchain:?}) failed: {hint}\n{stderr}");
    }
    let artifact = target_dir
        .join(triple)
        .join("release")
        .join(format!("{}.wasm", package.replace('-', "_")));
    assert!(
        artifact.is_file(),
        "the build succeeded but {} is missing",
        artifact.display()
    );
    artifact
}
