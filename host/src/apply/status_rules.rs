//! The fields of a proposed status the host can observe itself, checked
//! against what it observed (issue 40, hazard 10): a plugin may say what it
//! likes in `state`, `message` and its own words, but not that an object
//! has pods it has not, someone else's pods, or a generation nobody wrote.
//!
//! "Observed" is the snapshot the plugin was given: the object as cached
//! when the reconcile started and the pods it controls. A status describes
//! that snapshot, not the pods the proposal's own creates and deletes will
//! make: the Kubernetes ReplicaSet controller computes its status from the
//! pods it listed before it creates or deletes, the WIT record says
//! "number of live Pods" and "names of those Pods", and the example plugin
//! in all four languages reports the live pods it was given (the next
//! reconcile, queued by the new pods' events, reports them). Names of pods
//! a `generateName` create will get are not known before it is sent, so a
//! status "after the proposal" could not be checked at all.
//!
//! The rules, all under one rule id, [`RULE`]:
//! - `current` is the number of live pods (not terminating, not finished)
//!   the object controls;
//! - `podList` names exactly those pods (in any order, each once);
//! - `observedGeneration` is absent or the object's `metadata.generation`.
//!
//! `readyReplicas` and `reconciledBy` are the host's own and never taken
//! from a proposal ([`crate::observed::status_to_write`]).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::policy::Violation;
use crate::crd::{Jinghzhu, JinghzhuStatus};
use crate::observed::is_live;

/// The rule id of a status whose observable fields are not what the host
/// observed.
pub const RULE: &str = "status/observed-fields";

/// Most pod names quoted in one violation.
const NAMES_QUOTED: usize = 3;

/// Longest pod name quoted (escaped) in a violation.
const NAME_QUOTED_LEN: usize = 64;

/// The violations of `status`, proposed for `jz` whose controlled pods (the
/// snapshot the plugin was given) are `owned`; empty when it tells the truth.
pub fn check(jz: &Jinghzhu, owned: &[Pod], status: &JinghzhuStatus) -> Vec<Violation> {
    let mut broken = Vec::new();
    let live: BTreeSet<String> = owned
        .iter()
        .filter(|p| is_live(p))
        .map(ResourceExt::name_any)
        .collect();
    if usize::try_from(status.current).ok() != Some(live.len()) {
        broken.push(Violation {
            rule: RULE,
            message: format!(
                "status.current is {}, but the object has {} live pod(s)",
                status.current,
                live.len()
            ),
        });
    }
    if let Some(message) = pod_list_differs(&status.pod_list, &live) {
        broken.push(Violation {
            rule: RULE,
            message,
        });
    }
    let generation = jz.metadata.generation;
    if let Some(observed) = status.observed_generation
        && Some(observed) != generation
    {
        broken.push(Violation {
            rule: RULE,
            message: format!(
                "status.observedGeneration is {observed}, but the object's generation is {}",
                generation.map_or_else(|| "unset".to_string(), |g| g.to_string())
            ),
        });
    }
    broken
}

/// What is wrong with `listed` as the names of the `live` pods: names
/// listed twice, names of pods that are not live pods of the object, live
/// pods left out. `None` when it names each live pod once.
fn pod_list_differs(listed: &[String], live: &BTreeSet<String>) -> Option<String> {
    let mut seen = BTreeSet::new();
    let twice: Vec<&str> = listed
        .iter()
        .filter(|name| !seen.insert(name.as_str()))
        .map(String::as_str)
        .collect();
    let mut quoted_once = BTreeSet::new();
    let foreign: Vec<&str> = listed
        .iter()
        .map(String::as_str)
        .filter(|name| !live.contains(*name) && quoted_once.insert(*name))
        .collect();
    let missing: Vec<&str> = live
        .iter()
        .map(String::as_str)
        .filter(|name| !seen.contains(name))
        .collect();
    if twice.is_empty() && foreign.is_empty() && missing.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !foreign.is_empty() {
        parts.push(format!(
            "names {} that {} not a live pod of this object",
            quoted(&foreign),
            if foreign.len() == 1 { "is" } else { "are" }
        ));
    }
    if !missing.is_empty() {
        parts.push(format!("leaves out the live pod(s) {}", quoted(&missing)));
    }
    if !twice.is_empty() {
        parts.push(format!("lists {} more than once", quoted(&twice)));
    }
    Some(format!("status.podList {}", parts.join(", ")))
}

/// Up to [`NAMES_QUOTED`] names, escaped and cut, then how many more: how
/// a status rule's message names the objects a status got wrong.
pub fn quoted(names: &[&str]) -> String {
    let mut text = names
        .iter()
        .take(NAMES_QUOTED)
        .map(|name| format!("{:?}", crate::plugin_text::escape(name, NAME_QUOTED_LEN)))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMES_QUOTED {
        text.push_str(&format!(" and {} more", names.len() - NAMES_QUOTED));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_operator_testkit::jinghzhu;

    fn pod(name: &str, phase: &str) -> Pod {
        wasm_operator_testkit::pod(name).phase(phase).build()
    }

    fn web(generation: Option<i64>) -> Jinghzhu {
        let mut jz = jinghzhu("web").desired(3).build();
        jz.metadata.generation = generation;
        jz
    }

    fn status(current: u32, pods: &[&str], generation: Option<i64>) -> JinghzhuStatus {
        JinghzhuStatus {
            current,
            pod_list: pods.iter().map(|p| p.to_string()).collect(),
            state: "Running".into(),
            message: "anything the plugin likes".into(),
            observed_generation: generation,
            ..JinghzhuStatus::default()
        }
    }

    #[test]
    fn the_observed_snapshot_passes_whatever_the_state_and_message_say() {
        let terminating = wasm_operator_testkit::pod("web-c")
            .phase("Running")
            .terminating()
            .build();
        let owned = [
            pod("web-a", "Running"),
            pod("web-b", "Pending"),
            terminating,
            pod("web-d", "Failed"),
        ];
        let jz = web(Some(2));
        assert_eq!(
            check(&jz, &owned, &status(2, &["web-b", "web-a"], Some(2))),
            []
        );
        assert_eq!(
            check(&jz, &owned, &status(2, &["web-a", "web-b"], None)),
            []
        );
        assert_eq!(check(&web(None), &[], &status(0, &[], None)), []);
    }

    #[test]
    fn the_issue_s_lie_breaks_every_observable_field() {
        // Nothing created, `current: 3`, someone else's pods, 2^63-1.
        let jz = web(Some(1));
        let lie = status(3, &["db-0", "db-1", "db-2"], Some(i64::MAX));
        let broken = check(&jz, &[], &lie);
        assert_eq!(broken.len(), 3, "{broken:?}");
        assert!(broken.iter().all(|v| v.rule == RULE));
        assert!(broken[0].message.contains("current is 3"), "{broken:?}");
        assert!(broken[1].message.contains("\"db-0\""), "{broken:?}");
        assert!(broken[2].message.contains("9223372036854775807"));
    }

    #[test]
    fn each_pod_list_lie_is_named() {
        let owned = [pod("web-a", "Running"), pod("web-b", "Running")];
        let jz = web(Some(1));
        let text = |pods: &[&str]| {
            check(&jz, &owned, &status(2, pods, None))
                .iter()
                .map(ToString::to_string)
                .collect::<String>()
        };
        assert!(text(&["web-a", "db-0"]).contains("names \"db-0\""));
        assert!(text(&["web-a"]).contains("leaves out the live pod(s) \"web-b\""));
        assert!(text(&["web-a", "web-a", "web-b"]).contains("more than once"));
        // Terminating or finished pods are not live: listing one is a lie.
        let owned = [pod("web-a", "Running"), pod("web-b", "Succeeded")];
        assert_eq!(
            check(&jz, &owned, &status(2, &["web-a", "web-b"], None)).len(),
            2
        );
        // Many foreign names: three quoted, escaped, and a count.
        let names = ["x\ny", "b", "c", "d", "e"];
        let message = text(&names);
        assert!(message.contains("\"x\\\\ny\""), "{message}");
        assert!(message.contains("and 2 more"), "{message}");
    }

    #[test]
    fn an_older_or_newer_generation_is_refused() {
        let jz = web(Some(5));
        for generation in [4, 6, 0, -1] {
            assert_eq!(
                check(&jz, &[], &status(0, &[], Some(generation))).len(),
                1,
                "{generation}"
            );
        }
        assert_eq!(check(&web(None), &[], &status(0, &[], Some(1))).len(), 1);
    }
}
