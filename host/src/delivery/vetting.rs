//! Vetting a candidate plugin before it may serve: digest pin, compile and
//! precompile, the world check (done by loading), and a smoke reconcile on a
//! synthetic object so a plugin that traps on every call is refused before
//! it touches the cluster. The compile runs on tokio's blocking pool
//! ([`Runtime::load_off_thread`]), never on an async worker.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::crd::{Jinghzhu, JinghzhuSpec};
use crate::refusal::Refusal;
use crate::runtime::{LoadedPlugin, Runtime, digest_of};
use crate::slot::ActivePlugin;

/// The rules vetting refuses by.
pub mod rules {
    /// The bytes are not what `--plugin-sha256` (or `spec.sha256`) pins.
    pub const DIGEST_PIN: &str = "plugin/digest-pin";
    /// Not a component of our world, or it does not compile.
    pub const LOAD: &str = "plugin/load";
    /// It loaded, but trapped on the smoke reconcile.
    pub const SMOKE_RECONCILE: &str = "plugin/smoke-reconcile";
    /// A plugin of the other contract family: a generic (0.3) plugin where
    /// a `Jinghzhu` one must serve, or the other way round.
    pub const CONTRACT: &str = "plugin/contract";
}

/// Checks `bytes` and returns the loaded `Jinghzhu` plugin if it may serve.
pub async fn vet(
    runtime: &Arc<Runtime>,
    bytes: &[u8],
    source: &str,
    pinned_sha256: Option<&str>,
) -> Result<Arc<LoadedPlugin>, Refusal> {
    let plugin = load_pinned(runtime, bytes, source, pinned_sha256).await?;
    if plugin.contract().is_generic() {
        return Err(Refusal::new(
            rules::CONTRACT,
            format!(
                "{} is a contract {} plugin (any kind): declare it in a PluginController; \
                 --plugin and a JinghzhuPlugin serve the Jinghzhu kind (contract 0.1 or 0.2)",
                plugin.describe(),
                plugin.contract()
            ),
        ));
    }
    smoke_test(&plugin).await?;
    Ok(plugin)
}

/// The digest pin, then compile (or the precompiled cache), link and the
/// world check: what every candidate passes, of either contract family.
pub async fn load_pinned(
    runtime: &Arc<Runtime>,
    bytes: &[u8],
    source: &str,
    pinned_sha256: Option<&str>,
) -> Result<Arc<LoadedPlugin>, Refusal> {
    if let Some(expected) = pinned_sha256 {
        let actual = digest_of(bytes);
        let expected_full = if expected.starts_with("sha256:") {
            expected.to_string()
        } else {
            format!("sha256:{expected}")
        };
        if actual != expected_full {
            return Err(Refusal::new(
                rules::DIGEST_PIN,
                format!(
                    "digest mismatch: the candidate is {actual}, but only {expected_full} may load"
                ),
            ));
        }
    }
    let plugin = runtime
        .load_off_thread(Arc::from(bytes), source.to_string())
        .await
        .map_err(|err| Refusal::new(rules::LOAD, format!("cannot load: {err:#}")))?;
    Ok(plugin)
}

/// [`vet`], then the downgrade rule of the slot it would serve in
/// ([`ActivePlugin::check_downgrade`]): every check a candidate passes
/// before it may serve, whichever source delivered it.
pub async fn vet_for_slot(
    runtime: &Arc<Runtime>,
    slot: &ActivePlugin,
    bytes: &[u8],
    source: &str,
    pinned_sha256: Option<&str>,
) -> Result<Arc<LoadedPlugin>, Refusal> {
    let plugin = vet(runtime, bytes, source, pinned_sha256).await?;
    slot.check_downgrade(&plugin)?;
    Ok(plugin)
}

/// One reconcile of a synthetic Jinghzhu with no pods: it must not trap.
/// (A plugin error value is acceptable: it may reject the synthetic input.)
async fn smoke_test(plugin: &Arc<LoadedPlugin>) -> Result<(), Refusal> {
    let mut jz = Jinghzhu::new(
        "wasm-operator-smoke-test",
        JinghzhuSpec {
            desired: 1,
            template: None,
        },
    );
    jz.metadata = ObjectMeta {
        name: Some("wasm-operator-smoke-test".into()),
        namespace: Some("default".into()),
        uid: Some("00000000-0000-0000-0000-000000000000".into()),
        generation: Some(1),
        ..ObjectMeta::default()
    };
    match plugin
        .reconcile(&jz, &[], "default/wasm-operator-smoke-test")
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if err.is_returned_error() => Ok(()),
        Err(err) => Err(Refusal::new(
            rules::SMOKE_RECONCILE,
            format!("failed the smoke reconcile: {err}"),
        )),
    }
}
