//! The host's rules for plugin-written specs (`restricted` and `baseline`
//! modes): nothing that carries authority may be wider than the Jinghzhu's
//! template, and images come from the admin's allowlist (every mode).
//!
//! | rule | what the proposed spec may have |
//! |---|---|
//! | `host/image-prefix` | images (all container kinds, `image` volumes) under an allowed prefix, when the list is non-empty |
//! | `host/service-account` | runs as the template's service account: `serviceAccountName` (or the deprecated `serviceAccount`, unset = `default`) names the same one |
//! | `host/automount-token` | `automountServiceAccountToken` only narrowed: `true` only if the template says `true`; `false` if the template says `false` |
//! | `host/volume-source` | `secret`, `projected`, `persistentVolumeClaim`, `csi`, `ephemeral` (and under baseline every other non-hostPath network/disk source) only with a source equal to one of the template's volumes (names may differ) |
//! | `host/env-secret` | `env[].valueFrom.secretKeyRef` / `envFrom[].secretRef` only for Secrets the template references (volumes, projected sources, env) |
//! | `host/env-secret-key` | and per key: a `secretKeyRef` only for a (Secret, key) pair the template exposes (its own `secretKeyRef`, an `items` entry of a secret volume or projected source, or the whole Secret); `envFrom[].secretRef` only for a Secret the template exposes whole (its own `envFrom`, or a secret volume / projected source without `items`). Secret volumes themselves must equal a template volume (`host/volume-source`), so their `items` are the template's |
//! | `host/image-pull-secrets` | `imagePullSecrets` a subset of the template's |
//! | `host/tolerations` | each toleration equal to one of the template's |
//! | `host/node-selector`, `host/affinity`, `host/topology-spread` | equal to the template's |
//! | `host/priority` | `priorityClassName`, `priority`, `preemptionPolicy` equal to the template's |
//! | `host/runtime-class`, `host/scheduler-name`, `host/os`, `host/resource-claims` | equal to the template's |
//! | `host/host-users` | `hostUsers` only narrowed: not `true`/unset if the template says `false` |
//! | `host/run-as-group`, `host/supplemental-groups`, `host/fs-group`, `host/selinux-level`, `host/seccomp-profile`, `host/apparmor-profile`, `host/grace-period`, `host/active-deadline`, `host/image-pull-policy` | identity, confinement and lifetime no wider than the template's: see [`super::confinement`] |
//!
//! Free (they reach nothing beyond the plugin's own pods): `configMap`,
//! `downwardAPI`, `emptyDir` and `image` volumes, `hostAliases`,
//! `shareProcessNamespace`, DNS settings, hostname/subdomain, resources,
//! probes, commands, scheduling gates, readiness gates. `nodeName` is never
//! allowed (part of the floor, [`super::check_template`]).

use k8s_openapi::api::core::v1::{PodSpec, Volume};

use super::confinement;
use super::containers;
use super::pss::{Level, RESTRICTED_VOLUME_TYPES};
use super::report::Report;
use super::volumes::volume_kind;

/// Whether `a` and `b` have the same source (their names may differ).
fn same_source(a: &Volume, b: &Volume) -> bool {
    a.aws_elastic_block_store == b.aws_elastic_block_store
        && a.azure_disk == b.azure_disk
        && a.azure_file == b.azure_file
        && a.cephfs == b.cephfs
        && a.cinder == b.cinder
        && a.config_map == b.config_map
        && a.csi == b.csi
        && a.downward_api == b.downward_api
        && a.empty_dir == b.empty_dir
        && a.ephemeral == b.ephemeral
        && a.fc == b.fc
        && a.flex_volume == b.flex_volume
        && a.flocker == b.flocker
        && a.gce_persistent_disk == b.gce_persistent_disk
        && a.git_repo == b.git_repo
        && a.glusterfs == b.glusterfs
        && a.host_path == b.host_path
        && a.image == b.image
        && a.iscsi == b.iscsi
        && a.nfs == b.nfs
        && a.persistent_volume_claim == b.persistent_volume_claim
        && a.photon_persistent_disk == b.photon_persistent_disk
        && a.portworx_volume == b.portworx_volume
        && a.projected == b.projected
        && a.quobyte == b.quobyte
        && a.rbd == b.rbd
        && a.scale_io == b.scale_io
        && a.secret == b.secret
        && a.storageos == b.storageos
        && a.vsphere_volume == b.vsphere_volume
}

/// Volume sources that reach nothing outside the pod (or, for `image`,
/// only what the image allowlist allows).
const FREE_VOLUME_TYPES: &[&str] = &["configMap", "downwardAPI", "emptyDir", "image"];

/// `host/image-prefix`: every image under an allowed prefix (when any).
pub(crate) fn check_images(spec: &PodSpec, prefixes: &[String], report: &mut Report) {
    if prefixes.is_empty() {
        return;
    }
    let allowed = |image: &str| prefixes.iter().any(|p| image.starts_with(p.as_str()));
    for c in containers::all(spec) {
        if let Some(image) = c.image.filter(|i| !allowed(i)) {
            report.push("host/image-prefix", || {
                format!(
                    "{}.image {image:?} does not start with an allowed prefix ({})",
                    c.path,
                    prefixes.join(", ")
                )
            });
        }
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let reference = v.image.as_ref().and_then(|img| img.reference.as_deref());
        if let Some(image) = reference.filter(|i| !allowed(i)) {
            report.push("host/image-prefix", || {
                format!(
                    "volumes[{i}].image.reference {image:?} does not start with an allowed prefix ({})",
                    prefixes.join(", ")
                )
            });
        }
    }
}

/// The host rules for `proposed`, a plugin-written spec, against `template`
/// (the PSS `level` decides which volume types PSS already rejects).
pub(crate) fn check(proposed: &PodSpec, template: &PodSpec, level: Level, report: &mut Report) {
    service_account(proposed, template, report);
    automount_token(proposed, template, report);
    host_users(proposed, template, report);
    volume_sources(proposed, template, level, report);
    env_secrets(proposed, template, report);
    image_pull_secrets(proposed, template, report);
    tolerations(proposed, template, report);
    equal_fields(proposed, template, report);
    confinement::check(proposed, template, level, report);
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// The service account a spec runs as (the API server's reading of the
/// deprecated `serviceAccount` alias, `default` when unset).
fn effective_service_account(spec: &PodSpec) -> &str {
    non_empty(&spec.service_account_name)
        .or(non_empty(&spec.service_account))
        .unwrap_or("default")
}

/// `host/service-account`: the pod runs as the template's service account,
/// and neither field names another one.
fn service_account(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let wanted = effective_service_account(template);
    let runs_as = effective_service_account(proposed);
    if runs_as != wanted {
        report.push("host/service-account", || {
            format!(
                "serviceAccountName: the pod would run as {runs_as:?}, not as the template's service account {wanted:?}"
            )
        });
        return;
    }
    if let Some(name) = non_empty(&proposed.service_account).filter(|n| *n != wanted) {
        report.push("host/service-account", || {
            format!("serviceAccount {name:?} must be the template's service account {wanted:?}")
        });
    }
}

/// `host/automount-token`: only narrowed.
fn automount_token(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let allowed = match template.automount_service_account_token {
        Some(true) => true,
        None => proposed.automount_service_account_token != Some(true),
        Some(false) => proposed.automount_service_account_token == Some(false),
    };
    if !allowed {
        report.push("host/automount-token", || {
            format!(
                "automountServiceAccountToken {} is wider than the template's {}",
                show_opt(proposed.automount_service_account_token),
                show_opt(template.automount_service_account_token)
            )
        });
    }
}

/// `host/host-users`: a template's user namespace (`hostUsers: false`) stays.
fn host_users(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    if template.host_users == Some(false) && proposed.host_users != Some(false) {
        report.push("host/host-users", || {
            format!(
                "hostUsers {} is wider than the template's false",
                show_opt(proposed.host_users)
            )
        });
    }
}

fn show_opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "unset".to_string(), |v| v.to_string())
}

/// `host/volume-source`.
fn volume_sources(proposed: &PodSpec, template: &PodSpec, level: Level, report: &mut Report) {
    let template_volumes = template.volumes.as_deref().unwrap_or_default();
    for (i, v) in proposed.volumes.iter().flatten().enumerate() {
        let kind = volume_kind(v);
        let checked_by_pss = kind == "hostPath"
            || (level == Level::Restricted && !RESTRICTED_VOLUME_TYPES.contains(&kind));
        if FREE_VOLUME_TYPES.contains(&kind) || checked_by_pss {
            continue;
        }
        if !template_volumes.iter().any(|t| same_source(v, t)) {
            report.push("host/volume-source", || {
                format!(
                    "volumes[{i}] ({:?}): this {kind} source is not one of the template's volumes; \
                     a plugin may mount a {kind} only exactly as the template does",
                    v.name
                )
            });
        }
    }
}

/// Whether `template` references the Secret `name` (volumes, projected
/// sources, env and envFrom of any container).
fn template_references_secret(template: &PodSpec, name: &str) -> bool {
    let in_volumes = template.volumes.iter().flatten().any(|v| {
        v.secret
            .as_ref()
            .is_some_and(|s| s.secret_name.as_deref() == Some(name))
            || v.projected.as_ref().is_some_and(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.secret.as_ref().is_some_and(|s| s.name == name))
            })
    });
    in_volumes
        || containers::all(template).any(|c| {
            c.env.iter().any(|e| {
                e.value_from
                    .as_ref()
                    .and_then(|f| f.secret_key_ref.as_ref())
                    .is_some_and(|s| s.name == name)
            }) || c
                .env_from
                .iter()
                .any(|e| e.secret_ref.as_ref().is_some_and(|s| s.name == name))
        })
}

/// What of one Secret a template exposes to its pods.
enum Exposure<'a> {
    /// Every key (an `envFrom`, or a volume or projected source without `items`).
    Whole,
    /// These keys only.
    Keys(Vec<&'a str>),
}

/// What of the Secret `name` `template` exposes (volumes, projected
/// sources, env and envFrom of every container); `Keys([])` when it only
/// names it (e.g. with empty `items`) or not at all.
fn secret_exposure<'a>(template: &'a PodSpec, name: &str) -> Exposure<'a> {
    let mut keys = Vec::new();
    let mut items_or_whole =
        |items: Option<&'a [k8s_openapi::api::core::v1::KeyToPath]>| match items {
            None => true,
            Some(items) => {
                keys.extend(items.iter().map(|i| i.key.as_str()));
                false
            }
        };
    for v in template.volumes.iter().flatten() {
        if let Some(s) = v
            .secret
            .as_ref()
            .filter(|s| s.secret_name.as_deref() == Some(name))
            && items_or_whole(s.items.as_deref())
        {
            return Exposure::Whole;
        }
        let projected = v.projected.as_ref().and_then(|p| p.sources.as_deref());
        for source in projected.unwrap_or_default() {
            if let Some(s) = source.secret.as_ref().filter(|s| s.name == name)
                && items_or_whole(s.items.as_deref())
            {
                return Exposure::Whole;
            }
        }
    }
    for c in containers::all(template) {
        if c.env_from
            .iter()
            .any(|e| e.secret_ref.as_ref().is_some_and(|s| s.name == name))
        {
            return Exposure::Whole;
        }
        let refs = c.env.iter().filter_map(|e| {
            e.value_from
                .as_ref()
                .and_then(|f| f.secret_key_ref.as_ref())
        });
        keys.extend(refs.filter(|s| s.name == name).map(|s| s.key.as_str()));
    }
    Exposure::Keys(keys)
}

/// `host/env-secret` (a Secret the template does not reference) and
/// `host/env-secret-key` (a key, or every key, of one it references only
/// in part).
fn env_secrets(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    for c in containers::all(proposed) {
        for (j, env) in c.env.iter().enumerate() {
            let secret = env
                .value_from
                .as_ref()
                .and_then(|f| f.secret_key_ref.as_ref());
            let Some(s) = secret else { continue };
            if !template_references_secret(template, &s.name) {
                report.push("host/env-secret", || {
                    format!(
                        "{}.env[{j}].valueFrom.secretKeyRef.name {:?} is not a Secret the template references",
                        c.path, s.name
                    )
                });
            } else if let Exposure::Keys(keys) = secret_exposure(template, &s.name)
                && !keys.contains(&s.key.as_str())
            {
                report.push("host/env-secret-key", || {
                    format!(
                        "{}.env[{j}].valueFrom.secretKeyRef: key {:?} of Secret {:?} is not one the \
                         template uses ({})",
                        c.path,
                        s.key,
                        s.name,
                        keys.join(", ")
                    )
                });
            }
        }
        for (j, from) in c.env_from.iter().enumerate() {
            let Some(s) = from.secret_ref.as_ref() else {
                continue;
            };
            if !template_references_secret(template, &s.name) {
                report.push("host/env-secret", || {
                    format!(
                        "{}.envFrom[{j}].secretRef.name {:?} is not a Secret the template references",
                        c.path, s.name
                    )
                });
            } else if let Exposure::Keys(keys) = secret_exposure(template, &s.name) {
                report.push("host/env-secret-key", || {
                    format!(
                        "{}.envFrom[{j}].secretRef {:?} would read every key of the Secret; the \
                         template uses only {}",
                        c.path,
                        s.name,
                        keys.join(", ")
                    )
                });
            }
        }
    }
}

/// `host/image-pull-secrets`.
fn image_pull_secrets(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let template_secrets = template.image_pull_secrets.as_deref().unwrap_or_default();
    for (i, s) in proposed.image_pull_secrets.iter().flatten().enumerate() {
        if !template_secrets.iter().any(|t| t.name == s.name) {
            report.push("host/image-pull-secrets", || {
                format!(
                    "imagePullSecrets[{i}] {:?} is not one of the template's image pull secrets",
                    s.name
                )
            });
        }
    }
}

/// `host/tolerations`: a subset of the template's.
fn tolerations(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let template_tolerations = template.tolerations.as_deref().unwrap_or_default();
    for (i, t) in proposed.tolerations.iter().flatten().enumerate() {
        if !template_tolerations.contains(t) {
            report.push("host/tolerations", || {
                format!(
                    "tolerations[{i}] (key {:?}, effect {:?}) is not one of the template's tolerations",
                    t.key.as_deref().unwrap_or_default(),
                    t.effect.as_deref().unwrap_or_default()
                )
            });
        }
    }
}

/// `Option<Vec<_>>` or `Option<BTreeMap<_>>` where empty means unset.
fn same_list<T: PartialEq>(a: Option<&[T]>, b: Option<&[T]>) -> bool {
    a.unwrap_or_default() == b.unwrap_or_default()
}

/// `Option<T>` where `T::default()` means unset.
fn same_or_default<T: PartialEq + Default>(a: Option<&T>, b: Option<&T>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => x == y,
        (Some(x), None) | (None, Some(x)) => *x == T::default(),
        (None, None) => true,
    }
}

/// `Option<String>` where empty means unset (and, if given, `default` too).
fn same_name(a: &Option<String>, b: &Option<String>, default: Option<&str>) -> bool {
    fn norm<'a>(s: &'a Option<String>, default: Option<&str>) -> Option<&'a str> {
        non_empty(s).filter(|s| Some(*s) != default)
    }
    norm(a, default) == norm(b, default)
}

/// The fields that must equal the template's.
fn equal_fields(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let p = proposed;
    let t = template;
    let empty = std::collections::BTreeMap::new();
    let checks: [(&'static str, &'static str, bool); 10] = [
        (
            "host/node-selector",
            "nodeSelector",
            p.node_selector.as_ref().unwrap_or(&empty)
                == t.node_selector.as_ref().unwrap_or(&empty),
        ),
        (
            "host/affinity",
            "affinity",
            same_or_default(p.affinity.as_ref(), t.affinity.as_ref()),
        ),
        (
            "host/topology-spread",
            "topologySpreadConstraints",
            same_list(
                p.topology_spread_constraints.as_deref(),
                t.topology_spread_constraints.as_deref(),
            ),
        ),
        (
            "host/priority",
            "priorityClassName",
            same_name(&p.priority_class_name, &t.priority_class_name, None),
        ),
        ("host/priority", "priority", p.priority == t.priority),
        (
            "host/priority",
            "preemptionPolicy",
            same_name(&p.preemption_policy, &t.preemption_policy, None),
        ),
        (
            "host/runtime-class",
            "runtimeClassName",
            same_name(&p.runtime_class_name, &t.runtime_class_name, None),
        ),
        (
            "host/scheduler-name",
            "schedulerName",
            same_name(
                &p.scheduler_name,
                &t.scheduler_name,
                Some("default-scheduler"),
            ),
        ),
        ("host/os", "os", p.os == t.os),
        (
            "host/resource-claims",
            "resourceClaims",
            same_list(p.resource_claims.as_deref(), t.resource_claims.as_deref()),
        ),
    ];
    for (rule, field, equal) in checks {
        if !equal {
            report.push(rule, || {
                format!("{field} must equal the template's {field}")
            });
        }
    }
}
