//! Tests of the pod policy: one table case per rule (PSS baseline and
//! restricted controls, host rules, template equality, metadata rules), each
//! with a minimal offending variant that must report exactly that rule id and
//! a compliant variant that must pass the whole check of its modes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::{Value, json};

use super::*;

const B: &[PodPolicy] = &[PodPolicy::Baseline];
const R: &[PodPolicy] = &[PodPolicy::Restricted];
const BR: &[PodPolicy] = &[PodPolicy::Baseline, PodPolicy::Restricted];
const T: &[PodPolicy] = &[PodPolicy::Template];

/// A realistic restricted-compliant spec with two containers: the template
/// every case starts from.
fn base() -> Value {
    json!({
        "serviceAccountName": "web",
        "automountServiceAccountToken": false,
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"}
        },
        "containers": [
            {
                "name": "web",
                "image": "registry.example.com/team/web:1.2.3",
                "ports": [{"name": "http", "containerPort": 8080}],
                "env": [{"name": "DB_PASSWORD",
                         "valueFrom": {"secretKeyRef": {"name": "web-db", "key": "password"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web"},
                                 {"name": "tls", "mountPath": "/etc/tls", "readOnly": true}],
                "securityContext": {"allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]},
                                    "readOnlyRootFilesystem": true}
            },
            {
                "name": "proxy",
                "image": "registry.example.com/team/proxy:0.9",
                "args": ["--upstream=127.0.0.1:8080"],
                "securityContext": {"allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
            }
        ],
        "volumes": [
            {"name": "config", "configMap": {"name": "web-config"}},
            {"name": "tls", "secret": {"secretName": "web-tls"}}
        ],
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web",
                         "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux"}
    })
}

/// Sets `value` at the JSON `pointer` (creating objects on the way; `null`
/// removes the key; index `len` of an array appends).
fn set(doc: &mut Value, pointer: &str, value: Value) {
    let parts: Vec<&str> = pointer.split('/').skip(1).collect();
    let (last, parents) = parts.split_last().expect("a non-empty pointer");
    let mut cur = doc;
    for part in parents {
        cur = match cur {
            Value::Object(map) => map.entry(part.to_string()).or_insert_with(|| json!({})),
            Value::Array(items) => &mut items[part.parse::<usize>().expect("an index")],
            other => panic!("cannot descend into {other} at {pointer}"),
        };
    }
    match cur {
        Value::Object(map) if value.is_null() => {
            map.remove(*last);
        }
        Value::Object(map) => {
            map.insert(last.to_string(), value);
        }
        Value::Array(items) => {
            let i: usize = last.parse().expect("an index");
            if i == items.len() {
                items.push(value);
            } else {
                items[i] = value;
            }
        }
        other => panic!("cannot set into {other} at {pointer}"),
    }
}

type Edits = Vec<(&'static str, Value)>;

fn edited(doc: &Value, edits: &Edits) -> Value {
    let mut doc = doc.clone();
    for (pointer, value) in edits {
        set(&mut doc, pointer, value.clone());
    }
    doc
}

fn spec(doc: Value) -> PodSpec {
    serde_json::from_value(doc).expect("a PodSpec")
}

fn config(policy: PodPolicy, image_prefixes: &[&str]) -> PolicyConfig {
    PolicyConfig {
        policy,
        allowed_image_prefixes: image_prefixes.iter().map(|p| p.to_string()).collect(),
        ..PolicyConfig::default()
    }
}

fn rules(violations: &[Violation]) -> Vec<&'static str> {
    violations.iter().map(|v| v.rule).collect()
}

/// One rule: `bad` edits must make it fire, `good` edits must pass entirely.
struct Case {
    rule: &'static str,
    modes: &'static [PodPolicy],
    /// Edits to the template (the proposed spec starts from the edited template).
    template: Edits,
    bad: Edits,
    good: Edits,
    image_prefixes: &'static [&'static str],
    /// A fragment the bad variant's message must contain (the field path).
    path: &'static str,
}

fn case(
    rule: &'static str,
    modes: &'static [PodPolicy],
    path: &'static str,
    bad: Edits,
    good: Edits,
) -> Case {
    Case {
        rule,
        modes,
        template: Vec::new(),
        bad,
        good,
        image_prefixes: &[],
        path,
    }
}

impl Case {
    fn template(mut self, edits: Edits) -> Self {
        self.template = edits;
        self
    }
    fn images(mut self, prefixes: &'static [&'static str]) -> Self {
        self.image_prefixes = prefixes;
        self
    }
}

fn restricted_container(name: &str) -> Value {
    json!({"name": name, "image": "registry.example.com/team/tools:1",
           "securityContext": {"allowPrivilegeEscalation": false,
                               "capabilities": {"drop": ["ALL"]}}})
}

fn spec_cases() -> Vec<Case> {
    vec![
        // ---- PSS baseline (every mode's floor) ----
        case(
            "baseline/host-process",
            BR,
            "containers[0].securityContext.windowsOptions.hostProcess",
            vec![("/containers/0/securityContext/windowsOptions", json!({"hostProcess": true}))],
            vec![("/containers/0/securityContext/windowsOptions", json!({"hostProcess": false}))],
        ),
        case(
            "baseline/host-process",
            BR,
            "securityContext.windowsOptions.hostProcess",
            vec![("/securityContext/windowsOptions", json!({"hostProcess": true}))],
            vec![("/securityContext/windowsOptions", json!({"hostProcess": false}))],
        ),
        case(
            "baseline/host-namespaces",
            BR,
            "hostNetwork",
            vec![("/hostNetwork", json!(true))],
            vec![("/hostNetwork", json!(false))],
        ),
        case(
            "baseline/host-namespaces",
            BR,
            "hostPID",
            vec![("/hostPID", json!(true))],
            vec![("/hostPID", json!(false))],
        ),
        case(
            "baseline/host-namespaces",
            BR,
            "hostIPC",
            vec![("/hostIPC", json!(true))],
            vec![("/hostIPC", json!(false))],
        ),
        case(
            "baseline/privileged",
            BR,
            "containers[1].securityContext.privileged",
            vec![("/containers/1/securityContext/privileged", json!(true))],
            vec![("/containers/1/securityContext/privileged", json!(false))],
        ),
        case(
            "baseline/privileged",
            BR,
            "initContainers[0].securityContext.privileged",
            vec![
                ("/initContainers", json!([restricted_container("init")])),
                ("/initContainers/0/securityContext/privileged", json!(true)),
            ],
            vec![("/initContainers", json!([restricted_container("init")]))],
        ),
        case(
            "baseline/privileged",
            BR,
            "ephemeralContainers[0].securityContext.privileged",
            vec![
                ("/ephemeralContainers", json!([restricted_container("debug")])),
                ("/ephemeralContainers/0/securityContext/privileged", json!(true)),
            ],
            vec![("/ephemeralContainers", json!([restricted_container("debug")]))],
        ),
        case(
            "baseline/capabilities",
            B,
            "containers[1].securityContext.capabilities.add",
            vec![("/containers/1/securityContext/capabilities/add", json!(["SYS_ADMIN"]))],
            vec![("/containers/1/securityContext/capabilities/add", json!(["CHOWN", "KILL"]))],
        ),
        case(
            "baseline/host-path",
            B,
            "volumes[1]",
            vec![("/volumes/1", json!({"name": "tls", "hostPath": {"path": "/etc"}}))],
            vec![("/volumes/1", json!({"name": "tls", "emptyDir": {}}))],
        ),
        case(
            "baseline/host-ports",
            BR,
            "containers[0].ports[0].hostPort",
            vec![("/containers/0/ports/0/hostPort", json!(80))],
            vec![("/containers/0/ports/0/hostPort", json!(0))],
        ),
        case(
            "baseline/apparmor",
            BR,
            "securityContext.appArmorProfile.type",
            vec![("/securityContext/appArmorProfile", json!({"type": "Unconfined"}))],
            vec![("/securityContext/appArmorProfile", json!({"type": "RuntimeDefault"}))],
        ),
        case(
            "baseline/apparmor",
            BR,
            "containers[1].securityContext.appArmorProfile.type",
            vec![("/containers/1/securityContext/appArmorProfile", json!({"type": "Unconfined"}))],
            vec![(
                "/containers/1/securityContext/appArmorProfile",
                json!({"type": "Localhost", "localhostProfile": "k8s-proxy"}),
            )],
        )
        .template(vec![(
            "/securityContext/appArmorProfile",
            json!({"type": "Localhost", "localhostProfile": "k8s-proxy"}),
        )]),
        case(
            "baseline/selinux",
            BR,
            "containers[0].securityContext.seLinuxOptions.type",
            vec![("/containers/0/securityContext/seLinuxOptions", json!({"type": "spc_t"}))],
            vec![("/containers/0/securityContext/seLinuxOptions", json!({"type": "container_t"}))],
        ),
        case(
            "baseline/selinux",
            BR,
            "securityContext.seLinuxOptions.user",
            vec![("/securityContext/seLinuxOptions", json!({"user": "system_u"}))],
            vec![("/securityContext/seLinuxOptions", json!({"level": "s0:c123,c456"}))],
        )
        .template(vec![(
            "/containers/1/securityContext/seLinuxOptions",
            json!({"level": "s0:c123,c456"}),
        )]),
        case(
            "baseline/selinux",
            BR,
            "securityContext.seLinuxOptions.role",
            vec![("/securityContext/seLinuxOptions", json!({"role": "system_r"}))],
            vec![("/securityContext/seLinuxOptions", json!({"type": "container_init_t"}))],
        ),
        case(
            "baseline/proc-mount",
            BR,
            "containers[0].securityContext.procMount",
            vec![("/containers/0/securityContext/procMount", json!("Unmasked"))],
            vec![("/containers/0/securityContext/procMount", json!("Default"))],
        ),
        case(
            "baseline/seccomp",
            B,
            "containers[1].securityContext.seccompProfile.type",
            vec![("/containers/1/securityContext/seccompProfile", json!({"type": "Unconfined"}))],
            vec![(
                "/containers/1/securityContext/seccompProfile",
                json!({"type": "Localhost", "localhostProfile": "profiles/proxy.json"}),
            )],
        )
        .template(vec![(
            "/containers/0/securityContext/seccompProfile",
            json!({"type": "Localhost", "localhostProfile": "profiles/proxy.json"}),
        )]),
        case(
            "baseline/sysctls",
            BR,
            "securityContext.sysctls[0].name",
            vec![("/securityContext/sysctls", json!([{"name": "kernel.msgmax", "value": "65536"}]))],
            vec![(
                "/securityContext/sysctls",
                json!([{"name": "net.ipv4.tcp_syncookies", "value": "1"},
                       {"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]),
            )],
        ),
        case(
            "baseline/probe-host",
            BR,
            "containers[0].readinessProbe.httpGet.host",
            vec![("/containers/0/readinessProbe/httpGet/host", json!("10.0.0.1"))],
            vec![("/containers/0/readinessProbe/httpGet/host", json!(""))],
        ),
        case(
            "baseline/probe-host",
            BR,
            "containers[1].lifecycle.preStop.tcpSocket.host",
            vec![(
                "/containers/1/lifecycle",
                json!({"preStop": {"tcpSocket": {"host": "169.254.169.254", "port": 80}}}),
            )],
            vec![("/containers/1/lifecycle", json!({"preStop": {"sleep": {"seconds": 5}}}))],
        ),
        case(
            "host/node-name",
            BR,
            "nodeName",
            vec![("/nodeName", json!("node-1"))],
            vec![("/nodeName", json!(""))],
        ),
        case(
            "spec/no-containers",
            BR,
            "containers",
            vec![("/containers", json!([]))],
            vec![],
        ),
        // ---- PSS restricted ----
        case(
            "restricted/volume-types",
            R,
            "volumes[1]",
            vec![("/volumes/1", json!({"name": "tls", "nfs": {"server": "10.0.0.2", "path": "/x"}}))],
            vec![("/volumes/1", json!({"name": "tls", "emptyDir": {}}))],
        ),
        case(
            "restricted/volume-types",
            R,
            "volumes[1]",
            vec![("/volumes/1", json!({"name": "tls", "hostPath": {"path": "/etc"}}))],
            vec![("/volumes/1", json!({"name": "tls", "downwardAPI": {}}))],
        ),
        case(
            "restricted/privilege-escalation",
            R,
            "containers[1].securityContext.allowPrivilegeEscalation",
            vec![("/containers/1/securityContext/allowPrivilegeEscalation", Value::Null)],
            vec![("/containers/1/securityContext/allowPrivilegeEscalation", json!(false))],
        ),
        case(
            "restricted/privilege-escalation",
            R,
            "containers[0].securityContext.allowPrivilegeEscalation",
            vec![("/containers/0/securityContext/allowPrivilegeEscalation", json!(true))],
            vec![],
        ),
        case(
            "restricted/run-as-non-root",
            R,
            "securityContext.runAsNonRoot",
            vec![("/securityContext/runAsNonRoot", json!(false))],
            vec![("/securityContext/runAsNonRoot", json!(true))],
        ),
        case(
            "restricted/run-as-non-root",
            R,
            "containers[0].securityContext.runAsNonRoot",
            vec![("/securityContext/runAsNonRoot", Value::Null)],
            vec![
                ("/securityContext/runAsNonRoot", Value::Null),
                ("/containers/0/securityContext/runAsNonRoot", json!(true)),
                ("/containers/1/securityContext/runAsNonRoot", json!(true)),
            ],
        ),
        case(
            "restricted/run-as-user",
            R,
            "containers[0].securityContext.runAsUser",
            vec![("/containers/0/securityContext/runAsUser", json!(0))],
            vec![("/containers/0/securityContext/runAsUser", json!(1001))],
        ),
        case(
            "restricted/run-as-user",
            R,
            "securityContext.runAsUser",
            vec![("/securityContext/runAsUser", json!(0))],
            vec![("/securityContext/runAsUser", json!(65534))],
        ),
        case(
            "restricted/seccomp",
            R,
            "containers[0].securityContext.seccompProfile.type",
            vec![("/securityContext/seccompProfile", Value::Null)],
            vec![
                ("/securityContext/seccompProfile", Value::Null),
                ("/containers/0/securityContext/seccompProfile", json!({"type": "RuntimeDefault"})),
                (
                    "/containers/1/securityContext/seccompProfile",
                    json!({"type": "Localhost", "localhostProfile": "proxy.json"}),
                ),
            ],
        )
        .template(vec![(
            "/initContainers",
            json!([{"name": "init", "image": "registry.example.com/team/tools:1",
                    "securityContext": {"allowPrivilegeEscalation": false,
                                        "capabilities": {"drop": ["ALL"]},
                                        "seccompProfile": {"type": "Localhost",
                                                           "localhostProfile": "proxy.json"}}}]),
        )]),
        case(
            "restricted/seccomp",
            R,
            "securityContext.seccompProfile.type",
            vec![("/securityContext/seccompProfile", json!({"type": "Unconfined"}))],
            vec![("/securityContext/seccompProfile", json!({"type": "Localhost", "localhostProfile": "p.json"}))],
        )
        .template(vec![(
            "/containers/1/securityContext/seccompProfile",
            json!({"type": "Localhost", "localhostProfile": "p.json"}),
        )]),
        case(
            "restricted/capabilities",
            R,
            "containers[0].securityContext.capabilities.drop",
            vec![("/containers/0/securityContext/capabilities/drop", json!(["NET_RAW"]))],
            vec![("/containers/0/securityContext/capabilities/drop", json!(["NET_RAW", "ALL"]))],
        ),
        case(
            "restricted/capabilities",
            R,
            "containers[1].securityContext.capabilities.add",
            vec![("/containers/1/securityContext/capabilities/add", json!(["CHOWN"]))],
            vec![("/containers/1/securityContext/capabilities/add", json!(["NET_BIND_SERVICE"]))],
        ),
        // ---- host rules ----
        case(
            "host/image-prefix",
            BR,
            "containers[1].image",
            vec![("/containers/1/image", json!("docker.io/evil/miner:latest"))],
            vec![("/containers/1/image", json!("registry.example.com/team/proxy:1.0"))],
        )
        .images(&["registry.example.com/team/"]),
        case(
            "host/image-prefix",
            BR,
            "volumes[2].image.reference",
            vec![("/volumes/2", json!({"name": "models", "image": {"reference": "evil.io/x:1"}}))],
            vec![(
                "/volumes/2",
                json!({"name": "models", "image": {"reference": "registry.example.com/team/models:1"}}),
            )],
        )
        .images(&["registry.example.com/team/"]),
        case(
            "host/service-account",
            BR,
            "serviceAccountName",
            vec![("/serviceAccountName", json!("admin"))],
            vec![("/serviceAccountName", json!("web"))],
        ),
        case(
            "host/service-account",
            BR,
            "serviceAccount",
            vec![("/serviceAccount", json!("admin"))],
            vec![("/serviceAccount", json!("web"))],
        ),
        case(
            "host/service-account",
            BR,
            "serviceAccountName",
            vec![("/serviceAccountName", Value::Null)],
            vec![("/serviceAccountName", Value::Null), ("/serviceAccount", json!("web"))],
        ),
        case(
            "host/service-account",
            BR,
            "serviceAccountName",
            vec![("/serviceAccountName", json!("admin"))],
            vec![("/serviceAccountName", json!("default"))],
        )
        .template(vec![("/serviceAccountName", Value::Null)]),
        case(
            "host/automount-token",
            BR,
            "automountServiceAccountToken",
            vec![("/automountServiceAccountToken", json!(true))],
            vec![("/automountServiceAccountToken", json!(false))],
        ),
        case(
            "host/automount-token",
            BR,
            "automountServiceAccountToken",
            vec![("/automountServiceAccountToken", json!(true))],
            vec![("/automountServiceAccountToken", json!(false))],
        )
        .template(vec![("/automountServiceAccountToken", Value::Null)]),
        case(
            "host/host-users",
            BR,
            "hostUsers",
            vec![("/hostUsers", json!(true))],
            vec![("/hostUsers", json!(false))],
        )
        .template(vec![("/hostUsers", json!(false))]),
        case(
            "host/volume-source",
            BR,
            "volumes[1]",
            vec![("/volumes/1", json!({"name": "tls", "secret": {"secretName": "other-app-tls"}}))],
            vec![("/volumes/1", json!({"name": "certs", "secret": {"secretName": "web-tls"}}))],
        ),
        case(
            "host/volume-source",
            BR,
            "volumes[2]",
            vec![(
                "/volumes/2",
                json!({"name": "data", "persistentVolumeClaim": {"claimName": "billing-db"}}),
            )],
            vec![(
                "/volumes/2",
                json!({"name": "data", "persistentVolumeClaim": {"claimName": "web-data"}}),
            )],
        )
        .template(vec![(
            "/volumes/2",
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "web-data"}}),
        )]),
        case(
            "host/volume-source",
            BR,
            "volumes[2]",
            vec![(
                "/volumes/2",
                json!({"name": "token", "projected": {"sources": [
                    {"serviceAccountToken": {"audience": "vault", "path": "token"}}]}}),
            )],
            vec![],
        ),
        case(
            "host/volume-source",
            BR,
            "volumes[2]",
            vec![(
                "/volumes/2",
                json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"], "storageClassName": "premium",
                    "resources": {"requests": {"storage": "10Ti"}}}}}}),
            )],
            vec![("/volumes/2", json!({"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}))],
        ),
        case(
            "host/volume-source",
            B,
            "volumes[2]",
            vec![("/volumes/2", json!({"name": "share", "nfs": {"server": "10.0.0.9", "path": "/"}}))],
            vec![("/volumes/2", json!({"name": "share", "nfs": {"server": "10.0.0.2", "path": "/web"}}))],
        )
        .template(vec![(
            "/volumes/2",
            json!({"name": "share", "nfs": {"server": "10.0.0.2", "path": "/web"}}),
        )]),
        case(
            "host/env-secret",
            BR,
            "containers[1].env[0].valueFrom.secretKeyRef.name",
            vec![(
                "/containers/1/env",
                json!([{"name": "T", "valueFrom": {"secretKeyRef": {"name": "admin-token", "key": "token"}}}]),
            )],
            vec![(
                "/containers/1/env",
                json!([{"name": "T", "valueFrom": {"secretKeyRef": {"name": "web-tls", "key": "tls.crt"}}}]),
            )],
        ),
        case(
            "host/env-secret",
            BR,
            "containers[0].envFrom[0].secretRef.name",
            vec![("/containers/0/envFrom", json!([{"secretRef": {"name": "admin-token"}}]))],
            vec![("/containers/0/envFrom", json!([{"secretRef": {"name": "web-tls"}}]))],
        ),
        case(
            "host/image-pull-secrets",
            BR,
            "imagePullSecrets[0]",
            vec![("/imagePullSecrets", json!([{"name": "ops-registry"}]))],
            vec![("/imagePullSecrets", json!([{"name": "team-registry"}]))],
        )
        .template(vec![("/imagePullSecrets", json!([{"name": "team-registry"}]))]),
        case(
            "host/tolerations",
            BR,
            "tolerations[1]",
            vec![("/tolerations/1", json!({"operator": "Exists"}))],
            vec![("/tolerations", json!([]))],
        ),
        case(
            "host/node-selector",
            BR,
            "nodeSelector",
            vec![("/nodeSelector", json!({"kubernetes.io/hostname": "node-1"}))],
            vec![("/nodeSelector", json!({"kubernetes.io/os": "linux"}))],
        ),
        case(
            "host/affinity",
            BR,
            "affinity",
            vec![(
                "/affinity",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name",
                        "operator": "In", "values": ["control-plane-1"]}]}]}}}),
            )],
            vec![("/affinity", json!({}))],
        ),
        case(
            "host/topology-spread",
            BR,
            "topologySpreadConstraints",
            vec![(
                "/topologySpreadConstraints",
                json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule"}]),
            )],
            vec![("/topologySpreadConstraints", json!([]))],
        ),
        case(
            "host/priority",
            BR,
            "priorityClassName",
            vec![("/priorityClassName", json!("system-node-critical"))],
            vec![("/priorityClassName", json!(""))],
        ),
        case(
            "host/priority",
            BR,
            "priority",
            vec![("/priority", json!(2_000_001_000))],
            vec![("/priority", json!(10))],
        )
        .template(vec![("/priority", json!(10))]),
        case(
            "host/priority",
            BR,
            "preemptionPolicy",
            vec![("/preemptionPolicy", json!("PreemptLowerPriority"))],
            vec![("/preemptionPolicy", json!("Never"))],
        )
        .template(vec![("/preemptionPolicy", json!("Never"))]),
        case(
            "host/runtime-class",
            BR,
            "runtimeClassName",
            vec![("/runtimeClassName", json!("runc-unconfined"))],
            vec![("/runtimeClassName", json!("gvisor"))],
        )
        .template(vec![("/runtimeClassName", json!("gvisor"))]),
        case(
            "host/scheduler-name",
            BR,
            "schedulerName",
            vec![("/schedulerName", json!("my-scheduler"))],
            vec![("/schedulerName", json!("default-scheduler"))],
        ),
        case(
            "host/os",
            BR,
            "os",
            vec![("/os", json!({"name": "windows"}))],
            vec![("/os", json!({"name": "linux"}))],
        )
        .template(vec![("/os", json!({"name": "linux"}))]),
        case(
            "host/resource-claims",
            BR,
            "resourceClaims",
            vec![("/resourceClaims", json!([{"name": "gpu", "resourceClaimName": "ml-team-gpu"}]))],
            vec![("/resourceClaims", json!([]))],
        ),
        // ---- identity, confinement, lifetime, secret keys (issue 22) ----
        case(
            "host/env-secret-key",
            BR,
            "containers[1].env[0].valueFrom.secretKeyRef: key \"admin-password\"",
            vec![(
                "/containers/1/env",
                json!([{"name": "P", "valueFrom": {"secretKeyRef": {"name": "web-db", "key": "admin-password"}}}]),
            )],
            vec![(
                "/containers/1/env",
                json!([{"name": "P", "valueFrom": {"secretKeyRef": {"name": "web-db", "key": "password"}}}]),
            )],
        ),
        case(
            "host/env-secret-key",
            BR,
            "containers[0].envFrom[0].secretRef \"web-db\"",
            vec![("/containers/0/envFrom", json!([{"secretRef": {"name": "web-db"}}]))],
            vec![("/containers/0/envFrom", json!([{"secretRef": {"name": "web-tls"}, "prefix": "TLS_"}]))],
        ),
        case(
            "host/env-secret-key",
            BR,
            "containers[1].env[0].valueFrom.secretKeyRef: key \"tls.key\"",
            vec![(
                "/containers/1/env",
                json!([{"name": "K", "valueFrom": {"secretKeyRef": {"name": "web-tls", "key": "tls.key"}}}]),
            )],
            vec![(
                "/containers/1/env",
                json!([{"name": "C", "valueFrom": {"secretKeyRef": {"name": "web-tls", "key": "tls.crt"}}}]),
            )],
        )
        .template(vec![(
            "/volumes/1",
            json!({"name": "tls", "secret": {"secretName": "web-tls",
                   "items": [{"key": "tls.crt", "path": "tls.crt"}]}}),
        )]),
        case(
            "host/env-secret-key",
            BR,
            "containers[1].envFrom[0].secretRef \"web-tls\"",
            vec![("/containers/1/envFrom", json!([{"secretRef": {"name": "web-tls"}}]))],
            vec![],
        )
        .template(vec![(
            "/volumes/1",
            json!({"name": "tls", "projected": {"sources": [{"secret": {"name": "web-tls",
                   "items": [{"key": "tls.crt", "path": "tls.crt"}]}}]}}),
        )]),
        case(
            "host/volume-source",
            BR,
            "volumes[1]",
            vec![(
                "/volumes/1/secret/items",
                json!([{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]),
            )],
            vec![("/volumes/1/name", json!("certs"))],
        )
        .template(vec![(
            "/volumes/1/secret/items",
            json!([{"key": "tls.crt", "path": "tls.crt"}]),
        )]),
        case(
            "host/run-as-group",
            R,
            "containers[0]: runAsGroup would be 0",
            vec![("/containers/0/securityContext/runAsGroup", json!(0))],
            vec![("/containers/0/securityContext/runAsGroup", json!(1000))],
        ),
        case(
            "host/run-as-group",
            R,
            "containers[0]: runAsGroup would be the image's group",
            vec![("/securityContext/runAsGroup", Value::Null)],
            vec![
                ("/securityContext/runAsGroup", Value::Null),
                ("/containers/0/securityContext/runAsGroup", json!(1000)),
                ("/containers/1/securityContext/runAsGroup", json!(2000)),
            ],
        )
        .template(vec![("/containers/1/securityContext/runAsGroup", json!(2000))]),
        case(
            "host/supplemental-groups",
            R,
            "securityContext.supplementalGroups[1] 0",
            vec![("/securityContext/supplementalGroups", json!([3000, 0]))],
            vec![("/securityContext/supplementalGroups", json!([3000]))],
        )
        .template(vec![("/securityContext/supplementalGroups", json!([3000, 4000]))]),
        case(
            "host/supplemental-groups",
            R,
            "supplementalGroupsPolicy",
            vec![("/securityContext/supplementalGroupsPolicy", json!("Merge"))],
            vec![("/securityContext/supplementalGroupsPolicy", json!("Strict"))],
        )
        .template(vec![("/securityContext/supplementalGroupsPolicy", json!("Strict"))]),
        case(
            "host/fs-group",
            R,
            "securityContext.fsGroup 0",
            vec![("/securityContext/fsGroup", json!(0))],
            vec![("/securityContext/fsGroup", Value::Null)],
        ),
        case(
            "host/fs-group",
            R,
            "fsGroupChangePolicy",
            vec![("/securityContext/fsGroupChangePolicy", json!("OnRootMismatch"))],
            vec![("/securityContext/fsGroupChangePolicy", json!("Always"))],
        ),
        case(
            "host/selinux-level",
            BR,
            "containers[0].securityContext.seLinuxOptions.level",
            vec![("/containers/0/securityContext/seLinuxOptions", json!({"level": "s0:c1,c2"}))],
            vec![("/containers/0/securityContext/seLinuxOptions", json!({"type": "container_t"}))],
        ),
        case(
            "host/selinux-level",
            BR,
            "securityContext.seLinuxOptions.level",
            vec![("/securityContext/seLinuxOptions", json!({"level": "s0:c1,c2"}))],
            vec![("/securityContext/seLinuxOptions", json!({"level": "s0:c5,c6"}))],
        )
        .template(vec![("/securityContext/seLinuxOptions", json!({"level": "s0:c5,c6"}))]),
        case(
            "host/seccomp-profile",
            BR,
            "containers[1].securityContext.seccompProfile.localhostProfile",
            vec![(
                "/containers/1/securityContext/seccompProfile",
                json!({"type": "Localhost", "localhostProfile": "profiles/audit-only.json"}),
            )],
            vec![("/containers/1/securityContext/seccompProfile", json!({"type": "RuntimeDefault"}))],
        ),
        case(
            "host/seccomp-profile",
            BR,
            "securityContext.seccompProfile.localhostProfile",
            vec![(
                "/securityContext/seccompProfile",
                json!({"type": "Localhost", "localhostProfile": "profiles/audit-only.json"}),
            )],
            vec![(
                "/securityContext/seccompProfile",
                json!({"type": "Localhost", "localhostProfile": "profiles/web.json"}),
            )],
        )
        .template(vec![(
            "/securityContext/seccompProfile",
            json!({"type": "Localhost", "localhostProfile": "profiles/web.json"}),
        )]),
        case(
            "host/apparmor-profile",
            BR,
            "securityContext.appArmorProfile.localhostProfile",
            vec![(
                "/securityContext/appArmorProfile",
                json!({"type": "Localhost", "localhostProfile": "complain-mode"}),
            )],
            vec![("/securityContext/appArmorProfile", json!({"type": "RuntimeDefault"}))],
        ),
        case(
            "host/apparmor-profile",
            BR,
            "containers[0].securityContext.appArmorProfile.localhostProfile",
            vec![(
                "/containers/0/securityContext/appArmorProfile",
                json!({"type": "Localhost", "localhostProfile": "complain-mode"}),
            )],
            vec![(
                "/containers/0/securityContext/appArmorProfile",
                json!({"type": "Localhost", "localhostProfile": "web-strict"}),
            )],
        )
        .template(vec![(
            "/containers/1/securityContext/appArmorProfile",
            json!({"type": "Localhost", "localhostProfile": "web-strict"}),
        )]),
        case(
            "host/grace-period",
            BR,
            "terminationGracePeriodSeconds 3600",
            vec![("/terminationGracePeriodSeconds", json!(3600))],
            vec![("/terminationGracePeriodSeconds", json!(30))],
        ),
        case(
            "host/grace-period",
            BR,
            "terminationGracePeriodSeconds 30 is longer than the template's 10",
            vec![("/terminationGracePeriodSeconds", Value::Null)],
            vec![("/terminationGracePeriodSeconds", json!(5))],
        )
        .template(vec![("/terminationGracePeriodSeconds", json!(10))]),
        case(
            "host/grace-period",
            BR,
            "containers[0].livenessProbe.terminationGracePeriodSeconds",
            vec![(
                "/containers/0/livenessProbe",
                json!({"httpGet": {"path": "/", "port": 8080}, "terminationGracePeriodSeconds": 86400}),
            )],
            vec![(
                "/containers/0/livenessProbe",
                json!({"httpGet": {"path": "/", "port": 8080}, "terminationGracePeriodSeconds": 5}),
            )],
        ),
        case(
            "host/active-deadline",
            BR,
            "activeDeadlineSeconds 86400",
            vec![("/activeDeadlineSeconds", json!(86400))],
            vec![("/activeDeadlineSeconds", json!(60))],
        )
        .template(vec![("/activeDeadlineSeconds", json!(600))]),
        case(
            "host/active-deadline",
            BR,
            "activeDeadlineSeconds unset",
            vec![("/activeDeadlineSeconds", Value::Null)],
            vec![],
        )
        .template(vec![("/activeDeadlineSeconds", json!(600))]),
        case(
            "host/image-pull-policy",
            BR,
            "containers[0].imagePullPolicy is Never",
            vec![("/containers/0/imagePullPolicy", json!("Never"))],
            vec![("/containers/0/imagePullPolicy", json!("Always"))],
        ),
        case(
            "host/image-pull-policy",
            BR,
            "containers[1].imagePullPolicy is IfNotPresent",
            vec![("/containers/1/imagePullPolicy", Value::Null)],
            vec![("/containers/1/image", json!("registry.example.com/team/proxy"))],
        )
        .template(vec![
            ("/containers/0/imagePullPolicy", json!("Always")),
            ("/containers/1/imagePullPolicy", json!("Always")),
        ]),
        case(
            "host/image-pull-policy",
            BR,
            "volumes[2].image.pullPolicy",
            vec![(
                "/volumes/2",
                json!({"name": "models", "image": {"reference": "registry.example.com/team/models:1",
                                                   "pullPolicy": "Never"}}),
            )],
            vec![(
                "/volumes/2",
                json!({"name": "models", "image": {"reference": "registry.example.com/team/models:1"}}),
            )],
        ),
        // ---- template mode ----
        case(
            "template/spec-differs",
            T,
            "containers[0].image",
            vec![("/containers/0/image", json!("registry.example.com/team/web:6.6.6"))],
            vec![("/imagePullSecrets", json!([]))],
        ),
    ]
}

#[test]
fn every_spec_rule_fires_on_its_offending_variant_only() {
    for (n, c) in spec_cases().into_iter().enumerate() {
        let template_doc = edited(&base(), &c.template);
        let template = spec(template_doc.clone());
        let bad = spec(edited(&template_doc, &c.bad));
        let good = spec(edited(&template_doc, &c.good));
        for &mode in c.modes {
            let cfg = config(mode, c.image_prefixes);
            let found = check_spec(&bad, &template, &cfg);
            let hit = found.iter().find(|v| v.rule == c.rule);
            let hit = hit.unwrap_or_else(|| {
                panic!(
                    "case {n} ({}, {mode}): not reported for the offending spec; got {found:?}",
                    c.rule
                )
            });
            assert!(
                hit.message.contains(c.path),
                "case {n} ({}, {mode}): message {:?} does not name {:?}",
                c.rule,
                hit.message,
                c.path
            );
            let passed = check_spec(&good, &template, &cfg);
            assert!(
                passed.is_empty(),
                "case {n} ({}, {mode}): the compliant variant is refused: {passed:?}",
                c.rule
            );
        }
    }
}

#[test]
fn the_template_check_is_the_floor_of_every_mode() {
    // Every baseline control, nodeName and empty containers: refused in the
    // template itself, and in template mode too (even when equal to it).
    let mut floor_rules = 0;
    for c in spec_cases() {
        let floor = c.rule.starts_with("baseline/")
            || c.rule == "host/node-name"
            || c.rule == "spec/no-containers";
        if !floor {
            continue;
        }
        floor_rules += 1;
        let bad = spec(edited(&base(), &c.bad));
        let good = spec(edited(&base(), &c.good));
        assert!(
            rules(&check_template(&bad)).contains(&c.rule),
            "{}: check_template missed it",
            c.rule
        );
        assert!(
            check_template(&good).is_empty(),
            "{}: check_template refused the compliant variant: {:?}",
            c.rule,
            check_template(&good)
        );
        let template_mode = check_spec(&bad, &bad, &config(PodPolicy::Template, &[]));
        assert!(
            rules(&template_mode).contains(&c.rule),
            "{}: template mode accepted a spec equal to a bad template",
            c.rule
        );
    }
    assert!(floor_rules >= 12, "the table lost floor cases");
}

#[test]
fn restricted_accepts_only_what_baseline_accepts() {
    let mut accepted = 0;
    for c in spec_cases() {
        let template_doc = edited(&base(), &c.template);
        let template = spec(template_doc.clone());
        for edits in [&c.bad, &c.good] {
            let proposed = spec(edited(&template_doc, edits));
            let restricted = check_spec(
                &proposed,
                &template,
                &config(PodPolicy::Restricted, c.image_prefixes),
            );
            if restricted.is_empty() {
                accepted += 1;
                let baseline = check_spec(
                    &proposed,
                    &template,
                    &config(PodPolicy::Baseline, c.image_prefixes),
                );
                assert!(
                    baseline.is_empty(),
                    "{}: restricted accepts but baseline refuses: {baseline:?}",
                    c.rule
                );
            }
        }
    }
    assert!(
        accepted > 30,
        "too few restricted-compliant variants ({accepted})"
    );
}

#[test]
fn the_default_template_passes_restricted() {
    let default = default_template_spec();
    assert_eq!(&default, default_template());
    assert!(check_template(&default).is_empty());
    for policy in [
        PodPolicy::Template,
        PodPolicy::Restricted,
        PodPolicy::Baseline,
    ] {
        let found = check_spec(&default, &default, &config(policy, &[]));
        assert!(found.is_empty(), "{policy}: {found:?}");
    }
    // A plugin proposing it as its own copy passes too (not the same reference).
    let copy = spec(serde_json::to_value(&default).expect("json"));
    assert!(
        check_spec(
            &copy,
            default_template(),
            &config(PodPolicy::Restricted, &[])
        )
        .is_empty()
    );
    let json = serde_json::to_value(&default).expect("json");
    assert_eq!(json["containers"][0]["image"], DEFAULT_IMAGE);
    assert_eq!(json["securityContext"]["runAsUser"], 65535);
    assert_eq!(json["automountServiceAccountToken"], false);
}

#[test]
fn a_spec_equal_to_the_template_but_for_empty_lists_is_the_template() {
    let template = spec(base());
    let mut doc = base();
    set(&mut doc, "/imagePullSecrets", json!([]));
    set(&mut doc, "/containers/1/command", json!([]));
    let proposed = spec(doc);
    assert_ne!(
        proposed, template,
        "the test needs a structurally different spec"
    );
    assert!(check_spec(&proposed, &template, &config(PodPolicy::Template, &[])).is_empty());
}

#[test]
fn a_differing_spec_names_the_fields_that_differ() {
    let template = spec(base());
    let proposed = spec(edited(
        &base(),
        &vec![
            (
                "/containers/1/image",
                json!("registry.example.com/team/proxy:1.0"),
            ),
            ("/hostname", json!("x")),
        ],
    ));
    let found = check_spec(&proposed, &template, &config(PodPolicy::Template, &[]));
    assert_eq!(rules(&found), ["template/spec-differs"]);
    assert!(
        found[0].message.contains("containers[1].image"),
        "{}",
        found[0].message
    );
    assert!(
        found[0].message.contains("hostname"),
        "{}",
        found[0].message
    );
    // An explicit default the template leaves out is a difference (fails safe).
    let proposed = spec(edited(&base(), &vec![("/hostNetwork", json!(false))]));
    let found = check_spec(&proposed, &template, &config(PodPolicy::Template, &[]));
    assert_eq!(rules(&found), ["template/spec-differs"]);
    assert!(
        found[0].message.contains("hostNetwork"),
        "{}",
        found[0].message
    );
}

#[test]
fn windows_pods_are_exempt_from_linux_only_controls_only_if_the_template_is_windows() {
    let windows = vec![
        ("/os", json!({"name": "windows"})),
        ("/securityContext/seccompProfile", Value::Null),
        (
            "/containers/0/securityContext",
            json!({"runAsNonRoot": true}),
        ),
        (
            "/containers/1/securityContext",
            json!({"runAsNonRoot": true}),
        ),
    ];
    let doc = edited(&base(), &windows);
    let restricted = config(PodPolicy::Restricted, &[]);
    assert!(check_spec(&spec(doc.clone()), &spec(doc.clone()), &restricted).is_empty());
    let found = check_spec(&spec(doc), &spec(base()), &restricted);
    assert_eq!(rules(&found), ["host/os"]);
}

#[test]
fn the_image_allowlist_applies_in_template_mode_too() {
    let template = spec(edited(
        &base(),
        &vec![("/containers/1/image", json!("docker.io/library/nginx:1"))],
    ));
    let allowlist = config(PodPolicy::Template, &["registry.example.com/team/"]);
    let found = check_spec(&template, &template, &allowlist);
    assert_eq!(rules(&found), ["host/image-prefix"]);
    assert!(
        found[0].message.contains("containers[1].image"),
        "{}",
        found[0].message
    );
    let fine = spec(base());
    assert!(check_spec(&fine, &fine, &allowlist).is_empty());
}

#[test]
fn violations_are_bounded() {
    let mut doc = base();
    let many: Vec<Value> = (0..20)
        .map(|i| json!({"name": format!("c{i}"), "image": "x", "securityContext": {"privileged": true}}))
        .collect();
    set(&mut doc, "/containers", json!(many));
    let found = check_spec(
        &spec(doc),
        &spec(base()),
        &config(PodPolicy::Restricted, &[]),
    );
    assert_eq!(found.len(), MAX_VIOLATIONS + 1);
    let last = found.last().expect("a summary");
    assert_eq!(last.rule, "policy/more");
    assert!(last.message.contains("more violations"), "{}", last.message);
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A metadata case: the proposed labels and annotations are the template's
/// with the case's pairs set on top (value [`DROP`] removes the key).
struct MetadataCase {
    rule: &'static str,
    template_labels: &'static [(&'static str, &'static str)],
    template_annotations: &'static [(&'static str, &'static str)],
    bad_labels: &'static [(&'static str, &'static str)],
    bad_annotations: &'static [(&'static str, &'static str)],
    good_labels: &'static [(&'static str, &'static str)],
    good_annotations: &'static [(&'static str, &'static str)],
}

const NONE: &[(&str, &str)] = &[];
/// A value that removes the key from the template's copy.
const DROP: &str = "\u{0}drop";
/// The Jinghzhu the metadata cases' pods belong to.
const OWNER: &str = "web";
const TEMPLATE_LABELS: &[(&str, &str)] = &[("app", "web"), ("app.kubernetes.io/name", "web")];
const TEMPLATE_ANNOTATIONS: &[(&str, &str)] = &[
    ("prometheus.io/scrape", "true"),
    (
        "container.apparmor.security.beta.kubernetes.io/web",
        "runtime/default",
    ),
    ("kubectl.kubernetes.io/default-container", "web"),
];

/// The template's pairs with `edits` on top.
fn over(template: &[(&str, &str)], edits: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut out = map(template);
    for (key, value) in edits {
        if *value == DROP {
            out.remove(*key);
        } else {
            out.insert(key.to_string(), value.to_string());
        }
    }
    out
}

fn metadata_cases() -> Vec<MetadataCase> {
    type Pairs = &'static [(&'static str, &'static str)];
    let labels = |rule: &'static str, bad: Pairs, good: Pairs| MetadataCase {
        rule,
        template_labels: TEMPLATE_LABELS,
        template_annotations: TEMPLATE_ANNOTATIONS,
        bad_labels: bad,
        bad_annotations: NONE,
        good_labels: good,
        good_annotations: NONE,
    };
    let annotations = |rule: &'static str, bad: Pairs, good: Pairs| MetadataCase {
        rule,
        template_labels: TEMPLATE_LABELS,
        template_annotations: TEMPLATE_ANNOTATIONS,
        bad_labels: NONE,
        bad_annotations: bad,
        good_labels: NONE,
        good_annotations: good,
    };
    vec![
        labels(
            "labels/host-key",
            &[("jinghzhu.io/owner", "someone-else")],
            &[("plugin.jinghzhu.io/owner", "web_x")],
        ),
        labels(
            "labels/host-key",
            &[("app.kubernetes.io/managed-by", "helm")],
            &[("app.kubernetes.io/name", "web")],
        ),
        labels(
            "labels/reserved-key",
            &[("node-role.kubernetes.io/control-plane", "")],
            &[("plugin.jinghzhu.io/role", "web")],
        ),
        labels(
            "template/metadata",
            &[("app.kubernetes.io/name", "billing")],
            &[("app", "web")],
        ),
        labels(
            "template/metadata",
            &[("app", "billing")],
            &[("app", "web"), ("plugin.jinghzhu.io/shard", "web_3")],
        ),
        // Dropping a template label takes the pod out of what selects it.
        labels("template/metadata", &[("app", DROP)], NONE),
        labels(
            "labels/not-allowed",
            &[("team", "payments")],
            &[("plugin.jinghzhu.io/team", "web_payments")],
        ),
        // The shared prefix: values scoped to this Jinghzhu only.
        labels(
            "labels/foreign-value",
            &[("plugin.jinghzhu.io/role", "primary")],
            &[("plugin.jinghzhu.io/role", "web_primary")],
        ),
        labels(
            "labels/foreign-value",
            &[("plugin.jinghzhu.io/instance", "web-db")],
            &[("plugin.jinghzhu.io/instance", "web")],
        ),
        labels(
            "labels/foreign-value",
            &[("plugin.jinghzhu.io/role", "web-db_primary")],
            &[("plugin.jinghzhu.io/role", "web_db_primary")],
        ),
        labels(
            "labels/foreign-value",
            &[("plugin.jinghzhu.io/role", "")],
            &[("plugin.jinghzhu.io/role", "web_none")],
        ),
        annotations(
            "annotations/host-key",
            &[("jinghzhu.io/reconciled-by", "me")],
            &[("plugin.jinghzhu.io/reconciled-by", "me")],
        ),
        annotations(
            "annotations/reserved-key",
            &[("cluster-autoscaler.kubernetes.io/safe-to-evict", "false")],
            &[("kubectl.kubernetes.io/default-container", "web")],
        ),
        annotations(
            "template/metadata",
            &[("prometheus.io/scrape", "false")],
            &[("prometheus.io/scrape", "true")],
        ),
        annotations(
            "template/metadata",
            &[("kubectl.kubernetes.io/default-container", DROP)],
            // Annotation values under the prefix are free (nothing selects annotations).
            &[("plugin.jinghzhu.io/note", "any value")],
        ),
        annotations(
            "annotations/not-allowed",
            &[("sidecar.istio.io/inject", "false")],
            &[("plugin.jinghzhu.io/note", "hi")],
        ),
        annotations(
            "baseline/apparmor",
            &[(
                "container.apparmor.security.beta.kubernetes.io/web",
                "unconfined",
            )],
            &[(
                "container.apparmor.security.beta.kubernetes.io/web",
                "runtime/default",
            )],
        ),
        MetadataCase {
            // Even copied from the template, an unconfined AppArmor profile
            // is refused; dropping it is fine (it is not required).
            template_annotations: &[(
                "container.apparmor.security.beta.kubernetes.io/web",
                "unconfined",
            )],
            ..annotations(
                "baseline/apparmor",
                NONE,
                &[("container.apparmor.security.beta.kubernetes.io/web", DROP)],
            )
        },
        MetadataCase {
            // A template that sets a host key: the host sets its own value;
            // the plugin may leave it out, never copy it.
            template_labels: &[("app", "web"), ("jinghzhu.io/owner", "web")],
            ..labels("labels/host-key", NONE, &[("jinghzhu.io/owner", DROP)])
        },
    ]
}

#[test]
fn every_metadata_rule_fires_on_its_offending_variant_only() {
    let cfg = PolicyConfig::default();
    for (n, c) in metadata_cases().into_iter().enumerate() {
        let tl = map(c.template_labels);
        let ta = map(c.template_annotations);
        let bad_labels = over(c.template_labels, c.bad_labels);
        let bad_annotations = over(c.template_annotations, c.bad_annotations);
        let found = check_metadata(OWNER, &bad_labels, &bad_annotations, &tl, &ta, &cfg);
        assert_eq!(rules(&found), [c.rule], "case {n}: {found:?}");
        let key = c
            .bad_labels
            .iter()
            .chain(c.bad_annotations)
            .next()
            .map(|(k, _)| *k);
        assert!(
            found[0].message.contains(key.unwrap_or_default()),
            "case {n}: {}",
            found[0].message
        );
        let passed = check_metadata(
            OWNER,
            &over(c.template_labels, c.good_labels),
            &over(c.template_annotations, c.good_annotations),
            &tl,
            &ta,
            &cfg,
        );
        assert!(passed.is_empty(), "case {n} ({}): {passed:?}", c.rule);
    }
}

#[test]
fn template_metadata_holds_in_every_mode_and_names_what_is_missing() {
    let tl = map(TEMPLATE_LABELS);
    let ta = map(TEMPLATE_ANNOTATIONS);
    let empty = BTreeMap::new();
    for policy in [
        PodPolicy::Template,
        PodPolicy::Restricted,
        PodPolicy::Baseline,
    ] {
        let cfg = config(policy, &[]);
        // A plugin that writes no metadata at all drops all five keys.
        let found = check_metadata(OWNER, &empty, &empty, &tl, &ta, &cfg);
        assert_eq!(rules(&found), ["template/metadata"; 5], "{policy}");
        assert!(found[0].message.contains("missing"), "{}", found[0].message);
        assert!(check_metadata(OWNER, &tl, &ta, &tl, &ta, &cfg).is_empty());
    }
}

#[test]
fn scoped_label_values_belong_to_one_jinghzhu() {
    use super::labels::scoped_label_value;
    assert!(scoped_label_value("web", "web"));
    assert!(scoped_label_value("web_3", "web"));
    assert!(scoped_label_value("web_a-b.c_d", "web"));
    for value in ["", "3", "web-db", "webdb", "we", "web-", "web.x", "x_web"] {
        assert!(!scoped_label_value(value, "web"), "{value:?}");
    }
    // Jinghzhu names have no '_': the part before the first '_' is the owner.
    let owners = ["web", "web-db", "we", "web.db", "w"];
    for value in ["web_x", "web-db_x", "we_b", "web.db_x", "w_eb_x", "web"] {
        let claimed: Vec<&str> = owners
            .iter()
            .copied()
            .filter(|o| scoped_label_value(value, o))
            .collect();
        assert!(claimed.len() <= 1, "{value}: {claimed:?}");
    }
}

#[test]
fn default_pull_policies_follow_the_api_server() {
    use super::confinement::default_pull_policy;
    for (image, policy) in [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("registry.example.com:5000/team/web", "Always"),
        ("registry.example.com:5000/team/web:1.2", "IfNotPresent"),
        ("nginx:1.27", "IfNotPresent"),
        ("nginx@sha256:abcd", "IfNotPresent"),
        ("nginx:latest@sha256:abcd", "Always"),
        ("", "Always"),
    ] {
        assert_eq!(default_pull_policy(image), policy, "{image}");
    }
}

#[test]
fn a_template_envfrom_allows_every_key_of_that_secret() {
    let template = spec(edited(
        &base(),
        &vec![(
            "/containers/1/envFrom",
            json!([{"secretRef": {"name": "web-db"}}]),
        )],
    ));
    let proposed = spec(edited(
        &base(),
        &vec![
            (
                "/containers/0/envFrom",
                json!([{"secretRef": {"name": "web-db"}}]),
            ),
            (
                "/containers/0/env/0/valueFrom/secretKeyRef/key",
                json!("admin-password"),
            ),
        ],
    ));
    for policy in [PodPolicy::Restricted, PodPolicy::Baseline] {
        let found = check_spec(&proposed, &template, &config(policy, &[]));
        assert!(found.is_empty(), "{policy}: {found:?}");
    }
}

#[test]
fn allowed_prefixes_are_configurable_but_never_open_reserved_keys() {
    let cfg = PolicyConfig {
        allowed_label_prefixes: vec!["example.com/".into()],
        ..PolicyConfig::default()
    };
    let empty = BTreeMap::new();
    assert!(
        check_metadata(
            OWNER,
            &map(&[("example.com/a", "web_1")]),
            &empty,
            &empty,
            &empty,
            &cfg
        )
        .is_empty()
    );
    let found = check_metadata(
        OWNER,
        &map(&[("example.com/a", "1")]),
        &empty,
        &empty,
        &empty,
        &cfg,
    );
    assert_eq!(rules(&found), ["labels/foreign-value"]);
    let found = check_metadata(
        OWNER,
        &map(&[("plugin.jinghzhu.io/a", "web_1")]),
        &empty,
        &empty,
        &empty,
        &cfg,
    );
    assert_eq!(rules(&found), ["labels/not-allowed"]);

    for bad in [
        "",
        "app",
        "kubernetes.io/",
        "x.k8s.io/",
        "jinghzhu.io/",
        "/x",
    ] {
        let cfg = PolicyConfig {
            allowed_label_prefixes: vec![bad.into()],
            ..PolicyConfig::default()
        };
        assert_eq!(
            cfg.validate(),
            Err(PolicyConfigError::LabelPrefix(bad.into())),
            "{bad:?}"
        );
    }
    for bad in ["", "registry.example.com", "docker.io/library/nginx"] {
        let cfg = PolicyConfig {
            allowed_image_prefixes: vec![bad.into()],
            ..PolicyConfig::default()
        };
        assert_eq!(
            cfg.validate(),
            Err(PolicyConfigError::ImagePrefix(bad.into())),
            "{bad:?}"
        );
    }
    let ok = PolicyConfig {
        allowed_image_prefixes: vec![
            "registry.example.com/team/".into(),
            "ghcr.io/org/app:".into(),
        ],
        allowed_label_prefixes: vec!["example.com/plugin-".into()],
        ..PolicyConfig::default()
    };
    assert_eq!(ok.validate(), Ok(()));
    assert_eq!(PolicyConfig::default().validate(), Ok(()));
}

#[test]
fn the_flags_parse_into_a_checked_config() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        policy: PolicyArgs,
    }
    let defaults = Cli::try_parse_from(["x"]).expect("parses").policy.config();
    assert_eq!(defaults, Ok(PolicyConfig::default()));
    let cli = Cli::try_parse_from([
        "x",
        "--pod-policy",
        "restricted",
        "--allowed-image-prefix",
        "registry.example.com/team/",
        "--allowed-image-prefix",
        "ghcr.io/org/",
        "--allowed-label-prefix",
        "example.com/",
    ])
    .expect("parses");
    let config = cli.policy.config().expect("valid");
    assert_eq!(config.policy, PodPolicy::Restricted);
    assert_eq!(
        config.allowed_image_prefixes,
        ["registry.example.com/team/", "ghcr.io/org/"]
    );
    assert_eq!(config.allowed_label_prefixes, ["example.com/"]);
    let bad = Cli::try_parse_from(["x", "--allowed-image-prefix", "docker.io"]).expect("parses");
    let err = bad.policy.config().expect_err("refused");
    assert!(
        err.to_string().contains("must be non-empty and end with"),
        "{err}"
    );
    assert!(Cli::try_parse_from(["x", "--pod-policy", "privileged"]).is_err());
}

/// The rule ids written in the policy's source (string literals such as
/// `"restricted/seccomp"`), so the tables cannot silently miss a new rule.
fn rule_ids_in_source() -> Vec<String> {
    let sources = [
        include_str!("mod.rs"),
        include_str!("pss.rs"),
        include_str!("host_rules.rs"),
        include_str!("confinement.rs"),
        include_str!("template.rs"),
        include_str!("labels.rs"),
    ];
    let families = [
        "baseline",
        "restricted",
        "host",
        "template",
        "spec",
        "labels",
        "annotations",
    ];
    let mut ids: Vec<String> = Vec::new();
    for source in sources {
        for family in families {
            let opening = format!("\"{family}/");
            for (at, _) in source.match_indices(&opening) {
                let rest = &source[at + 1..];
                let Some(end) = rest.find('"') else { continue };
                let id = &rest[..end];
                let name = &id[family.len() + 1..];
                let kebab =
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '-');
                if kebab && !ids.iter().any(|i| i == id) {
                    ids.push(id.to_string());
                }
            }
        }
    }
    ids
}

#[test]
fn every_rule_has_a_table_case() {
    let ids = rule_ids_in_source();
    assert!(ids.len() >= 45, "found only {ids:?}");
    let covered: Vec<&str> = spec_cases()
        .iter()
        .map(|c| c.rule)
        .chain(metadata_cases().iter().map(|c| c.rule))
        .collect();
    let missing: Vec<&String> = ids
        .iter()
        .filter(|id| !covered.contains(&id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a table case: {missing:?}"
    );
}
