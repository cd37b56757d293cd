//! `wasm-operator reconcile` on contract 0.3 plugins, run as a binary: the
//! golden fixtures of examples/memcached and examples/static-site pass with
//! their built plugins; a wrong expectation fails with a readable diff; an
//! output that breaks a host rule fails naming the rule; `--bless` writes
//! what then passes; one input prints the outcome.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;
use wasm_artifacts::{Toolchain, build, workspace_root};

/// Runs the binary with a private precompiled cache.
fn wasm_operator(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(args)
        .arg("--cache-dir")
        .arg(cache)
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

fn example(name: &str) -> PathBuf {
    workspace_root().join("examples").join(name)
}

fn plugin(package: &str) -> PathBuf {
    build(package, &[], Toolchain::Wasip2)
}

/// Copies `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}

/// A copy of an example's controller.yaml and fixtures, to change freely.
fn copy_of_example(name: &str) -> TempDir {
    let copy = TempDir::new().expect("temp dir");
    std::fs::copy(
        example(name).join("controller.yaml"),
        copy.path().join("controller.yaml"),
    )
    .expect("copy controller.yaml");
    copy_dir(
        &example(name).join("fixtures"),
        &copy.path().join("fixtures"),
    );
    copy
}

fn reconcile_fixtures(cache: &Path, plugin: &Path, fixtures: &Path, more: &[&str]) -> Output {
    let mut args = vec![
        "reconcile",
        "--plugin",
        path_str(plugin),
        "--fixtures",
        path_str(fixtures),
    ];
    args.extend_from_slice(more);
    wasm_operator(cache, &args)
}

#[test]
fn the_examples_golden_fixtures_pass_with_their_built_plugins() {
    let cache = TempDir::new().expect("cache");
    for (name, package, cases) in [
        ("memcached", "memcached-plugin", 6),
        ("static-site", "static-site-plugin", 5),
    ] {
        let fixtures = example(name).join("fixtures");
        let out = reconcile_fixtures(cache.path(), &plugin(package), &fixtures, &[]);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}\n{}",
            text(&out.stderr)
        );
        assert!(
            stdout.contains(&format!("{cases} fixtures in "))
                && stdout.contains(&format!("{cases} passed, 0 failed")),
            "{name}: {stdout}"
        );
        // The declaration was found above the fixtures directory.
        assert!(
            stdout.contains(&format!("controller {name} from ")),
            "{name}: {stdout}"
        );
    }
}

#[test]
fn a_wrong_expectation_fails_with_a_readable_diff() {
    let cache = TempDir::new().expect("cache");
    let copy = copy_of_example("memcached");
    let expected = copy.path().join("fixtures/scaled-up/expected.yaml");
    let text_before = std::fs::read_to_string(&expected).expect("read");
    let wrong = text_before
        .replace("replicas: 5", "replicas: 4")
        .replace("scaled from 3 to 5", "scaled from 3 to 4");
    assert_ne!(wrong, text_before, "the fixture changed shape");
    std::fs::write(&expected, wrong).expect("write");
    let out = reconcile_fixtures(
        cache.path(),
        &plugin("memcached-plugin"),
        &copy.path().join("fixtures"),
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("FAILED  scaled-up"), "{stdout}");
    assert!(stdout.contains("ok      fresh-memcached"), "{stdout}");
    assert!(
        stdout.contains(
            "the outcome differs from expected.yaml in apply Deployment cache, events \
             (- expected, + actual)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("-       replicas: 4"), "{stdout}");
    assert!(stdout.contains("+       replicas: 5"), "{stdout}");
    assert!(
        stdout.contains("+   message: Deployment cache scaled from 3 to 5"),
        "{stdout}"
    );
    assert!(
        stdout.contains("6 fixtures in ") && stdout.contains("5 passed, 1 failed"),
        "{stdout}"
    );
}

#[test]
fn bless_writes_the_outcomes_that_then_pass() {
    let cache = TempDir::new().expect("cache");
    let copy = copy_of_example("static-site");
    let fixtures = copy.path().join("fixtures");
    std::fs::remove_file(fixtures.join("scaled-up/expected.yaml")).expect("remove");
    let plugin = plugin("static-site-plugin");
    let out = reconcile_fixtures(cache.path(), &plugin, &fixtures, &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("create it with --bless"),
        "{}",
        text(&out.stdout)
    );
    let out = reconcile_fixtures(cache.path(), &plugin, &fixtures, &["--bless"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("ok      scaled-up  (blessed: new)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok      fresh-site  (unchanged)"),
        "{stdout}"
    );
    let written = std::fs::read_to_string(fixtures.join("scaled-up/expected.yaml")).expect("read");
    let shipped =
        std::fs::read_to_string(example("static-site").join("fixtures/scaled-up/expected.yaml"))
            .expect("read");
    assert_eq!(written, shipped);
    let out = reconcile_fixtures(cache.path(), &plugin, &fixtures, &[]);
    assert!(out.status.success(), "{}", text(&out.stdout));
}

/// A controller for the misbehaving 0.3 plugin: `Misbehaver` parents own
/// ConfigMaps (at most 64 KiB) and Deployments.
const MISBEHAVING_CONTROLLER: &str = r"
apiVersion: wasm-operator.io/v1alpha1
kind: PluginController
metadata: {name: misbehaving}
spec:
  parent: {apiVersion: test.example.com/v1, kind: Misbehaver}
  children:
  - {apiVersion: v1, kind: ConfigMap, maxBytes: 65536}
  - {apiVersion: apps/v1, kind: Deployment}
  source: {file: {path: plugin.wasm}}
";

fn misbehaving_case(dir: &Path, case: &str, misbehave: &str, more: &str) {
    let case = dir.join(case);
    std::fs::create_dir_all(&case).expect("mkdir");
    std::fs::write(
        case.join("input.yaml"),
        format!(
            "apiVersion: test.example.com/v1\nkind: Misbehaver\nmetadata: {{name: m, namespace: shop, uid: u-1}}\n\
             spec: {{misbehave: {misbehave:?}, value: theirs}}\n{more}"
        ),
    )
    .expect("write input");
}

#[test]
fn an_output_that_breaks_a_host_rule_fails_naming_the_rule() {
    let cache = TempDir::new().expect("cache");
    let dir = TempDir::new().expect("dir");
    std::fs::write(dir.path().join("controller.yaml"), MISBEHAVING_CONTROLLER).expect("write");
    misbehaving_case(dir.path(), "behaves", "", "");
    misbehaving_case(dir.path(), "secret", "secret", "");
    misbehaving_case(dir.path(), "privileged", "privileged", "");
    misbehaving_case(dir.path(), "oversized", "oversized", "");
    misbehaving_case(
        dir.path(),
        "foreign",
        "foreign",
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: theirs}\ndata: {mine: \"yes\"}\n",
    );
    let plugin = build("misbehaving-controller-plugin", &[], Toolchain::Wasip2);
    let out = reconcile_fixtures(cache.path(), &plugin, dir.path(), &["--bless"]);
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    let failure = |case: &str| -> String {
        let start = stdout
            .find(&format!("FAILED  {case}"))
            .unwrap_or_else(|| panic!("{case} did not fail: {stdout}"));
        stdout[start..]
            .lines()
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        stdout.contains("ok      behaves  (blessed: new)"),
        "{stdout}"
    );
    for (case, rule) in [
        ("secret", "child/kind"),
        ("privileged", "baseline/privileged"),
        ("oversized", "child/size"),
        ("foreign", "child/not-owned"),
    ] {
        let said = failure(case);
        assert!(
            said.contains(&format!(
                "the host refuses this output by the rule `{rule}`"
            )),
            "{case}: {said}"
        );
    }
    // A refused output is never blessed.
    assert!(!dir.path().join("secret/expected.yaml").exists());
    assert!(
        stdout.contains("blessed 1 of 5 cases") && stdout.contains("4 failed"),
        "{stdout}"
    );
}

#[test]
fn one_input_prints_the_outcome_and_a_missing_declaration_says_what_to_do() {
    let cache = TempDir::new().expect("cache");
    let plugin = plugin("memcached-plugin");
    let input = example("memcached").join("fixtures/stray-deployment-deleted/input.yaml");
    let controller = example("memcached").join("controller.yaml");
    let out = wasm_operator(
        cache.path(),
        &[
            "reconcile",
            "--plugin",
            path_str(&plugin),
            "--controller",
            path_str(&controller),
            "--input",
            path_str(&input),
            "--now",
            "2026-01-01T00:00:00Z",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let shipped = std::fs::read_to_string(
        example("memcached").join("fixtures/stray-deployment-deleted/expected.yaml"),
    )
    .expect("read");
    assert_eq!(stdout, shipped);
    let out = wasm_operator(
        cache.path(),
        &[
            "reconcile",
            "--plugin",
            path_str(&plugin),
            "--input",
            path_str(&input),
        ],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("pass --controller controller.yaml (a PluginController)"),
        "{stderr}"
    );
}
