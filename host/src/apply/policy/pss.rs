//! The Kubernetes Pod Security Standards, baseline and restricted profiles,
//! as of Kubernetes v1.34: one check per control, each an allowlist, after
//! the controls of `k8s.io/pod-security-admission` v0.34 (the reference
//! implementation of the "Pod Security Standards" page).
//!
//! Rule ids: `baseline/<control>` and `restricted/<control>`. As in the Pod
//! Security Admission, three restricted controls replace their baseline
//! counterpart at the restricted level: `restricted/capabilities` (for
//! `baseline/capabilities`), `restricted/volume-types` (for
//! `baseline/host-path`) and `restricted/seccomp` (for `baseline/seccomp`).
//! Pods with `spec.os.name: windows` are exempt from the Linux-only
//! restricted controls (capabilities, seccomp, allowPrivilegeEscalation), as
//! upstream; the host rules keep `os` equal to the template's, so a plugin
//! cannot claim Windows to escape them.
//!
//! Not relaxed for `hostUsers: false` pods (upstream does that only behind
//! a feature gate), and the optional "non-root groups" control is not part
//! of the profile (nor of the Pod Security Admission).

use std::fmt;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, LifecycleHandler, PodSecurityContext, PodSpec, SELinuxOptions, SeccompProfile,
    SecurityContext, WindowsSecurityContextOptions,
};

use super::containers::{self, ContainerPath, ContainerView};
use super::report::Report;

/// The profile to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Prevents known privilege escalations.
    Baseline,
    /// Baseline plus current hardening best practice.
    Restricted,
}

/// Capabilities a container may add under baseline (Docker's default set).
pub const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The one capability a container may add under restricted.
pub const RESTRICTED_ADD_CAPABILITY: &str = "NET_BIND_SERVICE";

/// Sysctls namespaced to the pod and isolated from other pods (v1.32+ set).
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// SELinux types allowed under baseline (empty = unset).
pub const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Volume sources allowed under restricted.
pub const RESTRICTED_VOLUME_TYPES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Seccomp and AppArmor profile types allowed wherever they are set.
const CONFINED_PROFILE_TYPES: &[&str] = &["RuntimeDefault", "Localhost"];

/// Checks `spec` against the profile at `level`: pod-level fields, volumes,
/// then each container once (the check runs for every create, so every
/// container is visited a single time).
pub(crate) fn check(spec: &PodSpec, level: Level, report: &mut Report) {
    let windows = spec.os.as_ref().is_some_and(|os| os.name == "windows");
    let profile = Profile {
        level,
        linux_restricted: level == Level::Restricted && !windows,
    };
    host_namespaces(spec, report);
    let pod = spec
        .security_context
        .as_ref()
        .map_or_else(Shared::default, Shared::of_pod);
    shared(At::Pod, &pod, profile, report);
    if level == Level::Restricted && pod.run_as_non_root == Some(false) {
        report.push("restricted/run-as-non-root", || {
            "securityContext.runAsNonRoot must be true".into()
        });
    }
    sysctls(spec, report);
    volumes(spec, level, report);
    for c in containers::all(spec) {
        container(&c, &pod, profile, report);
    }
}

/// Which controls apply.
#[derive(Clone, Copy)]
struct Profile {
    level: Level,
    /// Restricted, and the pod is not a Windows pod: the Linux-only
    /// restricted controls (capabilities, seccomp, privilege escalation) apply.
    linux_restricted: bool,
}

/// Where a security context is: the pod's or a container's.
#[derive(Clone, Copy)]
enum At {
    Pod,
    Container(ContainerPath),
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pod => f.write_str("securityContext"),
            Self::Container(path) => write!(f, "{path}.securityContext"),
        }
    }
}

/// The fields pod and container security contexts share.
#[derive(Default)]
struct Shared<'a> {
    windows_options: Option<&'a WindowsSecurityContextOptions>,
    app_armor_profile: Option<&'a AppArmorProfile>,
    se_linux_options: Option<&'a SELinuxOptions>,
    seccomp_profile: Option<&'a SeccompProfile>,
    run_as_non_root: Option<bool>,
    run_as_user: Option<i64>,
}

impl<'a> Shared<'a> {
    fn of_pod(sc: &'a PodSecurityContext) -> Self {
        Self {
            windows_options: sc.windows_options.as_ref(),
            app_armor_profile: sc.app_armor_profile.as_ref(),
            se_linux_options: sc.se_linux_options.as_ref(),
            seccomp_profile: sc.seccomp_profile.as_ref(),
            run_as_non_root: sc.run_as_non_root,
            run_as_user: sc.run_as_user,
        }
    }

    fn of_container(sc: &'a SecurityContext) -> Self {
        Self {
            windows_options: sc.windows_options.as_ref(),
            app_armor_profile: sc.app_armor_profile.as_ref(),
            se_linux_options: sc.se_linux_options.as_ref(),
            seccomp_profile: sc.seccomp_profile.as_ref(),
            run_as_non_root: sc.run_as_non_root,
            run_as_user: sc.run_as_user,
        }
    }
}

fn comma_list(items: &[&str]) -> String {
    items.join(", ")
}

fn bad_profile_type(profile_type: &str) -> bool {
    !CONFINED_PROFILE_TYPES.contains(&profile_type)
}

/// `baseline/host-namespaces`: no host network, PID or IPC namespace.
fn host_namespaces(spec: &PodSpec, report: &mut Report) {
    for (field, value) in [
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ] {
        if value == Some(true) {
            report.push("baseline/host-namespaces", || {
                format!("{field} must not be true")
            });
        }
    }
}

/// The controls on the fields pod and container security contexts share:
/// `baseline/host-process`, `baseline/apparmor` (field form; the annotation
/// form is checked with the pod's metadata), `baseline/selinux`, the explicit
/// value of `baseline/seccomp` / `restricted/seccomp`, `restricted/run-as-user`.
fn shared(at: At, s: &Shared<'_>, profile: Profile, report: &mut Report) {
    if s.windows_options.and_then(|w| w.host_process) == Some(true) {
        report.push("baseline/host-process", || {
            format!("{at}.windowsOptions.hostProcess must not be true")
        });
    }
    if let Some(p) = s.app_armor_profile.filter(|p| bad_profile_type(&p.type_)) {
        report.push("baseline/apparmor", || {
            format!(
                "{at}.appArmorProfile.type must be RuntimeDefault or Localhost, not {:?}",
                p.type_
            )
        });
    }
    if let Some(o) = s.se_linux_options {
        let type_ = o.type_.as_deref().unwrap_or_default();
        if !SELINUX_TYPES.contains(&type_) {
            report.push("baseline/selinux", || {
                format!(
                    "{at}.seLinuxOptions.type {type_:?} is not allowed; allowed: {}",
                    comma_list(&SELINUX_TYPES[1..])
                )
            });
        }
        for (field, value) in [("user", &o.user), ("role", &o.role)] {
            if value.as_deref().is_some_and(|v| !v.is_empty()) {
                report.push("baseline/selinux", || {
                    format!("{at}.seLinuxOptions.{field} must not be set")
                });
            }
        }
    }
    // As upstream, restricted/seccomp replaces baseline/seccomp, and Windows
    // pods are exempt from it under restricted.
    let seccomp_rule = match profile.level {
        Level::Baseline => Some("baseline/seccomp"),
        Level::Restricted if profile.linux_restricted => Some("restricted/seccomp"),
        Level::Restricted => None,
    };
    if let (Some(rule), Some(p)) = (seccomp_rule, s.seccomp_profile)
        && bad_profile_type(&p.type_)
    {
        report.push(rule, || {
            format!(
                "{at}.seccompProfile.type must be RuntimeDefault or Localhost, not {:?}",
                p.type_
            )
        });
    }
    if profile.level == Level::Restricted && s.run_as_user == Some(0) {
        report.push("restricted/run-as-user", || {
            format!("{at}.runAsUser must not be 0")
        });
    }
}

/// `baseline/sysctls`: only the safe set.
fn sysctls(spec: &PodSpec, report: &mut Report) {
    let sysctls = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.sysctls.as_deref())
        .unwrap_or_default();
    for (i, sysctl) in sysctls.iter().enumerate() {
        if !SAFE_SYSCTLS.contains(&sysctl.name.as_str()) {
            report.push("baseline/sysctls", || {
                format!(
                    "securityContext.sysctls[{i}].name {:?} is not a safe sysctl; allowed: {}",
                    sysctl.name,
                    comma_list(SAFE_SYSCTLS)
                )
            });
        }
    }
}

/// `baseline/host-path`, or at restricted `restricted/volume-types` (which
/// replaces it): only the restricted volume sources.
fn volumes(spec: &PodSpec, level: Level, report: &mut Report) {
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        match level {
            Level::Baseline if v.host_path.is_some() => report.push("baseline/host-path", || {
                format!("volumes[{i}] ({:?}) must not be a hostPath volume", v.name)
            }),
            Level::Baseline => {}
            Level::Restricted => {
                let kind = super::volumes::volume_kind(v);
                if !RESTRICTED_VOLUME_TYPES.contains(&kind) {
                    report.push("restricted/volume-types", || {
                        format!(
                            "volumes[{i}] ({:?}) is a {kind} volume; allowed: {}",
                            v.name,
                            comma_list(RESTRICTED_VOLUME_TYPES)
                        )
                    });
                }
            }
        }
    }
}

/// Every per-container control, for one container.
fn container(c: &ContainerView<'_>, pod: &Shared<'_>, profile: Profile, report: &mut Report) {
    let sc = c.security_context;
    let own = sc.map_or_else(Shared::default, Shared::of_container);
    let at = At::Container(c.path);
    shared(at, &own, profile, report);

    // baseline/privileged
    if sc.and_then(|sc| sc.privileged) == Some(true) {
        report.push("baseline/privileged", || {
            format!("{at}.privileged must not be true")
        });
    }
    let capabilities = sc.and_then(|sc| sc.capabilities.as_ref());
    let added: &[String] = capabilities
        .and_then(|caps| caps.add.as_deref())
        .unwrap_or_default();
    match profile.level {
        Level::Baseline => capabilities_baseline(at, added, report),
        Level::Restricted if profile.linux_restricted => {
            let dropped = capabilities.and_then(|caps| caps.drop.as_deref());
            capabilities_restricted(at, added, dropped.unwrap_or_default(), report);
        }
        Level::Restricted => {}
    }
    // baseline/host-ports
    for (j, port) in c.ports.iter().enumerate() {
        if let Some(host_port) = port.host_port.filter(|p| *p != 0) {
            report.push("baseline/host-ports", || {
                format!(
                    "{}.ports[{j}].hostPort must not be set (is {host_port})",
                    c.path
                )
            });
        }
    }
    // baseline/proc-mount: the default /proc masks.
    if let Some(mount) = sc
        .and_then(|sc| sc.proc_mount.as_deref())
        .filter(|m| *m != "Default")
    {
        report.push("baseline/proc-mount", || {
            format!("{at}.procMount must be Default, not {mount:?}")
        });
    }
    probe_host(c, report);
    if profile.linux_restricted {
        // restricted/seccomp: set here or on the pod.
        if own.seccomp_profile.is_none() && pod.seccomp_profile.is_none() {
            report.push("restricted/seccomp", || {
                format!(
                    "{at}.seccompProfile.type must be RuntimeDefault or Localhost \
                     (or set securityContext.seccompProfile on the pod)"
                )
            });
        }
        // restricted/privilege-escalation
        if sc.and_then(|sc| sc.allow_privilege_escalation) != Some(false) {
            report.push("restricted/privilege-escalation", || {
                format!("{at}.allowPrivilegeEscalation must be false")
            });
        }
    }
    if profile.level == Level::Restricted {
        // restricted/run-as-non-root: true here or on the pod, false nowhere.
        match own.run_as_non_root {
            Some(false) => report.push("restricted/run-as-non-root", || {
                format!("{at}.runAsNonRoot must be true")
            }),
            None if pod.run_as_non_root.is_none() => {
                report.push("restricted/run-as-non-root", || {
                    format!(
                        "{at}.runAsNonRoot must be true (or set securityContext.runAsNonRoot on the pod)"
                    )
                });
            }
            _ => {}
        }
    }
}

/// `baseline/capabilities`: add only capabilities of the default set.
fn capabilities_baseline(at: At, added: &[String], report: &mut Report) {
    if added
        .iter()
        .any(|cap| !BASELINE_CAPABILITIES.contains(&cap.as_str()))
    {
        report.push("baseline/capabilities", || {
            let bad: Vec<&str> = added
                .iter()
                .map(String::as_str)
                .filter(|cap| !BASELINE_CAPABILITIES.contains(cap))
                .collect();
            format!(
                "{at}.capabilities.add must not include {}; allowed: {}",
                comma_list(&bad),
                comma_list(BASELINE_CAPABILITIES)
            )
        });
    }
}

/// `restricted/capabilities`: drop ALL, add at most NET_BIND_SERVICE.
fn capabilities_restricted(at: At, added: &[String], dropped: &[String], report: &mut Report) {
    if !dropped.iter().any(|cap| cap == "ALL") {
        report.push("restricted/capabilities", || {
            format!("{at}.capabilities.drop must include \"ALL\"")
        });
    }
    if added.iter().any(|cap| cap != RESTRICTED_ADD_CAPABILITY) {
        report.push("restricted/capabilities", || {
            let bad: Vec<&str> = added
                .iter()
                .map(String::as_str)
                .filter(|cap| *cap != RESTRICTED_ADD_CAPABILITY)
                .collect();
            format!(
                "{at}.capabilities.add must not include {}; only {RESTRICTED_ADD_CAPABILITY} may be added",
                comma_list(&bad)
            )
        });
    }
}

/// `baseline/probe-host`: probes and lifecycle hooks reach the pod itself,
/// never another host (v1.34).
fn probe_host(c: &ContainerView<'_>, report: &mut Report) {
    for (name, probe) in c.probes {
        let Some(probe) = probe else { continue };
        let http = probe.http_get.as_ref().and_then(|h| h.host.as_deref());
        let tcp = probe.tcp_socket.as_ref().and_then(|t| t.host.as_deref());
        report_hosts(c, name, http, tcp, report);
    }
    let Some(lifecycle) = c.lifecycle else { return };
    for (name, handler) in [
        ("lifecycle.postStart", lifecycle.post_start.as_ref()),
        ("lifecycle.preStop", lifecycle.pre_stop.as_ref()),
    ] {
        let Some(LifecycleHandler {
            http_get,
            tcp_socket,
            ..
        }) = handler
        else {
            continue;
        };
        let http = http_get.as_ref().and_then(|h| h.host.as_deref());
        let tcp = tcp_socket.as_ref().and_then(|t| t.host.as_deref());
        report_hosts(c, name, http, tcp, report);
    }
}

fn report_hosts(
    c: &ContainerView<'_>,
    name: &str,
    http: Option<&str>,
    tcp: Option<&str>,
    report: &mut Report,
) {
    for (action, host) in [("httpGet", http), ("tcpSocket", tcp)] {
        if let Some(host) = host.filter(|h| !h.is_empty()) {
            report.push("baseline/probe-host", || {
                format!(
                    "{}.{name}.{action}.host must not be set (is {host:?})",
                    c.path
                )
            });
        }
    }
}
