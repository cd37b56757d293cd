//! Simulated nodes: kwok's Stages (what its fake kubelets do), the fake
//! Node objects it manages, and the annotations tests use to steer pods.
//!
//! kwok acts only on Nodes carrying [`NODE_ANNOTATION`]`=fake` and on Pods
//! bound to them (kube-scheduler binds them). Its behaviour comes entirely
//! from the Stages in `tests/control-plane/kwok/stages.yaml`, compiled into
//! this crate: a new Node becomes Ready, a scheduled Pod becomes Running and
//! Ready with a pod IP, a Pod annotated [`FAIL_ANNOTATION`] fails, and a Pod
//! being deleted disappears when its grace period ends. Pods never complete
//! on their own.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

/// The Stages kwok runs with (kwok ships none of its own).
pub const KWOK_STAGES: &str = include_str!("../kwok/stages.yaml");

/// Annotation that puts a Node under kwok's management (value `fake`).
pub const NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// Pod annotation: `"true"` makes the Pod fail (phase Failed, not ready,
/// containers terminated with exit code 1). Works on Pending and Running Pods.
pub const FAIL_ANNOTATION: &str = "stage.jinghzhu.io/fail";

/// Pod annotation: how long after scheduling the Pod becomes Running and
/// Ready, as a Go duration (`"30s"`, `"1h"`). Default: 0.2 to 1 s.
pub const READY_AFTER_ANNOTATION: &str = "stage.jinghzhu.io/ready-after";

/// Node annotation our node-initialize Stage reads for the InternalIP.
pub const NODE_IP_ANNOTATION: &str = "stage.jinghzhu.io/node-ip";

/// Label on every fake Node (`type=kwok`), for selecting them.
pub const NODE_LABEL_SELECTOR: &str = "type=kwok";

/// Label with the fake Node's index: with more than one kwok process, each
/// manages the Nodes [`kwok_node_selector`] gives it.
pub const NODE_INDEX_LABEL: &str = "stage.jinghzhu.io/node-index";

/// The label selector of kwok process `process` of `processes` over Nodes
/// `0..count`: every `processes`-th index, starting at `process`. `None`
/// with a single process (it manages every fake Node).
pub fn kwok_node_selector(process: usize, processes: usize, count: usize) -> Option<String> {
    if processes <= 1 {
        return None;
    }
    let indices: Vec<String> = (process..count)
        .step_by(processes)
        .map(|index| index.to_string())
        .collect();
    Some(format!("{NODE_INDEX_LABEL} in ({})", indices.join(",")))
}

/// Pod IPs of Nodes without a podCIDR (ours all have one); kept apart from
/// the per-node ranges and the service range.
pub const KWOK_FALLBACK_CIDR: &str = "10.245.0.0/16";

/// The InternalIP of a Node without [`NODE_IP_ANNOTATION`].
pub const KWOK_FALLBACK_NODE_IP: &str = "10.89.255.254";

/// The name of fake Node number `index`.
pub fn node_name(index: usize) -> String {
    format!("kwok-node-{index}")
}

/// The most simulated Nodes a control plane can have: each gets its own
/// `10.244.<index>.0/24` and InternalIP `10.89.0.<index + 1>`.
pub const MAX_NODES: usize = 250;

/// The fake Node number `index` (below [`MAX_NODES`]): its own podCIDR
/// `10.244.<index>.0/24` and InternalIP `10.89.0.<index + 1>`.
pub fn fake_node(index: usize) -> Node {
    let name = node_name(index);
    let labels = BTreeMap::from([
        ("type".to_string(), "kwok".to_string()),
        ("kubernetes.io/hostname".to_string(), name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("kubernetes.io/role".to_string(), "agent".to_string()),
        (NODE_INDEX_LABEL.to_string(), index.to_string()),
    ]);
    let annotations = BTreeMap::from([
        (NODE_ANNOTATION.to_string(), "fake".to_string()),
        (
            NODE_IP_ANNOTATION.to_string(),
            format!("10.89.0.{}", index + 1),
        ),
        ("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string()),
    ]);
    Node {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(format!("10.244.{index}.0/24")),
            pod_cidrs: Some(vec![format!("10.244.{index}.0/24")]),
            ..NodeSpec::default()
        }),
        status: None,
    }
}

/// Creates fake Nodes `0..count` (those that exist already are kept).
pub async fn create_nodes(client: &kube::Client, count: usize) -> Result<()> {
    anyhow::ensure!(
        count <= MAX_NODES,
        "at most {MAX_NODES} simulated nodes (asked for {count})"
    );
    let nodes: Api<Node> = Api::all(client.clone());
    for index in 0..count {
        match nodes
            .create(&PostParams::default(), &fake_node(index))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => {
                return Err(err).with_context(|| format!("creating Node {}", node_name(index)));
            }
        }
    }
    Ok(())
}

/// True when the Node's `Ready` condition is `True`.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// True when the Node is Ready and no longer carries the
/// `node.kubernetes.io/not-ready` taint it was created with, so the
/// scheduler will place pods on it.
pub fn is_node_schedulable(node: &Node) -> bool {
    let not_ready_taint = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t.key == "node.kubernetes.io/not-ready")
        });
    is_node_ready(node) && !not_ready_taint
}

/// How many of the fake Nodes are Ready and schedulable.
pub async fn schedulable_nodes(client: &kube::Client) -> Result<usize> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default().labels(NODE_LABEL_SELECTOR))
        .await?;
    Ok(list.items.iter().filter(|n| is_node_schedulable(n)).count())
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[test]
    fn each_kwok_process_manages_its_own_nodes() {
        assert_eq!(kwok_node_selector(0, 1, 30), None);
        assert_eq!(
            kwok_node_selector(0, 2, 5).as_deref(),
            Some("stage.jinghzhu.io/node-index in (0,2,4)")
        );
        assert_eq!(
            kwok_node_selector(1, 2, 5).as_deref(),
            Some("stage.jinghzhu.io/node-index in (1,3)")
        );
        let node = fake_node(3);
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get(NODE_INDEX_LABEL).map(String::as_str), Some("3"));
    }

    #[test]
    fn nodes_are_distinct_and_managed_by_kwok() {
        let a = fake_node(0);
        let b = fake_node(2);
        assert_eq!(a.metadata.name.as_deref(), Some("kwok-node-0"));
        let annotations = a.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get(NODE_ANNOTATION).map(String::as_str),
            Some("fake")
        );
        assert_ne!(
            a.spec.as_ref().and_then(|s| s.pod_cidr.clone()),
            b.spec.as_ref().and_then(|s| s.pod_cidr.clone())
        );
        assert_eq!(
            b.metadata
                .annotations
                .unwrap_or_default()
                .get(NODE_IP_ANNOTATION)
                .map(String::as_str),
            Some("10.89.0.3")
        );
    }

    #[test]
    fn the_stages_parse_and_cover_the_lifecycle() {
        let names: Vec<String> = serde_yaml::Deserializer::from_str(KWOK_STAGES)
            .map(|doc| {
                let value = serde_yaml::Value::deserialize(doc).expect("a YAML document");
                assert_eq!(value["kind"].as_str(), Some("Stage"));
                value["metadata"]["name"]
                    .as_str()
                    .expect("a name")
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "node-initialize",
                "node-heartbeat",
                "pod-ready",
                "pod-fail",
                "pod-delete"
            ]
        );
        assert!(KWOK_STAGES.contains(FAIL_ANNOTATION));
        assert!(KWOK_STAGES.contains(READY_AFTER_ANNOTATION));
        assert!(KWOK_STAGES.contains(NODE_IP_ANNOTATION));
    }
}
