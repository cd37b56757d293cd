//! Containment, round two (issue 22), hazard 1: any object the API server
//! accepts is read or skipped on its own. A Jinghzhu nested deeper than
//! serde_json's recursion limit (the CRD keeps `spec.template` open), or of
//! the wrong shape, gets an `InvalidObject` Warning naming the rule; the host
//! becomes ready whether the object was there before it started or came
//! later, and its neighbours converge.

use std::sync::Arc;

use e2e_tests::wait_for;
use kube::api::{GetParams, ListParams};
use wasm_operator::crd::incoming::{MAX_DEPTH, nesting_depth};
use wasm_operator::ownership::OWNER_LABEL;
use wasm_operator::telemetry::health::Health;

use super::*;

/// How deep the hostile template nests: beyond serde_json's limit (128).
const LEVELS: usize = 200;
/// The deepest the API server takes: its JSON decoder stops at 10 000
/// levels (the whole object here is `DEEPEST + 4`).
const DEEPEST: usize = 9_990;

/// A Jinghzhu whose `spec.template.spec.x` nests `levels` levels deep (the
/// whole object `levels + 4`), as JSON text: a `serde_json::Value` that deep
/// cannot even be built, dropped or serialised safely.
fn deep_object(name: &str, levels: usize) -> String {
    let nested = format!(
        "{}1{}",
        "{\"k\":[".repeat(levels / 2),
        "]}".repeat(levels / 2)
    );
    format!(
        r#"{{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","metadata":{{"name":"{name}"}},"spec":{{"desired":1,"template":{{"spec":{{"containers":[{{"name":"app","image":"registry.k8s.io/pause:3.10"}}],"x":{nested}}}}}}}}}"#
    )
}

/// A Jinghzhu the schema admits but the host cannot read (`ports` must be a list).
fn wrong_shape(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","metadata":{{"name":"{name}"}},"spec":{{"desired":1,"template":{{"spec":{{"containers":[{{"name":"app","image":"registry.k8s.io/pause:3.10","ports":"oops"}}]}}}}}}}}"#
    )
}

fn collection(env: &TestEnv) -> String {
    format!(
        "/apis/jinghzhu.io/v1/namespaces/{}/jinghzhus",
        env.namespace
    )
}

/// Creates an object from its JSON text.
async fn create_raw(env: &TestEnv, body: String) -> anyhow::Result<()> {
    let request = kube::core::Request::new(collection(env))
        .create(&PostParams::default(), body.into_bytes())?;
    env.client.request_text(request).await?;
    Ok(())
}

/// The stored object, as the API server's JSON text.
async fn get_raw(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    let request = kube::core::Request::new(collection(env)).get(name, &GetParams::default())?;
    Ok(env.client.request_text(request).await?)
}

/// Creates the deep and the misshapen objects and checks the API server
/// stored them as written.
async fn create_hostile_objects(env: &TestEnv) -> anyhow::Result<()> {
    create_raw(env, deep_object("deep", LEVELS)).await?;
    create_raw(env, deep_object("deepest", DEEPEST)).await?;
    create_raw(env, wrong_shape("shape")).await?;
    for (name, levels) in [("deep", LEVELS), ("deepest", DEEPEST)] {
        let stored = nesting_depth(&get_raw(env, name).await?);
        assert!(
            stored >= levels + 4,
            "the API server stored {name} {stored} levels deep"
        );
    }
    Ok(())
}

async fn ready_host(env: &TestEnv) -> anyhow::Result<(RunningHost, Duration)> {
    let health = Arc::new(Health::default());
    let started = Instant::now();
    let host = host_with(
        env,
        ControllerConfig {
            health: health.clone(),
            ..ControllerConfig::default()
        },
    )
    .await?;
    wait_for("the host to be ready", CONVERGE, || {
        let health = health.clone();
        async move { Ok(health.caches_synced()) }
    })
    .await?;
    Ok((host, started.elapsed()))
}

async fn skipped_with_the_rule(env: &TestEnv) -> anyhow::Result<()> {
    for name in ["deep", "deepest"] {
        let note = env
            .wait_event(name, "InvalidObject", "objects/too-deep", CONVERGE)
            .await?;
        assert!(note.contains(&format!("at most {MAX_DEPTH}")), "{note}");
    }
    env.wait_event("shape", "InvalidObject", "objects/wrong-shape", CONVERGE)
        .await?;
    // (`owned_pods` reads the Jinghzhu typed, which these are not.)
    for name in ["deep", "deepest", "shape"] {
        let pods = env
            .pods()
            .list(&ListParams::default().labels(&format!("{OWNER_LABEL}={name}")))
            .await?;
        assert!(pods.items.is_empty(), "{name}: no pods");
    }
    Ok(())
}

/// The restart case: the objects are there before the host starts. Before
/// the fix, the start-up check failed (`run` exited) and the initial list
/// never completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_object_there_at_start_does_not_stop_the_host() -> anyhow::Result<()> {
    let env = TestEnv::new("objects-restart").await?;
    create_hostile_objects(&env).await?;

    // What stopped the host before: parsed whole, the list fails.
    let untyped: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &ApiResource::erase::<Jinghzhu>(&()),
    );
    let err = untyped
        .list(&ListParams::default())
        .await
        .expect_err("a list parsed whole fails on the deep object");
    assert!(err.to_string().contains("recursion limit"), "{err}");

    // What `run` checks before it starts the controller.
    wasm_operator::run::check_crd_in(&env.client, Some(&env.namespace)).await?;
    let (host, ready_in) = ready_host(&env).await?;
    println!(
        "restarted host ready in {ready_in:?} with objects {LEVELS} and {DEEPEST} levels deep in its namespace"
    );
    let converging = Instant::now();
    with_good_neighbour(&env, &[]).await?;
    println!("good neighbour converged in {:?}", converging.elapsed());
    skipped_with_the_rule(&env).await?;
    host.stop().await;
    recording_skips_what_it_cannot_read(&env).await
}

/// `wasm-operator record --all` records the readable objects and names the
/// others; naming an unreadable one is an error.
async fn recording_skips_what_it_cannot_read(env: &TestEnv) -> anyhow::Result<()> {
    let out = tempfile::TempDir::new()?;
    let record = |chosen: &str| {
        let argv: Vec<String> = [
            "wasm-operator",
            "record",
            "--kubeconfig",
            env.control_plane
                .kubeconfig_path()
                .to_str()
                .unwrap_or_default(),
            "-n",
            &env.namespace,
            chosen,
            "--out",
            out.path().to_str().unwrap_or_default(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        tokio::task::spawn_blocking(move || wasm_operator::cli::execute_args(argv))
    };
    let code = record("--all").await??;
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let cases: Vec<String> = std::fs::read_dir(out.path())?
        .filter_map(|entry| Some(entry.ok()?.file_name().to_string_lossy().into_owned()))
        .collect();
    assert_eq!(cases, [format!("{}_good", env.namespace)]);
    let err = record("deep").await?.expect_err("deep cannot be recorded");
    assert!(format!("{err:#}").contains("objects/too-deep"), "{err:#}");
    Ok(())
}

/// The running case: the objects appear while the host runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_object_created_while_running_is_skipped_alone() -> anyhow::Result<()> {
    let env = TestEnv::new("objects-running").await?;
    // The CRD bounds what a structural schema can: a template has at most
    // `metadata` and `spec`, a pod at most 64 containers.
    let extra_key =
        wrong_shape("bounded").replace(r#""template":{"#, r#""template":{"x":{},"y":{},"#);
    let refused = create_raw(&env, extra_key)
        .await
        .expect_err("at most 2 properties");
    assert!(
        format!("{refused:#}").contains("spec.template: Too many: 3: must have at most 2"),
        "{refused:#}"
    );
    let containers = vec![r#"{"name":"c","image":"x"}"#; 65].join(",");
    let many = wrong_shape("bounded").replace(
        r#""containers":[{"name":"app","image":"registry.k8s.io/pause:3.10","ports":"oops"}]"#,
        &format!(r#""containers":[{containers}]"#),
    );
    let refused = create_raw(&env, many)
        .await
        .expect_err("at most 64 containers");
    assert!(
        format!("{refused:#}").contains("containers: Too many: 65: must have at most 64"),
        "{refused:#}"
    );

    let (host, _) = ready_host(&env).await?;
    env.create("before", 1, &[]).await?;
    env.wait_converged("before", 1, CONVERGE).await?;
    create_hostile_objects(&env).await?;
    with_good_neighbour(&env, &[]).await?;
    skipped_with_the_rule(&env).await?;
    // The watch goes on: later changes are seen.
    env.scale("before", 2).await?;
    env.wait_converged("before", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}
