//! Support for testing `examples/deploy` and the host as the Deployment runs
//! it: the Dockerfile's own `cargo build` command, the kustomize base
//! rendered with a real plugin, its RBAC, ServiceAccount and plugin ConfigMap
//! installed into a test namespace, and the `wasm-operator` binary started as
//! a separate process with the Deployment's environment (and a kubeconfig
//! for its ServiceAccount), scraped over HTTP and signalled like the kubelet
//! does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, EnvVar, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use local_control_plane::ControlPlane;
use local_control_plane::process::Supervised;
use openmetrics_parser::{MetricsExposition, OpenMetricsType, OpenMetricsValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::TestEnv;

/// `examples/deploy`.
pub fn deploy_dir() -> PathBuf {
    wasm_artifacts::workspace_root().join("examples/deploy")
}

fn dockerfile() -> Result<String> {
    dockerfile_of(&wasm_artifacts::workspace_root())
}

/// The Dockerfile of the checkout at `root`.
fn dockerfile_of(root: &Path) -> Result<String> {
    let path = root.join("examples/deploy/Dockerfile");
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// The builder stage's first `RUN cargo build …` line of the Dockerfile
/// (the serving host's), as argv.
pub fn dockerfile_build_command() -> Result<Vec<String>> {
    Ok(build_commands_in(&dockerfile()?)?.remove(0))
}

/// Every `RUN cargo build …` line of the builder stage, as argv, in order:
/// the serving host, then the compile helper (two builds, so the host's is
/// not given the helper's Cranelift by cargo's feature unification).
pub fn dockerfile_build_commands() -> Result<Vec<Vec<String>>> {
    build_commands_in(&dockerfile()?)
}

fn build_commands_in(dockerfile: &str) -> Result<Vec<Vec<String>>> {
    let commands: Vec<Vec<String>> = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("RUN "))
        .filter(|l| l.trim_start().starts_with("cargo build"))
        .map(|line| line.split_whitespace().map(str::to_string).collect())
        .collect();
    if commands.is_empty() {
        bail!("no `RUN cargo build` line in examples/deploy/Dockerfile");
    }
    Ok(commands)
}

/// Where the Dockerfile's runtime stage copies the binary from, as a path in
/// this workspace (`COPY --from=build <WORKDIR>/target/… …`).
pub fn dockerfile_binary() -> Result<PathBuf> {
    Ok(wasm_artifacts::workspace_root().join(binary_in_target(&dockerfile()?)?))
}

/// The compile helper the Dockerfile ships beside the host, as
/// [`host_binary`] builds it (the host finds it beside itself).
pub fn compile_helper_binary() -> PathBuf {
    host_binary().with_file_name("wasm-operator-compile")
}

/// The Dockerfile's binary relative to the workspace root (`target/…`).
fn binary_in_target(dockerfile: &str) -> Result<PathBuf> {
    Ok(binaries_in_target(dockerfile)?.remove(0))
}

/// Every binary the Dockerfile's runtime stage copies from the builder, in
/// order, relative to the workspace root (`target/…`).
fn binaries_in_target(dockerfile: &str) -> Result<Vec<PathBuf>> {
    let workdir = dockerfile
        .lines()
        .find_map(|l| l.trim().strip_prefix("WORKDIR "))
        .ok_or_else(|| anyhow!("no WORKDIR in the Dockerfile"))?
        .trim()
        .to_string();
    let sources: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("COPY --from=build "))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    if sources.is_empty() {
        bail!("no `COPY --from=build` in the Dockerfile");
    }
    sources
        .into_iter()
        .map(|source| {
            source
                .strip_prefix(&format!("{}/", workdir.trim_end_matches('/')))
                .map(PathBuf::from)
                .ok_or_else(|| anyhow!("{source} is not under WORKDIR {workdir}"))
        })
        .collect()
}

/// Builds the host exactly as the Dockerfile does (its `cargo build` line,
/// run in the workspace root), once per process, and returns the binary the
/// image would contain. Panics with cargo's output if the build fails.
///
/// The build runs in a target directory cached outside the repository
/// ([`dist_target_dir`]), so a fresh clone reuses the registry dependencies
/// an earlier build compiled (about 6 of the 15 minutes of a cold `dist`
/// build on a 2-core machine); the workspace's own crates are rebuilt when
/// another checkout built there last. The binary is then copied to where
/// the Dockerfile takes it from.
///
/// The whole-program LTO link is most of a warm build (about 9 minutes).
/// It proves only that the `dist` profile links, which depends on the
/// Dockerfile, the profiles, the locked dependencies and the toolchain, not
/// on our sources. So once the full build has passed for one digest of
/// those ([`DistBuildKey`]), later builds with the same digest run the same
/// command line with LTO off and 16 codegen units (cargo's
/// `CARGO_PROFILE_DIST_*` overrides, in a target directory of their own).
/// `WASM_OPERATOR_FULL_DIST_BUILD=1` always builds in full.
pub fn host_binary() -> PathBuf {
    static BUILT: BuiltOnce = OnceLock::new();
    built_once(&BUILT, || {
        build_as_the_dockerfile_does(&DistBuildKey::of_this_checkout()?)
    })
}

/// Where a test process keeps a binary it builds once ([`built_once`]).
pub type BuiltOnce = OnceLock<Result<PathBuf, String>>;

/// The binary `build` returns, built once per process for `slot`; panics
/// with the reason if it failed (the tests that need it cannot go on).
pub fn built_once(slot: &'static BuiltOnce, build: fn() -> Result<PathBuf>) -> PathBuf {
    match slot.get_or_init(|| build().map_err(|e| format!("{e:#}"))) {
        Ok(path) => path.clone(),
        Err(err) => panic!("{err}"),
    }
}

/// Runs the Dockerfile's build command (see [`host_binary`]) for this
/// checkout, whose key is `key`, and copies the binary to where the
/// Dockerfile takes it from.
pub fn build_as_the_dockerfile_does(key: &DistBuildKey) -> Result<PathBuf> {
    let root = wasm_artifacts::workspace_root();
    // A full build another test binary of this run made is the real thing:
    // use it (a no-op build) rather than compile everything again cheaper.
    let full = key.needs_full_build() || key.built_in_full_this_run();
    let target_dir = dist_target_dir(key, full)?;
    let started = Instant::now();
    let binary = dockerfile_binary()?;
    build_checkout_as_its_dockerfile_does(&root, &target_dir, full, &binary)?;
    if full {
        key.record_full_build()?;
    }
    let how = if full {
        "in full".to_string()
    } else {
        format!(
            "with {:?}: the full build passed before for digest {}",
            DistBuildKey::CHEAPER_PROFILE,
            key.digest
        )
    };
    eprintln!(
        "built the host as the Dockerfile does ({how}; target directory {}) in {:?}",
        target_dir.display(),
        started.elapsed()
    );
    Ok(binary)
}

/// Copies `from` to a temporary name beside `to` (this process's own) and
/// renames it, so a test never runs a half-written file.
fn copy_whole(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let partial = to.with_extension(format!("partial-{}", std::process::id()));
    std::fs::copy(from, &partial)
        .with_context(|| format!("copying {} to {}", from.display(), partial.display()))?;
    std::fs::rename(&partial, to)?;
    Ok(())
}

/// Runs the `cargo build` lines of the Dockerfile of the checkout at `root`
/// in `root`, into `target_dir` (`full`: as written; else with
/// [`DistBuildKey::CHEAPER_PROFILE`]), and copies the host binary it built
/// to `copy_to` and any other it ships (the compile helper) beside it. Holds `target_dir`'s `build.lock` from before the
/// `built-from` check until the copy is made, so builds of two checkouts
/// sharing the directory (this one's and [`crate::previous_host`]'s) take
/// turns and neither copies the binary the other one built.
pub fn build_checkout_as_its_dockerfile_does(
    root: &Path,
    target_dir: &Path,
    full: bool,
    copy_to: &Path,
) -> Result<()> {
    let dockerfile = dockerfile_of(root)?;
    let commands = build_commands_in(&dockerfile)?;
    let lock_path = target_dir.join("build.lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    // Cargo's file-time checks hold within one checkout: only a build from
    // another one makes the workspace's fingerprints untrustworthy.
    let stamp = target_dir.join("built-from");
    let built_here =
        std::fs::read(&stamp).is_ok_and(|from| from == root.as_os_str().as_encoded_bytes());
    if !built_here {
        forget_workspace_crates(root, target_dir)?;
    }
    // Before building: a build from here that fails halfway still counts.
    std::fs::write(&stamp, root.as_os_str().as_encoded_bytes())?;
    for argv in &commands {
        run_build_command(root, target_dir, full, argv)?;
    }
    for (i, relative) in binaries_in_target(&dockerfile)?.into_iter().enumerate() {
        let relative = relative
            .strip_prefix("target")
            .with_context(|| format!("{} is not under target/", relative.display()))?;
        let built = target_dir.join(relative);
        if !built.is_file() {
            bail!("{} was not produced by {commands:?}", built.display());
        }
        let to = match (i, built.file_name()) {
            (0, _) | (_, None) => copy_to.to_path_buf(),
            (_, Some(name)) => copy_to.with_file_name(name),
        };
        copy_whole(&built, &to)?;
    }
    drop(lock);
    Ok(())
}

/// Runs one `cargo build` line `argv` of a Dockerfile in `root`, into
/// `target_dir` (see [`build_checkout_as_its_dockerfile_does`]).
fn run_build_command(root: &Path, target_dir: &Path, full: bool, argv: &[String]) -> Result<()> {
    let mut command = Command::new(&argv[0]);
    // As the Dockerfile's shell runs it: no variables of the tests' cargo.
    wasm_artifacts::as_from_a_shell(&mut command)
        .args(&argv[1..])
        .current_dir(root)
        .env("CARGO_TARGET_DIR", target_dir);
    if !full {
        command.envs(DistBuildKey::CHEAPER_PROFILE);
    }
    let out = command
        .output()
        .with_context(|| format!("running {argv:?} in {}", root.display()))?;
    if !out.status.success() {
        bail!(
            "the Dockerfile's build command {argv:?} failed in {}:\n{}",
            root.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The repository's record of the digests ([`DistBuildKey`]) whose full
/// `dist` build passed on a developer's or CI machine (written with
/// `cargo run -p e2e-tests --bin dist-build -- --record`, committed with the
/// change that moved the digest). A machine that never built that digest in
/// full trusts it as it trusts its own stamp: the build it skips proves only
/// that the fat-LTO link of the same Dockerfile, profiles, `Cargo.lock` and
/// toolchain passes, and the cheaper build of the same command line still
/// runs. Any change to those four moves the digest, and the next run builds
/// in full again until the new digest is recorded.
pub const DIST_BUILD_RECORD: &str = "examples/deploy/dist-build.passed";

fn record_path() -> PathBuf {
    wasm_artifacts::workspace_root().join(DIST_BUILD_RECORD)
}

/// The digests a record lists: one per line, `#` comments and blank lines
/// aside.
fn recorded_digests(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Days a cached target directory may stay unused before it is removed.
const DIST_TARGET_KEEP_DAYS: u64 = 7;

/// What decides whether the `dist` profile builds, apart from our sources:
/// the Dockerfile, the `[profile.*]` tables of the workspace's `Cargo.toml` it reads,
/// `Cargo.lock` and `rustc -vV`.
pub struct DistBuildKey {
    /// Hex digest of all four.
    pub digest: String,
    /// The digest of `Cargo.lock` and `rustc -vV` only: what the compiled
    /// registry crates in a target directory depend on.
    dependencies: String,
}

impl DistBuildKey {
    /// The profile overrides of a build whose full form passed before: what
    /// it proves is that the Dockerfile's command line builds, not how fast
    /// the binary runs, so nothing is optimised. Measured on this 2-core
    /// machine from an empty target directory (sources fetched), one after
    /// the other: opt-level 1 345 s wall / 656 s CPU, opt-level 0 202 s /
    /// 366 s. The price is at run time: the unoptimised Cranelift in it
    /// compiles the example plugin in about 1.1 s instead of 0.2 s (the
    /// deploy and containment tests start it a few times). Incremental, as
    /// a debug build is: the host's crate changes in nearly every commit,
    /// and cargo keeps incremental compilation to the workspace's own
    /// crates, so the registry crates' fingerprints are those of the plain
    /// profile.
    pub const CHEAPER_PROFILE: [(&str, &str); 4] = [
        ("CARGO_PROFILE_DIST_LTO", "off"),
        ("CARGO_PROFILE_DIST_CODEGEN_UNITS", "16"),
        ("CARGO_PROFILE_DIST_OPT_LEVEL", "0"),
        ("CARGO_PROFILE_DIST_INCREMENTAL", "true"),
    ];

    /// The key of the checkout these tests run in.
    pub fn of_this_checkout() -> Result<Self> {
        Self::of_checkout(&wasm_artifacts::workspace_root())
    }

    /// The key of the checkout at `root`.
    pub fn of_checkout(root: &Path) -> Result<Self> {
        use sha2::{Digest as _, Sha256};
        let lock = std::fs::read(root.join("Cargo.lock")).context("reading Cargo.lock")?;
        let manifest =
            std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
        let rustc = Command::new("rustc")
            .arg("-vV")
            .current_dir(root)
            .output()
            .context("running rustc -vV")?;
        let hex = |hasher: Sha256| -> String {
            hasher.finalize()[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let mut dependencies = Sha256::new();
        dependencies.update(&lock);
        dependencies.update(&rustc.stdout);
        let mut all = dependencies.clone();
        all.update(dockerfile_of(root)?.as_bytes());
        all.update(profile_tables(&manifest).as_bytes());
        Ok(Self {
            digest: hex(all),
            dependencies: hex(dependencies),
        })
    }

    fn stamp(&self) -> PathBuf {
        local_control_plane::binaries::default_cache_root()
            .join("dist-build-passed")
            .join(&self.digest)
    }

    /// Whether this build must be the full one: its key never built in full
    /// here nor is recorded in the repository ([`DIST_BUILD_RECORD`]), or
    /// `WASM_OPERATOR_FULL_DIST_BUILD=1`.
    pub fn needs_full_build(&self) -> bool {
        std::env::var_os("WASM_OPERATOR_FULL_DIST_BUILD").is_some_and(|v| v == "1")
            || !(self.passed_here() || self.is_recorded())
    }

    /// Whether the full build passed on this machine for this key (its
    /// stamp), not merely in the repository's record.
    pub fn passed_here(&self) -> bool {
        self.stamp().is_file()
    }

    /// Whether [`DIST_BUILD_RECORD`] names this key's digest.
    pub fn is_recorded(&self) -> bool {
        std::fs::read_to_string(record_path())
            .is_ok_and(|text| recorded_digests(&text).any(|d| d == self.digest))
    }

    /// Writes this key's digest to [`DIST_BUILD_RECORD`] (replacing what it
    /// held: an older digest is one of an older `Cargo.lock`, profile,
    /// Dockerfile or toolchain), once the full build passed here. Returns
    /// whether the file changed.
    pub fn record_in_repository(&self) -> Result<bool> {
        if !self.passed_here() {
            bail!(
                "the full dist build has not passed on this machine for digest {}: run \
                 `WASM_OPERATOR_FULL_DIST_BUILD=1 cargo run -p e2e-tests --bin dist-build` first",
                self.digest
            );
        }
        if self.is_recorded() {
            return Ok(false);
        }
        let path = record_path();
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        let header: String = old
            .lines()
            .take_while(|l| l.starts_with('#') || l.trim().is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&path, format!("{header}{}\n", self.digest))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(true)
    }

    fn record_full_build(&self) -> Result<()> {
        let stamp = self.stamp();
        if let Some(parent) = stamp.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // The run (`tests/run.sh` sets WASM_OPERATOR_TEST_RUN) it passed in.
        let run = std::env::var("WASM_OPERATOR_TEST_RUN").unwrap_or_default();
        std::fs::write(&stamp, format!("the full dist build passed\nrun: {run}\n"))
            .with_context(|| format!("writing {}", stamp.display()))
    }

    /// Whether the full build passed earlier in this very test run (another
    /// test binary built it: its target directory holds this checkout's
    /// build, so building there again is a no-op).
    pub fn built_in_full_this_run(&self) -> bool {
        let Ok(run) = std::env::var("WASM_OPERATOR_TEST_RUN") else {
            return false;
        };
        !run.is_empty()
            && std::fs::read_to_string(self.stamp())
                .is_ok_and(|text| text.lines().any(|l| l == format!("run: {run}")))
    }
}

/// The `[profile.*]` tables the `dist` build reads: `dist`'s own and those
/// of the profiles it inherits from (`release`), with their `.package` and
/// `.build-override` tables; not `dev` or `test`, which the image's build
/// never uses.
fn profile_tables(manifest: &str) -> String {
    let mut chain = vec!["dist".to_owned()];
    while let Some(parent) = inherits(manifest, chain.last().map_or("", String::as_str)) {
        if chain.contains(&parent) || chain.len() > 8 {
            break;
        }
        chain.push(parent);
    }
    let read_by_dist = |header: &str| {
        chain.iter().any(|profile| {
            let name = format!("[profile.{profile}");
            header.starts_with(&format!("{name}]")) || header.starts_with(&format!("{name}."))
        })
    };
    let mut inside = false;
    let mut out = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            inside = read_by_dist(trimmed);
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The `inherits` of `[profile.<profile>]`, if it has one.
fn inherits(manifest: &str, profile: &str) -> Option<String> {
    let header = format!("[profile.{profile}]");
    let mut inside = false;
    for line in manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            inside = trimmed == header;
        } else if inside
            && let Some(value) = trimmed.strip_prefix("inherits")
            && let Some(value) = value.trim_start().strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// `<cache root>/cargo-target/<dependencies>[-cheaper-o0]`: the target
/// directory of the `dist` build, keyed by `Cargo.lock` and `rustc -vV`
/// (another lock file or toolchain gets its own directory; cargo's
/// fingerprints decide what is fresh inside one), with one of its own for
/// builds with [`DistBuildKey::CHEAPER_PROFILE`] (so switching does not
/// rebuild every registry crate). The cache root is the Kubernetes
/// binaries' one (`~/.cache/wasm-operator`). Directories unused for a week
/// are removed.
pub fn dist_target_dir(key: &DistBuildKey, full: bool) -> Result<PathBuf> {
    let parent = local_control_plane::binaries::default_cache_root().join("cargo-target");
    let name = if full {
        key.dependencies.clone()
    } else {
        format!("{}-cheaper-o0", key.dependencies)
    };
    let dir = parent.join(name);
    keep_in_use(&dir)?;
    Ok(dir)
}

/// Creates `dir` if need be, marks it used now (its `last-used` file) and
/// removes its siblings unused for a week: the cache directories keyed by
/// what they were built from (a lock file, a commit), whose older keys no
/// run asks for again.
pub fn keep_in_use(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    local_control_plane::binaries::stamp_used(dir)?;
    if let Some(parent) = dir.parent() {
        local_control_plane::binaries::remove_unused_dirs(
            parent,
            dir,
            DIST_TARGET_KEEP_DAYS,
            |_| true,
        );
    }
    Ok(())
}

/// Removes the fingerprints of the crates of the workspace at `root` from
/// `target_dir`, so cargo rebuilds them from that checkout's sources (done when another
/// checkout built there last, as its `built-from` file says). Cargo decides whether a
/// local crate is fresh by comparing file times, and a target directory
/// shared between checkouts could hold a build of another checkout's newer
/// sources. Registry crates (immutable, named by version and checksum) are
/// reused.
pub fn forget_workspace_crates(root: &Path, target_dir: &Path) -> Result<()> {
    let out = Command::new("cargo")
        .args(["metadata", "--no-deps", "--format-version", "1", "--locked"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let names: Vec<&str> = metadata["packages"]
        .as_array()
        .map(|packages| packages.iter().filter_map(|p| p["name"].as_str()).collect())
        .unwrap_or_default();
    for profile_dir in std::fs::read_dir(target_dir)?.flatten() {
        let Ok(entries) = std::fs::read_dir(profile_dir.path().join(".fingerprint")) else {
            continue;
        };
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let file_name = file_name.to_string_lossy();
            if names.iter().any(|name| is_fingerprint_of(&file_name, name)) {
                std::fs::remove_dir_all(entry.path())
                    .with_context(|| format!("removing {}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Whether a `.fingerprint` entry (`<package>-<16 hex digits>`) belongs to
/// `package` (and not to another package whose name starts the same way).
fn is_fingerprint_of(entry: &str, package: &str) -> bool {
    entry
        .strip_prefix(package)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|hash| hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Runs kubectl (the control plane's) as the admin.
pub fn kubectl(control_plane: &ControlPlane, args: &[&str]) -> Result<std::process::Output> {
    Command::new(&control_plane.binaries().kubectl)
        .arg("--kubeconfig")
        .arg(control_plane.kubeconfig_path())
        .args(args)
        .output()
        .context("running kubectl")
}

/// A copy of the kustomize base with a real plugin as its `plugin.wasm`
/// (the base expects it next to `kustomization.yaml`; it is not committed).
pub struct Kustomization {
    dir: tempfile::TempDir,
}

impl Kustomization {
    /// Copies `examples/deploy` and `plugin` into a temporary directory.
    pub fn with_plugin(plugin: &Path) -> Result<Self> {
        let dir = tempfile::TempDir::new()?;
        for entry in std::fs::read_dir(deploy_dir())? {
            let entry = entry?;
            if entry.file_type()?.is_file() && entry.file_name() != "plugin.wasm" {
                std::fs::copy(entry.path(), dir.path().join(entry.file_name()))?;
            }
        }
        std::fs::copy(plugin, dir.path().join("plugin.wasm"))
            .with_context(|| format!("copying {}", plugin.display()))?;
        Ok(Self { dir })
    }

    /// The directory to pass to `-k`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `kubectl kustomize`, one YAML value per object.
    pub fn render(&self, control_plane: &ControlPlane) -> Result<Vec<serde_yaml::Value>> {
        let dir = self.path().to_string_lossy().into_owned();
        let out = kubectl(control_plane, &["kustomize", &dir])?;
        if !out.status.success() {
            bail!(
                "kubectl kustomize failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8(out.stdout)?;
        let mut objects = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let mut value = <serde_yaml::Value as serde::Deserialize>::deserialize(doc)?;
            if !value.is_null() {
                unwrap_binary_data(&mut value);
                objects.push(value);
            }
        }
        Ok(objects)
    }
}

/// Applies a rendered chart as `helm install` would: the CRDs first
/// (server-side, from crds/), established, then the rest. The namespace
/// warns about pod templates that are not restricted, as the kustomize
/// base's namespace does. Returns the output of the second apply, which
/// must have succeeded.
pub fn apply_chart(
    cp: &ControlPlane,
    ns: &str,
    objects: &[serde_yaml::Value],
) -> anyhow::Result<std::process::Output> {
    let dir = tempfile::TempDir::new()?;
    let write = |file: &str, docs: Vec<&serde_yaml::Value>| -> anyhow::Result<String> {
        let path = dir.path().join(file);
        let text: Vec<String> = docs
            .into_iter()
            .map(serde_yaml::to_string)
            .collect::<Result<_, _>>()?;
        std::fs::write(&path, text.join("---\n"))?;
        Ok(path.to_string_lossy().into_owned())
    };
    let (crds, rest): (Vec<_>, Vec<_>) = objects
        .iter()
        .partition(|o| o["kind"].as_str() == Some("CustomResourceDefinition"));
    let crds = write("crds.yaml", crds)?;
    let rest = write("rest.yaml", rest)?;
    let apply = |file: &str| {
        kubectl(
            cp,
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager",
                "helm-e2e",
                "-f",
                file,
            ],
        )
    };
    let out = kubectl(
        cp,
        &[
            "label",
            "namespace",
            ns,
            "pod-security.kubernetes.io/warn=restricted",
        ],
    )?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = apply(&crds)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(
        cp,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &crds,
        ],
    )?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = apply(&rest)?;
    anyhow::ensure!(
        out.status.success(),
        "the chart was refused:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

/// `examples/deploy/helm/wasm-operator`.
pub fn helm_chart_dir() -> PathBuf {
    deploy_dir().join("helm/wasm-operator")
}

/// `helm template RELEASE examples/deploy/helm/wasm-operator --namespace
/// NAMESPACE --include-crds` with `args` (`--set …`, `--set-file …`), one
/// YAML value per object; Helm is installed once ([`local_control_plane::binaries::ensure_helm`]).
pub fn helm_template(
    release: &str,
    namespace: &str,
    args: &[&str],
) -> Result<Vec<serde_yaml::Value>> {
    let helm = local_control_plane::binaries::ensure_helm()?;
    let chart = helm_chart_dir();
    let out = Command::new(&helm)
        .args(["template", release])
        .arg(&chart)
        .args(["--namespace", namespace, "--include-crds"])
        .args(args)
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("wasm-operator-helm-cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("wasm-operator-helm-config"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("wasm-operator-helm-data"),
        )
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    if !out.status.success() {
        bail!(
            "helm template failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = <serde_yaml::Value as serde::Deserialize>::deserialize(doc)?;
        if !value.is_null() {
            objects.push(value);
        }
    }
    Ok(objects)
}

/// kustomize writes `binaryData` as base64 broken into 70-character lines;
/// the API server accepts that, k8s-openapi's decoder does not: join them.
fn unwrap_binary_data(object: &mut serde_yaml::Value) {
    if let Some(serde_yaml::Value::Mapping(data)) = object.get_mut("binaryData") {
        for (_, value) in data.iter_mut() {
            if let serde_yaml::Value::String(text) = value {
                text.retain(|c| !c.is_ascii_whitespace());
            }
        }
    }
}

/// The one object of `kind` in rendered manifests.
pub fn object_of<T: serde::de::DeserializeOwned>(
    objects: &[serde_yaml::Value],
    kind: &str,
) -> Result<T> {
    let mut found = objects.iter().filter(|o| o["kind"].as_str() == Some(kind));
    let first = found
        .next()
        .ok_or_else(|| anyhow!("no {kind} in the manifests"))?;
    if found.next().is_some() {
        bail!("more than one {kind} in the manifests");
    }
    Ok(serde_yaml::from_value(first.clone())?)
}

/// The manifests' RBAC, ServiceAccount and plugin ConfigMap, installed in a
/// test namespace, and how the Deployment runs the host.
pub struct Installed {
    /// The test namespace (stands in for `wasm-operator`).
    pub namespace: String,
    /// A kubeconfig for the Deployment's ServiceAccount (a TokenRequest token).
    pub kubeconfig: PathBuf,
    /// The Deployment's container environment.
    pub env: Vec<EnvVar>,
    /// The Deployment's container args.
    pub args: Vec<String>,
    /// The plugin ConfigMap's name.
    pub plugin_configmap: String,
}

/// Installs the manifests' ServiceAccount, Role, RoleBinding and plugin
/// ConfigMap into `env`'s namespace, and the ClusterRole bound there by a
/// RoleBinding (the ClusterRoleBinding would grant every namespace of the
/// shared control plane).
pub async fn install(env: &TestEnv, objects: &[serde_yaml::Value]) -> Result<Installed> {
    let ns = env.namespace.as_str();
    let client = env.client.clone();
    let post = PostParams::default();

    let cluster_role: ClusterRole = object_of(objects, "ClusterRole")?;
    Api::<ClusterRole>::all(client.clone())
        .patch(
            &cluster_role.name_any(),
            &PatchParams::apply("e2e-tests").force(),
            &Patch::Apply(&cluster_role),
        )
        .await?;
    let binding: ClusterRoleBinding = object_of(objects, "ClusterRoleBinding")?;
    let mut subjects = binding.subjects.clone().unwrap_or_default();
    for subject in &mut subjects {
        subject.namespace = Some(ns.to_string());
    }
    let scoped = RoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-cluster-role", binding.name_any())),
            ..Default::default()
        },
        role_ref: binding.role_ref.clone(),
        subjects: Some(subjects),
    };
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&post, &scoped)
        .await?;

    let mut account: ServiceAccount = object_of(objects, "ServiceAccount")?;
    account.metadata.namespace = Some(ns.to_string());
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&post, &account)
        .await?;
    let mut role: Role = object_of(objects, "Role")?;
    role.metadata.namespace = Some(ns.to_string());
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&post, &role)
        .await?;
    let mut role_binding: RoleBinding = object_of(objects, "RoleBinding")?;
    role_binding.metadata.namespace = Some(ns.to_string());
    for subject in role_binding.subjects.iter_mut().flatten() {
        subject.namespace = Some(ns.to_string());
    }
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&post, &role_binding)
        .await?;
    let mut plugin: ConfigMap = object_of(objects, "ConfigMap")?;
    plugin.metadata.namespace = Some(ns.to_string());
    let plugin_configmap = plugin.name_any();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&post, &plugin)
        .await?;

    let deployment: Deployment = object_of(objects, "Deployment")?;
    let container = deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .ok_or_else(|| anyhow!("the Deployment has no container"))?;
    let kubeconfig = env
        .control_plane
        .kubeconfig_for_service_account(ns, &account.name_any())
        .await?;
    Ok(Installed {
        namespace: ns.to_string(),
        kubeconfig,
        env: container.env.unwrap_or_default(),
        args: container.args.unwrap_or_default(),
        plugin_configmap,
    })
}

/// The `wasm-operator` binary running as one replica of the Deployment.
pub struct ProcessHost {
    /// Its `POD_NAME` (its identity in the Lease).
    pub name: String,
    process: Supervised,
    log_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ProcessHost {
    /// Starts `binary` with the Deployment's args and environment, as pod
    /// `name` in `installed.namespace`: the downward-API variables resolved,
    /// `$(VAR)` references expanded, and these test-only changes: watch only
    /// the test namespace (RBAC is bound there only), serve on a free port
    /// (`127.0.0.1:0`), a private precompiled-plugin cache, then `overrides`.
    /// Nothing else of the test's environment is passed on.
    pub fn start(
        binary: &Path,
        installed: &Installed,
        name: &str,
        overrides: &[(&str, &str)],
    ) -> Result<Self> {
        let dir = tempfile::TempDir::new()?;
        let mut vars: BTreeMap<String, String> = BTreeMap::new();
        let mut ordered: Vec<(String, String)> = Vec::new();
        for var in &installed.env {
            let value = if let Some(field) = var
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str())
            {
                match field {
                    "metadata.name" => name.to_string(),
                    "metadata.namespace" => installed.namespace.clone(),
                    other => bail!("the test does not know the downward-API field {other}"),
                }
            } else {
                expand(var.value.as_deref().unwrap_or_default(), &vars)
            };
            vars.insert(var.name.clone(), value.clone());
            ordered.push((var.name.clone(), value));
        }
        let cache = dir.path().join("precompiled");
        let mut set = |k: &str, v: &str| {
            ordered.retain(|(name, _)| name != k);
            ordered.push((k.to_string(), v.to_string()));
        };
        set("WASM_OPERATOR_NAMESPACE", &installed.namespace);
        set("WASM_OPERATOR_METRICS_ADDR", "127.0.0.1:0");
        set("WASM_OPERATOR_PRECOMPILED_DIR", &cache.to_string_lossy());
        set("KUBECONFIG", &installed.kubeconfig.to_string_lossy());
        set("HOME", &dir.path().to_string_lossy());
        if let Ok(filter) = std::env::var("RUST_LOG") {
            set("RUST_LOG", &filter);
        }
        for (k, v) in overrides {
            set(k, v);
        }
        ordered.retain(|(_, v)| !v.is_empty());

        let mut command = Command::new(binary);
        command.env_clear().args(&installed.args).envs(ordered);
        let log_path = dir.path().join(format!("{name}.log"));
        let process = Supervised::spawn(name, command, &log_path)
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self {
            name: name.to_string(),
            process,
            log_path,
            _dir: dir,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Its JSON log lines (the Deployment sets `--log-format json`).
    pub fn log_records(&self) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The records that explain who created what and when: leadership
    /// changes, the takeover barrier and every reconcile that created or
    /// deleted pods, one short line each (for assertion messages, whose end
    /// is what CI shows).
    pub fn timeline(&self) -> String {
        let mut out = String::new();
        for r in self.log_records() {
            let message = r["fields"]["message"].as_str().unwrap_or_default();
            let fields = &r["fields"];
            let changed = |f: &str| fields[f].as_str().is_some_and(|v| v != "[]");
            let interesting = message.starts_with("leader election")
                || message.starts_with("after taking over")
                || (message == "actions applied" && (changed("created") || changed("deleted")))
                || r["level"] == "WARN"
                || r["level"] == "ERROR";
            if !interesting {
                continue;
            }
            let ts = r["timestamp"].as_str().unwrap_or_default();
            let time = ts.split('T').nth(1).unwrap_or(ts);
            let mut extra: Vec<String> = Vec::new();
            if let Some(map) = fields.as_object() {
                for (k, v) in map {
                    if k != "message" {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                        extra.push(format!("{k}={v}"));
                    }
                }
            }
            out.push_str(&format!(
                "{} {time} {message} {}\n",
                self.name,
                extra.join(" ")
            ));
        }
        out
    }

    /// How many log records carry `message`.
    pub fn count_logged(&self, message: &str) -> usize {
        self.log_records()
            .iter()
            .filter(|r| r["fields"]["message"].as_str() == Some(message))
            .count()
    }

    /// The address it serves on, from its own log line (the bound port, not `:0`).
    pub async fn metrics_addr(&mut self, timeout: Duration) -> Result<SocketAddr> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(addr) = self.log_records().iter().find_map(|r| {
                (r["fields"]["message"]
                    .as_str()?
                    .starts_with("serving /metrics"))
                .then(|| r["fields"]["addr"].as_str()?.parse().ok())
                .flatten()
            }) {
                return Ok(addr);
            }
            if let Some(status) = self.process.exit_status() {
                bail!(
                    "{} exited ({status}) before serving:\n{}",
                    self.name,
                    self.process.log_tail(30)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} logged no metrics address within {timeout:?}:\n{}",
                    self.name,
                    self.process.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET path` on its endpoint: (status code, body).
    pub async fn get(&mut self, path: &str) -> Result<(u16, String)> {
        let addr = self.metrics_addr(Duration::from_secs(60)).await?;
        http_get(addr, path).await
    }

    /// Scrapes `/metrics` and parses it as OpenMetrics.
    pub async fn scrape(&mut self) -> Result<Scrape> {
        let (code, body) = self.get("/metrics").await?;
        if code != 200 {
            bail!("/metrics answered {code}: {body}");
        }
        Scrape::parse(&body)
    }

    /// Whether it reports leading (`leader_election_master_status` = 1).
    pub async fn is_leading(&mut self) -> Result<bool> {
        Ok(self.scrape().await?.sum("leader_election_master_status") == 1.0)
    }

    /// Sends SIGKILL (a crash, an OOM kill, a node lost).
    pub fn kill9(&self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGKILL) };
    }

    /// Sends SIGTERM (what the kubelet sends first).
    pub fn sigterm(&self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
    }

    /// Waits for it to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.exit_status() {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not exit within {timeout:?}:\n{}",
                    self.name,
                    self.process.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Resident memory (VmRSS) in KiB, while it runs.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    }

    /// Waits until `/readyz` answers 200 (60 s at most; the error shows
    /// the last answer and the log's tail).
    pub async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (code, body) = self.get("/readyz").await?;
            if code == 200 {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!("{} not ready: {body}\n{}", self.name, self.log_tail(20));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The last lines of its output (for failure messages).
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }
}

/// Expands `$(NAME)` references to earlier variables, as the kubelet does.
fn expand(value: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = value.to_string();
    for (name, v) in vars {
        out = out.replace(&format!("$({name})"), v);
    }
    out
}

/// A minimal HTTP/1.1 GET (the endpoint answers with a Content-Length).
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw)).await??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("not an HTTP response: {text}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("no status code in {head}"))?;
    Ok((code, body.to_string()))
}

/// A parsed `/metrics` exposition.
pub struct Scrape {
    /// What the parser made of it.
    pub exposition: MetricsExposition<OpenMetricsType, OpenMetricsValue>,
}

impl Scrape {
    /// Parses OpenMetrics text (with a real parser: `openmetrics-parser`).
    pub fn parse(text: &str) -> Result<Self> {
        let exposition = openmetrics_parser::openmetrics::parse_openmetrics(text)
            .map_err(|e| anyhow!("/metrics is not valid OpenMetrics: {e:?}\n{text}"))?;
        Ok(Self { exposition })
    }

    /// The family `name` (OpenMetrics family names carry no `_total`).
    pub fn family(
        &self,
        name: &str,
    ) -> Result<&openmetrics_parser::MetricFamily<OpenMetricsType, OpenMetricsValue>> {
        self.exposition
            .families
            .get(name)
            .ok_or_else(|| anyhow!("no metric family {name}"))
    }

    /// The values of `name`'s samples whose labels include `labels`.
    pub fn values(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let Ok(family) = self.family(name) else {
            return Vec::new();
        };
        family
            .iter_samples()
            .filter(|sample| {
                sample.get_labelset().is_ok_and(|set| {
                    labels
                        .iter()
                        .all(|(k, v)| set.iter().any(|(sk, sv)| sk == k && sv == v))
                })
            })
            .map(|sample| sample_value(&sample.value))
            .collect()
    }

    /// The sum of `name`'s values (a counter's totals, a histogram's counts).
    pub fn sum(&self, name: &str) -> f64 {
        self.values(name, &[]).iter().sum()
    }
}

fn sample_value(value: &OpenMetricsValue) -> f64 {
    match value {
        OpenMetricsValue::Gauge(n)
        | OpenMetricsValue::Unknown(n)
        | OpenMetricsValue::StateSet(n) => n.as_f64(),
        OpenMetricsValue::Counter(c) => c.value.as_f64(),
        OpenMetricsValue::Histogram(h) | OpenMetricsValue::GaugeHistogram(h) => {
            h.count.map_or(0.0, |c| c as f64)
        }
        OpenMetricsValue::Summary(s) => s.count.map_or(0.0, |c| c as f64),
        OpenMetricsValue::Info => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::{
        binaries_in_target, build_commands_in, is_fingerprint_of, profile_tables, recorded_digests,
    };

    #[test]
    fn the_dockerfile_builds_the_host_and_its_compile_helper_apart_and_ships_both() {
        let dockerfile = super::dockerfile().expect("the Dockerfile");
        let commands = build_commands_in(&dockerfile).expect("build lines");
        let packages: Vec<&str> = commands
            .iter()
            .map(|argv| {
                let at = argv.iter().position(|a| a == "-p").expect("-p") + 1;
                argv[at].as_str()
            })
            .collect();
        // One command each: one for both would unify the helper's
        // Cranelift into the host.
        assert_eq!(packages, ["wasm-operator", "wasm-operator-compile"]);
        let binaries = binaries_in_target(&dockerfile).expect("COPY lines");
        assert_eq!(
            binaries,
            [
                std::path::PathBuf::from("target/dist/wasm-operator"),
                std::path::PathBuf::from("target/dist/wasm-operator-compile")
            ]
        );
        assert!(dockerfile.contains("/usr/local/bin/wasm-operator-compile"));
    }

    #[test]
    fn a_record_lists_digests_beside_comments_and_blank_lines() {
        let text = "# header\n\n  a1b2c3d4e5f60718  \n# old\n0011223344556677\n";
        assert_eq!(
            recorded_digests(text).collect::<Vec<_>>(),
            ["a1b2c3d4e5f60718", "0011223344556677"]
        );
        assert_eq!(recorded_digests("# nothing yet\n").count(), 0);
    }

    #[test]
    fn the_build_key_reads_only_the_profile_tables() {
        let manifest = "[workspace]\nmembers = [\"host\"]\n\n[profile.release]\nstrip = \"debuginfo\"\n\n[profile.dist]\ninherits = \"release\"\nlto = \"fat\"\n[patch.crates-io]\nfoo = { path = \"x\" }\n";
        let tables = profile_tables(manifest);
        assert_eq!(
            tables,
            "[profile.release]\nstrip = \"debuginfo\"\n\n[profile.dist]\ninherits = \"release\"\nlto = \"fat\"\n"
        );
        // A change outside the profiles leaves the key alone; one inside moves it.
        assert_eq!(profile_tables(&manifest.replace("host", "other")), tables);
        assert_ne!(profile_tables(&manifest.replace("fat", "thin")), tables);
        // Profiles the dist build does not read leave it alone too; the
        // package overrides of one it inherits from do not.
        let with_dev = format!(
            "{manifest}[profile.dev]\ndebug = false\n[profile.dev.package.wasmparser]\nopt-level = 3\n"
        );
        assert_eq!(profile_tables(&with_dev), tables);
        let with_release_package =
            format!("{manifest}[profile.release.package.foo]\nopt-level = \"s\"\n");
        assert_ne!(profile_tables(&with_release_package), tables);
        assert!(profile_tables(&with_release_package).ends_with("opt-level = \"s\"\n"));
    }

    #[test]
    fn a_fingerprint_belongs_to_the_package_named_before_its_hash() {
        assert!(is_fingerprint_of(
            "wasm-operator-0829e123dc5cdf49",
            "wasm-operator"
        ));
        assert!(is_fingerprint_of(
            "replicaset-logic-d86aac8659f1cc46",
            "replicaset-logic"
        ));
        // Another package whose name starts the same way.
        assert!(!is_fingerprint_of(
            "wasm-operator-sdk-0829e123dc5cdf49",
            "wasm-operator"
        ));
        assert!(!is_fingerprint_of("wasm-encoder-03d7caf8b44ccc92", "wasm"));
        // Not a fingerprint entry at all.
        assert!(!is_fingerprint_of("wasm-operator", "wasm-operator"));
        assert!(!is_fingerprint_of(
            "wasm-operator-0829e123dc5cdf4",
            "wasm-operator"
        ));
        assert!(!is_fingerprint_of(
            "wasm-operator-0829e123dc5cdf4z",
            "wasm-operator"
        ));
    }
}
