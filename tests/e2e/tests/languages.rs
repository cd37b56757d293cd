//! Plugins in Python, JavaScript and Go (`plugins/python`, `plugins/js`,
//! `plugins/go`, contract `jinghzhu:operator@0.2.0`) next to the Rust one:
//! - each SDK's native unit tests (pytest; `node --test`; `go test`) pass,
//!   on the same golden fixtures as the Rust plugin;
//! - the Go bindings committed in `plugins/go/bindings` are what
//!   `wit-bindgen go` generates from `wit/0.2` today;
//! - each built component passes those fixtures and the idempotence check
//!   through `wasm-operator reconcile`, and `--compare-with` the Rust
//!   plugin shows no difference (and does show one against the `v2` build,
//!   so the comparison can fail);
//! - on the real control plane each language's plugin converges objects
//!   with pods Running, and a recording of them compares the same with the
//!   Rust plugin;
//! - a live hot swap Rust → Python → JS → Go → Rust (file source), with
//!   objects scaled during each swap, ends with every object exact;
//! - the Go plugin survives a garbage collection during the input's copy
//!   into the guest (the collector is off per instance), which traps a
//!   build with the collector on;
//! - the Go twin of the misbehaving plugin is held by the same limits.
//!
//! The toolchains come from `tests/setup.sh` (a venv with componentize-py;
//! `npm ci` of `plugins/js`; `plugins/go/toolchain.sh`); the components are built with
//! `plugins/<lang>/build.sh` (`wasm_artifacts::build_language`). Components
//! load through the default precompiled cache: Cranelift takes 10–40 s for
//! a 12–18 MB component, once.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use e2e_tests::go_plugins::{bindings_match_the_wit, go_test, run_in};
use e2e_tests::{HostOptions, RunningHost, TestEnv, plugin, wait_for};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use wasm_artifacts::{Language, build_go_plugin, build_language, workspace_root};
use wasm_operator::cli::execute_args;
use wasm_operator::crd::Jinghzhu;
use wasm_operator::runtime::digest_of;
/// `wasm-operator reconcile --plugin PLUGIN --compare-with OTHER --fixtures DIR`.
async fn compare(plugin: &Path, other: &Path, fixtures: &Path) -> Result<ExitCode> {
    wasm_operator(&[
        "reconcile",
        "--plugin",
        path(plugin),
        "--compare-with",
        path(other),
        "--fixtures",
        path(fixtures),
    ])
    .await
}

/// Runs `wasm-operator ARGS...` in-process on a blocking thread (with the
/// default precompiled cache, so each component compiles once per machine).
async fn wasm_operator(items: &[&str]) -> Result<ExitCode> {
    let mut argv = vec!["wasm-operator".to_string()];
    argv.extend(items.iter().map(|s| s.to_string()));
    tokio::task::spawn_blocking(move || execute_args(argv)).await?
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn fixtures_dir() -> PathBuf {
    workspace_root().join("plugins/replicaset/fixtures")
}

fn venv_python() -> PathBuf {
    let cache = std::env::var_os("WASM_OPERATOR_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/wasm-operator")))
        .unwrap_or_else(|| PathBuf::from(".cache/wasm-operator"));
    cache.join("venv-componentize-py-0.25.1/bin/python")
}

/// Runs a native test suite and returns its output; fails with it when the
/// suite fails or ran no test.
fn run_suite(mut command: Command, what: &str, passed_line: &str) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("starting {what} (run tests/setup.sh)"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "{what} failed:\n{text}");
    ensure!(
        text.lines().any(|l| l.contains(passed_line)),
        "{what} printed no `{passed_line}` line:\n{text}"
    );
    Ok(text)
}

#[test]
fn python_sdk_and_plugin_unit_tests_pass_natively() -> Result<()> {
    let mut pytest = Command::new(venv_python());
    pytest
        .args(["-m", "pytest"])
        .current_dir(workspace_root().join("plugins/python"));
    let text = run_suite(pytest, "pytest in plugins/python", " passed")?;
    let summary = text.lines().rfind(|l| l.contains(" passed")).unwrap_or("");
    println!("pytest: {summary}");
    ensure!(!summary.contains("failed"), "{text}");
    Ok(())
}

#[test]
fn javascript_sdk_and_plugin_unit_tests_pass_natively() -> Result<()> {
    let dir = workspace_root().join("plugins/js");
    ensure!(
        dir.join("node_modules/yaml").exists(),
        "plugins/js/node_modules is missing: run tests/setup.sh (npm ci)"
    );
    let mut node = Command::new("node");
    node.arg("--test").current_dir(&dir);
    let text = run_suite(node, "node --test in plugins/js", "# pass ")?;
    let pass = text
        .lines()
        .find(|l| l.starts_with("# pass "))
        .unwrap_or("");
    let fail = text
        .lines()
        .find(|l| l.starts_with("# fail "))
        .unwrap_or("");
    println!("node --test: {pass}, {fail}");
    ensure!(fail == "# fail 0", "{text}");
    ensure!(pass != "# pass 0", "node --test ran no test:\n{text}");
    Ok(())
}

#[test]
fn go_sdk_and_plugin_unit_tests_pass_natively() -> Result<()> {
    let text = go_test(
        &["./sdk/...", "./replicaset/..."],
        &["sdk", "sdk/fixtures", "replicaset"],
    )?;
    println!("go test:\n{text}");
    Ok(())
}

#[test]
fn go_bindings_are_what_wit_bindgen_generates_from_the_wit() -> Result<()> {
    bindings_match_the_wit("plugins/go")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_language_passes_the_fixtures_and_proposes_what_the_rust_plugin_does() -> Result<()> {
    let rust = plugin("replicaset-plugin", &[]);
    let rust_v2 = plugin("replicaset-plugin", &["v2"]);
    let fixtures = fixtures_dir();
    for language in Language::ALL {
        let wasm = build_language(language);
        let size = std::fs::metadata(&wasm)?.len();
        println!(
            "{}: {} ({size} bytes)",
            language.plugin_name(),
            wasm.display()
        );
        let checked = wasm_operator(&[
            "reconcile",
            "--plugin",
            path(&wasm),
            "--fixtures",
            path(&fixtures),
        ])
        .await?;
        ensure!(
            checked == ExitCode::SUCCESS,
            "{}: the golden fixtures or the idempotence check failed",
            language.plugin_name()
        );
        let same = compare(&wasm, &rust, &fixtures).await?;
        ensure!(
            same == ExitCode::SUCCESS,
            "{} proposes something else than the Rust plugin on some fixture",
            language.plugin_name()
        );
        // The comparison can fail: v2 words its status messages differently.
        let differs = compare(&wasm, &rust_v2, &fixtures).await?;
        ensure!(
            differs == ExitCode::from(1),
            "{} compared the same as the v2 Rust build",
            language.plugin_name()
        );
    }
    Ok(())
}

/// The `reconciledBy` stamp of `jz`.
fn reconciled_by(jz: &Jinghzhu) -> &str {
    jz.status
        .as_ref()
        .and_then(|s| s.reconciled_by.as_deref())
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_language_converges_on_the_control_plane_and_matches_rust_on_a_recording() -> Result<()>
{
    let rust = plugin("replicaset-plugin", &[]);
    for language in Language::ALL {
        let wasm = build_language(language);
        let digest = digest_of(&std::fs::read(&wasm)?);
        let env = TestEnv::new(&format!("lang-{}", language.dir())).await?;
        let host = RunningHost::start(&env, &wasm).await?;
        env.create("web", 3, &[]).await?;
        env.create("api", 1, &[]).await?;
        env.wait_converged("web", 3, Duration::from_secs(120))
            .await?;
        env.wait_converged("api", 1, Duration::from_secs(120))
            .await?;
        env.scale("web", 1).await?;
        env.scale("api", 2).await?;
        let (web, _) = env
            .wait_converged("web", 1, Duration::from_secs(120))
            .await?;
        let (api, pods) = env
            .wait_converged("api", 2, Duration::from_secs(120))
            .await?;
        for jz in [&web, &api] {
            ensure!(
                reconciled_by(jz).starts_with(language.plugin_name())
                    && reconciled_by(jz).contains(&digest[..19]),
                "{} was reconciled by {:?}, not {}",
                jz.name_any(),
                reconciled_by(jz),
                language.plugin_name()
            );
        }
        ensure!(pods.len() == 2);
        ensure!(
            host.errors_by(&digest) == 0,
            "{} failed some reconcile",
            language.plugin_name()
        );
        println!(
            "{}: converged web 3 -> 1 and api 1 -> 2 with pods Running ({} calls)",
            language.plugin_name(),
            host.calls_by(&digest)
        );
        host.stop().await;

        // A recorded live cluster: the language's plugin and the Rust one
        // propose the same on it.
        let work = tempfile::TempDir::new()?;
        let recorded = work.path().join("recorded");
        let kubeconfig = env.control_plane.kubeconfig_path().to_path_buf();
        let code = wasm_operator(&[
            "record",
            "-n",
            &env.namespace,
            "--all",
            "--out",
            path(&recorded),
            "--kubeconfig",
            path(&kubeconfig),
        ])
        .await?;
        ensure!(code == ExitCode::SUCCESS, "record failed");
        let cases = std::fs::read_dir(&recorded)?.count();
        ensure!(cases == 2, "recorded {cases} cases, not 2");
        let same = compare(&wasm, &rust, &recorded).await?;
        ensure!(
            same == ExitCode::SUCCESS,
            "{} and the Rust plugin differ on the recorded cluster",
            language.plugin_name()
        );
    }
    Ok(())
}

/// Replaces `path` as `cp` onto a new inode does: a temporary file next to
/// it, renamed over it.
fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Waits until every object has its `desired` live pods, all Running and
/// Ready, a `Running` status, and a `reconciledBy` naming `digest` (or, for
/// the objects `also(i)` names, the digest `also` gives: a swapped-in plugin
/// that reaches the outcome the one before it wrote writes no status, so
/// the stamp keeps naming that one).
async fn wait_exact(
    env: &TestEnv,
    desired: &[u32],
    digest: &str,
    also: impl Fn(usize) -> Option<String>,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut behind = Vec::new();
        for (i, want) in desired.iter().enumerate() {
            let name = format!("jz-{i:02}");
            let jz = env.jinghzhus().get(&name).await?;
            let pods = env.live_pods(&name).await?;
            let running = pods
                .iter()
                .filter(|p| e2e_tests::is_running_and_ready(p))
                .count();
            let ok = jz.spec.desired == *want
                && pods.len() == *want as usize
                && running == pods.len()
                && jz.status.as_ref().is_some_and(|s| {
                    s.state == "Running" && s.current == *want && s.ready_replicas == Some(*want)
                })
                && (reconciled_by(&jz).contains(&digest[..19])
                    || also(i).is_some_and(|d| reconciled_by(&jz).contains(&d[..19])));
            if !ok {
                behind.push(format!(
                    "{name}: want {want}, {} live ({running} ready), by {:?}, status {:?}",
                    pods.len(),
                    reconciled_by(&jz),
                    jz.status
                        .as_ref()
                        .map(|s| (&s.state, s.current, &s.message))
                ));
            }
        }
        if behind.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} object(s) not exact within {timeout:?}:\n{}",
                behind.len(),
                behind.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hot_swap_rust_python_js_go_rust_while_scaling_loses_no_event() -> Result<()> {
    const OBJECTS: usize = 12;
    let rust = std::fs::read(plugin("replicaset-plugin", &[]))?;
    let python = std::fs::read(build_language(Language::Python))?;
    let js = std::fs::read(build_language(Language::JavaScript))?;
    let go = std::fs::read(build_language(Language::Go))?;
    let env = TestEnv::new("lang-swap").await?;
    let dir = tempfile::tempdir()?;
    let live = dir.path().join("plugin.wasm");
    std::fs::write(&live, &rust)?;
    let host = RunningHost::start_with(&env, HostOptions::file(&live)).await?;

    let mut desired = vec![1u32; OBJECTS];
    for (i, want) in desired.iter().enumerate() {
        env.create(&format!("jz-{i:02}"), *want, &[]).await?;
    }
    wait_exact(
        &env,
        &desired,
        &digest_of(&rust),
        |_| None,
        Duration::from_secs(180),
    )
    .await?;

    let steps = [
        ("python", &python),
        ("js", &js),
        ("go", &go),
        ("rust", &rust),
    ];
    for (step, (name, bytes)) in steps.iter().enumerate() {
        let digest = digest_of(bytes);
        let swapped = Instant::now();
        replace_file(&live, bytes)?;
        // Half the objects change while the swap is under way...
        for (i, want) in desired.iter_mut().enumerate() {
            if i % 2 == step % 2 {
                *want = (*want + 1) % 4;
                env.scale(&format!("jz-{i:02}"), *want).await?;
            }
        }
        // (a cold precompiled cache makes the first swap to a language compile it)
        wait_for(
            &format!("{name} serving"),
            Duration::from_secs(300),
            // The slot, not the call count: the last step's plugin (rust)
            // has calls from the start.
            || async { Ok(host.plugin.current().digest() == digest) },
        )
        .await?;
        let serving = swapped.elapsed();
        // ...and the other half once the new plugin serves.
        for (i, want) in desired.iter_mut().enumerate() {
            if i % 2 != step % 2 {
                *want = (*want + 2) % 4;
                env.scale(&format!("jz-{i:02}"), *want).await?;
            }
        }
        // The half changed while the swap was under way may have been
        // rescaled by the plugin before; the new one then writes nothing.
        let before = digest_of(if step == 0 { &rust } else { steps[step - 1].1 });
        let changed_during = |i: usize| (i % 2 == step % 2).then(|| before.clone());
        wait_exact(
            &env,
            &desired,
            &digest,
            changed_during,
            Duration::from_secs(180),
        )
        .await?;
        ensure!(
            host.calls_by(&digest) >= OBJECTS as u64,
            "{name} reconciled {} objects, not all {OBJECTS}",
            host.calls_by(&digest)
        );
        println!(
            "swap to {name}: serving after {} ms, all {OBJECTS} objects exact after {} ms",
            serving.as_millis(),
            swapped.elapsed().as_millis()
        );
        ensure!(host.errors_by(&digest) == 0, "{name} failed some reconcile");
    }
    ensure!(
        host.metrics.plugin_swaps.get() == 4,
        "{} swaps, not 4",
        host.metrics.plugin_swaps.get()
    );
    ensure!(host.errors_by(&digest_of(&rust)) == 0);
    let total: u32 = desired.iter().sum();
    let pods = env.pods().list(&Default::default()).await?.items;
    let live = pods
        .iter()
        .filter(|p| wasm_operator::observed::is_live(p))
        .count();
    ensure!(
        live == total as usize,
        "{live} live pods, not the {total} desired"
    );
    // Nothing left to do: one more nudge changes nothing.
    let patch = serde_json::json!({"metadata": {"annotations": {"nudge": "1"}}});
    env.jinghzhus()
        .patch("jz-00", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The half rescaled while the last swap was under way may still be
    // stamped by go (rust reached the same outcome and wrote nothing).
    wait_exact(
        &env,
        &desired,
        &digest_of(&rust),
        |i| (i % 2 == (steps.len() - 1) % 2).then(|| digest_of(&go)),
        Duration::from_secs(30),
    )
    .await?;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_scaffolds_python_js_and_go_plugins_that_test_build_and_match_rust() -> Result<()> {
    let rust = plugin("replicaset-plugin", &[]);
    let work = tempfile::TempDir::new()?;
    let cases: [(&str, &str, &str, &[&str]); 3] = [
        ("python", "even-py", "./test.sh", &[]),
        ("js", "even-js", "npm", &["test"]),
        ("go", "even-go", "./test.sh", &[]),
    ];
    for (lang, name, test, test_args) in cases {
        let dir = work.path().join(name);
        let code = wasm_operator(&["new", name, "--lang", lang, "--path", path(&dir)]).await?;
        ensure!(code == ExitCode::SUCCESS, "new --lang {lang} failed");
        // The toolchain tests/setup.sh installed (a warm cache: no download).
        run_in(&dir, "./toolchain.sh", &[])?;
        let tested = run_in(&dir, test, test_args)?;
        ensure!(
            tested.contains(" passed") || tested.contains("# pass ") || tested.contains("ok  \t"),
            "{lang}: the scaffold's tests ran nothing:\n{tested}"
        );
        ensure!(
            !tested.contains(" failed")
                && !tested.contains("FAIL")
                && !tested
                    .lines()
                    .any(|l| l.starts_with("# fail ") && l != "# fail 0"),
            "{tested}"
        );
        run_in(&dir, "./build.sh", &[])?;
        let wasm = dir.join("target").join(format!("{name}.wasm"));
        ensure!(
            wasm.is_file(),
            "{lang}: build.sh wrote no {}",
            wasm.display()
        );
        let fixtures = dir.join("fixtures");
        let checked = wasm_operator(&[
            "reconcile",
            "--plugin",
            path(&wasm),
            "--fixtures",
            path(&fixtures),
        ])
        .await?;
        ensure!(
            checked == ExitCode::SUCCESS,
            "{lang}: its own fixture fails"
        );
        let same = wasm_operator(&[
            "reconcile",
            "--plugin",
            path(&wasm),
            "--compare-with",
            path(&rust),
            "--fixtures",
            path(&fixtures_dir()),
        ])
        .await?;
        ensure!(
            same == ExitCode::SUCCESS,
            "{lang}: the untouched scaffold proposes something else than the example plugin"
        );
        println!(
            "new --lang {lang}: tests pass, {} bytes built, fixtures pass, same as Rust",
            std::fs::metadata(&wasm)?.len()
        );
    }
    Ok(())
}

/// Pods in the input of the collection test: enough that copying the input
/// in starts and finishes a collection (the collector-on build traps from
/// between 30 000 and 40 000 pods on; the shipped build runs 60 000 under
/// the default 64 MiB cap).
const GC_TEST_PODS: usize = 60_000;

/// Go's allocator can start a garbage collection inside `cabi_realloc`,
/// while the host copies a call's input into the guest, and a collection
/// there can call WASI, which the component model forbids at that moment:
/// the call traps ("cannot leave component instance"). The SDK turns the
/// collector off per instance (`sdk/component`); a build with it on (tag
/// `jinghzhu_gc`) traps on the same input, so this test fails without the
/// fix.
#[test]
fn go_plugin_survives_a_collection_while_its_input_is_copied_in() -> Result<()> {
    use wasm_operator::runtime::{PluginError, Runtime, RuntimeConfig};
    let shipped = build_language(Language::Go);
    let collector_on = build_go_plugin(
        "plugins/go/cmd/replicaset",
        "replicaset-go-gc-on",
        &["-tags", "jinghzhu_gc"],
    );
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let (jz, pods) = wasm_operator::offline::sample::steady_objects(GC_TEST_PODS);

    let on = runtime.load(&std::fs::read(&collector_on)?, "replicaset-go-gc-on")?;
    let err = on
        .reconcile_blocking(&jz, &pods, now)
        .expect_err("with the collector on, a collection during the copy traps");
    ensure!(
        matches!(err, PluginError::Trap { .. })
            && err.to_string().contains("cannot leave component instance"),
        "the collector-on build failed otherwise than expected: {err}"
    );

    let plugin = runtime.load(&std::fs::read(&shipped)?, "replicaset-go")?;
    let out = plugin.reconcile_blocking(&jz, &pods, now)?;
    ensure!(
        out.create_pods.is_empty() && out.delete_pods.is_empty(),
        "a steady object of {GC_TEST_PODS} pods needs nothing"
    );
    Ok(())
}

/// The Go twin of the misbehaving plugin (`tests/plugins/misbehaving-go`)
/// against the real control plane: a loop, a memory hog, a panic, an exit
/// and an output over the limit each get a Warning Event naming the rule,
/// nothing of theirs is applied, and a neighbour served by the same plugin
/// converges and keeps scaling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_misbehaving_twin_is_held_by_the_same_limits() -> Result<()> {
    const MISBEHAVE: &str = "test.jinghzhu.io/misbehave";
    const CONVERGE: Duration = Duration::from_secs(90);
    let wasm = build_go_plugin("tests/plugins/misbehaving-go", "misbehaving-go", &[]);
    let env = TestEnv::new("lang-go-limits").await?;
    let host = RunningHost::start_with(&env, HostOptions::file(&wasm)).await?;
    // (object and mode, the Event's reason, what its message must name)
    let hazards = [
        ("spin", "PluginFailed", "limits/deadline"),
        ("hog", "PluginFailed", "limits/memory-cap"),
        ("panic", "PluginFailed", "misbehaving-go was asked to panic"),
        ("exit", "PluginFailed", "limits/trap"),
        ("many", "PluginFailed", "limits/output-too-large"),
    ];
    for (mode, _, _) in hazards {
        env.create(mode, 2, &[(MISBEHAVE, mode)]).await?;
    }
    env.create("good", 2, &[]).await?;
    env.wait_converged("good", 2, CONVERGE).await?;
    for (name, reason, rule) in hazards {
        let message = env.wait_event(name, reason, rule, CONVERGE).await?;
        println!("{name}: {message}");
        ensure!(
            env.owned_pods(name).await?.is_empty(),
            "{name}: something was applied"
        );
    }
    env.scale("good", 3).await?;
    env.wait_converged("good", 3, CONVERGE).await?;
    host.stop().await;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// The process's minor page faults so far (`/proc/self/stat`, field 10).
fn minor_page_faults() -> Result<u64> {
    proc_stat_field(7)
}

/// Field `at` of `/proc/self/stat`, counted from the one after the command
/// name (which may hold spaces): field 3 is 0.
fn proc_stat_field(at: usize) -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    after_name
        .split_whitespace()
        .nth(at)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no field {} in /proc/self/stat", at + 3))
}

/// The process's resident set (`VmRSS` of `/proc/self/status`), KiB.
fn rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/self/status"))
}

/// Bytes of a page on x86_64 Linux, where this measurement runs.
const PAGE_BYTES: u64 = 4096;

/// What each language costs the host, side by side in one run on the same
/// inputs: component size, compile time (Cranelift, cache off), load time
/// from a warm precompiled cache, a fresh instance + call with the input
/// built from the objects and the output converted (`reconcile_blocking`,
/// the host's per-reconcile path) at 10 and 100 pods (p50/p99), the memory
/// a call touches (minor page faults per call with instances mapped on
/// demand, where a fresh instance faults in every page it uses), the
/// resident memory the loaded plugin adds to the process, and the smallest
/// memory cap a call runs under. Measure it in release:
/// `cargo test --release -p e2e-tests --test languages costs -- --ignored --nocapture`
/// (figures in docs/performance.md).
#[test]
#[ignore = "a measurement (minutes); run it in release, see the doc comment"]
fn costs_per_language_side_by_side() -> Result<()> {
    use wasm_operator::runtime::{Runtime, RuntimeConfig};
    let calls: usize = std::env::var("LANG_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let plugins = [
        ("rust", plugin("replicaset-plugin", &[])),
        ("python", build_language(Language::Python)),
        ("js", build_language(Language::JavaScript)),
        ("go", build_language(Language::Go)),
    ];
    let cache = tempfile::TempDir::new()?;
    let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    println!(
        "| plugin | component | compile | precompiled load | 10 pods p50 / p99 | 100 pods p50 / p99 | reused instance, 10 pods p50 | memory touched per call, 10 / 100 pods | host RSS added by the loaded plugin | smallest memory cap |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, wasm) in &plugins {
        let bytes = std::fs::read(wasm)?;
        let uncached = Runtime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })?;
        let started = Instant::now();
        drop(uncached.load(&bytes, name)?);
        let compile = started.elapsed();

        let cached_config = RuntimeConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            ..RuntimeConfig::default()
        };
        let cached = Runtime::new(cached_config.clone())?;
        drop(cached.load(&bytes, name)?);
        let mut loads: Vec<Duration> = (0..7)
            .map(|_| {
                let started = Instant::now();
                let plugin = cached.load(&bytes, name).expect("load from the cache");
                let took = started.elapsed();
                drop(plugin);
                took
            })
            .collect();
        loads.sort();
        let rss_before = rss_kib()?;
        let plugin = cached.load(&bytes, name)?;

        let mut cells = Vec::new();
        for pods in [10, 100] {
            let (jz, pods) = wasm_operator::offline::sample::steady_objects(pods);
            for _ in 0..20 {
                plugin.reconcile_blocking(&jz, &pods, now)?;
            }
            let mut times: Vec<Duration> = (0..calls)
                .map(|_| {
                    let started = Instant::now();
                    let out = plugin.reconcile_blocking(&jz, &pods, now).expect("call");
                    let took = started.elapsed();
                    assert!(out.create_pods.is_empty() && out.delete_pods.is_empty());
                    took
                })
                .collect();
            times.sort();
            cells.push(format!(
                "{:.0} µs / {:.0} µs",
                percentile(&times, 0.5).as_secs_f64() * 1e6,
                percentile(&times, 0.99).as_secs_f64() * 1e6
            ));
        }
        let rss_added = rss_kib()?.saturating_sub(rss_before);
        let on_demand_runtime = Runtime::new(RuntimeConfig {
            allocator: wasm_operator::runtime::InstanceAllocator::OnDemand,
            ..cached_config.clone()
        })?;
        let on_demand = on_demand_runtime.load(&bytes, name)?;
        let mut touched = Vec::new();
        for pods in [10, 100] {
            let (jz, pods) = wasm_operator::offline::sample::steady_objects(pods);
            // Memory touched: with instances mapped on demand (no pool),
            // every page a fresh instance writes or reads for the first
            // time (its copy-on-write image, stack, heap) faults, so the
            // process's minor page faults per call count them. (The pool
            // keeps a memory's first 2 MiB resident and resets them in
            // place, so there the faults would undercount.)
            let faults_before = minor_page_faults()?;
            for _ in 0..calls {
                on_demand.reconcile_blocking(&jz, &pods, now)?;
            }
            let faults = minor_page_faults()? - faults_before;
            touched.push(faults as f64 * PAGE_BYTES as f64 / calls as f64 / 1024.0);
        }

        // The floor: one kept instance called again and again (the host
        // never does this; it shows what the fresh instance costs).
        {
            use wasm_operator::runtime::{PluginInput, block_on};
            let (jz, pods) = wasm_operator::offline::sample::steady_objects(10);
            let input = plugin.input(&jz, &pods, now);
            let mut reused = block_on(plugin.reusable_instance())??;
            let mut times: Vec<Duration> = (0..calls)
                .map(|_| {
                    let started = Instant::now();
                    let out = match &input {
                        PluginInput::V0_2(input) => block_on(reused.call_reconcile_v2(input)),
                        PluginInput::V0_1(input) => block_on(reused.call_reconcile(input)),
                    };
                    let took = started.elapsed();
                    assert!(matches!(out, Ok(Ok(_))));
                    took
                })
                .collect();
            times.sort();
            cells.push(format!(
                "{:.0} µs",
                percentile(&times, 0.5).as_secs_f64() * 1e6
            ));
        }

        // The smallest cap (MiB) under which a 100-pod call still runs.
        let (jz, pods) = wasm_operator::offline::sample::steady_objects(100);
        let runs_under = |mib: u64| -> bool {
            let Ok(runtime) = Runtime::new(RuntimeConfig {
                memory_limit_bytes: mib * 1024 * 1024,
                ..cached_config.clone()
            }) else {
                return false;
            };
            runtime
                .load(&bytes, name)
                .ok()
                .is_some_and(|p| p.reconcile_blocking(&jz, &pods, now).is_ok())
        };
        let (mut low, mut high) = (0u64, 64u64);
        ensure!(runs_under(high), "{name} does not run under 64 MiB");
        while high - low > 1 {
            let mid = (low + high) / 2;
            if runs_under(mid) {
                high = mid;
            } else {
                low = mid;
            }
        }
        println!(
            "| {name} | {:.1} MB | {:.2} s | {:.2} ms | {} | {} | {} | {:.0} KiB / {:.0} KiB | {:.1} MiB | {high} MiB |",
            bytes.len() as f64 / 1e6,
            compile.as_secs_f64(),
            percentile(&loads, 0.5).as_secs_f64() * 1e3,
            cells[0],
            cells[1],
            cells[2],
            touched[0],
            touched[1],
            rss_added as f64 / 1024.0,
        );
    }
    Ok(())
}

/// The interpreters' plugins (a pre-initialised heap of 9–13 MiB) take
/// turns for their calls, the Rust and Go ones (1–3 MiB) do not, and
/// `--no-plugin-call-turns` (`call_turns: false`) turns it off; every plugin
/// still answers two calls made at once.
#[test]
fn big_image_plugins_take_turns_and_small_ones_do_not() -> Result<()> {
    use wasm_operator::runtime::{Runtime, RuntimeConfig};
    let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let (jz, pods) = wasm_operator::offline::sample::steady_objects(10);
    for (name, wasm, big) in [
        ("rust", plugin("replicaset-plugin", &[]), false),
        ("python", build_language(Language::Python), true),
        ("js", build_language(Language::JavaScript), true),
        ("go", build_language(Language::Go), false),
    ] {
        let bytes = std::fs::read(&wasm)?;
        for turns in [true, false] {
            let runtime = Runtime::new(RuntimeConfig {
                call_turns: turns,
                ..RuntimeConfig::default()
            })?;
            let plugin = runtime.load(&bytes, name)?;
            let initial = plugin.initial_memory_bytes().unwrap_or(0) >> 20;
            ensure!(
                plugin.calls_take_turns() == (big && turns),
                "{name} (initial memory {initial} MiB, turns {turns}): takes turns = {}",
                plugin.calls_take_turns()
            );
            std::thread::scope(|scope| -> Result<()> {
                let calls: Vec<_> = (0..2)
                    .map(|_| scope.spawn(|| plugin.reconcile_blocking(&jz, &pods, now)))
                    .collect();
                for call in calls {
                    let out = call
                        .join()
                        .map_err(|_| anyhow::anyhow!("call panicked"))??;
                    ensure!(out.create_pods.is_empty() && out.delete_pods.is_empty());
                }
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// Python and JavaScript calls made from two threads at once, as the
/// host's workers make them, side by side in one run: one thread; two
/// threads with the calls of a big-image plugin taking turns (the default,
/// `runtime::call_gate`); two threads without turns
/// (`--no-plugin-call-turns`); and turns with 32 MiB of each pooled memory
/// reset in place instead of the default 2 MiB (wasmtime's
/// `linear_memory_keep_resident`). Each setting has a runtime of its own
/// (the same warm precompiled cache); calls are interleaved round by round
/// so load on the machine falls on every setting alike. Per setting: a
/// fresh instance + call with conversion (the host's per-reconcile path) at
/// 10 and 100 pods, p50 / p99, the CPU time per call (both threads'), and
/// the process's minor page faults per call. Measure it in release:
/// `cargo test --release -p e2e-tests --test languages concurrent_calls --
/// --ignored --nocapture` (`LANG_BENCH_ROUNDS`, default 10; figures in
/// docs/performance.md).
#[test]
#[ignore = "a measurement (minutes); run it in release, see the doc comment"]
fn concurrent_calls_side_by_side() -> Result<()> {
    use wasm_operator::runtime::{Runtime, RuntimeConfig};
    let rounds: usize = std::env::var("LANG_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    const CALLS_PER_ROUND: usize = 40;
    // (label, threads, turns, keep resident MiB)
    const SETTINGS: [(&str, usize, bool, usize); 4] = [
        ("1 thread", 1, true, 2),
        ("2 threads, turns", 2, true, 2),
        ("2 threads, no turns", 2, false, 2),
        ("2 threads, turns, 32 MiB kept resident", 2, true, 32),
    ];
    let cache = tempfile::TempDir::new()?;
    let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    println!(
        "| plugin (initial memory) | setting | 10 pods p50 / p99 | 100 pods p50 / p99 | CPU per call | page faults per call |"
    );
    println!("| --- | --- | --- | --- | ---: | ---: |");
    for (name, wasm) in [
        ("rust", plugin("replicaset-plugin", &[])),
        ("python", build_language(Language::Python)),
        ("js", build_language(Language::JavaScript)),
        ("go", build_language(Language::Go)),
    ] {
        let bytes = std::fs::read(&wasm)?;
        let plugins = SETTINGS
            .iter()
            .map(|&(_, _, turns, keep_mib)| {
                let runtime = Runtime::new(RuntimeConfig {
                    cache_dir: Some(cache.path().to_path_buf()),
                    keep_resident_bytes: keep_mib << 20,
                    call_turns: turns,
                    ..RuntimeConfig::default()
                })?;
                let plugin = runtime.load(&bytes, name)?;
                Ok((runtime, plugin))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut times = vec![[Vec::new(), Vec::new()]; SETTINGS.len()];
        let mut faults = vec![0u64; SETTINGS.len()];
        let mut cpu = vec![Duration::ZERO; SETTINGS.len()];
        for _ in 0..rounds {
            for (at, (_, plugin)) in plugins.iter().enumerate() {
                let threads = SETTINGS[at].1;
                for (size, pods) in [10, 100].into_iter().enumerate() {
                    let (jz, pods) = wasm_operator::offline::sample::steady_objects(pods);
                    let (faults_before, cpu_before) = (minor_page_faults()?, process_cpu()?);
                    let took: Vec<Duration> = std::thread::scope(|scope| {
                        let workers: Vec<_> = (0..threads)
                            .map(|_| {
                                scope.spawn(|| {
                                    (0..CALLS_PER_ROUND / threads)
                                        .map(|_| {
                                            let started = Instant::now();
                                            plugin
                                                .reconcile_blocking(&jz, &pods, now)
                                                .expect("call");
                                            started.elapsed()
                                        })
                                        .collect::<Vec<_>>()
                                })
                            })
                            .collect();
                        workers
                            .into_iter()
                            .flat_map(|w| w.join().expect("worker"))
                            .collect()
                    });
                    faults[at] += minor_page_faults()? - faults_before;
                    cpu[at] += process_cpu()?.saturating_sub(cpu_before);
                    times[at][size].extend(took);
                }
            }
        }
        let calls = (rounds * CALLS_PER_ROUND * 2) as u32;
        let initial_mib = plugins[0].1.initial_memory_bytes().unwrap_or(0) as f64 / 1048576.0;
        for (at, (label, ..)) in SETTINGS.iter().enumerate() {
            let cell = |samples: &mut Vec<Duration>| {
                samples.sort();
                format!(
                    "{:.0} µs / {:.0} µs",
                    percentile(samples, 0.5).as_secs_f64() * 1e6,
                    percentile(samples, 0.99).as_secs_f64() * 1e6
                )
            };
            let [ten, hundred] = &mut times[at];
            println!(
                "| {name} ({initial_mib:.1} MiB{}) | {label} | {} | {} | {:.0} µs | {:.0} |",
                if plugins[at].1.calls_take_turns() {
                    ", takes turns"
                } else {
                    ""
                },
                cell(ten),
                cell(hundred),
                (cpu[at] / calls).as_secs_f64() * 1e6,
                faults[at] as f64 / f64::from(calls),
            );
        }
    }
    Ok(())
}

/// The CPU time (user + system) of this process so far
/// (`/proc/self/stat`, fields 14 and 15, in clock ticks of 10 ms).
fn process_cpu() -> Result<Duration> {
    Ok(Duration::from_millis(
        (proc_stat_field(11)? + proc_stat_field(12)?) * 10,
    ))
}
