//! The builders make the objects they say: the host's own ownerReference
//! and labels, the cache's view of a pod, only the fields asked for.

use k8s_openapi::api::core::v1::Pod;
use wasm_operator_model::cached_pod::CachedPod;
use wasm_operator_model::crd::JinghzhuStatus;
use wasm_operator_model::ownership::{
    SHARD_LABEL, controller_reference, is_controlled_by, operator_labels, owned_pods,
};
use wasm_operator_testkit::{at_second, controller_of, jinghzhu, plugin_resource, pod};

#[test]
fn a_pod_controlled_by_a_jinghzhu_carries_the_host_s_reference_in_its_namespace() {
    let web = jinghzhu("web").namespace("shop").uid("uid-web").build();
    let made = pod("web-a").controlled_by(&web).build();
    assert_eq!(made.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(
        made.metadata.owner_references,
        Some(vec![controller_reference(&web).expect("a reference")])
    );
    assert!(made.metadata.labels.is_none());
    assert_eq!(owned_pods(std::slice::from_ref(&made), &web), [made]);
    // A namespace set first stays (a pod another namespace holds).
    let elsewhere = pod("web-b").namespace("other").controlled_by(&web).build();
    assert!(owned_pods(&[elsewhere], &web).is_empty());
}

#[test]
fn a_pod_the_host_created_carries_the_host_s_labels() {
    for labels in [vec![], vec![(SHARD_LABEL, "3-of-8"), ("team", "a")]] {
        let web = jinghzhu("web")
            .namespace("shop")
            .uid("uid-web")
            .labels(&labels)
            .build();
        let made = pod("web-a").created_by_host(&web).build();
        assert_eq!(made.metadata.labels, Some(operator_labels(&web)));
        assert!(is_controlled_by(&made, "uid-web"));
    }
}

#[test]
fn a_bare_controller_reference_names_the_jinghzhu_and_blocks_nothing() {
    let reference = controller_of("web", "u1");
    assert_eq!(
        (
            reference.api_version.as_str(),
            reference.kind.as_str(),
            reference.name.as_str(),
            reference.uid.as_str(),
            reference.controller,
            reference.block_owner_deletion
        ),
        ("jinghzhu.io/v1", "Jinghzhu", "web", "u1", Some(true), None)
    );
    assert!(is_controlled_by(
        &pod("a").controller("web", "u1").build(),
        "u1"
    ));
}

#[test]
fn a_pod_has_a_status_only_when_told() {
    let bare = pod("a").build();
    assert_eq!(
        bare,
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("a".into()),
                ..Default::default()
            },
            ..Pod::default()
        }
    );
    let running = pod("a").phase("Running").build();
    let status = running.status.expect("a status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(status.conditions.is_none());
    let unready = pod("a").ready(false).build().status.expect("a status");
    assert!(unready.phase.is_none());
    let conditions = unready.conditions.expect("conditions");
    assert_eq!(
        (conditions[0].type_.as_str(), conditions[0].status.as_str()),
        ("Ready", "False")
    );
}

#[test]
fn the_cached_pod_is_what_the_cache_keeps_of_the_pod() {
    let web = jinghzhu("web").namespace("shop").uid("uid-web").build();
    let cases = [
        pod("a").created_by_host(&web).phase("Running").ready(true),
        pod("b").controlled_by(&web).ready(false).terminating(),
        pod("c")
            .annotations(&[("note", "x")])
            .created_at(100)
            .resource_version("7"),
        pod("d"),
    ];
    for case in cases {
        let cached = case.clone().cached();
        assert_eq!(cached, CachedPod::from(&case.clone().build()));
        assert_eq!(cached.to_pod(), case.build());
    }
}

#[test]
fn a_jinghzhu_has_what_it_was_told_and_nothing_more() {
    let bare = jinghzhu("web").build();
    assert_eq!(bare.metadata.name.as_deref(), Some("web"));
    assert!(bare.metadata.namespace.is_none() && bare.metadata.uid.is_none());
    assert!(bare.metadata.labels.is_none() && bare.status.is_none());
    assert_eq!((bare.spec.desired, bare.spec.template.is_none()), (0, true));
    let status = JinghzhuStatus {
        current: 2,
        ..JinghzhuStatus::default()
    };
    let full = jinghzhu("web")
        .desired(3)
        .generation(4)
        .resource_version("12")
        .created_at(5)
        .labels(&[])
        .annotations(&[("a", "1")])
        .template_json(serde_json::json!({"metadata": {"labels": {"app": "web"}}}))
        .status(status.clone())
        .build();
    assert_eq!(full.spec.desired, 3);
    assert_eq!(full.metadata.generation, Some(4));
    assert_eq!(full.metadata.resource_version.as_deref(), Some("12"));
    assert_eq!(full.metadata.creation_timestamp, Some(at_second(5)));
    assert_eq!(full.metadata.labels, Some(Default::default()));
    assert_eq!(full.metadata.annotations.expect("annotations")["a"], "1");
    let template = full.spec.template.expect("a template");
    assert_eq!(
        template.metadata.expect("metadata").labels.expect("labels")["app"],
        "web"
    );
    assert_eq!(full.status, Some(status));
}

#[test]
fn a_plugin_resource_has_one_source() {
    let from_map = plugin_resource("p").config_map("ns", "plugin").build();
    let source = &from_map.spec.source;
    let map = source.config_map.as_ref().expect("a ConfigMap source");
    assert_eq!(
        (map.namespace.as_str(), map.name.as_str(), map.key.as_str()),
        ("ns", "plugin", "plugin.wasm")
    );
    let signed = plugin_resource("p")
        .config_map("ns", "plugin")
        .oci("registry.test/p:1")
        .verified_by("ns", "release-key")
        .serving_namespaces(&["ns"])
        .build();
    assert!(signed.spec.source.config_map.is_none());
    assert_eq!(
        signed.spec.source.oci.map(|o| o.reference).as_deref(),
        Some("registry.test/p:1")
    );
    let key = &signed.spec.verification.expect("verification").keys[0];
    assert_eq!(
        (
            key.name.as_str(),
            key.secret_ref.name.as_str(),
            key.secret_ref.key.as_str()
        ),
        ("release", "release-key", "cosign.pub")
    );
    assert_eq!(signed.spec.selector.expect("selector").namespaces, ["ns"]);
}
