//! Builds the workspace's Wasm plugins for tests and benchmarks, once per
//! process, and returns the artifact's path.
//!
//! Builds without features go to the workspace's `target/` (the same files
//! `tests/setup.sh` and the README commands produce). Feature variants (e.g.
//! the example plugin with `v2`) build into their own target directory,
//! `target/wasm-artifacts/<package>-<features>/`, so variants never
//! overwrite each other or the default artifacts. Running cargo from inside
//! `cargo test` is fine: cargo releases the build lock while tests run.
//!
//! ```no_run
//! use wasm_artifacts::{Toolchain, build};
//! let wasm = build("replicaset-plugin", &[], Toolchain::Wasip2);
//! assert!(wasm.ends_with("replicaset_plugin.wasm"));
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// How a plugin is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Toolchain {
    /// `cargo build --release --target wasm32-wasip2`: rustc emits a component.
    Wasip2,
    /// `cargo component build --release`: wasm32-wasip1 plus the WASI
    /// adapter, wrapped into a component by cargo-component.
    CargoComponent,
}

impl Toolchain {
    /// The target triple whose directory holds the artifact.
    pub fn triple(self) -> &'static str {
        match self {
            Toolchain::Wasip2 => "wasm32-wasip2",
            Toolchain::CargoComponent => "wasm32-wasip1",
        }
    }
}

/// Why a build failed.
#[derive(Debug, Clone)]
pub struct BuildError {
    /// What was built.
    pub what: String,
    /// What to do about it.
    pub hint: String,
    /// Cargo's stderr (or the spawn error).
    pub output: String,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "building {} failed: {}\n{}",
            self.what, self.hint, self.output
        )
    }
}

impl std::error::Error for BuildError {}

/// Makes `cmd` (a `cargo`, or a shell that runs one) see the environment a
/// shell would give it: without the variables cargo sets for the program it
/// runs (`cargo test` and the test runner set `CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*`, ... for each test binary), without the flags meant for the
/// tests' own build, and with everything that configures cargo
/// (`CARGO_HOME`, `CARGO_TARGET_DIR`, ...) kept. Build scripts watch some
/// of those variables: ring's watches `CARGO_MANIFEST_DIR`, so the README
/// tour's `cargo run` with it set rebuilt ring, rustls, kube and the host,
/// and the doc tests' build rebuilt them back, in every CI run.
pub fn as_from_a_shell(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if is_set_by_cargo_for_the_program(name) {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
}

/// Variables cargo sets when it runs a binary, test or build script (as
/// opposed to those that configure cargo, like `CARGO_HOME` or `CARGO_TARGET_DIR`).
fn is_set_by_cargo_for_the_program(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || name.starts_with("CARGO_MANIFEST_")
        || name.starts_with("CARGO_CFG_")
        || matches!(
            name,
            "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    here.canonicalize().unwrap_or(here)
}

/// Builds `package` with `features` (once per process) and returns the
/// `.wasm` path. Panics with the fix when the toolchain is missing: tests
/// cannot go on without it.
pub fn build(package: &str, features: &[&str], toolchain: Toolchain) -> PathBuf {
    match try_build(package, features, toolchain) {
        Ok(path) => path,
        Err(err) => panic!("{err}"),
    }
}

/// Like [`build`], returning the error instead of panicking. A failure is
/// remembered too, so a broken toolchain is reported once, not per test.
pub fn try_build(
    package: &str,
    features: &[&str],
    toolchain: Toolchain,
) -> Result<PathBuf, BuildError> {
    type Key = (String, Vec<String>, Toolchain);
    static BUILT: OnceLock<Mutex<HashMap<Key, Result<PathBuf, BuildError>>>> = OnceLock::new();
    let mut sorted: Vec<String> = features.iter().map(|f| f.to_string()).collect();
    sorted.sort();
    sorted.dedup();
    let key = (package.to_string(), sorted.clone(), toolchain);
    // Held during the build: concurrent tests wait for the one build.
    let mut built = BUILT
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    built
        .entry(key)
        .or_insert_with(|| run_build(package, &sorted, toolchain))
        .clone()
}

/// The target directory for a build of `package` with `features`.
pub fn target_dir(package: &str, features: &[String]) -> PathBuf {
    let target = workspace_root().join("target");
    if features.is_empty() {
        target
    } else {
        target
            .join("wasm-artifacts")
            .join(format!("{package}-{}", features.join("-")))
    }
}

fn run_build(
    package: &str,
    features: &[String],
    toolchain: Toolchain,
) -> Result<PathBuf, BuildError> {
    let what = if features.is_empty() {
        format!("{package} ({toolchain:?})")
    } else {
        format!(
            "{package} with features {} ({toolchain:?})",
            features.join(",")
        )
    };
    let target_dir = target_dir(package, features);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    as_from_a_shell(&mut cmd);
    match toolchain {
        Toolchain::Wasip2 => cmd.args(["build", "--release", "--target", "wasm32-wasip2"]),
        Toolchain::CargoComponent => cmd.args(["component", "build", "--release"]),
    };
    cmd.current_dir(workspace_root())
        .args(["-p", package])
        .arg("--target-dir")
        .arg(&target_dir);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let output = cmd.output().map_err(|err| BuildError {
        what: what.clone(),
        hint: "could not run cargo".into(),
        output: err.to_string(),
    })?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(BuildError {
            what,
            hint: hint(&stderr).into(),
            output: stderr,
        });
    }
    let artifact = target_dir
        .join(toolchain.triple())
        .join("release")
        .join(format!("{}.wasm", package.replace('-', "_")));
    if !artifact.is_file() {
        return Err(BuildError {
            what,
            hint: format!("cargo succeeded but {} is missing", artifact.display()),
            output: stderr,
        });
    }
    Ok(artifact)
}

/// A plugin language other than Rust: the replicaset plugin of
/// `plugins/python`, `plugins/js` or `plugins/go`, built by that
/// directory's `build.sh` with the toolchain `tests/setup.sh` installs
/// (componentize-py; componentize-js from `npm ci`; Go with wit-bindgen and
/// wasm-tools from crates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// `plugins/python` (componentize-py 0.25.1).
    Python,
    /// `plugins/js` (componentize-js 0.23.0).
    JavaScript,
    /// `plugins/go` (Go 1.26, wasip1 reactor, wasm-tools 1.263.0).
    Go,
}

impl Language {
    /// Every one, in the order tests use them.
    pub const ALL: [Language; 3] = [Language::Python, Language::JavaScript, Language::Go];

    /// The plugin's directory under `plugins/`.
    pub fn dir(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "js",
            Language::Go => "go",
        }
    }

    /// The name the plugin reports in `info()` (also the artifact's stem).
    pub fn plugin_name(self) -> &'static str {
        match self {
            Language::Python => "replicaset-py",
            Language::JavaScript => "replicaset-js",
            Language::Go => "replicaset-go",
        }
    }
}

/// Builds the replicaset plugin of `language` into
/// `target/plugins/<plugin-name>.wasm` and returns the path; panics with the
/// fix when the toolchain is missing. The build is skipped when the artifact
/// was built from the same SDK, plugin, `wit/0.2` and build script, by
/// content (`<artifact>.inputs` holds their digest): a build takes several
/// seconds, and the host's compile of a rebuilt component many more.
pub fn build_language(language: Language) -> PathBuf {
    match try_build_language(language) {
        Ok(path) => path,
        Err(err) => panic!("{err}"),
    }
}

/// Like [`build_language`], returning the error (remembered per process).
pub fn try_build_language(language: Language) -> Result<PathBuf, BuildError> {
    static BUILT: OnceLock<Mutex<HashMap<Language, Result<PathBuf, BuildError>>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    built
        .entry(language)
        .or_insert_with(|| run_language_build(language))
        .clone()
}

/// Feeds every file under `dir` (skipping `node_modules`, `build`,
/// `__pycache__`, `types` and `.wit-go-runtime`, a link into the cache that
/// `toolchain.sh`'s digest names), its path relative to `root` and its bytes,
/// in name order, to `hasher`.
fn hash_tree(root: &Path, dir: &Path, hasher: &mut impl Hasher) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.flatten().collect();
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let path = entry.path();
        if matches!(
            entry.file_name().to_str(),
            Some("node_modules" | "build" | "__pycache__" | "types" | ".wit-go-runtime")
        ) {
            continue;
        }
        if path.is_dir() {
            hash_tree(root, &path, hasher)?;
        } else {
            path.strip_prefix(root).unwrap_or(&path).hash(hasher);
            std::fs::read(&path)?.hash(hasher);
        }
    }
    Ok(())
}

/// A digest of what a language build reads from the repository: the
/// plugin's directories (its sources, the SDK, `build.sh`, which names the
/// toolchain's version, and for JavaScript the npm lock file), `wit/0.2`
/// and the build's extra flags.
fn language_inputs(root: &Path, dirs: &[&Path], flags: &[String]) -> Option<String> {
    let mut hasher = std::hash::DefaultHasher::new();
    for dir in dirs {
        hash_tree(root, dir, &mut hasher).ok()?;
    }
    hash_tree(root, &root.join("wit").join("0.2"), &mut hasher).ok()?;
    flags.hash(&mut hasher);
    Some(format!("{:016x}", hasher.finish()))
}

fn run_language_build(language: Language) -> Result<PathBuf, BuildError> {
    let root = workspace_root();
    let plugin_dir = root.join("plugins").join(language.dir());
    let artifact = language_artifact(language.plugin_name());
    let what = format!("{} ({})", language.plugin_name(), plugin_dir.display());
    // Keyed by content, not file times: a fresh clone's files are all new,
    // and componentize builds are not reproducible (a rebuild gets another
    // digest, so the host compiles the 18 MB Python plugin again).
    let inputs = language_inputs(&root, &[&plugin_dir], &[]);
    let build = plugin_dir.join("build.sh");
    run_script_build(&what, &build, &[], &artifact, inputs)
}

/// `target/plugins/<name>.wasm`.
fn language_artifact(name: &str) -> PathBuf {
    workspace_root()
        .join("target")
        .join("plugins")
        .join(format!("{name}.wasm"))
}

/// Runs `bash SCRIPT ARTIFACT ARGS...` in the workspace root unless
/// `artifact` was built from the same `inputs` (its `.inputs` stamp).
fn run_script_build(
    what: &str,
    script: &Path,
    args: &[&str],
    artifact: &Path,
    inputs: Option<String>,
) -> Result<PathBuf, BuildError> {
    let root = workspace_root();
    let stamp = artifact.with_extension("wasm.inputs");
    if artifact.is_file() && inputs.is_some() && std::fs::read_to_string(&stamp).ok() == inputs {
        return Ok(artifact.to_path_buf());
    }
    let output = as_from_a_shell(&mut Command::new("bash"))
        .arg(script)
        .arg(artifact)
        .args(args)
        .current_dir(&root)
        .output()
        .map_err(|err| BuildError {
            what: what.to_string(),
            hint: "could not run bash".into(),
            output: err.to_string(),
        })?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() || !artifact.is_file() {
        let hint = if stderr.contains("run tests/setup.sh") {
            "the toolchain is missing: run tests/setup.sh"
        } else {
            "see the build's output below"
        };
        return Err(BuildError {
            what: what.to_string(),
            hint: hint.into(),
            output: stderr,
        });
    }
    if let Some(inputs) = inputs {
        // Best effort: without the stamp the next run builds again.
        let _ = std::fs::write(&stamp, inputs);
    }
    Ok(artifact.to_path_buf())
}

/// Builds a Go plugin whose main package is `main_dir` (relative to the
/// workspace root, in `plugins/go`'s module or one that replaces it, like
/// `tests/plugins/misbehaving-go`) into `target/plugins/<name>.wasm` with
/// `plugins/go/build.sh`, passing `go_flags` to `go build` (e.g. `-tags`);
/// once per process, and not at all when the artifact was built from the
/// same sources, SDK, WIT and flags. Panics with the fix when the toolchain
/// is missing.
pub fn build_go_plugin(main_dir: &str, name: &str, go_flags: &[&str]) -> PathBuf {
    type Key = (String, String, Vec<String>);
    static BUILT: OnceLock<Mutex<HashMap<Key, Result<PathBuf, BuildError>>>> = OnceLock::new();
    let flags: Vec<String> = go_flags.iter().map(|f| f.to_string()).collect();
    let key = (main_dir.to_string(), name.to_string(), flags.clone());
    let mut built = BUILT
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let result = built
        .entry(key)
        .or_insert_with(|| {
            let root = workspace_root();
            let sdk_dir = root.join("plugins").join("go");
            let main = root.join(main_dir);
            let inputs = language_inputs(&root, &[&sdk_dir, &main], &flags);
            let mut args = vec![main.to_str().unwrap_or(main_dir)];
            args.extend(go_flags);
            let what = format!("{name} ({main_dir})");
            run_script_build(
                &what,
                &sdk_dir.join("build.sh"),
                &args,
                &language_artifact(name),
                inputs,
            )
        })
        .clone();
    match result {
        Ok(path) => path,
        Err(err) => panic!("{err}"),
    }
}

/// What to do about a failed build, from cargo's stderr.
fn hint(stderr: &str) -> &'static str {
    if stderr.contains("no such command: `component`")
        || stderr.contains("no such subcommand: `component`")
    {
        "cargo-component is missing: run tests/setup.sh (it installs cargo-component)"
    } else if stderr.contains("may not be installed")
        || stderr.contains("can't find crate for `core`")
        || stderr.contains("can't find crate for `std`")
    {
        "a wasm target is missing: run tests/setup.sh (it runs `rustup target add wasm32-wasip2 wasm32-wasip1`)"
    } else {
        "see cargo's output below"
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_nested_cargo_drops_what_cargo_sets_for_programs_only() {
        assert!(super::is_set_by_cargo_for_the_program("CARGO_MANIFEST_DIR"));
        assert!(super::is_set_by_cargo_for_the_program("CARGO_PKG_VERSION"));
        assert!(super::is_set_by_cargo_for_the_program(
            "CARGO_BIN_EXE_scale-bench"
        ));
        assert!(!super::is_set_by_cargo_for_the_program("CARGO_HOME"));
        assert!(!super::is_set_by_cargo_for_the_program("CARGO_TARGET_DIR"));
        assert!(!super::is_set_by_cargo_for_the_program("CARGO_INCREMENTAL"));
    }

    use super::*;

    #[test]
    fn hints_name_the_setup_script() {
        assert!(hint("error: no such command: `component`").contains("tests/setup.sh"));
        assert!(
            hint("note: the `wasm32-wasip2` target may not be installed")
                .contains("rustup target add")
        );
        assert_eq!(
            hint("error[E0308]: mismatched types"),
            "see cargo's output below"
        );
    }

    #[test]
    fn variants_get_their_own_target_dir() {
        let plain = target_dir("replicaset-plugin", &[]);
        let v2 = target_dir("replicaset-plugin", &["v2".to_string()]);
        assert!(plain.ends_with("target"));
        assert!(v2.ends_with("target/wasm-artifacts/replicaset-plugin-v2"));
    }
}
