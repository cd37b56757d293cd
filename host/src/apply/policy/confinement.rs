//! The host rules on identity, confinement and lifetime (`restricted` and
//! `baseline` modes, part of [`super::host_rules`]): a plugin-written spec
//! may use only the groups, SELinux levels, Localhost profiles, grace
//! periods, deadlines and pull policies its template already grants, or
//! narrower ones.
//!
//! | rule | what the proposed spec may have |
//! |---|---|
//! | `host/run-as-group` (restricted) | each container's effective `runAsGroup` (its own, else the pod's) is one the template's containers run as (unset, the image's group, only if a template container leaves it unset) |
//! | `host/supplemental-groups` (restricted) | `supplementalGroups` ⊆ the template's; `supplementalGroupsPolicy: Strict` stays |
//! | `host/fs-group` (restricted) | `fsGroup` the template's or unset; `fsGroupChangePolicy` the template's (unset = `Always`) |
//! | `host/selinux-level` | every `seLinuxOptions.level` (pod, containers) is one the template sets; unset (the runtime picks a unique level) is always fine |
//! | `host/seccomp-profile` | every `Localhost` seccomp profile names one the template uses (`RuntimeDefault` is always fine) |
//! | `host/apparmor-profile` | every `Localhost` AppArmor profile (field form) names one the template uses; the annotation form is bounded with the metadata (a template key keeps its value) |
//! | `host/grace-period` | `terminationGracePeriodSeconds` ≤ the template's (unset = 30 s), and each probe's ≤ the longest the template allows |
//! | `host/active-deadline` | `activeDeadlineSeconds` ≤ the template's when it sets one |
//! | `host/image-pull-policy` | each container's and `image` volume's effective pull policy (unset: `Always` for `:latest` or no tag, else `IfNotPresent`, as the API server defaults it) is `Always` or one the template uses |
//!
//! Identity (user and group ids) is bounded only under `restricted`:
//! `baseline` lets a trusted plugin run as root, which makes group ids moot.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{AppArmorProfile, PodSpec, SELinuxOptions, SeccompProfile};

use super::containers::{self, ContainerPath};
use super::pss::Level;
use super::report::Report;

/// The pod's default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// The rules of this module for `proposed` against `template`.
pub(crate) fn check(proposed: &PodSpec, template: &PodSpec, level: Level, report: &mut Report) {
    if level == Level::Restricted {
        run_as_group(proposed, template, report);
        supplemental_groups(proposed, template, report);
        fs_group(proposed, template, report);
    }
    selinux_levels(proposed, template, report);
    localhost_profiles(proposed, template, report);
    grace_period(proposed, template, report);
    active_deadline(proposed, template, report);
    image_pull_policy(proposed, template, report);
}

/// Where a security context is, for messages.
fn context_path(at: Option<ContainerPath>) -> String {
    match at {
        None => "securityContext".to_string(),
        Some(path) => format!("{path}.securityContext"),
    }
}

fn show_set<T: std::fmt::Debug>(set: &BTreeSet<T>) -> String {
    let shown: Vec<String> = set.iter().map(|v| format!("{v:?}")).collect();
    format!("[{}]", shown.join(", "))
}

/// The effective `runAsGroup` of each container of `spec`, with its path.
fn effective_groups(spec: &PodSpec) -> impl Iterator<Item = (ContainerPath, Option<i64>)> + '_ {
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.run_as_group);
    containers::all(spec).map(move |c| {
        let own = c.security_context.and_then(|sc| sc.run_as_group);
        (c.path, own.or(pod))
    })
}

/// `host/run-as-group`.
fn run_as_group(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let allowed: BTreeSet<Option<i64>> = effective_groups(template).map(|(_, g)| g).collect();
    let show = |group: &Option<i64>| {
        group.map_or_else(|| "the image's group".to_string(), |g| g.to_string())
    };
    for (path, group) in effective_groups(proposed) {
        if !allowed.contains(&group) {
            report.push("host/run-as-group", || {
                let shown: Vec<String> = allowed.iter().map(show).collect();
                format!(
                    "{path}: runAsGroup would be {}; the template's containers run as {}",
                    show(&group),
                    shown.join(", ")
                )
            });
        }
    }
}

/// `host/supplemental-groups`.
fn supplemental_groups(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let p = proposed.security_context.as_ref();
    let t = template.security_context.as_ref();
    let allowed: BTreeSet<i64> = t
        .and_then(|sc| sc.supplemental_groups.as_deref())
        .unwrap_or_default()
        .iter()
        .copied()
        .collect();
    let groups = p
        .and_then(|sc| sc.supplemental_groups.as_deref())
        .unwrap_or_default();
    for (i, group) in groups.iter().enumerate() {
        if !allowed.contains(group) {
            report.push("host/supplemental-groups", || {
                format!(
                    "securityContext.supplementalGroups[{i}] {group} is not one of the template's {}",
                    show_set(&allowed)
                )
            });
        }
    }
    let strict = |sc: Option<&k8s_openapi::api::core::v1::PodSecurityContext>| {
        sc.and_then(|sc| sc.supplemental_groups_policy.as_deref()) == Some("Strict")
    };
    if strict(t) && !strict(p) {
        report.push("host/supplemental-groups", || {
            "securityContext.supplementalGroupsPolicy must stay Strict, as in the template \
             (Merge adds the image's groups)"
                .into()
        });
    }
}

/// `host/fs-group`.
fn fs_group(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let p = proposed.security_context.as_ref();
    let t = template.security_context.as_ref();
    let wanted = t.and_then(|sc| sc.fs_group);
    if let Some(group) = p.and_then(|sc| sc.fs_group).filter(|g| Some(*g) != wanted) {
        report.push("host/fs-group", || {
            format!(
                "securityContext.fsGroup {group} is not the template's ({}): it becomes a group \
                 of every container and owns the volumes",
                wanted.map_or_else(|| "unset".to_string(), |g| g.to_string())
            )
        });
    }
    let policy = |sc: Option<&k8s_openapi::api::core::v1::PodSecurityContext>| {
        sc.and_then(|sc| sc.fs_group_change_policy.as_deref())
            .filter(|p| !p.is_empty())
            .unwrap_or("Always")
            .to_string()
    };
    let (mine, theirs) = (policy(p), policy(t));
    if mine != theirs {
        report.push("host/fs-group", || {
            format!(
                "securityContext.fsGroupChangePolicy {mine:?} must be the template's {theirs:?}"
            )
        });
    }
}

/// The pod's and every container's security-context field `pick`, each with
/// its place (`None` = the pod).
fn contexts<'a, T: 'a>(
    spec: &'a PodSpec,
    pod: impl Fn(&'a k8s_openapi::api::core::v1::PodSecurityContext) -> Option<&'a T>,
    container: impl Fn(&'a k8s_openapi::api::core::v1::SecurityContext) -> Option<&'a T> + 'a,
) -> impl Iterator<Item = (Option<ContainerPath>, &'a T)> + 'a {
    let pod = spec
        .security_context
        .as_ref()
        .and_then(pod)
        .map(|v| (None, v));
    pod.into_iter()
        .chain(containers::all(spec).filter_map(move |c| {
            c.security_context
                .and_then(&container)
                .map(|v| (Some(c.path), v))
        }))
}

fn selinux_options(
    spec: &PodSpec,
) -> impl Iterator<Item = (Option<ContainerPath>, &SELinuxOptions)> {
    contexts(
        spec,
        |sc| sc.se_linux_options.as_ref(),
        |sc| sc.se_linux_options.as_ref(),
    )
}

/// `host/selinux-level`.
fn selinux_levels(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let level = |o: &SELinuxOptions| o.level.clone().filter(|l| !l.is_empty());
    let allowed: BTreeSet<String> = selinux_options(template)
        .filter_map(|(_, o)| level(o))
        .collect();
    for (at, options) in selinux_options(proposed) {
        if let Some(wanted) = level(options).filter(|l| !allowed.contains(l)) {
            report.push("host/selinux-level", || {
                format!(
                    "{}.seLinuxOptions.level {wanted:?} is not one the template sets ({}); \
                     leave it unset for a level of the pod's own",
                    context_path(at),
                    show_set(&allowed)
                )
            });
        }
    }
}

fn seccomp_profiles(
    spec: &PodSpec,
) -> impl Iterator<Item = (Option<ContainerPath>, &SeccompProfile)> {
    contexts(
        spec,
        |sc| sc.seccomp_profile.as_ref(),
        |sc| sc.seccomp_profile.as_ref(),
    )
}

fn apparmor_profiles(
    spec: &PodSpec,
) -> impl Iterator<Item = (Option<ContainerPath>, &AppArmorProfile)> {
    contexts(
        spec,
        |sc| sc.app_armor_profile.as_ref(),
        |sc| sc.app_armor_profile.as_ref(),
    )
}

/// The name of a `Localhost` profile of type `type_`.
fn localhost_name<'a>(type_: &str, name: &'a Option<String>) -> Option<&'a str> {
    (type_ == "Localhost").then(|| name.as_deref().unwrap_or_default())
}

fn seccomp(p: &SeccompProfile) -> Option<&str> {
    localhost_name(&p.type_, &p.localhost_profile)
}

fn apparmor(p: &AppArmorProfile) -> Option<&str> {
    localhost_name(&p.type_, &p.localhost_profile)
}

/// `host/seccomp-profile` and `host/apparmor-profile`.
fn localhost_profiles(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let allowed: BTreeSet<&str> = seccomp_profiles(template)
        .filter_map(|(_, p)| seccomp(p))
        .collect();
    for (at, profile) in seccomp_profiles(proposed) {
        if let Some(name) = seccomp(profile).filter(|n| !allowed.contains(n)) {
            report.push("host/seccomp-profile", || {
                format!(
                    "{}.seccompProfile.localhostProfile {name:?} is not a profile the template uses \
                     ({}); RuntimeDefault is always allowed",
                    context_path(at),
                    show_set(&allowed)
                )
            });
        }
    }
    let allowed: BTreeSet<&str> = apparmor_profiles(template)
        .filter_map(|(_, p)| apparmor(p))
        .collect();
    for (at, profile) in apparmor_profiles(proposed) {
        if let Some(name) = apparmor(profile).filter(|n| !allowed.contains(n)) {
            report.push("host/apparmor-profile", || {
                format!(
                    "{}.appArmorProfile.localhostProfile {name:?} is not a profile the template uses \
                     ({}); RuntimeDefault is always allowed",
                    context_path(at),
                    show_set(&allowed)
                )
            });
        }
    }
}

/// `host/grace-period`.
fn grace_period(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let pod = |s: &PodSpec| {
        s.termination_grace_period_seconds
            .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
    };
    let limit = pod(template);
    let mine = pod(proposed);
    if mine > limit {
        report.push("host/grace-period", || {
            format!(
                "terminationGracePeriodSeconds {mine} is longer than the template's {limit} \
                 (unset = {DEFAULT_GRACE_PERIOD_SECONDS})"
            )
        });
    }
    // A probe's own grace period replaces the pod's when that probe kills
    // the container: bounded by the longest the template grants.
    let probe_limit = containers::all(template)
        .flat_map(|c| c.probes)
        .filter_map(|(_, p)| p.and_then(|p| p.termination_grace_period_seconds))
        .fold(limit, i64::max);
    for c in containers::all(proposed) {
        for (name, probe) in c.probes {
            let Some(seconds) = probe.and_then(|p| p.termination_grace_period_seconds) else {
                continue;
            };
            if seconds > probe_limit {
                report.push("host/grace-period", || {
                    format!(
                        "{}.{name}.terminationGracePeriodSeconds {seconds} is longer than the \
                         template allows ({probe_limit})",
                        c.path
                    )
                });
            }
        }
    }
}

/// `host/active-deadline`.
fn active_deadline(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let Some(limit) = template.active_deadline_seconds else {
        return;
    };
    match proposed.active_deadline_seconds {
        Some(seconds) if seconds <= limit => {}
        mine => report.push("host/active-deadline", || {
            format!(
                "activeDeadlineSeconds {} must be at most the template's {limit}",
                mine.map_or_else(|| "unset".to_string(), |s| s.to_string())
            )
        }),
    }
}

/// The pull policy the API server gives an image reference without one:
/// `Always` when the tag is `latest`, or when there is neither a tag nor a
/// digest (the tag then defaults to `latest`); `IfNotPresent` otherwise.
pub fn default_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':').map(|(_, tag)| tag) {
        Some("latest") => "Always",
        Some(_) => "IfNotPresent",
        None if digest => "IfNotPresent",
        None => "Always",
    }
}

fn effective_pull_policy<'a>(policy: Option<&'a str>, image: Option<&str>) -> &'a str {
    policy
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| default_pull_policy(image.unwrap_or_default()))
}

/// Every image pull of `spec` (containers, then `image` volumes): where,
/// and its effective policy.
fn pulls(spec: &PodSpec) -> impl Iterator<Item = (String, &str)> {
    let containers = containers::all(spec).map(|c| {
        (
            format!("{}.imagePullPolicy", c.path),
            effective_pull_policy(c.image_pull_policy, c.image),
        )
    });
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, v)| {
            let image = v.image.as_ref()?;
            Some((
                format!("volumes[{i}].image.pullPolicy"),
                effective_pull_policy(image.pull_policy.as_deref(), image.reference.as_deref()),
            ))
        });
    containers.chain(volumes)
}

/// `host/image-pull-policy`: `Always`, or a policy the template uses (a
/// cached image must not spare a plugin the registry's access check where
/// the template pulls every time).
fn image_pull_policy(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    let allowed: BTreeSet<&str> = pulls(template).map(|(_, p)| p).collect();
    for (at, policy) in pulls(proposed) {
        if policy != "Always" && !allowed.contains(policy) {
            report.push("host/image-pull-policy", || {
                format!(
                    "{at} is {policy} (as written or defaulted); the template pulls with {}: \
                     use Always or one of those",
                    show_set(&allowed)
                )
            });
        }
    }
}
