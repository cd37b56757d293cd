//! A declared controller's write budget end to end (rule `writes/budget`):
//! a plugin that writes its parent's status on every call
//! (`tests/plugins/misbehaving-controller`, mode `churn`: each write's
//! watch event wakes the next reconcile) is held to the budget the admin
//! set (`run --controller-writes-per-second 2 --controller-write-burst 10`,
//! here the manager's settings; its namespace's fair share of it, rule
//! `writes/namespace-budget`, holds it once the bucket is down to its
//! reserve), its parent gets a Warning `WriteBudgetExceeded` naming the
//! rule, the host stays up, and a
//! neighbour controller (its own budget) keeps converging. Then the
//! offender is deleted outright (no finalizer, so no reconcile sees it
//! terminating) and what its controller kept for it is dropped
//! (`wasm_operator_declared_parent_entries`).
//!
//! A control plane of this binary's own, with a manager of its own whose
//! budget is lowered (other binaries' managers keep the default).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use e2e_tests::declared::{
    Manager, apply_crd, declare, status_field, trial_crd, trials, wait_state,
};
use e2e_tests::{ControlPlaneSlot, TestEnv, own_control_plane, plugin, wait_for};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, WatchEvent, WatchParams};
use kube::{CustomResourceExt, ResourceExt};
use local_control_plane::ControlPlaneOptions;
use serde_json::{Value, json};
use wasm_operator::crd::controller::PluginController;
use wasm_operator::declared::WriteRate;
use wasm_operator::telemetry::metrics::{ControllerLabels, Metrics};

static PLANE: ControlPlaneSlot = ControlPlaneSlot::new();

/// The budget: 2 writes a second after a burst of 10.
const BUDGET: WriteRate = WriteRate {
    per_second: 2,
    burst: 10,
};
/// How long the offender's status writes are counted.
const WINDOW: Duration = Duration::from_secs(20);

/// The misbehaving plugin's controller of `kind` (ConfigMap children).
fn controller_of(kind: &str) -> Value {
    let path = plugin("misbehaving-controller-plugin", &[]);
    json!({
        "parent": {"apiVersion": "e2e.wasm-operator.io/v1", "kind": kind},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap", "maxCount": 2}],
        "source": {"file": {"path": path.display().to_string()}},
    })
}

async fn create(
    env: &TestEnv,
    api: &Api<DynamicObject>,
    kind: &str,
    name: &str,
    spec: Value,
) -> Result<()> {
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "e2e.wasm-operator.io/v1", "kind": kind,
        "metadata": {"name": name, "namespace": env.namespace},
        "spec": spec,
    }))?;
    api.create(&PostParams::default(), &parent).await?;
    Ok(())
}

/// Writes of `name` (each one a watch event) over `window`.
async fn writes_over(api: &Api<DynamicObject>, name: &str, window: Duration) -> Result<usize> {
    let version = api.get(name).await?.resource_version().unwrap_or_default();
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = api.watch(&params, &version).await?.boxed();
    let end = Instant::now() + window;
    let mut writes = 0;
    while let Ok(next) = tokio::time::timeout_at(end.into(), events.try_next()).await {
        match next? {
            Some(WatchEvent::Modified(_)) => writes += 1,
            Some(WatchEvent::Error(err)) => bail!("watching {name}: {err:?}"),
            Some(_) => {}
            None => bail!("the watch of {name} ended before the window"),
        }
    }
    Ok(writes)
}

fn entries(metrics: &Metrics, controller: &str) -> i64 {
    metrics
        .declared_parent_entries
        .get_or_create(&ControllerLabels {
            controller: controller.into(),
        })
        .get()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_writing_without_end_is_held_to_the_budget_while_a_neighbour_converges()
-> Result<()> {
    let plane = own_control_plane(&PLANE, ControlPlaneOptions::default).await?;
    let env = TestEnv::new_on(plane, "budget").await?;
    apply_crd(&env.client, PluginController::crd()).await?;
    apply_crd(&env.client, trial_crd("Trial", "trials")).await?;
    apply_crd(&env.client, trial_crd("Sturdy", "sturdies")).await?;
    let metrics = Arc::new(Metrics::default());
    let _manager = Manager::start_with(plane, None, BUDGET, metrics.clone())?;
    declare(&env.client, "churner", controller_of("Trial")).await?;
    // The neighbour's own budget, set in its spec: at the host's 2/s its
    // three parents would be held by their namespace's fair share, which
    // the tenants' tests cover; here it shows one controller's churn does
    // not touch another's.
    let mut neighbour = controller_of("Sturdy");
    neighbour["writeBudget"] = json!({"perSecond": 100, "burst": 1000});
    declare(&env.client, "neighbour", neighbour).await?;
    wait_state(&env.client, "churner", "Serving").await?;
    wait_state(&env.client, "neighbour", "Serving").await?;
    let trials_api: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &trials("Trial", "trials"),
    );
    let sturdies: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &trials("Sturdy", "sturdies"),
    );

    create(
        &env,
        &trials_api,
        "Trial",
        "churn",
        json!({"misbehave": "churn", "value": "v1"}),
    )
    .await?;
    // Held by the controller's bucket (`writes/budget`) or, once that is
    // down to its reserve, by its namespace's share of it
    // (`writes/namespace-budget`): either Warning names its rule.
    wait_for(
        "a Warning WriteBudgetExceeded naming writes/budget or writes/namespace-budget on the churning Trial",
        Duration::from_secs(60),
        || async {
            let events = env.events_on("Trial", "churn").await?;
            Ok(events.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("WriteBudgetExceeded")
                    && e.message
                        .as_deref()
                        .is_some_and(|m| {
                            m.contains("[writes/budget]") || m.contains("[writes/namespace-budget]")
                        })
            }))
        },
    )
    .await?;

    // Held to the budget: the bucket is spent, so the window gets its rate.
    let writes = writes_over(&trials_api, "churn", WINDOW).await?;
    let most = (u64::from(BUDGET.per_second) * WINDOW.as_secs() + u64::from(BUDGET.burst)) as usize;
    eprintln!(
        "the churning Trial was written {writes} times in {WINDOW:?} (budget: at most {most})"
    );
    if writes > most + 5 {
        bail!("{writes} writes in {WINDOW:?}: over the budget's {most}");
    }
    if writes == 0 {
        bail!("no write in {WINDOW:?}: the budget held the parent back entirely");
    }

    // The neighbour controller converges meanwhile, without a Warning.
    for name in ["n1", "n2", "n3"] {
        create(
            &env,
            &sturdies,
            "Sturdy",
            name,
            json!({"misbehave": "", "value": "v1"}),
        )
        .await?;
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    for name in ["n1", "n2", "n3"] {
        wait_for(
            &format!("Sturdy {name} converged"),
            Duration::from_secs(60),
            || async {
                Ok(configmaps.get_opt(name).await?.is_some()
                    && status_field(&sturdies, name, "/status/value").await? == json!("v1"))
            },
        )
        .await?;
        let warned = env.events_on("Sturdy", name).await?;
        if let Some(event) = warned
            .iter()
            .find(|e| e.type_.as_deref() == Some("Warning"))
        {
            bail!("the neighbour {name} got a Warning: {event:?}");
        }
    }

    // Deleted outright, the offender leaves nothing behind in its controller.
    let kept = entries(&metrics, "churner");
    eprintln!("the churner keeps {kept} entries for its one parent");
    if kept < 1 {
        bail!("the churner keeps nothing for a parent it reconciles: the gauge counts nothing");
    }
    trials_api.delete("churn", &DeleteParams::default()).await?;
    wait_for(
        "the churner's entries dropped",
        Duration::from_secs(90),
        || async { Ok(entries(&metrics, "churner") == 0) },
    )
    .await?;
    // The neighbour keeps its own parents' (the gauge is counted every 5 s).
    wait_for(
        "the neighbour's entries counted",
        Duration::from_secs(30),
        || async { Ok(entries(&metrics, "neighbour") >= 3) },
    )
    .await?;
    Ok(())
}
