//! Containment, round two (issue 22), hazard 5: what `template` and
//! `restricted` still let through. Each attack runs under both policies
//! against a real control plane: the offender gets a `RejectedOutput`
//! Warning naming the rule, nothing of its proposal is applied, a good
//! neighbour converges, and an object whose template has labels and
//! annotations gets pods that carry them.
//!
//! - identity, confinement and lifetime fields wider than the template's
//!   (`escalate:<what>`): `host/run-as-group`, `host/supplemental-groups`,
//!   `host/fs-group`, `host/selinux-level`, `host/seccomp-profile`,
//!   `host/apparmor-profile`, `host/grace-period`, `host/active-deadline`,
//!   `host/image-pull-policy`, and Secret keys the template does not use
//!   (`host/env-secret-key`); under `template` each is `template/spec-differs`;
//! - the template's labels and annotations dropped (`template/metadata`);
//! - a label value under the shared plugin prefix scoped to another object
//!   (`labels/foreign-value`);
//! - pod names another object needs (`names/pod-prefix`).

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::*;

/// The spec the misbehaving plugin proposes when it escalates nothing
/// (`escalated_spec("none")`): restricted-compliant, as the host's default
/// template.
fn plain_spec() -> serde_json::Value {
    serde_json::json!({
        "containers": [{
            "name": "app",
            "image": "registry.k8s.io/pause:3.10",
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
        }],
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 65535, "runAsGroup": 65535,
            "seccompProfile": {"type": "RuntimeDefault"}
        }
    })
}

/// Creates the Jinghzhu `name` (2 pods) with the pod template `template`
/// and, if given, the misbehave `mode`.
async fn create_with(
    env: &TestEnv,
    name: &str,
    mode: Option<&str>,
    template: serde_json::Value,
) -> anyhow::Result<()> {
    let annotations = match mode {
        Some(mode) => serde_json::json!({ MISBEHAVE: mode }),
        None => serde_json::json!({}),
    };
    let mut jz: Jinghzhu = serde_json::from_value(serde_json::json!({
        "apiVersion": "jinghzhu.io/v1",
        "kind": "Jinghzhu",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"desired": 2, "template": template}
    }))?;
    jz.metadata.namespace = Some(env.namespace.clone());
    env.jinghzhus().create(&PostParams::default(), &jz).await?;
    Ok(())
}

/// Escalations of the plain spec against the host's default template:
/// (object, `escalate:` mode, the rule `restricted` names).
const SPEC_ATTACKS: &[(&str, &str, &str)] = &[
    ("group", "escalate:run-as-group", "host/run-as-group"),
    (
        "supgroups",
        "escalate:supplemental-groups",
        "host/supplemental-groups",
    ),
    ("fsgroup", "escalate:fs-group", "host/fs-group"),
    ("selinux", "escalate:selinux-level", "host/selinux-level"),
    (
        "seccomp",
        "escalate:seccomp-localhost",
        "host/seccomp-profile",
    ),
    (
        "apparmor",
        "escalate:apparmor-localhost",
        "host/apparmor-profile",
    ),
    ("grace", "escalate:grace-period", "host/grace-period"),
    (
        "pull",
        "escalate:image-pull-policy",
        "host/image-pull-policy",
    ),
];

/// Escalations that need a template granting part of something: (object,
/// mode, rule under `restricted`, the template spec).
fn templated_attacks() -> Vec<(&'static str, &'static str, &'static str, serde_json::Value)> {
    let mut deadline = plain_spec();
    deadline["activeDeadlineSeconds"] = serde_json::json!(600);
    // The template reads one key of the Secret; the plugin wants another, or all.
    let mut one_key = plain_spec();
    one_key["containers"][0]["env"] = serde_json::json!([{"name": "DB_USER", "valueFrom":
        {"secretKeyRef": {"name": "db-credentials", "key": "username"}}}]);
    vec![
        (
            "deadline",
            "escalate:active-deadline",
            "host/active-deadline",
            deadline,
        ),
        (
            "secretkey",
            "escalate:env-secret-key",
            "host/env-secret-key",
            one_key.clone(),
        ),
        (
            "envfrom",
            "escalate:env-from-secret",
            "host/env-secret-key",
            one_key,
        ),
    ]
}

/// A template with its own labels and annotations.
fn labelled_template(app: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "labels": {"app": app},
            "annotations": {"example.com/setting": "on"}
        },
        "spec": plain_spec()
    })
}

/// Runs every attack of this hazard under `policy`; `spec_rule` is what a
/// spec escalation is refused with there (`None`: the attack's own rule).
async fn every_attack_is_refused_under(
    prefix: &str,
    policy: PodPolicy,
    spec_rule: Option<&str>,
) -> anyhow::Result<()> {
    let env = TestEnv::new(prefix).await?;
    let host = host_with(
        &env,
        ControllerConfig {
            policy: PolicyConfig {
                policy,
                ..PolicyConfig::default()
            },
            ..ControllerConfig::default()
        },
    )
    .await?;
    // (object, rule its Event must name)
    let mut expected: Vec<(&str, &str)> = Vec::new();
    for (name, mode, template) in [
        (
            "dropper",
            "drop-template-metadata",
            Some(labelled_template("dropper-app")),
        ),
        ("foreign", "foreign-label-value", None),
        ("squat", "squat-names", None),
    ] {
        match template {
            Some(template) => create_with(&env, name, Some(mode), template).await?,
            None => {
                env.create(name, 2, &[(MISBEHAVE, mode)]).await?;
            }
        }
    }
    expected.extend([
        ("dropper", "template/metadata"),
        ("foreign", "labels/foreign-value"),
        ("squat", "names/pod-prefix"),
    ]);
    for (name, mode, rule, spec) in templated_attacks() {
        create_with(&env, name, Some(mode), serde_json::json!({ "spec": spec })).await?;
        expected.push((name, spec_rule.unwrap_or(rule)));
    }
    for &(name, mode, rule) in SPEC_ATTACKS {
        expected.push((name, spec_rule.unwrap_or(rule)));
        env.create(name, 2, &[(MISBEHAVE, mode)]).await?;
    }
    // A well-behaved object whose template has metadata: its pods carry it.
    create_with(&env, "keeper", None, labelled_template("keeper-app")).await?;
    with_good_neighbour(&env, &[]).await?;
    let (_, pods) = env.wait_converged("keeper", 2, CONVERGE).await?;
    for pod in &pods {
        assert_eq!(
            pod.labels().get("app").map(String::as_str),
            Some("keeper-app"),
            "{}",
            pod.name_any()
        );
        assert_eq!(
            pod.annotations()
                .get("example.com/setting")
                .map(String::as_str),
            Some("on"),
            "{}",
            pod.name_any()
        );
        assert!(
            pod.name_any().starts_with("keeper-"),
            "{}: pods are named after their object",
            pod.name_any()
        );
    }

    for (name, rule) in &expected {
        let message = env
            .wait_event(name, "RejectedOutput", rule, CONVERGE)
            .await
            .map_err(|err| err.context(format!("{policy}: {name} must be refused with {rule}")))?;
        eprintln!("{policy}: {name}: {message}");
    }
    for (name, _) in &expected {
        let owned: Vec<Pod> = env.owned_pods(name).await?;
        assert!(owned.is_empty(), "{policy}: {name}: nothing applied");
    }
    // No pod was created under a squatted name.
    for i in 0..2 {
        assert!(
            env.pods()
                .get_opt(&format!("squat-db-{i}"))
                .await?
                .is_none(),
            "{policy}: squat-db-{i} was created"
        );
    }
    env.wait_converged("good", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_mode_keeps_template_metadata_owned_names_and_scoped_labels() -> anyhow::Result<()>
{
    every_attack_is_refused_under(
        "hazard5-template",
        PodPolicy::Template,
        Some("template/spec-differs"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_mode_bounds_identity_confinement_lifetime_and_secret_keys() -> anyhow::Result<()>
{
    every_attack_is_refused_under("hazard5-restricted", PodPolicy::Restricted, None).await
}
