//! A property test of conversion, bounds and validation: generated plugin
//! outputs (hostile ones mostly: escalating specs, reserved labels, huge and
//! duplicate names, foreign deletes, out-of-range counts) for generated
//! Jinghzhus and pods, under each pod policy. The host must never panic,
//! and every output it accepts must yield only pods the chosen policy
//! allows, within the counts `spec.desired` justifies, deleting only live
//! pods the object controls.
//!
//! `PROPTEST_CASES` sets the number of cases (default here: 10 000, enough
//! for CI). The figure quoted in the README comes from
//! `PROPTEST_CASES=1000000 cargo test --release -p wasm-operator --test validation_fuzz`.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use proptest::prelude::*;
use wasm_operator::apply::policy::{self, PodPolicy, PolicyConfig};
use wasm_operator::apply::validate::{self, Limits, is_live, template_spec};
use wasm_operator::crd::{Jinghzhu, JinghzhuSpec};
use wasm_operator::ownership::{MANAGED_BY_LABEL, OWNER_LABEL, owned_pods};
use wasm_operator::runtime::bindings as wit;
use wasm_operator::runtime::convert;

/// Spec texts: the empty spec (the template), compliant ones, each
/// escalation the misbehaving plugin knows, broken JSON, wrong shapes.
fn spec_text() -> impl Strategy<Value = String> {
    let base = |extra: &str, container: &str| {
        format!(
            r#"{{"containers":[{{"name":"app","image":"registry.k8s.io/pause:3.10","securityContext":{{"allowPrivilegeEscalation":false,"capabilities":{{"drop":["ALL"]}}{container}}}}}],"securityContext":{{"runAsNonRoot":true,"runAsUser":65535,"seccompProfile":{{"type":"RuntimeDefault"}}}}{extra}}}"#
        )
    };
    prop_oneof![
        Just(String::new()),
        Just(convert::default_pod_spec_json().to_string()),
        Just(base("", "")),
        Just(base(r#","hostNetwork":true"#, "")),
        Just(base(r#","hostPID":true,"hostIPC":true"#, "")),
        Just(base("", r#","privileged":true"#)),
        Just(base("", r#","capabilities":{"add":["SYS_ADMIN"]}"#)),
        Just(base(r#","volumes":[{"name":"r","hostPath":{"path":"/"}}]"#, "")),
        Just(base(r#","volumes":[{"name":"s","secret":{"secretName":"x"}}]"#, "")),
        Just(base(r#","serviceAccountName":"admin""#, "")),
        Just(base(r#","automountServiceAccountToken":true"#, "")),
        Just(base(r#","tolerations":[{"operator":"Exists"}]"#, "")),
        Just(base(r#","nodeName":"n1""#, "")),
        Just(base(r#","nodeSelector":{"a":"b"}"#, "")),
        Just(base(r#","priorityClassName":"system-node-critical""#, "")),
        Just(base(r#","runtimeClassName":"kata""#, "")),
        Just(base(r#","schedulerName":"other""#, "")),
        Just(base(r#","securityContext":{"seccompProfile":{"type":"Unconfined"}}"#, "")),
        Just(base(r#","securityContext":{"runAsUser":0}"#, "")),
        Just(base(r#","securityContext":{"sysctls":[{"name":"kernel.msgmax","value":"1"}]}"#, "")),
        Just(base("", r#","procMount":"Unmasked""#)),
        Just(base("", r#","seLinuxOptions":{"type":"spc_t"}"#)),
        Just(base("", r#","windowsOptions":{"hostProcess":true}"#)),
        Just(r#"{"containers":[{"name":"app","image":"x","ports":[{"containerPort":80,"hostPort":80}]}]}"#.to_string()),
        Just(r#"{"containers":[{"name":"app","image":"x","env":[{"name":"P","valueFrom":{"secretKeyRef":{"name":"db","key":"p"}}}]}]}"#.to_string()),
        Just(r#"{"containers":[],"initContainers":[{"name":"i","image":"x","securityContext":{"privileged":true}}]}"#.to_string()),
        Just(r#"{"containers":"oops"}"#.to_string()),
        Just("not json".to_string()),
        Just("[]".to_string()),
        "[a-z{}\\[\\]\":,0-9 ]{0,40}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("app".to_string()),
        Just("tier".to_string()),
        Just(MANAGED_BY_LABEL.to_string()),
        Just(OWNER_LABEL.to_string()),
        Just("plugin.jinghzhu.io/shard".to_string()),
        Just("kubernetes.io/hostname".to_string()),
        Just("container.apparmor.security.beta.kubernetes.io/app".to_string()),
        Just("Bad Key".to_string()),
        "[a-z]{1,8}(/[a-z]{1,8})?",
    ]
}

fn kvs() -> impl Strategy<Value = Vec<wit::KeyValue>> {
    prop::collection::vec(
        (
            key(),
            prop_oneof![
                Just("web".to_string()),
                Just("unconfined".to_string()),
                "[a-z0-9 ]{0,10}"
            ],
        ),
        0..4,
    )
    .prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(key, value)| wit::KeyValue { key, value })
            .collect()
    })
}

fn name() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("web-0".to_string())),
        Just(Some("web-a".to_string())),
        Just(Some("Invalid_Name!".to_string())),
        Just(Some("x".repeat(300))),
        "[a-z0-9-]{1,10}".prop_map(Some),
    ]
}

fn create() -> impl Strategy<Value = wit::PodCreate> {
    (name(), name(), kvs(), kvs(), spec_text()).prop_map(
        |(name, generate_name, labels, annotations, spec_json)| wit::PodCreate {
            generate_name: if name.is_none() && generate_name.is_none() {
                Some("web-".into())
            } else {
                generate_name
            },
            name,
            labels,
            annotations,
            spec_json,
        },
    )
}

fn output() -> impl Strategy<Value = wit::ReconcileOutput> {
    (
        prop::collection::vec(create(), 0..12),
        prop::collection::vec(
            prop_oneof![
                Just("web-a".to_string()),
                Just("web-b".to_string()),
                Just("web-gone".to_string()),
                Just("other-pod".to_string()),
                "[a-z-]{1,8}",
            ],
            0..4,
        ),
        prop::option::of(("[A-Za-z]{0,70}", "[a-z ]{0,20}", 0usize..1200)),
        prop::option::of(0u64..5000),
        prop::collection::vec(("[A-Za-z0-9 ]{0,12}", "[a-z ]{0,30}", any::<bool>()), 0..25),
    )
        .prop_map(
            |(create_pods, delete_pods, status, requeue, events)| wit::ReconcileOutput {
                create_pods,
                delete_pods,
                status: status.map(|(state, message, pods)| wit::JinghzhuStatus {
                    current: pods as u32,
                    pod_list: (0..pods).map(|i| format!("p{i}")).collect(),
                    state,
                    message,
                    observed_generation: None,
                }),
                requeue_after_ms: requeue,
                events: events
                    .into_iter()
                    .map(|(reason, message, warning)| wit::Event {
                        event_type: if warning {
                            wit::EventType::Warning
                        } else {
                            wit::EventType::Normal
                        },
                        reason,
                        message,
                    })
                    .collect(),
            },
        )
}

fn jinghzhu(desired: u32, template: Option<&str>) -> Jinghzhu {
    let template = template.map(|spec| {
        serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": serde_json::from_str::<serde_json::Value>(spec).unwrap_or_default(),
        }))
        .unwrap_or_default()
    });
    let mut jz = Jinghzhu::new("web", JinghzhuSpec { desired, template });
    jz.metadata.namespace = Some("shop".into());
    jz.metadata.uid = Some("uid-web".into());
    jz
}

fn pod(name: &str, owner_uid: &str, phase: &str, terminating: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            uid: Some(format!("uid-{name}")),
            deletion_timestamp: terminating.then_some(Time(Timestamp::UNIX_EPOCH)),
            owner_references: Some(vec![OwnerReference {
                api_version: "jinghzhu.io/v1".into(),
                kind: "Jinghzhu".into(),
                name: "web".into(),
                uid: owner_uid.into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        }),
    }
}

fn pods() -> impl Strategy<Value = Vec<Pod>> {
    prop::collection::vec(
        (
            prop_oneof![
                Just("web-a"),
                Just("web-b"),
                Just("web-c"),
                Just("other-pod")
            ],
            prop_oneof![Just("uid-web"), Just("uid-other")],
            prop_oneof![Just("Running"), Just("Pending"), Just("Failed")],
            any::<bool>(),
        ),
        0..4,
    )
    .prop_map(|pods| {
        let mut seen = HashSet::new();
        pods.into_iter()
            .filter(|(name, ..)| seen.insert(*name))
            .map(|(name, owner, phase, terminating)| pod(name, owner, phase, terminating))
            .collect()
    })
}

fn policy() -> impl Strategy<Value = PolicyConfig> {
    prop_oneof![
        Just(PodPolicy::Template),
        Just(PodPolicy::Restricted),
        Just(PodPolicy::Baseline)
    ]
    .prop_map(|policy| PolicyConfig {
        policy,
        ..PolicyConfig::default()
    })
}

fn template() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        Just(None),
        Just(Some(
            r#"{"containers":[{"name":"app","image":"nginx:1.27"}]}"#
        )),
        Just(Some(
            r#"{"serviceAccountName":"web","containers":[{"name":"app","image":"registry.k8s.io/pause:3.10"}],"volumes":[{"name":"s","secret":{"secretName":"x"}}]}"#
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(10_000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn accepted_outputs_only_make_allowed_pods(
        out in output(),
        desired in 0u32..6,
        template in template(),
        cluster_pods in pods(),
        config in policy(),
    ) {
        let jz = jinghzhu(desired, template);
        let limits = Limits::default();
        let owned = owned_pods(&cluster_pods, &jz);
        let input = convert::input(&jz, &owned, std::time::SystemTime::UNIX_EPOCH);
        if validate::check_bounds(&out, &jz, &owned, &limits).is_err() {
            return Ok(());
        }
        let proposal = convert::output(out, &input);
        let Ok(validated) = validate::validate(&jz, &owned, &proposal, &config) else {
            return Ok(());
        };

        // Accepted: check the invariants.
        let template_spec = template_spec(&jz);
        prop_assert_eq!(validated.specs.len(), proposal.create_pods.len());
        for (create, spec) in proposal.create_pods.iter().zip(&validated.specs) {
            let violations = policy::check_spec(spec, template_spec, &config);
            prop_assert!(violations.is_empty(), "accepted a spec the policy refuses: {:?}", violations);
            if config.policy == PodPolicy::Template {
                prop_assert_eq!(spec.as_ref(), template_spec);
            }
            let reparsed: PodSpec = serde_json::from_value((*create.spec).clone()).expect("validated specs parse");
            prop_assert_eq!(&reparsed, spec.as_ref());
            for key in create.labels.keys().chain(create.annotations.keys()) {
                prop_assert!(key != MANAGED_BY_LABEL && key != OWNER_LABEL, "host key {}", key);
                prop_assert!(!key.contains("kubernetes.io/"), "reserved key {}", key);
            }
        }
        let live = owned.iter().filter(|p| is_live(p)).count();
        let deletes = proposal.delete_pods.len();
        prop_assert!(proposal.create_pods.len() <= limits.max_creates);
        prop_assert!(
            proposal.create_pods.len() <= (desired as usize).saturating_sub(live.saturating_sub(deletes)) + limits.max_surge
        );
        let live_names: BTreeMap<String, ()> = owned
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| (p.name_any(), ()))
            .collect();
        let mut seen = HashSet::new();
        for name in &proposal.delete_pods {
            prop_assert!(live_names.contains_key(name), "deletes {} which is not a live pod it controls", name);
            prop_assert!(seen.insert(name), "deletes {} twice", name);
        }
        prop_assert!(proposal.events.len() <= limits.max_events);
    }
}

/// The property above is only worth something if ordinary outputs pass:
/// the replicaset plugin's typical proposals are accepted under every
/// policy (so validation does not simply refuse everything).
#[test]
fn ordinary_outputs_are_accepted_under_every_policy() {
    let create = |spec_json: &str, labels: Vec<wit::KeyValue>| wit::PodCreate {
        name: None,
        generate_name: Some("web-".into()),
        labels,
        annotations: vec![],
        spec_json: spec_json.into(),
    };
    let app_web = || {
        vec![wit::KeyValue {
            key: "app".into(),
            value: "web".into(),
        }]
    };
    let template = r#"{"containers":[{"name":"app","image":"nginx:1.27"}]}"#;
    for policy in [
        PodPolicy::Template,
        PodPolicy::Restricted,
        PodPolicy::Baseline,
    ] {
        let config = PolicyConfig {
            policy,
            ..PolicyConfig::default()
        };
        for (jz, spec) in [
            (jinghzhu(3, None), String::new()),
            (
                jinghzhu(3, None),
                convert::default_pod_spec_json().to_string(),
            ),
        ] {
            let owned = vec![pod("web-a", "uid-web", "Running", false)];
            let out = wit::ReconcileOutput {
                create_pods: vec![create(&spec, vec![]), create(&spec, vec![])],
                delete_pods: vec![],
                status: None,
                requeue_after_ms: None,
                events: vec![wit::Event {
                    event_type: wit::EventType::Normal,
                    reason: "ScalingUp".into(),
                    message: "Creating 2 pod(s)".into(),
                }],
            };
            validate::check_bounds(&out, &jz, &owned, &Limits::default()).expect("bounds");
            let input = convert::input(&jz, &owned, std::time::SystemTime::UNIX_EPOCH);
            let proposal = convert::output(out, &input);
            let validated = validate::validate(&jz, &owned, &proposal, &config)
                .unwrap_or_else(|r| panic!("{policy}: {r}"));
            assert_eq!(validated.specs.len(), 2);
        }
        // With a template: its labels and its spec (empty spec_json) pass in
        // template mode; baseline accepts nginx's spec written out too.
        let jz = jinghzhu(1, Some(template));
        let out = wit::ReconcileOutput {
            create_pods: vec![create("", app_web())],
            delete_pods: vec![],
            status: None,
            requeue_after_ms: None,
            events: vec![],
        };
        let input = convert::input(&jz, &[], std::time::SystemTime::UNIX_EPOCH);
        let proposal = convert::output(out, &input);
        let result = validate::validate(&jz, &[], &proposal, &config);
        match policy {
            PodPolicy::Template | PodPolicy::Baseline => {
                result.unwrap_or_else(|r| panic!("{policy}: {r}"));
            }
            // nginx as written runs as root: not restricted.
            PodPolicy::Restricted => assert!(result.is_err()),
        }
    }
}
