//! What the API server would make of an input after a proposal is applied,
//! for the fixture runner's idempotence check (plugins/FIXTURES.md): created pods get
//! a deterministic generated name, the plugin's labels under the host's,
//! the controller ownerReference, `now` as creation time, phase Pending and
//! not ready; deleted pods vanish; the status is replaced.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::input::OfflineInput;
use crate::actions::ProposedActions;
use crate::ownership::{controller_reference, operator_labels};

/// Counts created pods across rounds, so generated names never repeat.
#[derive(Debug, Default)]
pub struct NameSerial(usize);

/// `input` after `actions`, as the API server (and the host's apply)
/// would leave it.
pub fn apply(
    mut input: OfflineInput,
    actions: &ProposedActions,
    now: SystemTime,
    serial: &mut NameSerial,
) -> OfflineInput {
    let namespace = input.jinghzhu.namespace();
    let owner = controller_reference(&input.jinghzhu);
    input
        .pods
        .retain(|p| !actions.delete_pods.contains(&p.name_any()));
    for create in &actions.create_pods {
        serial.0 += 1;
        let name = match (&create.name, &create.generate_name) {
            (Some(name), _) => name.clone(),
            (None, prefix) => format!(
                "{}{}",
                prefix.as_deref().unwrap_or("pod-"),
                suffix(serial.0)
            ),
        };
        let mut labels = create.labels.clone();
        labels.extend(operator_labels(&input.jinghzhu));
        input.pods.push(Pod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: namespace.clone(),
                uid: Some(format!("offline-uid-{}", serial.0)),
                labels: Some(labels),
                annotations: Some(create.annotations.clone()).filter(|a| !a.is_empty()),
                owner_references: owner.clone().map(|o| vec![o]),
                creation_timestamp: Timestamp::try_from(now).ok().map(Time),
                ..ObjectMeta::default()
            },
            spec: serde_json::from_value::<PodSpec>((*create.spec).clone()).ok(),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..PodStatus::default()
            }),
        });
    }
    input.pods.sort_by_key(|p| p.name_any());
    if let Some(status) = &actions.status {
        input.jinghzhu.status = Some(status.clone());
    }
    input
}

/// A 5-character suffix from the API server's alphabet, deterministic in `n`.
fn suffix(n: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut state = n.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    (0..5)
        .map(|_| {
            let c = ALPHABET[state % ALPHABET.len()] as char;
            state /= ALPHABET.len();
            state = state.wrapping_add(n.wrapping_mul(31)).wrapping_add(7);
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::PodToCreate;
    use crate::crd::JinghzhuStatus;
    use crate::ownership::owned_pods;

    #[test]
    fn created_pods_are_owned_and_named_and_deleted_pods_vanish() {
        let jz = wasm_operator_testkit::jinghzhu("web")
            .desired(2)
            .namespace("default")
            .uid("uid-1")
            .build();
        let input = OfflineInput {
            jinghzhu: jz,
            pods: vec![],
        };
        let create = PodToCreate {
            generate_name: Some("web-".into()),
            spec: std::sync::Arc::new(
                serde_json::json!({"containers": [{"name": "app", "image": "pause"}]}),
            ),
            ..PodToCreate::default()
        };
        let actions = ProposedActions {
            create_pods: vec![create.clone(), create],
            status: Some(JinghzhuStatus {
                state: "Pending".into(),
                ..JinghzhuStatus::default()
            }),
            ..ProposedActions::default()
        };
        let mut serial = NameSerial::default();
        let after = apply(input, &actions, SystemTime::now(), &mut serial);
        assert_eq!(owned_pods(&after.pods, &after.jinghzhu).len(), 2);
        let names: Vec<String> = after.pods.iter().map(|p| p.name_any()).collect();
        assert_ne!(names[0], names[1]);
        assert!(
            names.iter().all(|n| n.starts_with("web-") && n.len() == 9),
            "{names:?}"
        );
        assert_eq!(
            after.jinghzhu.status.as_ref().map(|s| s.state.as_str()),
            Some("Pending")
        );
        let gone = ProposedActions {
            delete_pods: vec![names[0].clone()],
            ..ProposedActions::default()
        };
        let after = apply(after, &gone, SystemTime::now(), &mut serial);
        assert_eq!(after.pods.len(), 1);
    }

    #[test]
    fn suffixes_differ() {
        let all: std::collections::BTreeSet<String> = (1..200).map(suffix).collect();
        assert_eq!(all.len(), 199);
    }
}
