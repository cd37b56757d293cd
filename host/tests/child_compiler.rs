//! Compiling plugins in a child process (what `wasm-operator run` does):
//! the real `wasm-operator compile-plugin` executable compiles the example
//! plugin for the host's engine, the result reconciles like an in-process
//! compile and is cached; a child past its time or memory is stopped and
//! the plugin refused with the rule it broke; the child starts with an empty
//! environment, no inherited descriptors and an empty working directory and
//! cannot read the host's files (Landlock); what a compiler returns is
//! checked before it is signed.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::*;
use tempfile::TempDir;
use wasm_artifacts::Toolchain;
use wasm_operator::runtime::{
    ChildCompiler, Compiler, LoadError, LoadOutcome, Runtime, RuntimeConfig,
};

/// The compile helper, built beside the host's test binary (the serving
/// `wasm-operator` has no compiler, and a whole run may rebuild it without).
fn executable() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let status = std::process::Command::new(env!("CARGO"))
                .args(["build", "--quiet", "-p", "wasm-operator-compile"])
                .status()
                .expect("running cargo build -p wasm-operator-compile");
            assert!(status.success(), "building the compile helper failed");
            PathBuf::from(env!("CARGO_BIN_EXE_wasm-operator"))
                .with_file_name("wasm-operator-compile")
        })
        .clone()
}

fn runtime(child: ChildCompiler, cache_dir: Option<PathBuf>) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir,
        compiler: Compiler::Child(child),
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn child(timeout: Duration, memory_limit_bytes: u64) -> ChildCompiler {
    ChildCompiler {
        program: executable(),
        timeout,
        memory_limit_bytes,
    }
}

fn plugin_bytes() -> Vec<u8> {
    std::fs::read(replicaset(Toolchain::Wasip2)).expect("read the example plugin")
}

#[test]
fn a_plugin_compiled_in_a_child_reconciles_like_one_compiled_in_process() {
    let cache = TempDir::new().expect("temp dir");
    let bytes = plugin_bytes();
    let in_child = runtime(
        child(Duration::from_secs(120), 1 << 30),
        Some(cache.path().to_path_buf()),
    );
    let plugin = in_child
        .load(&bytes, "replicaset")
        .expect("compiled in a child");
    assert_eq!(plugin.load_outcome(), LoadOutcome::Compiled);

    let in_process = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let reference = in_process
        .load(&bytes, "replicaset")
        .expect("compiled here");
    let jz = jinghzhu("web", 3);
    let pods = vec![pod(&jz, "web-00001", "Running", true, 100)];
    let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    assert_eq!(
        plugin
            .reconcile_blocking(&jz, &pods, now)
            .expect("reconcile"),
        reference
            .reconcile_blocking(&jz, &pods, now)
            .expect("reconcile"),
    );

    // What the child compiled was stored: the next load needs no compiler.
    let again = runtime(
        child(Duration::from_secs(120), 1 << 30),
        Some(cache.path().to_path_buf()),
    );
    let cached = again.load(&bytes, "replicaset").expect("from the cache");
    assert_eq!(cached.load_outcome(), LoadOutcome::FromCache);
}

#[test]
fn a_compile_past_its_time_is_stopped_and_refused_by_rule() {
    let runtime = runtime(child(Duration::from_millis(1), 1 << 30), None);
    // Built (or waited for) before the clock starts: the bound is the compile's.
    let bytes = plugin_bytes();
    let started = Instant::now();
    let err = runtime
        .load(&bytes, "replicaset")
        .expect_err("no compile finishes in 1 ms");
    assert!(
        matches!(&err, LoadError::Compile { message, .. } if message.contains("rule limits/compile-time")),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_compile_past_its_memory_is_stopped_and_refused_by_rule() {
    let bytes = plugin_bytes();
    let runtime = runtime(child(Duration::from_secs(120), 8 << 20), None);
    let err = runtime
        .load(&bytes, "replicaset")
        .expect_err("the compiler needs more than 8 MiB");
    assert!(
        matches!(&err, LoadError::Compile { message, .. } if message.contains("rule limits/compile-memory")),
        "{err}"
    );
}

#[test]
fn a_child_built_for_another_engine_refuses_to_compile() {
    // The child checks the engine key it is given against its own engine.
    let output = std::process::Command::new(executable())
        .args(["compile-plugin", "--engine-key", "0000000000000000"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run compile-plugin");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("differs from the host's"), "{stderr}");
}

/// A shell script standing in for the compiler: `body` runs with the
/// child's arguments in `$@`.
fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write the script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[test]
fn the_child_starts_with_nothing_and_cannot_read_what_the_host_can() {
    let dir = TempDir::new().expect("temp dir");
    // A secret the host can read (like the cache key or the service account
    // token), and a descriptor the host leaves open without close-on-exec.
    let secret = dir.path().join("secret-key");
    std::fs::write(&secret, "only for the host").expect("write the secret");
    assert!(std::fs::read(&secret).is_ok(), "the host reads it");
    let leaked = std::fs::File::open(&secret).expect("open the secret");
    let leaked_fd = std::os::fd::AsRawFd::as_raw_fd(&leaked);
    // SAFETY: clears the close-on-exec flag of a descriptor this test owns.
    assert_eq!(unsafe { libc::fcntl(leaked_fd, libc::F_SETFD, 0) }, 0);

    // The real child, with `--probe`: it reports instead of compiling.
    let program = script(
        dir.path(),
        "probing-compiler",
        &format!(
            "exec {} \"$@\" --probe {} --probe /etc/passwd",
            executable().display(),
            secret.display()
        ),
    );
    let runtime = runtime(
        ChildCompiler {
            program,
            ..child(Duration::from_secs(60), 1 << 30)
        },
        None,
    );
    let err = runtime
        .load(&plugin_bytes(), "replicaset")
        .expect_err("a probing child does not compile");
    drop(leaked);
    let report = err.to_string();
    assert!(report.contains("sandbox probe:"), "{report}");
    assert!(report.contains("sandbox=Enforced"), "{report}");
    // Landlock covers the threads started after it: the child sandboxes
    // itself while it is the only thread.
    assert!(report.contains("threads_before_sandbox=1"), "{report}");
    // The child's environment is empty; the only name is the one the
    // wrapper script's /bin/sh exports itself (PWD).
    assert!(
        report.contains(" env=[] ") || report.contains(" env=[PWD] "),
        "{report}"
    );
    assert!(report.contains(" fds=0,1,2 "), "{report}");
    assert!(
        report.contains(&format!("read({})=denied", secret.display())),
        "{report}"
    );
    assert!(report.contains("read(/etc/passwd)=denied"), "{report}");
    let host_cwd = std::env::current_dir().expect("cwd");
    assert!(
        !report.contains(&format!("cwd={} ", host_cwd.display())),
        "{report}"
    );
    assert!(report.contains("wasm-operator-compile-"), "{report}");
}

#[test]
fn garbage_from_the_compiler_is_refused_and_never_signed() {
    let dir = TempDir::new().expect("temp dir");
    let cache = TempDir::new().expect("cache dir");
    // A precompiled core module: a real wasmtime artifact, but not a
    // component.
    let engine = wasmtime::Engine::default();
    let module = engine
        .precompile_module(b"\0asm\x01\0\0\0")
        .expect("precompile an empty module");
    let module_file = dir.path().join("module.cwasm");
    std::fs::write(&module_file, module).expect("write");
    let cases = [
        ("garbage", "printf 'not a compiled plugin'".to_owned()),
        ("core-module", format!("cat {}", module_file.display())),
        ("truncated-nothing", String::new()),
    ];
    for (name, output) in cases {
        let program = script(dir.path(), name, &format!("cat >/dev/null\n{output}"));
        let runtime = runtime(
            ChildCompiler {
                program,
                ..child(Duration::from_secs(60), 1 << 30)
            },
            Some(cache.path().to_path_buf()),
        );
        let err = runtime
            .load(&plugin_bytes(), "replicaset")
            .expect_err("the compiler's garbage is refused");
        assert!(
            matches!(&err, LoadError::Compile { message, .. } if message.contains("rule limits/compile-output")),
            "{name}: {err}"
        );
        let stored: Vec<_> = std::fs::read_dir(cache.path())
            .expect("read the cache")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
            .collect();
        assert!(
            stored.is_empty(),
            "{name}: something was signed: {stored:?}"
        );
    }
}
