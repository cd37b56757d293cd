//! The `Cargo.lock` of a scaffolded plugin: the SDK's dependencies pinned
//! to exactly the versions this host's workspace locks (and so was built
//! and tested with), taken from the workspace's `Cargo.lock`, which is
//! embedded in the binary.
//!
//! The file keeps cargo's format: the header, then the `[[package]]` blocks
//! of the SDK's dependency closure copied verbatim (name, version, source,
//! checksum, dependencies). With a path SDK it also has the SDK and the
//! plugin itself, so `cargo build --locked` works from the start. With a
//! git SDK those two entries are left to cargo, which adds them, with the
//! SDK's commit, on the first build and keeps every other version.

use std::collections::{BTreeSet, HashMap};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

use super::SDK_PACKAGE;

/// The workspace's lock file, as this host was built.
const WORKSPACE_LOCK: &str = include_str!("../../../Cargo.lock");

/// One block of the lock file: a one-element `[[package]]` array.
#[derive(Debug, Deserialize)]
struct Block {
    package: Vec<Entry>,
}

/// One `[[package]]` entry.
#[derive(Debug, Deserialize)]
struct Entry {
    name: String,
    version: String,
    #[serde(default)]
    dependencies: Vec<String>,
}

/// The lock file of a plugin named `plugin` that depends on the SDK only;
/// `path_sdk`: the SDK is a path dependency (else a git one).
pub fn for_plugin(plugin: &str, path_sdk: bool) -> Result<String> {
    from_workspace_lock(WORKSPACE_LOCK, plugin, path_sdk)
}

/// The lock file of a contract 0.3 plugin: it depends on the controller
/// SDK and on `serde` (in the SDK's closure already).
pub fn for_controller_plugin(plugin: &str, path_sdk: bool) -> Result<String> {
    closure_lock(
        WORKSPACE_LOCK,
        super::controller::SDK_PACKAGE,
        &["serde"],
        plugin,
        path_sdk,
    )
}

/// [`for_plugin`] from the text of a workspace lock file.
pub fn from_workspace_lock(workspace_lock: &str, plugin: &str, path_sdk: bool) -> Result<String> {
    closure_lock(workspace_lock, SDK_PACKAGE, &[], plugin, path_sdk)
}

/// The lock file of `plugin`, depending on `sdk_package` and on `direct`
/// (packages of the SDK's closure), from a workspace lock file.
fn closure_lock(
    workspace_lock: &str,
    sdk_package: &str,
    direct: &[&str],
    plugin: &str,
    path_sdk: bool,
) -> Result<String> {
    let (header, blocks) = split_blocks(workspace_lock)?;
    let entries: Vec<Entry> = blocks
        .iter()
        .map(|block| {
            toml::from_str::<Block>(block)
                .ok()
                .and_then(|b| b.package.into_iter().next())
                .with_context(|| format!("a Cargo.lock entry that does not parse:\n{block}"))
        })
        .collect::<Result<_>>()?;
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        by_name.entry(entry.name.as_str()).or_default().push(i);
    }
    // A dependency is written `name` or, when several versions are locked,
    // `name version` (plus ` (source)` for duplicates from two sources).
    let resolve = |dependency: &str| -> Result<usize> {
        let mut parts = dependency.split_whitespace();
        let name = parts.next().unwrap_or_default();
        let version = parts.next();
        let candidates = by_name
            .get(name)
            .ok_or_else(|| anyhow!("Cargo.lock names `{dependency}` but has no entry for it"))?;
        let matching: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| version.is_none_or(|v| entries[i].version == v))
            .collect();
        match matching.as_slice() {
            [one] => Ok(*one),
            _ => bail!("Cargo.lock: cannot tell which `{dependency}` is meant"),
        }
    };

    let sdk = *by_name
        .get(sdk_package)
        .and_then(|v| v.first())
        .ok_or_else(|| anyhow!("the workspace Cargo.lock has no {sdk_package}"))?;
    let mut keep = BTreeSet::new();
    let mut todo: Vec<usize> = entries[sdk]
        .dependencies
        .iter()
        .map(|d| resolve(d))
        .collect::<Result<_>>()?;
    while let Some(i) = todo.pop() {
        if keep.insert(i) {
            for dependency in &entries[i].dependencies {
                todo.push(resolve(dependency)?);
            }
        }
    }
    if path_sdk {
        keep.insert(sdk);
    }

    let mut packages: Vec<(String, String, String)> = keep
        .iter()
        .map(|&i| {
            (
                entries[i].name.clone(),
                entries[i].version.clone(),
                blocks[i].clone(),
            )
        })
        .collect();
    if path_sdk {
        let mut dependencies: Vec<&str> = direct.iter().copied().chain([sdk_package]).collect();
        dependencies.sort_unstable();
        let listed: String = dependencies
            .iter()
            .map(|d| format!(" \"{d}\",\n"))
            .collect();
        packages.push((
            plugin.to_string(),
            "0.1.0".to_string(),
            format!(
                "[[package]]\nname = \"{plugin}\"\nversion = \"0.1.0\"\ndependencies = [\n{listed}]\n"
            ),
        ));
    }
    // Cargo's order: by name, then version.
    packages.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut out = header;
    for (_, _, block) in packages {
        out.push('\n');
        out.push_str(&block);
    }
    Ok(out)
}

/// The header (comments and `version = N`, with its trailing newline) and
/// the `[[package]]` blocks, each ending in one newline.
fn split_blocks(lock: &str) -> Result<(String, Vec<String>)> {
    let mut parts = lock.split("\n[[package]]\n");
    let header = parts.next().unwrap_or_default();
    if !header.contains("version = ") {
        bail!("the embedded Cargo.lock has no `version = N` header");
    }
    let blocks = parts
        .map(|body| format!("[[package]]\n{}\n", body.trim_end()))
        .collect();
    Ok((format!("{}\n", header.trim_end()), blocks))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"# This file is automatically @generated by Cargo.
# It is not intended for manual editing.
version = 4

[[package]]
name = "anyhow"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "aa"

[[package]]
name = "jinghzhu-plugin-sdk"
version = "0.1.0"
dependencies = [
 "wit-bindgen 0.61.1",
]

[[package]]
name = "tokio"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "bb"

[[package]]
name = "wit-bindgen"
version = "0.57.1"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "cc"

[[package]]
name = "wit-bindgen"
version = "0.61.1"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "dd"
dependencies = [
 "anyhow",
]
"#;

    #[test]
    fn keeps_the_sdk_closure_only() {
        let lock = from_workspace_lock(LOCK, "even", true).expect("lock");
        assert!(lock.starts_with("# This file is automatically @generated by Cargo."));
        assert!(lock.contains("version = 4\n\n[[package]]\nname = \"anyhow\""));
        assert!(lock.contains("name = \"wit-bindgen\"\nversion = \"0.61.1\""));
        assert!(
            !lock.contains("0.57.1\"\n"),
            "the other wit-bindgen is not ours:\n{lock}"
        );
        assert!(!lock.contains("tokio"));
        assert!(lock.contains("name = \"jinghzhu-plugin-sdk\""));
        assert!(lock.contains(
            "name = \"even\"\nversion = \"0.1.0\"\ndependencies = [\n \"jinghzhu-plugin-sdk\",\n]\n"
        ));
        let names: Vec<&str> = lock
            .lines()
            .filter_map(|l| l.strip_prefix("name = "))
            .collect();
        assert_eq!(
            names,
            [
                "\"anyhow\"",
                "\"even\"",
                "\"jinghzhu-plugin-sdk\"",
                "\"wit-bindgen\""
            ]
        );
        let git = from_workspace_lock(LOCK, "even", false).expect("lock");
        assert!(!git.contains("jinghzhu-plugin-sdk") && !git.contains("\"even\""));
        assert!(git.contains("name = \"wit-bindgen\""));
    }

    #[test]
    fn a_controller_plugin_locks_the_controller_sdk_and_serde() {
        let lock = for_controller_plugin("web", true).expect("lock");
        assert!(
            lock.contains("name = \"wasm-operator-controller-sdk\""),
            "{lock}"
        );
        assert!(lock.contains("name = \"serde_json\""), "{lock}");
        assert!(lock.contains(
            "name = \"web\"\nversion = \"0.1.0\"\ndependencies = [\n \"serde\",\n \"wasm-operator-controller-sdk\",\n]\n"
        ));
        assert!(!lock.contains("jinghzhu-plugin-sdk"));
    }

    #[test]
    fn the_embedded_lock_pins_wit_bindgen() {
        let lock = for_plugin("even", true).expect("lock");
        assert!(lock.contains("name = \"wit-bindgen\""), "{lock}");
        assert!(lock.contains("checksum = "));
    }
}
