//! The plugin author's workflow against the real control plane, through
//! the command line (`wasm_operator::cli`, in-process):
//! - `record` converged objects, replay them offline with the same plugin
//!   (it proposes nothing), and `reconcile --compare-with` between the
//!   example plugin's v1 and v2 builds (they differ) and between identical
//!   plugins (they agree);
//! - `new`, the one-line "round desired up to an even number" change from
//!   `plugins/README.md`, a build, the plugin reconciling in a host started
//!   on a copy of the build, and the walk-through's hot swap to the example
//!   plugin by renaming its component over that copy.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use e2e_tests::{HostOptions, RunningHost, TestEnv, plugin};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ObjectMeta, PostParams};
use wasm_operator::actions::ProposedActions;
use wasm_operator::cli::execute_args;
use wasm_operator::offline::{compare, fixtures, input};
use wasm_operator::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
use wasm_operator::runtime::{Runtime, RuntimeConfig};

/// Runs `wasm-operator ARGS...` in-process (on a blocking thread: `record`
/// starts its own runtime) with a private precompiled cache.
async fn wasm_operator(args: Vec<String>, cache: &Path) -> Result<ExitCode> {
    let mut argv = vec!["wasm-operator".to_string()];
    argv.extend(args);
    if matches!(argv[1].as_str(), "record" | "reconcile") {
        argv.extend(["--cache-dir".to_string(), cache.display().to_string()]);
    }
    tokio::task::spawn_blocking(move || execute_args(argv)).await?
}

fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recorded_objects_replay_as_nothing_to_do_and_compare_shows_what_v2_changes() -> Result<()>
{
    let env = TestEnv::new("record").await?;
    let kubeconfig = env.control_plane.kubeconfig_path().to_path_buf();
    let v1 = plugin("replicaset-plugin", &[]);
    let v2 = plugin("replicaset-plugin", &["v2"]);
    let host = RunningHost::start(&env, &v1).await?;
    for (name, desired) in [("web", 2), ("api", 1), ("idle", 0)] {
        env.create(name, desired, &[]).await?;
    }
    for (name, desired) in [("web", 2), ("api", 1), ("idle", 0)] {
        env.wait_converged(name, desired, Duration::from_secs(60))
            .await?;
    }
    host.stop().await;
    // A pod with the host's label but no owner: the host never shows it to
    // a plugin, so a recording must not contain it either.
    env.pods()
        .create(
            &PostParams::default(),
            &Pod {
                metadata: ObjectMeta {
                    name: Some("web-stray".into()),
                    labels: Some([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())].into()),
                    ..ObjectMeta::default()
                },
                spec: Some(serde_json::from_value(serde_json::json!({
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]
                }))?),
                ..Pod::default()
            },
        )
        .await?;

    let work = tempfile::TempDir::new()?;
    let cache = work.path().join("cache");
    let recorded = work.path().join("fixtures");
    let ns = env.namespace.clone();
    let started = Instant::now();
    let code = wasm_operator(
        args(&[
            "record",
            "--kubeconfig",
            path(&kubeconfig),
            "-n",
            &ns,
            "--all",
            "--out",
            path(&recorded),
            "--plugin",
            path(&v1),
        ]),
        &cache,
    )
    .await?;
    println!("record --all --plugin: {:?}", started.elapsed());
    ensure!(code == ExitCode::SUCCESS, "record failed");

    let cases = fixtures::cases(&recorded)?;
    let names: Vec<String> = cases.iter().map(|c| fixtures::case_name(c)).collect();
    assert_eq!(
        names,
        [
            format!("{ns}_api"),
            format!("{ns}_idle"),
            format!("{ns}_web")
        ]
    );
    for (case, pods) in [("web", 2), ("api", 1), ("idle", 0)] {
        let dir = recorded.join(format!("{ns}_{case}"));
        let text = std::fs::read_to_string(dir.join("input.yaml"))?;
        assert!(!text.contains("managedFields:"), "stripped:\n{text}");
        assert!(
            !text.contains("web-stray"),
            "not owned, not recorded:\n{text}"
        );
        let (input, _now) = fixtures::read_case(&dir)?;
        assert_eq!(input.pods.len(), pods, "{case}");
        let live = env.live_pods(case).await?;
        let mut live: Vec<String> = live
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        live.sort();
        let seen: Vec<String> = input
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(seen, live, "{case}: the pods the cluster has");
        let expected: ProposedActions =
            serde_yaml::from_str(&std::fs::read_to_string(dir.join("expected.yaml"))?)?;
        assert!(
            expected.is_empty(),
            "{case}: replaying a converged object proposes nothing, got {expected:?}"
        );
    }

    // The recorded cases are fixtures like any other.
    let replay = wasm_operator(
        args(&[
            "reconcile",
            "--plugin",
            path(&v1),
            "--fixtures",
            path(&recorded),
        ]),
        &cache,
    )
    .await?;
    ensure!(
        replay == ExitCode::SUCCESS,
        "replaying with the same plugin fails"
    );

    // v2 rewrites every status message: --compare-with says so, per case.
    let differs = wasm_operator(
        args(&[
            "reconcile",
            "--fixtures",
            path(&recorded),
            "--plugin",
            path(&v2),
            "--compare-with",
            path(&v1),
        ]),
        &cache,
    )
    .await?;
    ensure!(differs == ExitCode::FAILURE, "v2 and v1 should differ");
    let same = wasm_operator(
        args(&[
            "reconcile",
            "--fixtures",
            path(&recorded),
            "--plugin",
            path(&v1),
            "--compare-with",
            path(&v1),
        ]),
        &cache,
    )
    .await?;
    ensure!(same == ExitCode::SUCCESS, "a plugin agrees with itself");
    // What the comparison says, case by case.
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.clone()),
        ..RuntimeConfig::default()
    })?;
    let old = runtime.load(&std::fs::read(&v1)?, "v1")?;
    let new = runtime.load(&std::fs::read(&v2)?, "v2")?;
    for comparison in compare::compare_cases(&new, &old, &recorded)? {
        let text = comparison
            .difference
            .with_context(|| format!("{} should differ", comparison.name))?;
        assert!(text.contains("status: old "), "{text}");
        assert!(text.contains("+   message: '[v2] "), "{text}");
    }

    // By name, without a plugin: one case, no expected.yaml; an existing
    // case is not replaced without --overwrite; a missing name writes nothing.
    let by_name = work.path().join("by-name");
    let code = wasm_operator(
        args(&[
            "record",
            "--kubeconfig",
            path(&kubeconfig),
            "-n",
            &ns,
            "web",
            "--out",
            path(&by_name),
        ]),
        &cache,
    )
    .await?;
    ensure!(code == ExitCode::SUCCESS);
    let web = by_name.join(format!("{ns}_web"));
    assert!(web.join("input.yaml").is_file() && web.join("now").is_file());
    assert!(!web.join("expected.yaml").exists());
    assert_eq!(input::read(&[web.join("input.yaml")])?.pods.len(), 2);
    let again = wasm_operator(
        args(&[
            "record",
            "--kubeconfig",
            path(&kubeconfig),
            "-n",
            &ns,
            "web",
            "--out",
            path(&by_name),
        ]),
        &cache,
    )
    .await;
    let message = format!("{:#}", again.expect_err("the case exists"));
    assert!(message.contains("--overwrite"), "{message}");
    let missing = wasm_operator(
        args(&[
            "record",
            "--kubeconfig",
            path(&kubeconfig),
            "-n",
            &ns,
            "api",
            "nope",
            "--out",
            path(&work.path().join("missing")),
        ]),
        &cache,
    )
    .await;
    let message = format!("{:#}", missing.expect_err("no such object"));
    assert!(message.contains("no Jinghzhu named nope"), "{message}");
    assert!(
        !work
            .path()
            .join("missing")
            .join(format!("{ns}_api"))
            .exists()
    );
    Ok(())
}

/// The one-line change of the walk-through in `plugins/README.md`.
const TEMPLATE_LINE: &str = "    let desired = jz.spec.desired;\n";
const EVEN_LINE: &str = "    let desired = jz.spec.desired.next_multiple_of(2);\n";

/// `cargo build --release --target wasm32-wasip2` of a scaffolded crate,
/// into this workspace's target directory (as `host/tests/scaffold.rs`
/// does: the SDK's dependencies are already built there).
fn build_scaffolded(dir: &Path, name: &str) -> Result<PathBuf> {
    let target = wasm_artifacts::workspace_root().join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = wasm_artifacts::as_from_a_shell(&mut Command::new(cargo))
        .current_dir(dir)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", &target)
        .output()?;
    if !out.status.success() {
        bail!(
            "building the scaffolded plugin failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(target.join(format!(
        "wasm32-wasip2/release/{}.wasm",
        name.replace('-', "_")
    )))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scaffolded_plugin_with_the_even_rule_reconciles_on_the_control_plane() -> Result<()> {
    let started = Instant::now();
    let env = TestEnv::new("scaffold").await?;
    let work = tempfile::TempDir::new()?;
    let dir = work.path().join("even-replicas");
    let root = wasm_artifacts::workspace_root();
    let code = wasm_operator(
        args(&[
            "new",
            "even-replicas",
            "--path",
            path(&dir),
            "--sdk-path",
            path(&root),
        ]),
        work.path(),
    )
    .await?;
    ensure!(code == ExitCode::SUCCESS);
    let lib = dir.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib)?;
    ensure!(
        source.matches(TEMPLATE_LINE).count() == 1,
        "the template's `desired` line changed: update plugins/README.md's walk-through"
    );
    std::fs::write(&lib, source.replacen(TEMPLATE_LINE, EVEN_LINE, 1))?;
    let built = Instant::now();
    let wasm = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || build_scaffolded(&dir, "even-replicas")
    })
    .await??;
    println!("build: {:?}", built.elapsed());

    // The walk-through starts the host on a copy of the build, so any
    // plugin can be swapped in later by replacing that file.
    let live = work.path().join("live.wasm");
    std::fs::copy(&wasm, &live)?;
    // One pod more than `desired`: the host refuses that unless the admin
    // allows a surge (`--max-surge 1`, as the walk-through says).
    let mut options = HostOptions::file(&live);
    options.controller.limits.max_surge = 1;
    let host = RunningHost::start_with(&env, options).await?;
    env.create("odd", 3, &[]).await?;
    let (jz, pods) = env
        .wait_converged("odd", 4, Duration::from_secs(60))
        .await?;
    println!(
        "new -> edit -> build -> host -> converged: {:?}",
        started.elapsed()
    );
    assert_eq!(pods.len(), 4, "3 rounded up to 4");
    let status = jz.status.context("status")?;
    assert_eq!(status.message, "4/4 pods, 4/4 ready");

    // Step 7: the example plugin, copied next to the file and renamed over it.
    let swapped = Instant::now();
    let staged = work.path().join("live.wasm.tmp");
    std::fs::copy(plugin("replicaset-plugin", &[]), &staged)?;
    std::fs::rename(&staged, &live)?;
    let (jz, pods) = env
        .wait_converged("odd", 3, Duration::from_secs(60))
        .await?;
    host.stop().await;
    println!(
        "swap to the example plugin -> converged: {:?}",
        swapped.elapsed()
    );
    assert_eq!(pods.len(), 3, "the example plugin keeps `desired`");
    let by = jz.status.and_then(|s| s.reconciled_by).unwrap_or_default();
    assert!(by.starts_with("replicaset@"), "reconciled by {by}");
    Ok(())
}
