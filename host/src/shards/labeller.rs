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
//! from its controlling owner's UID). Every replica writes the same value,
//! so concurrent writes agree; a repeated patch changes nothing.
//!
//! [`Labeller::ready`] turns true once the initial list of both kinds has
//! been labelled: a replica starts syncing shards only then, so after an
//! upgrade no shard holder can see an object's pods missing because they
//! had not been labelled yet.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;

use super::Shards;
use super::hash::{SHARD_LABEL, label_value, selector_unlabelled, shard_of};
use crate::crd::Jinghzhu;
use crate::ownership::MANAGED_BY_SELECTOR;

/// How many label patches run at once.
const CONCURRENT_PATCHES: usize = 16;

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
        let metrics = shards.metrics().clone();
        let jz_task = tokio::spawn(label_loop::<Jinghzhu>(
            client.clone(),
            namespace.clone(),
            selector_unlabelled(count),
            count,
            "jinghzhu",
            jz_ready_tx,
            metrics.clone(),
        ));
        let pod_task = tokio::spawn(label_loop::<Pod>(
            client.clone(),
            namespace,
            format!("{MANAGED_BY_SELECTOR},{}", selector_unlabelled(count)),
            count,
            "pod",
            pod_ready_tx,
            metrics,
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
    count: u32,
    kind: &'static str,
    ready: watch::Sender<bool>,
    metrics: super::ShardMetrics,
) where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let meta: Api<PartialObjectMeta<K>> = match namespace.as_deref() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default().labels(&selector);
    let events = watcher(meta, config).default_backoff();
    let patched = events
        .map_ok(move |event| {
            let client = client.clone();
            let metrics = metrics.clone();
            async move {
                let obj = match &event {
                    watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => obj,
                    _ => return Ok(event_kind(&event)),
                };
                let Some(uid) = shard_source(obj, kind) else {
                    return Ok(event_kind(&event));
                };
                let value = label_value(shard_of(&uid, count), count);
                let patch = serde_json::json!({
                    "metadata": {
                        "labels": BTreeMap::from([(SHARD_LABEL, value.clone())]),
                        // Only if it is still the object we saw.
                        "uid": obj.uid(),
                    }
                });
                let name = obj.name_any();
                let target: Api<K> = match obj.namespace() {
                    Some(ns) => Api::namespaced(client, &ns),
                    None => Api::all(client),
                };
                match target
                    .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        metrics
                            .labels_written
                            .get_or_create(&super::metrics::KindLabels {
                                kind: kind.to_string(),
                            })
                            .inc();
                        tracing::debug!(kind, object = %name, shard = %value, "sharding: shard label written");
                    }
                    Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                    Err(err) => {
                        tracing::warn!(kind, object = %name, error = %err, "sharding: writing the shard label failed; the next relist retries")
                    }
                }
                Ok::<_, watcher::Error>(event_kind(&event))
            }
        })
        .try_buffered(CONCURRENT_PATCHES);
    let mut patched = std::pin::pin!(patched);
    while let Some(item) = patched.next().await {
        match item {
            Ok(Done::InitDone) => {
                ready.send_replace(true);
            }
            Ok(Done::Other) => {}
            Err(err) => {
                tracing::debug!(kind, error = %err, "sharding: label watch error; retrying")
            }
        }
    }
}

enum Done {
    InitDone,
    Other,
}

fn event_kind<K>(event: &watcher::Event<K>) -> Done {
    match event {
        watcher::Event::InitDone => Done::InitDone,
        _ => Done::Other,
    }
}
