//! Objects of any kind to contract 0.3 records (`wit/0.3/controller.wit`):
//! typed metadata, the rest of the object as one JSON text. The input is
//! built from the host's caches, which already hold objects without
//! `managedFields`; the few metadata fields a plugin never sees stay out.
//!
//! [`Records`] keeps the record of each cached object while its
//! `resourceVersion` holds, lending it to each call's input, so an
//! unchanged child is neither serialised nor copied again on every call
//! (most of a 0.3 input's cost was each child's body turned into JSON
//! text).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::DynamicObject;

use super::bindings::v3;

/// One object as the records see it. `api_version` and `kind` are the
/// resolved kind's (a cached object may lack its type meta).
pub fn object(obj: &DynamicObject, api_version: &str, kind: &str) -> v3::Object {
    v3::Object {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        metadata: meta(&obj.metadata),
        body_json: body_json(&obj.data),
    }
}

/// An object of which only the metadata is cached (an observed kind):
/// `body-json` is `{}`.
pub fn metadata_only(meta: &ObjectMeta, api_version: &str, kind: &str) -> v3::Object {
    v3::Object {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        metadata: self::meta(meta),
        body_json: "{}".to_string(),
    }
}

/// The children of one kind, sorted by name.
pub fn children<'o>(
    api_version: &str,
    kind: &str,
    objects: impl IntoIterator<Item = &'o DynamicObject>,
) -> v3::Children {
    let objects = objects
        .into_iter()
        .map(|obj| object(obj, api_version, kind))
        .collect();
    sorted(api_version, kind, objects)
}

/// Records of one kind, sorted by name.
pub fn sorted(api_version: &str, kind: &str, mut objects: Vec<v3::Object>) -> v3::Children {
    objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    v3::Children {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        objects,
    }
}

/// Records of one kind's objects by uid, each kept while the object's
/// `resourceVersion` is the one it was made from, at most `most` of them
/// (past that, one is dropped for each new one). A call's input takes the
/// records out ([`Records::take_children`]: nothing is copied) and they are
/// put back after the call ([`Records::put_back`]); the owner of the cache
/// the objects come from calls [`Records::forget`] when an object goes.
#[derive(Debug)]
pub struct Records {
    api_version: String,
    kind: String,
    most: usize,
    by_uid: Mutex<HashMap<String, v3::Object>>,
}

impl Records {
    /// Records of `api_version`/`kind`, at most `most` kept.
    pub fn new(api_version: &str, kind: &str, most: usize) -> Self {
        Self {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            most,
            by_uid: Mutex::new(HashMap::new()),
        }
    }

    /// The record of `obj`: the kept one, taken out, if `obj` has its uid
    /// and `resourceVersion`, else a new one.
    pub fn take(&self, obj: &DynamicObject) -> v3::Object {
        let kept = obj.metadata.uid.as_deref().and_then(|uid| {
            let mut by_uid = self.lock();
            let version = obj.metadata.resource_version.as_deref()?;
            let fresh = by_uid
                .get(uid)
                .is_some_and(|kept| kept.metadata.resource_version == version);
            if fresh { by_uid.remove(uid) } else { None }
        });
        kept.unwrap_or_else(|| object(obj, &self.api_version, &self.kind))
    }

    /// The children record of `objects`, sorted by name, their kept
    /// records taken out.
    pub fn take_children<'o>(
        &self,
        objects: impl IntoIterator<Item = &'o DynamicObject>,
    ) -> v3::Children {
        let objects = objects.into_iter().map(|obj| self.take(obj)).collect();
        sorted(&self.api_version, &self.kind, objects)
    }

    /// Keeps the records of `children` (taken for a call) for the next;
    /// those without a uid or `resourceVersion` are not kept.
    pub fn put_back(&self, children: v3::Children) {
        if self.most == 0 {
            return;
        }
        let mut by_uid = self.lock();
        for record in children.objects {
            if record.metadata.uid.is_empty() || record.metadata.resource_version.is_empty() {
                continue;
            }
            if by_uid.len() >= self.most && !by_uid.contains_key(&record.metadata.uid) {
                let some = by_uid.keys().next().cloned();
                if let Some(some) = some {
                    by_uid.remove(&some);
                }
            }
            by_uid.insert(record.metadata.uid.clone(), record);
        }
    }

    /// Drops the record of the object `uid` (it left the cache).
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Keeps only the records of the uids `keep` answers true for (after
    /// a relist).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|uid, _| keep(uid));
    }

    /// How many records are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, v3::Object>> {
        self.by_uid.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A point in time as the records carry it.
pub fn timestamp(at: SystemTime) -> v3::Timestamp {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    v3::Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanoseconds: since.subsec_nanos(),
    }
}

/// Every top-level field but `apiVersion`, `kind` and `metadata` (already
/// out of `data` in a [`DynamicObject`]), as a JSON object text.
fn body_json(data: &serde_json::Value) -> String {
    match data {
        serde_json::Value::Object(fields) if !fields.is_empty() => data.to_string(),
        _ => "{}".to_string(),
    }
}

fn meta(meta: &ObjectMeta) -> v3::ObjectMeta {
    v3::ObjectMeta {
        name: meta.name.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        generation: meta.generation.unwrap_or_default(),
        labels: pairs(meta.labels.as_ref()),
        annotations: pairs(meta.annotations.as_ref()),
        creation_timestamp: meta.creation_timestamp.as_ref().map(time),
        deletion_timestamp: meta.deletion_timestamp.as_ref().map(time),
        owner_references: meta
            .owner_references
            .iter()
            .flatten()
            .map(|owner| v3::OwnerReference {
                api_version: owner.api_version.clone(),
                kind: owner.kind.clone(),
                name: owner.name.clone(),
                uid: owner.uid.clone(),
                controller: owner.controller.unwrap_or(false),
            })
            .collect(),
    }
}

/// Sorted by key (a `BTreeMap` iterates in order).
fn pairs(map: Option<&std::collections::BTreeMap<String, String>>) -> Vec<v3::KeyValue> {
    map.into_iter()
        .flatten()
        .map(|(key, value)| v3::KeyValue {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

fn time(at: &Time) -> v3::Timestamp {
    v3::Timestamp {
        seconds: at.0.as_second(),
        nanoseconds: u32::try_from(at.0.subsec_nanosecond()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_keeps_its_metadata_typed_and_the_rest_as_json() {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cache.example.com/v1alpha1",
            "kind": "Memcached",
            "metadata": {
                "name": "cache", "namespace": "shop", "uid": "u-1", "generation": 3,
                "labels": {"b": "2", "a": "1"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u-0", "controller": true}]
            },
            "spec": {"size": 3}
        }))
        .expect("object");
        let record = object(&obj, "cache.example.com/v1alpha1", "Memcached");
        assert_eq!(record.metadata.name, "cache");
        assert_eq!(record.metadata.generation, 3);
        assert_eq!(record.metadata.labels[0].key, "a");
        assert!(record.metadata.owner_references[0].controller);
        let body: serde_json::Value = serde_json::from_str(&record.body_json).expect("json");
        assert_eq!(body, serde_json::json!({"spec": {"size": 3}}));
    }

    fn config_map(uid: &str, version: &str, data: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": uid, "namespace": "ns", "uid": uid, "resourceVersion": version},
            "data": {"k": data}
        }))
        .expect("object")
    }

    #[test]
    fn a_kept_record_is_lent_while_its_version_holds() {
        let records = Records::new("v1", "ConfigMap", 8);
        let first = config_map("a", "1", "x");
        let lent = records.take_children([&first]);
        assert_eq!(lent.objects[0], object(&first, "v1", "ConfigMap"));
        assert!(records.is_empty(), "nothing kept until put back");
        records.put_back(lent);
        assert_eq!(records.len(), 1);
        // The same version with other content can only be the kept record.
        let same_version = config_map("a", "1", "changed");
        let lent = records.take_children([&same_version]);
        assert!(lent.objects[0].body_json.contains("\"x\""));
        assert!(records.is_empty(), "taken out, not copied");
        records.put_back(lent);
        // A new version is converted again and replaces it.
        let next = config_map("a", "2", "y");
        let lent = records.take_children([&next]);
        assert!(lent.objects[0].body_json.contains("\"y\""));
        records.put_back(lent);
        assert_eq!(records.len(), 1);
        records.forget("a");
        assert!(records.is_empty());
    }

    #[test]
    fn records_are_bounded_and_retained_by_uid() {
        let records = Records::new("v1", "ConfigMap", 2);
        let all = ["a", "b", "c"].map(|uid| config_map(uid, "1", uid));
        records.put_back(records.take_children(&all));
        assert_eq!(records.len(), 2, "one dropped for the third");
        records.retain(|uid| uid == "c");
        assert_eq!(records.len(), 1);
        let kids = records.take_children([&config_map("d", "1", "d"), &config_map("c", "1", "c")]);
        assert_eq!(kids.objects[0].metadata.name, "c");
        assert_eq!(kids.kind, "ConfigMap");
        // Without a uid or version nothing is kept.
        let mut bare = config_map("e", "1", "e");
        bare.metadata.uid = None;
        records.put_back(records.take_children([&bare]));
        assert!(records.is_empty());
        let none = Records::new("v1", "ConfigMap", 0);
        none.put_back(none.take_children([&bare, &config_map("f", "1", "f")]));
        assert!(none.is_empty());
    }

    #[test]
    fn children_are_sorted_and_an_empty_body_is_an_empty_object() {
        let named = |name: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}
            }))
            .expect("object")
        };
        let (b, a) = (named("b"), named("a"));
        let kids = children("v1", "ConfigMap", [&b, &a]);
        assert_eq!(kids.objects[0].metadata.name, "a");
        assert_eq!(kids.objects[1].body_json, "{}");
    }
}
