//! Every container of a pod spec, whatever its kind (`initContainers`,
//! `containers`, `ephemeralContainers`), as one borrowed view with its field
//! path, so each rule is written once and names exactly where it broke.

use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvFromSource, EnvVar, EphemeralContainer, Lifecycle, PodSpec, Probe,
    SecurityContext,
};

/// Where a container is in the pod spec: `containers[1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerPath {
    /// The list: `initContainers`, `containers` or `ephemeralContainers`.
    pub list: &'static str,
    /// The index in that list.
    pub index: usize,
}

impl fmt::Display for ContainerPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.list, self.index)
    }
}

/// The parts of a container the policy reads.
#[derive(Clone, Copy, Debug)]
pub struct ContainerView<'a> {
    /// Where it is.
    pub path: ContainerPath,
    /// Its image reference.
    pub image: Option<&'a str>,
    /// Its image pull policy, as written.
    pub image_pull_policy: Option<&'a str>,
    /// Its security context.
    pub security_context: Option<&'a SecurityContext>,
    /// Its ports.
    pub ports: &'a [ContainerPort],
    /// Its liveness, readiness and startup probes, with their field names.
    pub probes: [(&'static str, Option<&'a Probe>); 3],
    /// Its lifecycle hooks.
    pub lifecycle: Option<&'a Lifecycle>,
    /// Its environment variables.
    pub env: &'a [EnvVar],
    /// Its environment sources.
    pub env_from: &'a [EnvFromSource],
}

macro_rules! view {
    ($c:expr, $list:expr, $index:expr) => {
        ContainerView {
            path: ContainerPath {
                list: $list,
                index: $index,
            },
            image: $c.image.as_deref(),
            image_pull_policy: $c.image_pull_policy.as_deref(),
            security_context: $c.security_context.as_ref(),
            ports: $c.ports.as_deref().unwrap_or_default(),
            probes: [
                ("livenessProbe", $c.liveness_probe.as_ref()),
                ("readinessProbe", $c.readiness_probe.as_ref()),
                ("startupProbe", $c.startup_probe.as_ref()),
            ],
            lifecycle: $c.lifecycle.as_ref(),
            env: $c.env.as_deref().unwrap_or_default(),
            env_from: $c.env_from.as_deref().unwrap_or_default(),
        }
    };
}

fn container<'a>(c: &'a Container, list: &'static str, index: usize) -> ContainerView<'a> {
    view!(c, list, index)
}

fn ephemeral(c: &EphemeralContainer, index: usize) -> ContainerView<'_> {
    view!(c, "ephemeralContainers", index)
}

/// Every container of `spec`: init containers, containers, then ephemeral
/// containers (the order of the Pod Security Admission's visitor).
pub fn all(spec: &PodSpec) -> impl Iterator<Item = ContainerView<'_>> {
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let ephemerals = spec.ephemeral_containers.as_deref().unwrap_or_default();
    init.iter()
        .enumerate()
        .map(|(i, c)| container(c, "initContainers", i))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| container(c, "containers", i)),
        )
        .chain(ephemerals.iter().enumerate().map(|(i, c)| ephemeral(c, i)))
}
