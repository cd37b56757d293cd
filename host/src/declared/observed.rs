//! Kinds a controller reads but never writes (`spec.observe`): objects
//! controlled by one of a parent's children through a chain of controllers
//! (a Deployment's Pods, through their ReplicaSets). Metadata-only caches
//! of the observed kind and of each kind of its chain, each with its owner
//! index; which of their objects belong to a parent (each step down an
//! index lookup); and the parent a change of one wakes, found by walking
//! owner references up (each step a lookup by name).

use std::collections::HashSet;
use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::Api;
use kube::core::{DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::kinds::ResolvedKind;
use crate::kube_api::owner_index::OwnerIndex;

/// An object of an observed kind, metadata only.
pub type Meta = PartialObjectMeta<DynamicObject>;

/// One observed kind, resolved.
#[derive(Clone, Debug)]
pub struct ObservedKind {
    /// The kind read.
    pub kind: ResolvedKind,
    /// The kinds between a child and it, from the child down.
    pub through: Vec<ResolvedKind>,
}

/// The caches of one observed kind: its objects' and each chain kind's.
pub struct ObservedCaches {
    /// What is observed.
    pub observed: ObservedKind,
    objects: Cache,
    chain: Vec<Cache>,
}

/// One kind's metadata cache and its owner index, fed by one watch.
struct Cache {
    store: Store<Meta>,
    owners: OwnerIndex,
    kind: ResolvedKind,
}

impl Cache {
    /// The uids of the cached objects controlled by any of `owners` in
    /// `namespace`, and the objects.
    fn owned_by<'a>(
        &'a self,
        owners: impl IntoIterator<Item = &'a String> + 'a,
        namespace: &'a str,
    ) -> impl Iterator<Item = Arc<Meta>> + 'a {
        owners.into_iter().flat_map(move |uid| {
            self.owners
                .owned(&self.store, &self.kind.resource, uid, namespace)
        })
    }
}

/// A change of an observed object (or of one in its chain).
pub type Changes = std::pin::Pin<Box<dyn Stream<Item = Result<Meta, watcher::Error>> + Send>>;

impl ObservedCaches {
    /// Starts watching `observed` (every namespace, metadata only); the
    /// returned streams must be polled (they fill the caches), each change
    /// tagged with the kind's resource.
    pub fn start(client: &Client, observed: &ObservedKind) -> (Self, Vec<(Changes, ResolvedKind)>) {
        let mut streams = Vec::new();
        let (objects, changes) = watch(client, &observed.kind);
        streams.push((changes, observed.kind.clone()));
        let mut chain = Vec::new();
        for kind in &observed.through {
            let (store, changes) = watch(client, kind);
            chain.push(store);
            streams.push((changes, kind.clone()));
        }
        (
            Self {
                observed: observed.clone(),
                objects,
                chain,
            },
            streams,
        )
    }

    /// The observed objects in `namespace` that descend from the children
    /// with `uids`: each step down the chain a lookup in its owner index.
    pub fn of(&self, uids: &HashSet<String>, namespace: &str) -> Vec<Arc<Meta>> {
        let mut owners = uids.clone();
        for cache in &self.chain {
            owners = cache
                .owned_by(&owners, namespace)
                .filter_map(|obj| obj.metadata.uid.clone())
                .collect();
        }
        self.objects.owned_by(&owners, namespace).collect()
    }

    /// The controller of `meta` at the top of the chain (a child, by its
    /// namespace, name and uid), if the chain's caches hold every step.
    /// `level` is how many chain kinds are above `meta`: the chain's length
    /// for an observed object, fewer for one of the chain.
    pub fn child_above(&self, meta: &ObjectMeta, level: usize) -> Option<(String, String, String)> {
        let namespace = meta.namespace.clone()?;
        let mut owner = controller(meta)?;
        for step in (0..level).rev() {
            let store = &self.chain.get(step)?.store;
            let key =
                ObjectRef::new_with(&owner.name, self.observed.through[step].resource.clone())
                    .within(&namespace);
            let above = store.get(&key)?;
            if above.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
                return None;
            }
            owner = controller(&above.metadata)?;
        }
        Some((namespace, owner.name, owner.uid))
    }

    /// How many chain kinds are above an object of `kind`.
    pub fn level_of(&self, kind: &ResolvedKind) -> usize {
        if kind.resource == self.observed.kind.resource {
            return self.chain.len();
        }
        self.observed
            .through
            .iter()
            .position(|k| k.resource == kind.resource)
            .unwrap_or(0)
    }
}

fn watch(client: &Client, kind: &ResolvedKind) -> (Cache, Changes) {
    let writer = Writer::new(kind.resource.clone());
    let store = writer.as_reader();
    let owners = OwnerIndex::default();
    let indexed = owners.clone();
    // An Api of metadata only: the watch asks for PartialObjectMetadata.
    let api = Api::<Meta>::all_with(client.clone(), &kind.resource);
    let changes = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|obj| obj.managed_fields_mut().clear())
        .map_ok(move |event| {
            indexed.apply_watcher_event(&event);
            event
        })
        .reflect(writer)
        .touched_objects()
        .boxed();
    let cache = Cache {
        store,
        owners,
        kind: kind.clone(),
    };
    (cache, changes)
}

fn controller(
    meta: &ObjectMeta,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .cloned()
}
