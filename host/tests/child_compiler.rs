//! Compiling plugins in a child process (what `wasm-operator run` does):
//! the real `wasm-operator compile-plugin` executable compiles the example
//! plugin for the host's engine, the result reconciles like an in-process
//! compile and is cached; a child past its time or memory is stopped and
//! the plugin refused with the rule it broke.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::*;
use tempfile::TempDir;
use wasm_artifacts::Toolchain;
use wasm_operator::runtime::{
    ChildCompiler, Compiler, LoadError, LoadOutcome, Runtime, RuntimeConfig,
};

fn executable() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wasm-operator"))
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
    let started = Instant::now();
    let err = runtime
        .load(&plugin_bytes(), "replicaset")
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
