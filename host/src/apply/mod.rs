//! Applying a plugin's proposal: first [`validate`](mod@validate) the whole
//! of it (all or nothing), then create pods with the host's labels and a
//! controller ownerReference, delete owned pods with a UID precondition,
//! patch `/status` when it changed (and the same status is not already on
//! its way, see [`own_writes`]), and queue Events (recorded in the
//! background by [`crate::telemetry::events`], never waited for) — raising
//! [`expectations`] before every create is sent and recording every delete,
//! so a lagging cache (or a create whose answer was lost) cannot double them.
//!
//! What it may import: `telemetry/` (Events, counters), `runtime/` (the WIT
//! types a proposal is checked in) and the shared types (`actions`, `crd`,
//! `cached_pod`, `ownership`, `observed`, `plugin_text`, `event_reasons`).
//! Never `controller/`, `slot/`, `delivery/` or anything above them: they call it.
//!
//! Events are aggregated per reconcile: one `SuccessfulCreate` naming the
//! pods created, one `SuccessfulDelete`, and one Event per reason the plugin
//! asked for (messages of the same reason joined), so many pods changing at
//! once cost a few Event writes, not one each.
//!
//! - [`policy`]: which pod specs, labels and annotations a plugin may propose.
//! - [`validate`](mod@validate): the bounds and rules a proposal must pass.
//! - [`status_rules`]: a proposed status's observable fields against what
//!   the host observed.
//! - [`names`]: Kubernetes' syntax rules for names and labels.
//! - [`expectations`]: creates and deletes sent and not yet seen in the cache.
//! - [`own_writes`]: our status writes, whose watch echo queues nothing.
//! - [`fence`]: the check, right before each write, that the leadership or
//!   shard the write is for is still held on this host's monotonic clock.
//!
//! Creates go out in slow-start batches (1, 2, 4, …) like the ReplicaSet
//! controller's: if the API server rejects pods (quota, admission), one
//! failure stops the rest instead of hundreds of doomed calls. A batch is
//! at most [`MAX_CREATE_BATCH`] pods and [`MAX_CREATE_BATCH_BYTES`] of
//! their specs and metadata (as JSON, at least one pod); each pod is built
//! only when its batch is sent and written to JSON at once (the typed pod is
//! several times larger), and the API server's answer is read as a
//! [`CachedPod`] (no spec): a 500-create proposal with a 64 KiB spec holds
//! ~1 MiB of request bodies at a time, not 245 typed pods and their answers. What was
//! created before a failure stays created and is recorded in expectations;
//! the next reconcile sees it and proposes only the remainder.
//!
//! A failed write is classified ([`WriteOutcome`]): *not sent* (the
//! connection could not be opened, so no byte of the request left),
//! *answered* (the API server replied with a 4xx) or *maybe sent* (a
//! timeout or a reset after the request went out, or any 5xx: the server's
//! own "may still be processing" timeout, or a 500/502/503/504 that a proxy
//! or load balancer also answers when its upstream went away mid-request).
//! A 429 is *answered*: kube-apiserver's rate limits (max-in-flight,
//! priority and fairness) refuse before the handler runs. The client sends no write
//! twice ([`crate::kube_api::client`]), so these answers reach this layer as they
//! came. A create that was not sent or was
//! answered releases its expectation at once, so the object's next
//! reconcile (after its backoff) creates again; only a maybe-sent create
//! keeps it, until the watch shows the pod or a read of the API server
//! settles it ([`expectations::Expectations::settle_by_read`]).
//! Each failure is counted in `wasm_operator_api_write_failures_total{verb,outcome}`
//! and named in the `FailedCreate`/`FailedDelete` Event.
//!
//! Every create batch, delete and status patch first passes the
//! [`Target::fence`] ([`fence::WriteFence::check`]): when the hold the
//! reconcile acts for has lapsed, the write is not sent, applying stops
//! ([`ApplyError::Fenced`]) and `wasm_operator_fenced_writes_total{verb,hold}`
//! counts it. Events are not fenced: they are records for people, queued
//! and written in the background, and a late one changes no pod or status.

pub mod expectations;
pub mod fence;
pub mod names;
pub mod own_writes;
pub mod policy;
pub mod status_rules;
pub mod validate;

use std::collections::BTreeMap;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};

pub use validate::{Limits, Rejection, Validated, check_bounds, validate};

/// What became of a write that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The request certainly never reached the API server: the connection
    /// could not be opened (refused, unreachable, TLS handshake failed,
    /// connect timeout), or it could not even be built.
    NotSent,
    /// The API server answered with a 4xx (a 429 included): it did not do it.
    Answered,
    /// The request may have been carried out: it went out and the answer
    /// was lost (a read timeout, a reset connection, an answer we could not
    /// read), or the answer was a 5xx (the server timed out and may still be
    /// processing, or something between us answered after forwarding it).
    MaybeSent,
}

impl WriteOutcome {
    /// The `outcome` label value.
    pub fn label(self) -> &'static str {
        match self {
            WriteOutcome::NotSent => "not_sent",
            WriteOutcome::Answered => "answered",
            WriteOutcome::MaybeSent => "maybe_sent",
        }
    }

    /// Whether the write certainly did not happen.
    pub fn certainly_failed(self) -> bool {
        !matches!(self, WriteOutcome::MaybeSent)
    }

    /// What it means, for Events and logs.
    pub fn describe(self) -> &'static str {
        match self {
            WriteOutcome::NotSent => "not sent: the API server could not be reached",
            WriteOutcome::Answered => "refused by the API server",
            WriteOutcome::MaybeSent => "outcome unknown: the request was sent and its answer lost",
        }
    }
}

/// Classifies a failed request's error (see [`WriteOutcome`]).
pub fn classify(err: &kube::Error) -> WriteOutcome {
    match err {
        kube::Error::Api(status) => {
            // Any 5xx (and a 408) may come after the write was made: 504
            // and a 500 with reason ServerTimeout are the API server
            // saying it gave up waiting, not that it did nothing; a 502,
            // 503 or 500 may come from a proxy or load balancer whose
            // upstream took the request. The read that settles a
            // maybe-sent create costs one list; a create repeated blindly
            // costs a pod. A 429 (and any 4xx) is a refusal before any
            // handling (kube-apiserver's max-in-flight, priority and
            // fairness, admission).
            let maybe = status.code >= 500
                || status.code == 408
                || matches!(status.reason.as_str(), "Timeout" | "ServerTimeout");
            if maybe {
                WriteOutcome::MaybeSent
            } else {
                WriteOutcome::Answered
            }
        }
        // Failed before anything was sent.
        kube::Error::BuildRequest(_)
        | kube::Error::HttpError(_)
        | kube::Error::Auth(_)
        | kube::Error::TlsRequired
        | kube::Error::ProxyProtocolUnsupported { .. }
        | kube::Error::ProxyProtocolDisabled { .. } => WriteOutcome::NotSent,
        kube::Error::Service(source) if never_sent(source.as_ref()) => WriteOutcome::NotSent,
        kube::Error::HyperError(source) if never_sent(source) => WriteOutcome::NotSent,
        // A reset, a read timeout, an answer we could not read (the pod may
        // exist): the request may have been carried out.
        _ => WriteOutcome::MaybeSent,
    }
}

/// True when `err` (or an error it wraps) says the request never left: the
/// HTTP client could not open a connection (hyper's `is_connect`; a TLS
/// handshake or a connect timeout fail there too), a connection was refused,
/// or the client gave the unsent request back (`Canceled`: the pooled
/// connection closed before it was written).
fn never_sent(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(client) = err.downcast_ref::<hyper_util::client::legacy::Error>()
            && (client.is_connect() || client.to_string() == "client error (Canceled)")
        {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        next = err.source();
    }
    false
}

use crate::actions::{self, PodToCreate, ProposedActions};
use crate::cached_pod::CachedPod;
use crate::crd::{Jinghzhu, JinghzhuStatus};
use crate::ownership::{controller_reference, operator_labels};
use crate::telemetry::events::EventSink;
use crate::telemetry::metrics::Metrics;
use expectations::Expectations;
use own_writes::OwnWrites;

/// Where and as whom a proposal is applied.
pub struct Target<'a> {
    /// API client.
    pub client: &'a Client,
    /// Where Events are queued (recorded in the background).
    pub events: &'a EventSink,
    /// Expectations to record creates and deletes in.
    pub expectations: &'a Expectations,
    /// Status writes on their way (their echo queues nothing; none is sent twice).
    pub own_writes: &'a OwnWrites,
    /// Counters.
    pub metrics: &'a Metrics,
    /// UID of the Jinghzhu (the key of its expectations).
    pub owner_uid: &'a str,
    /// `namespace/name` of the Jinghzhu.
    pub key: &'a str,
    /// The plugin that proposed it (its description), named in its Events.
    pub plugin: &'a str,
    /// Checked right before each write: the leadership or shard the
    /// reconcile acts for is still held ([`fence::WriteFence::open`]
    /// without election or shards).
    pub fence: &'a fence::WriteFence,
}

/// What was applied.
#[derive(Debug, Default)]
pub struct Applied {
    /// Names of the pods created.
    pub created: Vec<String>,
    /// Names of the pods deleted.
    pub deleted: Vec<String>,
    /// Whether `/status` was patched.
    pub status_written: bool,
    /// The status was not written because the object changed since it was
    /// read (the cache is behind): reconcile again shortly.
    pub stale: bool,
    /// Events queued for recording.
    pub events: usize,
}

/// Why applying stopped part-way.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The Jinghzhu has no namespace or UID (it is not from the API server).
    #[error("the Jinghzhu has no namespace or uid")]
    NotStored,
    /// The leadership or shard this reconcile acted for lapsed before a
    /// write: it was not sent (nor anything after it).
    #[error("{verb} not sent: {lapsed}")]
    Fenced {
        /// The write refused (`create`, `delete`, `patch_status`).
        verb: &'static str,
        /// Which hold lapsed, and when.
        #[source]
        lapsed: fence::Lapsed,
    },
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// The call.
        what: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

impl ApplyError {
    /// Whether the API server could not be reached: no HTTP answer came
    /// (the connection was refused, reset or timed out). Such a failure
    /// says nothing about the object, so it is retried as soon as the API
    /// server answers again (see [`crate::controller::recovery`]). An
    /// answer (429, 5xx, 4xx) is not: the server is up, and the object's
    /// backoff spaces its retries as the server asked.
    pub fn is_unreachable(&self) -> bool {
        match self {
            // Every error but an answer is a failure to reach the server
            // (`classify` calls none of them answered).
            ApplyError::Api { source, .. } => !matches!(source, kube::Error::Api(_)),
            ApplyError::NotStored | ApplyError::Fenced { .. } => false,
        }
    }
}

/// How many writes applying `proposal` with the status change `status`
/// (from [`status_change`]) may take: each pod create and delete, the
/// status patch when there is one, and one Event per aggregated reason (the
/// host's create and delete Events included).
pub fn write_cost(proposal: &ProposedActions, status: Option<&JinghzhuStatus>) -> u32 {
    let status = status.is_some();
    let reasons: std::collections::HashSet<(&str, bool)> = proposal
        .events
        .iter()
        .map(|e| (e.reason.as_str(), e.type_ == actions::EventType::Warning))
        .collect();
    let total = proposal.create_pods.len()
        + proposal.delete_pods.len()
        + usize::from(status)
        + reasons.len()
        + usize::from(!proposal.create_pods.is_empty())
        + usize::from(!proposal.delete_pods.is_empty());
    u32::try_from(total).unwrap_or(u32::MAX)
}

/// Most creates sent at once (the slow start doubles up to this).
pub const MAX_CREATE_BATCH: usize = 64;

/// Most bytes of pod specs and metadata (as JSON) in one batch of creates:
/// what the request bodies of one batch hold (and, briefly, the typed pod
/// each is written from, one at a time).
pub const MAX_CREATE_BATCH_BYTES: usize = 1024 * 1024;

/// How many of the creates whose sizes are `sizes` go in the next batch,
/// when the slow start allows `slow_start`: at most that many, at most
/// [`MAX_CREATE_BATCH`], at most [`MAX_CREATE_BATCH_BYTES`] together, and
/// at least one (when there is one).
pub fn next_batch(sizes: &[usize], slow_start: usize) -> usize {
    let most = slow_start.clamp(1, MAX_CREATE_BATCH).min(sizes.len());
    let mut bytes = 0usize;
    let fits = sizes[..most]
        .iter()
        .take_while(|size| {
            bytes = bytes.saturating_add(**size);
            bytes <= MAX_CREATE_BATCH_BYTES
        })
        .count();
    fits.max(most.min(1))
}

/// Counts the bytes written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of each create's pod: its spec as JSON (measured once per
/// distinct spec) and its names, labels and annotations.
fn create_sizes(creates: &[(&PodToCreate, &PodSpec)]) -> Vec<usize> {
    let mut spec_sizes: std::collections::HashMap<*const PodSpec, usize> = Default::default();
    creates
        .iter()
        .map(|(create, spec)| {
            let spec_bytes = *spec_sizes
                .entry(std::ptr::from_ref(*spec))
                .or_insert_with(|| {
                    let mut count = ByteCount(0);
                    // Writing to a counter cannot fail; a spec that could not be
                    // written would not be sent either.
                    let _ = serde_json::to_writer(&mut count, spec);
                    count.0
                });
            let metadata = create
                .labels
                .iter()
                .chain(&create.annotations)
                .map(|(k, v)| k.len() + v.len())
                .chain(create.name.iter().map(String::len))
                .chain(create.generate_name.iter().map(String::len))
                .fold(0, usize::saturating_add);
            spec_bytes.saturating_add(metadata)
        })
        .collect()
}

/// Most pod names listed in one aggregated Event.
const NAMES_PER_EVENT: usize = 10;

/// `a, b, c` for at most `NAMES_PER_EVENT` (10) names, then `and N more`.
pub fn name_list(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(NAMES_PER_EVENT)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMES_PER_EVENT {
        text.push_str(&format!(" and {} more", names.len() - NAMES_PER_EVENT));
    }
    text
}

/// Checks the fence right before a `verb` write; a lapsed hold is counted
/// in `wasm_operator_fenced_writes_total`, logged and returned as
/// [`ApplyError::Fenced`] (the write must not be sent).
fn fenced(target: &Target<'_>, verb: &'static str) -> Result<(), ApplyError> {
    let Err(lapsed) = target.fence.check() else {
        return Ok(());
    };
    target.metrics.write_fenced(verb, lapsed.kind);
    tracing::info!(
        object = %target.key,
        verb,
        hold = lapsed.kind,
        late_ms = lapsed.late_by.map(|d| d.as_millis() as u64),
        "write fenced: the hold it was for lapsed on this host's clock; not sent, reconcile ended"
    );
    Err(ApplyError::Fenced { verb, lapsed })
}

/// Applies a validated proposal, whose status change (from
/// [`status_change`]) is `status`: creates, then deletes, then the status,
/// then the plugin's own Events. A failure stops the rest (what was done
/// stays done and is in the expectations; the next reconcile does the rest).
pub async fn apply(
    target: &Target<'_>,
    jz: &Jinghzhu,
    owned: &[Pod],
    proposal: &ProposedActions,
    validated: &Validated,
    status: Option<&JinghzhuStatus>,
) -> Result<Applied, ApplyError> {
    let owner = Owner::of(target.client, jz)?;
    let mut applied = Applied::default();
    create_pods(target, &owner, proposal, validated, &mut applied).await?;
    delete_owned_pods(target, &owner, owned, proposal, &mut applied).await?;
    if let Some(status) = status {
        write_status(target, &owner, status, &mut applied).await?;
    }
    publish_plugin_events(target, jz, proposal, &mut applied);
    Ok(applied)
}

/// The Jinghzhu a proposal is applied for, with what its pods need: its
/// namespace, the controller ownerReference to it and its namespace's pods.
struct Owner<'a> {
    jz: &'a Jinghzhu,
    namespace: String,
    reference: OwnerReference,
    pods: Api<Pod>,
}

impl<'a> Owner<'a> {
    fn of(client: &Client, jz: &'a Jinghzhu) -> Result<Self, ApplyError> {
        let namespace = jz.namespace().ok_or(ApplyError::NotStored)?;
        let reference = controller_reference(jz).ok_or(ApplyError::NotStored)?;
        let pods = Api::namespaced(client.clone(), &namespace);
        Ok(Self {
            jz,
            namespace,
            reference,
            pods,
        })
    }
}

/// Creates the proposal's pods and queues one `SuccessfulCreate` naming
/// them (and a `FailedCreate` when one failed, which stops the rest).
async fn create_pods(
    target: &Target<'_>,
    owner: &Owner<'_>,
    proposal: &ProposedActions,
    validated: &Validated,
    applied: &mut Applied,
) -> Result<(), ApplyError> {
    let failure = send_creates(target, owner, proposal, validated, applied).await;
    if !applied.created.is_empty() {
        target.events.publish(
            owner.jz,
            EventType::Normal,
            "SuccessfulCreate",
            &format!(
                "Created {} pod(s): {}",
                applied.created.len(),
                name_list(&applied.created)
            ),
        );
        applied.events += 1;
    }
    let Some((outcome, source)) = failure? else {
        return Ok(());
    };
    target.metrics.write_failed("create", outcome.label());
    target.events.publish(
        owner.jz,
        EventType::Warning,
        "FailedCreate",
        &format!(
            "Error creating pod ({}; retrying with backoff): {source}",
            outcome.describe()
        ),
    );
    Err(ApplyError::Api {
        what: format!("creating pods in {}", owner.namespace),
        source,
    })
}

/// Sends the creates in bounded slow-start batches; each batch is expected
/// before it is sent, and its pods are built only then; the fence is
/// checked before each batch. Returns the first failure, classified (no
/// batch is sent after it), or the fence's refusal.
async fn send_creates(
    target: &Target<'_>,
    owner: &Owner<'_>,
    proposal: &ProposedActions,
    validated: &Validated,
    applied: &mut Applied,
) -> Result<Option<(WriteOutcome, kube::Error)>, ApplyError> {
    let creates: Vec<(&PodToCreate, &PodSpec)> = proposal
        .create_pods
        .iter()
        .zip(validated.specs.iter().map(AsRef::as_ref))
        .collect();
    let sizes = create_sizes(&creates);
    let mut remaining: &[(&PodToCreate, &PodSpec)] = &creates;
    let mut sent = 0;
    let mut batch = 1;
    let mut failure = None;
    while !remaining.is_empty() && failure.is_none() {
        let count = next_batch(&sizes[sent..], batch);
        let (now, later) = remaining.split_at(count);
        remaining = later;
        sent += count;
        batch = batch.saturating_mul(2);
        fenced(target, "create")?;
        let mut in_flight = target
            .expectations
            .send_creations(target.owner_uid, now.len());
        let results = join_all(now.iter().map(|(create, spec)| {
            let body = serde_json::to_vec(&pod_to_create(
                create,
                spec,
                owner.jz,
                &owner.namespace,
                &owner.reference,
            ));
            send_create(target.client, owner.pods.resource_url(), body)
        }))
        .await;
        for result in results {
            in_flight.answered();
            match result {
                Ok(pod) => {
                    match pod.uid() {
                        Some(uid) => target.expectations.created(target.owner_uid, &uid),
                        None => target.expectations.creation_failed(target.owner_uid),
                    }
                    target.metrics.pods_created.inc();
                    applied.created.push(pod.name_any());
                }
                Err((outcome, err)) => {
                    // An answered or unsent create releases its expectation
                    // at once; one that may have been made (a timeout, a
                    // lost connection after sending) keeps it until the
                    // watch shows the pod or a read settles it.
                    if outcome.certainly_failed() {
                        target.expectations.creation_failed(target.owner_uid);
                    } else {
                        target.expectations.maybe_sent(target.owner_uid);
                    }
                    tracing::debug!(
                        object = %target.key,
                        outcome = outcome.label(),
                        error = %err,
                        "pod create failed"
                    );
                    // The first failure is reported; an unknown outcome
                    // among them is worth naming (the object waits for it).
                    let replace = failure.as_ref().is_none_or(|(first, _)| {
                        *first != WriteOutcome::MaybeSent && outcome == WriteOutcome::MaybeSent
                    });
                    if replace {
                        failure = Some((outcome, err));
                    }
                }
            }
        }
    }
    Ok(failure)
}

/// Deletes the proposal's pods, each guarded by the UID we saw (never a
/// same-named newcomer), and queues one `SuccessfulDelete` naming them (and
/// a `FailedDelete` when one failed, which stops the rest).
async fn delete_owned_pods(
    target: &Target<'_>,
    owner: &Owner<'_>,
    owned: &[Pod],
    proposal: &ProposedActions,
    applied: &mut Applied,
) -> Result<(), ApplyError> {
    let result = delete_pods(target, &owner.pods, owned, proposal, applied).await;
    if !applied.deleted.is_empty() {
        target.events.publish(
            owner.jz,
            EventType::Normal,
            "SuccessfulDelete",
            &format!(
                "Deleted {} pod(s): {}",
                applied.deleted.len(),
                name_list(&applied.deleted)
            ),
        );
        applied.events += 1;
    }
    let (name, source) = match result {
        Ok(()) => return Ok(()),
        Err(DeleteStop::Fenced(err)) => return Err(err),
        Err(DeleteStop::Failed(name, source)) => (name, source),
    };
    let outcome = classify(&source);
    target.metrics.write_failed("delete", outcome.label());
    target.events.publish(
        owner.jz,
        EventType::Warning,
        "FailedDelete",
        &format!(
            "Error deleting pod {name} ({}; retrying with backoff): {source}",
            outcome.describe()
        ),
    );
    Err(ApplyError::Api {
        what: format!("deleting pod {}/{name}", owner.namespace),
        source,
    })
}

/// Patches `/status` with `status` (the plugin's, with the host's
/// readyReplicas and the plugin's identity) unless the same status is
/// already on its way. It is sent with the resourceVersion this reconcile
/// read as a precondition: a cache that has fallen behind gets a conflict
/// (`applied.stale`) instead of overwriting what it has not seen, and the
/// reconcile runs again.
async fn write_status(
    target: &Target<'_>,
    owner: &Owner<'_>,
    status: &JinghzhuStatus,
    applied: &mut Applied,
) -> Result<(), ApplyError> {
    if target.own_writes.in_flight(target.owner_uid, status) {
        return Ok(());
    }
    let jz = owner.jz;
    let jinghzhus: Api<Jinghzhu> = Api::namespaced(target.client.clone(), &owner.namespace);
    let mut read = jz.resource_version();
    let mut answer = patch_status_at(target, &jinghzhus, jz, read.as_deref(), status).await?;
    if matches!(&answer, Err(kube::Error::Api(err)) if err.code == 409)
        && let Some(fresh) = same_spec_at(&jinghzhus, jz).await
    {
        // Only the status or metadata moved on since the cached copy (our
        // own earlier write whose echo the cache has not shown, as after
        // an API server restart until the watch relists): the status
        // computed from this spec is still right, written at the version
        // the server has.
        answer = patch_status_at(target, &jinghzhus, jz, Some(&fresh), status).await?;
        read = Some(fresh);
    }
    match answer {
        Ok(written) => {
            let version = written.resource_version();
            // A patch that changed nothing keeps the version and makes no
            // watch event: nothing to wait for.
            if let Some(version) = version.filter(|v| Some(v) != read.as_ref()) {
                target.own_writes.wrote(target.owner_uid, status, version);
            }
            target.metrics.status_patches.inc();
            applied.status_written = true;
            Ok(())
        }
        Err(kube::Error::Api(err)) if err.code == 409 => {
            tracing::debug!(object = %target.key, "status not written: the cache is behind; reconciling again");
            applied.stale = true;
            Ok(())
        }
        Err(source) => {
            target
                .metrics
                .write_failed("patch_status", classify(&source).label());
            Err(ApplyError::Api {
                what: format!("patching the status of {}", target.key),
                source,
            })
        }
    }
}

/// Sends the status patch of `jz` at the resourceVersion `read` (refused
/// with 409 when the object moved on) once the fence passed; the outer
/// error is the fence's.
async fn patch_status_at(
    target: &Target<'_>,
    jinghzhus: &Api<Jinghzhu>,
    jz: &Jinghzhu,
    read: Option<&str>,
    status: &JinghzhuStatus,
) -> Result<Result<Jinghzhu, kube::Error>, ApplyError> {
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": read },
        "status": status,
    });
    fenced(target, "patch_status")?;
    Ok(jinghzhus
        .patch_status(
            &jz.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await)
}

/// The server's resourceVersion of `jz` when it is the same object with the
/// same spec (UID and generation) as the cached copy; `None` otherwise (or
/// when it cannot be read): then the watch must bring the new spec first.
async fn same_spec_at(jinghzhus: &Api<Jinghzhu>, jz: &Jinghzhu) -> Option<String> {
    let fresh = jinghzhus.get_metadata(&jz.name_any()).await.ok()?;
    (fresh.metadata.uid == jz.metadata.uid && fresh.metadata.generation == jz.metadata.generation)
        .then_some(fresh.metadata.resource_version)
        .flatten()
}

/// Queues the plugin's own Events, one per reason, marked as the plugin's.
fn publish_plugin_events(
    target: &Target<'_>,
    jz: &Jinghzhu,
    proposal: &ProposedActions,
    applied: &mut Applied,
) {
    for (type_, reason, message) in aggregate_events(&proposal.events) {
        target
            .events
            .publish_plugin(jz, type_, reason, &message, target.plugin);
        applied.events += 1;
    }
}

/// Sends one pod create whose JSON is `body` to `url` (the namespace's pods).
/// Only the JSON is held while the request is in flight (the typed Pod is
/// several times its size), and the answer is read as a [`CachedPod`], so
/// its spec is skipped instead of being built. A failure comes classified.
async fn send_create(
    client: &Client,
    url: &str,
    body: serde_json::Result<Vec<u8>>,
) -> Result<CachedPod, (WriteOutcome, kube::Error)> {
    let not_sent = |err| (WriteOutcome::NotSent, err);
    let body = body.map_err(kube::Error::SerdeError).map_err(not_sent)?;
    let mut request = kube::core::Request::new(url)
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)
        .map_err(not_sent)?;
    request.extensions_mut().insert("create");
    client
        .request::<CachedPod>(request)
        .await
        .map_err(|err| (classify(&err), err))
}

/// The status to write for `proposal` when it differs from the stored one:
/// the proposal's (or the stored one) with the host's own fields, the
/// `readyReplicas` of `owned` and the plugin `stamp` (see
/// [`crate::observed::status_to_write`]). A status that differs from the
/// stored one only in its stamp is not written (see [`stamp_only`]).
pub fn status_change(
    jz: &Jinghzhu,
    owned: &[Pod],
    proposal: &ProposedActions,
    stamp: &str,
) -> Option<JinghzhuStatus> {
    crate::observed::status_to_write(jz.status.as_ref(), proposal.status.as_ref(), owned, stamp)
        .filter(|status| jz.status.as_ref() != Some(status))
        .filter(|status| !stamp_only(jz.status.as_ref(), status))
}

/// True when `status` differs from the `stored` one in `reconciledBy`
/// alone, `stored` having a stamp already (issue 40, hazard 8): a plugin
/// swapped in that reaches the same outcome (a tag moved between two builds
/// of one plugin, a rollback, a flapping tag) costs no status write per
/// object; the stamp names the plugin whose proposal last changed the
/// status and follows with the next write that changes something. A status
/// without a stamp yet gets one.
pub fn stamp_only(stored: Option<&JinghzhuStatus>, status: &JinghzhuStatus) -> bool {
    let Some(stored) = stored else {
        return false;
    };
    stored.reconciled_by.is_some()
        && JinghzhuStatus {
            reconciled_by: None,
            ..stored.clone()
        } == JinghzhuStatus {
            reconciled_by: None,
            ..status.clone()
        }
}

/// The Pod to send for `create`, whose validated spec is `spec`: the
/// plugin's name, labels, annotations and spec, in the Jinghzhu's namespace, with the host's labels (which win)
/// and the controller ownerReference.
pub fn pod_to_create(
    create: &PodToCreate,
    spec: &PodSpec,
    jz: &Jinghzhu,
    namespace: &str,
    owner: &OwnerReference,
) -> Pod {
    let mut labels: BTreeMap<String, String> = create.labels.clone();
    labels.extend(operator_labels(jz));
    let spec = Some(spec.clone());
    Pod {
        metadata: ObjectMeta {
            name: create.name.clone(),
            generate_name: create.generate_name.clone(),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: (!create.annotations.is_empty()).then(|| create.annotations.clone()),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// Why deleting stopped.
enum DeleteStop {
    /// This pod's delete failed.
    Failed(String, kube::Error),
    /// The fence refused the next delete.
    Fenced(ApplyError),
}

/// Deletes the proposal's pods, each with a UID precondition and each
/// after the fence; stops at the first failure or refusal.
async fn delete_pods(
    target: &Target<'_>,
    pods: &Api<Pod>,
    owned: &[Pod],
    proposal: &ProposedActions,
    applied: &mut Applied,
) -> Result<(), DeleteStop> {
    for name in &proposal.delete_pods {
        let Some(uid) = owned
            .iter()
            .find(|p| &p.name_any() == name)
            .and_then(|p| p.uid())
        else {
            continue; // validation guarantees it is owned; nothing to do otherwise
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        fenced(target, "delete").map_err(DeleteStop::Fenced)?;
        // Awaited from before it is sent: a reconcile cancelled with the
        // delete on the wire leaves it as maybe made, not forgotten.
        let sending = target.expectations.send_deletion(target.owner_uid, &uid);
        match pods.delete(name, &params).await {
            Ok(_) => sending.answered(),
            // Already gone, or replaced by another pod of the same name: fine.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                sending.answered()
            }
            Err(source) => {
                sending.failed();
                return Err(DeleteStop::Failed(name.clone(), source));
            }
        }
        target.metrics.pods_deleted.inc();
        applied.deleted.push(name.clone());
    }
    Ok(())
}

/// The plugin's Events grouped by type and reason, in order of first
/// appearance; messages of one group are joined with `; ` (cut to the
/// Event message limit).
fn aggregate_events(events: &[actions::PluginEvent]) -> Vec<(EventType, &str, String)> {
    let mut groups: Vec<(EventType, &str, String)> = Vec::new();
    for event in events {
        let type_ = match event.type_ {
            actions::EventType::Normal => EventType::Normal,
            actions::EventType::Warning => EventType::Warning,
        };
        match groups
            .iter_mut()
            .find(|(t, r, _)| *t == type_ && *r == event.reason)
        {
            Some((_, _, message)) => {
                if message.len() < validate::MAX_EVENT_MESSAGE_LEN {
                    message.push_str("; ");
                    message.push_str(&event.message);
                }
            }
            None => groups.push((type_, event.reason.as_str(), event.message.clone())),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::PluginEvent;

    #[test]
    fn events_of_one_reason_are_one_event() {
        let event = |type_, reason: &str, message: &str| PluginEvent {
            type_,
            reason: reason.into(),
            message: message.into(),
        };
        let events = [
            event(actions::EventType::Normal, "Scaled", "a"),
            event(actions::EventType::Warning, "Odd", "x"),
            event(actions::EventType::Normal, "Scaled", "b"),
        ];
        let groups = aggregate_events(&events);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].1, "Scaled");
        assert_eq!(groups[0].2, "a; b");
        assert_eq!(groups[1].2, "x");
    }

    #[test]
    fn an_unchanged_status_costs_no_write() {
        const STAMP: &str = "replicaset@0.1.0 (sha256:0123456789ab)";
        let mut jz = wasm_operator_testkit::jinghzhu("web").build();
        let proposed = JinghzhuStatus {
            state: "Running".into(),
            ..Default::default()
        };
        let proposal = ProposedActions {
            status: Some(proposed.clone()),
            ..ProposedActions::default()
        };
        let cost = |jz: &Jinghzhu, proposal: &ProposedActions, stamp: &str| {
            write_cost(proposal, status_change(jz, &[], proposal, stamp).as_ref())
        };
        // Nothing stored yet: the status is a write.
        assert_eq!(cost(&jz, &proposal, STAMP), 1);
        // Stored as the host would write it: nothing to write.
        jz.status = crate::observed::status_to_write(None, Some(&proposed), &[], STAMP);
        assert_eq!(cost(&jz, &proposal, STAMP), 0);
        // Another plugin reaching the same outcome writes nothing (the
        // stamp alone is no change); a delete and its Event cost two.
        const OTHER: &str = "other@1.0.0 (sha256:f00)";
        assert_eq!(cost(&jz, &proposal, OTHER), 0);
        let proposal = ProposedActions {
            delete_pods: vec!["web-1".into()],
            ..proposal
        };
        assert_eq!(cost(&jz, &proposal, OTHER), 2);
        // A change of outcome is written, with the new stamp.
        let moved = ProposedActions {
            status: Some(JinghzhuStatus {
                message: "changed".into(),
                ..proposed.clone()
            }),
            ..ProposedActions::default()
        };
        let written = status_change(&jz, &[], &moved, OTHER).expect("a write");
        assert_eq!(written.reconciled_by.as_deref(), Some(OTHER));
        // A stored status without a stamp (an older host's) gets one.
        jz.status.as_mut().expect("stored").reconciled_by = None;
        assert_eq!(cost(&jz, &ProposedActions::default(), OTHER), 1);
    }

    #[test]
    fn batches_start_slow_and_stay_bounded_in_count_and_bytes() {
        // Small pods: 1, 2, 4, …, 64, 64, … (the count cap).
        let small = vec![2_000; 500];
        let mut sent = 0;
        let mut slow_start = 1;
        let mut batches = Vec::new();
        while sent < small.len() {
            let count = next_batch(&small[sent..], slow_start);
            batches.push(count);
            sent += count;
            slow_start *= 2;
        }
        assert_eq!(batches[..8], [1, 2, 4, 8, 16, 32, 64, 64]);
        assert_eq!(batches.iter().sum::<usize>(), 500);
        assert!(batches.iter().all(|b| *b <= MAX_CREATE_BATCH));
        // 64 KiB specs: at most 1 MiB of them at once (15 pods), however far
        // the slow start has grown.
        let fat = vec![64 * 1024 + 100; 500];
        assert_eq!(next_batch(&fat, 1 << 20), 15);
        assert!(15 * fat[0] <= MAX_CREATE_BATCH_BYTES);
        // One pod larger than a batch still goes, alone.
        assert_eq!(next_batch(&[MAX_CREATE_BATCH_BYTES + 1, 1], 8), 1);
        assert_eq!(next_batch(&[], 8), 0);
        assert_eq!(next_batch(&[1, 1, 1], 0), 1);
    }

    #[test]
    fn a_create_s_size_is_its_spec_and_metadata() {
        let spec = PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "app".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let json = serde_json::to_string(&spec).expect("json").len();
        let create = PodToCreate {
            generate_name: Some("web-".into()),
            annotations: BTreeMap::from([("a".to_string(), "bc".to_string())]),
            ..PodToCreate::default()
        };
        assert_eq!(
            create_sizes(&[(&create, &spec), (&create, &spec)]),
            [json + 4 + 3, json + 4 + 3]
        );
    }

    #[test]
    fn names_are_listed_up_to_ten() {
        let names: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
        assert_eq!(
            name_list(&names),
            "p0, p1, p2, p3, p4, p5, p6, p7, p8, p9 and 2 more"
        );
    }

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_4xx_is_answered_and_a_5xx_may_have_been_carried_out() {
        for code in [400, 403, 409, 422, 429] {
            assert_eq!(classify(&api(code, "")), WriteOutcome::Answered, "{code}");
        }
        for code in [500, 502, 503, 504] {
            assert_eq!(classify(&api(code, "")), WriteOutcome::MaybeSent, "{code}");
        }
        assert_eq!(classify(&api(504, "Timeout")), WriteOutcome::MaybeSent);
        assert_eq!(
            classify(&api(503, "ServiceUnavailable")),
            WriteOutcome::MaybeSent,
            "a proxy may have forwarded it"
        );
        assert_eq!(classify(&api(408, "")), WriteOutcome::MaybeSent);
        assert_eq!(
            classify(&api(500, "ServerTimeout")),
            WriteOutcome::MaybeSent
        );
        let unreadable = serde_json::from_str::<CachedPod>("{").expect_err("bad json");
        assert_eq!(
            classify(&kube::Error::SerdeError(unreadable)),
            WriteOutcome::MaybeSent,
            "an answer we cannot read may be a pod that exists"
        );
    }

    /// Sends a pod create to `server` with a real kube client (no retries)
    /// and classifies what became of it.
    async fn create_against(server: String) -> WriteOutcome {
        let mut config = kube::Config::new(server.parse().expect("url"));
        config.default_retry = false;
        config.read_timeout = Some(std::time::Duration::from_secs(5));
        let client = Client::try_from(config).expect("client");
        let pods: Api<Pod> = Api::namespaced(client, "ns");
        let err = pods
            .create(&PostParams::default(), &Pod::default())
            .await
            .expect_err("nothing serves pods here");
        classify(&err)
    }

    #[tokio::test]
    async fn a_refused_connection_is_not_sent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener); // nobody listens there now
        assert_eq!(
            create_against(format!("http://127.0.0.1:{port}")).await,
            WriteOutcome::NotSent
        );
    }

    #[tokio::test]
    async fn a_connection_lost_after_sending_may_have_been_sent() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // Reads the request, then hangs up without answering.
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut buf).await;
            drop(socket);
        });
        assert_eq!(
            create_against(format!("http://127.0.0.1:{port}")).await,
            WriteOutcome::MaybeSent
        );
        let _ = server.await;
    }

    #[tokio::test]
    async fn an_error_status_is_answered() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut buf).await;
            let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"slow down","reason":"TooManyRequests","code":429}"#;
            let answer = format!(
                "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
        assert_eq!(
            create_against(format!("http://127.0.0.1:{port}")).await,
            WriteOutcome::Answered
        );
        let _ = server.await;
    }
}
