//! The host's default pod template for a Jinghzhu without one. It sits with
//! the resource, below both the runtime (which fills an empty `spec-json`
//! with it) and the pod policy (which checks proposals against it).

use std::sync::LazyLock;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

/// The image of the host's default template.
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The host's default template spec, for a Jinghzhu without one: one pause
/// container that passes the restricted profile (runAsNonRoot, runAsUser
/// 65535, seccomp RuntimeDefault, drop ALL, no privilege escalation,
/// read-only root filesystem) and mounts no service account token.
pub fn default_template_spec() -> PodSpec {
    PodSpec {
        automount_service_account_token: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(65535),
            run_as_group: Some(65535),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        containers: vec![Container {
            name: "app".into(),
            image: Some(DEFAULT_IMAGE.into()),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    add: None,
                }),
                read_only_root_filesystem: Some(true),
                ..SecurityContext::default()
            }),
            ..Container::default()
        }],
        ..PodSpec::default()
    }
}

/// [`default_template_spec`], built once.
pub fn default_template() -> &'static PodSpec {
    static DEFAULT: LazyLock<PodSpec> = LazyLock::new(default_template_spec);
    &DEFAULT
}

#[cfg(test)]
mod default_spec_file {
    /// `wit/default-pod-spec.json` states the default for plugin authors and
    /// their offline tests; it must be what the host really uses.
    #[test]
    fn the_default_spec_file_is_the_host_default() {
        let file: k8s_openapi::api::core::v1::PodSpec =
            serde_json::from_str(include_str!("../../../../../wit/default-pod-spec.json"))
                .expect("wit/default-pod-spec.json is a PodSpec");
        assert_eq!(file, super::default_template_spec());
    }
}
