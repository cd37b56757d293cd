//! What the pod policy costs per create, side by side in one run.
//!
//! The spec: a realistic restricted-compliant pod with two containers
//! (ports, env from a Secret, probes, resources, a configMap and a secret
//! volume, a toleration, a nodeSelector), which is also the template.
//!
//! - `check_spec/<mode>`: one [`check_spec`] call. `template_same_value` is
//!   what the host does when the plugin leaves `spec-json` empty (it passes
//!   the parsed template itself); `template_equal_copy` is a plugin that
//!   echoes the template's JSON (a separately parsed, equal value).
//! - `reconcile_10_creates/<mode>`: ten creates of one reconcile, each
//!   [`check_spec`] + [`check_metadata`] (three labels, one annotation).
//! - `parse_spec_json`: `serde_json` parsing the same spec into a `PodSpec`
//!   (what validation pays per create when a plugin writes its own spec),
//!   for scale.
//!
//! Run: `cargo bench -p wasm-operator --bench policy`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::PodSpec;
use wasm_operator::apply::policy::{PodPolicy, PolicyConfig, check_metadata, check_spec};

const SPEC_JSON: &str = r#"{
  "serviceAccountName": "web",
  "automountServiceAccountToken": false,
  "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000,
                      "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
  "containers": [
    {"name": "web", "image": "registry.example.com/team/web:1.2.3",
     "ports": [{"name": "http", "containerPort": 8080}],
     "env": [{"name": "DB_PASSWORD",
              "valueFrom": {"secretKeyRef": {"name": "web-db", "key": "password"}}}],
     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
     "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
     "volumeMounts": [{"name": "config", "mountPath": "/etc/web"},
                      {"name": "tls", "mountPath": "/etc/tls", "readOnly": true}],
     "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                         "readOnlyRootFilesystem": true}},
    {"name": "proxy", "image": "registry.example.com/team/proxy:0.9",
     "args": ["--upstream=127.0.0.1:8080"],
     "securityContext": {"allowPrivilegeEscalation": false,
                         "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}
  ],
  "volumes": [{"name": "config", "configMap": {"name": "web-config"}},
              {"name": "tls", "secret": {"secretName": "web-tls"}}],
  "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
  "nodeSelector": {"kubernetes.io/os": "linux"}
}"#;

fn parse() -> PodSpec {
    serde_json::from_str(SPEC_JSON).expect("the bench spec parses")
}

fn config(policy: PodPolicy) -> PolicyConfig {
    PolicyConfig {
        policy,
        allowed_image_prefixes: vec!["registry.example.com/team/".into()],
        ..PolicyConfig::default()
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn policy(c: &mut Criterion) {
    let template = parse();
    let copy = parse();
    let modes = [
        ("template_same_value", PodPolicy::Template, &template),
        ("template_equal_copy", PodPolicy::Template, &copy),
        ("restricted", PodPolicy::Restricted, &copy),
        ("baseline", PodPolicy::Baseline, &copy),
    ];
    for (name, mode, proposed) in modes {
        let found = check_spec(proposed, &template, &config(mode));
        assert!(
            found.is_empty(),
            "{name}: the bench spec must pass: {found:?}"
        );
    }

    let mut group = c.benchmark_group("check_spec");
    for (name, mode, proposed) in modes {
        let cfg = config(mode);
        group.bench_function(name, |b| {
            b.iter(|| black_box(check_spec(black_box(proposed), black_box(&template), &cfg)))
        });
    }
    group.finish();

    let template_labels = map(&[("app", "web"), ("app.kubernetes.io/name", "web")]);
    let template_annotations = map(&[("prometheus.io/scrape", "true")]);
    let labels = map(&[
        ("app", "web"),
        ("app.kubernetes.io/name", "web"),
        ("plugin.jinghzhu.io/shard", "web_3"),
    ]);
    let annotations = map(&[("prometheus.io/scrape", "true")]);
    let mut group = c.benchmark_group("reconcile_10_creates");
    for (name, mode, proposed) in modes {
        let cfg = config(mode);
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut refused = 0;
                for _ in 0..10 {
                    refused += check_spec(black_box(proposed), &template, &cfg).len();
                    refused += check_metadata(
                        "web",
                        black_box(&labels),
                        black_box(&annotations),
                        &template_labels,
                        &template_annotations,
                        &cfg,
                    )
                    .len();
                }
                black_box(refused)
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("parse");
    group.bench_function("parse_spec_json", |b| {
        b.iter(|| black_box(serde_json::from_str::<PodSpec>(black_box(SPEC_JSON)).expect("parses")))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = policy
}
criterion_main!(benches);
