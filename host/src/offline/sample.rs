//! A steady-state sample for benchmarks and tests that feed a plugin
//! without a cluster: one Jinghzhu whose `desired` equals its pod count and
//! that many owned pods, Running and Ready, with the labels, owner
//! reference, UIDs and resource versions a live cluster gives them. A
//! plugin reads every pod and proposes nothing.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::crd::{Jinghzhu, JinghzhuSpec};

/// The Jinghzhu `web` in `default` with `pods` owned pods `web-00000`….
pub fn steady_objects(pods: usize) -> (Jinghzhu, Vec<Pod>) {
    let mut jz = Jinghzhu::new(
        "web",
        JinghzhuSpec {
            desired: u32::try_from(pods).unwrap_or(u32::MAX),
            template: None,
        },
    );
    jz.metadata.namespace = Some("default".into());
    jz.metadata.uid = Some("uid-web".into());
    jz.metadata.generation = Some(1);
    jz.metadata.resource_version = Some("1234".into());
    let pods = (0..pods)
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("web-{i:05}")),
                namespace: Some("default".into()),
                uid: Some(format!("0b7c5f8e-3a52-4a8e-9d7b-{i:012}")),
                resource_version: Some(format!("{}", 1000 + i)),
                labels: Some(
                    [
                        ("app.kubernetes.io/managed-by", "wasm-operator"),
                        ("jinghzhu.io/owner", "web"),
                    ]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
                ),
                owner_references: Some(vec![OwnerReference {
                    api_version: "jinghzhu.io/v1".into(),
                    kind: "Jinghzhu".into(),
                    name: "web".into(),
                    uid: "uid-web".into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
        .collect();
    (jz, pods)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::is_controlled_by;

    #[test]
    fn every_pod_is_owned_and_desired_matches() {
        let (jz, pods) = steady_objects(3);
        assert_eq!(jz.spec.desired, 3);
        assert_eq!(pods.len(), 3);
        assert!(pods.iter().all(|p| is_controlled_by(p, "uid-web")));
    }
}
