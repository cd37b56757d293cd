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
//! - **Liveness never waits for delivery** (issue 40): `run` makes the
//!   empty slot ([`empty`]), checks the operator mistakes above without
//!   pulling or compiling ([`check`]), binds its probes, and only then
//!   reads, pulls and compiles ([`deliver`], in the background), with
//!   `/readyz` and `/status` saying what is pending.
//! - **Readiness never waits on a registry it has a trusted copy for**:
//!   an OCI source whose store keeps a verified local copy serves it at
//!   once (re-verified under the current keys) and the watcher looks at the
//!   registry right behind it; a newer artifact then swaps in, a refused
//!   one is reported with the copy serving as the last known good.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use kube::Client;
use tokio::sync::mpsc;

use crate::delivery::report::{Quietly, SourceEvents};
use crate::delivery::swapper::{self, SwapHistory};
use crate::delivery::vetting::{vet, vet_for_slot};
use crate::delivery::{damper, sources};
use crate::refusal::Refusal;
use crate::runtime::{Runtime, digest_of};
use crate::slot::{ActivePlugin, RollbackPolicy};
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
    /// Largest `--plugin` / `--shadow-plugin` file read (`--plugin-file-max-mib`).
    pub max_file_bytes: u64,
}

/// The running plugin side.
#[derive(Clone)]
pub struct Plugins {
    /// The slot reconciles take their plugin from.
    pub active: Arc<ActivePlugin>,
    /// The last swap and refusal.
    pub history: Arc<Mutex<SwapHistory>>,
}

/// What a source held at start, and what goes with it.
struct FirstSource {
    /// Where the bytes came from (an OCI pull names its digest).
    label: String,
    first: sources::FirstRead,
    /// The object an OCI source's refusals are recorded on.
    regarding: Option<k8s_openapi::api::core::v1::ObjectReference>,
    /// Where an OCI source's watcher starts (what it handled at start).
    oci_start: sources::OciStart,
    /// Follows an OCI source's reference while it is read (the watcher
    /// follows it from then on), so the store keeps its last known good.
    _following: Option<crate::disk::pins::Following>,
    /// A refusal of the source itself (its digest and why), before there were bytes.
    source_refusal: Option<(String, Refusal)>,
}

/// An empty slot for `options`' plugin: `/readyz` and `/status` say it is
/// being delivered until [`deliver`] serves it or says why not.
pub fn empty(options: &PluginOptions, metrics: &Arc<Metrics>) -> Plugins {
    let history = Arc::new(Mutex::new(SwapHistory::default()));
    swapper::lock(&history).not_serving = Some(format!(
        "delivering the plugin from {}: not yet read, pulled or compiled",
        options.source.label()
    ));
    let active = Arc::new(ActivePlugin::empty(
        options.rollback.clone(),
        metrics.clone(),
    ));
    Plugins { active, history }
}

/// Says on `/readyz` and `/status` why nothing serves.
pub fn not_serving(plugins: &Plugins, why: String) {
    swapper::lock(&plugins.history).not_serving = Some(why);
}

/// The operator mistakes that stop the start (see the module doc), checked
/// without pulling or compiling anything: a `--plugin` or `--shadow-plugin`
/// that is not a readable regular file within the cap, a ConfigMap the host
/// may not read.
pub async fn check(client: &Client, options: &PluginOptions) -> Result<()> {
    let read = |path: &PathBuf| {
        crate::registry::bounded::read_file_async(path.clone(), options.max_file_bytes)
    };
    match &options.source {
        PluginSource::File(path) => {
            read(path)
                .await
                .with_context(|| format!("reading the plugin {}", path.display()))?;
        }
        PluginSource::ConfigMap {
            namespace,
            name,
            key,
        } => {
            sources::read_configmap(client, namespace, name, key).await?;
        }
        PluginSource::Oci(_) => {}
    }
    if let Some(path) = &options.shadow {
        read(path)
            .await
            .with_context(|| format!("reading the shadow plugin {}", path.display()))?;
    }
    Ok(())
}

/// Loads and vets the first plugin and starts watching its source for
/// swaps, before it returns. A refused plugin does not stop the start (see
/// the module doc): the slot starts empty and the first good plugin from
/// the source serves. `run` uses [`empty`], [`check`] and [`deliver`]
/// instead, so that it serves its probes while the plugin is delivered.
pub async fn start(
    client: &Client,
    runtime: Arc<Runtime>,
    options: PluginOptions,
    metrics: Arc<Metrics>,
) -> Result<Plugins> {
    let plugins = empty(&options, &metrics);
    deliver(client, runtime, options, metrics, &plugins).await?;
    Ok(plugins)
}

/// Reads the source once: a file (bounded), a ConfigMap, or an OCI pull
/// (within its deadlines; the local copy when the registry is slow or down).
async fn first_read(client: &Client, options: &PluginOptions) -> Result<FirstSource> {
    let mut out = FirstSource {
        label: options.source.label(),
        first: sources::FirstRead::Missing(String::new()),
        regarding: None,
        oci_start: sources::OciStart::Handled(String::new()),
        _following: None,
        source_refusal: None,
    };
    out.first = match &options.source {
        PluginSource::File(path) => sources::FirstRead::Bytes(
            crate::registry::bounded::read_file_async(path.clone(), options.max_file_bytes)
                .await
                .with_context(|| format!("reading the plugin {}", path.display()))?,
        ),
        PluginSource::ConfigMap {
            namespace,
            name,
            key,
        } => sources::read_configmap(client, namespace, name, key).await?,
        PluginSource::Oci(oci) => {
            out.regarding = oci.events_on.clone();
            out._following = Some(crate::disk::pins::Following::new(oci.reference.to_string()));
            first_oci_read(oci, &mut out).await
        }
    };
    Ok(out)
}

/// The first read of an OCI source: its verified local copy, served at
/// once with the registry looked at right behind it (readiness never waits
/// for a registry when the store keeps a copy it trusts), else a pull
/// within its deadlines (the local copy when the registry is slow or down;
/// the last known good, with the refusal reported, when what the reference
/// names now is refused).
async fn first_oci_read(oci: &sources::OciSource, out: &mut FirstSource) -> sources::FirstRead {
    if let Some(pulled) = sources::trusted_local_copy(oci) {
        out.oci_start = sources::OciStart::LocalCopy(pulled.manifest_digest.clone());
        out.label = pulled.reference;
        return sources::FirstRead::Bytes(pulled.bytes);
    }
    match sources::read_oci(oci).await {
        sources::OciFirstRead::Pulled(pulled) => {
            out.oci_start = sources::OciStart::Handled(pulled.manifest_digest.clone());
            out.label = pulled.reference;
            sources::FirstRead::Bytes(pulled.bytes)
        }
        sources::OciFirstRead::Missing(why) => sources::FirstRead::Missing(why.to_string()),
        sources::OciFirstRead::Refused { digest, error } => {
            // A signature may still come (cosign signs after the push), a
            // misbehaving registry may recover: the watcher looks at this
            // digest again.
            out.oci_start = sources::OciStart::Handled(sources::handled_after(&error, &digest));
            let reason = error.to_string();
            out.source_refusal = Some((digest, error.into()));
            sources::FirstRead::Missing(reason)
        }
        sources::OciFirstRead::LastKnownGood {
            pulled,
            digest,
            error,
        } => {
            // The local copy serves; the refusal is reported (once here; a
            // digest looked at again is reported by the watcher's first poll).
            if !sources::look_again(&error) {
                out.oci_start = sources::OciStart::Handled(digest.clone());
                out.source_refusal = Some((digest, error.into()));
            }
            out.label = pulled.reference;
            sources::FirstRead::Bytes(pulled.bytes)
        }
    }
}

/// Serves what the source held at start, or reports why not; returns the
/// digest handled (the watcher's starting point).
async fn serve_first(
    client: &Client,
    runtime: &Arc<Runtime>,
    options: &PluginOptions,
    metrics: &Arc<Metrics>,
    plugins: &Plugins,
    source: FirstSource,
) -> String {
    let history = &plugins.history;
    let seen_at = Instant::now();
    let label = &source.label;
    let configmap = match &options.source {
        PluginSource::File(_) | PluginSource::Oci(_) => None,
        PluginSource::ConfigMap {
            namespace, name, ..
        } => Some((namespace.clone(), name.clone())),
    };
    let regarding = source.regarding.as_ref();
    match source.first {
        sources::FirstRead::Bytes(bytes) => {
            let digest = digest_of(&bytes);
            let pinned = options.pinned_sha256.as_deref();
            match vet_for_slot(runtime, &plugins.active, &bytes, label, pinned).await {
                Ok(plugin) => {
                    let keeping = plugin.describe();
                    let mut events = SourceEvents::new(client, None, regarding);
                    let how = (plugin, swapper::ServeAs::First);
                    swapper::serve(&plugins.active, how, (label, seen_at), history, &mut events)
                        .await;
                    // Served as the last known good: what the source offers
                    // now was refused, and that is reported.
                    if let Some((digest, refusal)) = &source.source_refusal {
                        let refused = first_refused(label, seen_at, digest, refusal, Some(keeping));
                        swapper::refuse(refused, metrics, history, &mut events).await;
                    }
                }
                Err(refusal) => {
                    let mut events = SourceEvents::new(client, configmap.as_ref(), regarding);
                    let refused = first_refused(label, seen_at, &digest, &refusal, None);
                    swapper::refuse(refused, metrics, history, &mut events).await;
                }
            }
            digest
        }
        sources::FirstRead::Missing(_) if source.source_refusal.is_some() => {
            if let Some((digest, refusal)) = &source.source_refusal {
                let mut events = SourceEvents::new(client, None, regarding);
                let refused = first_refused(label, seen_at, digest, refusal, None);
                swapper::refuse(refused, metrics, history, &mut events).await;
            }
            String::new()
        }
        sources::FirstRead::Missing(why) => {
            tracing::error!(
                source = %label,
                reason = %why,
                "no plugin to serve yet; the host stays unready and watches the source"
            );
            swapper::lock(history).not_serving =
                Some(format!("no plugin at {label} yet ({why}); waiting for one"));
            String::new()
        }
    }
}

/// A refusal of what the source held at start (named by the source's
/// label when its digest is unknown).
fn first_refused<'a>(
    label: &'a str,
    seen_at: Instant,
    digest: &'a str,
    refusal: &'a Refusal,
    keeping: Option<String>,
) -> swapper::Refused<'a> {
    swapper::Refused {
        source: label,
        digest: if digest.is_empty() { label } else { digest },
        refusal,
        seen_at,
        keeping,
        shadow: false,
    }
}

/// Vets the `--shadow-plugin` file and runs it as the shadow; a refused
/// shadow is logged, counted and shown, and the host runs without one.
async fn start_shadow(
    runtime: &Arc<Runtime>,
    options: &PluginOptions,
    metrics: &Arc<Metrics>,
    plugins: &Plugins,
) -> Result<()> {
    let Some(path) = &options.shadow else {
        return Ok(());
    };
    let seen_at = Instant::now();
    let shadow_label = format!("file:{}", path.display());
    let bytes = crate::registry::bounded::read_file_async(path.clone(), options.max_file_bytes)
        .await
        .with_context(|| format!("reading the shadow plugin {}", path.display()))?;
    let digest = digest_of(&bytes);
    let pinned = options.shadow_pinned_sha256.as_deref();
    match vet(runtime, &bytes, &shadow_label, pinned).await {
        Ok(shadow) => {
            let how = (
                shadow,
                swapper::ServeAs::Shadow {
                    queue: options.shadow_queue,
                },
            );
            let place = (shadow_label.as_str(), seen_at);
            swapper::serve(&plugins.active, how, place, &plugins.history, &mut Quietly).await;
        }
        Err(refusal) => {
            let refused = swapper::Refused {
                source: &shadow_label,
                digest: &digest,
                refusal: &refusal,
                seen_at,
                keeping: None,
                shadow: true,
            };
            swapper::refuse(refused, metrics, &plugins.history, &mut Quietly).await;
        }
    }
    Ok(())
}

/// Reads, vets and serves the first plugin into `plugins`' slot, runs the
/// shadow, and starts the source's watcher and the swapper.
pub async fn deliver(
    client: &Client,
    runtime: Arc<Runtime>,
    options: PluginOptions,
    metrics: Arc<Metrics>,
    plugins: &Plugins,
) -> Result<()> {
    let mut first = first_read(client, &options).await?;
    let oci_start = first.oci_start.clone();
    // Followed until the watcher follows it.
    let _following = first._following.take();
    let initial_digest = serve_first(client, &runtime, &options, &metrics, plugins, first).await;
    start_shadow(&runtime, &options, &metrics, plugins).await?;
    let (tx, rx) = mpsc::channel(4);
    // A flapping source is damped between the source and the swapper
    // (see `damper`); its Warning goes where its refusals go.
    let last = (!initial_digest.is_empty()).then(|| initial_digest.clone());
    let rx = damper::damped(
        rx,
        damper::Damping {
            active: plugins.active.clone(),
            history: plugins.history.clone(),
            metrics: metrics.clone(),
            client: Some(client.clone()),
            events_on: None,
        },
        last,
    );
    match options.source {
        PluginSource::File(path) => {
            let rules = crate::registry::bounded::FileRules {
                root: None,
                // The operator named this path (`--plugin`).
                any_path: true,
                max_bytes: options.max_file_bytes,
            };
            sources::watch_file(path, initial_digest, rules, tx)?;
        }
        PluginSource::ConfigMap {
            namespace,
            name,
            key,
        } => sources::watch_configmap(client.clone(), namespace, name, key, initial_digest, tx),
        PluginSource::Oci(oci) => {
            sources::watch_oci(*oci, oci_start, tx);
        }
    }
    tokio::spawn(swapper::run(
        rx,
        runtime,
        plugins.active.clone(),
        options.pinned_sha256,
        Some(client.clone()),
        metrics,
        plugins.history.clone(),
    ));
    Ok(())
}
