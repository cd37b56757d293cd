//! The compile helper against the runtime that serves: the key it compiles
//! for is the serving engine's, what it compiles loads and runs in the
//! runtime, it refuses to compile for another engine's key, and an artifact
//! made for an engine of other settings is refused by the runtime, never
//! loaded or stored.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use wasm_artifacts::Toolchain;
use wasm_operator_runtime::engine::{engine_key, new_engine};
use wasm_operator_runtime::{
    ChildCompiler, Compiler, LoadError, LoadOutcome, Runtime, RuntimeConfig,
};

const HELPER: &str = env!("CARGO_BIN_EXE_wasm-operator-compile");

fn plugin_bytes() -> Vec<u8> {
    let path = wasm_artifacts::build("replicaset-plugin", &[], Toolchain::Wasip2);
    std::fs::read(path).expect("the example plugin")
}

/// A runtime (the serving host's defaults: the instance pool) whose
/// compiler is the child `program`, with its own cache directory.
fn runtime_compiling_with(program: PathBuf, cache: &tempfile::TempDir) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        compiler: Compiler::Child(ChildCompiler {
            program,
            timeout: Duration::from_secs(120),
            memory_limit_bytes: 1 << 30,
        }),
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn artifacts_in(cache: &tempfile::TempDir) -> usize {
    std::fs::read_dir(cache.path())
        .expect("cache dir")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".cwasm"))
        .count()
}

#[test]
fn the_helper_compiles_for_the_serving_engine_s_key() {
    let output = Command::new(HELPER)
        .arg("engine-key")
        .output()
        .expect("running the helper");
    assert!(output.status.success(), "{output:?}");
    let serving = new_engine(&RuntimeConfig::default()).expect("engine");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        engine_key(&serving)
    );
}

#[test]
fn what_the_helper_compiles_loads_and_is_cached() {
    let cache = tempfile::tempdir().expect("temp dir");
    let runtime = runtime_compiling_with(PathBuf::from(HELPER), &cache);
    let plugin = runtime
        .load(&plugin_bytes(), "replicaset")
        .expect("compiled by the helper and loaded");
    assert_eq!(plugin.load_outcome(), LoadOutcome::Compiled);
    assert_eq!(artifacts_in(&cache), 1);
    // A second runtime takes it from the cache, no helper needed.
    let again = runtime_compiling_with(PathBuf::from("/nonexistent/helper"), &cache);
    let cached = again
        .load(&plugin_bytes(), "replicaset")
        .expect("from the cache");
    assert_eq!(cached.load_outcome(), LoadOutcome::FromCache);
}

#[test]
fn the_helper_refuses_to_compile_for_another_engine() {
    let mut child = Command::new(HELPER)
        .args(["compile-plugin", "--engine-key", "0123456789abcdef"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running the helper");
    drop(child.stdin.take());
    let output = child.wait_with_output().expect("the helper's output");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "it compiled nothing");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("differs from the host's (0123456789abcdef)"),
        "{said}"
    );
    assert!(said.contains("same release"), "{said}");
}

#[test]
fn an_artifact_for_an_engine_of_other_settings_is_refused_not_loaded() {
    // What a helper of another build would return: the plugin compiled
    // without epoch interruption (deadlines could not stop it).
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true).epoch_interruption(false);
    let other = wasmtime::Engine::new(&config).expect("engine");
    let artifact = other
        .precompile_component(&plugin_bytes())
        .expect("precompiled for the other engine");
    let scripts = tempfile::tempdir().expect("temp dir");
    let artifact_path = scripts.path().join("artifact.cwasm");
    std::fs::write(&artifact_path, artifact).expect("write the artifact");
    let program = scripts.path().join("helper-of-another-build");
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\ncat >/dev/null\ncat '{}'\n",
            artifact_path.display()
        ),
    )
    .expect("write the script");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))
        .expect("make it executable");

    let cache = tempfile::tempdir().expect("temp dir");
    let runtime = runtime_compiling_with(program, &cache);
    match runtime.load(&plugin_bytes(), "replicaset") {
        Err(LoadError::Compile { message, .. }) => {
            assert!(
                message.contains("not a component this engine can load"),
                "{message}"
            );
            assert!(message.contains("limits/compile-output"), "{message}");
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("an artifact for another engine was loaded"),
    }
    assert_eq!(artifacts_in(&cache), 0, "nothing stored");
}
