//! The pod policy: which pod specs, labels and annotations a plugin may put
//! on the pods the host creates for it. Pure logic, no I/O: it works on
//! typed [`PodSpec`]s and label/annotation maps and returns the rules a
//! proposal breaks as [`Violation`]s with a stable rule id and the field path.
//! It may import only `crd` (the default template); the rest of `apply/`
//! calls it.
//!
//! Three modes ([`PodPolicy`]), chosen by the cluster admin:
//! - `template` (default): every pod's spec is the Jinghzhu's template spec
//!   (or [`default_template`]); the plugin chooses how many pods, their
//!   names (`<name>-<suffix>`, see `apply::names`), which to delete, and
//!   labels/annotations within [`check_metadata`] (the template's own
//!   labels and annotations are on every pod, in every mode).
//! - `restricted`: plugin-written specs that pass the Pod Security Standards
//!   *restricted* profile ([`pss`]) and the host rules ([`host_rules`]: no
//!   identity, secret, volume, scheduling or priority wider than the template's).
//! - `baseline`: the PSS *baseline* profile plus the same host rules, an
//!   explicit opt-in for trusted plugins.
//!
//! In every mode a spec must also pass the floor: PSS baseline, no
//! `nodeName`, at least one container ([`check_template`] applies the same
//! floor to what a user wrote). [`check_spec`] enforces the floor itself, so
//! it is complete whatever the caller checked before.
//!
//! Module map: [`pss`] the two PSS profiles; [`host_rules`] the "no wider than
//! the template" rules and the image allowlist, with [`confinement`] for
//! identity, confinement and lifetime fields; [`template`] semantic
//! equality with the template (the default template is
//! [`crate::crd::default_template`]); [`labels`]
//! labels and annotations; [`containers`] walking every container kind with
//! its field path; [`volumes`] what kind of source a volume has (for both
//! [`pss`] and [`host_rules`]); [`report`] the bounded violation list.

pub mod confinement;
pub mod containers;
pub mod host_rules;
pub mod labels;
pub mod pss;
pub mod report;
pub mod template;
pub mod volumes;

#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::PodSpec;

pub use crate::crd::default_template::{DEFAULT_IMAGE, default_template, default_template_spec};
pub use labels::check_metadata;
pub use report::{MAX_VIOLATIONS, Violation};

use report::Report;

/// The label/annotation key prefix plugins may write by default.
pub const DEFAULT_PLUGIN_KEY_PREFIX: &str = "plugin.jinghzhu.io/";

/// Which pod specs a plugin may propose (CLI: `--pod-policy`, default `template`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PodPolicy {
    /// Every pod's spec is the template's spec (semantically equal).
    #[default]
    Template,
    /// Plugin-written specs within the PSS restricted profile and the host rules.
    Restricted,
    /// Plugin-written specs within the PSS baseline profile and the host rules
    /// (for trusted plugins only).
    Baseline,
}

impl PodPolicy {
    /// How much it lets a plugin write: template < restricted < baseline.
    fn latitude(self) -> u8 {
        match self {
            Self::Template => 0,
            Self::Restricted => 1,
            Self::Baseline => 2,
        }
    }

    /// Whether it lets a plugin write more than `other` does.
    pub fn is_looser_than(self, other: PodPolicy) -> bool {
        self.latitude() > other.latitude()
    }

    /// The stricter of the two.
    pub fn stricter_of(self, other: PodPolicy) -> PodPolicy {
        if self.is_looser_than(other) {
            other
        } else {
            self
        }
    }
}

impl std::fmt::Display for PodPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Template => "template",
            Self::Restricted => "restricted",
            Self::Baseline => "baseline",
        })
    }
}

/// What the cluster admin allows plugins (see [`PolicyArgs`] for the flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyConfig {
    /// The mode.
    pub policy: PodPolicy,
    /// Image allowlist, matched as literal prefixes of every image reference
    /// (containers of every kind and `image` volumes), e.g.
    /// `registry.example.com/team/`; empty = any image. Applies in every mode.
    pub allowed_image_prefixes: Vec<String>,
    /// Label/annotation key prefixes a plugin may write beyond the template's
    /// own keys (default: [`DEFAULT_PLUGIN_KEY_PREFIX`]).
    pub allowed_label_prefixes: Vec<String>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            policy: PodPolicy::Template,
            allowed_image_prefixes: Vec::new(),
            allowed_label_prefixes: vec![DEFAULT_PLUGIN_KEY_PREFIX.to_string()],
        }
    }
}

/// A policy configuration that cannot mean what its author wants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyConfigError {
    /// An image prefix that would match more than intended.
    #[error(
        "--allowed-image-prefix {0:?} must be non-empty and end with '/', ':' or '@' \
         (e.g. \"registry.example.com/team/\"), so it cannot match other registries or repositories"
    )]
    ImagePrefix(String),
    /// A label prefix that is empty or can never be used.
    #[error(
        "--allowed-label-prefix {0:?} must start with a DNS domain and '/' (e.g. \
         \"plugin.jinghzhu.io/\" or \"example.com/plugin-\"), outside the host's jinghzhu.io/ \
         and the reserved kubernetes.io and k8s.io domains, which plugins may never write"
    )]
    LabelPrefix(String),
}

impl PolicyConfig {
    /// Checks the configuration, for a clear error at start-up.
    pub fn validate(&self) -> Result<(), PolicyConfigError> {
        for prefix in &self.allowed_image_prefixes {
            if !prefix.ends_with(['/', ':', '@']) {
                return Err(PolicyConfigError::ImagePrefix(prefix.clone()));
            }
        }
        for prefix in &self.allowed_label_prefixes {
            if labels::prefix_is_forbidden(prefix) {
                return Err(PolicyConfigError::LabelPrefix(prefix.clone()));
            }
        }
        Ok(())
    }
}

/// The command-line flags of the pod policy (flatten into a command's args).
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// Which pod specs a plugin may propose: `template` (each pod's spec is the
    /// Jinghzhu's template), `restricted` (Pod Security Standards restricted
    /// plus the host rules) or `baseline` (PSS baseline plus the host rules;
    /// trusted plugins only).
    #[arg(long, env = "WASM_OPERATOR_POD_POLICY", value_enum, default_value_t = PodPolicy::Template)]
    pub pod_policy: PodPolicy,
    /// Only images starting with this prefix (repeatable; e.g.
    /// `registry.example.com/team/`). Without it, any image.
    #[arg(
        long = "allowed-image-prefix",
        env = "WASM_OPERATOR_ALLOWED_IMAGE_PREFIX",
        value_delimiter = ',',
        value_name = "PREFIX"
    )]
    pub allowed_image_prefixes: Vec<String>,
    /// Label/annotation key prefix a plugin may write beyond the template's
    /// own keys (repeatable).
    #[arg(
        long = "allowed-label-prefix",
        env = "WASM_OPERATOR_ALLOWED_LABEL_PREFIX",
        value_delimiter = ',',
        value_name = "PREFIX",
        default_value = DEFAULT_PLUGIN_KEY_PREFIX
    )]
    pub allowed_label_prefixes: Vec<String>,
}

impl PolicyArgs {
    /// The checked configuration.
    pub fn config(&self) -> Result<PolicyConfig, PolicyConfigError> {
        let config = PolicyConfig {
            policy: self.pod_policy,
            allowed_image_prefixes: self.allowed_image_prefixes.clone(),
            allowed_label_prefixes: self.allowed_label_prefixes.clone(),
        };
        config.validate()?;
        Ok(config)
    }
}

/// Checks the spec a plugin proposes for one pod of a Jinghzhu whose template
/// spec is `template` (pass [`default_template`] when it has none) under
/// `config`. At most [`MAX_VIOLATIONS`] are reported, then one `policy/more`.
///
/// - Every mode: the floor (PSS baseline, `host/node-name`,
///   `spec/no-containers`) and `host/image-prefix`.
/// - `Template`: `template/spec-differs` unless the spec equals the template.
/// - `Restricted` / `Baseline`: the PSS profile and the host rules.
pub fn check_spec(proposed: &PodSpec, template: &PodSpec, config: &PolicyConfig) -> Vec<Violation> {
    let mut report = Report::new();
    let level = match config.policy {
        PodPolicy::Template | PodPolicy::Baseline => pss::Level::Baseline,
        PodPolicy::Restricted => pss::Level::Restricted,
    };
    floor(proposed, level, &mut report);
    host_rules::check_images(proposed, &config.allowed_image_prefixes, &mut report);
    match config.policy {
        PodPolicy::Template => template::check_equal(proposed, template, &mut report),
        PodPolicy::Restricted | PodPolicy::Baseline => {
            host_rules::check(proposed, template, level, &mut report);
        }
    }
    report.finish()
}

/// Checks a Jinghzhu's own template spec (what a user wrote): the floor that
/// applies in every mode, PSS baseline + no `nodeName` + at least one
/// container. The host refuses to create pods from a template that breaks it.
pub fn check_template(template: &PodSpec) -> Vec<Violation> {
    let mut report = Report::new();
    floor(template, pss::Level::Baseline, &mut report);
    report.finish()
}

/// The rules of every mode, at the PSS `level` of the mode.
fn floor(spec: &PodSpec, level: pss::Level, report: &mut Report) {
    if spec.containers.is_empty() {
        report.push("spec/no-containers", || {
            "containers: a pod needs at least one container".into()
        });
    }
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        report.push("host/node-name", || {
            "nodeName must not be set: the scheduler places pods".into()
        });
    }
    pss::check(spec, level, report);
}
