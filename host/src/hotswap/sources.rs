//! Where plugin bytes come from, each watched for changes:
//!
//! - a file: watched through its directory (with `notify`), so an editor's
//!   write-then-rename and a ConfigMap volume's `..data` symlink swap are
//!   both seen; a slow poll backs the watch up. A change is the *content*
//!   changing (by digest), not an event firing.
//! - a ConfigMap in the cluster (`namespace/name`, a key of `binaryData`),
//!   watched through the API.
//!
//! - an OCI artifact (`oci://REGISTRY/REPO:TAG`), pulled and verified by
//!   [`crate::sources::OciPuller`]; a tag is polled and a new digest is a
//!   change. An artifact refused before it has bytes to vet (unsigned, too
//!   large, wrong digest, bad credentials) is sent as a [`Candidate`] with
//!   a [`SourceRefusal`], which the swapper reports like a vetting refusal.
//!
//! Each source sends `(bytes, label)` to the swapper whenever the content
//! differs from what it sent last.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::runtime::digest_of;
use crate::sources::{OciError, OciPuller, OciRef, Pulled};

/// How long a burst of file events (write, chmod, rename) may take to
/// settle before the file is read. An in-place write caught half-way is
/// refused by vetting and retried on its next event, so this only needs to
/// cover the common bursts.
const SETTLE: Duration = Duration::from_millis(15);

/// New plugin bytes from a source.
#[derive(Debug)]
pub struct Candidate {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Where they came from, for logs (`file:/path` or `configmap:ns/name#key`).
    pub source: String,
    /// Set when the source is a ConfigMap (refusals are recorded on it).
    pub configmap: Option<(String, String)>,
    /// Another object refusals are recorded on as `PluginRefused` Warning
    /// Events (e.g. the host's Pod for an OCI source), when not a ConfigMap.
    pub regarding: Option<ObjectReference>,
    /// Set when the source refused the artifact before there were bytes to
    /// vet (`bytes` is then empty): report it, vet nothing.
    pub refusal: Option<SourceRefusal>,
    /// When the change was seen.
    pub seen_at: std::time::Instant,
}

/// An artifact a source refused itself (see [`Candidate::refusal`]).
#[derive(Debug, Clone)]
pub struct SourceRefusal {
    /// What names it: the manifest digest for an OCI artifact.
    pub digest: String,
    /// Why, starting with the rule (`[oci/unsigned] …`).
    pub reason: String,
}

/// Watches `path` and sends its content whenever it changes. `initial` is
/// the digest already loaded (so the first read is not a "change").
pub fn watch_file(
    path: PathBuf,
    initial: String,
    tx: mpsc::Sender<Candidate>,
) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let (notify_tx, mut notify_rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = notify_tx.send(());
        }
    })?;
    // The directory, not the file: renames and symlink swaps replace the file.
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    tokio::spawn(async move {
        let _watcher = watcher; // dropped (and stopped) with this task
        let mut last = initial;
        let mut poll = tokio::time::interval(Duration::from_secs(2));
        loop {
            tokio::select! {
                got = notify_rx.recv() => {
                    if got.is_none() { break; }
                    // Let a burst of events (write, chmod, rename) settle.
                    tokio::time::sleep(SETTLE).await;
                    while notify_rx.try_recv().is_ok() {}
                }
                _ = poll.tick() => {}
            }
            let seen_at = std::time::Instant::now();
            let Ok(bytes) = tokio::fs::read(&path).await else {
                continue; // mid-rename or deleted: wait for the next event
            };
            let candidate = Candidate {
                bytes,
                source: format!("file:{}", path.display()),
                configmap: None,
                regarding: None,
                refusal: None,
                seen_at,
            };
            if !send_if_changed(&tx, &mut last, candidate).await {
                break;
            }
        }
    });
    Ok(())
}

/// What a source held when the host started.
#[derive(Debug)]
pub enum FirstRead {
    /// Plugin bytes (to be vetted).
    Bytes(Vec<u8>),
    /// Nothing yet (the ConfigMap or its key is not there): why.
    Missing(String),
}

/// Reads `key` of the ConfigMap `namespace/name` (binaryData, or data as a
/// fallback). A ConfigMap or key that is not there is [`FirstRead::Missing`]
/// (a push may bring it); an error reading it (RBAC, the API server) is an
/// error that says what to do.
pub async fn read_configmap(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> anyhow::Result<FirstRead> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = match api.get_opt(name).await {
        Ok(Some(cm)) => cm,
        Ok(None) => {
            return Ok(FirstRead::Missing(format!(
                "ConfigMap {namespace}/{name} does not exist; create it with \
                 `kubectl create configmap {name} --from-file={key}=plugin.wasm`"
            )));
        }
        Err(err) => {
            return Err(anyhow::anyhow!(
                "reading the plugin from ConfigMap {namespace}/{name}: {err}"
            ));
        }
    };
    Ok(match configmap_bytes(&cm, key) {
        Some(bytes) => FirstRead::Bytes(bytes),
        None => FirstRead::Missing(format!(
            "ConfigMap {namespace}/{name} has no key {key:?} in binaryData; create it with \
             `kubectl create configmap {name} --from-file={key}=plugin.wasm`"
        )),
    })
}

fn configmap_bytes(cm: &ConfigMap, key: &str) -> Option<Vec<u8>> {
    cm.binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            cm.data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.as_bytes().to_vec())
        })
}

/// Watches the ConfigMap `namespace/name` and sends `key`'s bytes whenever they change.
pub fn watch_configmap(
    client: Client,
    namespace: String,
    name: String,
    key: String,
    initial: String,
    tx: mpsc::Sender<Candidate>,
) {
    tokio::spawn(async move {
        let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        let mut last = initial;
        while let Some(item) = stream.next().await {
            let cm = match item {
                Ok(cm) => cm,
                Err(err) => {
                    tracing::warn!(configmap = %format!("{namespace}/{name}"), error = %err, "plugin ConfigMap watch error; retrying");
                    continue;
                }
            };
            let seen_at = std::time::Instant::now();
            let Some(bytes) = configmap_bytes(&cm, &key) else {
                tracing::warn!(configmap = %format!("{namespace}/{name}"), key = %key, "plugin ConfigMap has no such key; keeping the current plugin");
                continue;
            };
            let candidate = Candidate {
                bytes,
                source: format!("configmap:{namespace}/{name}#{key}"),
                configmap: Some((namespace.clone(), name.clone())),
                regarding: None,
                refusal: None,
                seen_at,
            };
            if !send_if_changed(&tx, &mut last, candidate).await {
                break;
            }
        }
    });
}

/// Sends `candidate` unless its digest is `last` (and remembers it).
/// Returns false once the swapper is gone.
async fn send_if_changed(
    tx: &mpsc::Sender<Candidate>,
    last: &mut String,
    candidate: Candidate,
) -> bool {
    let digest = digest_of(&candidate.bytes);
    if digest == *last {
        return true;
    }
    *last = digest;
    tx.send(candidate).await.is_ok()
}

/// A plugin in an OCI registry: the reference, the puller (registry access,
/// size cap, signature policy, local store) and how often a tag is polled.
#[derive(Debug, Clone)]
pub struct OciSource {
    /// `oci://REGISTRY/REPO:TAG` (polled) or `…@sha256:…` (fixed).
    pub reference: OciRef,
    /// Pulls and verifies.
    pub puller: OciPuller,
    /// How often the tag is resolved again.
    pub poll_interval: Duration,
    /// Where refusals are recorded as Warning Events (the host's Pod, a
    /// `JinghzhuPlugin`), if anywhere.
    pub events_on: Option<ObjectReference>,
}

/// What an OCI source held when the host started.
#[derive(Debug)]
pub enum OciFirstRead {
    /// Pulled and verified (or the local copy, while the registry is unreachable).
    Pulled(Pulled),
    /// The artifact the reference names was refused (signature, size,
    /// digest, layout, credentials): `digest` is its manifest digest when known.
    Refused {
        /// The manifest digest, if the reference resolved.
        digest: String,
        /// Why.
        error: OciError,
    },
    /// The registry cannot be reached and no local copy is kept: why.
    Missing(String),
}

/// The object an OCI source's refusals are recorded on when none is named:
/// the host's own Pod (`POD_NAME`, `POD_NAMESPACE`, as the Deployment sets them).
pub fn own_pod() -> Option<ObjectReference> {
    let name = std::env::var("POD_NAME").ok().filter(|v| !v.is_empty())?;
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|v| !v.is_empty())?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name),
        namespace: Some(namespace),
        ..ObjectReference::default()
    })
}

/// Pulls the artifact `source` names; while the registry is unreachable,
/// the local copy kept from an earlier pull (re-verified) serves instead.
pub async fn read_oci(source: &OciSource) -> OciFirstRead {
    let reference = &source.reference;
    let result = match source.puller.resolve(reference).await {
        Ok(digest) => source
            .puller
            .pull_digest(reference, &digest)
            .await
            .map_err(|error| (digest, error)),
        Err(error) => Err((String::new(), error)),
    };
    let (digest, error) = match result {
        Ok(pulled) => {
            tracing::info!(
                reference = %pulled.reference,
                plugin = %pulled.layer_digest,
                bytes = pulled.bytes.len(),
                verified_by = ?pulled.verified_by,
                "plugin pulled from the OCI registry"
            );
            return OciFirstRead::Pulled(pulled);
        }
        Err(failed) => failed,
    };
    if !error.is_unreachable() {
        return OciFirstRead::Refused { digest, error };
    }
    match source.puller.local_copy(reference) {
        Ok(Some(pulled)) => {
            tracing::warn!(
                reference = %pulled.reference,
                plugin = %pulled.layer_digest,
                error = %error,
                "the OCI registry cannot be reached; serving the local copy kept from the last pull"
            );
            OciFirstRead::Pulled(pulled)
        }
        Ok(None) => OciFirstRead::Missing(format!("{error}; no local copy is kept yet")),
        Err(refused) => OciFirstRead::Refused {
            digest: String::new(),
            error: refused,
        },
    }
}

/// Polls `source`'s tag every `poll_interval` and sends each new digest's
/// artifact (or its refusal) once; `initial` is the manifest digest already
/// handled. A digest refused for its signatures is looked at again each
/// poll (cosign signs after the push), its refusal reported once. A digest reference is fixed: it is only retried until the first
/// pull succeeds. An unreachable registry is logged (once per distinct
/// error) and retried; bad credentials are a refusal (once per distinct error).
pub fn watch_oci(source: OciSource, initial: String, tx: mpsc::Sender<Candidate>) {
    tokio::spawn(async move {
        let mut last = initial;
        let mut last_problem: Option<String> = None;
        let mut poll = tokio::time::interval(source.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await; // the first tick is immediate: the start just pulled
        loop {
            if source.reference.tag.is_none() && !last.is_empty() {
                break; // a digest never moves
            }
            poll.tick().await;
            if tx.is_closed() {
                break;
            }
            let seen_at = std::time::Instant::now();
            let digest = match source.puller.resolve(&source.reference).await {
                Ok(digest) => digest,
                Err(error) => {
                    let text = error.to_string();
                    if last_problem.as_deref() == Some(&text) {
                        continue;
                    }
                    last_problem = Some(text.clone());
                    if error.rule == crate::sources::rules::AUTH {
                        let refusal = refusal_candidate(&source, String::new(), text, seen_at);
                        if tx.send(refusal).await.is_err() {
                            break;
                        }
                    } else {
                        tracing::warn!(reference = %source.reference, error = %text, "cannot resolve the plugin's tag; the current plugin keeps serving, retrying every poll");
                    }
                    continue;
                }
            };
            if digest == last {
                last_problem = None;
                continue;
            }
            let candidate = match source.puller.pull_digest(&source.reference, &digest).await {
                Ok(pulled) => {
                    tracing::info!(
                        reference = %pulled.reference,
                        plugin = %pulled.layer_digest,
                        bytes = pulled.bytes.len(),
                        verified_by = ?pulled.verified_by,
                        "the plugin's tag moved; pulled the new artifact"
                    );
                    Candidate {
                        bytes: pulled.bytes,
                        source: pulled.reference,
                        configmap: None,
                        regarding: source.events_on.clone(),
                        refusal: None,
                        seen_at,
                    }
                }
                Err(error) if error.is_unreachable() => {
                    tracing::warn!(reference = %source.reference, digest = %digest, error = %error, "cannot pull the new artifact; retrying at the next poll");
                    continue;
                }
                Err(error) => {
                    let text = error.to_string();
                    // A signature may be pushed after the artifact: look
                    // again at each poll, but report each reason once.
                    let unsigned = error.rule == crate::sources::rules::UNSIGNED
                        || error.rule == crate::sources::rules::SIGNATURE;
                    if unsigned {
                        if last_problem.as_deref() == Some(&text) {
                            continue;
                        }
                        last_problem = Some(text.clone());
                        let refusal = refusal_candidate(&source, digest, text, seen_at);
                        if tx.send(refusal).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    refusal_candidate(&source, digest.clone(), text, seen_at)
                }
            };
            last = digest;
            last_problem = None;
            if tx.send(candidate).await.is_err() {
                break;
            }
        }
    });
}

fn refusal_candidate(
    source: &OciSource,
    digest: String,
    reason: String,
    seen_at: std::time::Instant,
) -> Candidate {
    let label = if digest.is_empty() {
        source.reference.to_string()
    } else {
        OciRef {
            digest: Some(digest.clone()),
            ..source.reference.clone()
        }
        .to_string()
    };
    Candidate {
        bytes: Vec::new(),
        source: label,
        configmap: None,
        regarding: source.events_on.clone(),
        refusal: Some(SourceRefusal {
            digest: if digest.is_empty() {
                source.reference.to_string()
            } else {
                digest
            },
            reason,
        }),
        seen_at,
    }
}
