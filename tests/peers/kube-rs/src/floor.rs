//! The floor (`--floor`): a controller with no logic that makes only the
//! writes converging cannot do without, as fast as the API server takes
//! them: one create per missing pod (all at once), one delete per surplus
//! pod, one `SuccessfulCreate` or `SuccessfulDelete` Event per scale, and
//! one status per object, written only once every desired pod is live and
//! ready (what the benchmark counts as converged). No intermediate status,
//! no annotation, no Event of its own beyond those. Pods it created are
//! expected until the cache shows them (at most [`EXPECT_FOR`]), so a
//! reconcile that runs before the cache caught up does not create them
//! again. Each object's pods are found through an index by owner UID
//! ([`OwnerIndex`]), not by scanning the cache: at N = 10 000 (30 000 pods)
//! a scan per reconcile made the floor CPU-bound (354 CPU-seconds, 474 s to
//! converge, against the host's 37 and 271). The scale benchmark
//! runs it as `floor` so every report can show what the control plane
//! allows: each controller's figures divided by the floor's.

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wasm_operator::crd::{Jinghzhu, JinghzhuStatus};

use crate::reconcile::{Context, Error, MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL, publish};

/// How long created pods are waited for in the cache at most.
const EXPECT_FOR: Duration = Duration::from_secs(30);

/// Per object (UID): the live pods it should have once the cache shows the
/// pods created for it, and since when.
#[derive(Default)]
pub struct Expected(Mutex<HashMap<String, (usize, Instant)>>);

impl Expected {
    /// Whether `uid`, with `live` pods in the cache, still waits for pods
    /// it created (forgotten once they show or [`EXPECT_FOR`] passed).
    fn waiting(&self, uid: &str, live: usize) -> bool {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match map.get(uid) {
            Some((expected, since)) if live < *expected && since.elapsed() < EXPECT_FOR => true,
            Some(_) => {
                map.remove(uid);
                false
            }
            None => false,
        }
    }

    fn expect(&self, uid: &str, live: usize) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.insert(uid.to_owned(), (live, Instant::now()));
    }
}

/// The pods in the cache by the UID of their controlling owner, kept from
/// the pod watch's events (after the reflector stored them): keys only, the
/// pods themselves are read from the store.
#[derive(Default)]
pub struct OwnerIndex {
    by_owner: Mutex<HashMap<String, HashSet<ObjectRef<Pod>>>>,
    /// The index being rebuilt by a relist (between `Init` and `InitDone`).
    relisting: Mutex<Option<HashMap<String, HashSet<ObjectRef<Pod>>>>>,
}

impl OwnerIndex {
    /// Follows one event of the pod watch.
    pub fn observe(&self, event: &watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) => add(&mut lock(&self.by_owner), pod),
            watcher::Event::Delete(pod) => {
                if let Some(owner) = controller_uid(pod) {
                    let mut index = lock(&self.by_owner);
                    if let Some(pods) = index.get_mut(&owner) {
                        pods.remove(&ObjectRef::from_obj(pod));
                        if pods.is_empty() {
                            index.remove(&owner);
                        }
                    }
                }
            }
            watcher::Event::Init => *lock(&self.relisting) = Some(HashMap::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(index) = lock(&self.relisting).as_mut() {
                    add(index, pod);
                }
            }
            watcher::Event::InitDone => {
                if let Some(index) = lock(&self.relisting).take() {
                    *lock(&self.by_owner) = index;
                }
            }
        }
    }

    /// The keys of the pods controlled by `uid`.
    fn owned(&self, uid: &str) -> Vec<ObjectRef<Pod>> {
        lock(&self.by_owner)
            .get(uid)
            .map(|pods| pods.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Adds `pod` under its controlling owner (nothing without one).
fn add(index: &mut HashMap<String, HashSet<ObjectRef<Pod>>>, pod: &Pod) {
    if let Some(owner) = controller_uid(pod) {
        index
            .entry(owner)
            .or_default()
            .insert(ObjectRef::from_obj(pod));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The UID of `pod`'s controlling owner.
fn controller_uid(pod: &Pod) -> Option<String> {
    pod.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// The floor's reconcile of `jz`, stored in `namespace` as `uid`.
pub async fn reconcile(
    jz: &Jinghzhu,
    ctx: &Context,
    namespace: &str,
    uid: &str,
) -> Result<Action, Error> {
    let cached: Vec<_> = ctx
        .floor_index
        .owned(uid)
        .iter()
        .filter_map(|pod| ctx.pods.get(pod))
        .collect();
    let mut live: Vec<&Pod> = cached
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| {
            p.namespace().as_deref() == Some(namespace)
                && p.metadata.deletion_timestamp.is_none()
                && p.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    live.sort_by_key(|p| p.name_any());
    let desired = jz.spec.desired as usize;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    if ctx.floor_expected.waiting(uid, live.len()) {
        return Ok(Action::await_change());
    }
    if live.len() < desired {
        let created = create(ctx, jz, &pods, namespace, desired - live.len()).await;
        ctx.floor_expected
            .expect(uid, live.len() + created.as_ref().map_or(0, |n| *n));
        created?;
    } else if live.len() > desired {
        delete(ctx, jz, &pods, &live[desired..]).await?;
    } else {
        write_final_status(ctx, jz, namespace, &live).await?;
    }
    Ok(Action::await_change())
}

/// Creates `count` pods at once; one Event names them. Returns how many
/// were made.
async fn create(
    ctx: &Context,
    jz: &Jinghzhu,
    pods: &Api<Pod>,
    namespace: &str,
    count: usize,
) -> Result<usize, Error> {
    let mut owner = jz.controller_owner_ref(&()).ok_or(Error::NotStored)?;
    owner.block_owner_deletion = Some(true);
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (OWNER_LABEL.to_owned(), jz.name_any()),
    ]);
    let template = jinghzhu_plugin_sdk::types::PodCreate {
        generate_name: Some(format!("{}-", jz.name_any())),
        ..Default::default()
    };
    let pod = crate::convert::pod_to_create(&template, namespace, &labels, &owner)?;
    let params = PostParams::default();
    let results = join_all((0..count).map(|_| pods.create(&params, &pod))).await;
    let mut created = Vec::new();
    let mut failure = None;
    for result in results {
        match result {
            Ok(pod) => created.push(pod.name_any()),
            Err(err) => failure = Some(err),
        }
    }
    if !created.is_empty() {
        let note = format!(
            "Created {} pod(s): {}",
            created.len(),
            wasm_operator::apply::name_list(&created)
        );
        publish(ctx, jz, EventType::Normal, "SuccessfulCreate", &note).await;
    }
    match failure {
        Some(source) => Err(Error::Api {
            what: format!("creating pods in {namespace}"),
            source,
        }),
        None => Ok(created.len()),
    }
}

/// Deletes `surplus`; one Event names them.
async fn delete(
    ctx: &Context,
    jz: &Jinghzhu,
    pods: &Api<Pod>,
    surplus: &[&Pod],
) -> Result<(), Error> {
    let names: Vec<String> = surplus.iter().map(|p| p.name_any()).collect();
    for name in &names {
        match pods.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::Api {
                    what: format!("deleting pod {name}"),
                    source,
                });
            }
        }
    }
    let note = format!(
        "Deleted {} pod(s): {}",
        names.len(),
        wasm_operator::apply::name_list(&names)
    );
    publish(ctx, jz, EventType::Normal, "SuccessfulDelete", &note).await;
    Ok(())
}

/// The one status write: once every pod in `live` (as many as desired) is
/// ready, and only when the stored status says otherwise.
async fn write_final_status(
    ctx: &Context,
    jz: &Jinghzhu,
    namespace: &str,
    live: &[&Pod],
) -> Result<(), Error> {
    let ready = wasm_operator::observed::ready_replicas(live.iter().copied());
    if ready as usize != live.len() {
        return Ok(());
    }
    let status = JinghzhuStatus {
        current: live.len() as u32,
        pod_list: live.iter().map(|p| p.name_any()).collect(),
        state: "Running".to_owned(),
        message: format!("{ready}/{ready} pods ready"),
        observed_generation: jz.metadata.generation,
        ready_replicas: Some(ready),
        reconciled_by: None,
    };
    if jz.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let jinghzhus: Api<Jinghzhu> = Api::namespaced(ctx.client.clone(), namespace);
    jinghzhus
        .patch_status(
            &jz.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({ "status": status })),
        )
        .await
        .map_err(|source| Error::Api {
            what: format!("patching the status of {namespace}/{}", jz.name_any()),
            source,
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    /// A pod whose controller is `owner` (a uid; kind and name unread).
    fn pod(name: &str, owner: &str) -> Pod {
        wasm_operator_testkit::pod(name)
            .namespace("ns")
            .owner_reference(OwnerReference {
                controller: Some(true),
                uid: owner.into(),
                ..Default::default()
            })
            .build()
    }

    fn names(index: &OwnerIndex, owner: &str) -> Vec<String> {
        let mut names: Vec<String> = index.owned(owner).into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn the_index_follows_applies_deletes_and_relists() {
        let index = OwnerIndex::default();
        index.observe(&watcher::Event::Apply(pod("a-1", "a")));
        index.observe(&watcher::Event::Apply(pod("a-2", "a")));
        index.observe(&watcher::Event::Apply(pod("b-1", "b")));
        assert_eq!(names(&index, "a"), ["a-1", "a-2"]);
        index.observe(&watcher::Event::Delete(pod("a-1", "a")));
        assert_eq!(names(&index, "a"), ["a-2"]);
        // A relist replaces the index once done; until then the old one serves.
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(pod("b-2", "b")));
        assert_eq!(names(&index, "a"), ["a-2"]);
        index.observe(&watcher::Event::InitDone);
        assert!(names(&index, "a").is_empty());
        assert_eq!(names(&index, "b"), ["b-2"]);
    }
}
