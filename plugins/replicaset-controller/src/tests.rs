//! The plugin on inputs as the host builds them (`testing::Fixture`).

use wasm_operator_controller_sdk::testing::{self, Fixture};
use wasm_operator_controller_sdk::{Object, prelude::*, serde_json};

use crate::ReplicaSetController;

fn jinghzhu(desired: u64) -> Fixture {
    Fixture::parent("jinghzhu.io/v1", "Jinghzhu", "web")
        .spec(json!({ "desired": desired }))
        .declare("v1", "Pod")
}

fn pod(name: &str, phase: &str, ready: bool) -> Object {
    let ready = if ready { "True" } else { "False" };
    testing::object(
        "v1",
        "Pod",
        name,
        json!({
            "spec": {},
            "status": { "phase": phase, "conditions": [{ "type": "Ready", "status": ready }] },
        }),
    )
}

fn run(fixture: &Fixture) -> Output {
    testing::reconcile::<ReplicaSetController>(fixture).expect("a proposal")
}

#[test]
fn creates_the_missing_pods_under_stable_names_with_the_default_spec() {
    let out = run(&jinghzhu(3));
    let names: Vec<&str> = out.applied("Pod").map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    assert_eq!(
        out.apply[0].field("/spec/containers/0/image"),
        Some(&json!("registry.k8s.io/pause:3.10"))
    );
    let status = out.status.expect("a status");
    assert_eq!(status["current"], json!(0));
    assert_eq!(status["state"], json!("Scaling"));
    assert_eq!(status["observedGeneration"], json!(1));
}

#[test]
fn fills_the_free_names_only() {
    let fixture = jinghzhu(3)
        .child(pod("web-0", "Running", true))
        .child(pod("web-2", "Pending", false));
    let out = run(&fixture);
    let names: Vec<&str> = out.applied("Pod").map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["web-1"]);
    let status = out.status.expect("a status");
    assert_eq!(status["current"], json!(2));
    assert_eq!(status["readyReplicas"], json!(1));
    assert_eq!(status["podList"], json!(["web-0", "web-2"]));
}

#[test]
fn deletes_the_surplus_not_ready_first() {
    let fixture = jinghzhu(1)
        .child(pod("web-0", "Running", true))
        .child(pod("web-1", "Pending", false))
        .child(pod("web-2", "Running", true));
    let out = run(&fixture);
    assert!(out.apply.is_empty());
    assert_eq!(out.delete.len(), 2);
    assert!(
        out.delete
            .iter()
            .any(|(_, kind, name)| kind == "Pod" && name == "web-1")
    );
}

#[test]
fn a_converged_jinghzhu_gets_no_writes() {
    let converged = jinghzhu(1).child(pod("web-0", "Running", true));
    let status = run(&converged).status.expect("the first status");
    let out = run(&converged.status(status));
    assert_eq!(out, Output::new(), "nothing to apply, delete or write");
}

#[test]
fn the_template_is_carried_to_the_pods() {
    let fixture = Fixture::parent("jinghzhu.io/v1", "Jinghzhu", "web")
        .spec(json!({
            "desired": 1,
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "c", "image": "example/web:1" }] },
            },
        }))
        .declare("v1", "Pod");
    let out = run(&fixture);
    let pod = out.applied("Pod").next().expect("a pod");
    assert_eq!(pod.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        pod.field("/spec/containers/0/image"),
        Some(&json!("example/web:1"))
    );
}

#[test]
fn a_spec_without_desired_is_refused() {
    let fixture = Fixture::parent("jinghzhu.io/v1", "Jinghzhu", "web").declare("v1", "Pod");
    let err = testing::reconcile::<ReplicaSetController>(&fixture).expect_err("no desired");
    assert!(err.message.contains("spec.desired"), "{}", err.message);
    assert!(!err.retryable);
}

#[test]
fn the_wire_output_is_what_the_host_reads() {
    let out = run(&jinghzhu(1)).into_wire().expect("wire");
    assert_eq!(out.apply.len(), 1);
    let body: Value = serde_json::from_str(&out.apply[0].body_json).expect("JSON");
    assert!(body["spec"]["containers"].is_array());
    assert!(out.status_json.is_some());
}
