//! Between Kubernetes objects and the contract 0.1 records: the input a
//! plugin sees (its Jinghzhu, the pods it owns, the time) and the output it
//! returns (as the host's [`ProposedActions`]). A 0.2 output reaches
//! [`output`] as 0.1 records too (see [`super::convert_v2`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::bindings as wit;
use crate::actions::{EventType, PluginEvent, PodToCreate, ProposedActions};
use crate::crd::{Jinghzhu, JinghzhuStatus};

/// The WIT input for `jz` and its owned `pods` at `now`. The caller picks
/// the pods (see [`crate::ownership::owned_pods`]); they are passed on as
/// given, sorted by name.
pub fn input(jz: &Jinghzhu, pods: &[Pod], now: std::time::SystemTime) -> wit::ReconcileInput {
    wit::ReconcileInput {
        jinghzhu: wit::Jinghzhu {
            metadata: meta(&jz.metadata),
            spec: wit::JinghzhuSpec {
                desired: jz.spec.desired,
                template: jz.spec.template.as_ref().map(|t| wit::PodTemplate {
                    labels: t
                        .metadata
                        .as_ref()
                        .map(|m| kvs(&m.labels))
                        .unwrap_or_default(),
                    annotations: t
                        .metadata
                        .as_ref()
                        .map(|m| kvs(&m.annotations))
                        .unwrap_or_default(),
                    spec_json: t
                        .spec
                        .as_ref()
                        .and_then(|s| serde_json::to_string(s).ok())
                        .unwrap_or_default(),
                }),
            },
            status: jz.status.as_ref().map(status_to_wit),
        },
        pods: sorted_by_name(pods.iter().map(pod).collect()),
        now: timestamp(now),
    }
}

/// The WIT contract promises pods sorted by name, whatever order the
/// caller's cache had them in.
fn sorted_by_name(mut pods: Vec<wit::Pod>) -> Vec<wit::Pod> {
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    pods
}

fn pod(pod: &Pod) -> wit::Pod {
    let (phase, ready) = phase_and_ready(pod);
    wit::Pod {
        metadata: meta(&pod.metadata),
        phase,
        ready,
    }
}

/// A pod's phase (an unknown or missing phase is `pending`) and whether its
/// `Ready` condition is `True`.
pub(crate) fn phase_and_ready(pod: &Pod) -> (wit::PodPhase, bool) {
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => wit::PodPhase::Running,
        Some("Succeeded") => wit::PodPhase::Succeeded,
        Some("Failed") => wit::PodPhase::Failed,
        Some("Unknown") => wit::PodPhase::Unknown,
        _ => wit::PodPhase::Pending,
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    (phase, ready)
}

fn meta(m: &ObjectMeta) -> wit::ObjectMeta {
    wit::ObjectMeta {
        name: m.name.clone().unwrap_or_default(),
        namespace: m.namespace.clone().unwrap_or_default(),
        uid: m.uid.clone().unwrap_or_default(),
        resource_version: m.resource_version.clone().unwrap_or_default(),
        generation: m.generation.unwrap_or_default(),
        labels: kvs(&m.labels),
        annotations: kvs(&m.annotations),
        creation_timestamp: m.creation_timestamp.as_ref().map(time),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(time),
        owner_references: m
            .owner_references
            .iter()
            .flatten()
            .map(|o| wit::OwnerReference {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller.unwrap_or(false),
            })
            .collect(),
    }
}

fn kvs(map: &Option<BTreeMap<String, String>>) -> Vec<wit::KeyValue> {
    map.iter()
        .flatten()
        .map(|(k, v)| wit::KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

pub(crate) fn time(t: &Time) -> wit::Timestamp {
    let ts = t.0.as_second();
    wit::Timestamp {
        seconds: ts,
        nanoseconds: t.0.subsec_nanosecond().max(0) as u32,
    }
}

pub(crate) fn timestamp(t: std::time::SystemTime) -> wit::Timestamp {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    wit::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanoseconds: d.subsec_nanos(),
    }
}

fn status_to_wit(s: &JinghzhuStatus) -> wit::JinghzhuStatus {
    wit::JinghzhuStatus {
        current: s.current,
        pod_list: s.pod_list.clone(),
        state: s.state.clone(),
        message: s.message.clone(),
        observed_generation: s.observed_generation,
    }
}

/// The pod spec used when a plugin leaves `spec-json` empty and the
/// Jinghzhu has no template spec: the host's default template
/// ([`crate::crd::default_template::default_template`], a pause container that
/// passes the Pod Security Standards' restricted profile), as JSON.
pub fn default_pod_spec_json() -> &'static str {
    static JSON: LazyLock<String> = LazyLock::new(|| {
        serde_json::to_string(crate::crd::default_template::default_template()).unwrap_or_default()
    });
    &JSON
}

/// The host's view of the WIT output of a call on `input`. An empty
/// `spec-json` becomes the template's spec (or the default template), as
/// the WIT contract promises. Each distinct spec text is parsed once and
/// shared by the creates that use it; a spec that is not JSON becomes a
/// string value, which validation then rejects with a clear message.
pub fn output(out: wit::ReconcileOutput, input: &wit::ReconcileInput) -> ProposedActions {
    let template_spec = input
        .jinghzhu
        .spec
        .template
        .as_ref()
        .map(|t| t.spec_json.as_str());
    output_with_template(out, template_spec)
}

/// [`output`] given only what it needs of the input: the template's spec
/// JSON, if the Jinghzhu has a template (what an empty `spec-json` means).
pub fn output_with_template(
    out: wit::ReconcileOutput,
    template_spec: Option<&str>,
) -> ProposedActions {
    let default_spec = template_spec
        .filter(|spec| !spec.trim().is_empty())
        .unwrap_or_else(|| default_pod_spec_json());
    let mut parsed: HashMap<String, Arc<serde_json::Value>> = HashMap::new();
    let mut parse = |spec: String| {
        let text = if spec.trim().is_empty() {
            default_spec.to_string()
        } else {
            spec
        };
        if let Some(value) = parsed.get(&text) {
            return Arc::clone(value);
        }
        let value = Arc::new(
            serde_json::from_str(&text).unwrap_or_else(|_| serde_json::Value::String(text.clone())),
        );
        parsed.insert(text, Arc::clone(&value));
        value
    };
    ProposedActions {
        create_pods: out
            .create_pods
            .into_iter()
            .map(|c| PodToCreate {
                name: c.name,
                generate_name: c.generate_name,
                labels: c.labels.into_iter().map(|kv| (kv.key, kv.value)).collect(),
                annotations: c
                    .annotations
                    .into_iter()
                    .map(|kv| (kv.key, kv.value))
                    .collect(),
                spec: parse(c.spec_json),
            })
            .collect(),
        delete_pods: out.delete_pods,
        status: out.status.map(|s| JinghzhuStatus {
            current: s.current,
            pod_list: s.pod_list,
            ready_replicas: None, // the host's own observation, added when written
            state: s.state,
            message: s.message,
            observed_generation: s.observed_generation,
            reconciled_by: None, // the host's stamp, added when written
        }),
        requeue_after: out.requeue_after_ms.map(std::time::Duration::from_millis),
        events: out
            .events
            .into_iter()
            .map(|e| PluginEvent {
                type_: match e.event_type {
                    wit::EventType::Normal => EventType::Normal,
                    wit::EventType::Warning => EventType::Warning,
                },
                reason: e.reason,
                message: e.message,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use wasm_operator_testkit as testkit;

    use super::*;

    fn jinghzhu(template: Option<PodTemplateSpec>) -> Jinghzhu {
        let mut jz = testkit::jinghzhu("web")
            .desired(2)
            .namespace("shop")
            .uid("uid-1")
            .generation(3)
            .labels(&[("b", "2"), ("a", "1")])
            .build();
        jz.spec.template = template.map(Box::new);
        jz
    }

    /// A pod controlled by `web`.
    fn pod(name: &str) -> testkit::PodBuilder {
        testkit::pod(name).controller("web", "uid-1")
    }

    #[test]
    fn input_carries_metadata_phase_readiness_and_time() {
        let pods = [
            pod("web-b").phase("Running").ready(true).build(),
            pod("web-a").ready(false).build(),
            pod("web-c").phase("Failed").build(),
        ];
        let now = UNIX_EPOCH + Duration::new(1_767_225_600, 5);
        let input = input(&jinghzhu(None), &pods, now);
        let meta = &input.jinghzhu.metadata;
        assert_eq!(
            (meta.name.as_str(), meta.namespace.as_str(), meta.generation),
            ("web", "shop", 3)
        );
        assert_eq!(
            meta.labels
                .iter()
                .map(|kv| kv.key.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(input.jinghzhu.spec.desired, 2);
        assert!(input.jinghzhu.spec.template.is_none());
        let summary: Vec<_> = input
            .pods
            .iter()
            .map(|p| (p.metadata.name.as_str(), p.phase, p.ready))
            .collect();
        assert_eq!(
            summary,
            [
                ("web-a", wit::PodPhase::Pending, false),
                ("web-b", wit::PodPhase::Running, true),
                ("web-c", wit::PodPhase::Failed, false),
            ]
        );
        assert!(input.pods[0].metadata.owner_references[0].controller);
        assert_eq!(
            (input.now.seconds, input.now.nanoseconds),
            (1_767_225_600, 5)
        );
    }

    #[test]
    fn template_becomes_spec_json_and_fills_empty_creates() {
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
        }))
        .expect("template");
        let input = input(&jinghzhu(Some(template)), &[], UNIX_EPOCH);
        let wit_template = input.jinghzhu.spec.template.as_ref().expect("template");
        assert_eq!(wit_template.labels[0].value, "web");
        let spec: serde_json::Value = serde_json::from_str(&wit_template.spec_json).expect("json");
        assert_eq!(spec["containers"][0]["image"], "nginx:1.27");

        let create = |spec_json: &str| wit::PodCreate {
            name: None,
            generate_name: Some("web-".into()),
            labels: vec![],
            annotations: vec![],
            spec_json: spec_json.into(),
        };
        let out = wit::ReconcileOutput {
            create_pods: vec![
                create(""),
                create(r#"{"containers":[]}"#),
                create("not json"),
            ],
            delete_pods: vec!["web-x".into()],
            status: None,
            requeue_after_ms: Some(1500),
            events: vec![wit::Event {
                event_type: wit::EventType::Warning,
                reason: "Odd".into(),
                message: "m".into(),
            }],
        };
        let actions = output(out, &input);
        assert_eq!(*actions.create_pods[0].spec, spec);
        assert_eq!(
            *actions.create_pods[1].spec,
            serde_json::json!({"containers": []})
        );
        assert_eq!(*actions.create_pods[2].spec, serde_json::json!("not json"));
        assert_eq!(actions.requeue_after, Some(Duration::from_millis(1500)));
        assert_eq!(actions.events[0].type_, EventType::Warning);
    }

    #[test]
    fn creates_with_the_same_spec_text_share_one_parse() {
        let input = input(&jinghzhu(None), &[], UNIX_EPOCH);
        let create = |spec_json: &str| wit::PodCreate {
            name: None,
            generate_name: Some("web-".into()),
            labels: vec![],
            annotations: vec![],
            spec_json: spec_json.into(),
        };
        let out = wit::ReconcileOutput {
            create_pods: vec![create(""), create(""), create("{}"), create("{}")],
            delete_pods: vec![],
            status: None,
            requeue_after_ms: None,
            events: vec![],
        };
        let pods = output(out, &input).create_pods;
        assert!(Arc::ptr_eq(&pods[0].spec, &pods[1].spec));
        assert!(Arc::ptr_eq(&pods[2].spec, &pods[3].spec));
        assert!(!Arc::ptr_eq(&pods[0].spec, &pods[2].spec));
    }

    #[test]
    fn empty_spec_without_template_gets_the_default() {
        let input = input(&jinghzhu(None), &[], UNIX_EPOCH);
        let out = wit::ReconcileOutput {
            create_pods: vec![wit::PodCreate {
                name: Some("web-0".into()),
                generate_name: None,
                labels: vec![],
                annotations: vec![],
                spec_json: String::new(),
            }],
            delete_pods: vec![],
            status: None,
            requeue_after_ms: None,
            events: vec![],
        };
        let spec = &output(out, &input).create_pods[0].spec;
        assert_eq!(spec["containers"][0]["image"], "registry.k8s.io/pause:3.10");
    }
}
