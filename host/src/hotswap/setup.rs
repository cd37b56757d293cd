//! Wiring the plugin side of a host: read and vet the first plugin, set up
//! the shadow, start the source watcher and the swapper. Used by
//! `wasm-operator run` and by the end-to-end tests alike.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow};
use kube::Client;
use tokio::sync::mpsc;

use super::candidate::vet;
use super::swapper::{self, SwapHistory};
use super::{ActivePlugin, RollbackPolicy, sources};
use crate::controller::metrics::Metrics;
use crate::runtime::Runtime;

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

/// Loads and vets the first plugin (refusing to start with a bad one), and
/// starts watching its source for swaps.
pub async fn start(
    client: &Client,
    runtime: Arc<Runtime>,
    options: PluginOptions,
    metrics: Arc<Metrics>,
) -> Result<Plugins> {
    let label = options.source.label();
    let bytes = match &options.source {
        PluginSource::File(path) => {
            std::fs::read(path).with_context(|| format!("reading the plugin {}", path.display()))?
        }
        PluginSource::ConfigMap {
            namespace,
            name,
            key,
        } => sources::read_configmap(client, namespace, name, key).await?,
    };
    let plugin = vet(&runtime, &bytes, &label, options.pinned_sha256.as_deref())
        .await
        .map_err(|refusal| anyhow!("the plugin from {label} cannot serve: {refusal}"))?;
    tracing::info!(
        plugin = %plugin.describe(),
        source = %label,
        outcome = ?plugin.load_outcome(),
        "plugin loaded"
    );
    let initial_digest = plugin.digest().to_string();
    let active = Arc::new(ActivePlugin::new(
        plugin,
        options.rollback.clone(),
        metrics.clone(),
    ));

    if let Some(path) = &options.shadow {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the shadow plugin {}", path.display()))?;
        let shadow = vet(&runtime, &bytes, &format!("file:{}", path.display()), None)
            .await
            .map_err(|refusal| anyhow!("the shadow plugin cannot run: {refusal}"))?;
        tracing::info!(shadow = %shadow.describe(), "shadow plugin runs beside the active one; nothing of it is applied");
        active.set_shadow(Some(shadow));
    }

    let (tx, rx) = mpsc::channel(4);
    match options.source {
        PluginSource::File(path) => sources::watch_file(path, initial_digest, tx)?,
        PluginSource::ConfigMap {
            namespace,
            name,
            key,
        } => sources::watch_configmap(client.clone(), namespace, name, key, initial_digest, tx),
    }
    let history = Arc::new(Mutex::new(SwapHistory::default()));
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
