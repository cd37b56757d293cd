//! The Memcached example deployed as the Helm chart deploys declared
//! controllers: `wasm-operator rbac --format helm-values` on the example's
//! `controller.yaml` gives the chart's values, `helm template` renders them
//! and every object is applied; the host binary, run as the chart's
//! Deployment runs it (its environment, its ServiceAccount, so the
//! generated RBAC is all it has), converges a Memcached, and its endpoint
//! serves `/metrics` (the controller's reconciles under its name),
//! `/healthz`, `/readyz` and `/status` with no Jinghzhu plugin.
//!
//! A binary of its own (and so a control plane of its own, with the
//! workload controllers): a host of the `declared` tests would reconcile
//! the same resources.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use e2e_tests::declared::{
    apply_crd, crd_file, memcacheds, status_field, wait_ready, wait_state,
    with_workload_controllers,
};
use e2e_tests::deploy::{Installed, ProcessHost, apply_chart, helm_template, object_of};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();
const BIN: &str = env!("CARGO_BIN_EXE_wasm-operator-under-test");

/// `wasm-operator ARGS`, its standard output.
fn wasm_operator(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(BIN).args(args).output()?;
    if !out.status.success() {
        bail!(
            "wasm-operator {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Whether the ServiceAccount of `kubeconfig` may `verb` `resource` in
/// `namespace` (`kubectl auth can-i`).
fn can_i(
    env: &TestEnv,
    kubeconfig: &std::path::Path,
    verb: &str,
    resource: &str,
    namespace: &str,
) -> Result<bool> {
    let out = std::process::Command::new(&env.control_plane.binaries().kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["auth", "can-i", verb, resource, "-n", namespace])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "yes")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chart_of_the_memcached_controller_runs_it_with_only_the_generated_rbac() -> Result<()>
{
    let plane = own_control_plane(&PLANE, with_workload_controllers).await?;
    let env = TestEnv::new_on(plane, "chart").await?;
    let ns = env.namespace.clone();
    apply_crd(&env.client, crd_file("examples/memcached/crd.yaml")?).await?;

    // The example's declaration, its source ConfigMap in the release's
    // namespace (the test's stands in for wasm-operator).
    let dir = tempfile::tempdir()?;
    let example = std::fs::read_to_string(format!(
        "{}/../../examples/memcached/controller.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))?;
    let declared = example.replace("namespace: wasm-operator", &format!("namespace: {ns}"));
    anyhow::ensure!(declared != example, "the example names no namespace");
    let controller = dir.path().join("controller.yaml");
    std::fs::write(&controller, declared)?;
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        wasm_operator(&[
            "rbac",
            "--format",
            "helm-values",
            &controller.display().to_string(),
        ])?,
    )?;
    let wasm = plugin("memcached-plugin", &[]);
    let release = "decl";
    let objects = helm_template(
        release,
        &ns,
        &[
            "-f",
            &values.display().to_string(),
            "--set-file",
            &format!(
                "pluginControllers.configMaps.memcached-plugin={}",
                wasm.display()
            ),
            // One replica: the test runs it.
            "--set",
            "replicas=1",
        ],
    )?;

    // Exactly the declared kinds: no Jinghzhu, no wildcard, no Secret.
    let role: ClusterRole = object_of(&objects, "ClusterRole")?;
    let rules = serde_json::to_value(role.rules.unwrap_or_default())?;
    let text = rules.to_string();
    for absent in ["\"*\"", "jinghzhu.io", "secrets", "configmaps"] {
        assert!(
            !text.contains(absent),
            "{absent} in the ClusterRole: {text}"
        );
    }
    for present in [
        "memcacheds",
        "memcacheds/status",
        "deployments",
        "pods",
        "replicasets",
        "plugincontrollers",
    ] {
        assert!(
            text.contains(&format!("\"{present}\"")),
            "{present} missing from the ClusterRole: {text}"
        );
    }
    assert!(
        !objects.iter().any(|o| o["kind"] == "JinghzhuPlugin"),
        "the chart serves no Jinghzhu plugin here"
    );
    let deployment: Deployment = object_of(&objects, "Deployment")?;
    let container = deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .context("the chart's Deployment has no container")?;
    let env_vars = container.env.clone().unwrap_or_default();
    let value = |name: &str| {
        env_vars
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.value.clone())
    };
    assert_eq!(
        value("WASM_OPERATOR_PLUGIN_CONTROLLERS").as_deref(),
        Some("true")
    );
    assert_eq!(value("WASM_OPERATOR_PLUGIN_RESOURCE"), None);

    apply_chart(env.control_plane, &ns, &objects)?;
    let account = format!("{release}-wasm-operator");
    let kubeconfig = env
        .control_plane
        .kubeconfig_for_service_account(&ns, &account)
        .await?;
    assert!(can_i(&env, &kubeconfig, "create", "deployments.apps", &ns)?);
    assert!(can_i(
        &env,
        &kubeconfig,
        "get",
        "configmap/memcached-plugin",
        &ns
    )?);
    for (verb, resource) in [
        ("list", "secrets"),
        ("list", "configmaps"),
        ("create", "statefulsets.apps"),
        ("create", "pods"),
    ] {
        assert!(
            !can_i(&env, &kubeconfig, verb, resource, &ns)?,
            "the generated role grants {verb} {resource}"
        );
    }

    // The binary as the chart's Deployment runs it, with its ServiceAccount.
    let installed = Installed {
        namespace: ns.clone(),
        kubeconfig,
        env: env_vars,
        args: container.args.unwrap_or_default(),
        plugin_configmap: "memcached-plugin".into(),
    };
    let mut host = ProcessHost::start(std::path::Path::new(BIN), &installed, "decl-replica", &[])?;
    host.wait_ready().await?;
    let declared = wait_state(&env.client, "memcached", "Serving").await?;
    assert!(
        declared
            .status
            .unwrap_or_default()
            .plugin
            .starts_with("memcached@"),
        "the PluginController's status is written"
    );
    let api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &ns, &memcacheds());
    let cache: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "cache"}, "spec": {"size": 2}
    }))?;
    api.create(&PostParams::default(), &cache).await?;
    if let Err(err) = wait_ready(&api, "cache", 2).await {
        bail!("{err:#}\n{}", host.log_tail(40));
    }
    wait_for(
        "status.nodes lists 2 pods",
        Duration::from_secs(60),
        || async {
            let nodes = status_field(&api, "cache", "/status/nodes").await?;
            Ok(nodes.as_array().is_some_and(|n| n.len() == 2))
        },
    )
    .await?;
    let forbidden = host.log().matches("forbidden").count();
    assert_eq!(forbidden, 0, "the host was refused:\n{}", host.log_tail(40));

    // The endpoint of a host of declared controllers only.
    let scrape = host.scrape().await?;
    let reconciled: f64 = scrape
        .values(
            "controller_runtime_reconcile",
            &[("controller", "memcached"), ("result", "success")],
        )
        .iter()
        .sum();
    assert!(
        reconciled >= 1.0,
        "no successful reconcile of memcached counted"
    );
    assert!(
        scrape
            .values(
                "controller_runtime_reconcile_time_seconds",
                &[("controller", "memcached")]
            )
            .iter()
            .sum::<f64>()
            >= 1.0
    );
    assert_eq!(
        scrape.values(
            "leader_election_master_status",
            &[("name", "wasm-operator")]
        ),
        [1.0],
        "the chart elects a leader"
    );
    let (code, body) = host.get("/healthz").await?;
    assert_eq!(code, 200, "{body}");
    let (code, body) = host.get("/readyz").await?;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("[+]plugin-controllers-synced ok"), "{body}");
    let (code, body) = host.get("/status").await?;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(status["pluginControllers"], json!(true));
    assert_eq!(status["leaderElection"]["leading"], json!(true));

    host.sigterm();
    let exit = host.wait_exit(Duration::from_secs(30)).await?;
    assert!(exit.success(), "{exit}\n{}", host.log_tail(20));
    Ok(())
}
