//! `wasm-operator run` as a binary: what it says when there is no cluster to
//! talk to. (Running against a real cluster is covered by `tests/e2e`.)

use std::path::Path;
use std::process::Command;

/// Runs `wasm-operator run` with `KUBECONFIG=kubeconfig` outside any
/// cluster; returns its exit code and stderr.
fn run_with_kubeconfig(kubeconfig: &Path, home: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(["run", "--plugin", "plugin.wasm", "--no-precompiled-cache"])
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run wasm-operator");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_kubeconfig_is_a_clear_error_that_names_the_fix() {
    let home = tempfile::TempDir::new().expect("temp home");
    let (code, stderr) = run_with_kubeconfig(&home.path().join("no-such-kubeconfig"), home.path());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("no Kubernetes configuration found")
            && stderr.contains("Set KUBECONFIG")
            && stderr.contains("local-control-plane"),
        "the error names the fix: {stderr}"
    );
}

#[test]
fn an_unreachable_api_server_is_a_clear_error() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    // A loopback port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
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
    let (code, stderr) = run_with_kubeconfig(&kubeconfig, dir.path());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot reach the API server at http://127.0.0.1:{port}"
        )),
        "{stderr}"
    );
}

#[test]
fn flags_come_from_the_environment_and_bad_leader_election_durations_are_refused_up_front() {
    let home = tempfile::TempDir::new().expect("temp home");
    let out = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .arg("run")
        .env_clear()
        .env("HOME", home.path())
        .env("WASM_OPERATOR_PLUGIN", "plugin.wasm")
        .env("WASM_OPERATOR_LEADER_ELECT", "true")
        .env("WASM_OPERATOR_LEADER_ELECT_RENEW_DEADLINE", "20s")
        .env("KUBECONFIG", home.path().join("none"))
        .output()
        .expect("run wasm-operator");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--leader-elect-renew-deadline (20s) must be shorter than --leader-elect-lease-duration (15s)"),
        "checked before connecting, naming the flag: {stderr}"
    );
}

#[test]
fn an_instance_pool_smaller_than_the_workers_need_is_refused_up_front() {
    let home = tempfile::TempDir::new().expect("temp home");
    let run = |pool: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
            .args(["run", "--plugin", "plugin.wasm", "--workers", "8"])
            .args(["--plugin-instance-pool", pool])
            .env_clear()
            .env("HOME", home.path())
            .env("KUBECONFIG", home.path().join("none"))
            .output()
            .expect("run wasm-operator");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let small = run("11");
    assert!(
        small.contains(
            "--plugin-instance-pool 11 is smaller than the 12 instances 8 workers may need at once"
        ),
        "checked before connecting, naming the flag: {small}"
    );
    // Enough slots, or none (on demand): the next problem is the missing
    // kubeconfig, so the pool passed.
    for ok in ["12", "0"] {
        let stderr = run(ok);
        assert!(
            !stderr.contains("--plugin-instance-pool")
                && stderr.contains("no Kubernetes configuration found"),
            "{ok}: {stderr}"
        );
    }
}
