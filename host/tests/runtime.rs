//! The Wasm runtime against real components: the example plugin built both
//! ways, the misbehaving plugin's hazards, a component of another world,
//! files that are not components, and the precompiled cache.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use support::*;
use tempfile::TempDir;
use wasm_artifacts::Toolchain;
use wasm_operator::actions::ProposedActions;
use wasm_operator::offline::input;
use wasm_operator::runtime::{
    InstanceAllocator, LoadError, LoadOutcome, LoadedPlugin, PluginError, Runtime, RuntimeConfig,
};

fn config() -> RuntimeConfig {
    RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    }
}

fn load(runtime: &Runtime, path: &std::path::Path) -> Result<Arc<LoadedPlugin>, LoadError> {
    let bytes = std::fs::read(path).expect("read artifact");
    runtime.load(&bytes, &path.display().to_string())
}

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

/// Inputs covering scale up, down, converged, terminating-free mixes of
/// phases and readiness, plus every golden fixture's input.
fn sample_inputs() -> Vec<input::OfflineInput> {
    let mut inputs = Vec::new();
    for (desired, pods) in [(0, 0), (1, 0), (3, 0), (1, 3), (3, 3), (2, 5), (0, 4)] {
        let jz = jinghzhu("web", desired);
        let pods = (0..pods)
            .map(|i| {
                let phase = ["Running", "Pending", "Failed"][i % 3];
                pod(
                    &jz,
                    &format!("web-{i:05}"),
                    phase,
                    i % 2 == 0,
                    100 + i as i64,
                )
            })
            .collect();
        inputs.push(input::OfflineInput { jinghzhu: jz, pods });
    }
    let dir = fixtures_dir();
    if dir.is_dir() {
        for case in wasm_operator::offline::fixtures::cases(&dir).expect("fixture cases") {
            inputs.push(input::read(&[case.join("input.yaml")]).expect("fixture input"));
        }
    }
    inputs
}

#[test]
fn both_builds_of_the_example_plugin_load_and_agree() {
    let runtime = Runtime::new(config()).expect("runtime");
    let wasip2 = load(&runtime, &replicaset(Toolchain::Wasip2)).expect("wasip2 build loads");
    let component = load(&runtime, &replicaset(Toolchain::CargoComponent))
        .expect("cargo-component build loads");
    assert_ne!(
        wasip2.digest(),
        component.digest(),
        "two different artifacts"
    );
    assert_eq!(wasip2.info().name, "replicaset");
    assert_eq!(wasip2.info(), component.info());

    let inputs = sample_inputs();
    assert!(inputs.len() >= 7);
    let mut creating = 0;
    let mut deleting = 0;
    for input in &inputs {
        let a = wasip2
            .reconcile_blocking(&input.jinghzhu, &input.pods, now())
            .expect("wasip2 reconcile");
        let b = component
            .reconcile_blocking(&input.jinghzhu, &input.pods, now())
            .expect("cargo-component reconcile");
        assert_eq!(a, b, "the two builds disagree on {:?}", input.jinghzhu.spec);
        creating += usize::from(!a.create_pods.is_empty());
        deleting += usize::from(!a.delete_pods.is_empty());
    }
    assert!(
        creating >= 2 && deleting >= 2,
        "the inputs exercise both directions"
    );
}

#[test]
fn scale_up_from_nothing_creates_the_difference() {
    let runtime = Runtime::new(config()).expect("runtime");
    let plugin = load(&runtime, &replicaset(Toolchain::Wasip2)).expect("load");
    let jz = jinghzhu("web", 3);
    let out = plugin
        .reconcile_blocking(&jz, &[], now())
        .expect("reconcile");
    assert_eq!(out.create_pods.len(), 3);
    assert!(
        out.create_pods
            .iter()
            .all(|c| c.generate_name.as_deref() == Some("web-"))
    );
    let status = out.status.expect("a status");
    assert_eq!((status.current, status.observed_generation), (0, Some(1)));
}

#[test]
fn a_runaway_plugin_hits_the_deadline_and_the_plugin_keeps_working() {
    let deadline = Duration::from_millis(300);
    let runtime = Runtime::new(RuntimeConfig {
        deadline,
        ..config()
    })
    .expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let started = Instant::now();
    let err = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("spin"), &[], now())
        .expect_err("spin must not finish");
    let took = started.elapsed();
    assert!(
        matches!(err, PluginError::Deadline(d) if d == deadline),
        "{err:?}"
    );
    assert!(took >= deadline, "stopped early: {took:?}");
    assert!(
        took < deadline + Duration::from_secs(2),
        "stopped late: {took:?}"
    );
    assert!(err.to_string().contains("deadline"), "{err}");
    assert!(err.retryable());

    let fine = plugin
        .reconcile_blocking(&jinghzhu("web", 1), &[], now())
        .expect("the same plugin still reconciles");
    assert_eq!(fine.create_pods.len(), 1);
}

#[test]
fn a_plugin_sleeping_in_wasi_is_stopped_at_its_deadline() {
    let deadline = Duration::from_millis(300);
    let runtime = Runtime::new(RuntimeConfig {
        deadline,
        ..config()
    })
    .expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let started = Instant::now();
    let err = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("sleep"), &[], now())
        .expect_err("an hour's sleep must not finish");
    let took = started.elapsed();
    assert!(
        matches!(err, PluginError::Deadline(d) if d == deadline),
        "{err:?}"
    );
    assert!(took >= deadline, "stopped early: {took:?}");
    assert!(
        took < deadline + Duration::from_secs(2),
        "a sleeping guest held the call for {took:?}"
    );
    plugin
        .reconcile_blocking(&jinghzhu("web", 1), &[], now())
        .expect("the same plugin still reconciles");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeping_plugins_do_not_hold_threads_past_their_deadline() {
    let deadline = Duration::from_millis(200);
    let runtime = Runtime::new(RuntimeConfig {
        deadline,
        ..config()
    })
    .expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let started = Instant::now();
    // Eight concurrent sleepers, more than the async workers: each call
    // must end at its own deadline, all of them well before an hour.
    let calls = (0..8).map(|_| {
        let plugin = plugin.clone();
        async move {
            plugin
                .reconcile(&misbehaving_jinghzhu("sleep"), &[], "shop/bad")
                .await
        }
    });
    for result in futures::future::join_all(calls).await {
        assert!(
            matches!(result, Err(PluginError::Deadline(_))),
            "{result:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn unbounded_recursion_traps_cleanly() {
    let runtime = Runtime::new(config()).expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let err = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("recurse"), &[], now())
        .expect_err("recursion must not finish");
    let PluginError::Trap { message } = &err else {
        panic!("expected a trap, got {err:?}");
    };
    assert!(message.contains("call stack was exhausted"), "{message}");
    plugin
        .reconcile_blocking(&jinghzhu("web", 1), &[], now())
        .expect("the same plugin still reconciles");
}

#[test]
fn an_output_over_the_limit_is_refused_before_the_host_copies_it() {
    let runtime = Runtime::new(config()).expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let err = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("many"), &[], now())
        .expect_err("200000 creates are over the output limit");
    assert!(matches!(err, PluginError::OutputTooLarge(_)), "{err:?}");
    assert!(err.to_string().contains("4096 KiB"), "{err}");
    plugin
        .reconcile_blocking(&jinghzhu("web", 1), &[], now())
        .expect("the same plugin still reconciles");
}

#[test]
fn a_plugin_with_an_invalid_info_is_refused_at_load() {
    let runtime = Runtime::new(config()).expect("runtime");
    let err = load(&runtime, &misbehaving_bad_info()).expect_err("refused");
    assert!(matches!(err, LoadError::BadInfo { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("info().name"), "{text}");
    assert!(!text.contains('\n'), "the forged line is escaped: {text}");
}

#[test]
fn a_log_flood_is_cut_to_the_budget_and_cannot_forge_lines() {
    let capture = Capture::global();
    let runtime = Runtime::new(RuntimeConfig {
        deadline: Duration::from_secs(10),
        ..config()
    })
    .expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let mut jz = misbehaving_jinghzhu("log-flood");
    jz.metadata.name = Some("flood".into());
    plugin
        .reconcile_blocking(&jz, &[], now())
        .expect("a flood is muted, not fatal");
    let lines: Vec<_> = capture
        .events()
        .into_iter()
        .filter(|e| e.field("object") == Some("shop/flood"))
        .collect();
    let forwarded: Vec<_> = lines
        .iter()
        .filter(|e| {
            e.field("message")
                .is_some_and(|m| m.contains("forged host line"))
        })
        .collect();
    let bytes: usize = forwarded
        .iter()
        .map(|e| e.field("message").map_or(0, str::len) + e.field("fields").map_or(0, str::len))
        .sum();
    assert!(!forwarded.is_empty(), "some lines get through");
    assert!(
        bytes <= 64 * 1024 + 8 * 1024,
        "{bytes} bytes forwarded for one call"
    );
    for line in &forwarded {
        let text = format!("{:?}", line.fields);
        assert!(
            !line.field("message").unwrap_or_default().contains('\n')
                && !line.field("message").unwrap_or_default().contains('\x1b')
                && !line.field("fields").unwrap_or_default().contains('\n'),
            "raw control characters reached the host log: {text}"
        );
    }
    assert!(
        lines.iter().any(|e| e
            .field("message")
            .is_some_and(|m| m.contains("were dropped"))),
        "the drop is reported"
    );
}

#[test]
fn a_memory_hog_hits_the_cap_and_the_plugin_keeps_working() {
    let runtime = Runtime::new(RuntimeConfig {
        memory_limit_bytes: 32 * 1024 * 1024,
        ..config()
    })
    .expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let err = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("hog"), &[], now())
        .expect_err("hog must not finish");
    assert!(
        matches!(err, PluginError::MemoryCap(cap) if cap == 32 * 1024 * 1024),
        "{err:?}"
    );
    assert!(err.to_string().contains("32 MiB"), "{err}");
    plugin
        .reconcile_blocking(&jinghzhu("web", 1), &[], now())
        .expect("the same plugin still reconciles");
}

#[test]
fn a_panic_is_a_trap_error_with_the_panic_message() {
    let runtime = Runtime::new(config()).expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let err = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("panic"), &[], now())
        .expect_err("panic");
    let PluginError::Trap { message } = &err else {
        panic!("expected a trap, got {err:?}");
    };
    assert!(
        message.contains("misbehaving plugin: asked to panic by test.jinghzhu.io/misbehave on bad"),
        "{message}"
    );
    assert!(message.contains("panicked at"), "{message}");
    plugin
        .reconcile_blocking(&jinghzhu("web", 1), &[], now())
        .expect("still works");
}

#[test]
fn returned_errors_keep_their_retryability() {
    let runtime = Runtime::new(config()).expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let retryable = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("error"), &[], now())
        .expect_err("error");
    assert!(
        matches!(&retryable, PluginError::Returned { retryable: true, message } if message.contains("retryable error")),
        "{retryable:?}"
    );
    assert!(retryable.retryable() && retryable.is_returned_error());
    let fatal = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("fatal"), &[], now())
        .expect_err("fatal");
    assert!(
        matches!(&fatal, PluginError::Returned { retryable: false, message } if message.contains("fatal error")),
        "{fatal:?}"
    );
    assert!(!fatal.retryable());
}

#[test]
fn the_sandbox_grants_no_environment_arguments_filesystem_or_network() {
    // The host process has an environment and arguments; none may leak in.
    assert!(std::env::vars_os().count() > 0);
    let runtime = Runtime::new(config()).expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let out = plugin
        .reconcile_blocking(&misbehaving_jinghzhu("probe-sandbox"), &[], now())
        .expect("probe mode still reconciles");
    let report = out
        .events
        .iter()
        .find(|e| e.reason == "SandboxProbe")
        .map(|e| e.message.clone())
        .expect("a SandboxProbe event");
    assert!(report.starts_with("env=0 args=0 "), "{report}");
    for reach in ["fs_root", "fs_cwd", "fs_create", "tcp"] {
        assert!(
            report.contains(&format!("{reach}=denied(")),
            "{reach} must be denied: {report}"
        );
    }
}

#[test]
fn log_calls_stdout_and_stderr_reach_tracing_with_tags() {
    let runtime = Runtime::new(config()).expect("runtime");
    let plugin = load(&runtime, &misbehaving()).expect("load");
    let capture = Capture::global();
    let mut jz = misbehaving_jinghzhu("log");
    jz.metadata.name = Some("chatty".into());
    let out = plugin.reconcile_blocking(&jz, &[], now());
    assert_eq!(out.expect("log mode still reconciles").create_pods.len(), 1);

    // Other tests run at the same time: keep this call's lines only.
    let events: Vec<Captured> = capture
        .events()
        .into_iter()
        .filter(|e| e.target == "plugin" && e.field("object") == Some("shop/chatty"))
        .collect();
    for event in &events {
        assert_eq!(event.field("plugin"), Some("misbehaving"), "{event:?}");
        assert_eq!(
            event.field("digest"),
            Some(&plugin.digest()[..19]),
            "{event:?}"
        );
    }
    let logged: Vec<&Captured> = events
        .iter()
        .filter(|e| {
            e.field("fields")
                .is_some_and(|f| f.contains("misbehave=log"))
        })
        .collect();
    let levels: Vec<tracing::Level> = logged.iter().map(|e| e.level).collect();
    use tracing::Level;
    assert_eq!(
        levels,
        [
            Level::INFO,
            Level::INFO,
            Level::INFO,
            Level::WARN,
            Level::ERROR
        ]
    );
    assert!(
        logged[0]
            .field("message")
            .is_some_and(|m| m.contains("log line 1 of 5"))
    );
    assert!(
        logged[4]
            .field("fields")
            .is_some_and(|f| f.contains("line=5") && f.contains("jinghzhu=chatty"))
    );

    let stdout = events
        .iter()
        .find(|e| e.field("stream") == Some("stdout"))
        .expect("stdout line");
    assert_eq!(stdout.level, Level::INFO);
    assert_eq!(
        stdout.field("message"),
        Some("misbehaving plugin: a line on stdout for chatty")
    );
    let stderr = events
        .iter()
        .find(|e| e.field("stream") == Some("stderr"))
        .expect("stderr line");
    assert_eq!(stderr.level, Level::WARN);
    assert_eq!(
        stderr.field("message"),
        Some("misbehaving plugin: a line on stderr for chatty")
    );
}

#[test]
fn a_component_of_another_world_is_refused_naming_both_versions() {
    let runtime = Runtime::new(config()).expect("runtime");
    let err = load(&runtime, &other_world()).expect_err("other world");
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("jinghzhu:operator@0.9.0"), "{message}");
    assert!(
        message.contains("serves contract versions 0.1.0, 0.2.0"),
        "{message}"
    );
}

#[test]
fn files_that_are_not_components_are_refused_clearly() {
    let runtime = Runtime::new(config()).expect("runtime");
    let text = runtime
        .load(b"# just a text file\nhello\n", "notes.txt")
        .expect_err("text");
    assert!(matches!(text, LoadError::NotWasm { .. }));
    assert!(
        text.to_string()
            .contains("notes.txt is not a WebAssembly file"),
        "{text}"
    );

    // The smallest core module: magic and version 1, no sections.
    let core = runtime
        .load(b"\0asm\x01\0\0\0", "core.wasm")
        .expect_err("core");
    assert!(matches!(core, LoadError::CoreModule { .. }));
    let message = core.to_string();
    assert!(
        message.contains("is a core Wasm module, not a component"),
        "{message}"
    );
    assert!(
        message.contains("cargo component build") && message.contains("wasm32-wasip2"),
        "{message}"
    );

    let mangled = runtime
        .load(b"\0asm\x0d\0\x01\0garbage", "mangled.wasm")
        .expect_err("mangled");
    assert!(matches!(mangled, LoadError::Compile { .. }), "{mangled:?}");
}

#[test]
fn precompiled_artifacts_are_reused_and_corrupt_ones_recompiled() {
    let cache = TempDir::new().expect("temp dir");
    let config = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let path = replicaset(Toolchain::Wasip2);
    let jz = jinghzhu("web", 2);

    let first = load(&Runtime::new(config.clone()).expect("runtime"), &path).expect("load");
    assert_eq!(first.load_outcome(), LoadOutcome::Compiled);
    let expected = first
        .reconcile_blocking(&jz, &[], now())
        .expect("reconcile");
    let artifacts: Vec<_> = std::fs::read_dir(cache.path())
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.file_name().is_some_and(|n| n != ".key"))
        .collect();
    assert_eq!(
        artifacts.len(),
        1,
        "one artifact, no temporary files left: {artifacts:?}"
    );
    let artifact = &artifacts[0];
    let digest_hex = first.digest().trim_start_matches("sha256:");
    assert!(
        artifact
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(digest_hex))
    );

    // A new runtime, as after a restart: the artifact is used.
    let second = load(&Runtime::new(config.clone()).expect("runtime"), &path).expect("load");
    assert_eq!(second.load_outcome(), LoadOutcome::FromCache);
    assert_eq!(
        second
            .reconcile_blocking(&jz, &[], now())
            .expect("reconcile"),
        expected
    );

    // Garbage, a truncated file, one flipped bit in the code: each is
    // compiled again and replaced (while `second` still uses its copy).
    let good = std::fs::read(artifact).expect("artifact");
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x10;
    for corrupt in [
        b"not an artifact at all".to_vec(),
        good[..good.len() / 2].to_vec(),
        flipped,
    ] {
        std::fs::write(artifact, &corrupt).expect("corrupt the cache");
        let again = load(&Runtime::new(config.clone()).expect("runtime"), &path)
            .expect("load despite corruption");
        assert_eq!(again.load_outcome(), LoadOutcome::Compiled);
        assert_eq!(
            again
                .reconcile_blocking(&jz, &[], now())
                .expect("reconcile"),
            expected
        );
        let healed = load(&Runtime::new(config.clone()).expect("runtime"), &path).expect("load");
        assert_eq!(
            healed.load_outcome(),
            LoadOutcome::FromCache,
            "the bad file was replaced"
        );
    }
    assert_eq!(
        second
            .reconcile_blocking(&jz, &[], now())
            .expect("reconcile"),
        expected
    );

    // Caching off: always compiled, nothing written.
    let off = RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(off).expect("runtime");
    assert_eq!(
        load(&runtime, &path).expect("load").load_outcome(),
        LoadOutcome::Compiled
    );
    assert_eq!(
        load(&runtime, &path).expect("load").load_outcome(),
        LoadOutcome::Compiled
    );
}

/// Precompiled artifacts are native code run outside the sandbox: one the
/// host did not write itself must never be loaded.
#[test]
fn foreign_or_tampered_precompiled_artifacts_are_ignored_and_recompiled() {
    use std::os::unix::fs::PermissionsExt;

    let cache = TempDir::new().expect("temp dir");
    let dir = cache.path().join("precompiled");
    let config = RuntimeConfig {
        cache_dir: Some(dir.clone()),
        ..RuntimeConfig::default()
    };
    let path = replicaset(Toolchain::Wasip2);
    let other_path = misbehaving();
    let first = load(&Runtime::new(config.clone()).expect("runtime"), &path).expect("load");
    assert_eq!(first.load_outcome(), LoadOutcome::Compiled);
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the cache directory is private");
    let key = std::fs::metadata(dir.join(".key")).expect("key");
    assert_eq!(key.permissions().mode() & 0o777, 0o600);

    let artifact_of = |digest: &str| {
        std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .find(|p| {
                p.file_name().is_some_and(|n| {
                    n.to_string_lossy()
                        .starts_with(digest.trim_start_matches("sha256:"))
                })
            })
            .expect("artifact")
    };
    let artifact = artifact_of(first.digest());
    let genuine = std::fs::read(&artifact).expect("read");

    // An attacker who can write the file but not read the key: a valid
    // artifact of another plugin, copied under this plugin's name (a real,
    // loadable artifact, only its HMAC is for another name).
    let other = load(&Runtime::new(config.clone()).expect("runtime"), &other_path).expect("load");
    let other_artifact = std::fs::read(artifact_of(other.digest())).expect("read");
    std::fs::write(&artifact, &other_artifact).expect("plant");
    let reloaded = load(&Runtime::new(config.clone()).expect("runtime"), &path).expect("load");
    assert_eq!(
        reloaded.load_outcome(),
        LoadOutcome::Compiled,
        "the planted artifact was ignored"
    );
    assert_eq!(
        reloaded.info().name,
        "replicaset",
        "and the real plugin runs"
    );
    assert_eq!(
        std::fs::read(&artifact).expect("read"),
        genuine,
        "and was replaced"
    );

    // A file whose HMAC was computed with another key (another host's cache).
    let mut forged = genuine.clone();
    let magic = b"wasm-operator precompiled v2\n".len();
    forged[magic] ^= 0xff;
    std::fs::write(&artifact, &forged).expect("forge");
    let reloaded = load(&Runtime::new(config.clone()).expect("runtime"), &path).expect("load");
    assert_eq!(reloaded.load_outcome(), LoadOutcome::Compiled);

    // A symlink in place of the artifact is not followed.
    let elsewhere = cache.path().join("elsewhere.cwasm");
    std::fs::write(&elsewhere, &genuine).expect("copy");
    std::fs::remove_file(&artifact).expect("remove");
    std::os::unix::fs::symlink(&elsewhere, &artifact).expect("symlink");
    let reloaded = load(&Runtime::new(config.clone()).expect("runtime"), &path).expect("load");
    assert_eq!(
        reloaded.load_outcome(),
        LoadOutcome::Compiled,
        "the symlink was not followed"
    );

    // A directory others may write is made private again.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    load(&Runtime::new(config.clone()).expect("runtime"), &path).expect("load");
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);

    // A symlinked cache directory is not used at all.
    let link = cache.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).expect("symlink dir");
    let via_link = RuntimeConfig {
        cache_dir: Some(link),
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(via_link).expect("runtime");
    assert_eq!(
        load(&runtime, &path).expect("load").load_outcome(),
        LoadOutcome::Compiled
    );
    assert_eq!(
        load(&runtime, &path).expect("load").load_outcome(),
        LoadOutcome::Compiled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_async_reconciles_each_get_their_own_instance() {
    let runtime = Runtime::new(config()).expect("runtime");
    let plugin = load(&runtime, &replicaset(Toolchain::Wasip2)).expect("load");
    let calls = (0..32).map(|i| {
        let plugin = Arc::clone(&plugin);
        tokio::spawn(async move {
            let jz = jinghzhu(&format!("web{i}"), i % 4);
            let key = format!("shop/web{i}");
            let out: ProposedActions = plugin.reconcile(&jz, &[], &key).await.expect("reconcile");
            (i, out.create_pods.len() as u32)
        })
    });
    for call in calls {
        let (i, creates) = call.await.expect("task");
        assert_eq!(creates, i % 4);
    }
    let at = plugin
        .reconcile_at(&jinghzhu("web", 1), &[], now())
        .await
        .expect("reconcile_at");
    assert_eq!(at.create_pods.len(), 1);
}

#[test]
fn an_exhausted_instance_pool_fails_the_call_not_the_host() {
    let runtime = Runtime::new(RuntimeConfig {
        allocator: InstanceAllocator::Pooling { max_instances: 1 },
        ..config()
    })
    .expect("runtime");
    let plugin = load(&runtime, &replicaset(Toolchain::Wasip2)).expect("load");
    let held = wasm_operator::runtime::block_on(plugin.reusable_instance())
        .expect("block_on")
        .expect("the one slot");
    let err = plugin
        .reconcile_blocking(&jinghzhu("web", 1), &[], now())
        .expect_err("no slot left");
    assert!(matches!(err, PluginError::Host(_)), "{err:?}");
    drop(held);
    plugin
        .reconcile_blocking(&jinghzhu("web", 1), &[], now())
        .expect("a slot again");
}

#[test]
fn the_pooling_allocator_works_too() {
    let runtime = Runtime::new(RuntimeConfig {
        allocator: InstanceAllocator::Pooling { max_instances: 8 },
        ..config()
    })
    .expect("runtime");
    let plugin = load(&runtime, &replicaset(Toolchain::Wasip2)).expect("load");
    let out = plugin
        .reconcile_blocking(&jinghzhu("web", 2), &[], now())
        .expect("reconcile");
    assert_eq!(out.create_pods.len(), 2);
}

/// A pool slot is reused for the next call only after its memory was reset:
/// a plugin counting its calls in a global and on the heap sees 1 every time,
/// with a pool of one slot (so every call reuses it), the default pool and
/// on-demand instances.
#[test]
fn no_state_survives_from_one_call_to_the_next() {
    let mut jz = misbehaving_jinghzhu("remember");
    jz.spec.desired = 0;
    for allocator in [
        InstanceAllocator::Pooling { max_instances: 1 },
        InstanceAllocator::default(),
        InstanceAllocator::OnDemand,
    ] {
        let runtime = Runtime::new(RuntimeConfig {
            allocator,
            ..config()
        })
        .expect("runtime");
        let plugin = load(&runtime, &misbehaving()).expect("load");
        for call in 1..=3 {
            let out = plugin
                .reconcile_blocking(&jz, &[], now())
                .expect("reconcile");
            let message = out.status.map(|s| s.message).unwrap_or_default();
            assert_eq!(
                message, "calls seen by this instance: global 1, heap 1",
                "{allocator:?}, call {call}"
            );
        }
    }
}

/// Issue 40: the bounded directories (precompiled cache, OCI store) must
/// never evict what a hot-swap slot holds. The slot pins the plugin it
/// serves and the previous one (its rollback target), follows a rollback,
/// and its pins go with it.
#[test]
fn a_slot_pins_the_plugins_it_serves_and_can_roll_back_to() {
    use wasm_operator::disk::pins::pinned;
    use wasm_operator::slot::{ActivePlugin, RollbackPolicy};
    use wasm_operator::telemetry::metrics::Metrics;
    let runtime = Runtime::new(config()).expect("runtime");
    let v1 = load(&runtime, &replicaset(Toolchain::Wasip2)).expect("v1");
    let v2 = load(&runtime, &misbehaving()).expect("v2");
    let (d1, d2) = (v1.digest().to_string(), v2.digest().to_string());
    let policy = RollbackPolicy {
        min_calls: 1,
        max_failure_ratio: 0.0,
        ..RollbackPolicy::default()
    };
    let slot = ActivePlugin::new(v1, policy, Arc::new(Metrics::default()));
    assert!(pinned().contains(&d1) && !pinned().contains(&d2));
    slot.swap(v2);
    assert!(
        pinned().contains(&d1) && pinned().contains(&d2),
        "serving and previous"
    );
    // v2 fails: rolled back to v1, which has no previous.
    slot.record_outcome("uid-1", &d2, false);
    assert_eq!(slot.current().digest(), d1);
    assert!(pinned().contains(&d1) && !pinned().contains(&d2));
    drop(slot);
    assert!(!pinned().contains(&d1), "a dropped slot pins nothing");
}
