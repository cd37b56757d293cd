//! The objects one reconcile sees, read from YAML or JSON files as
//! `kubectl get -o yaml` writes them (one object, several documents, or a
//! `kind: List`): exactly one parent of the declared kind, children of the
//! declared child kinds, and objects of the observed kinds and of the kinds
//! between a child and them. The plugin is shown what the host would show
//! it: per child kind, in declaration order, the objects in the parent's
//! namespace that the parent controls (a controller owner reference with
//! its uid), sorted by name; per observed kind, metadata only, the objects
//! descending from those children through the declared chain.

use std::collections::HashSet;
use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use kube::ResourceExt;
use kube::core::DynamicObject;

use super::OfflineDeclaration;
use crate::declared::kinds::ResolvedKind;
use crate::runtime::bindings::v3;
use crate::runtime::convert_v3;

/// The cluster as far as one parent's reconcile goes.
#[derive(Debug, Clone)]
pub struct State {
    /// The parent.
    pub parent: DynamicObject,
    /// Objects of each declared child kind, in declaration order (owned or
    /// not: [`State::owned`] picks the parent's).
    pub children: Vec<Vec<DynamicObject>>,
    /// Objects of the observed kinds and their chains, as read.
    pub others: Vec<DynamicObject>,
}

/// Reads every object from `paths` into a [`State`].
pub fn read(paths: &[impl AsRef<Path>], declaration: &OfflineDeclaration) -> Result<State> {
    let mut objects = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        objects.extend(
            crate::offline::input::parse_objects(&text)
                .with_context(|| format!("parsing {}", path.display()))?,
        );
    }
    from_objects(objects, declaration)
}

/// Sorts `objects` into the parent, the children per kind and the others.
pub fn from_objects(
    objects: Vec<serde_json::Value>,
    declaration: &OfflineDeclaration,
) -> Result<State> {
    let mut parents = Vec::new();
    let mut children = vec![Vec::new(); declaration.children.len()];
    let mut others = Vec::new();
    for value in objects {
        let object: DynamicObject = serde_json::from_value(value)
            .context("an object that is not a Kubernetes object (apiVersion, kind, metadata)")?;
        let Some(types) = object.types.clone() else {
            bail!(
                "an object without apiVersion and kind: inputs are Kubernetes objects (kubectl get -o yaml)"
            );
        };
        let is = |kind: &ResolvedKind| {
            kind.declared.api_version == types.api_version && kind.declared.kind == types.kind
        };
        if is(&declaration.parent) {
            parents.push(object);
        } else if let Some(i) = declaration.children.iter().position(|(k, ..)| is(k)) {
            children[i].push(object);
        } else if declaration
            .observed
            .iter()
            .any(|(kind, through)| is(kind) || through.iter().any(is))
        {
            others.push(object);
        } else {
            bail!(
                "{}/{} {}: {} declares no such kind (parent {}, children {}{})",
                types.api_version,
                types.kind,
                object.name_any(),
                declaration.describe(),
                declaration.parent.declared,
                names(declaration.children.iter().map(|(k, ..)| k)),
                if declaration.observed.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", observed {}",
                        names(declaration.observed.iter().map(|(k, _)| k))
                    )
                }
            );
        }
    }
    let parent = match parents.len() {
        1 => parents.remove(0),
        0 => bail!(
            "no {} in the input (the parent kind of {})",
            declaration.parent.declared,
            declaration.describe()
        ),
        n => bail!(
            "{n} objects of the parent kind {} in the input; give exactly one",
            declaration.parent.declared
        ),
    };
    let namespace = parent.namespace().with_context(|| {
        format!(
            "the {} has no metadata.namespace: a parent is namespaced",
            declaration.parent.declared
        )
    })?;
    if parent.uid().is_none() && children.iter().any(|kind| !kind.is_empty()) {
        bail!(
            "the {} has no metadata.uid, so no child can be owned by it: add a uid (kubectl output has one)",
            declaration.parent.declared
        );
    }
    // Like `kubectl apply`, an object without a namespace lands in the
    // parent's (files written by hand often leave it out).
    for object in children.iter_mut().flatten().chain(others.iter_mut()) {
        if object.metadata.namespace.is_none() {
            object.metadata.namespace = Some(namespace.clone());
        }
    }
    Ok(State {
        parent,
        children,
        others,
    })
}

fn names<'a>(kinds: impl Iterator<Item = &'a ResolvedKind>) -> String {
    let all: Vec<String> = kinds.map(|k| k.declared.to_string()).collect();
    if all.is_empty() {
        "none".into()
    } else {
        all.join(", ")
    }
}

impl State {
    /// The parent's namespace (checked when read).
    pub fn namespace(&self) -> String {
        self.parent.namespace().unwrap_or_default()
    }

    /// `namespace/name` of the parent.
    pub fn parent_key(&self) -> String {
        format!("{}/{}", self.namespace(), self.parent.name_any())
    }

    /// The parent's uid.
    pub fn uid(&self) -> String {
        self.parent.uid().unwrap_or_default()
    }

    /// The children of each declared kind that the parent controls.
    pub fn owned(&self) -> Vec<Vec<&DynamicObject>> {
        let (namespace, uid) = (self.namespace(), self.uid());
        self.children
            .iter()
            .map(|kind| {
                kind.iter()
                    .filter(|child| controlled_by(child, &uid, &namespace))
                    .collect()
            })
            .collect()
    }

    /// The contract 0.3 input, as the host builds it from its caches.
    pub fn input(&self, declaration: &OfflineDeclaration, now: SystemTime) -> v3::ReconcileInput {
        let owned = self.owned();
        let mut children: Vec<v3::Children> = declaration
            .children
            .iter()
            .zip(&owned)
            .map(|((kind, ..), objects)| {
                convert_v3::children(
                    &kind.declared.api_version,
                    &kind.declared.kind,
                    objects.iter().copied(),
                )
            })
            .collect();
        let uids: HashSet<String> = owned.iter().flatten().filter_map(|c| c.uid()).collect();
        for (kind, through) in &declaration.observed {
            let objects = self
                .descending(&uids, kind, through)
                .into_iter()
                .map(|obj| {
                    convert_v3::metadata_only(
                        &obj.metadata,
                        &kind.declared.api_version,
                        &kind.declared.kind,
                    )
                })
                .collect();
            children.push(convert_v3::sorted(
                &kind.declared.api_version,
                &kind.declared.kind,
                objects,
            ));
        }
        let parent_kind = &declaration.parent.declared;
        v3::ReconcileInput {
            parent: convert_v3::object(&self.parent, &parent_kind.api_version, &parent_kind.kind),
            children,
            now: convert_v3::timestamp(now),
        }
    }

    /// The objects of `kind` controlled, through a chain of `through`
    /// objects, by one of the objects with `uids`.
    fn descending(
        &self,
        uids: &HashSet<String>,
        kind: &ResolvedKind,
        through: &[ResolvedKind],
    ) -> Vec<&DynamicObject> {
        self.descending_with_chain(uids, kind, through)
            .pop()
            .unwrap_or_default()
    }

    /// [`State::descending`] with the objects of each step of the chain
    /// before them: one list per kind of `through`, then `kind`'s.
    fn descending_with_chain(
        &self,
        uids: &HashSet<String>,
        kind: &ResolvedKind,
        through: &[ResolvedKind],
    ) -> Vec<Vec<&DynamicObject>> {
        let namespace = self.namespace();
        let mut owners = uids.clone();
        let mut steps = Vec::new();
        for step in through.iter().chain([kind]) {
            let found: Vec<&DynamicObject> = self
                .of_kind(step, &namespace)
                .filter(|o| controller_uid(o).is_some_and(|uid| owners.contains(uid)))
                .collect();
            owners = found.iter().filter_map(|o| o.uid()).collect();
            steps.push(found);
        }
        steps
    }

    /// Every object a reconcile of the parent reads, the parent first:
    /// the owned children, then per observed kind its chain's objects and
    /// its own (what `record` writes into a case).
    pub fn read_objects(&self, declaration: &OfflineDeclaration) -> Vec<&DynamicObject> {
        let owned = self.owned();
        let uids: HashSet<String> = owned.iter().flatten().filter_map(|c| c.uid()).collect();
        let mut out = vec![&self.parent];
        out.extend(owned.into_iter().flatten());
        for (kind, through) in &declaration.observed {
            out.extend(
                self.descending_with_chain(&uids, kind, through)
                    .into_iter()
                    .flatten(),
            );
        }
        out
    }

    /// The other objects of `kind` in `namespace`.
    fn of_kind<'s: 'k, 'k>(
        &'s self,
        kind: &'k ResolvedKind,
        namespace: &'k str,
    ) -> impl Iterator<Item = &'s DynamicObject> + use<'s, 'k> {
        self.others.iter().filter(move |o| {
            o.types.as_ref().is_some_and(|t| {
                t.api_version == kind.declared.api_version && t.kind == kind.declared.kind
            }) && o.metadata.namespace.as_deref() == Some(namespace)
        })
    }
}

fn controller_uid(object: &DynamicObject) -> Option<&str> {
    object
        .owner_references()
        .iter()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
}

/// Whether `child` is in `namespace` and controlled by the object `uid`.
pub fn controlled_by(child: &DynamicObject, uid: &str, namespace: &str) -> bool {
    child.metadata.namespace.as_deref() == Some(namespace)
        && child
            .owner_references()
            .iter()
            .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}
