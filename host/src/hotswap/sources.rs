//! Where plugin bytes come from, each watched for changes:
//!
//! - a file: watched through its directory (with `notify`), so an editor's
//!   write-then-rename and a ConfigMap volume's `..data` symlink swap are
//!   both seen; a slow poll backs the watch up. A change is the *content*
//!   changing (by digest), not an event firing.
//! - a ConfigMap in the cluster (`namespace/name`, a key of `binaryData`),
//!   watched through the API.
//!
//! Each source sends `(bytes, label)` to the swapper whenever the content
//! differs from what it sent last.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::runtime::digest_of;

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
    /// When the change was seen.
    pub seen_at: std::time::Instant,
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
