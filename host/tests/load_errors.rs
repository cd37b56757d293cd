//! Load errors for the mistakes plugin authors make, each with a real
//! artifact: a crate that forgets `export!` (`tests/plugins/no-export`),
//! a plugin written as a binary, core modules from a plain wasm32-wasip1
//! build (with and without the exports), and an rlib given as the plugin.
//! Every error must name the likely cause and the fix.

use std::path::{Path, PathBuf};
use std::process::Command;

use wasm_artifacts::{Toolchain, build, workspace_root};
use wasm_operator::runtime::{LoadError, Runtime, RuntimeConfig};

fn load_error(path: &Path) -> LoadError {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    match runtime.load(&bytes, &path.display().to_string()) {
        Ok(plugin) => panic!("{} loaded as {}", path.display(), plugin.describe()),
        Err(err) => err,
    }
}

/// `cargo build --release --target wasm32-wasip1 -p <package>`: a core
/// module, in a target directory of its own (cargo-component writes its
/// componentized wasm32-wasip1 artifacts to the workspace's target/).
fn core_module(package: &str) -> PathBuf {
    let target_dir = workspace_root().join("target/wasm-artifacts/core-wasip1");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = wasm_artifacts::as_from_a_shell(&mut Command::new(cargo))
        .current_dir(workspace_root())
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip1",
            "-p",
            package,
            "--lib",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "building {package} for wasm32-wasip1 failed (run tests/setup.sh for the target):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = target_dir
        .join("wasm32-wasip1/release")
        .join(format!("{}.wasm", package.replace('-', "_")));
    assert!(path.is_file(), "{} missing", path.display());
    path
}

#[test]
fn a_plugin_that_forgets_export_is_told_to_call_it() {
    let wasm = build("no-export-plugin", &[], Toolchain::Wasip2);
    let err = load_error(&wasm);
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("it exports nothing"), "{message}");
    assert!(
        message.contains("never calls `jinghzhu_plugin_sdk::export!(YourPlugin);`"),
        "names the missing export!: {message}"
    );
    assert!(
        message.contains("Add the call at the crate root"),
        "names the fix: {message}"
    );
}

#[test]
fn a_plugin_written_as_a_binary_is_told_to_be_a_cdylib() {
    let lib = build("no-export-plugin", &[], Toolchain::Wasip2);
    // The same `cargo build` linked the crate's binary target next to it.
    let command = lib.with_file_name("no-export-command.wasm");
    let err = load_error(&command);
    let message = err.to_string();
    assert!(message.contains("wasi:cli/run@"), "{message}");
    assert!(message.contains("it is a WASI command"), "{message}");
    assert!(
        message.contains("crate-type = [\"cdylib\"]"),
        "names the fix: {message}"
    );
}

#[test]
fn a_plain_wasip1_build_is_told_to_componentize() {
    let wasm = core_module("replicaset-plugin");
    let err = load_error(&wasm);
    assert!(matches!(err, LoadError::CoreModule { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("is a core Wasm module, not a component"),
        "{message}"
    );
    assert!(
        message.contains("built for wasm32-wasip1") && message.contains("not componentized"),
        "names the target: {message}"
    );
    assert!(
        message.contains("only the componentizing step is missing"),
        "the exports are there: {message}"
    );
    assert!(
        message.contains("cargo component build") && message.contains("--target wasm32-wasip2"),
        "names the fix: {message}"
    );
}

#[test]
fn a_core_module_without_exports_names_export_too() {
    let wasm = core_module("no-export-plugin");
    let err = load_error(&wasm);
    assert!(matches!(err, LoadError::CoreModule { .. }), "{err:?}");
    let message = err.to_string();
    // Nothing exported, so the linker kept nothing that uses WASI either.
    assert!(message.contains("it imports no WASI"), "{message}");
    assert!(
        message.contains("does not export `jinghzhu:operator/reconciler@0.2.0`")
            && message.contains("jinghzhu_plugin_sdk::export!(YourPlugin);"),
        "{message}"
    );
}

#[test]
fn an_rlib_is_told_to_be_a_cdylib() {
    // Building a plugin for wasm32-wasip2 leaves the SDK's rlib in deps/:
    // what a crate without `cdylib` produces instead of a .wasm.
    let wasm = build("no-export-plugin", &[], Toolchain::Wasip2);
    let deps = wasm.with_file_name("deps");
    let rlib = std::fs::read_dir(&deps)
        .expect("deps dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libjinghzhu_plugin_sdk-") && n.ends_with(".rlib"))
        })
        .expect("the SDK's rlib");
    let err = load_error(&rlib);
    assert!(matches!(err, LoadError::NotWasm { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("is not a WebAssembly file"), "{message}");
    assert!(
        message.contains("rlib or staticlib") && message.contains("crate-type = [\"cdylib\"]"),
        "{message}"
    );
}
