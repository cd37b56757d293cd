//! `wasm-operator new`, end to end: scaffold a plugin into a temporary
//! directory outside this workspace, build it both ways (`cargo build
//! --target wasm32-wasip2` and `cargo component build`), run its native
//! tests, and run its golden fixture with the host on both artifacts; and
//! the git-dependency mode, against this repository as a local git remote.
//! The untouched scaffold proposes what the example `replicaset` plugin does
//! on the example's fixtures (`--compare-with`), `new` makes the crate a git
//! repository with the scaffold staged, and its next steps name this binary.
//!
//! The scaffolded crates build into this workspace's `target/`, as
//! `CARGO_TARGET_DIR`: their dependencies (wit-bindgen and the SDK's other
//! crates, for wasm32 and natively) are the ones the workspace's own plugin
//! builds already compiled, so only the plugin crate itself compiles. Each
//! step prints its time (`--nocapture`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

mod support;

use tempfile::TempDir;
use wasm_artifacts::{Toolchain, workspace_root};

fn wasm_operator(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(args)
        .env("WASM_OPERATOR_PRECOMPILED_DIR", cache)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run wasm-operator")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The target directory the scaffolded crates build into.
fn target_dir() -> PathBuf {
    workspace_root().join("target")
}

/// Runs `cargo <args>` in `dir` as a plugin author would, with the shared
/// target directory; panics with cargo's output on failure.
fn cargo(dir: &Path, args: &[&str]) -> Output {
    let started = Instant::now();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // The outer `cargo test`'s settings are not the plugin author's.
    let out = wasm_artifacts::as_from_a_shell(&mut Command::new(cargo))
        .current_dir(dir)
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("run cargo");
    println!(
        "cargo {}: {:.1} s",
        args.join(" "),
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "cargo {} failed in {}:\n{}{}",
        args.join(" "),
        dir.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// `wasm-operator new NAME --path DIR EXTRA...`: the crate's directory and
/// what `new` printed.
fn scaffold_reporting(parent: &TempDir, name: &str, extra: &[&str]) -> (PathBuf, String) {
    let dir = parent.path().join(name);
    let out = wasm_operator(
        &[&["new", name, "--path", path_str(&dir)], extra].concat(),
        parent.path(),
    );
    assert!(
        out.status.success(),
        "new failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    (dir, text(&out.stdout))
}

/// `wasm-operator new NAME --path DIR EXTRA...`.
fn scaffold(parent: &TempDir, name: &str, extra: &[&str]) -> PathBuf {
    scaffold_reporting(parent, name, extra).0
}

/// Whether `git` can be run here.
fn git_available() -> bool {
    Command::new("git").arg("--version").output().is_ok()
}

/// The `version` of package `name` in a Cargo.lock (the only one, or the first).
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let marker = format!("name = \"{name}\"\nversion = \"");
    let start = lock.find(&marker)? + marker.len();
    Some(lock[start..].split('"').next()?.to_string())
}

/// Checks the fixtures of the scaffolded plugin `name` with the host.
fn fixtures_pass(name: &str, plugin: &Path, fixtures: &Path, cache: &Path) {
    let out = wasm_operator(
        &[
            "reconcile",
            "--plugin",
            path_str(plugin),
            "--fixtures",
            path_str(fixtures),
        ],
        cache,
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {stdout}{}",
        plugin.display(),
        text(&out.stderr)
    );
    assert!(stdout.contains("ok      scale-up"), "{stdout}");
    assert!(
        stdout.contains(&format!("1 passed, 0 failed ({name}@0.1.0")),
        "{stdout}"
    );
}

#[test]
fn a_scaffolded_plugin_builds_both_ways_and_passes_its_tests_and_fixture() {
    let started = Instant::now();
    let parent = TempDir::new().expect("temp dir");
    // A name of its own: the tests share one target directory, and
    // tests/e2e/tests/plugin_workflow.rs builds an `even-replicas` with the
    // README's even rule into it at the same time (a race that once made
    // this untouched scaffold's fixture run that plugin).
    let (dir, report) = scaffold_reporting(
        &parent,
        "untouched-scaffold",
        &["--sdk-path", path_str(&workspace_root())],
    );
    // The test's binary is not the `wasm-operator` on PATH: the next steps
    // name it by its path, so they run as printed from inside the new crate.
    let binary = Path::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .canonicalize()
        .expect("the binary");
    assert!(
        report.contains(&format!(
            "  {} reconcile --plugin target/wasm32-wasip2/release/untouched_scaffold.wasm --fixtures fixtures",
            binary.display()
        )),
        "{report}"
    );
    if git_available() {
        assert!(report.contains("initialised a git repository"), "{report}");
        let staged = Command::new("git")
            .current_dir(&dir)
            .args(["diff", "--cached", "--name-only"])
            .output()
            .expect("git diff");
        assert!(
            text(&staged.stdout).contains("fixtures/scale-up/expected.yaml"),
            "the scaffold is staged: {}",
            text(&staged.stdout)
        );
    }
    for file in [
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        ".gitignore",
        "src/lib.rs",
        "wit/operator.wit",
        "fixtures/scale-up/input.yaml",
        "fixtures/scale-up/expected.yaml",
        "fixtures/scale-up/now",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    let wit = std::fs::read_to_string(dir.join("wit/operator.wit")).expect("wit");
    let ours = std::fs::read_to_string(workspace_root().join("wit/0.2/operator.wit")).expect("wit");
    assert_eq!(
        wit, ours,
        "the scaffold carries the WIT the SDK compiles against"
    );
    let workspace_lock =
        std::fs::read_to_string(workspace_root().join("Cargo.lock")).expect("lock");
    let pinned = locked_version(&workspace_lock, "wit-bindgen-rust-macro").expect("pinned");

    cargo(&dir, &["build", "--release", "--target", "wasm32-wasip2"]);
    cargo(&dir, &["component", "build", "--release"]);
    cargo(&dir, &["test"]);
    // The lock kept the host's versions and is settled: --locked builds.
    let lock = std::fs::read_to_string(dir.join("Cargo.lock")).expect("lock");
    assert_eq!(
        locked_version(&lock, "wit-bindgen-rust-macro").as_deref(),
        Some(pinned.as_str()),
        "{lock}"
    );
    cargo(
        &dir,
        &[
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--locked",
        ],
    );

    let release = |triple: &str| {
        target_dir()
            .join(triple)
            .join("release/untouched_scaffold.wasm")
    };
    for plugin in [release("wasm32-wasip2"), release("wasm32-wasip1")] {
        fixtures_pass(
            "untouched-scaffold",
            &plugin,
            &dir.join("fixtures"),
            parent.path(),
        );
    }

    // Untouched, it proposes what the example plugin does, case by case.
    let example = support::replicaset(Toolchain::Wasip2);
    let compared = wasm_operator(
        &[
            "reconcile",
            "--fixtures",
            path_str(&support::fixtures_dir()),
            "--plugin",
            path_str(&release("wasm32-wasip2")),
            "--compare-with",
            path_str(&example),
        ],
        parent.path(),
    );
    let stdout = text(&compared.stdout);
    assert_eq!(
        compared.status.code(),
        Some(0),
        "the untouched scaffold differs from the example plugin:\n{stdout}{}",
        text(&compared.stderr)
    );
    assert!(stdout.contains(": 0 differ, 10 the same"), "{stdout}");
    println!(
        "scaffold, two builds, tests and fixtures: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn the_git_dependency_finds_the_sdk_in_this_repository() {
    // This repository as a local git remote, at the commit checked out:
    // cargo must find `jinghzhu-plugin-sdk` among the workspace's members,
    // resolve its `workspace = true` fields and its `../../wit`.
    let root = workspace_root();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(&root)
            .args(args)
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?} failed (this test needs the repository as a git checkout):\n{}",
            text(&out.stderr)
        );
        text(&out.stdout).trim().to_string()
    };
    let commit = git(&["rev-parse", "HEAD"]);
    let common = PathBuf::from(git(&["rev-parse", "--git-common-dir"]));
    let repository = root.join(common).canonicalize().expect("git dir");
    let url = format!("file://{}", repository.display());

    let parent = TempDir::new().expect("temp dir");
    // Its own name: the tests of this file build into one target directory.
    let dir = scaffold(
        &parent,
        "from-git",
        &["--sdk-git", &url, "--sdk-rev", &commit],
    );
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("manifest");
    assert!(
        manifest.contains(&format!(
            "jinghzhu-plugin-sdk = {{ git = \"{url}\", rev = \"{commit}\" }}"
        )),
        "{manifest}"
    );
    cargo(&dir, &["build", "--release", "--target", "wasm32-wasip2"]);
    let lock = std::fs::read_to_string(dir.join("Cargo.lock")).expect("lock");
    assert!(
        lock.contains(&format!("source = \"git+{url}?rev={commit}#{commit}\"")),
        "the lock records the SDK's commit:\n{lock}"
    );
    let plugin = target_dir().join("wasm32-wasip2/release/from_git.wasm");
    fixtures_pass("from-git", &plugin, &dir.join("fixtures"), parent.path());

    // A controller (`--kind`) finds the controller SDK the same way.
    let dir = scaffold(
        &parent,
        "controller-from-git",
        &[
            "--kind",
            "example.com/v1/WebApp",
            "--owns",
            "Deployment,Service",
            "--sdk-git",
            &url,
            "--sdk-rev",
            &commit,
        ],
    );
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("manifest");
    assert!(
        manifest.contains(&format!(
            "wasm-operator-controller-sdk = {{ git = \"{url}\", rev = \"{commit}\" }}"
        )),
        "{manifest}"
    );
    cargo(&dir, &["build", "--release", "--target", "wasm32-wasip2"]);
    assert!(
        target_dir()
            .join("wasm32-wasip2/release/controller_from_git.wasm")
            .is_file()
    );
}

#[test]
fn new_refuses_a_bad_name_or_a_directory_in_use_and_writes_nothing() {
    let parent = TempDir::new().expect("temp dir");
    let ctl = parent.path().join("ctl");
    let ctl = path_str(&ctl);
    for (args, says) in [
        (
            &["--kind", "example.com/v1/WebApp", "--owns", "Namespace"][..],
            "cluster-scoped",
        ),
        (
            &["--kind", "example.com/v1/WebApp", "--owns", "Secret"][..],
            "--allow-child-kind Secret",
        ),
        (
            &["--kind", "WebApp", "--owns", "Service"][..],
            "GROUP/VERSION/KIND",
        ),
        (&["--owns", "Service"][..], "add --kind"),
        (
            &[
                "--kind",
                "example.com/v1/WebApp",
                "--owns",
                "Service",
                "--lang",
                "python",
            ][..],
            "use --lang go",
        ),
    ] {
        let out = wasm_operator(
            &[&["new", "ctl", "--no-git", "--path", ctl], args].concat(),
            parent.path(),
        );
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    assert!(!parent.path().join("ctl").exists(), "nothing written");
    let out = wasm_operator(&["new", "Bad Name"], parent.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not a usable plugin name"),
        "{}",
        text(&out.stderr)
    );

    let used = parent.path().join("used");
    std::fs::create_dir(&used).expect("mkdir");
    std::fs::write(used.join("notes.txt"), "mine").expect("write");
    let out = wasm_operator(
        &[
            "new",
            "p",
            "--path",
            path_str(&used),
            "--sdk-path",
            path_str(&workspace_root()),
        ],
        parent.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("already exists and is not empty"),
        "{}",
        text(&out.stderr)
    );
    let entries: Vec<_> = std::fs::read_dir(&used).expect("read").collect();
    assert_eq!(entries.len(), 1, "nothing written into the directory");

    // No repository with --no-git, nor inside an existing one.
    let (plain, report) = scaffold_reporting(
        &parent,
        "plain",
        &["--sdk-path", path_str(&workspace_root()), "--no-git"],
    );
    assert!(
        report.contains("--no-git: no repository created"),
        "{report}"
    );
    assert!(!plain.join(".git").exists());
    if git_available() {
        let (inner, report) = scaffold_reporting(
            &parent,
            "outer",
            &["--sdk-path", path_str(&workspace_root())],
        );
        assert!(inner.join(".git").is_dir(), "{report}");
        let nested = inner.join("nested");
        let out = wasm_operator(
            &[
                "new",
                "nested",
                "--path",
                path_str(&nested),
                "--sdk-path",
                path_str(&workspace_root()),
            ],
            parent.path(),
        );
        assert!(
            text(&out.stdout).contains("inside an existing git repository"),
            "{}",
            text(&out.stdout)
        );
        assert!(!nested.join(".git").exists());
    }

    let out = wasm_operator(
        &[
            "new",
            "p",
            "--path",
            path_str(&parent.path().join("p")),
            "--sdk-path",
            path_str(parent.path()),
        ],
        parent.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no jinghzhu-plugin-sdk crate there"),
        "{}",
        text(&out.stderr)
    );
    assert!(!parent.path().join("p").exists());
    let leftovers: Vec<String> = std::fs::read_dir(parent.path())
        .expect("read")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".p.new-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Every shape of child `new --kind` knows, and a kind of the author's.
const OWNS: &str = "Deployment,StatefulSet,Job,CronJob,Pod,Service,ConfigMap,PersistentVolumeClaim,Ingress,example.com/v1/Widget";

#[test]
fn a_scaffolded_controller_builds_passes_its_tests_and_the_hosts_checks() {
    use wasm_operator::crd::controller::{KindRef, PluginController};

    let started = Instant::now();
    let parent = TempDir::new().expect("temp dir");
    let (dir, report) = scaffold_reporting(
        &parent,
        "scaffolded-controller",
        &[
            "--kind",
            "example.com/v1/WebApp",
            "--owns",
            OWNS,
            "--sdk-path",
            path_str(&workspace_root()),
            "--no-git",
        ],
    );
    assert!(report.contains("--plugin-controllers"), "{report}");
    for file in [
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        "src/lib.rs",
        "wit/controller.wit",
        "controller.yaml",
        "crd.yaml",
        "sample.yaml",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    // controller.yaml is a PluginController declaring the parent and every child.
    let declared: PluginController = serde_yaml::from_str(
        &std::fs::read_to_string(dir.join("controller.yaml")).expect("controller.yaml"),
    )
    .expect("a PluginController");
    assert_eq!(declared.spec.parent.api_version, "example.com/v1");
    assert_eq!(declared.spec.parent.kind, "WebApp");
    let children: Vec<KindRef> = declared
        .spec
        .children
        .iter()
        .map(|c| c.kind_ref())
        .collect();
    assert_eq!(children.len(), OWNS.split(',').count());
    assert_eq!(children[0].to_string(), "apps/v1/Deployment");

    cargo(&dir, &["test"]);
    cargo(
        &dir,
        &[
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--locked",
        ],
    );
    cargo(&dir, &["component", "build", "--release"]);

    // The component's first proposal passes every rule of the host, the
    // pod policy of its pod templates included.
    passes_the_hosts_checks(
        &target_dir().join("wasm32-wasip2/release/scaffolded_controller.wasm"),
        &declared,
        "scaffolded-controller",
    );
    println!(
        "controller scaffold, tests, two builds and the host's checks: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Loads the controller plugin `wasm` (named `name`), gives it a fresh
/// parent of `declared` with every child kind empty, and checks that its
/// proposal passes every rule of the host: one child per kind, a status
/// saying `Creating`.
fn passes_the_hosts_checks(
    wasm: &Path,
    declared: &wasm_operator::crd::controller::PluginController,
    name: &str,
) {
    use wasm_operator::apply::policy::PolicyConfig;
    use wasm_operator::crd::controller::KindRef;
    use wasm_operator::declared::checks::{self, Declared, Parent};
    use wasm_operator::declared::kinds::ResolvedKind;
    use wasm_operator::runtime::bindings::v3;
    use wasm_operator::runtime::{ContractVersion, Runtime, RuntimeConfig, block_on, convert_v3};

    let children: Vec<KindRef> = declared
        .spec
        .children
        .iter()
        .map(|c| c.kind_ref())
        .collect();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let plugin = runtime
        .load(&std::fs::read(wasm).expect("artifact"), "scaffold")
        .expect("load");
    assert_eq!(plugin.contract(), ContractVersion::V0_3);
    assert_eq!(plugin.info().name, name);
    let parent: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": declared.spec.parent.api_version, "kind": declared.spec.parent.kind,
        "metadata": {"name": "sample", "namespace": "default", "uid": "u", "generation": 1},
        "spec": {"replicas": 2},
    }))
    .expect("parent");
    let input = v3::ReconcileInput {
        parent: convert_v3::object(
            &parent,
            &declared.spec.parent.api_version,
            &declared.spec.parent.kind,
        ),
        children: children
            .iter()
            .map(|k| convert_v3::children(&k.api_version, &k.kind, []))
            .collect(),
        now: convert_v3::timestamp(std::time::SystemTime::now()),
    };
    let output = block_on(plugin.call_generic(&input, "default/sample"))
        .expect("a call")
        .expect("an output");
    let resolved: Vec<(ResolvedKind, u32, u32)> = children
        .iter()
        .map(|k| (ResolvedKind::by_convention(k), 1, 65_536))
        .collect();
    let policy = PolicyConfig::default();
    let parent_kind = ResolvedKind::by_convention(&declared.spec.parent);
    let rules = Declared {
        controller: name,
        parent: &parent_kind,
        children: &resolved,
        policy: &policy,
    };
    let about = Parent {
        name: "sample",
        namespace: "default",
        uid: "u",
    };
    let owned = vec![std::collections::BTreeMap::new(); children.len()];
    let plan = checks::check(&rules, &about, &owned, output).expect("the host's rules pass");
    assert_eq!(plan.applies.len(), children.len());
    assert_eq!(
        plan.status.as_ref().and_then(|s| s.get("phase")),
        Some(&serde_json::json!("Creating"))
    );
}

/// Runs `program ARGS...` in `dir`; panics with its output on failure.
fn run_in(dir: &Path, program: &str, args: &[&str]) -> String {
    let started = Instant::now();
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|err| panic!("starting {program} in {}: {err}", dir.display()));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    println!(
        "{program} {}: {:.1} s",
        args.join(" "),
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "{program} {args:?} failed in {}:\n{all}",
        dir.display()
    );
    all
}

/// The same controller in Go (`--lang go`): its Go tests pass, its code is
/// gofmt-clean, `./build.sh` builds a component, and its first proposal
/// passes every rule of the host. Needs Go and the Go plugin toolchain
/// (`tests/setup.sh`).
#[test]
fn a_scaffolded_go_controller_tests_builds_and_passes_the_hosts_checks() {
    use wasm_operator::crd::controller::PluginController;

    let started = Instant::now();
    let parent = TempDir::new().expect("temp dir");
    let (dir, report) = scaffold_reporting(
        &parent,
        "scaffolded-go-controller",
        &[
            "--kind",
            "example.com/v1/WebApp",
            "--owns",
            &format!("{OWNS},ServiceAccount"),
            "--allow-child-kind",
            "ServiceAccount",
            "--lang",
            "go",
            "--no-git",
        ],
    );
    assert!(report.contains("./build.sh"), "{report}");
    assert!(
        report.contains("--plugin-controllers --allow-child-kind ServiceAccount"),
        "{report}"
    );
    for file in [
        "go.mod",
        "README.md",
        "plugin/plugin.go",
        "plugin/plugin_test.go",
        "cmd/plugin/main.go",
        "controller/controller.go",
        "controller/bindings/exports/wit_exports/wit_exports.go",
        "wit/controller.wit",
        "controller.yaml",
        "crd.yaml",
        "sample.yaml",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    let controller_yaml = std::fs::read_to_string(dir.join("controller.yaml")).expect("read");
    assert!(
        controller_yaml.contains("plugin.wasm=target/scaffolded-go-controller.wasm"),
        "{controller_yaml}"
    );
    let declared: PluginController =
        serde_yaml::from_str(&controller_yaml).expect("a PluginController");
    assert_eq!(declared.spec.children.len(), OWNS.split(',').count() + 1);

    let tested = run_in(&dir, "./test.sh", &["-count=1"]);
    assert!(
        tested.contains("ok  \tscaffolded-go-controller/plugin"),
        "the plugin's tests ran: {tested}"
    );
    let unformatted = run_in(&dir, "gofmt", &["-l", "plugin", "cmd"]);
    assert!(
        unformatted.trim().is_empty(),
        "not gofmt-clean: {unformatted}"
    );
    run_in(&dir, "./build.sh", &[]);
    passes_the_hosts_checks(
        &dir.join("target/scaffolded-go-controller.wasm"),
        &declared,
        "scaffolded-go-controller",
    );
    println!(
        "Go controller scaffold, tests, build and the host's checks: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
