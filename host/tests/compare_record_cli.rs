//! `reconcile --compare-with` and `record` as a binary, without a cluster:
//! exit statuses, what they print, their errors; and the retired
//! `WASM_OPERATOR_CACHE_DIR`. (`record` against a real cluster is covered by
//! `tests/e2e/tests/plugin_workflow.rs`.)

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::*;
use tempfile::TempDir;
use wasm_artifacts::{Toolchain, build};

fn wasm_operator(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(args)
        .env("WASM_OPERATOR_PRECOMPILED_DIR", cache)
        .env_remove("WASM_OPERATOR_CACHE_DIR")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run wasm-operator")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn compare_with_reports_each_differing_case_and_exits_1() {
    let cache = TempDir::new().expect("cache");
    let v1 = replicaset(Toolchain::Wasip2);
    let v2 = build("replicaset-plugin", &["v2"], Toolchain::Wasip2);
    let fixtures = fixtures_dir();
    let out = wasm_operator(
        &[
            "reconcile",
            "--fixtures",
            s(&fixtures),
            "--plugin",
            s(&v2),
            "--compare-with",
            s(&v1),
        ],
        cache.path(),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    // v2 prefixes every status message: scale-0-to-1 proposes a status either way.
    assert!(
        stdout.contains("DIFFERS  scale-0-to-1  (- old, + new)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("-   message: 0/1 pods, 0/1 ready; creating 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("+   message: '[v2] 0/1 pods, 0/1 ready; creating 1'"),
        "{stdout}"
    );
    assert!(
        stdout.contains("status: old 0/\"Scaling\""),
        "the summary line: {stdout}"
    );
    assert!(stdout.contains("(new: replicaset@0.1.0+v2"), "{stdout}");

    // The same plugin agrees with itself on every case.
    let out = wasm_operator(
        &[
            "reconcile",
            "--fixtures",
            s(&fixtures),
            "--plugin",
            s(&v1),
            "--compare-with",
            s(&v1),
        ],
        cache.path(),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("same     scale-3-to-1"), "{stdout}");
    assert!(stdout.contains(": 0 differ,"), "{stdout}");
}

/// `wasm-operator ARGS` with `RUST_LOG=rust_log`.
fn wasm_operator_logging(args: &[&str], cache: &Path, rust_log: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(args)
        .env("WASM_OPERATOR_PRECOMPILED_DIR", cache)
        .env_remove("WASM_OPERATOR_CACHE_DIR")
        .env("RUST_LOG", rust_log)
        .output()
        .expect("run wasm-operator")
}

#[test]
fn compare_with_prints_only_the_report_and_plugin_logs_only_when_asked() {
    let cache = TempDir::new().expect("cache");
    let v1 = replicaset(Toolchain::Wasip2);
    let v2 = build("replicaset-plugin", &["v2"], Toolchain::Wasip2);
    let fixtures = fixtures_dir();
    let args = [
        "reconcile",
        "--fixtures",
        s(&fixtures),
        "--plugin",
        s(&v2),
        "--compare-with",
        s(&v1),
    ];
    // The replicaset plugin logs "scaling up"/"scaling down" at debug level.
    let is_plugin_line = |line: &str| line.contains("scaling up") || line.contains("scaling down");
    let report_only = |stdout: &str| {
        for line in stdout.lines() {
            assert!(
                line.is_empty()
                    || line.starts_with("same     ")
                    || line.starts_with("DIFFERS  ")
                    || line.starts_with("    ")
                    || line.starts_with("10 case(s) in "),
                "not a line of the report: {line:?}\n{stdout}"
            );
            assert!(!is_plugin_line(line), "{line:?}");
        }
    };

    // The plugins' lines at debug, where the replicaset plugin writes its own.
    let plugin_debug = "info,plugin=debug";
    let quiet = wasm_operator_logging(&args, cache.path(), plugin_debug);
    let (stdout, stderr) = (text(&quiet.stdout), text(&quiet.stderr));
    assert_eq!(quiet.status.code(), Some(1), "{stdout}{stderr}");
    report_only(&stdout);
    assert!(
        !stderr.lines().any(is_plugin_line),
        "plugin lines are hidden by default: {stderr}"
    );

    let with_logs = [&args[..], &["--plugin-logs"]].concat();
    let logs = wasm_operator_logging(&with_logs, cache.path(), plugin_debug);
    let (stdout, stderr) = (text(&logs.stdout), text(&logs.stderr));
    assert_eq!(logs.status.code(), Some(1), "{stdout}{stderr}");
    report_only(&stdout);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("scaling up") && l.contains("plugin=replicaset")),
        "--plugin-logs shows them on stderr: {stderr}"
    );

    // At info (a user's terminal) the plugin's per-scale line stays out.
    let info = wasm_operator_logging(&with_logs, cache.path(), "info");
    let stderr = text(&info.stderr);
    assert_eq!(info.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.lines().any(is_plugin_line),
        "the scaling lines are at debug: {stderr}"
    );
}

#[test]
fn compare_with_works_on_one_input_and_exits_2_when_it_cannot_compare() {
    let cache = TempDir::new().expect("cache");
    let v1 = replicaset(Toolchain::Wasip2);
    let v2 = build("replicaset-plugin", &["v2"], Toolchain::Wasip2);
    let input = fixtures_dir().join("scale-3-to-1/input.yaml");
    let out = wasm_operator(
        &[
            "reconcile",
            "--input",
            s(&input),
            "--now",
            "2026-01-01T00:00:00Z",
            "--plugin",
            s(&v2),
            "--compare-with",
            s(&v1),
        ],
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("DIFFERS  default/web"),
        "{}",
        text(&out.stdout)
    );

    let not_a_plugin = TempDir::new().expect("dir");
    let bogus = not_a_plugin.path().join("old.wasm");
    std::fs::write(&bogus, "not wasm").expect("write");
    let out = wasm_operator(
        &[
            "reconcile",
            "--input",
            s(&input),
            "--plugin",
            s(&v1),
            "--compare-with",
            s(&bogus),
        ],
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("is not a WebAssembly file"),
        "{}",
        text(&out.stderr)
    );

    let out = wasm_operator(
        &[
            "reconcile",
            "--fixtures",
            s(not_a_plugin.path()),
            "--plugin",
            s(&v1),
            "--compare-with",
            s(&v1),
        ],
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no fixtures in"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn record_needs_a_choice_of_objects_and_a_reachable_cluster() {
    let dir = TempDir::new().expect("dir");
    let out = wasm_operator(&["record", "--out", s(dir.path())], dir.path());
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(
        text(&out.stderr).contains("<NAME|--all|--selector <SELECTOR>>"),
        "{}",
        text(&out.stderr)
    );

    let out = wasm_operator(
        &["record", "web", "--all", "--out", s(dir.path())],
        dir.path(),
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "names and --all exclude each other"
    );

    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n\
             users: [{{name: u, user: {{}}}}]\n\
             contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n"
        ),
    )
    .expect("write kubeconfig");
    let out_dir = dir.path().join("fixtures");
    let out = wasm_operator(
        &[
            "record",
            "-n",
            "shop",
            "web",
            "--kubeconfig",
            s(&kubeconfig),
            "--out",
            s(&out_dir),
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!(
            "cannot reach the API server at http://127.0.0.1:{port}"
        )),
        "{}",
        text(&out.stderr)
    );
    assert!(!out_dir.exists(), "nothing written");

    let out = wasm_operator(
        &[
            "record",
            "--all",
            "--kubeconfig",
            s(&dir.path().join("missing")),
            "--out",
            s(&out_dir),
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("reading the kubeconfig"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_retired_cache_variable_is_named_in_a_warning() {
    let dir = TempDir::new().expect("dir");
    let out = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .arg("crd")
        .env("WASM_OPERATOR_CACHE_DIR", dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run");
    assert!(out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("WASM_OPERATOR_CACHE_DIR is no longer read")
            && stderr.contains("WASM_OPERATOR_PRECOMPILED_DIR")
            && stderr.contains("WASM_OPERATOR_KUBE_CACHE_DIR"),
        "{stderr}"
    );
    let quiet = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .arg("crd")
        .env_remove("WASM_OPERATOR_CACHE_DIR")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run");
    assert!(!text(&quiet.stderr).contains("WASM_OPERATOR_CACHE_DIR"));
}
