//! Where plugin bytes come from, each watched for changes:
//!
//! - a file: watched through its directory (with `notify`), so an editor's
//!   write-then-rename and a ConfigMap volume's `..data` symlink swap are
//!   both seen; a slow poll backs the watch up. A change is the *content*
//!   changing (by digest), not an event firing. Opening or reading a file
//!   is not an event here: the watch's own read would otherwise wake it
//!   again (inotify reports opens), a loop that read and hashed the plugin
//!   about every 15 ms for as long as the host ran. The poll reads the file
//!   only when its size, modification time or inode changed.
//! - a ConfigMap in the cluster (`namespace/name`, a key of `binaryData`),
//!   watched through the API.
//!
//! - an OCI artifact (`oci://REGISTRY/REPO:TAG`), pulled and verified by
//!   [`crate::registry::OciPuller`]; a tag is polled and a new digest is a
//!   change. An artifact refused before it has bytes to vet (unsigned, too
//!   large, wrong digest, bad credentials) is sent as a [`Candidate`] with
//!   a [`SourceRefusal`], which the swapper reports like a vetting refusal.
//!   Every request is cut at its deadline, so a registry that hangs or
//!   drips delays only its own poll; the next poll asks again. The task
//!   can make the first read itself ([`OciStart::Read`]) so that whoever
//!   starts it never waits for a registry, and is aborted (an in-flight
//!   pull with it) through the handle it returns. A first read serves the
//!   verified local copy when the store keeps one (re-verified under the
//!   current policy) and looks at the registry right behind it: a start
//!   never waits on a registry it has a trusted copy for. While the task
//!   lives its reference is followed ([`crate::disk::pins::Following`]),
//!   so the store keeps that reference's last known good; a candidate
//!   pulled keeps its plugin pinned until it is vetted (`staged`).
//!
//! Files are read through [`crate::registry::bounded`]: a regular file
//! within the cap, opened without blocking, under the file root when
//! [`FileRules`] ask for one.
//!
//! Each source sends `(bytes, label)` to the swapper whenever the content
//! differs from what it sent last.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::disk::pins::{Following, PinHolder};
use crate::refusal::Refusal;
use crate::registry::bounded::{FileRefusal, FileRules};
use crate::registry::{OciError, OciPuller, OciRef, Pulled};
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
    /// Another object refusals are recorded on as `PluginRefused` Warning
    /// Events (e.g. the host's Pod for an OCI source), when not a ConfigMap.
    pub regarding: Option<ObjectReference>,
    /// Set when the source refused the artifact before there were bytes to
    /// vet (`bytes` is then empty): report it, vet nothing.
    pub refusal: Option<SourceRefusal>,
    /// The trusted keys whose signatures were verified (OCI sources).
    pub verified_by: Vec<String>,
    /// When the change was seen.
    pub seen_at: std::time::Instant,
    /// What the source held when it was opened (its first read, or the
    /// local copy it serves before it looks at the registry): not a move of
    /// the source, so never damped nor counted as one.
    pub initial: bool,
    /// Pins the candidate's plugin while it is vetted (staged), so the OCI
    /// store never evicts what is about to serve ([`crate::disk::pins`]);
    /// released when the candidate is dropped.
    pub staged: Option<PinHolder>,
}

/// An artifact a source refused itself (see [`Candidate::refusal`]).
#[derive(Debug, Clone)]
pub struct SourceRefusal {
    /// What names it: the manifest digest for an OCI artifact.
    pub digest: String,
    /// Why.
    pub refusal: Refusal,
}

/// Whether a file event in the watched directory may have changed what is
/// there: anything but an open, a read or a close after reading (which
/// every reader of the directory causes, this watch's own reads included).
fn may_change_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Watches `dir` (not recursively) and sends `()` on `tx` for each event
/// that [`may_change_content`].
fn watch_directory(
    dir: &Path,
    tx: mpsc::UnboundedSender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| may_change_content(&e.kind)) {
            let _ = tx.send(());
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// What the poll compares before reading a file: size, modification time
/// and inode (a symlink swap or a rename changes the inode).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: (u64, u64),
}

impl FileStamp {
    async fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = tokio::fs::metadata(path).await.ok()?;
        Some(Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode: (meta.dev(), meta.ino()),
        })
    }
}

/// Watches `path` and sends its content whenever it changes. `initial` is
/// the digest already loaded (so the first read is not a "change").
/// Each read goes through `rules` (a regular file within the cap, under
/// the root if they name one); a read refused for another reason than the
/// file missing is sent as a refusal, once per distinct reason.
pub fn watch_file(
    path: PathBuf,
    initial: String,
    rules: FileRules,
    tx: mpsc::Sender<Candidate>,
) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let (notify_tx, mut notify_rx) = mpsc::unbounded_channel();
    // The directory, not the file: renames and symlink swaps replace the file.
    let watcher = watch_directory(&dir, notify_tx)?;
    tokio::spawn(async move {
        let _watcher = watcher; // dropped (and stopped) with this task
        let mut last = initial;
        let mut last_refusal: Option<Refusal> = None;
        // Unknown at first: the first poll reads the file.
        let mut stamp: Option<FileStamp> = None;
        let mut poll = tokio::time::interval(Duration::from_secs(2));
        loop {
            let polled = tokio::select! {
                got = notify_rx.recv() => {
                    if got.is_none() { break; }
                    // Let a burst of events (write, chmod, rename) settle.
                    tokio::time::sleep(SETTLE).await;
                    while notify_rx.try_recv().is_ok() {}
                    false
                }
                _ = poll.tick() => true,
            };
            let now = FileStamp::of(&path).await;
            if polled && now.is_some() && now == stamp {
                continue; // the poll found nothing new: no read
            }
            stamp = now;
            let seen_at = std::time::Instant::now();
            let source = format!("file:{}", path.display());
            let bytes = match rules.read(&path).await {
                Ok(bytes) => bytes,
                // Mid-rename or deleted: wait for the next event.
                Err(FileRefusal::Missing(_)) => continue,
                Err(refused) => {
                    let refusal = Refusal::from(&refused);
                    if last_refusal.as_ref() == Some(&refusal) {
                        continue;
                    }
                    last_refusal = Some(refusal.clone());
                    let candidate = Candidate {
                        bytes: Vec::new(),
                        source: source.clone(),
                        configmap: None,
                        regarding: None,
                        refusal: Some(SourceRefusal {
                            digest: source,
                            refusal,
                        }),
                        verified_by: Vec::new(),
                        seen_at,
                        initial: false,
                        staged: None,
                    };
                    if tx.send(candidate).await.is_err() {
                        break;
                    }
                    continue;
                }
            };
            last_refusal = None;
            let candidate = Candidate {
                bytes,
                source,
                configmap: None,
                regarding: None,
                refusal: None,
                verified_by: Vec::new(),
                seen_at,
                initial: false,
                staged: None,
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
                verified_by: Vec::new(),
                seen_at,
                initial: false,
                staged: None,
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
    Missing(OciError),
    /// The artifact the reference names now was refused, and the local copy
    /// of the last artifact verified for it (re-verified with the current
    /// keys) serves instead: last known good. The refusal is reported too.
    LastKnownGood {
        /// The local copy.
        pulled: Pulled,
        /// The refused artifact's manifest digest, if the reference resolved.
        digest: String,
        /// Why it was refused.
        error: OciError,
    },
}

/// Whether a refusal by `error` is looked at again at the next poll: a
/// signature may come after the push, a misbehaving registry may recover.
pub fn look_again(error: &OciError) -> bool {
    error.rule == crate::registry::rules::UNSIGNED
        || error.rule == crate::registry::rules::SIGNATURE
        || error.is_misbehaving_registry()
}

/// The manifest digest handled after `digest` was refused by `error`: none
/// (looked at again at the next poll, see [`look_again`]) or `digest`.
pub fn handled_after(error: &OciError, digest: &str) -> String {
    if look_again(error) {
        String::new()
    } else {
        digest.to_string()
    }
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

/// Pulls the artifact `source` names; while the registry is unreachable or
/// does not answer in time (`oci/deadline`), the local copy kept from an
/// earlier pull (re-verified) serves instead; and when what it names is
/// refused (unsigned, a bad signature, gone, too large…), that local copy
/// serves as the last known good ([`OciFirstRead::LastKnownGood`]).
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
    // Unreachable or too slow: the local copy serves. Refused: the local
    // copy serves as the last known good (a refusal of the copy itself,
    // e.g. by a revoked key, leaves the source's refusal to report).
    let transient = error.is_transient();
    match (source.puller.local_copy(reference), transient) {
        (Ok(Some(pulled)), true) => {
            tracing::warn!(
                reference = %pulled.reference,
                plugin = %pulled.layer_digest,
                error = %error,
                "the OCI registry cannot be reached; serving the local copy kept from the last pull"
            );
            OciFirstRead::Pulled(pulled)
        }
        (Ok(Some(pulled)), false) => {
            tracing::warn!(
                reference = %pulled.reference,
                plugin = %pulled.layer_digest,
                error = %error,
                "what the OCI reference names now is refused; serving the last artifact verified for it (last known good)"
            );
            OciFirstRead::LastKnownGood {
                pulled,
                digest,
                error,
            }
        }
        (Ok(None), true) if error.is_unreachable() => OciFirstRead::Missing(OciError {
            rule: error.rule,
            message: format!("{}; no local copy is kept yet", error.message),
        }),
        (Ok(None), _) | (Err(_), false) => OciFirstRead::Refused { digest, error },
        (Err(refused), true) => OciFirstRead::Refused {
            digest: String::new(),
            error: refused,
        },
    }
}

/// What an OCI source held when it was opened, as candidates to send in
/// order, and where its polls start.
struct Opening {
    candidates: Vec<Candidate>,
    /// The manifest digest handled (empty: look again at the next poll).
    handled: String,
    /// Whether to look at the registry at once (a local copy serves).
    look_now: bool,
}

/// The first read of `source`: the verified local copy when the store
/// keeps one (re-verified under the current policy; the registry is looked
/// at right behind it), else a pull as [`read_oci`] makes it (bytes, a
/// refusal, or the last known good's bytes and then the refusal, which
/// stays reported).
async fn first_pull(source: &OciSource) -> Opening {
    let seen_at = std::time::Instant::now();
    if let Some(pulled) = trusted_local_copy(source) {
        let handled = pulled.manifest_digest.clone();
        return Opening {
            candidates: vec![pulled_candidate(source, pulled, seen_at, true)],
            handled,
            look_now: true,
        };
    }
    let (candidates, handled) = match read_oci(source).await {
        OciFirstRead::Pulled(pulled) => {
            let digest = pulled.manifest_digest.clone();
            (
                vec![pulled_candidate(source, pulled, seen_at, true)],
                digest,
            )
        }
        OciFirstRead::Refused { digest, error } => {
            let handled = handled_after(&error, &digest);
            let candidate = refusal_candidate(source, digest, error.into(), seen_at);
            (vec![candidate], handled)
        }
        OciFirstRead::LastKnownGood {
            pulled,
            digest,
            error,
        } => {
            let handled = handled_after(&error, &digest);
            let refusal = refusal_candidate(source, digest, error.into(), seen_at);
            (
                vec![pulled_candidate(source, pulled, seen_at, true), refusal],
                handled,
            )
        }
        OciFirstRead::Missing(why) => (
            vec![refusal_candidate(
                source,
                String::new(),
                why.into(),
                seen_at,
            )],
            String::new(),
        ),
    };
    Opening {
        candidates,
        handled,
        look_now: false,
    }
}

/// The local copy of what `source` names, if the store keeps one that
/// passes every check under the current signature policy (as
/// [`crate::registry::OciPuller::local_copy`] re-verifies it): served
/// before the registry is asked, so a start never waits for a registry. A
/// copy refused now (a revoked key) is logged and not served: the registry
/// is asked instead.
pub fn trusted_local_copy(source: &OciSource) -> Option<Pulled> {
    match source.puller.local_copy(&source.reference) {
        Ok(Some(pulled)) => {
            tracing::info!(
                reference = %pulled.reference,
                plugin = %pulled.layer_digest,
                verified_by = ?pulled.verified_by,
                "serving the verified local copy of the OCI artifact; the registry is looked at right behind it"
            );
            Some(pulled)
        }
        Ok(None) => None,
        Err(refused) => {
            tracing::warn!(reference = %source.reference, error = %refused, "the local copy of the OCI artifact is refused now; asking the registry");
            None
        }
    }
}

fn pulled_candidate(
    source: &OciSource,
    pulled: Pulled,
    seen_at: std::time::Instant,
    initial: bool,
) -> Candidate {
    let staged = PinHolder::of([pulled.layer_digest.clone()]);
    Candidate {
        bytes: pulled.bytes,
        source: pulled.reference,
        configmap: None,
        regarding: source.events_on.clone(),
        refusal: None,
        verified_by: pulled.verified_by,
        seen_at,
        initial,
        staged: Some(staged),
    }
}

/// Where a [`watch_oci`] task starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OciStart {
    /// Make the first read in the task and send it: the verified local
    /// copy if the store keeps one (then the registry is looked at at
    /// once), else a pull. Whoever starts the task never waits for a
    /// registry.
    Read,
    /// The manifest digest handled already (served, or its refusal
    /// reported); the first poll comes after the interval.
    Handled(String),
    /// The local copy with this manifest digest serves (whoever started
    /// the task served it): the registry is looked at at once, and what
    /// the reference names now is reported if refused (the local copy
    /// keeps serving as the last known good).
    LocalCopy(String),
}

/// Polls `source`'s tag every `poll_interval` and sends each new digest's
/// artifact (or its refusal) once, starting as `start` says. A digest
/// refused for its signatures, or because the registry misbehaved (too
/// slow, too big, a refused redirect), is looked at again each poll, its
/// refusal reported once. A digest reference is fixed: it is only retried
/// until the first pull succeeds. An unreachable registry is logged (once
/// per distinct error) and retried; bad credentials and a misbehaving
/// registry are refusals (once per distinct error). Every request is cut at
/// its deadline, so a hung one delays the next poll by that much at most.
/// The reference is followed ([`Following`]: the store keeps its last
/// known good) for as long as the task lives. Aborting the returned handle
/// stops the task, a pull in flight with it.
pub fn watch_oci(
    source: OciSource,
    start: OciStart,
    tx: mpsc::Sender<Candidate>,
) -> tokio::task::AbortHandle {
    let following = Following::new(source.reference.to_string());
    tokio::spawn(async move {
        let _following = following;
        let mut last_problem: Option<String> = None;
        let (mut last, mut look_now) = match start {
            OciStart::Handled(digest) => (digest, false),
            OciStart::LocalCopy(digest) => (digest, true),
            OciStart::Read => {
                let opening = first_pull(&source).await;
                for candidate in opening.candidates {
                    if let Some(refusal) = &candidate.refusal {
                        last_problem = Some(refusal.refusal.to_string());
                    }
                    if tx.send(candidate).await.is_err() {
                        return;
                    }
                }
                (opening.handled, opening.look_now)
            }
        };
        let mut poll = tokio::time::interval(source.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await; // the first tick is immediate: the start just read
        loop {
            if source.reference.tag.is_none() && !last.is_empty() {
                break; // a digest never moves
            }
            if !look_now {
                poll.tick().await;
            }
            if tx.is_closed() {
                break;
            }
            let first_look = std::mem::take(&mut look_now);
            let found = poll_once(&source, &mut last, &mut last_problem, first_look).await;
            let Some(candidate) = found else {
                continue;
            };
            if tx.send(candidate).await.is_err() {
                break;
            }
        }
    })
    .abort_handle()
}

/// One poll: what to send, if anything (see [`watch_oci`]). The first
/// look behind a local copy (`first_look`) reports what the reference
/// names now when that is refused for any reason but an unreachable or
/// slow registry (the tag gone, say), as a first pull would have.
async fn poll_once(
    source: &OciSource,
    last: &mut String,
    last_problem: &mut Option<String>,
    first_look: bool,
) -> Option<Candidate> {
    let seen_at = std::time::Instant::now();
    let report_once = |last_problem: &mut Option<String>, digest: String, error: &OciError| {
        let text = error.to_string();
        if last_problem.as_deref() == Some(&text) {
            return None;
        }
        *last_problem = Some(text.clone());
        Some(refusal_candidate(
            source,
            digest,
            error.clone().into(),
            seen_at,
        ))
    };
    let digest = match source.puller.resolve(&source.reference).await {
        Ok(digest) => digest,
        Err(error)
            if error.rule == crate::registry::rules::AUTH
                || error.is_misbehaving_registry()
                || (first_look && !error.is_transient()) =>
        {
            return report_once(last_problem, String::new(), &error);
        }
        Err(error) => {
            let text = error.to_string();
            if last_problem.as_deref() != Some(&text) {
                tracing::warn!(reference = %source.reference, error = %text, "cannot resolve the plugin's tag; the current plugin keeps serving, retrying every poll");
                *last_problem = Some(text);
            }
            return None;
        }
    };
    if digest == *last {
        *last_problem = None;
        return None;
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
            pulled_candidate(source, pulled, seen_at, false)
        }
        // A signature may be pushed after the artifact, a registry may
        // recover: look again at each poll, but report each reason once.
        Err(error) if look_again(&error) => {
            return report_once(last_problem, digest, &error);
        }
        Err(error) if error.is_unreachable() => {
            tracing::warn!(reference = %source.reference, digest = %digest, error = %error, "cannot pull the new artifact; retrying at the next poll");
            return None;
        }
        Err(error) => refusal_candidate(source, digest.clone(), error.into(), seen_at),
    };
    *last = digest;
    *last_problem = None;
    Some(candidate)
}

fn refusal_candidate(
    source: &OciSource,
    digest: String,
    refusal: Refusal,
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
            refusal,
        }),
        verified_by: Vec::new(),
        seen_at,
        initial: false,
        staged: None,
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, ModifyKind, RemoveKind};

    use super::*;

    #[test]
    fn opening_and_reading_are_not_changes_but_writes_are() {
        assert!(!may_change_content(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!may_change_content(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(may_change_content(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(may_change_content(&EventKind::Create(CreateKind::File)));
        assert!(may_change_content(&EventKind::Modify(ModifyKind::Any)));
        assert!(may_change_content(&EventKind::Remove(RemoveKind::File)));
    }

    /// Events that reach the watch within `wait`.
    async fn events_within(rx: &mut mpsc::UnboundedReceiver<()>, wait: Duration) -> usize {
        let mut seen = 0;
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(Some(())) = tokio::time::timeout_at(deadline, rx.recv()).await {
            seen += 1;
        }
        seen
    }

    /// With the real inotify: reading the plugin (as the watch itself and
    /// every other reader does) does not wake the watch; writing it does.
    #[tokio::test]
    async fn reads_of_the_directory_do_not_wake_the_watch_and_writes_do() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("plugin.wasm");
        std::fs::write(&file, b"v1").expect("write");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watcher = watch_directory(dir.path(), tx).expect("watch");
        for _ in 0..5 {
            std::fs::read(&file).expect("read");
        }
        assert_eq!(
            events_within(&mut rx, Duration::from_millis(300)).await,
            0,
            "reads woke the watch"
        );
        std::fs::write(&file, b"v2").expect("write");
        assert!(events_within(&mut rx, Duration::from_secs(2)).await > 0);
    }

    /// A file rewritten in place is sent once (by digest), and the reads
    /// that follow (the watch's own) send nothing more.
    #[tokio::test]
    async fn a_rewritten_file_is_sent_once() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("plugin.wasm");
        std::fs::write(&file, b"v1").expect("write");
        let (tx, mut rx) = mpsc::channel(4);
        let rules = FileRules {
            any_path: true,
            ..FileRules::default()
        };
        watch_file(file.clone(), digest_of(b"v1"), rules, tx).expect("watch");
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::write(&file, b"v2").expect("write");
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("the change within 5 s")
            .expect("a candidate");
        assert_eq!(got.bytes, b"v2");
        assert!(
            tokio::time::timeout(Duration::from_millis(500), rx.recv())
                .await
                .is_err(),
            "sent again without a change"
        );
    }
}
