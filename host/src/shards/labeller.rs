//! Writes the shard label (`jinghzhu.io/shard: <shard>-of-<count>`) on the
//! Jinghzhus and managed pods that lack it or carry one of another shard
//! count, so the label-selected watches of the shard holders see them.
//!
//! New Jinghzhus arrive unlabelled (users do not know their shard); the pods
//! the host creates carry their owner's label from the start (see
//! [`crate::ownership::operator_labels`]), so here pods matter only on an
//! upgrade from an unsharded host (or a change of `--shards`). Each replica
//! watches the unlabelled objects' metadata only (`jinghzhu.io/shard notin
//! (0-of-N,…)`, which also matches a missing label; in steady state the
//! watch is empty) and patches the label computed from the UID (a pod's
//! from its controlling owner's UID).
//!
//! The replica holding the object's shard labels it at once. The others
//! wait [`FALLBACK_DELAY`] and label it only if it is still unlabelled in
//! their watch's cache (its holder is gone, or no replica holds the shard
//! yet, as at start): one write per object in steady state, where every
//! replica writing at once cost a patch per replica (at N = 3000 with three
//! replicas, 9000 label patches instead of 3000). Every replica computes
//! the same value, so writes that do race agree.
//!
//! A label written for a held shard is a write on behalf of that shard:
//! it is sent only while the shard's hold is valid on this host's clock,
//! checked right before the request ([`super::ShardHold::valid_now`], as
//! the write fence of reconciles does), so a replica resumed after a stop
//! past its Leases writes no label for them before the coordinator has
//! noticed. A refused or failed write falls back as a replica that does
//! not hold the shard does, and a fallback that fails is tried again
//! (waits doubling from [`FALLBACK_DELAY`] to 30 s) until the object is
//! labelled or gone: an unlabelled object is reconciled by no replica. A fallback write is on behalf of no shard (nobody labelled
//! the object in time) and is not fenced; it writes the value any replica
//! would, and only for an object still unlabelled after the delay.
//!
//! [`Labeller::ready`] turns true once the initial list of both kinds has
//! been labelled (the waiting fallbacks included): a replica starts syncing
//! shards only then, so after an upgrade no shard holder can see an
//! object's pods missing because they had not been labelled yet.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::hash::{SHARD_LABEL, label_value, selector_unlabelled, shard_of};
use super::{ShardHold, Shards};
use crate::crd::Jinghzhu;
use crate::ownership::MANAGED_BY_SELECTOR;

/// How many label patches run at once.
const CONCURRENT_PATCHES: usize = 16;

/// How long a replica that does not hold an object's shard leaves it to the
/// holder before labelling it itself: a few Lease retry periods.
pub const FALLBACK_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest wait between two tries of a label write that failed.
const MAX_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The two labelling loops; stopped when dropped.
pub struct Labeller {
    ready: watch::Receiver<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Labeller {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Labeller {
    /// Starts labelling in `namespace` (all namespaces when `None`).
    pub fn start(client: &Client, namespace: Option<&str>, shards: &Shards) -> Self {
        let count = shards.count();
        let namespace = namespace.map(str::to_string);
        let (jz_ready_tx, jz_ready) = watch::channel(false);
        let (pod_ready_tx, pod_ready) = watch::channel(false);
        let jz_task = tokio::spawn(label_loop::<Jinghzhu>(
            client.clone(),
            namespace.clone(),
            selector_unlabelled(count),
            shards.clone(),
            "jinghzhu",
            jz_ready_tx,
        ));
        let pod_task = tokio::spawn(label_loop::<Pod>(
            client.clone(),
            namespace,
            format!("{MANAGED_BY_SELECTOR},{}", selector_unlabelled(count)),
            shards.clone(),
            "pod",
            pod_ready_tx,
        ));
        let (ready_tx, ready) = watch::channel(false);
        let both = tokio::spawn(async move {
            let mut a = jz_ready;
            let mut b = pod_ready;
            if a.wait_for(|r| *r).await.is_ok() && b.wait_for(|r| *r).await.is_ok() {
                tracing::info!("sharding: every Jinghzhu and managed pod carries its shard label");
                ready_tx.send_replace(true);
                // Keep the sender alive for the receivers.
                std::future::pending::<()>().await;
            }
        });
        Self {
            ready,
            tasks: vec![jz_task, pod_task, both],
        }
    }

    /// True once the initial lists have been labelled.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.clone()
    }
}

/// The shard of an object: its own UID for a Jinghzhu, its controlling
/// owner's for a pod (`None`: a pod without a controller, not ours to label).
fn shard_source<K: Resource>(obj: &PartialObjectMeta<K>, kind: &str) -> Option<String> {
    if kind == "pod" {
        obj.owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone())
    } else {
        obj.uid()
    }
}

async fn label_loop<K>(
    client: Client,
    namespace: Option<String>,
    selector: String,
    shards: Shards,
    kind: &'static str,
    ready: watch::Sender<bool>,
) where
    K: Labelled,
{
    let meta: Api<PartialObjectMeta<K>> = match namespace.as_deref() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default().labels(&selector);
    // The unlabelled objects as this watch last saw them: a fallback labels
    // only what is still here when its delay is up.
    let (unlabelled, writer) = reflector::store();
    let events = watcher(meta, config).default_backoff().reflect(writer);
    let mut events = std::pin::pin!(events);
    let count = shards.count();
    // The watch is read as fast as it comes, the patches run beside it: the
    // store must see an object leave (its holder labelled it) while this
    // replica's own patches are still queued, or its fallbacks look at a
    // stale store. (Reading the watch only as fast as this replica's
    // patches went made about one needless fallback write per object at
    // N = 3000 with three replicas.)
    let permits = Arc::new(Semaphore::new(CONCURRENT_PATCHES));
    // How many lists the store has taken in: the reflector keeps a list's
    // objects aside until its end, so a fallback from a list waits for it.
    let (lists_done_tx, lists_done) = watch::channel(0u64);
    let mut later = JoinSet::new();
    // Writes and fallbacks of the latest list: readiness waits for them.
    let mut listing = JoinSet::new();
    let mut listed = false;
    loop {
        tokio::select! {
            event = events.next() => {
                let event = match event {
                    Some(Ok(event)) => event,
                    Some(Err(err)) => {
                        tracing::debug!(kind, error = %err, "sharding: label watch error; retrying");
                        continue;
                    }
                    None => break,
                };
                let (obj, from_list) = match &event {
                    watcher::Event::Apply(obj) => (obj, false),
                    watcher::Event::InitApply(obj) => (obj, true),
                    watcher::Event::Init => {
                        listed = false;
                        continue;
                    }
                    watcher::Event::InitDone => {
                        listed = true;
                        lists_done_tx.send_modify(|n| *n += 1);
                        if listing.is_empty() {
                            ready.send_replace(true);
                        }
                        continue;
                    }
                    watcher::Event::Delete(_) => continue,
                };
                let Some(uid) = shard_source(obj, kind) else {
                    continue;
                };
                let job = Job {
                    client: client.clone(),
                    obj: obj.clone(),
                    shard: shard_of(&uid, count),
                    shards: shards.clone(),
                    kind,
                    permits: permits.clone(),
                };
                if from_list {
                    // The store holds this list's objects once it is through.
                    let list = *lists_done.borrow() + 1;
                    let mut lists_done = lists_done.clone();
                    let unlabelled = unlabelled.clone();
                    listing.spawn(async move {
                        let store_has_list =
                            async move { lists_done.wait_for(|n| *n >= list).await.is_ok() };
                        job.run(unlabelled, store_has_list).await
                    });
                } else {
                    later.spawn(job.run(unlabelled.clone(), async { true }));
                }
            }
            Some(_) = later.join_next(), if !later.is_empty() => {}
            Some(_) = listing.join_next(), if !listing.is_empty() => {
                if listed && listing.is_empty() {
                    ready.send_replace(true);
                }
            }
        }
    }
}

/// One object to label (its shard label missing or of another count).
struct Job<K: Labelled> {
    client: Client,
    obj: PartialObjectMeta<K>,
    shard: u32,
    shards: Shards,
    kind: &'static str,
    permits: Arc<Semaphore>,
}

impl<K: Labelled> Job<K> {
    /// Labels the object: at once when this replica holds its shard; else
    /// after [`FALLBACK_DELAY`], and only if it is still in the unlabelled
    /// watch's store then (else its holder labelled it, or it is gone).
    /// `store_current` resolves once the store holds what the watch had
    /// sent with this object (false: the watch ended). At most
    /// [`CONCURRENT_PATCHES`] writes run at once.
    ///
    /// A write for a held shard passes its hold right before it is sent
    /// ([`write_label`]); refused, the object falls back as above.
    async fn run(
        self,
        unlabelled: Store<PartialObjectMeta<K>>,
        store_current: impl std::future::Future<Output = bool>,
    ) {
        let hold = self.shards.hold_of(self.shard);
        if route(&hold) == Route::Holder {
            let Ok(_permit) = self.permits.acquire().await else {
                return;
            };
            if write_label(&self, Some(&hold)).await == LabelWrite::Done {
                return;
            }
        }
        if !store_current.await {
            return;
        }
        // Until the object is labelled (by anyone) or gone: an unlabelled
        // object is seen by no shard holder, so a failed write is tried
        // again rather than left to the watch's next relist (minutes).
        let mut wait = FALLBACK_DELAY;
        loop {
            tokio::time::sleep(wait).await;
            let Ok(_permit) = self.permits.acquire().await else {
                return;
            };
            // Waiting for the delay or a permit, its holder may have labelled it.
            let still_unlabelled = unlabelled
                .get(&ObjectRef::from_obj(&self.obj))
                .is_some_and(|now| now.uid() == self.obj.uid());
            if !still_unlabelled || write_label(&self, None).await == LabelWrite::Done {
                return;
            }
            wait = (wait * 2).min(MAX_RETRY_WAIT);
        }
    }
}

/// Who labels an object: the holder of its shard at once, anyone else
/// after [`FALLBACK_DELAY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Holder,
    Fallback,
}

/// The route of an object of `hold`'s shard: the holder's only while the
/// hold is valid now (held but lapsed, as after a stop, is not held).
fn route(hold: &ShardHold) -> Route {
    if hold.valid_now() {
        Route::Holder
    } else {
        Route::Fallback
    }
}

/// What became of a label write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LabelWrite {
    /// Written, or answered that it needs no writing (the object is gone
    /// or is another one now).
    Done,
    /// Not sent: the hold it was for had lapsed.
    Fenced,
    /// Failed (an error, no answer): to be tried again.
    Failed,
}

/// The check right before a label write: `fence` (the hold of the shard
/// the write is for; `None`: a fallback, for no shard) must be valid now.
fn may_send(fence: Option<&ShardHold>) -> bool {
    fence.is_none_or(ShardHold::valid_now)
}

/// Patches the label of the job's shard on its object (only if it is still
/// the object with that UID) if `fence` passes right before; a failure is
/// logged and told ([`LabelWrite::Failed`]: [`Job::run`] tries again).
async fn write_label<K>(job: &Job<K>, fence: Option<&ShardHold>) -> LabelWrite
where
    K: Labelled,
{
    let (obj, shards, kind) = (&job.obj, &job.shards, job.kind);
    let value = label_value(job.shard, shards.count());
    let patch = serde_json::json!({
        "metadata": {
            "labels": BTreeMap::from([(SHARD_LABEL, value.clone())]),
            // Only if it is still the object we saw.
            "uid": obj.uid(),
        }
    });
    let name = obj.name_any();
    let target: Api<K> = match obj.namespace() {
        Some(ns) => Api::namespaced(job.client.clone(), &ns),
        None => Api::all(job.client.clone()),
    };
    if !may_send(fence) {
        tracing::info!(kind, object = %name, shard = %value, "write fenced: the shard's hold lapsed on this host's clock; shard label not sent (falls back)");
        return LabelWrite::Fenced;
    }
    match target
        .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            shards
                .metrics()
                .labels_written
                .get_or_create(&super::metrics::KindLabels {
                    kind: kind.to_string(),
                })
                .inc();
            tracing::debug!(kind, object = %name, shard = %value, "sharding: shard label written");
        }
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
        Err(err) => {
            tracing::warn!(kind, object = %name, error = %err, "sharding: writing the shard label failed; trying again shortly");
            return LabelWrite::Failed;
        }
    }
    LabelWrite::Done
}

/// The kinds the labeller labels (Jinghzhus and pods): namespaced, watched
/// as metadata.
trait Labelled:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl Labelled for Jinghzhu {}
impl Labelled for Pod {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;

    #[tokio::test]
    async fn a_label_for_a_held_shard_is_written_only_while_its_hold_is_valid() {
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        let hold = shards.hold_of(2);
        assert_eq!(route(&hold), Route::Fallback, "not held: falls back");
        assert!(may_send(None), "a fallback is for no shard: not fenced");
        shards.acquired(2, Instant::now() + Duration::from_millis(40));
        assert_eq!(route(&hold), Route::Holder);
        assert!(may_send(Some(&hold)));
        // Stopped past the renew deadline: still listed as held, but lapsed.
        std::thread::sleep(Duration::from_millis(60));
        assert!(shards.holds(2));
        assert!(
            !may_send(Some(&hold)),
            "the write is refused right before sending"
        );
        assert_eq!(
            route(&hold),
            Route::Fallback,
            "a lapsed hold is not a holder's"
        );
    }
}
