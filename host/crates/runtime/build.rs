//! Tells the runtime which wasmtime it is built with (from the workspace's
//! `Cargo.lock`), for the engine key the serving host and its compile
//! helper compare: `WASM_OPERATOR_WASMTIME_VERSION`, `unknown` when no lock
//! file is found.

use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let lock = manifest_dir
        .ancestors()
        .map(|dir| dir.join("Cargo.lock"))
        .find(|path| path.is_file());
    let version = lock
        .as_deref()
        .and_then(wasmtime_version_in)
        .unwrap_or_else(|| "unknown".to_owned());
    if let Some(lock) = lock {
        println!("cargo:rerun-if-changed={}", lock.display());
    }
    println!("cargo:rustc-env=WASM_OPERATOR_WASMTIME_VERSION={version}");
}

/// The version of the `wasmtime` package in the lock file at `path`.
fn wasmtime_version_in(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"wasmtime\"" {
            let next = lines.next()?;
            let version = next
                .trim()
                .strip_prefix("version = \"")?
                .strip_suffix('"')?;
            return Some(version.to_owned());
        }
    }
    None
}
