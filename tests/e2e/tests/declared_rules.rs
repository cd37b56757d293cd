//! The declared controllers' output rules end to end, one misbehaving
//! parent per rule (`tests/plugins/misbehaving-controller`, its mode is
//! the parent's `spec.misbehave`): each gets a Warning naming the rule,
//! nothing of its output is written (its good ConfigMap, its status, its
//! Events), and a neighbour parent of the same controller converges before
//! and after. The status rules among them: a status claiming more
//! ConfigMaps than the parent has (`spec.checkedStatus`) or a generation
//! nobody wrote is refused by `status/observed-fields`. A declaration naming a kind the API server does not serve is
//! refused by name while the host keeps serving; a controller
//! removed at run time closes its watches and leaves new parents alone.
//!
//! A control plane of this binary's own, with one in-process manager (the
//! `declared` tests' has theirs), and without the garbage collector, whose
//! watches of every resource would count with the host's.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use e2e_tests::declared::{
    apply_crd, declare, start_manager, status_field, trial_crd, trials, wait_state,
};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use wasm_operator::crd::controller::PluginController;

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

/// Most ConfigMaps of one Trial (the `too-many` mode proposes more).
const MAX_CONFIGMAPS: u32 = 3;

/// The default control plane less the garbage collector, which watches
/// every resource (its watches would count with the host's).
fn without_garbage_collector() -> local_control_plane::ControlPlaneOptions {
    let mut options = local_control_plane::ControlPlaneOptions::default();
    options
        .controllers
        .retain(|c| c != "garbage-collector-controller");
    options
}

/// A namespace on this binary's control plane, the CRDs installed and the
/// manager running.
async fn setup(prefix: &str) -> Result<TestEnv> {
    let plane = own_control_plane(&PLANE, without_garbage_collector).await?;
    let env = TestEnv::new_on(plane, prefix).await?;
    static READY: OnceCell<()> = OnceCell::const_new();
    READY
        .get_or_try_init(|| async {
            apply_crd(&env.client, PluginController::crd()).await?;
            apply_crd(&env.client, trial_crd("Trial", "trials")).await?;
            apply_crd(&env.client, trial_crd("Fleeting", "fleetings")).await?;
            apply_crd(&env.client, trial_crd("Sturdy", "sturdies")).await?;
            start_manager(plane)
        })
        .await?;
    Ok(env)
}

/// The misbehaving plugin's controller of `kind`: ConfigMap children (at
/// most [`MAX_CONFIGMAPS`] a parent), `status.configMaps` checked as their
/// number.
fn controller_of(kind: &str) -> Value {
    let path = plugin("misbehaving-controller-plugin", &[]);
    json!({
        "parent": {"apiVersion": "e2e.wasm-operator.io/v1", "kind": kind},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap", "maxCount": MAX_CONFIGMAPS}],
        "checkedStatus": [{"field": "configMaps", "countOf": {"apiVersion": "v1", "kind": "ConfigMap"}}],
        "source": {"file": {"path": path.display().to_string()}},
    })
}

/// Creates the parent `name` of `kind` (plural `plural`) with `spec`.
async fn create(
    env: &TestEnv,
    (kind, plural): (&str, &str),
    name: &str,
    spec: Value,
) -> Result<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &trials(kind, plural));
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "e2e.wasm-operator.io/v1", "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))?;
    api.create(&PostParams::default(), &parent).await?;
    Ok(())
}

/// Waits until the Trial `name`'s good ConfigMap holds `value` and its
/// status says so.
async fn wait_converged(env: &TestEnv, name: &str, value: &str) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &trials("Trial", "trials"),
    );
    wait_for(
        &format!("Trial {name} converged"),
        Duration::from_secs(60),
        || async { Ok(status_field(&api, name, "/status/value").await? == json!(value)) },
    )
    .await
}

/// Waits for a Warning on `kind` `name` (in `namespace`) whose message
/// names `[rule]`.
async fn wait_warning(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
    rule: &str,
) -> Result<()> {
    wait_for(
        &format!("a Warning naming {rule} on {kind} {name}"),
        Duration::from_secs(60),
        || async {
            let events = e2e_tests::events_on(client, namespace, kind, name).await?;
            Ok(events.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains(&format!("[{rule}]")))
            }))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn each_output_rule_refuses_its_offender_whole_while_the_neighbour_converges() -> Result<()> {
    let env = setup("rules").await?;
    declare(&env.client, "rules", controller_of("Trial")).await?;
    wait_state(&env.client, "rules", "Serving").await?;
    let trial = ("Trial", "trials");
    create(&env, trial, "good", json!({"misbehave": "", "value": "v1"})).await?;
    wait_converged(&env, "good", "v1").await?;

    let cases = [
        ("bad-name", "child/name"),
        ("host-label", "child/labels"),
        ("duplicate", "child/duplicate"),
        ("too-many", "child/count"),
        ("big-status", "status/body"),
        ("many-events", "events/count"),
        ("reserved-reason", "events/reserved-reason"),
        ("lie-count", "status/observed-fields"),
        ("lie-generation", "status/observed-fields"),
    ];
    for (mode, _) in cases {
        create(
            &env,
            trial,
            mode,
            json!({"misbehave": mode, "value": "v1", "count": MAX_CONFIGMAPS}),
        )
        .await?;
    }
    for (mode, rule) in cases {
        wait_warning(&env.client, &env.namespace, "Trial", mode, rule).await?;
    }
    // A neighbour created after them converges: the host is up and serving.
    create(
        &env,
        trial,
        "after",
        json!({"misbehave": "", "value": "v2"}),
    )
    .await?;
    wait_converged(&env, "after", "v2").await?;

    // Nothing of an offender's output was written: not its good
    // ConfigMap, not the offending children, not its status, not its Events.
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &trials("Trial", "trials"),
    );
    for (mode, rule) in cases {
        if configmaps.get_opt(mode).await?.is_some() {
            bail!("{mode}: its ConfigMap was written though {rule} refused the output");
        }
        let status = status_field(&api, mode, "/status").await?;
        if !status.is_null() {
            bail!("{mode}: its status was written though {rule} refused the output: {status}");
        }
        let events = e2e_tests::events_on(&env.client, &env.namespace, "Trial", mode).await?;
        if let Some(event) = events
            .iter()
            .find(|e| matches!(e.reason.as_deref(), Some("Spam" | "SuccessfulCreate")))
        {
            bail!("{mode}: the plugin's Event was recorded: {event:?}");
        }
    }
    for extra in ["host-label-labelled", "too-many-0", "too-many-2"] {
        assert!(
            configmaps.get_opt(extra).await?.is_none(),
            "{extra} was written"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declared_kind_the_api_server_does_not_serve_is_refused_by_name() -> Result<()> {
    let env = setup("unknown-kind").await?;
    let path = plugin("misbehaving-controller-plugin", &[]);
    for (name, parent, child) in [
        (
            "unknown-child",
            json!({"apiVersion": "e2e.wasm-operator.io/v1", "kind": "Trial"}),
            json!({"apiVersion": "e2e.wasm-operator.io/v1", "kind": "Nonexistent"}),
        ),
        (
            "unknown-parent",
            json!({"apiVersion": "nowhere.example.com/v1", "kind": "Ghost"}),
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        ),
    ] {
        declare(
            &env.client,
            name,
            json!({
                "parent": parent,
                "children": [child],
                "source": {"file": {"path": path.display().to_string()}},
            }),
        )
        .await?;
        let refused = wait_state(&env.client, name, "Refused").await?;
        let last = refused
            .status
            .and_then(|s| s.last_refusal)
            .context("no lastRefusal")?;
        assert_eq!(
            last.rule, "controller/unknown-kind",
            "{name}: {}",
            last.message
        );
        // The Warning on the resource (cluster-scoped: its Events are in `default`).
        wait_warning(
            &env.client,
            "default",
            "PluginController",
            name,
            "controller/unknown-kind",
        )
        .await?;
        Api::<PluginController>::all(env.client.clone())
            .delete(name, &DeleteParams::default())
            .await?;
    }
    // The host keeps serving: a controller declared after them converges
    // (a kind of its own: two controllers of one parent kind would fight).
    declare(&env.client, "still-serving", controller_of("Sturdy")).await?;
    wait_state(&env.client, "still-serving", "Serving").await?;
    create(
        &env,
        ("Sturdy", "sturdies"),
        "sturdy",
        json!({"misbehave": "", "value": "v1"}),
    )
    .await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for(
        "the Sturdy's ConfigMap",
        Duration::from_secs(60),
        || async { Ok(configmaps.get_opt("sturdy").await?.is_some()) },
    )
    .await?;
    Ok(())
}

/// The watches the API server holds open on `resource` of `group`
/// (`apiserver_longrunning_requests{verb="WATCH"}`).
async fn open_watches(client: &Client, group: &str, resource: &str) -> Result<f64> {
    let request = axum::http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut total = 0.0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_longrunning_requests{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let has = |label: &str, value: &str| labels.contains(&format!("{label}=\"{value}\""));
        if has("verb", "WATCH") && has("group", group) && has("resource", resource) {
            total += value.trim().parse::<f64>().unwrap_or(0.0);
        }
    }
    Ok(total)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_controller_added_and_removed_at_run_time_starts_and_stops_its_watches() -> Result<()> {
    let env = setup("runtime").await?;
    let group = "e2e.wasm-operator.io";
    let kind = ("Fleeting", "fleetings");
    assert_eq!(
        open_watches(&env.client, group, "fleetings").await?,
        0.0,
        "nothing watches Fleetings before a controller declares them"
    );
    declare(&env.client, "fleeting", controller_of("Fleeting")).await?;
    wait_state(&env.client, "fleeting", "Serving").await?;
    wait_for("a watch on fleetings", Duration::from_secs(30), || async {
        Ok(open_watches(&env.client, group, "fleetings").await? >= 1.0)
    })
    .await?;
    create(&env, kind, "first", json!({"misbehave": "", "value": "v1"})).await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for(
        "the first Fleeting's ConfigMap",
        Duration::from_secs(60),
        || async { Ok(configmaps.get_opt("first").await?.is_some()) },
    )
    .await?;

    Api::<PluginController>::all(env.client.clone())
        .delete("fleeting", &DeleteParams::default())
        .await?;
    wait_for(
        "the watch on fleetings closed",
        Duration::from_secs(30),
        || async { Ok(open_watches(&env.client, group, "fleetings").await? == 0.0) },
    )
    .await?;
    create(
        &env,
        kind,
        "second",
        json!({"misbehave": "", "value": "v1"}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        configmaps.get_opt("second").await?.is_none(),
        "a removed controller still reconciled"
    );

    // Declared again: the watch opens again and the waiting parent converges.
    declare(&env.client, "fleeting", controller_of("Fleeting")).await?;
    wait_for(
        "the second Fleeting's ConfigMap",
        Duration::from_secs(60),
        || async { Ok(configmaps.get_opt("second").await?.is_some()) },
    )
    .await?;
    wait_for(
        "one watch on fleetings again",
        Duration::from_secs(30),
        || async { Ok(open_watches(&env.client, group, "fleetings").await? == 1.0) },
    )
    .await?;
    Ok(())
}
