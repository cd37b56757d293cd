//! When a Memcached has converged, judged from outside: its Deployment
//! exists with `spec.size` replicas, all of them ready, and its status
//! (written for its current generation) names `spec.size` pods in
//! `status.nodes` and as many ready replicas.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;
use serde_json::Value;

/// How far a set of Memcacheds has come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Memcacheds seen.
    pub objects: usize,
    /// Of them, those with their Deployment at `spec.size` ready replicas.
    pub deployments_ready: usize,
    /// Of them, those converged (status too).
    pub converged: usize,
}

/// The progress of `memcacheds` with their `deployments` (by name).
pub fn progress(
    memcacheds: &[Arc<DynamicObject>],
    deployments: &BTreeMap<String, Arc<Deployment>>,
) -> Progress {
    let mut progress = Progress {
        objects: memcacheds.len(),
        ..Progress::default()
    };
    for memcached in memcacheds {
        let Some(size) = memcached.data.pointer("/spec/size").and_then(Value::as_i64) else {
            continue;
        };
        let name = memcached.metadata.name.as_deref().unwrap_or_default();
        let deployment_ready = deployments
            .get(name)
            .is_some_and(|d| deployment_at(d, size));
        if !deployment_ready {
            continue;
        }
        progress.deployments_ready += 1;
        if status_at(memcached, size) {
            progress.converged += 1;
        }
    }
    progress
}

/// The Deployment asks for `size` replicas and has them all ready.
fn deployment_at(deployment: &Deployment, size: i64) -> bool {
    let replicas = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let ready = deployment
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    i64::from(replicas) == size && i64::from(ready) == size
}

/// The Memcached's status names `size` pods and `size` ready replicas for
/// its current generation.
fn status_at(memcached: &DynamicObject, size: i64) -> bool {
    let status = memcached.data.get("status");
    let field = |name: &str| status.and_then(|s| s.get(name));
    let nodes = field("nodes").and_then(Value::as_array).map_or(0, Vec::len);
    let ready = field("readyReplicas").and_then(Value::as_i64).unwrap_or(0);
    let observed = field("observedGeneration").and_then(Value::as_i64);
    nodes as i64 == size && ready == size && observed == memcached.metadata.generation
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn memcached(name: &str, size: i64, status: Value) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                "metadata": {"name": name, "generation": 1},
                "spec": {"size": size}, "status": status,
            }))
            .expect("memcached"),
        )
    }

    fn deployment(name: &str, replicas: i32, ready: i32) -> (String, Arc<Deployment>) {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": {"readyReplicas": ready},
        }))
        .expect("deployment");
        (name.to_owned(), Arc::new(d))
    }

    #[test]
    fn converged_needs_the_deployment_ready_and_the_status_naming_the_pods() {
        let done = json!({"nodes": ["a-1", "a-2"], "readyReplicas": 2, "observedGeneration": 1});
        let memcacheds = [
            memcached("a", 2, done.clone()),
            memcached(
                "b",
                2,
                json!({"nodes": ["b-1"], "readyReplicas": 2, "observedGeneration": 1}),
            ),
            memcached("c", 2, done.clone()),
            memcached(
                "d",
                2,
                json!({"nodes": ["d-1", "d-2"], "readyReplicas": 2, "observedGeneration": 0}),
            ),
            memcached("e", 2, done),
        ];
        let deployments = BTreeMap::from([
            deployment("a", 2, 2),
            deployment("b", 2, 2),
            deployment("c", 2, 1),
            deployment("d", 2, 2),
        ]);
        assert_eq!(
            progress(&memcacheds, &deployments),
            Progress {
                objects: 5,
                deployments_ready: 3,
                converged: 1
            },
            "b lists one pod, c's Deployment is not ready, d's status is of an older \
             generation, e has no Deployment"
        );
    }
}
