//! A property test of conversion, bounds and validation: generated plugin
//! outputs (hostile ones mostly: escalating specs, reserved labels, huge and
//! duplicate names, foreign deletes, out-of-range counts, fat labels and
//! annotations) for generated Jinghzhus and pods (some already carrying
//! plugin metadata), under each pod policy and several metadata budgets.
//! The host must never panic, and every output it accepts must yield only
//! pods the chosen policy allows, within the counts `spec.desired`
//! justifies, deleting only live pods the object controls, each create
//! within the per-pod metadata cap and the object within its budget.
//!
//! `PROPTEST_CASES` sets the number of cases (default here: 10 000, enough
//! for CI). The figure quoted in the README comes from
//! `PROPTEST_CASES=1000000 cargo test --release -p wasm-operator --test validation_fuzz`.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::ResourceExt;
use proptest::prelude::*;
use wasm_operator::apply::policy::{self, PodPolicy, PolicyConfig};
use wasm_operator::apply::validate::{
    self, Limits, MAX_POD_METADATA_BYTES, is_live, template_spec,
};
use wasm_operator::crd::Jinghzhu;
use wasm_operator::ownership::{MANAGED_BY_LABEL, OWNER_LABEL, owned_pods};
use wasm_operator::runtime::bindings as wit;
use wasm_operator::runtime::convert;
use wasm_operator_testkit as testkit;

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

/// The key metadata-heavy entries use.
const FAT_KEY: &str = "plugin.jinghzhu.io/fat";

/// Sizes around the per-pod cap and the budgets.
fn fat_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..2048,
        Just(MAX_POD_METADATA_BYTES - FAT_KEY.len()),
        Just(MAX_POD_METADATA_BYTES - FAT_KEY.len() + 1),
        (MAX_POD_METADATA_BYTES / 4)..(MAX_POD_METADATA_BYTES + 1024),
    ]
}

fn kvs() -> impl Strategy<Value = Vec<wit::KeyValue>> {
    prop::collection::vec(
        prop_oneof![
            4 => (
                key(),
                prop_oneof![
                    Just("web".to_string()),
                    Just("web_3".to_string()),
                    Just("unconfined".to_string()),
                    "[a-z0-9 ]{0,10}"
                ],
            ),
            1 => fat_len().prop_map(|n| (FAT_KEY.to_string(), "x".repeat(n))),
        ],
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

/// A create that passes everything but, perhaps, the metadata limits: the
/// template's spec and label (or none), plugin annotations around the caps.
fn metadata_heavy_create() -> impl Strategy<Value = wit::PodCreate> {
    (any::<bool>(), prop::collection::vec(fat_len(), 1..3)).prop_map(|(app_label, sizes)| {
        wit::PodCreate {
            name: None,
            generate_name: Some("web-".into()),
            labels: if app_label {
                vec![wit::KeyValue {
                    key: "app".into(),
                    value: "web".into(),
                }]
            } else {
                vec![]
            },
            annotations: sizes
                .into_iter()
                .enumerate()
                .map(|(i, n)| wit::KeyValue {
                    key: format!("{FAT_KEY}{i}"),
                    value: "x".repeat(n),
                })
                .collect(),
            spec_json: String::new(),
        }
    })
}

fn output() -> impl Strategy<Value = wit::ReconcileOutput> {
    (
        prop_oneof![
            prop::collection::vec(create(), 0..12),
            prop::collection::vec(metadata_heavy_create(), 0..6),
        ],
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
    let web = testkit::jinghzhu("web")
        .namespace("shop")
        .uid("uid-web")
        .desired(desired);
    match template {
        Some(spec) => web.template(
            serde_json::from_value(serde_json::json!({
                "metadata": {"labels": {"app": "web"}},
                "spec": serde_json::from_str::<serde_json::Value>(spec).unwrap_or_default(),
            }))
            .unwrap_or_default(),
        ),
        None => web,
    }
    .build()
}

fn pod(name: &str, owner_uid: &str, phase: &str, terminating: bool) -> Pod {
    fat_pod(name, owner_uid, phase, terminating, 0)
}

/// A pod carrying `fat` bytes of plugin annotation (none for 0), and one
/// of someone else's that never counts.
fn fat_pod(name: &str, owner_uid: &str, phase: &str, terminating: bool, fat: usize) -> Pod {
    let mut pod = testkit::pod(name)
        .namespace("shop")
        .uid(&format!("uid-{name}"))
        .controller("web", owner_uid)
        .phase(phase);
    if fat > 0 {
        let (plugin, mesh) = ("x".repeat(fat), "m".repeat(300));
        pod = pod.annotations(&[(FAT_KEY, &plugin), ("mesh.example.com/status", &mesh)]);
    }
    if terminating { pod.terminating() } else { pod }.build()
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
            prop_oneof![3 => Just(0usize), 1 => fat_len()],
        ),
        0..4,
    )
    .prop_map(|pods| {
        let mut seen = HashSet::new();
        pods.into_iter()
            .filter(|(name, ..)| seen.insert(*name))
            .map(|(name, owner, phase, terminating, fat)| {
                fat_pod(name, owner, phase, terminating, fat)
            })
            .collect()
    })
}

/// Per-object metadata budgets: none, small, a few pods' worth, the default.
fn metadata_budget() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        Just(1024),
        Just(3 * MAX_POD_METADATA_BYTES / 2),
        Just(Limits::default().pod_metadata_budget),
    ]
}

/// Bytes of `map`'s entries that are not `template`'s own, for keys `counts`.
fn plugin_bytes(
    map: &BTreeMap<String, String>,
    template: Option<&BTreeMap<String, String>>,
    counts: impl Fn(&str) -> bool,
) -> usize {
    map.iter()
        .filter(|(k, v)| counts(k) && template.and_then(|t| t.get(*k)) != Some(*v))
        .map(|(k, v)| k.len() + v.len())
        .sum()
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
        budget in metadata_budget(),
    ) {
        let jz = jinghzhu(desired, template);
        let limits = Limits { pod_metadata_budget: budget, ..Limits::default() };
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
            // Pod names are the object's, plugin label values scoped to it,
            // and the template's labels kept (issue 22, hazard 5).
            let owned_name = match (&create.name, &create.generate_name) {
                (Some(n), None) => n.strip_prefix("web-").is_some_and(|s| !s.is_empty() && !s.contains('-')),
                (None, Some(g)) => g.strip_prefix("web-").is_some_and(|s| !s.contains('-')),
                _ => false,
            };
            prop_assert!(owned_name, "a pod name of another object: {:?}", create);
            for (key, value) in &create.labels {
                if key.starts_with("plugin.jinghzhu.io/") {
                    prop_assert!(value == "web" || value.starts_with("web_"), "unscoped {}={}", key, value);
                }
            }
            if template.is_some() {
                prop_assert_eq!(create.labels.get("app").map(String::as_str), Some("web"));
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

        // Labels and annotations: each create within the per-pod cap, the
        // object within its budget (unless the creates add nothing).
        let meta = jz.spec.template.as_ref().and_then(|t| t.metadata.as_ref());
        let (t_labels, t_annotations) = (
            meta.and_then(|m| m.labels.as_ref()),
            meta.and_then(|m| m.annotations.as_ref()),
        );
        let mut added = 0;
        for create in &proposal.create_pods {
            let bytes = plugin_bytes(&create.labels, t_labels, |_| true)
                + plugin_bytes(&create.annotations, t_annotations, |_| true);
            prop_assert!(bytes <= MAX_POD_METADATA_BYTES, "a create with {} bytes of metadata", bytes);
            added += bytes;
        }
        let plugin_key = |k: &str| k.starts_with("plugin.jinghzhu.io/");
        let kept: usize = owned
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| !proposal.delete_pods.contains(&p.name_any()))
            .map(|p| {
                let empty = BTreeMap::new();
                plugin_bytes(p.metadata.labels.as_ref().unwrap_or(&empty), t_labels, plugin_key)
                    + plugin_bytes(p.metadata.annotations.as_ref().unwrap_or(&empty), t_annotations, plugin_key)
            })
            .sum();
        prop_assert!(
            added == 0 || kept + added <= budget,
            "accepted {} bytes of plugin metadata on top of {} over a budget of {}", added, kept, budget
        );
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
