//! Scenario tests of the memcached plugin's reconcile, natively: a fresh
//! Memcached (the whole Deployment body), nothing to do, a scale, a stray
//! Deployment, pods listed or not (sorted, terminating and foreign ones
//! skipped), the status comparison, invalid specs and a parent being
//! deleted.

mod support;

use support::*;
use wasm_operator_controller_sdk::{EventType, Output, json};

#[test]
fn a_fresh_memcached_gets_one_deployment_of_its_size() {
    let out = run(&parent(json!({ "size": 3 })));
    assert_eq!(out.apply.len(), 1);
    let d = &out.apply[0];
    assert_eq!(
        (d.api_version.as_str(), d.kind.as_str(), d.name.as_str()),
        ("apps/v1", "Deployment", NAME)
    );
    let labels: Vec<(&str, &str)> = d
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("app.kubernetes.io/instance", NAME),
            ("app.kubernetes.io/managed-by", "memcached-plugin"),
            ("app.kubernetes.io/name", "memcached"),
        ]
    );
    // Only the v2 build (hot-swap tests) annotates its Deployment.
    assert!(
        d.annotations
            .keys()
            .all(|key| key == "cache.example.com/plugin-build")
    );
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
    assert_eq!(d.body, expected);
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
    assert_eq!(out.requeue_after, None);
}

#[test]
fn container_port_comes_from_the_spec() {
    let out = run(&parent(json!({ "size": 1, "containerPort": 9999 })));
    assert_eq!(
        out.apply[0].field("/spec/template/spec/containers/0/ports/0/containerPort"),
        Some(&json!(9999))
    );
}

#[test]
fn a_converged_memcached_writes_no_status_and_records_no_event() {
    let status = json!({ "nodes": ["memcached-sample-a", "memcached-sample-b", "memcached-sample-c"], "readyReplicas": 3, "observedGeneration": 1 });
    let pods = [
        "memcached-sample-a",
        "memcached-sample-b",
        "memcached-sample-c",
    ]
    .map(|n| pod(n, NAME, false));
    let fixture = with(sample(3, status), [deployment(NAME, 3, 3)]);
    let out = run(&with(fixture, pods));
    assert_eq!(out.status, None);
    assert!(out.events.is_empty());
    assert!(out.delete.is_empty());
    // The desired state is still proposed: the host's apply leaves it alone.
    assert_eq!(out.apply.len(), 1);
    assert_eq!(out.apply[0].field("/spec/replicas"), Some(&json!(3)));
}

#[test]
fn a_status_without_nodes_and_pods_unlisted_is_not_rewritten() {
    // The API server may drop an empty list: absent nodes count as [].
    let status = json!({ "readyReplicas": 2, "observedGeneration": 1, "conditions": [] });
    let out = run(&with(sample(2, status), [deployment(NAME, 2, 2)]));
    assert_eq!(out.status, None);
}

#[test]
fn a_size_change_scales_the_deployment_and_says_so() {
    let fixture = sample(
        5,
        json!({ "nodes": [], "readyReplicas": 3, "observedGeneration": 1 }),
    )
    .generation(2);
    let out = run(&with(fixture, [deployment(NAME, 3, 3)]));
    assert_eq!(out.apply[0].field("/spec/replicas"), Some(&json!(5)));
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
    let out = run(&with(sample(3, status), [deployment(NAME, 3, 2)]));
    assert_eq!(
        status_of(&out),
        json!({ "nodes": [], "readyReplicas": 2, "observedGeneration": 1, "note": "kept" })
    );
    assert!(out.events.is_empty());
}

#[test]
fn a_stray_deployment_is_deleted_and_the_owned_one_kept() {
    let existing = [deployment("memcached-old", 1, 1), deployment(NAME, 3, 3)];
    let out = run(&with(sample(3, json!({})), existing));
    assert_eq!(
        out.delete,
        [(
            "apps/v1".to_owned(),
            "Deployment".to_owned(),
            "memcached-old".to_owned()
        )]
    );
    assert_eq!(out.apply.len(), 1);
    assert_eq!(out.apply[0].name, NAME);
}

#[test]
fn nodes_are_the_sorted_live_pods_of_this_memcached() {
    let listed = [
        pod("memcached-sample-z", NAME, false),
        pod("memcached-sample-a", NAME, false),
        pod("memcached-sample-gone", NAME, true),
        pod("other-x", "other", false),
        pod("memcached-sample-m", NAME, false),
    ];
    let fixture = with(sample(3, json!({})), [deployment(NAME, 3, 3)]);
    let out = run(&with(fixture, listed));
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
    let out = run(&with(sample(3, status), [deployment(NAME, 3, 3)]));
    assert_eq!(status_of(&out)["nodes"], json!([]));
}

#[test]
fn an_invalid_spec_is_a_non_retryable_error_naming_the_field() {
    let no_spec = || {
        wasm_operator_controller_sdk::testing::Fixture::parent(
            "cache.example.com/v1alpha1",
            "Memcached",
            NAME,
        )
    };
    for (fixture, needle) in [
        (parent(json!({})), "spec.size is missing"),
        (
            parent(json!({ "size": -1 })),
            "spec.size must be an integer from 0 to 100, got -1",
        ),
        (parent(json!({ "size": 101 })), "got 101"),
        (parent(json!({ "size": 2.5 })), "got 2.5"),
        (parent(json!({ "size": "3" })), r#"got "3""#),
        (
            parent(json!({ "size": 3, "containerPort": 0 })),
            "spec.containerPort must be an integer from 1 to 65535",
        ),
        (no_spec(), "spec is missing"),
        (parent(json!([])), "spec must be an object"),
    ] {
        let error = reconcile(&fixture).expect_err("an invalid spec fails");
        assert!(!error.retryable, "{needle}: {error:?}");
        assert!(
            error
                .message
                .starts_with("Memcached default/memcached-sample: "),
            "{needle}: {}",
            error.message
        );
        assert!(
            error.message.contains(needle),
            "{} lacks {needle}",
            error.message
        );
    }
}

#[test]
fn a_memcached_being_deleted_gets_an_empty_output() {
    let fixture = parent(json!({ "size": "broken" })).deleting();
    let out = run(&with(
        fixture,
        [deployment(NAME, 3, 3), deployment("stray", 1, 1)],
    ));
    assert_eq!(out, Output::new());
}

#[test]
fn a_child_body_that_is_not_json_is_an_error_naming_the_child() {
    let mut owned = deployment(NAME, 3, 3);
    owned.body_json = "{".to_string();
    let error = reconcile(&with(sample(3, json!({})), [owned])).expect_err("fails");
    assert!(
        error
            .message
            .contains("Deployment memcached-sample is not JSON"),
        "{}",
        error.message
    );
}

#[test]
fn the_v2_build_marks_its_deployment_and_version() {
    use wasm_operator_controller_sdk::Controller;
    let out = run(&parent(json!({ "size": 1 })));
    let marker = out.apply[0]
        .annotations
        .get("cache.example.com/plugin-build")
        .map(String::as_str);
    let version = memcached_plugin::Memcached::info().version;
    if cfg!(feature = "v2") {
        assert_eq!(marker, Some("v2"));
        assert!(version.ends_with("+v2"), "{version}");
    } else {
        assert_eq!(marker, None);
        assert!(!version.contains('+'), "{version}");
    }
}
