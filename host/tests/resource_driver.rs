//! The `JinghzhuPlugin` driver's delivery steps without a cluster: bytes
//! from a resource's source are verified, vetted, then served or refused
//! through the one serve/refuse pipeline, and what the resource's status
//! and Events would say is read from a record of what the driver wrote.
//! The driver's client points at a closed port: nothing here may reach it.

mod support;

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::PatchParams;
use serde_json::{Value, json};
use wasm_artifacts::Toolchain;
use wasm_operator::crd::plugin::{JinghzhuPlugin, PluginMode};
use wasm_operator::delivery::resource::status::StatusOut;
use wasm_operator::delivery::resource::{Driver, ResourceOptions};
use wasm_operator::delivery::swapper::{self, SwapHistory};
use wasm_operator::runtime::{Runtime, RuntimeConfig, digest_of};
use wasm_operator::slot::{ActivePlugin, RollbackPolicy};
use wasm_operator::telemetry::metrics::Metrics;

/// What the driver wrote: status bodies applied, Warning notes recorded.
#[derive(Default)]
struct Record {
    applied: Mutex<Vec<Value>>,
    warnings: Mutex<Vec<String>>,
}

impl StatusOut for Record {
    fn apply_status<'a>(
        &'a self,
        _name: &'a str,
        _params: &'a PatchParams,
        body: &'a Value,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        if let Ok(mut applied) = self.applied.lock() {
            applied.push(body.clone());
        }
        Box::pin(async { Ok(()) })
    }

    fn warn(&self, _regarding: ObjectReference, note: String) -> BoxFuture<'_, ()> {
        if let Ok(mut warnings) = self.warnings.lock() {
            warnings.push(note);
        }
        Box::pin(async {})
    }
}

impl Record {
    /// The status last applied.
    fn status(&self) -> Value {
        self.applied
            .lock()
            .ok()
            .and_then(|a| a.last().cloned())
            .map(|body| body["status"].clone())
            .unwrap_or(Value::Null)
    }

    /// The condition `type_` of the status last applied: (status, reason).
    fn condition(&self, type_: &str) -> Option<(String, String)> {
        let status = self.status();
        let conditions = status["conditions"].as_array()?;
        let c = conditions.iter().find(|c| c["type"] == type_)?;
        Some((
            c["status"].as_str()?.to_string(),
            c["reason"].as_str()?.to_string(),
        ))
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }
}

/// A driver of the resource `rs` in `role`, its slot, swap history,
/// metrics and record.
struct Harness {
    driver: Driver,
    slot: Arc<ActivePlugin>,
    history: Arc<Mutex<SwapHistory>>,
    metrics: Arc<Metrics>,
    record: Arc<Record>,
}

fn harness(role: PluginMode) -> anyhow::Result<Harness> {
    // A client that reaches nothing: port 9 on loopback is closed.
    let client = kube::Client::try_from(kube::Config::new("https://127.0.0.1:9".parse()?))?;
    let runtime = Arc::new(Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })?);
    let metrics = Arc::new(Metrics::default());
    let slot = Arc::new(ActivePlugin::empty(
        RollbackPolicy::default(),
        metrics.clone(),
    ));
    let history = Arc::new(Mutex::new(SwapHistory::default()));
    let options = ResourceOptions {
        name: "rs".into(),
        shadow: None,
        replica: "replica-0".into(),
        shadow_queue: 2,
        rollback: RollbackPolicy::default(),
        pod_policy: Default::default(),
        oci: None,
        files: Default::default(),
        allow_unsigned: false,
        judge: Default::default(),
        router: Default::default(),
    };
    let record = Arc::new(Record::default());
    let driver = Driver::new(
        &client,
        &runtime,
        &options,
        (slot.clone(), history.clone()),
        &metrics,
        ("rs".into(), role),
    )
    .writing_to(record.clone());
    Ok(Harness {
        driver,
        slot,
        history,
        metrics,
        record,
    })
}

/// The resource `rs` with a file source and `spec` merged in.
fn resource(spec: Value) -> anyhow::Result<JinghzhuPlugin> {
    let mut body = json!({
        "apiVersion": "jinghzhu.io/v1",
        "kind": "JinghzhuPlugin",
        "metadata": {"name": "rs", "uid": "uid-rs", "generation": 1},
        "spec": {"source": {"file": {"path": "/plugins/replicaset.wasm"}}},
    });
    if let (Some(into), Some(from)) = (body["spec"].as_object_mut(), spec.as_object()) {
        into.extend(from.clone());
    }
    Ok(serde_json::from_value(body)?)
}

fn replicaset() -> anyhow::Result<Vec<u8>> {
    Ok(std::fs::read(support::replicaset(Toolchain::Wasip2))?)
}

fn serving(slot: &ActivePlugin) -> Option<String> {
    slot.serving().map(|p| p.digest().to_string())
}

#[tokio::test]
async fn a_good_plugin_serves_and_the_status_says_so() -> anyhow::Result<()> {
    let mut h = harness(PluginMode::Active)?;
    let bytes = replicaset()?;
    h.driver
        .offer_bytes(&resource(json!({}))?, bytes.clone(), "file")
        .await;
    assert_eq!(serving(&h.slot), Some(digest_of(&bytes)));
    for (type_, expected) in [
        ("Resolved", ("True", "Resolved")),
        ("Compiled", ("True", "Compiled")),
        ("Serving", ("True", "Serving")),
        ("Refused", ("False", "Accepted")),
    ] {
        let found = h.record.condition(type_);
        assert_eq!(
            found.as_ref().map(|(s, r)| (s.as_str(), r.as_str())),
            Some(expected),
            "{type_}: {}",
            h.record.status()
        );
    }
    let status = h.record.status();
    assert_eq!(status["digest"], json!(digest_of(&bytes)));
    assert_eq!(status["state"], "Serving");
    assert_eq!(status["replicas"][0]["name"], "replica-0");
    assert!(h.record.warnings().is_empty(), "{:?}", h.record.warnings());
    let history = swapper::lock(&h.history).clone();
    assert_eq!(history.last_swap.map(|s| s.digest), Some(digest_of(&bytes)));
    assert!(history.not_serving.is_none());
    assert_eq!(h.metrics.plugin_swaps_refused.get(), 0);
    Ok(())
}

#[tokio::test]
async fn bytes_that_are_no_plugin_are_refused_and_the_plugin_serving_stays() -> anyhow::Result<()> {
    let mut h = harness(PluginMode::Active)?;
    let good = replicaset()?;
    let spec = resource(json!({}))?;
    h.driver.offer_bytes(&spec, good.clone(), "file").await;
    let garbage = b"not a wasm component".to_vec();
    h.driver.offer_bytes(&spec, garbage.clone(), "file").await;
    assert_eq!(serving(&h.slot), Some(digest_of(&good)), "v1 keeps serving");
    assert_eq!(
        h.record.condition("Refused"),
        Some(("True".into(), "Load".into()))
    );
    assert_eq!(
        h.record.condition("Compiled").map(|c| c.0),
        Some("False".into())
    );
    let status = h.record.status();
    assert_eq!(status["lastRefusal"]["rule"], "plugin/load");
    assert_eq!(status["lastRefusal"]["digest"], json!(digest_of(&garbage)));
    assert_eq!(status["state"], "Refused");
    assert_eq!(status["digest"], json!(digest_of(&good)));
    let warnings = h.record.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("refused by rule plugin/load")
            && warnings[0].contains("replicaset@")
            && warnings[0].contains("keeps serving"),
        "{}",
        warnings[0]
    );
    let history = swapper::lock(&h.history).clone();
    assert_eq!(
        history.last_refusal.map(|r| r.digest),
        Some(digest_of(&garbage))
    );
    assert!(history.not_serving.is_none(), "v1 serves");
    assert_eq!(h.metrics.plugin_swaps_refused.get(), 1);
    Ok(())
}

#[tokio::test]
async fn signatures_asked_of_a_file_are_refused_before_anything_is_compiled() -> anyhow::Result<()>
{
    let mut h = harness(PluginMode::Active)?;
    let spec = resource(json!({"verification": {"keys": []}}))?;
    h.driver.offer_bytes(&spec, replicaset()?, "file").await;
    assert_eq!(serving(&h.slot), None);
    assert_eq!(h.record.condition("Compiled"), None, "nothing compiled");
    assert_eq!(
        h.record.condition("Verified"),
        Some(("False".into(), "Source".into()))
    );
    assert_eq!(
        h.record.status()["lastRefusal"]["rule"],
        "verification/source"
    );
    let warnings = h.record.warnings();
    assert!(
        warnings.len() == 1 && warnings[0].contains("no plugin serves until a good one arrives"),
        "{warnings:?}"
    );
    let history = swapper::lock(&h.history).clone();
    assert!(
        history
            .not_serving
            .is_some_and(|why| why.contains("verification/source")),
        "nothing serves, and /status says why"
    );
    Ok(())
}

#[tokio::test]
async fn a_digest_pin_refuses_other_bytes() -> anyhow::Result<()> {
    let mut h = harness(PluginMode::Active)?;
    let pin = format!("sha256:{}", "0".repeat(64));
    let spec = resource(json!({"digest": pin}))?;
    h.driver.offer_bytes(&spec, replicaset()?, "file").await;
    assert_eq!(serving(&h.slot), None);
    assert_eq!(
        h.record.condition("Verified"),
        Some(("False".into(), "DigestPin".into()))
    );
    assert_eq!(
        h.record.status()["lastRefusal"]["rule"],
        "plugin/digest-pin"
    );
    Ok(())
}

#[tokio::test]
async fn a_shadow_resource_serves_the_shadow_and_its_refusal_leaves_the_host_ready()
-> anyhow::Result<()> {
    let mut h = harness(PluginMode::Shadow)?;
    let spec = resource(json!({"mode": "shadow"}))?;
    let good = replicaset()?;
    h.driver.offer_bytes(&spec, good.clone(), "file").await;
    assert_eq!(
        h.slot.shadow().map(|p| p.digest().to_string()),
        Some(digest_of(&good))
    );
    assert_eq!(serving(&h.slot), None, "a shadow never serves");
    assert_eq!(
        h.record.condition("Serving"),
        Some(("True".into(), "Serving".into()))
    );
    h.driver
        .offer_bytes(&spec, b"garbage".to_vec(), "file")
        .await;
    let history = swapper::lock(&h.history).clone();
    assert!(
        history
            .shadow_refusal
            .is_some_and(|r| r.outcome.contains("plugin/load")),
        "the shadow's refusal is kept apart"
    );
    assert!(history.last_refusal.is_none());
    assert!(
        history.not_serving.is_none(),
        "a refused shadow does not make the host unready"
    );
    assert_eq!(
        h.slot.shadow().map(|p| p.digest().to_string()),
        Some(digest_of(&good)),
        "the shadow it had keeps running"
    );
    Ok(())
}
