//! `wasm-operator new`: scaffolds a standalone plugin crate anywhere; with
//! `--lang python`, `--lang js` or `--lang go` a Python, JavaScript or Go
//! project instead ([`languages`]); with `--kind GROUP/VERSION/KIND --owns
//! KINDS` a contract 0.3 controller plugin of any kind ([`controller`],
//! its kinds read by [`kinds`]; in Go with `--lang go`: [`go_controller`]).
//!
//! What it may import: `runtime/` (the WIT it embeds) and the shared
//! types; only `cli.rs` sits above it.
//!
//! The crate is its own cargo workspace with: `Cargo.toml` (cdylib + rlib,
//! the SDK as a dependency), a `Cargo.lock` pinning the SDK's dependencies
//! to the versions this host was built with ([`lockfile`]), `wit/operator.wit`
//! (the WIT it compiles against, for reference: the SDK generates the
//! bindings from the same file), `src/lib.rs` with the logic in a testable
//! `pub fn reconcile` and native unit tests, one golden fixture, and a
//! README with the commands to build, test and run it. Every file is
//! embedded in the binary, so `new` works from an installed `wasm-operator`.
//! The new crate becomes a git repository with the scaffold staged ([`git`]),
//! and the next steps it prints name this very binary (by its path when it
//! is not the `wasm-operator` on `PATH`), so they run as printed.
//!
//! The SDK comes from, in this order of preference for a release:
//! - a git dependency on this repository at the tag of this host's version
//!   (`v<version>`; the default), or at `--sdk-rev`, from `--sdk-git`;
//! - a local checkout (`--sdk-path`): what tests and in-repo users use, and
//!   the only choice without access to the git host.

/// `&[(path, text)]` of the files `$file` under the repository's `$dir`,
/// embedded in this binary.
macro_rules! embed {
    ($dir:literal, [$($file:literal),* $(,)?]) => {
        &[$(($file, include_str!(concat!("../../../", $dir, "/", $file)))),*]
    };
}

pub mod controller;
pub mod git;
mod go_common;
pub mod go_controller;
pub mod kinds;
pub mod languages;
pub mod lockfile;

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

pub use languages::Lang;

// The Rust SDK targets contract 0.2: the scaffold embeds that WIT.
use crate::runtime::bindings::v2::WIT_PACKAGE;

/// The SDK's package name.
pub const SDK_PACKAGE: &str = "jinghzhu-plugin-sdk";

/// This host's version: the SDK tag a scaffolded plugin depends on by default.
pub const HOST_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The repository the SDK is fetched from by default.
pub const DEFAULT_SDK_GIT: &str = env!("CARGO_PKG_REPOSITORY");

const CARGO_TOML: &str = include_str!("template/Cargo.toml.tmpl");
const README: &str = include_str!("template/README.md.tmpl");
const LIB_RS: &str = include_str!("template/lib.rs.tmpl");
const GITIGNORE: &str = include_str!("template/gitignore");
const WIT: &str = include_str!("../../../wit/0.2/operator.wit");
const FIXTURE_INPUT: &str = include_str!("template/fixtures/scale-up/input.yaml");
const FIXTURE_EXPECTED: &str = include_str!("template/fixtures/scale-up/expected.yaml");
const FIXTURE_NOW: &str = include_str!("template/fixtures/scale-up/now");

/// Options of `wasm-operator new`.
#[derive(Debug, Clone, clap::Args)]
pub struct NewArgs {
    /// The plugin's crate name (lowercase letters, digits, `-` and `_`,
    /// starting with a letter). The `.wasm` file is named after it.
    pub name: String,
    /// The language: a Rust crate, or a Python (componentize-py),
    /// JavaScript (componentize-js) or Go (stock Go and wasm-tools) project
    /// carrying its SDK.
    #[arg(long, alias = "language", value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// A controller of this parent kind instead of a Jinghzhu plugin: a
    /// contract 0.3 plugin (world `controller`) for a PluginController,
    /// e.g. `cache.example.com/v1alpha1/Memcached` (a namespaced custom
    /// resource of yours; `new` writes a starting CRD for it).
    #[arg(long, value_name = "GROUP/VERSION/KIND")]
    pub kind: Option<String>,
    /// With --kind: the kinds it creates, one each, e.g.
    /// `Deployment,Service`. Common built-in kinds by name (Deployment,
    /// StatefulSet, DaemonSet, Job, CronJob, Pod, Service, ConfigMap,
    /// PersistentVolumeClaim, Ingress, ...), any other as
    /// `group/version/Kind`.
    #[arg(long, value_name = "KINDS", value_delimiter = ',')]
    pub owns: Vec<String>,
    /// With --kind: a child kind that carries authority (`Secret`,
    /// `ServiceAccount`, `Role.rbac.authorization.k8s.io`, ...), named as
    /// the host's `run --allow-child-kind` names it; the host must be
    /// started with the same flag.
    #[arg(
        long = "allow-child-kind",
        value_name = "KIND[.GROUP]",
        value_delimiter = ','
    )]
    pub allow_child_kinds: Vec<String>,
    /// The directory to create (default: ./NAME). It must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    pub path: Option<PathBuf>,
    /// Use the SDK from this local checkout (the repository root or its
    /// plugins/sdk) instead of a git dependency.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["sdk_git", "sdk_rev"])]
    pub sdk_path: Option<PathBuf>,
    /// The git repository holding the SDK (default: this host's repository).
    #[arg(long, value_name = "URL")]
    pub sdk_git: Option<String>,
    /// A git revision (commit, or a tag/branch name) of the SDK repository
    /// instead of the tag `v<host version>`.
    #[arg(long, value_name = "REV")]
    pub sdk_rev: Option<String>,
    /// Do not make the new crate a git repository (by default it becomes one,
    /// with the scaffold staged, unless it lies inside a repository already).
    #[arg(long)]
    pub no_git: bool,
}

/// Where a scaffolded plugin gets the SDK from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdkSource {
    /// A git dependency.
    Git {
        /// Repository URL.
        url: String,
        /// The reference.
        reference: GitReference,
    },
    /// A path dependency on a local checkout's `plugins/sdk` (canonical).
    Path(PathBuf),
}

/// Which commit of the SDK repository a git dependency means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitReference {
    /// A tag, e.g. `v0.1.0`.
    Tag(String),
    /// Any revision cargo can fetch.
    Rev(String),
}

/// What to scaffold.
#[derive(Debug, Clone)]
pub struct Scaffold {
    /// The crate name.
    pub name: String,
    /// The directory to create.
    pub dir: PathBuf,
    /// The SDK dependency.
    pub sdk: SdkSource,
    /// The language.
    pub lang: Lang,
    /// A contract 0.3 controller (`--kind`), else a Jinghzhu plugin.
    pub controller: Option<controller::ControllerScaffold>,
}

/// Runs `wasm-operator new`.
pub fn run(args: NewArgs) -> Result<ExitCode> {
    let scaffold = Scaffold::from_args(&args)?;
    let files = scaffold.create()?;
    let crate_name = scaffold.name.replace('-', "_");
    println!(
        "created plugin `{}` in {} ({} files)",
        scaffold.name,
        scaffold.dir.display(),
        files.len()
    );
    let git = if args.no_git {
        git::GitSetup::Skipped
    } else {
        git::init(&scaffold.dir)
    };
    println!("{}", git.describe());
    if let (Lang::Rust, SdkSource::Git { url, reference }) = (scaffold.lang, &scaffold.sdk) {
        println!(
            "the SDK is a git dependency on {url} at {}: cargo fetches it on the first build (use --sdk-path DIR for a local checkout)",
            match reference {
                GitReference::Tag(tag) => format!("tag {tag}"),
                GitReference::Rev(rev) => format!("rev {rev}"),
            }
        );
    }
    let wasm_operator = this_binary();
    if let (Some(controller), Lang::Go) = (&scaffold.controller, scaffold.lang) {
        println!(
            "{}",
            controller_next_steps(
                controller,
                &scaffold.dir,
                &scaffold.name,
                ("./test.sh", "./build.sh"),
                &format!("target/{}.wasm", scaffold.name),
                &wasm_operator,
            )
        );
        return Ok(ExitCode::SUCCESS);
    }
    if scaffold.lang != Lang::Rust {
        println!(
            "{}",
            languages::next_steps(scaffold.lang, &scaffold.dir, &scaffold.name, &wasm_operator)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let wasm = format!("target/wasm32-wasip2/release/{crate_name}.wasm");
    if let Some(controller) = &scaffold.controller {
        println!(
            "{}",
            controller_next_steps(
                controller,
                &scaffold.dir,
                &scaffold.name,
                (
                    "cargo test",
                    "cargo build --release --target wasm32-wasip2   # or: cargo component build --release",
                ),
                &wasm,
                &wasm_operator,
            )
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "\n  cd {}\n  cargo build --release --target wasm32-wasip2   # or: cargo component build --release\n  cargo test\n  {wasm_operator} reconcile --plugin {wasm} --fixtures fixtures\n  cp {wasm} target/live.wasm   # the host runs a copy: replacing it swaps plugins\n  {wasm_operator} run --plugin target/live.wasm",
        scaffold.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The next steps `new --kind` prints: test and build with `(test, build)`,
/// then the plugin at `wasm` onto a cluster.
fn controller_next_steps(
    controller: &controller::ControllerScaffold,
    dir: &Path,
    name: &str,
    (test, build): (&str, &str),
    wasm: &str,
    wasm_operator: &str,
) -> String {
    let allow = if controller.allowed.is_empty() {
        String::new()
    } else {
        format!(" --allow-child-kind {}", controller.allowed.join(","))
    };
    format!(
        "\n  cd {}\n  {test}\n  {build}\n  kubectl apply -f crd.yaml\n  kubectl -n wasm-operator create configmap {name}-plugin --from-file=plugin.wasm={wasm}\n  kubectl apply -f controller.yaml\n  {wasm_operator} rbac controller.yaml   # the ClusterRole the host needs\n  {wasm_operator} run --plugin-controllers{allow}\n  kubectl apply -f sample.yaml\n(README.md has these steps)",
        dir.display(),
    )
}

/// How to call this binary from anywhere: `wasm-operator` when that name on
/// `PATH` is this file, else its absolute path (e.g. after `cargo run`,
/// whose `-p wasm-operator` means nothing inside the new crate's workspace).
pub fn this_binary() -> String {
    let Ok(exe) = std::env::current_exe().and_then(|p| p.canonicalize()) else {
        return "wasm-operator".to_string();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            dir.join("wasm-operator")
                .canonicalize()
                .is_ok_and(|found| found == exe)
        })
    });
    if on_path {
        "wasm-operator".to_string()
    } else {
        exe.display().to_string()
    }
}

impl Scaffold {
    /// Checks the arguments and resolves the SDK source.
    pub fn from_args(args: &NewArgs) -> Result<Self> {
        check_name(&args.name)?;
        let controller = controller_of(args)?;
        if args.lang != Lang::Rust
            && (args.sdk_path.is_some() || args.sdk_git.is_some() || args.sdk_rev.is_some())
        {
            bail!(
                "--sdk-path, --sdk-git and --sdk-rev choose the Rust SDK crate: a --lang python, js or \
                 go project carries its SDK in sdk/"
            );
        }
        let dir = args
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from(&args.name));
        let sdk = match &args.sdk_path {
            Some(path) if controller.is_some() => SdkSource::Path(find_sdk_crate(
                path,
                controller::SDK_PACKAGE,
                "controller-sdk",
            )?),
            Some(path) => SdkSource::Path(find_sdk(path)?),
            None => SdkSource::Git {
                url: args
                    .sdk_git
                    .clone()
                    .unwrap_or_else(|| DEFAULT_SDK_GIT.to_string()),
                reference: match &args.sdk_rev {
                    Some(rev) => GitReference::Rev(rev.clone()),
                    None => GitReference::Tag(format!("v{HOST_VERSION}")),
                },
            },
        };
        Ok(Self {
            name: args.name.clone(),
            dir,
            sdk,
            lang: args.lang,
            controller,
        })
    }

    /// The files of the crate, as (relative path, contents).
    pub fn files(&self) -> Result<Vec<(PathBuf, String)>> {
        let host_version = format!("wasm-operator {HOST_VERSION}");
        if let (Some(controller), Lang::Go) = (&self.controller, self.lang) {
            return Ok(go_controller::go_files(
                controller,
                &self.name,
                &host_version,
            ));
        }
        if let Some(controller) = &self.controller {
            let texts = self.sdk_texts(controller::SDK_PACKAGE, "plugins/controller-sdk")?;
            let lock = lockfile::for_controller_plugin(
                &self.name,
                matches!(self.sdk, SdkSource::Path(_)),
            )?;
            let sdk = controller::SdkTexts {
                dependency: texts.0,
                comment: texts.1,
                note: texts.2,
            };
            return Ok(controller.rust_files(&self.name, &host_version, &sdk, lock));
        }
        match self.lang {
            Lang::Python => return Ok(languages::python_files(&self.name, &host_version)),
            Lang::Js => return Ok(languages::js_files(&self.name, &host_version)),
            Lang::Go => return Ok(languages::go_files(&self.name, &host_version)),
            Lang::Rust => {}
        }
        let crate_name = self.name.replace('-', "_");
        let (dependency, comment, note) = self.sdk_texts(SDK_PACKAGE, "plugins/sdk")?;
        let fill = |template: &str| {
            template
                .replace("{{name}}", &self.name)
                .replace("{{crate_name}}", &crate_name)
                .replace("{{wit_package}}", WIT_PACKAGE)
                .replace("{{host_version}}", &format!("wasm-operator {HOST_VERSION}"))
                .replace("{{sdk_dependency}}", &dependency)
                .replace("{{sdk_comment}}", &comment)
                .replace("{{sdk_note}}", &note)
        };
        let lock = lockfile::for_plugin(&self.name, matches!(self.sdk, SdkSource::Path(_)))?;
        let case = Path::new("fixtures").join("scale-up");
        Ok(vec![
            ("Cargo.toml".into(), fill(CARGO_TOML)),
            ("Cargo.lock".into(), lock),
            ("README.md".into(), fill(README)),
            (".gitignore".into(), GITIGNORE.to_string()),
            ("src/lib.rs".into(), fill(LIB_RS)),
            ("wit/operator.wit".into(), WIT.to_string()),
            (case.join("input.yaml"), FIXTURE_INPUT.to_string()),
            (case.join("expected.yaml"), FIXTURE_EXPECTED.to_string()),
            (case.join("now"), FIXTURE_NOW.to_string()),
        ])
    }

    /// The dependency line on the SDK `package` (in `dir` of this
    /// repository), its comment and the README's paragraph about it.
    fn sdk_texts(&self, package: &str, dir: &str) -> Result<(String, String, String)> {
        Ok(match &self.sdk {
            SdkSource::Git { url, reference } => {
                let (key, value) = match reference {
                    GitReference::Tag(tag) => ("tag", tag),
                    GitReference::Rev(rev) => ("rev", rev),
                };
                (
                    format!(
                        "{package} = {{ git = {}, {key} = {} }}",
                        toml_string(url),
                        toml_string(value)
                    ),
                    format!("Pinned to {key} {value}."),
                    format!(
                        "The SDK is a git dependency on `{url}` at {key} `{value}`: the SDK of the \
                         host release this plugin was made for. Cargo finds the `{package}` \
                         package inside that repository's workspace and records the exact commit \
                         in `Cargo.lock` on the first build. To build against a local checkout \
                         instead (no access to the git host, or SDK changes of your own), replace \
                         the line with `{package} = {{ path = \"/path/to/wasm-operator/{dir}\" }}` \
                         (what `wasm-operator new --sdk-path DIR` writes)."
                    ),
                )
            }
            SdkSource::Path(sdk) => {
                let relative = relative_path(&self.absolute_dir()?, sdk);
                let shown = relative.to_string_lossy().replace('\\', "/");
                (
                    format!("{package} = {{ path = {} }}", toml_string(&shown)),
                    "From a local checkout.".to_string(),
                    format!(
                        "The SDK is a path dependency on a local checkout of wasm-operator \
                         (`{shown}`, written by `wasm-operator new --sdk-path`). To depend on a \
                         release instead, replace the line with \
                         `{package} = {{ git = \"{DEFAULT_SDK_GIT}\", tag = \"v{HOST_VERSION}\" }}`."
                    ),
                )
            }
        })
    }

    /// The target directory as an absolute path (it need not exist yet).
    fn absolute_dir(&self) -> Result<PathBuf> {
        let dir = if self.dir.is_absolute() {
            self.dir.clone()
        } else {
            std::env::current_dir()
                .context("finding the current directory")?
                .join(&self.dir)
        };
        // The parent exists (checked in `create`); resolve symlinks in it
        // so the relative SDK path is computed between canonical paths.
        let name = dir.file_name().map(|n| n.to_os_string());
        match (dir.parent().map(Path::canonicalize), name) {
            (Some(Ok(parent)), Some(name)) => Ok(parent.join(name)),
            _ => Ok(dir),
        }
    }

    /// Writes the crate: all files into a temporary directory next to the
    /// target, then one rename, so a failure leaves nothing behind. Returns
    /// the files written.
    pub fn create(&self) -> Result<Vec<PathBuf>> {
        let dir = &self.dir;
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            bail!(
                "{} does not exist: create it first, or choose another --path",
                parent.display()
            );
        }
        let replace_empty_dir = match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    bail!(
                        "{} already exists and is not empty: choose another --path (nothing was written)",
                        dir.display()
                    );
                }
                true
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
            Err(err) if dir.exists() => {
                return Err(err).with_context(|| {
                    format!("{} exists and is not a readable directory", dir.display())
                });
            }
            Err(err) => return Err(err).with_context(|| format!("checking {}", dir.display())),
        };
        let files = self.files()?;
        let staging = tempfile::Builder::new()
            .prefix(&format!(".{}.new-", self.name))
            .tempdir_in(&parent)
            .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
        for (path, contents) in &files {
            let target = staging.path().join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::write(&target, contents)
                .with_context(|| format!("writing {}", target.display()))?;
            if languages::is_executable(path) {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
                    .with_context(|| format!("making {} executable", target.display()))?;
            }
        }
        if replace_empty_dir {
            std::fs::remove_dir(dir).with_context(|| format!("replacing {}", dir.display()))?;
        }
        let staged = staging.keep();
        if let Err(err) = std::fs::rename(&staged, dir) {
            let _ = std::fs::remove_dir_all(&staged);
            return Err(err)
                .with_context(|| format!("moving the new crate into {}", dir.display()));
        }
        Ok(files.into_iter().map(|(path, _)| dir.join(path)).collect())
    }
}

/// Checks a crate name the way cargo would, and against the names that
/// would clash with the plugin's own dependencies.
pub fn check_name(name: &str) -> Result<()> {
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    let starts_with_letter = name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    if name.is_empty() || name.len() > 64 || !valid_chars || !starts_with_letter {
        bail!(
            "`{name}` is not a usable plugin name: use 1 to 64 lowercase letters, digits, `-` or `_`, \
             starting with a letter (e.g. `even-replicas`)"
        );
    }
    const TAKEN: [&str; 9] = [
        SDK_PACKAGE,
        "wit-bindgen",
        "std",
        "core",
        "alloc",
        "proc-macro",
        "proc_macro",
        "test",
        "self",
    ];
    if TAKEN.contains(&name) {
        bail!("`{name}` is taken by Rust or by a dependency of every plugin: choose another name");
    }
    Ok(())
}

/// The SDK directory (canonical) from `--sdk-path`: the SDK crate itself or
/// a checkout of this repository.
pub fn find_sdk(path: &Path) -> Result<PathBuf> {
    find_sdk_crate(path, SDK_PACKAGE, "sdk")
}

/// The directory (canonical) of the SDK crate `package` from `--sdk-path`:
/// the crate itself or a checkout of this repository (`plugins/<subdir>`).
pub fn find_sdk_crate(path: &Path, package: &str, subdir: &str) -> Result<PathBuf> {
    let candidates = [path.to_path_buf(), path.join("plugins").join(subdir)];
    for candidate in &candidates {
        let manifest = candidate.join("Cargo.toml");
        if let Ok(text) = std::fs::read_to_string(&manifest)
            && is_package_manifest(&text, package)
        {
            return candidate
                .canonicalize()
                .with_context(|| format!("resolving {}", candidate.display()));
        }
    }
    bail!(
        "--sdk-path {}: no {package} crate there (looked for Cargo.toml in {} and {}). \
         Give a checkout of the wasm-operator repository or its plugins/{subdir} directory",
        path.display(),
        candidates[0].display(),
        candidates[1].display()
    )
}

fn is_package_manifest(text: &str, package: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|table| {
        table
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            == Some(package)
    })
}

/// The controller of `--kind`/`--owns`, checked; `None` without `--kind`.
fn controller_of(args: &NewArgs) -> Result<Option<controller::ControllerScaffold>> {
    let Some(kind) = &args.kind else {
        if !args.owns.is_empty() || !args.allow_child_kinds.is_empty() {
            bail!(
                "--owns and --allow-child-kind describe a controller of any kind: add \
                 --kind GROUP/VERSION/KIND (e.g. --kind cache.example.com/v1alpha1/Memcached)"
            );
        }
        return Ok(None);
    };
    match args.lang {
        Lang::Rust | Lang::Go => {}
        Lang::Python | Lang::Js => bail!(
            "--kind scaffolds a Rust crate or (with --lang go) a Go project: the controller SDK \
             has no Python or JavaScript version yet; use --lang go, drop --lang, or write the \
             plugin against wit/0.3/controller.wit yourself"
        ),
    }
    Ok(Some(controller::ControllerScaffold {
        parent: kinds::parse_parent(kind)?,
        owns: kinds::parse_children(&args.owns, &args.allow_child_kinds)?,
        allowed: args.allow_child_kinds.clone(),
    }))
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// `to` relative to `from` (both absolute and canonical); `to` itself when
/// they share nothing below the root (a relative path would only be
/// fragile then).
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to_parts: Vec<Component> = to.components().collect();
    let common = from
        .iter()
        .zip(&to_parts)
        .take_while(|(a, b)| a == b)
        .count();
    if common <= 1 {
        return to.to_path_buf();
    }
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for part in &to_parts[common..] {
        out.push(part.as_os_str());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["even-replicas", "my_plugin", "p2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "2fast",
            "My-Plugin",
            "a b",
            "../x",
            "jinghzhu-plugin-sdk",
            "test",
        ] {
            let err = check_name(bad).expect_err(bad);
            assert!(format!("{err}").contains("name"), "{err}");
        }
    }

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_path(Path::new("/a/b/c"), Path::new("/a/x/sdk")),
            PathBuf::from("../../x/sdk")
        );
        assert_eq!(
            relative_path(Path::new("/repo/plugins/p"), Path::new("/repo/plugins/sdk")),
            PathBuf::from("../sdk")
        );
        assert_eq!(
            relative_path(Path::new("/tmp/p"), Path::new("/work/repo/plugins/sdk")),
            PathBuf::from("/work/repo/plugins/sdk")
        );
    }

    #[test]
    fn the_plugin_readme_shows_the_template_code() {
        const PLUGINS_README: &str = include_str!("../../../plugins/README.md");
        let args = NewArgs {
            name: "even-replicas".into(),
            path: Some("/tmp/somewhere/even-replicas".into()),
            sdk_path: None,
            sdk_git: None,
            sdk_rev: None,
            no_git: false,
            lang: Lang::Rust,
            kind: None,
            owns: Vec::new(),
            allow_child_kinds: Vec::new(),
        };
        let files = Scaffold::from_args(&args)
            .and_then(|s| s.files())
            .expect("files");
        let lib = &files
            .iter()
            .find(|(p, _)| p == Path::new("src/lib.rs"))
            .expect("lib.rs")
            .1;
        let start = lib
            .find("use std::cmp::Ordering;")
            .expect("the first import");
        let end = lib.find("export!(Plugin);").expect("export!") + "export!(Plugin);".len();
        assert!(
            PLUGINS_README.contains(&lib[start..end]),
            "plugins/README.md's listing of src/lib.rs differs from the template: copy it over"
        );
    }

    #[test]
    fn the_default_sdk_is_the_release_tag_of_this_host() {
        let args = NewArgs {
            name: "even-replicas".into(),
            path: Some("/tmp/somewhere/even-replicas".into()),
            sdk_path: None,
            sdk_git: None,
            sdk_rev: None,
            no_git: false,
            lang: Lang::Rust,
            kind: None,
            owns: Vec::new(),
            allow_child_kinds: Vec::new(),
        };
        let scaffold = Scaffold::from_args(&args).expect("scaffold");
        let files = scaffold.files().expect("files");
        let manifest = &files
            .iter()
            .find(|(p, _)| p == Path::new("Cargo.toml"))
            .expect("Cargo.toml")
            .1;
        let table: toml::Table = toml::from_str(manifest).expect("valid TOML");
        let sdk = &table["dependencies"][SDK_PACKAGE];
        assert_eq!(sdk["git"].as_str(), Some(DEFAULT_SDK_GIT));
        assert_eq!(
            sdk["tag"].as_str(),
            Some(format!("v{HOST_VERSION}").as_str())
        );
        assert!(table.contains_key("workspace"), "its own workspace");
        let lib = &files
            .iter()
            .find(|(p, _)| p == Path::new("src/lib.rs"))
            .expect("lib.rs")
            .1;
        assert!(lib.contains("pub const NAME: &str = \"even-replicas\";"));
        assert!(
            !files.iter().any(|(_, text)| text.contains("{{")),
            "every placeholder filled"
        );
    }
}
