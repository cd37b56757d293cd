//! The serving executable has no compiler: `cargo tree` of `wasm-operator`'s
//! normal build (what `cargo build -p wasm-operator` and the Dockerfile
//! build; dev-dependencies, which give tests Cranelift, left out) holds no
//! Cranelift code generator and does not turn on wasmtime's `cranelift`
//! feature, while the compile helper's does.
//!
//! wasmtime's `wasmtime-environ` always uses three small data-structure
//! crates of the Cranelift project (`cranelift-entity`, `-bitset`,
//! `-bforest`: typed index maps and bit sets); they hold no compiler and
//! are allowed.

use std::process::Command;

/// Cranelift crates that are only data structures, not the compiler.
const DATA_STRUCTURES_ONLY: &[&str] =
    &["cranelift-entity", "cranelift-bitset", "cranelift-bforest"];

/// Crates that are the compiler.
const COMPILER: &[&str] = &[
    "cranelift-codegen",
    "cranelift-frontend",
    "regalloc2",
    "wasmtime-internal-cranelift",
];

/// `cargo tree` of `package` with `args`, one crate or feature a line.
fn tree(package: &str, args: &[&str]) -> String {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--manifest-path",
            manifest,
            "--locked",
            "-p",
            package,
        ])
        .args(["--prefix", "none"])
        .args(args)
        .output()
        .expect("running cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("cargo tree prints UTF-8")
}

/// The crate names in a `cargo tree --prefix none` listing.
fn crates_in(listing: &str) -> Vec<String> {
    let mut names: Vec<String> = listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_serving_executable_is_built_without_cranelift() {
    let crates = crates_in(&tree("wasm-operator", &["-e", "no-dev"]));
    let compiler: Vec<&String> = crates
        .iter()
        .filter(|name| {
            COMPILER.contains(&name.as_str())
                || name.starts_with("cranelift") && !DATA_STRUCTURES_ONLY.contains(&name.as_str())
        })
        .collect();
    assert!(
        compiler.is_empty(),
        "the serving executable's build pulls in the compiler: {compiler:?} \
         (a dependency turned on wasmtime's `cranelift` or the runtime's `compile` feature)"
    );
    assert!(crates.iter().any(|name| name == "wasmtime"), "{crates:?}");
}

#[test]
fn the_serving_executable_turns_on_no_compiling_feature() {
    let features = tree(
        "wasm-operator",
        &["-e", "no-dev,features", "-i", "wasmtime"],
    );
    for feature in [
        "wasmtime feature \"cranelift\"",
        "wasmtime feature \"winch\"",
        "wasm-operator-runtime feature \"compile\"",
    ] {
        assert!(!features.contains(feature), "{feature} is on:\n{features}");
    }
    assert!(
        features.contains("wasmtime feature \"runtime\""),
        "{features}"
    );
}

#[test]
fn the_check_sees_the_compiler_where_it_is() {
    // Guards the guard: the compile helper's tree has the compiler.
    let crates = crates_in(&tree("wasm-operator-compile", &["-e", "no-dev"]));
    for name in COMPILER {
        assert!(
            crates.iter().any(|c| c == name),
            "{name} missing: {crates:?}"
        );
    }
    let features = tree(
        "wasm-operator-compile",
        &["-e", "no-dev,features", "-i", "wasmtime"],
    );
    assert!(
        features.contains("wasmtime feature \"cranelift\""),
        "{features}"
    );
}
