//! Scenario tests of the replicaset plugin's reconcile, built with the SDK's
//! `testing` builders: scaling up and down (which Pods go), readiness and
//! the state it gives, terminating, failed and succeeded Pods, desired 0, no
//! status write when nothing changed, foreign Pods, a Jinghzhu being
//! deleted, the per-reconcile cap, and the `v2` variant.

use jinghzhu_plugin_sdk::log::Level;
use jinghzhu_plugin_sdk::types::{JinghzhuStatus, ReconcileInput, ReconcileOutput};
use jinghzhu_plugin_sdk::{log, status};
use replicaset_plugin::{BURST_REPLICAS, Variant, reconcile, reconcile_with};

use jinghzhu_plugin_sdk::kv;
use jinghzhu_plugin_sdk::testing::{InputBuilder, jinghzhu, pod};
use jinghzhu_plugin_sdk::types::{PodPhase, PodTemplate};

fn v1(input: impl Into<ReconcileInput>) -> ReconcileOutput {
    reconcile_with(&input.into(), Variant::V1)
}

fn status_of(out: &ReconcileOutput) -> &JinghzhuStatus {
    out.status.as_ref().expect("a status patch")
}

fn web(desired: u32) -> InputBuilder {
    jinghzhu("web", "default", desired).generation(2).input()
}

#[test]
fn scale_0_to_1_creates_one_and_leaves_the_spec_to_the_host() {
    log::take_captured();
    let out = v1(web(1));
    assert_eq!(out.create_pods.len(), 1);
    let create = &out.create_pods[0];
    assert_eq!(create.name, None);
    assert_eq!(create.generate_name.as_deref(), Some("web-"));
    // Without a template the plugin leaves the spec empty: the host fills in
    // its default (restricted-compliant) pod spec.
    assert_eq!(create.spec_json, "");
    assert!(out.delete_pods.is_empty());
    // No Event of the plugin's own: the host's SuccessfulCreate names the pod.
    assert!(out.events.is_empty(), "{:?}", out.events);
    let s = status_of(&out);
    assert_eq!((s.current, s.state.as_str()), (0, "Scaling"));
    assert!(s.pod_list.is_empty());
    assert_eq!(s.message, "0/1 pods, 0/1 ready; creating 1");
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(out.requeue_after_ms, None);
    let logged = log::take_captured();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].message, "scaling up");
    // At debug: the host's "actions applied" line is the one at info.
    assert_eq!(logged[0].level, Level::Debug);
    assert_eq!(logged[0].field("creating"), Some("1"));
}

#[test]
fn scale_0_to_3_uses_the_template() {
    let template = PodTemplate {
        labels: kv::from_pairs([("app", "web"), ("tier", "front")]),
        annotations: kv::from_pairs([("note", "hi")]),
        spec_json: r#"{"containers":[{"name":"web","image":"nginx:1.27"}]}"#.to_owned(),
    };
    let input = jinghzhu("web", "default", 3)
        .template(template.clone())
        .input();
    let out = v1(input);
    assert_eq!(out.create_pods.len(), 3);
    for c in &out.create_pods {
        assert_eq!(c.generate_name.as_deref(), Some("web-"));
        assert_eq!(c.labels, template.labels);
        assert_eq!(c.annotations, template.annotations);
        assert_eq!(c.spec_json, template.spec_json);
    }
    assert!(out.events.is_empty());
    assert_eq!(status_of(&out).message, "0/3 pods, 0/3 ready; creating 3");
}

#[test]
fn partial_scale_up_is_scaling() {
    let out = v1(web(3)
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Pending)));
    assert_eq!(out.create_pods.len(), 1);
    let s = status_of(&out);
    assert_eq!((s.current, s.state.as_str()), (2, "Scaling"));
    assert_eq!(s.pod_list, ["web-a", "web-b"]);
    assert_eq!(s.message, "2/3 pods, 1/3 ready; creating 1");
}

#[test]
fn the_right_count_is_pending_until_every_pod_runs_and_is_ready() {
    let converged = |pods: Vec<jinghzhu_plugin_sdk::testing::PodBuilder>| {
        let out = v1(web(3).pods(pods));
        assert!(out.create_pods.is_empty() && out.delete_pods.is_empty());
        assert!(out.events.is_empty());
        status_of(&out).clone()
    };
    let s = converged(vec![
        pod("web-a", PodPhase::Pending),
        pod("web-b", PodPhase::Pending),
        pod("web-c", PodPhase::Pending),
    ]);
    assert_eq!((s.current, s.state.as_str()), (3, "Pending"));
    assert_eq!(s.message, "3/3 pods, 0/3 ready");

    // Running but failing its readiness check is not ready either.
    let s = converged(vec![
        pod("web-a", PodPhase::Running),
        pod("web-b", PodPhase::Running).ready(false),
        pod("web-c", PodPhase::Running),
    ]);
    assert_eq!(
        (s.state.as_str(), s.message.as_str()),
        ("Pending", "3/3 pods, 2/3 ready")
    );

    let s = converged(vec![
        pod("web-a", PodPhase::Running),
        pod("web-b", PodPhase::Running),
        pod("web-c", PodPhase::Running),
    ]);
    assert_eq!(
        (s.state.as_str(), s.message.as_str()),
        ("Running", "3/3 pods, 3/3 ready")
    );
}

#[test]
fn readiness_changes_rewrite_the_status() {
    // The status written while the pod started says Pending...
    let starting = v1(web(1).pod(pod("web-a", PodPhase::Pending)));
    let written = status_of(&starting).clone();
    assert_eq!(written.state, "Pending");
    // ...and the same pod, now ready, makes it Running: a new status.
    let ready = jinghzhu("web", "default", 1)
        .generation(2)
        .status(written)
        .input()
        .pod(pod("web-a", PodPhase::Running));
    let out = v1(ready);
    assert!(out.create_pods.is_empty() && out.delete_pods.is_empty());
    assert_eq!(status_of(&out).state, "Running");
    assert_eq!(status_of(&out).message, "1/1 pods, 1/1 ready");
}

#[test]
fn scale_3_to_1_deletes_pending_and_not_ready_and_newest_first() {
    let input = web(1)
        .pod(pod("web-old", PodPhase::Running).created_at(100))
        .pod(pod("web-new", PodPhase::Running).created_at(500))
        .pod(
            pod("web-slow", PodPhase::Running)
                .ready(false)
                .created_at(50),
        );
    log::take_captured();
    let out = v1(input.clone());
    assert_eq!(out.delete_pods, ["web-slow", "web-new"]);
    assert!(out.create_pods.is_empty());
    // The host's SuccessfulDelete names the pods; the plugin adds no Event.
    assert!(out.events.is_empty(), "{:?}", out.events);
    let logged = log::take_captured();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].message, "scaling down");
    assert_eq!(logged[0].level, Level::Debug);
    assert_eq!(logged[0].field("deleting"), Some("web-slow,web-new"));
    let s = status_of(&out);
    assert_eq!((s.current, s.state.as_str()), (3, "Scaling"));
    assert_eq!(s.pod_list, ["web-new", "web-old", "web-slow"]);
    assert_eq!(s.message, "3/1 pods, 2/1 ready; deleting 2");

    let with_pending = v1(input.pod(pod("web-pending", PodPhase::Pending).created_at(10)));
    assert_eq!(
        with_pending.delete_pods,
        ["web-pending", "web-slow", "web-new"]
    );
}

#[test]
fn terminating_pods_are_neither_counted_nor_deleted_again() {
    // Desired met by the others: nothing to do, and the converged status
    // (which does not list the terminating pod) is already there.
    let converged = status::build(
        ["web-a", "web-b"],
        "Running",
        "2/2 pods, 2/2 ready",
        Some(2),
    );
    let input = jinghzhu("web", "default", 2)
        .generation(2)
        .status(converged)
        .input()
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Running))
        .pod(pod("web-c", PodPhase::Running).terminating());
    assert!(v1(input).is_empty());

    // Desired not met: replacements are created right away, the
    // terminating pods are left alone.
    let out = v1(web(2)
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Running).terminating())
        .pod(pod("web-c", PodPhase::Running).terminating()));
    assert_eq!(out.create_pods.len(), 1);
    assert!(out.delete_pods.is_empty());
    assert_eq!(status_of(&out).pod_list, ["web-a"]);

    // Too many live pods besides a terminating one: only live ones go.
    let out = v1(web(1)
        .pod(pod("web-a", PodPhase::Running).created_at(1))
        .pod(pod("web-b", PodPhase::Running).created_at(2))
        .pod(pod("web-c", PodPhase::Pending).terminating()));
    assert_eq!(out.delete_pods, ["web-b"]);

    // Scaled down 3 -> 1 with a grace period: once the two deletions show as
    // terminating, the one live pod is all that counts. Nothing is created
    // or deleted while they linger, and the state is Running.
    let lingering = jinghzhu("web", "default", 1)
        .generation(3)
        .input()
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Running).terminating())
        .pod(pod("web-c", PodPhase::Running).terminating());
    let out = v1(lingering);
    assert!(out.create_pods.is_empty() && out.delete_pods.is_empty());
    let s = status_of(&out);
    assert_eq!((s.current, s.state.as_str()), (1, "Running"));
    assert_eq!(s.message, "1/1 pods, 1/1 ready");

    // Scaled back up to 3 while they linger: 2 new pods, not 0 (the
    // terminating ones are going) and not 4.
    let back_up = v1(web(3)
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Running).terminating())
        .pod(pod("web-c", PodPhase::Running).terminating()));
    assert_eq!(back_up.create_pods.len(), 2);
    assert!(back_up.delete_pods.is_empty());
}

#[test]
fn finished_pods_do_not_count_and_are_replaced_not_deleted() {
    let out = v1(web(2)
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-done", PodPhase::Succeeded))
        .pod(pod("web-failed", PodPhase::Failed)));
    assert_eq!(out.create_pods.len(), 1);
    assert!(out.delete_pods.is_empty());
    let s = status_of(&out);
    assert_eq!(s.pod_list, ["web-a"]);
    assert_eq!(s.state, "Scaling");
    assert_eq!(s.message, "1/2 pods, 1/2 ready; creating 1");

    // Once the replacement exists, the failed pod is left alone: nothing
    // more is created for it and it is not deleted.
    let out = v1(web(2)
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Running))
        .pod(pod("web-failed", PodPhase::Failed)));
    assert!(out.create_pods.is_empty() && out.delete_pods.is_empty());
    assert_eq!(status_of(&out).state, "Running");
}

#[test]
fn desired_0_deletes_everything_live() {
    let out = v1(web(0)
        .pod(pod("web-a", PodPhase::Running).created_at(1))
        .pod(pod("web-b", PodPhase::Pending).created_at(2)));
    assert_eq!(out.delete_pods, ["web-b", "web-a"]);
    let s = status_of(&out);
    assert_eq!((s.current, s.state.as_str()), (2, "Scaling"));
    assert_eq!(s.message, "2/0 pods, 1/0 ready; deleting 2");

    let empty = v1(web(0));
    assert!(empty.create_pods.is_empty() && empty.delete_pods.is_empty());
    let s = status_of(&empty);
    assert_eq!((s.current, s.state.as_str()), (0, "Running"));
    assert_eq!(s.message, "0/0 pods, 0/0 ready");
}

#[test]
fn unchanged_state_gives_no_status_patch() {
    let first = v1(web(2)
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Pending)));
    let written = status_of(&first).clone();
    assert_eq!(written.state, "Pending", "web-b is not ready");
    assert!(first.events.is_empty() && first.create_pods.is_empty());

    let again = jinghzhu("web", "default", 2)
        .generation(2)
        .status(written.clone())
        .input()
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Pending));
    assert!(v1(again).is_empty());

    // A new generation with the same pods is a change worth writing.
    let bumped = jinghzhu("web", "default", 2)
        .generation(3)
        .status(written)
        .input()
        .pod(pod("web-a", PodPhase::Running))
        .pod(pod("web-b", PodPhase::Pending));
    assert_eq!(status_of(&v1(bumped)).observed_generation, Some(3));
}

#[test]
fn pods_of_other_owners_are_ignored() {
    let other = jinghzhu("other", "default", 1).build();
    let out = v1(web(1)
        .pod(pod("web-stray", PodPhase::Running).unowned())
        .pod(pod("other-a", PodPhase::Running).owned_by(&other)));
    assert_eq!(out.create_pods.len(), 1);
    assert!(out.delete_pods.is_empty());
    assert!(status_of(&out).pod_list.is_empty());
}

#[test]
fn nothing_is_created_or_deleted_while_the_owner_is_deleted() {
    let input = jinghzhu("web", "default", 3)
        .deleting_at(5)
        .input()
        .pod(pod("web-a", PodPhase::Running));
    let out = v1(input);
    assert!(out.create_pods.is_empty() && out.delete_pods.is_empty() && out.events.is_empty());
    assert_eq!(
        status_of(&out).message,
        "1/3 pods, 1/3 ready; Jinghzhu is being deleted"
    );
}

#[test]
fn creates_and_deletes_are_capped_per_reconcile() {
    let out = v1(web(2_000));
    assert_eq!(out.create_pods.len(), BURST_REPLICAS);
    assert_eq!(
        status_of(&out).message,
        "0/2000 pods, 0/2000 ready; creating 500"
    );

    let many: Vec<_> = (0..600)
        .map(|i| pod(&format!("web-{i:03}"), PodPhase::Running))
        .collect();
    let out = v1(web(0).pods(many));
    assert_eq!(out.delete_pods.len(), BURST_REPLICAS);
    assert_eq!(
        status_of(&out).message,
        "600/0 pods, 600/0 ready; deleting 500"
    );
}

#[test]
fn v2_prefixes_the_status_message() {
    let out = reconcile_with(&web(1).build(), Variant::V2);
    assert_eq!(
        status_of(&out).message,
        "[v2] 0/1 pods, 0/1 ready; creating 1"
    );
    // The v1 status is stale for a v2 plugin: it rewrites the message.
    let v1_status = status_of(&v1(web(0))).clone();
    let input = jinghzhu("web", "default", 0)
        .generation(2)
        .status(v1_status)
        .input()
        .build();
    assert!(reconcile_with(&input, Variant::V1).is_empty());
    assert_eq!(
        status_of(&reconcile_with(&input, Variant::V2)).message,
        "[v2] 0/0 pods, 0/0 ready"
    );
    assert_eq!(
        reconcile(&input) == reconcile_with(&input, Variant::V2),
        cfg!(feature = "v2")
    );
}

#[test]
fn no_observed_generation_when_untracked() {
    let input = jinghzhu("web", "default", 0).generation(0).input().build();
    assert_eq!(status_of(&v1(input)).observed_generation, None);
}
