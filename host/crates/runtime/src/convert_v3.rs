//! Objects of any kind to contract 0.3 records (`wit/0.3/controller.wit`):
//! typed metadata, the rest of the object as one JSON text. The input is
//! built from the host's caches, which already hold objects without
//! `managedFields`; the few metadata fields a plugin never sees stay out.

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
