//! Scenario tests of the static-site plugin's reconcile, natively: a fresh
//! site (all three bodies), the content hash (known values, a change rolls
//! the pods), nothing to do, a scale, a port, children of unexpected names,
//! invalid specs and names, and a parent being deleted.

mod support;

use static_site_plugin::hash::{content_hash, fnv1a_64};
use support::*;
use wasm_operator_controller_sdk::{EventType, Output, Value, json};

fn hello_status(ready: i64, hash: &str) -> Value {
    json!({ "url": "http://hello.web.svc:80", "readyReplicas": ready, "contentHash": hash, "observedGeneration": 1 })
}

#[test]
fn a_fresh_site_gets_a_config_map_a_deployment_and_a_service() {
    let out = run(&site(json!({ "content": index_only() }), Value::Null));
    let names: Vec<_> = out
        .apply
        .iter()
        .map(|c| (c.api_version.as_str(), c.kind.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("v1", "ConfigMap", "hello-content"),
            ("apps/v1", "Deployment", "hello"),
            ("v1", "Service", "hello")
        ]
    );
    for child in &out.apply {
        let labels: Vec<_> = child
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("app.kubernetes.io/instance", "hello"),
                ("app.kubernetes.io/managed-by", "static-site-plugin"),
                ("app.kubernetes.io/name", "static-site"),
            ]
        );
    }
    assert_eq!(
        body(&out, "ConfigMap"),
        json!({ "data": { "index.html": "<h1>Hello</h1>" } })
    );
    let selector =
        json!({ "app.kubernetes.io/name": "static-site", "app.kubernetes.io/instance": "hello" });
    assert_eq!(
        body(&out, "Service"),
        json!({ "spec": { "type": "ClusterIP", "selector": selector, "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }] } })
    );
    assert_eq!(body(&out, "Deployment"), expected_deployment(1, INDEX_HASH));
    assert!(out.delete.is_empty());
    assert_eq!(status_of(&out), hello_status(0, INDEX_HASH));
    let events: Vec<_> = out
        .events
        .iter()
        .map(|e| (e.event_type, e.reason.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        events,
        [
            (
                EventType::Normal,
                "Created",
                "Created ConfigMap hello-content"
            ),
            (EventType::Normal, "Created", "Created Deployment hello"),
            (EventType::Normal, "Created", "Created Service hello"),
        ]
    );
}

fn expected_deployment(replicas: i64, hash: &str) -> Value {
    let selector =
        json!({ "app.kubernetes.io/name": "static-site", "app.kubernetes.io/instance": "hello" });
    json!({ "spec": {
        "replicas": replicas,
        "selector": { "matchLabels": selector },
        "template": {
            "metadata": { "labels": selector, "annotations": { "web.example.com/content-hash": hash } },
            "spec": {
                "securityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
                "containers": [{
                    "name": "nginx",
                    "image": "nginxinc/nginx-unprivileged:1.27-alpine",
                    "imagePullPolicy": "Always",
                    "ports": [{ "containerPort": 8080, "name": "http", "protocol": "TCP" }],
                    "volumeMounts": [{ "name": "content", "mountPath": "/usr/share/nginx/html", "readOnly": true }],
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 101,
                        "allowPrivilegeEscalation": false,
                        "capabilities": { "drop": ["ALL"] },
                    },
                }],
                "volumes": [{ "name": "content", "configMap": { "name": "hello-content" } }],
            },
        },
    }})
}

#[test]
fn the_hash_is_fnv1a_64_over_length_prefixed_sorted_files() {
    assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    assert_eq!(content_hash(&Default::default()), "cbf29ce484222325");
    let two = [
        ("style.css", "h1 { color: teal; }"),
        ("index.html", "<h1>Hello</h1>"),
    ]
    .map(|(name, text)| (name.to_owned(), text.to_owned()))
    .into();
    assert_eq!(content_hash(&two), "7cf6e6cc698e20bc");
}

#[test]
fn a_content_change_changes_the_hash_and_rolls_the_pods() {
    let content = json!({ "index.html": "<h1>Hello</h1>", "style.css": "h1 { color: teal; }" });
    let p = site(json!({ "content": content }), hello_status(1, INDEX_HASH));
    let out = run(&with(p, converged(1, 1, INDEX_HASH)));
    assert_eq!(body(&out, "ConfigMap")["data"], content);
    assert_eq!(
        body(&out, "Deployment"),
        expected_deployment(1, "7cf6e6cc698e20bc")
    );
    assert_eq!(status_of(&out)["contentHash"], "7cf6e6cc698e20bc");
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].reason, "ContentChanged");
    assert_eq!(
        out.events[0].message,
        format!(
            "Content changed from hash {INDEX_HASH} to 7cf6e6cc698e20bc: rolling out Deployment hello"
        )
    );
}

#[test]
fn a_converged_site_writes_no_status_and_records_no_event() {
    let p = site(
        json!({ "content": index_only() }),
        hello_status(1, INDEX_HASH),
    );
    let out = run(&with(p, converged(1, 1, INDEX_HASH)));
    assert_eq!(out.status, None);
    assert!(out.events.is_empty());
    assert!(out.delete.is_empty());
    assert_eq!(out.apply.len(), 3);
}

#[test]
fn replicas_scale_and_ready_replicas_follow_the_deployment() {
    let p = site(
        json!({ "content": index_only(), "replicas": 3 }),
        hello_status(1, INDEX_HASH),
    );
    let out = run(&with(p, converged(1, 1, INDEX_HASH)));
    assert_eq!(body(&out, "Deployment")["spec"]["replicas"], 3);
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].reason, "Scaled");
    assert_eq!(out.events[0].message, "Deployment hello scaled from 1 to 3");
    // Not ready yet: the status still says 1 ready replica, so no write.
    assert_eq!(out.status, None);
    let p = site(
        json!({ "content": index_only(), "replicas": 3 }),
        hello_status(1, INDEX_HASH),
    );
    let out = run(&with(p, converged(3, 2, INDEX_HASH)));
    assert!(out.events.is_empty());
    assert_eq!(status_of(&out), hello_status(2, INDEX_HASH));
}

#[test]
fn the_port_goes_to_the_service_and_the_url() {
    let p = site(
        json!({ "content": index_only(), "port": 8081 }),
        hello_status(1, INDEX_HASH),
    );
    let out = run(&with(p, converged(1, 1, INDEX_HASH)));
    assert_eq!(body(&out, "Service")["spec"]["ports"][0]["port"], 8081);
    assert_eq!(
        body(&out, "Service")["spec"]["ports"][0]["targetPort"],
        8080
    );
    assert_eq!(status_of(&out)["url"], "http://hello.web.svc:8081");
}

#[test]
fn children_of_unexpected_names_are_deleted() {
    let children = [
        config_map("hello-content", &index_only()),
        config_map("hello-old", &json!({})),
        deployment("canary", 1, 1, INDEX_HASH),
        deployment(NAME, 1, 1, INDEX_HASH),
        service("hello-preview"),
        service(NAME),
    ];
    let p = site(
        json!({ "content": index_only() }),
        hello_status(1, INDEX_HASH),
    );
    let out = run(&with(p, children));
    let deleted = |api_version: &str, kind: &str, name: &str| {
        (api_version.to_owned(), kind.to_owned(), name.to_owned())
    };
    assert_eq!(
        out.delete,
        vec![
            deleted("v1", "ConfigMap", "hello-old"),
            deleted("apps/v1", "Deployment", "canary"),
            deleted("v1", "Service", "hello-preview")
        ]
    );
    assert_eq!(out.apply.len(), 3);
    assert!(out.events.is_empty());
}

#[test]
fn a_missing_child_is_created_again() {
    let children = [
        config_map("hello-content", &index_only()),
        deployment(NAME, 1, 1, INDEX_HASH),
    ];
    let p = site(
        json!({ "content": index_only() }),
        hello_status(1, INDEX_HASH),
    );
    let out = run(&with(p, children));
    assert_eq!(out.apply.len(), 3);
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].message, "Created Service hello");
}

fn error_of(name: &str, body: Value) -> wasm_operator_controller_sdk::ReconcileError {
    reconcile(&named(name, body)).expect_err("an invalid site fails")
}

#[test]
fn an_invalid_spec_is_a_non_retryable_error_naming_the_field() {
    for (spec, needle) in [
        (json!({}), "spec.content is missing"),
        (
            json!({ "content": "index" }),
            "spec.content must be a map of file name -> text",
        ),
        (
            json!({ "content": { "index.html": 3 } }),
            "spec.content.index.html must be a string, got 3",
        ),
        (
            json!({ "content": { "a/b.html": "" } }),
            r#"the file name "a/b.html""#,
        ),
        (json!({ "content": { "..": "" } }), r#"the file name "..""#),
        (
            json!({ "content": {}, "replicas": 11 }),
            "spec.replicas must be an integer from 0 to 10, got 11",
        ),
        (json!({ "content": {}, "replicas": -1 }), "got -1"),
        (
            json!({ "content": {}, "port": 0 }),
            "spec.port must be an integer from 1 to 65535, got 0",
        ),
        (json!({ "content": {}, "port": "80" }), r#"got "80""#),
    ] {
        let error = error_of(NAME, json!({ "spec": spec }));
        assert!(!error.retryable, "{spec}: {error:?}");
        assert!(
            error.message.starts_with("StaticSite web/hello: "),
            "{spec}: {}",
            error.message
        );
        assert!(
            error.message.contains(needle),
            "{spec}: {} lacks {needle}",
            error.message
        );
    }
    let error = error_of(NAME, json!({}));
    assert!(!error.retryable && error.message.contains("spec is missing"));
}

#[test]
fn too_much_content_and_unfit_names_are_refused() {
    let big = json!({ "spec": { "content": { "index.html": "x".repeat(1_000_000) } } });
    let error = error_of(NAME, big);
    assert!(
        !error.retryable
            && error
                .message
                .contains("more than the 1000000 a ConfigMap holds"),
        "{}",
        error.message
    );
    for name in ["1st-site", "my.site", "site-", &"a".repeat(64)] {
        let error = error_of(name, json!({ "spec": { "content": {} } }));
        assert!(
            !error.retryable && error.message.contains("cannot name a Service"),
            "{name}: {}",
            error.message
        );
    }
    let undeclared = wasm_operator_controller_sdk::testing::Fixture::parent(
        "web.example.com/v1alpha1",
        "StaticSite",
        NAME,
    )
    .spec(json!({ "content": {} }));
    assert!(reconcile(&undeclared).is_ok());
}

#[test]
fn a_site_being_deleted_gets_an_empty_output() {
    let p = site(json!({ "content": 3 }), Value::Null).deleting();
    let out = run(&with(p, converged(1, 1, INDEX_HASH)));
    assert_eq!(out, Output::new());
}

#[test]
fn a_child_body_that_is_not_json_is_an_error_naming_the_child() {
    let mut children = converged(1, 1, INDEX_HASH);
    children[1].body_json = "[".to_string();
    let p = site(json!({ "content": index_only() }), Value::Null);
    let error = reconcile(&with(p, children)).expect_err("fails");
    assert!(
        error.message.contains("Deployment hello is not JSON"),
        "{}",
        error.message
    );
}
