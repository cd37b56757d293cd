//! Scenario tests of the memcached plugin's reconcile, natively: a fresh
//! Memcached (the whole Deployment body), nothing to do, a scale, a stray
//! Deployment, pods listed or not (sorted, terminating and foreign ones
//! skipped), the status comparison, invalid specs and a parent being
//! deleted.

mod support;

use memcached_plugin::{ChildRef, EventType, ReconcileOutput, reconcile};
use serde_json::{Value, json};
use support::*;

fn run(input: &memcached_plugin::ReconcileInput) -> ReconcileOutput {
    reconcile(input).expect("reconcile succeeds")
}

fn status_of(out: &ReconcileOutput) -> Value {
    json_of(out.status_json.as_deref().expect("a status write"))
}

fn sample(size: i64, status: Value) -> memcached_plugin::Object {
    parent(&json!({ "spec": { "size": size }, "status": status }))
}

#[test]
fn a_fresh_memcached_gets_one_deployment_of_its_size() {
    let out = run(&input(
        parent(&json!({ "spec": { "size": 3 } })),
        vec![deployments(vec![])],
    ));
    assert_eq!(out.apply.len(), 1);
    let d = &out.apply[0];
    assert_eq!(
        (d.api_version.as_str(), d.kind.as_str(), d.name.as_str()),
        ("apps/v1", "Deployment", NAME)
    );
    assert_eq!(
        d.labels,
        vec![
            kv("app.kubernetes.io/name", "memcached"),
            kv("app.kubernetes.io/instance", NAME),
            kv("app.kubernetes.io/managed-by", "memcached-plugin"),
        ]
    );
    assert!(d.annotations.is_empty());
    let selector =
        json!({ "app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": NAME });
    let expected = json!({ "spec": {
        "replicas": 3,
        "selector": { "matchLabels": selector },
        "template": {
            "metadata": { "labels": selector },
            "spec": {
                "securityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
                "containers": [{
                    "name": "memcached",
                    "image": "memcached:1.6.26-alpine",
                    "imagePullPolicy": "Always",
                    "command": ["memcached", "--memory-limit=64", "-o", "modern", "-v"],
                    "ports": [{ "containerPort": 11211, "name": "memcached", "protocol": "TCP" }],
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 1001,
                        "allowPrivilegeEscalation": false,
                        "capabilities": { "drop": ["ALL"] },
                    },
                }],
            },
        },
    }});
    assert_eq!(json_of(&d.body_json), expected);
    assert!(out.delete.is_empty());
    assert_eq!(
        status_of(&out),
        json!({ "nodes": [], "readyReplicas": 0, "observedGeneration": 1 })
    );
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].event_type, EventType::Normal);
    assert_eq!(out.events[0].reason, "Created");
    assert_eq!(
        out.events[0].message,
        "Created Deployment memcached-sample with 3 replicas"
    );
    assert_eq!(out.requeue_after_ms, None);
}

#[test]
fn container_port_comes_from_the_spec() {
    let p = parent(&json!({ "spec": { "size": 1, "containerPort": 9999 } }));
    let out = run(&input(p, vec![deployments(vec![])]));
    let body = json_of(&out.apply[0].body_json);
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        9999
    );
}

#[test]
fn a_converged_memcached_writes_no_status_and_records_no_event() {
    let status = json!({ "nodes": ["memcached-sample-a", "memcached-sample-b", "memcached-sample-c"], "readyReplicas": 3, "observedGeneration": 1 });
    let pod_list = [
        "memcached-sample-a",
        "memcached-sample-b",
        "memcached-sample-c",
    ]
    .map(|n| pod(n, NAME, false));
    let out = run(&input(
        sample(3, status),
        vec![
            deployments(vec![deployment(NAME, 3, 3)]),
            pods(pod_list.to_vec()),
        ],
    ));
    assert_eq!(out.status_json, None);
    assert!(out.events.is_empty());
    assert!(out.delete.is_empty());
    // The desired state is still proposed: the host's apply leaves it alone.
    assert_eq!(out.apply.len(), 1);
    assert_eq!(json_of(&out.apply[0].body_json)["spec"]["replicas"], 3);
}

#[test]
fn a_status_without_nodes_and_pods_unlisted_is_not_rewritten() {
    // The API server may drop an empty list: absent nodes count as [].
    let status = json!({ "readyReplicas": 2, "observedGeneration": 1, "conditions": [] });
    let out = run(&input(
        sample(2, status),
        vec![deployments(vec![deployment(NAME, 2, 2)])],
    ));
    assert_eq!(out.status_json, None);
}

#[test]
fn a_size_change_scales_the_deployment_and_says_so() {
    let mut p = sample(
        5,
        json!({ "nodes": [], "readyReplicas": 3, "observedGeneration": 1 }),
    );
    p.metadata.generation = 2;
    let out = run(&input(p, vec![deployments(vec![deployment(NAME, 3, 3)])]));
    assert_eq!(json_of(&out.apply[0].body_json)["spec"]["replicas"], 5);
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].reason, "Scaled");
    assert_eq!(
        out.events[0].message,
        "Deployment memcached-sample scaled from 3 to 5"
    );
    assert_eq!(
        status_of(&out),
        json!({ "nodes": [], "readyReplicas": 3, "observedGeneration": 2 })
    );
}

#[test]
fn ready_replicas_follow_the_deployment_and_foreign_status_fields_stay() {
    let status =
        json!({ "nodes": [], "readyReplicas": 1, "observedGeneration": 1, "note": "kept" });
    let out = run(&input(
        sample(3, status),
        vec![deployments(vec![deployment(NAME, 3, 2)])],
    ));
    assert_eq!(
        status_of(&out),
        json!({ "nodes": [], "readyReplicas": 2, "observedGeneration": 1, "note": "kept" })
    );
    assert!(out.events.is_empty());
}

#[test]
fn a_stray_deployment_is_deleted_and_the_owned_one_kept() {
    let existing = vec![deployment("memcached-old", 1, 1), deployment(NAME, 3, 3)];
    let out = run(&input(sample(3, json!({})), vec![deployments(existing)]));
    assert_eq!(
        out.delete,
        vec![ChildRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "memcached-old".into()
        }]
    );
    assert_eq!(out.apply.len(), 1);
    assert_eq!(out.apply[0].name, NAME);
}

#[test]
fn nodes_are_the_sorted_live_pods_of_this_memcached() {
    let listed = vec![
        pod("memcached-sample-z", NAME, false),
        pod("memcached-sample-a", NAME, false),
        pod("memcached-sample-gone", NAME, true),
        pod("other-x", "other", false),
        pod("memcached-sample-m", NAME, false),
    ];
    let out = run(&input(
        sample(3, json!({})),
        vec![deployments(vec![deployment(NAME, 3, 3)]), pods(listed)],
    ));
    assert_eq!(
        status_of(&out)["nodes"],
        json!([
            "memcached-sample-a",
            "memcached-sample-m",
            "memcached-sample-z"
        ])
    );
}

#[test]
fn nodes_empty_when_the_host_lists_no_pods() {
    let status = json!({ "nodes": ["stale"], "readyReplicas": 3, "observedGeneration": 1 });
    let out = run(&input(
        sample(3, status),
        vec![deployments(vec![deployment(NAME, 3, 3)])],
    ));
    assert_eq!(status_of(&out)["nodes"], json!([]));
}

fn error_of(body_json: &str) -> memcached_plugin::ReconcileError {
    let mut p = parent(&json!({}));
    p.body_json = body_json.to_string();
    reconcile(&input(p, vec![deployments(vec![])])).expect_err("an invalid spec fails")
}

#[test]
fn an_invalid_spec_is_a_non_retryable_error_naming_the_field() {
    for (body, needle) in [
        (r#"{"spec":{}}"#, "spec.size is missing"),
        (
            r#"{"spec":{"size":-1}}"#,
            "spec.size must be an integer from 0 to 100, got -1",
        ),
        (r#"{"spec":{"size":101}}"#, "got 101"),
        (r#"{"spec":{"size":2.5}}"#, "got 2.5"),
        (r#"{"spec":{"size":"3"}}"#, r#"got "3""#),
        (
            r#"{"spec":{"size":3,"containerPort":0}}"#,
            "spec.containerPort must be an integer from 1 to 65535",
        ),
        (r#"{}"#, "spec is missing"),
        (r#"{"spec":[]}"#, "spec must be an object"),
        ("not json", "is not JSON"),
        ("[1]", "is not a JSON object"),
    ] {
        let error = error_of(body);
        assert!(!error.retryable, "{body}: {error:?}");
        assert!(
            error
                .message
                .starts_with("Memcached default/memcached-sample: "),
            "{body}: {}",
            error.message
        );
        assert!(
            error.message.contains(needle),
            "{body}: {} lacks {needle}",
            error.message
        );
    }
}

#[test]
fn a_memcached_being_deleted_gets_an_empty_output() {
    let mut p = parent(&json!({ "spec": { "size": "broken" } }));
    p.metadata.deletion_timestamp = Some(at(2_500));
    let out = run(&input(
        p,
        vec![deployments(vec![
            deployment(NAME, 3, 3),
            deployment("stray", 1, 1),
        ])],
    ));
    assert!(out.apply.is_empty() && out.delete.is_empty() && out.events.is_empty());
    assert_eq!((out.status_json, out.requeue_after_ms), (None, None));
}

#[test]
fn a_child_body_that_is_not_json_is_a_retryable_error() {
    let mut owned = deployment(NAME, 3, 3);
    owned.body_json = "{".to_string();
    let error =
        reconcile(&input(sample(3, json!({})), vec![deployments(vec![owned])])).expect_err("fails");
    assert!(error.retryable);
    assert!(
        error
            .message
            .contains("Deployment memcached-sample is not JSON"),
        "{}",
        error.message
    );
}
