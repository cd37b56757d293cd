//! `wasm-operator reconcile`, run as a binary: one input, golden fixtures,
//! a wrong expected file, `--bless`, plugin errors, and idempotence.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::*;
use tempfile::TempDir;
use wasm_artifacts::Toolchain;
use wasm_operator::actions::ProposedActions;

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

/// A copy of the example plugin's fixtures to change freely.
fn copy_of_fixtures() -> TempDir {
    let copy = TempDir::new().expect("temp dir");
    copy_dir(&fixtures_dir(), copy.path());
    copy
}

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

fn case_names(dir: &Path) -> Vec<String> {
    wasm_operator::offline::fixtures::cases(dir)
        .expect("cases")
        .iter()
        .map(|c| c.file_name().expect("name").to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_shipped_fixtures_pass_with_both_builds() {
    let cache = TempDir::new().expect("cache");
    let cases = case_names(&fixtures_dir());
    assert!(cases.len() >= 6, "{cases:?}");
    for toolchain in [Toolchain::Wasip2, Toolchain::CargoComponent] {
        let plugin = replicaset(toolchain);
        let out = wasm_operator(
            cache.path(),
            &[
                "reconcile",
                "--plugin",
                path_str(&plugin),
                "--fixtures",
                path_str(&fixtures_dir()),
            ],
        );
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{toolchain:?}\n{stdout}\n{}",
            text(&out.stderr)
        );
        for case in &cases {
            assert!(
                stdout.contains(&format!("ok      {case}\n")),
                "{case} missing:\n{stdout}"
            );
        }
        assert!(
            stdout.contains(&format!("{} fixtures in", cases.len()))
                && stdout.contains(&format!(": {} passed, 0 failed", cases.len())),
            "{stdout}"
        );
    }
}

#[test]
fn a_wrong_expected_file_fails_with_a_diff() {
    let cache = TempDir::new().expect("cache");
    let fixtures = copy_of_fixtures();
    let case = fixtures.path().join("scale-0-to-3");
    let expected = std::fs::read_to_string(case.join("expected.yaml")).expect("expected");
    let mut proposal: ProposedActions = serde_yaml::from_str(&expected).expect("parse");
    let status = proposal.status.as_mut().expect("scale-0-to-3 has a status");
    status.message = "a message the plugin never writes".into();
    proposal.create_pods.pop();
    std::fs::write(
        case.join("expected.yaml"),
        serde_yaml::to_string(&proposal).expect("yaml"),
    )
    .expect("write");

    let plugin = replicaset(Toolchain::Wasip2);
    let out = wasm_operator(
        cache.path(),
        &[
            "reconcile",
            "--plugin",
            path_str(&plugin),
            "--fixtures",
            path_str(fixtures.path()),
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAILED  scale-0-to-3"), "{stdout}");
    assert!(stdout.contains("- expected, + actual"), "{stdout}");
    assert!(
        stdout.contains("-   message: a message the plugin never writes"),
        "{stdout}"
    );
    assert!(
        stdout.contains("+   message: 0/3 pods, 0/3 ready; creating 3"),
        "{stdout}"
    );
    assert!(stdout.contains("ok      scale-0-to-1"), "{stdout}");
    assert!(stdout.contains(", 1 failed"), "{stdout}");
}

#[test]
fn bless_writes_expected_files_that_then_pass() {
    let cache = TempDir::new().expect("cache");
    let fixtures = copy_of_fixtures();
    for case in case_names(fixtures.path()) {
        std::fs::remove_file(fixtures.path().join(&case).join("expected.yaml")).expect("remove");
    }
    let plugin = replicaset(Toolchain::Wasip2);
    let base = [
        "reconcile",
        "--plugin",
        path_str(&plugin),
        "--fixtures",
        path_str(fixtures.path()),
    ];

    let missing = wasm_operator(cache.path(), &base);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stdout).contains("create it with --bless"),
        "{}",
        text(&missing.stdout)
    );

    let blessed = wasm_operator(cache.path(), &[&base[..], &["--bless"]].concat());
    assert!(blessed.status.success(), "{}", text(&blessed.stdout));
    let all = case_names(fixtures.path());
    assert!(
        text(&blessed.stdout).contains(&format!(
            "blessed {n} of {n} cases in {} (new: {}); 0 unchanged, 0 failed",
            fixtures.path().display(),
            all.join(", "),
            n = all.len()
        )),
        "{}",
        text(&blessed.stdout)
    );
    for case in case_names(fixtures.path()) {
        let read = |dir: &Path| -> ProposedActions {
            serde_yaml::from_str(
                &std::fs::read_to_string(dir.join(&case).join("expected.yaml")).expect("read"),
            )
            .expect("parse")
        };
        assert_eq!(read(fixtures.path()), read(&fixtures_dir()), "{case}");
    }
    let again = wasm_operator(cache.path(), &base);
    assert!(again.status.success(), "{}", text(&again.stdout));
}

#[test]
fn bless_names_the_cases_it_changed_and_leaves_the_others_untouched() {
    let cache = TempDir::new().expect("cache");
    let fixtures = copy_of_fixtures();
    let plugin = replicaset(Toolchain::Wasip2);
    let bless = || {
        let out = wasm_operator(
            cache.path(),
            &[
                "reconcile",
                "--plugin",
                path_str(&plugin),
                "--fixtures",
                path_str(fixtures.path()),
                "--bless",
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stdout));
        text(&out.stdout)
    };
    let total = case_names(fixtures.path()).len();
    let place = fixtures.path().display().to_string();

    // Nothing changed: nothing blessed, every file byte for byte as it was.
    let before = std::fs::read(fixtures.path().join("desired-0/expected.yaml")).expect("read");
    let stdout = bless();
    assert!(
        stdout.contains(&format!(
            "blessed 0 of {total} cases in {place}; {total} unchanged, 0 failed"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok      desired-0  (unchanged)"),
        "{stdout}"
    );
    let after = std::fs::read(fixtures.path().join("desired-0/expected.yaml")).expect("read");
    assert_eq!(before, after);

    // Two cases made stale: exactly those two are named and rewritten.
    for case in ["scale-0-to-1", "desired-0"] {
        std::fs::write(fixtures.path().join(case).join("expected.yaml"), "{}\n").expect("write");
    }
    let stdout = bless();
    assert!(
        stdout.contains(&format!(
            "blessed 2 of {total} cases in {place} (changed: desired-0, scale-0-to-1); {} unchanged, 0 failed",
            total - 2
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok      scale-0-to-1  (blessed: changed)"),
        "{stdout}"
    );
}

#[test]
fn one_input_prints_the_proposal_and_kubectl_lists_work() {
    let cache = TempDir::new().expect("cache");
    let plugin = replicaset(Toolchain::Wasip2);
    let case = fixtures_dir().join("scale-3-to-1");
    let expected: ProposedActions =
        serde_yaml::from_str(&std::fs::read_to_string(case.join("expected.yaml")).expect("read"))
            .expect("parse");
    let now = std::fs::read_to_string(case.join("now"))
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|_| "2026-01-01T00:00:00Z".into());

    let input = case.join("input.yaml");
    let out = wasm_operator(
        cache.path(),
        &[
            "reconcile",
            "--plugin",
            path_str(&plugin),
            "--input",
            path_str(&input),
            "--now",
            &now,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed: ProposedActions =
        serde_yaml::from_str(&text(&out.stdout)).expect("stdout is a proposal");
    assert_eq!(printed, expected);

    // The same objects as `kubectl get -o json` would print them: a List.
    let objects = wasm_operator::offline::input::parse_objects(
        &std::fs::read_to_string(&input).expect("read"),
    )
    .expect("objects");
    let list =
        serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": objects});
    let dir = TempDir::new().expect("dir");
    let list_path = dir.path().join("list.json");
    std::fs::write(
        &list_path,
        serde_json::to_string_pretty(&list).expect("json"),
    )
    .expect("write");
    let out = wasm_operator(
        cache.path(),
        &[
            "reconcile",
            "--plugin",
            path_str(&plugin),
            "--input",
            path_str(&list_path),
            "--now",
            &now,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed: ProposedActions =
        serde_yaml::from_str(&text(&out.stdout)).expect("stdout is a proposal");
    assert_eq!(printed, expected);
}

fn write_misbehaving_input(dir: &Path, mode: &str) -> PathBuf {
    let path = dir.join(format!("{mode}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: jinghzhu.io/v1\nkind: Jinghzhu\nmetadata:\n  name: bad\n  namespace: default\n  uid: u-1\n  generation: 1\n  annotations:\n    {MISBEHAVE}: {mode}\nspec:\n  desired: 1\n"
        ),
    )
    .expect("write input");
    path
}

#[test]
fn plugin_errors_exit_non_zero_with_the_message_on_stderr() {
    let cache = TempDir::new().expect("cache");
    let dir = TempDir::new().expect("dir");
    let plugin = misbehaving();
    for (mode, message) in [
        ("fatal", "asked for a fatal error"),
        ("panic", "asked to panic"),
        ("spin", "deadline"),
    ] {
        let input = write_misbehaving_input(dir.path(), mode);
        let out = wasm_operator(
            cache.path(),
            &[
                "reconcile",
                "--plugin",
                path_str(&plugin),
                "--input",
                path_str(&input),
                "--plugin-timeout-ms",
                "200",
            ],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mode}: {stderr}");
        assert!(out.stdout.is_empty(), "{mode}: nothing on stdout");
        assert!(
            stderr.contains("error: misbehaving@") && stderr.contains(message),
            "{mode}: {stderr}"
        );
    }

    let not_wasm = dir.path().join("plugin.wasm");
    std::fs::write(&not_wasm, "definitely not wasm").expect("write");
    let input = write_misbehaving_input(dir.path(), "none");
    let out = wasm_operator(
        cache.path(),
        &[
            "reconcile",
            "--plugin",
            path_str(&not_wasm),
            "--input",
            path_str(&input),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not a WebAssembly file"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_proposal_that_does_not_converge_fails_the_idempotence_check() {
    // `delete-foreign` adds a delete of a pod it does not own to every
    // proposal: its output matches expected.yaml (written from the plugin's
    // own output) but the second round still deletes.
    let cache = TempDir::new().expect("cache");
    let plugin = misbehaving();
    let fixtures = TempDir::new().expect("fixtures");
    let case = fixtures.path().join("deletes-forever");
    std::fs::create_dir_all(&case).expect("mkdir");
    let input = write_misbehaving_input(&case, "delete-foreign");
    std::fs::rename(&input, case.join("input.yaml")).expect("rename");
    let single = wasm_operator(
        cache.path(),
        &[
            "reconcile",
            "--plugin",
            path_str(&plugin),
            "--input",
            path_str(&case.join("input.yaml")),
            "--now",
            "2026-01-01T00:00:00Z",
        ],
    );
    assert!(single.status.success(), "{}", text(&single.stderr));
    std::fs::write(case.join("expected.yaml"), &single.stdout).expect("write expected");

    let out = wasm_operator(
        cache.path(),
        &[
            "reconcile",
            "--plugin",
            path_str(&plugin),
            "--fixtures",
            path_str(fixtures.path()),
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAILED  deletes-forever"), "{stdout}");
    assert!(
        stdout.contains("not idempotent") && stdout.contains("not-owned-by-me"),
        "{stdout}"
    );
}

#[test]
fn crd_subcommand_prints_the_committed_crd() {
    let out = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .arg("crd")
        .output()
        .expect("run");
    assert!(out.status.success());
    let committed =
        std::fs::read_to_string(wasm_artifacts::workspace_root().join("examples/crd.yaml"))
            .expect("examples/crd.yaml");
    assert_eq!(
        text(&out.stdout),
        committed,
        "examples/crd.yaml is stale: regenerate it with `cargo run -p wasm-operator -- crd > examples/crd.yaml`"
    );
}
