//! Reading a Jinghzhu and its pods from YAML or JSON files, as `kubectl get
//! -o yaml` writes them: single objects, multi-document YAML, or `kind: List`.
//! Pods not controlled by the Jinghzhu are dropped, as in the cluster.

use std::path::Path;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use crate::crd::Jinghzhu;
use crate::ownership::owned_pods;

/// One reconcile's input read from files.
#[derive(Debug, Clone)]
pub struct OfflineInput {
    /// The object.
    pub jinghzhu: Jinghzhu,
    /// Its owned pods.
    pub pods: Vec<Pod>,
}

/// Reads every object from `paths` and picks the Jinghzhu and its pods.
pub fn read(paths: &[impl AsRef<Path>]) -> Result<OfflineInput> {
    let mut objects = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        objects
            .extend(parse_objects(&text).with_context(|| format!("parsing {}", path.display()))?);
    }
    from_objects(objects)
}

/// Splits YAML/JSON text into objects, flattening `kind: List`.
pub fn parse_objects(text: &str) -> Result<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = serde_json::Value::deserialize(document)?;
        flatten(value, &mut out);
    }
    Ok(out)
}

fn flatten(value: serde_json::Value, out: &mut Vec<serde_json::Value>) {
    match value {
        serde_json::Value::Null => {}
        serde_json::Value::Object(ref map)
            if map
                .get("kind")
                .and_then(|k| k.as_str())
                .is_some_and(|k| k.ends_with("List")) =>
        {
            if let Some(serde_json::Value::Array(items)) = map.get("items") {
                for item in items.clone() {
                    flatten(item, out);
                }
            }
        }
        other => out.push(other),
    }
}

fn from_objects(objects: Vec<serde_json::Value>) -> Result<OfflineInput> {
    let mut jinghzhus = Vec::new();
    let mut pods = Vec::new();
    for object in objects {
        let kind = object
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "Jinghzhu" => jinghzhus
                .push(serde_json::from_value::<Jinghzhu>(object).context("invalid Jinghzhu")?),
            "Pod" => pods.push(serde_json::from_value::<Pod>(object).context("invalid Pod")?),
            "" => bail!(
                "an object without `kind`: inputs are Kubernetes objects (kubectl get -o yaml)"
            ),
            other => tracing::debug!(
                kind = other,
                "ignoring an object that is neither a Jinghzhu nor a Pod"
            ),
        }
    }
    let jinghzhu = match jinghzhus.len() {
        1 => jinghzhus.remove(0),
        0 => bail!("no Jinghzhu in the input (apiVersion: jinghzhu.io/v1, kind: Jinghzhu)"),
        n => bail!("{n} Jinghzhus in the input; give exactly one"),
    };
    if jinghzhu.metadata.uid.is_none() && !pods.is_empty() {
        bail!(
            "the Jinghzhu has no metadata.uid, so no pod can be owned by it: add a uid (kubectl output has one)"
        );
    }
    // Like `kubectl apply`, an object without a namespace lands in the
    // Jinghzhu's (files written by hand often leave it out).
    for pod in &mut pods {
        if pod.metadata.namespace.is_none() {
            pod.metadata
                .namespace
                .clone_from(&jinghzhu.metadata.namespace);
        }
    }
    let all = pods.len();
    let pods = owned_pods(&pods, &jinghzhu);
    if pods.len() < all {
        tracing::debug!(
            ignored = all - pods.len(),
            "ignoring pods not controlled by the Jinghzhu (no controller ownerReference with its uid)"
        );
    }
    Ok(OfflineInput { jinghzhu, pods })
}

#[cfg(test)]
mod tests {
    use super::*;

    const JZ: &str = r#"{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","metadata":{"name":"web","namespace":"shop","uid":"u1"},"spec":{"desired":2}}"#;

    fn pod(name: &str, owner_uid: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","ownerReferences":[{{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","name":"web","uid":"{owner_uid}","controller":true}}]}},"status":{{"phase":"Running"}}}}"#
        )
    }

    fn owned_names(text: &str) -> Vec<String> {
        let objects = parse_objects(text).expect("parse");
        let input = from_objects(objects).expect("input");
        input
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    }

    #[test]
    fn reads_lists_multi_document_yaml_and_json() {
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"List","items":[{JZ},{},{}]}}"#,
            pod("web-b", "u1"),
            pod("web-a", "u1")
        );
        assert_eq!(owned_names(&list), ["web-a", "web-b"]);
        let multi = format!(
            "{JZ}\n---\n{}\n---\n{}\n",
            pod("web-a", "u1"),
            pod("other", "u2")
        );
        assert_eq!(owned_names(&multi), ["web-a"]);
    }

    #[test]
    fn needs_exactly_one_jinghzhu() {
        let none = parse_objects(&pod("web-a", "u1")).expect("parse");
        assert!(format!("{:#}", from_objects(none).expect_err("no jz")).contains("no Jinghzhu"));
        let two = parse_objects(&format!("{JZ}\n---\n{JZ}")).expect("parse");
        assert!(from_objects(two).is_err());
    }
}
