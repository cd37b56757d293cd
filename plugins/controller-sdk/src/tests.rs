//! The SDK's reading of inputs and writing of outputs.

use std::time::Duration;

use crate::testing::{self, Fixture};
use crate::{Desired, Event, EventType, Input, Output, json};

fn fixture() -> Fixture {
    Fixture::parent("example.com/v1", "WebApp", "web")
        .spec(json!({ "replicas": 2 }))
        .status(json!({ "phase": "Ready" }))
        .declare("apps/v1", "Deployment")
        .declare("example.com/v1", "Deployment")
        .child(testing::object(
            "apps/v1",
            "Deployment",
            "web",
            json!({ "status": { "readyReplicas": 2 } }),
        ))
}

#[derive(serde::Deserialize)]
struct Spec {
    replicas: i32,
    #[serde(default)]
    image: Option<String>,
}

#[test]
fn reads_the_parent_and_its_children_by_kind() {
    let input = fixture().input().view();
    assert_eq!((input.name(), input.namespace()), ("web", "default"));
    assert_eq!(input.parent_kind(), ("example.com/v1", "WebApp"));
    assert_eq!(input.spec()["replicas"], json!(2));
    assert_eq!(input.status()["phase"], json!("Ready"));
    let spec: Spec = input.spec_as().expect("a spec");
    assert_eq!((spec.replicas, spec.image), (2, None));
    assert_eq!(input.children("Deployment").count(), 1);
    assert_eq!(input.children("apps/v1/Deployment").count(), 1);
    assert_eq!(input.children("example.com/v1/Deployment").count(), 0);
    assert!(input.declares("example.com/v1/Deployment") && !input.declares("Service"));
    let child = input.child("Deployment", "web").expect("the child");
    assert_eq!(child.field("/status/readyReplicas"), Some(json!(2)));
    assert_eq!(child.meta().owner_references[0].uid, "uid-web");
}

#[test]
fn a_spec_that_does_not_fit_is_a_permanent_error() {
    let input = fixture().spec(json!({ "replicas": "two" })).input().view();
    let err = input.spec_as::<Spec>().err().expect("an error");
    assert!(!err.retryable);
    assert!(err.message.contains("invalid spec"), "{}", err.message);
    let absent = Fixture::parent("example.com/v1", "WebApp", "web")
        .input()
        .view();
    assert!(absent.spec_as::<Spec>().is_err(), "replicas has no default");
}

#[test]
fn a_status_equal_to_the_stored_one_is_not_written() {
    let input = fixture().input().view();
    let mut out = Output::new();
    out.set_status(&input, json!({ "phase": "Ready" }));
    assert_eq!(out.status, None);
    out.set_status(&input, json!({ "phase": "Creating" }));
    assert_eq!(out.status, Some(json!({ "phase": "Creating" })));
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Owned {
    ready_replicas: i64,
    nodes: Vec<String>,
}

#[test]
fn merged_status_fields_keep_the_others_and_write_only_a_change() {
    let owned = |ready: i64| Owned {
        ready_replicas: ready,
        nodes: Vec::new(),
    };
    let stored = |status| fixture().status(status).input().view();
    let mut out = Output::new();
    let input = stored(json!({ "phase": "Ready", "readyReplicas": 1, "nodes": [] }));
    out.merge_status(&input, &owned(2)).expect("merged");
    assert_eq!(
        out.status,
        Some(json!({ "phase": "Ready", "readyReplicas": 2, "nodes": [] })),
        "the other field is kept"
    );
    out.merge_status(&input, &owned(1)).expect("merged");
    assert_eq!(out.status, None, "nothing changed");
    let dropped = stored(json!({ "phase": "Ready", "nodes": null }));
    out.merge_status(&dropped, &owned(0)).expect("merged");
    assert_eq!(out.status, None, "absent and null read as zero values");
    let fresh = Fixture::parent("example.com/v1", "WebApp", "web")
        .input()
        .view();
    out.merge_status(&fresh, &json!({ "url": "http://web" }))
        .expect("merged");
    assert_eq!(out.status, Some(json!({ "url": "http://web" })));
    out.merge_status(&fresh, &json!({ "url": "" }))
        .expect("merged");
    assert_eq!(out.status, None, "an empty string is a string's zero value");
    let err = out.merge_status(&fresh, &json!([1])).expect_err("an error");
    assert!(!err.retryable && err.message.contains("not a JSON object"));
}

#[test]
fn the_output_goes_on_the_wire_as_the_host_reads_it() {
    let mut out = Output::new();
    out.apply(
        Desired::new("v1", "ConfigMap", "web")
            .label("b", "2")
            .labels([("a", "1")])
            .annotation("note", "x")
            .body(json!({ "data": { "k": "v" } })),
    )
    .delete("v1", "Pod", "old")
    .event(Event::warning("Odd", "something odd"))
    .requeue_after(Duration::from_secs(30));
    out.status = Some(json!({ "phase": "Ready" }));
    let wire = out.into_wire().expect("wire");
    let child = &wire.apply[0];
    let labels: Vec<(&str, &str)> = child
        .labels
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_str()))
        .collect();
    assert_eq!(labels, [("a", "1"), ("b", "2")], "sorted by key");
    assert_eq!(child.body_json, r#"{"data":{"k":"v"}}"#);
    assert_eq!(wire.delete[0].name, "old");
    assert_eq!(wire.status_json.as_deref(), Some(r#"{"phase":"Ready"}"#));
    assert_eq!(wire.requeue_after_ms, Some(30_000));
    assert_eq!(wire.events[0].event_type, EventType::Warning);
}

#[test]
fn bodies_and_statuses_that_are_not_objects_are_refused() {
    let mut out = Output::new();
    out.apply(Desired::new("v1", "ConfigMap", "web").body(json!([1])));
    assert!(out.into_wire().is_err());
    let out = Output {
        status: Some(json!("Ready")),
        ..Output::new()
    };
    assert!(out.into_wire().is_err());
}

#[test]
fn a_parent_from_a_manifest() {
    let manifest = json!({
        "apiVersion": "example.com/v1",
        "kind": "WebApp",
        "metadata": { "name": "site", "namespace": "prod", "labels": { "tier": "web" } },
        "spec": { "replicas": 3 },
    });
    let built = Fixture::from_manifest(&manifest).expect("a parent").input();
    let input: Input = built.view();
    assert_eq!((input.name(), input.namespace()), ("site", "prod"));
    assert_eq!(input.label("tier"), Some("web"));
    assert_eq!(input.spec()["replicas"], json!(3));
    assert!(testing::from_manifest(&json!({ "kind": "X" })).is_err());
}

#[test]
fn a_parent_body_that_is_not_a_json_object_is_a_permanent_error() {
    for (body, needle) in [("nope", "is not JSON"), ("[1]", "is not a JSON object")] {
        let mut raw = fixture().input().raw().clone();
        raw.parent.body_json = body.into();
        let err = Input::new(raw).expect_err("an error");
        assert!(
            !err.retryable && err.message.contains(needle),
            "{body}: {err:?}"
        );
    }
}
