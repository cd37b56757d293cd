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

use k8s_openapi::api::core::v1::{
    AppArmorProfile, LifecycleHandler, PodSpec, SELinuxOptions, SeccompProfile,
    WindowsSecurityContextOptions,
};

use super::containers::{self, ContainerView};
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

/// Checks `spec` against the profile at `level`.
pub(crate) fn check(spec: &PodSpec, level: Level, report: &mut Report) {
    let windows = spec.os.as_ref().is_some_and(|os| os.name == "windows");
    host_process(spec, report);
    host_namespaces(spec, report);
    privileged(spec, report);
    match level {
        Level::Baseline => capabilities_baseline(spec, report),
        Level::Restricted if !windows => capabilities_restricted(spec, report),
        Level::Restricted => {}
    }
    match level {
        Level::Baseline => host_path(spec, report),
        Level::Restricted => volume_types(spec, report),
    }
    host_ports(spec, report);
    app_armor(spec, report);
    se_linux(spec, report);
    proc_mount(spec, report);
    match level {
        Level::Baseline => seccomp_baseline(spec, report),
        Level::Restricted if !windows => seccomp_restricted(spec, report),
        Level::Restricted => {}
    }
    sysctls(spec, report);
    probe_host(spec, report);
    if level == Level::Restricted {
        if !windows {
            privilege_escalation(spec, report);
        }
        run_as_non_root(spec, report);
        run_as_user(spec, report);
    }
}

fn comma_list(items: &[&str]) -> String {
    items.join(", ")
}

/// `baseline/host-process`: no Windows HostProcess pod or container.
fn host_process(spec: &PodSpec, report: &mut Report) {
    let host_process =
        |w: Option<&WindowsSecurityContextOptions>| w.and_then(|w| w.host_process) == Some(true);
    let pod = spec.security_context.as_ref();
    if host_process(pod.and_then(|sc| sc.windows_options.as_ref())) {
        report.push("baseline/host-process", || {
            "securityContext.windowsOptions.hostProcess must not be true".into()
        });
    }
    for c in containers::all(spec) {
        let sc = c.security_context;
        if host_process(sc.and_then(|sc| sc.windows_options.as_ref())) {
            report.push("baseline/host-process", || {
                format!(
                    "{}.securityContext.windowsOptions.hostProcess must not be true",
                    c.path
                )
            });
        }
    }
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

/// `baseline/privileged`: no privileged container.
fn privileged(spec: &PodSpec, report: &mut Report) {
    for c in containers::all(spec) {
        if c.security_context.and_then(|sc| sc.privileged) == Some(true) {
            report.push("baseline/privileged", || {
                format!("{}.securityContext.privileged must not be true", c.path)
            });
        }
    }
}

fn added_capabilities<'a>(c: &ContainerView<'a>) -> &'a [String] {
    c.security_context
        .and_then(|sc| sc.capabilities.as_ref())
        .and_then(|caps| caps.add.as_deref())
        .unwrap_or_default()
}

/// `baseline/capabilities`: add only capabilities of the default set.
fn capabilities_baseline(spec: &PodSpec, report: &mut Report) {
    for c in containers::all(spec) {
        let added = added_capabilities(&c);
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
                    "{}.securityContext.capabilities.add must not include {}; allowed: {}",
                    c.path,
                    comma_list(&bad),
                    comma_list(BASELINE_CAPABILITIES)
                )
            });
        }
    }
}

/// `restricted/capabilities`: drop ALL, add at most NET_BIND_SERVICE.
fn capabilities_restricted(spec: &PodSpec, report: &mut Report) {
    for c in containers::all(spec) {
        let drops_all = c
            .security_context
            .and_then(|sc| sc.capabilities.as_ref())
            .and_then(|caps| caps.drop.as_deref())
            .is_some_and(|drop| drop.iter().any(|cap| cap == "ALL"));
        if !drops_all {
            report.push("restricted/capabilities", || {
                format!(
                    "{}.securityContext.capabilities.drop must include \"ALL\"",
                    c.path
                )
            });
        }
        let added = added_capabilities(&c);
        if added.iter().any(|cap| cap != RESTRICTED_ADD_CAPABILITY) {
            report.push("restricted/capabilities", || {
                let bad: Vec<&str> = added
                    .iter()
                    .map(String::as_str)
                    .filter(|cap| *cap != RESTRICTED_ADD_CAPABILITY)
                    .collect();
                format!(
                    "{}.securityContext.capabilities.add must not include {}; only {RESTRICTED_ADD_CAPABILITY} may be added",
                    c.path,
                    comma_list(&bad)
                )
            });
        }
    }
}

/// `baseline/host-path`: no hostPath volume.
fn host_path(spec: &PodSpec, report: &mut Report) {
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if v.host_path.is_some() {
            report.push("baseline/host-path", || {
                format!("volumes[{i}] ({:?}) must not be a hostPath volume", v.name)
            });
        }
    }
}

/// `restricted/volume-types`: only the restricted volume sources.
fn volume_types(spec: &PodSpec, report: &mut Report) {
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let kind = super::host_rules::volume_kind(v);
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

/// `baseline/host-ports`: no hostPort.
fn host_ports(spec: &PodSpec, report: &mut Report) {
    for c in containers::all(spec) {
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
    }
}

fn bad_profile_type(profile_type: &str) -> bool {
    !CONFINED_PROFILE_TYPES.contains(&profile_type)
}

/// `baseline/apparmor` (field form; the annotation form is checked with
/// the pod's metadata): only RuntimeDefault or Localhost.
fn app_armor(spec: &PodSpec, report: &mut Report) {
    let check =
        |profile: Option<&AppArmorProfile>, at: &dyn Fn() -> String, report: &mut Report| {
            if let Some(p) = profile.filter(|p| bad_profile_type(&p.type_)) {
                report.push("baseline/apparmor", || {
                    format!(
                        "{}.appArmorProfile.type must be RuntimeDefault or Localhost, not {:?}",
                        at(),
                        p.type_
                    )
                });
            }
        };
    let pod = spec.security_context.as_ref();
    check(
        pod.and_then(|sc| sc.app_armor_profile.as_ref()),
        &|| "securityContext".into(),
        report,
    );
    for c in containers::all(spec) {
        check(
            c.security_context
                .and_then(|sc| sc.app_armor_profile.as_ref()),
            &|| format!("{}.securityContext", c.path),
            report,
        );
    }
}

/// `baseline/selinux`: type from the allowlist, no user or role.
fn se_linux(spec: &PodSpec, report: &mut Report) {
    let check = |options: Option<&SELinuxOptions>, at: &dyn Fn() -> String, report: &mut Report| {
        let Some(o) = options else { return };
        let type_ = o.type_.as_deref().unwrap_or_default();
        if !SELINUX_TYPES.contains(&type_) {
            report.push("baseline/selinux", || {
                format!(
                    "{}.seLinuxOptions.type {type_:?} is not allowed; allowed: {}",
                    at(),
                    comma_list(&SELINUX_TYPES[1..])
                )
            });
        }
        for (field, value) in [("user", &o.user), ("role", &o.role)] {
            if value.as_deref().is_some_and(|v| !v.is_empty()) {
                report.push("baseline/selinux", || {
                    format!("{}.seLinuxOptions.{field} must not be set", at())
                });
            }
        }
    };
    let pod = spec.security_context.as_ref();
    check(
        pod.and_then(|sc| sc.se_linux_options.as_ref()),
        &|| "securityContext".into(),
        report,
    );
    for c in containers::all(spec) {
        check(
            c.security_context
                .and_then(|sc| sc.se_linux_options.as_ref()),
            &|| format!("{}.securityContext", c.path),
            report,
        );
    }
}

/// `baseline/proc-mount`: the default /proc masks.
fn proc_mount(spec: &PodSpec, report: &mut Report) {
    for c in containers::all(spec) {
        if let Some(mount) = c
            .security_context
            .and_then(|sc| sc.proc_mount.as_deref())
            .filter(|m| *m != "Default")
        {
            report.push("baseline/proc-mount", || {
                format!(
                    "{}.securityContext.procMount must be Default, not {mount:?}",
                    c.path
                )
            });
        }
    }
}

fn seccomp_type(profile: Option<&SeccompProfile>) -> Option<&str> {
    profile.map(|p| p.type_.as_str())
}

/// `baseline/seccomp`: where set, RuntimeDefault or Localhost (never Unconfined).
fn seccomp_baseline(spec: &PodSpec, report: &mut Report) {
    let pod = spec.security_context.as_ref();
    if let Some(t) =
        seccomp_type(pod.and_then(|sc| sc.seccomp_profile.as_ref())).filter(|t| bad_profile_type(t))
    {
        report.push("baseline/seccomp", || {
            format!(
                "securityContext.seccompProfile.type must be RuntimeDefault or Localhost, not {t:?}"
            )
        });
    }
    for c in containers::all(spec) {
        if let Some(t) = seccomp_type(
            c.security_context
                .and_then(|sc| sc.seccomp_profile.as_ref()),
        )
        .filter(|t| bad_profile_type(t))
        {
            report.push("baseline/seccomp", || {
                format!(
                    "{}.securityContext.seccompProfile.type must be RuntimeDefault or Localhost, not {t:?}",
                    c.path
                )
            });
        }
    }
}

/// `restricted/seccomp`: RuntimeDefault or Localhost on the pod or on every
/// container, never anything else anywhere.
fn seccomp_restricted(spec: &PodSpec, report: &mut Report) {
    let pod = seccomp_type(
        spec.security_context
            .as_ref()
            .and_then(|sc| sc.seccomp_profile.as_ref()),
    );
    if let Some(t) = pod.filter(|t| bad_profile_type(t)) {
        report.push("restricted/seccomp", || {
            format!(
                "securityContext.seccompProfile.type must be RuntimeDefault or Localhost, not {t:?}"
            )
        });
    }
    for c in containers::all(spec) {
        match seccomp_type(c.security_context.and_then(|sc| sc.seccomp_profile.as_ref())) {
            Some(t) if bad_profile_type(t) => report.push("restricted/seccomp", || {
                format!(
                    "{}.securityContext.seccompProfile.type must be RuntimeDefault or Localhost, not {t:?}",
                    c.path
                )
            }),
            Some(_) => {}
            None if pod.is_none() => report.push("restricted/seccomp", || {
                format!(
                    "{}.securityContext.seccompProfile.type must be RuntimeDefault or Localhost \
                     (or set securityContext.seccompProfile on the pod)",
                    c.path
                )
            }),
            None => {} // inherits the pod's (reported above if bad)
        }
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

/// `baseline/probe-host`: probes and lifecycle hooks reach the pod itself,
/// never another host (v1.34).
fn probe_host(spec: &PodSpec, report: &mut Report) {
    for c in containers::all(spec) {
        for (name, probe) in c.probes {
            let Some(probe) = probe else { continue };
            let http = probe.http_get.as_ref().and_then(|h| h.host.as_deref());
            let tcp = probe.tcp_socket.as_ref().and_then(|t| t.host.as_deref());
            report_hosts(&c, name, http, tcp, report);
        }
        let Some(lifecycle) = c.lifecycle else {
            continue;
        };
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
            report_hosts(&c, name, http, tcp, report);
        }
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

/// `restricted/privilege-escalation`: every container sets
/// `allowPrivilegeEscalation: false`.
fn privilege_escalation(spec: &PodSpec, report: &mut Report) {
    for c in containers::all(spec) {
        if c.security_context
            .and_then(|sc| sc.allow_privilege_escalation)
            != Some(false)
        {
            report.push("restricted/privilege-escalation", || {
                format!(
                    "{}.securityContext.allowPrivilegeEscalation must be false",
                    c.path
                )
            });
        }
    }
}

/// `restricted/run-as-non-root`: `runAsNonRoot: true` on the pod or on every
/// container, and `false` nowhere.
fn run_as_non_root(spec: &PodSpec, report: &mut Report) {
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.run_as_non_root);
    if pod == Some(false) {
        report.push("restricted/run-as-non-root", || {
            "securityContext.runAsNonRoot must be true".into()
        });
    }
    for c in containers::all(spec) {
        match c.security_context.and_then(|sc| sc.run_as_non_root) {
            Some(false) => report.push("restricted/run-as-non-root", || {
                format!("{}.securityContext.runAsNonRoot must be true", c.path)
            }),
            None if pod.is_none() => report.push("restricted/run-as-non-root", || {
                format!(
                    "{}.securityContext.runAsNonRoot must be true (or set securityContext.runAsNonRoot on the pod)",
                    c.path
                )
            }),
            _ => {}
        }
    }
}

/// `restricted/run-as-user`: never `runAsUser: 0`.
fn run_as_user(spec: &PodSpec, report: &mut Report) {
    if spec.security_context.as_ref().and_then(|sc| sc.run_as_user) == Some(0) {
        report.push("restricted/run-as-user", || {
            "securityContext.runAsUser must not be 0".into()
        });
    }
    for c in containers::all(spec) {
        if c.security_context.and_then(|sc| sc.run_as_user) == Some(0) {
            report.push("restricted/run-as-user", || {
                format!("{}.securityContext.runAsUser must not be 0", c.path)
            });
        }
    }
}
