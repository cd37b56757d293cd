//! Controller plugins of contract 0.3 (`wasm-operator:controller@0.3.0`)
//! in Go, the Go controller SDK of `plugins/go/controller`:
//! - the SDK's native tests (`go test`) pass;
//! - its bindings in `plugins/go/controller/bindings` are what
//!   `wit-bindgen go` generates from `wit/0.3` today;
//! - `wasm-operator new NAME --kind G/V/K --owns Deployment,Service,ConfigMap
//!   --lang go`, untouched, tests and builds with its own scripts, and the
//!   component serves its declared `PluginController` on the real control
//!   plane (`run --plugin-controllers`' manager): every child created with
//!   a controller owner reference to the parent and the host's label, the
//!   parent's status written (`phase: Ready`, `observedGeneration`), and a
//!   change of the parent's spec followed.
//!
//! The toolchain comes from `tests/setup.sh` (`plugins/go/toolchain.sh`:
//! wit-bindgen-cli, wasm-tools, the Go runtime package, the WASI adapter,
//! cached under `~/.cache/wasm-operator`). A control plane of this binary's
//! own, and one declared controllers' manager.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use e2e_tests::declared::{apply_crd, declare, resource, start_manager, status_field, wait_state};
use e2e_tests::go_plugins::{bindings_match_the_wit, go_test, run_in};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::{Value, json};
use wasm_operator::cli::execute_args;
use wasm_operator::crd::controller::PluginController;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[test]
fn go_controller_sdk_tests_pass_natively() -> Result<()> {
    let text = go_test(&["./controller/..."], &["controller"])?;
    println!("go test:\n{text}");
    Ok(())
}

#[test]
fn go_controller_bindings_are_what_wit_bindgen_generates_from_the_wit() -> Result<()> {
    bindings_match_the_wit("plugins/go/controller")
}

/// The scaffold's name, parent and children.
const NAME: &str = "web-go";
const OWNS: &str = "Deployment,Service,ConfigMap";

/// `wasm-operator new NAME --kind ... --owns ... --lang go` in `work`,
/// tested and built with the project's own scripts: its directory and
/// the component.
async fn scaffold_and_build(work: &Path) -> Result<(PathBuf, PathBuf)> {
    let dir = work.join(NAME);
    let argv: Vec<String> = [
        "wasm-operator",
        "new",
        NAME,
        "--kind",
        "web.example.com/v1/WebApp",
        "--owns",
        OWNS,
        "--lang",
        "go",
        "--no-git",
        "--path",
        path(&dir),
    ]
    .map(String::from)
    .to_vec();
    let code = tokio::task::spawn_blocking(move || execute_args(argv)).await??;
    ensure!(code == ExitCode::SUCCESS, "new --lang go --kind failed");
    let tested = run_in(&dir, "./test.sh", &["-count=1"])?;
    ensure!(
        tested.contains(&format!("ok  \t{NAME}/plugin\t")),
        "the scaffold's tests ran nothing:\n{tested}"
    );
    run_in(&dir, "./build.sh", &[])?;
    let wasm = dir.join("target").join(format!("{NAME}.wasm"));
    ensure!(wasm.is_file(), "build.sh wrote no {}", wasm.display());
    Ok((dir, wasm))
}

/// The YAML file `name` of the project in `dir`, as JSON.
fn yaml(dir: &Path, name: &str) -> Result<Value> {
    let text = std::fs::read_to_string(dir.join(name))?;
    Ok(serde_yaml::from_str(&text)?)
}

/// Waits until the child `name` exists and is controlled by the parent
/// `uid` and labelled by the host for the controller.
async fn wait_owned<K>(api: &Api<K>, name: &str, uid: &str) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(
        &format!("{} {name} owned by the parent", K::kind(&())),
        Duration::from_secs(90),
        || async {
            Ok(api.get_opt(name).await?.is_some_and(|child| {
                let owned = child
                    .owner_references()
                    .iter()
                    .any(|o| o.uid == uid && o.controller == Some(true) && o.kind == "WebApp");
                let labelled = child
                    .labels()
                    .get("wasm-operator.io/controller")
                    .is_some_and(|v| v == NAME);
                owned && labelled
            }))
        },
    )
    .await?;
    Ok(api.get(name).await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scaffolded_go_controller_converges_on_the_control_plane() -> Result<()> {
    let work = tempfile::TempDir::new()?;
    let (dir, wasm) = scaffold_and_build(work.path()).await?;
    println!(
        "{NAME}: scaffolded, tested and built ({} bytes)",
        std::fs::metadata(&wasm)?.len()
    );

    let plane =
        own_control_plane(&PLANE, local_control_plane::ControlPlaneOptions::default).await?;
    let env = TestEnv::new_on(plane, "go-controller").await?;
    apply_crd(&env.client, PluginController::crd()).await?;
    let crd: CustomResourceDefinition = serde_json::from_value(yaml(&dir, "crd.yaml")?)?;
    apply_crd(&env.client, crd).await?;
    start_manager(plane)?;

    // The scaffold's own controller.yaml, its plugin read from the file built.
    let mut declared = yaml(&dir, "controller.yaml")?;
    let spec = declared
        .get_mut("spec")
        .context("controller.yaml has no spec")?;
    spec["source"] = json!({"file": {"path": path(&wasm)}});
    declare(&env.client, NAME, spec.clone()).await?;
    let serving = wait_state(&env.client, NAME, "Serving").await?;
    let plugin = serving.status.unwrap_or_default().plugin;
    ensure!(
        plugin.starts_with(&format!("{NAME}@0.1.0 ")),
        "serving {plugin}"
    );

    let webapps: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &resource("web.example.com", "v1", "WebApp", "webapps"),
    );
    let sample: DynamicObject = serde_json::from_value(yaml(&dir, "sample.yaml")?)?;
    let created = webapps.create(&PostParams::default(), &sample).await?;
    let uid = created.uid().context("the parent has no uid")?;
    let name = created.name_any();

    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    let deployment = wait_owned(&deployments, &name, &uid).await?;
    let replicas = deployment.spec.and_then(|s| s.replicas);
    ensure!(
        replicas == Some(2),
        "the sample asks for 2 replicas: {replicas:?}"
    );
    wait_owned(
        &Api::<Service>::namespaced(env.client.clone(), &env.namespace),
        &name,
        &uid,
    )
    .await?;
    let config = wait_owned(
        &Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace),
        &name,
        &uid,
    )
    .await?;
    ensure!(
        config.data.unwrap_or_default().get("parent") == Some(&name),
        "the ConfigMap's data names its parent"
    );
    wait_status(&webapps, &name, 1).await?;

    // A change of spec is followed: the Deployment scales, the status
    // observes the new generation.
    webapps
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    wait_for(
        "the Deployment scaled to 3",
        Duration::from_secs(60),
        || async { Ok(deployments.get(&name).await?.spec.and_then(|s| s.replicas) == Some(3)) },
    )
    .await?;
    wait_status(&webapps, &name, 2).await?;
    Ok(())
}

/// Waits until the parent's status says `Ready` for `generation`.
async fn wait_status(api: &Api<DynamicObject>, name: &str, generation: i64) -> Result<()> {
    wait_for(
        &format!("{name} status.phase Ready at generation {generation}"),
        Duration::from_secs(60),
        || async {
            let status = status_field(api, name, "/status").await?;
            Ok(status["phase"] == json!("Ready")
                && status["observedGeneration"] == json!(generation)
                && status["message"] == json!("every child exists"))
        },
    )
    .await
}
