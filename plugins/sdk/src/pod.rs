//! Helpers for the Pods a Jinghzhu controls: which ones count, and how to
//! build the [`PodCreate`] for a new one from the Jinghzhu's template.

use std::cmp::Ordering;

use crate::types::{Jinghzhu, Pod, PodCreate, PodPhase, Timestamp};

/// True when deletion of the Pod was requested (it has a
/// `deletion-timestamp`): it is going away and must not be counted or
/// deleted again.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// True when the Pod ran to completion: phase `succeeded` or `failed`.
/// Such a Pod will never run again.
pub fn is_finished(pod: &Pod) -> bool {
    matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed)
}

/// True when the Pod counts towards the desired number: it is neither
/// terminating nor finished.
pub fn is_live(pod: &Pod) -> bool {
    !is_terminating(pod) && !is_finished(pod)
}

/// True when the Pod is running and ready: phase `running` and its `Ready`
/// condition `True` (`pod.ready`). A live Pod that is not is still starting
/// (or failing its readiness checks).
pub fn is_running_and_ready(pod: &Pod) -> bool {
    pod.phase == PodPhase::Running && pod.ready
}

/// How many of `pods` are live (see [`is_live`]) and running and ready.
pub fn count_ready<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> usize {
    pods.into_iter()
        .filter(|p| is_live(p) && is_running_and_ready(p))
        .count()
}

/// The live Pods (see [`is_live`]) among `pods`, in their original order.
pub fn live_pods(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter().filter(|p| is_live(p)).collect()
}

/// True when the Pod's controller owner reference points at `owner` (by uid).
pub fn is_controlled_by(pod: &Pod, owner: &Jinghzhu) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .any(|r| r.controller && r.uid == owner.metadata.uid)
}

/// The names of `pods`, sorted.
pub fn sorted_names<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Vec<String> {
    let mut names: Vec<String> = pods.into_iter().map(|p| p.metadata.name.clone()).collect();
    names.sort();
    names
}

/// The `generate-name` of the Pods of `jinghzhu`: `<jinghzhu-name>-`.
pub fn generate_name(jinghzhu: &Jinghzhu) -> String {
    format!("{}-", jinghzhu.metadata.name)
}

/// A [`PodCreate`] for one new Pod of `jinghzhu`: `generate-name`
/// `<jinghzhu-name>-`, labels and annotations from the template (none without
/// one), and the template's spec. Without a template (or with an empty
/// template spec) `spec-json` is left empty, which tells the host to use its
/// default pod template (a pause container that passes the Pod Security
/// Standards' restricted profile).
///
/// ```
/// use jinghzhu_plugin_sdk::pod::from_template;
/// use jinghzhu_plugin_sdk::testing::jinghzhu;
///
/// let create = from_template(&jinghzhu("web", "default", 1).build());
/// assert_eq!(create.generate_name.as_deref(), Some("web-"));
/// assert_eq!(create.spec_json, "");
/// ```
pub fn from_template(jinghzhu: &Jinghzhu) -> PodCreate {
    let template = jinghzhu.spec.template.as_ref();
    let spec_json = match template {
        Some(t) if !t.spec_json.trim().is_empty() => t.spec_json.clone(),
        _ => String::new(),
    };
    PodCreate {
        name: None,
        generate_name: Some(generate_name(jinghzhu)),
        labels: template.map(|t| t.labels.clone()).unwrap_or_default(),
        annotations: template.map(|t| t.annotations.clone()).unwrap_or_default(),
        spec_json,
    }
}

/// Orders two optional timestamps with "absent" after every present one.
pub fn cmp_optional_timestamps(a: Option<&Timestamp>, b: Option<&Timestamp>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a.cmp(b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

impl PodCreate {
    /// A Pod named `<prefix><random suffix>` by the API server, with no
    /// labels and the template's (or default) spec.
    pub fn with_generate_name(prefix: impl Into<String>) -> Self {
        Self {
            generate_name: Some(prefix.into()),
            ..Self::default()
        }
    }

    /// A Pod with an exact name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv;
    use crate::testing::{jinghzhu, pod};
    use crate::types::PodTemplate;

    #[test]
    fn liveness() {
        assert!(is_live(&pod("a", PodPhase::Running).into()));
        assert!(is_live(&pod("a", PodPhase::Pending).into()));
        assert!(is_live(&pod("a", PodPhase::Unknown).into()));
        assert!(!is_live(&pod("a", PodPhase::Succeeded).into()));
        assert!(!is_live(&pod("a", PodPhase::Failed).into()));
        let t: Pod = pod("a", PodPhase::Running).terminating().into();
        assert!(is_terminating(&t) && !is_live(&t));
        let pods: Vec<Pod> = vec![
            pod("b", PodPhase::Running).into(),
            pod("a", PodPhase::Failed).into(),
            pod("c", PodPhase::Pending).into(),
        ];
        assert_eq!(sorted_names(live_pods(&pods)), ["b", "c"]);
    }

    #[test]
    fn readiness() {
        let pods: Vec<Pod> = vec![
            pod("ready", PodPhase::Running).into(),
            pod("starting", PodPhase::Running).ready(false).into(),
            pod("pending", PodPhase::Pending).into(),
            pod("going", PodPhase::Running).terminating().into(),
            pod("failed", PodPhase::Failed).into(),
        ];
        assert!(is_running_and_ready(&pods[0]));
        assert!(!is_running_and_ready(&pods[1]));
        assert!(
            !is_running_and_ready(&pods[2]),
            "a Pending pod is not running"
        );
        assert_eq!(
            count_ready(&pods),
            1,
            "terminating and finished pods never count"
        );
    }

    #[test]
    fn create_from_template() {
        let jz = jinghzhu("demo", "default", 1)
            .template(PodTemplate {
                labels: kv::from_pairs([("app", "demo")]),
                annotations: kv::from_pairs([("note", "x")]),
                spec_json: r#"{"containers":[]}"#.to_owned(),
            })
            .build();
        let c = from_template(&jz);
        assert_eq!(c.name, None);
        assert_eq!(c.generate_name.as_deref(), Some("demo-"));
        assert_eq!(kv::label(&c.labels, "app"), Some("demo"));
        assert_eq!(kv::annotation(&c.annotations, "note"), Some("x"));
        assert_eq!(c.spec_json, r#"{"containers":[]}"#);
    }

    #[test]
    fn create_without_template_leaves_the_spec_to_the_host() {
        let c = from_template(&jinghzhu("demo", "default", 1).build());
        assert_eq!(c.name, None);
        assert_eq!(c.generate_name.as_deref(), Some("demo-"));
        assert!(c.labels.is_empty() && c.annotations.is_empty());
        assert_eq!(c.spec_json, "");
        let expected = PodCreate::with_generate_name("demo-");
        assert_eq!(c, expected);
        assert_eq!(PodCreate::named("x").name.as_deref(), Some("x"));
    }

    #[test]
    fn template_with_empty_spec_leaves_the_spec_to_the_host() {
        let jz = jinghzhu("demo", "default", 1)
            .template(PodTemplate {
                labels: kv::from_pairs([("app", "demo")]),
                annotations: Vec::new(),
                spec_json: " ".to_owned(),
            })
            .build();
        let c = from_template(&jz);
        assert_eq!(kv::label(&c.labels, "app"), Some("demo"));
        assert_eq!(c.spec_json, "");
    }

    #[test]
    fn controlled_by() {
        let jz = jinghzhu("demo", "default", 1).build();
        let input = crate::testing::input(jz.clone())
            .pod(pod("demo-a", PodPhase::Running))
            .build();
        assert!(is_controlled_by(&input.pods[0], &jz));
        assert!(!is_controlled_by(&pod("x", PodPhase::Running).into(), &jz));
    }

    #[test]
    fn optional_timestamp_order() {
        let a = Timestamp::from_secs(1);
        let b = Timestamp::from_secs(2);
        assert_eq!(cmp_optional_timestamps(Some(&a), Some(&b)), Ordering::Less);
        assert_eq!(cmp_optional_timestamps(Some(&a), None), Ordering::Less);
        assert_eq!(cmp_optional_timestamps(None, Some(&a)), Ordering::Greater);
        assert_eq!(cmp_optional_timestamps(None, None), Ordering::Equal);
    }
}
