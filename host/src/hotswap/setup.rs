//! Wiring the plugin side of a host: read and vet the first plugin, set up
//! the shadow, start the source watcher and the swapper. Used by
//! `wasm-operator run` and by the end-to-end tests alike.
//!
//! What stops the start and what does not (issue 22, hazard 6):
//! - **Operator mistakes** that no push can fix stop it with a clear
//!   message: a `--plugin` or `--shadow-plugin` path that cannot be read, a
//!   ConfigMap the host may not read (RBAC) or an API error.
//! - **Plugin content** never stops it: a plugin refused at start (not a
//!   component, wrong world, fails the digest pin, the compile limits or the
//!   smoke reconcile), or a ConfigMap / key not there yet, leaves the host
//!   running and unready with the reason on `/status` and `/readyz`, counted
//!   in `wasm_operator_plugin_swaps_refused` (`wasm_operator_plugin_serving`
//!   0) and recorded as a `PluginRefused` Warning Event on the ConfigMap. The
//!   source stays watched: the first good plugin it delivers serves and every
//!   object is re-queued. The host does not fall back to an older plugin
//!   from the precompiled cache: the source (and the pin) name the one plugin
//!   the operator wants, and serving another would hide the bad push.
//! - A shadow refused at start is logged, counted and shown on `/status`;
//!   the host runs without it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use kube::Client;
use tokio::sync::mpsc;

use super::candidate::vet;
use super::swapper::{self, Refused, SwapHistory};
use super::{ActivePlugin, RollbackPolicy, sources};
use crate::runtime::{Runtime, digest_of};
use crate::telemetry::metrics::Metrics;

/// Where the plugin comes from (and is watched for changes).
#[derive(Debug, Clone)]
pub enum PluginSource {
    /// A file path (a mounted ConfigMap volume works too).
    File(PathBuf),
    /// A key of a ConfigMap's binaryData, watched through the API.
    ConfigMap {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key.
        key: String,
    },
    /// An OCI artifact (`oci://…`), pulled, verified and polled (see
    /// [`sources::OciSource`]).
    Oci(Box<sources::OciSource>),
}

impl PluginSource {
    /// Parses `NAMESPACE/NAME` for [`PluginSource::ConfigMap`].
    pub fn configmap(spec: &str, key: &str) -> Result<Self> {
        let (namespace, name) = spec
            .split_once('/')
            .ok_or_else(|| anyhow!("--plugin-configmap must be NAMESPACE/NAME, got {spec:?}"))?;
        Ok(Self::ConfigMap {
            namespace: namespace.to_string(),
            name: name.to_string(),
            key: key.to_string(),
        })
    }

    fn label(&self) -> String {
        match self {
            PluginSource::File(path) => format!("file:{}", path.display()),
            PluginSource::ConfigMap {
                namespace,
                name,
                key,
            } => format!("configmap:{namespace}/{name}#{key}"),
            PluginSource::Oci(oci) => oci.reference.to_string(),
        }
    }
}

/// What the plugin side is configured with.
#[derive(Debug, Clone)]
pub struct PluginOptions {
    /// The active plugin's source.
    pub source: PluginSource,
    /// Only plugins with this sha256 may load.
    pub pinned_sha256: Option<String>,
    /// A shadow candidate.
    pub shadow: Option<PathBuf>,
    /// Only a shadow with this sha256 may run.
    pub shadow_pinned_sha256: Option<String>,
    /// Shadow calls that may wait in the shadow's queue (more are dropped).
    pub shadow_queue: usize,
    /// When to roll back after a swap.
    pub rollback: RollbackPolicy,
}

/// The running plugin side.
pub struct Plugins {
    /// The slot reconciles take their plugin from.
    pub active: Arc<ActivePlugin>,
    /// The last swap and refusal.
    pub history: Arc<Mutex<SwapHistory>>,
}

/// Loads and vets the first plugin and starts watching its source for
/// swaps. A refused plugin does not stop the start (see the module doc):
/// the slot starts empty and the first good plugin from the source serves.
pub async fn start(
    client: &Client,
    runtime: Arc<Runtime>,
    options: PluginOptions,
    metrics: Arc<Metrics>,
) -> Result<Plugins> {
    let mut label = options.source.label();
    let history = Arc::new(Mutex::new(SwapHistory::default()));
    let seen_at = Instant::now();
    // An OCI source: the object refusals are recorded on, the manifest
    // digest handled at start, and a refusal before there were bytes.
    let mut regarding = None;
    let mut oci_initial = String::new();
    let mut source_refusal: Option<(String, String)> = None;
    let configmap = match &options.source {
        PluginSource::File(_) | PluginSource::Oci(_) => None,
        PluginSource::ConfigMap {
            namespace, name, ..
        } => Some((namespace.clone(), name.clone())),
    };
    let first = match &options.source {
        PluginSource::File(path) => sources::FirstRead::Bytes(
            std::fs::read(path)
                .with_context(|| format!("reading the plugin {}", path.display()))?,
        ),
        PluginSource::ConfigMap {
            namespace,
            name,
            key,
        } => sources::read_configmap(client, namespace, name, key).await?,
        PluginSource::Oci(oci) => {
            regarding = oci.events_on.clone();
            match sources::read_oci(oci).await {
                sources::OciFirstRead::Pulled(pulled) => {
                    oci_initial = pulled.manifest_digest.clone();
                    label = pulled.reference;
                    sources::FirstRead::Bytes(pulled.bytes)
                }
                sources::OciFirstRead::Missing(why) => sources::FirstRead::Missing(why),
                sources::OciFirstRead::Refused { digest, error } => {
                    // A signature may still come (cosign signs after the
                    // push): the watcher looks at this digest again.
                    let rule = error.rule();
                    if rule != crate::sources::rules::UNSIGNED
                        && rule != crate::sources::rules::SIGNATURE
                    {
                        oci_initial = digest.clone();
                    }
                    let reason = error.to_string();
                    source_refusal = Some((digest, reason.clone()));
                    sources::FirstRead::Missing(reason)
                }
            }
        }
    };
    let (active, initial_digest) = match first {
        sources::FirstRead::Bytes(bytes) => {
            let digest = digest_of(&bytes);
            match vet(&runtime, &bytes, &label, options.pinned_sha256.as_deref()).await {
                Ok(plugin) => {
                    tracing::info!(
                        plugin = %plugin.describe(),
                        source = %label,
                        outcome = ?plugin.load_outcome(),
                        "plugin loaded"
                    );
                    let active =
                        ActivePlugin::new(plugin, options.rollback.clone(), metrics.clone());
                    (active, digest)
                }
                Err(refusal) => {
                    swapper::refused(
                        Refused {
                            source: &label,
                            configmap: configmap.as_ref(),
                            digest: &digest,
                            reason: &refusal.to_string(),
                            seen_at,
                            keeping: None,
                            regarding: regarding.as_ref(),
                        },
                        Some(client),
                        &metrics,
                        &history,
                    )
                    .await;
                    (
                        ActivePlugin::empty(options.rollback.clone(), metrics.clone()),
                        digest,
                    )
                }
            }
        }
        sources::FirstRead::Missing(_) if source_refusal.is_some() => {
            let (digest, reason) = source_refusal.take().unwrap_or_default();
            swapper::refused(
                Refused {
                    source: &label,
                    configmap: None,
                    digest: if digest.is_empty() { &label } else { &digest },
                    reason: &reason,
                    seen_at,
                    keeping: None,
                    regarding: regarding.as_ref(),
                },
                Some(client),
                &metrics,
                &history,
            )
            .await;
            (
                ActivePlugin::empty(options.rollback.clone(), metrics.clone()),
                String::new(),
            )
        }
        sources::FirstRead::Missing(why) => {
            tracing::error!(
                source = %label,
                reason = %why,
                "no plugin to serve yet; the host stays unready and watches the source"
            );
            swapper::lock(&history).not_serving =
                Some(format!("no plugin at {label} yet ({why}); waiting for one"));
            (
                ActivePlugin::empty(options.rollback.clone(), metrics.clone()),
                String::new(),
            )
        }
    };
    let active = Arc::new(active);

    if let Some(path) = &options.shadow {
        let shadow_label = format!("file:{}", path.display());
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the shadow plugin {}", path.display()))?;
        match vet(
            &runtime,
            &bytes,
            &shadow_label,
            options.shadow_pinned_sha256.as_deref(),
        )
        .await
        {
            Ok(shadow) => {
                tracing::info!(
                    shadow = %shadow.describe(),
                    queue = options.shadow_queue,
                    "shadow plugin runs in its own queue beside the active one; nothing of it is applied"
                );
                active.set_shadow(Some(shadow), options.shadow_queue);
            }
            Err(refusal) => {
                metrics.plugin_swaps_refused.inc();
                tracing::error!(
                    source = %shadow_label,
                    candidate = %digest_of(&bytes),
                    reason = %crate::plugin_text::shown(&refusal.to_string()),
                    "shadow plugin refused; running without a shadow"
                );
                swapper::lock(&history).shadow_refusal = Some(swapper::SwapRecord::now(
                    shadow_label,
                    digest_of(&bytes),
                    refusal.to_string(),
                    seen_at,
                ));
            }
        }
    }

    let (tx, rx) = mpsc::channel(4);
    match options.source {
        PluginSource::File(path) => sources::watch_file(path, initial_digest, tx)?,
        PluginSource::ConfigMap {
            namespace,
            name,
            key,
        } => sources::watch_configmap(client.clone(), namespace, name, key, initial_digest, tx),
        PluginSource::Oci(oci) => sources::watch_oci(*oci, oci_initial, tx),
    }
    tokio::spawn(swapper::run(
        rx,
        runtime,
        active.clone(),
        options.pinned_sha256,
        Some(client.clone()),
        metrics,
        history.clone(),
    ));
    Ok(Plugins { active, history })
}
