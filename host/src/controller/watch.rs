//! The informers: watch streams of Jinghzhus and of the Pods this operator
//! manages, each feeding a cache (reflector store).
//!
//! Only our own pods are watched (label `app.kubernetes.io/managed-by=wasm-operator`),
//! and `managedFields` are stripped before caching: we never read them and
//! they are most of a small object's size. Every event is logged at debug
//! level with the key it queues (a pod queues its controlling Jinghzhu).

use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::expectations::Expectations;
use crate::crd::Jinghzhu;
use crate::ownership::MANAGED_BY_SELECTOR;

type ObjectStream<K> = std::pin::Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// The two watch streams (to hand to the controller) and their caches.
pub struct Watches {
    /// Jinghzhus, as triggers (added or modified).
    pub jinghzhus: ObjectStream<Jinghzhu>,
    /// The Jinghzhu cache.
    pub jinghzhu_cache: Store<Jinghzhu>,
    /// Our pods, as triggers for their owners (added, modified or deleted).
    pub pods: ObjectStream<Pod>,
    /// The pod cache.
    pub pod_cache: Store<Pod>,
}

impl Watches {
    /// Builds the streams (they start when polled by the controller).
    pub fn start(
        client: &Client,
        namespace: Option<&str>,
        expectations: Arc<Expectations>,
    ) -> Self {
        let (jinghzhu_api, pod_api): (Api<Jinghzhu>, Api<Pod>) = match namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };

        let (jinghzhu_cache, jinghzhu_writer) = reflector::store();
        let jinghzhus = watcher(jinghzhu_api, watcher::Config::default())
            .default_backoff()
            .modify(|jz: &mut Jinghzhu| jz.managed_fields_mut().clear())
            .reflect(jinghzhu_writer)
            .applied_objects()
            .inspect_ok(|jz: &Jinghzhu| {
                tracing::info!(
                    object = %object_key(jz),
                    generation = jz.metadata.generation.unwrap_or_default(),
                    desired = jz.spec.desired,
                    resource_version = jz.resource_version().unwrap_or_default(),
                    "event seen: Jinghzhu changed; queued"
                );
            });

        let (pod_cache, pod_writer) = reflector::store();
        let pods = watcher(
            pod_api,
            watcher::Config::default().labels(MANAGED_BY_SELECTOR),
        )
        .default_backoff()
        .modify(|pod: &mut Pod| pod.managed_fields_mut().clear())
        .inspect_ok(move |event| {
            if let watcher::Event::Delete(pod) = event
                && let Some(uid) = pod.uid()
            {
                expectations.observe_gone(&uid);
            }
        })
        .reflect(pod_writer)
        .touched_objects()
        .inspect_ok(|pod: &Pod| {
            let owner = pod
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| format!("{}/{}", pod.namespace().unwrap_or_default(), o.name));
            tracing::info!(
                pod = %object_key(pod),
                owner = owner.as_deref().unwrap_or("-"),
                phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("-"),
                terminating = pod.metadata.deletion_timestamp.is_some(),
                "event seen: Pod changed; owner queued"
            );
        });

        Self {
            jinghzhus: Box::pin(jinghzhus),
            jinghzhu_cache,
            pods: Box::pin(pods),
            pod_cache,
        }
    }
}

/// `namespace/name` of an object: the key of the workqueue and of every log line.
pub fn object_key<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}
