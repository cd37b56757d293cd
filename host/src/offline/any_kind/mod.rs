//! `wasm-operator reconcile` for a contract 0.3 plugin (any parent kind,
//! any child kinds): the controller's declaration read from a
//! `PluginController` file (`controller.yaml`), one input printed as the
//! plugin's output, or a directory of golden cases checked as the host
//! would check the output in a cluster (`declared::checks`, the rule named
//! on a refusal), compared with `expected.yaml`, then run on for
//! idempotence. The format is `docs/any-kind.md`, "Test a 0.3 plugin
//! without a cluster".
//!
//! - [`input`]: reading objects into the state a reconcile sees.
//! - [`output`]: the plugin's output in the readable form of `expected.yaml`.
//! - [`cases`]: golden cases, `--bless` and the idempotence check.
//! - [`simulate`]: what the API server makes of the state after a plan.

pub mod cases;
pub mod input;
pub mod output;
pub mod simulate;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::apply::policy::PolicyConfig;
use crate::crd::controller::PluginController;
use crate::declared::checks::Declared;
use crate::declared::kinds::{self, ResolvedKind};

/// The file a fixtures directory (or the directory above it) holds the
/// declaration in, when `--controller` is not given.
pub const CONTROLLER_FILE: &str = "controller.yaml";

/// A `PluginController` read from a file, its kinds named by Kubernetes'
/// convention (no API server to ask).
#[derive(Debug, Clone)]
pub struct OfflineDeclaration {
    /// Where it was read from.
    pub file: PathBuf,
    /// The controller's name.
    pub name: String,
    /// The parent kind.
    pub parent: ResolvedKind,
    /// Each child kind with its most children and most bytes.
    pub children: Vec<(ResolvedKind, u32, u32)>,
    /// Each observed kind with the kinds between a child and it.
    pub observed: Vec<(ResolvedKind, Vec<ResolvedKind>)>,
    /// The pod policy pod templates in children are held to.
    pub policy: PolicyConfig,
}

impl OfflineDeclaration {
    /// What `declared::checks` needs.
    pub fn declared(&self) -> Declared<'_> {
        Declared {
            controller: &self.name,
            parent: &self.parent,
            children: &self.children,
            policy: &self.policy,
        }
    }

    /// `controller <name> from <file>`, for reports.
    pub fn describe(&self) -> String {
        format!("controller {} from {}", self.name, self.file.display())
    }
}

/// The declaration: `explicit` if given, else `controller.yaml` in
/// `fixtures` or the directory above it.
pub fn find(
    explicit: Option<&Path>,
    fixtures: Option<&Path>,
    allowed: &[String],
) -> Result<OfflineDeclaration> {
    if let Some(file) = explicit {
        return read(file, allowed);
    }
    let candidates: Vec<PathBuf> = fixtures
        .into_iter()
        .flat_map(|dir| [Some(dir.to_path_buf()), dir.parent().map(Path::to_path_buf)])
        .flatten()
        .map(|dir| dir.join(CONTROLLER_FILE))
        .collect();
    match candidates.iter().find(|file| file.is_file()) {
        Some(file) => read(file, allowed),
        None => bail!(
            "a contract 0.3 plugin needs its controller's declaration: pass --controller \
             controller.yaml (a PluginController), or put {CONTROLLER_FILE} in the fixtures \
             directory or the one above it{}",
            if candidates.is_empty() {
                String::new()
            } else {
                format!(
                    " (looked for {})",
                    candidates
                        .iter()
                        .map(|c| c.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
    }
}

/// Reads the one `PluginController` in `file` and checks its child kinds
/// as the host does (`allowed`: the admin's `--allow-child-kind`).
pub fn read(file: &Path, allowed: &[String]) -> Result<OfflineDeclaration> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut found = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(document)
            .with_context(|| format!("parsing {}", file.display()))?;
        if !value.is_null() {
            found.push(value);
        }
    }
    let value = match found.len() {
        1 => found.remove(0),
        n => bail!(
            "{} holds {n} documents; give exactly one PluginController",
            file.display()
        ),
    };
    let resource: PluginController = serde_yaml::from_value(value).with_context(|| {
        format!(
            "{} is not a PluginController (apiVersion: wasm-operator.io/v1alpha1)",
            file.display()
        )
    })?;
    from_resource(&resource, file, allowed)
}

/// The declaration of `resource`, checked as the host checks it before
/// asking the API server anything.
pub fn from_resource(
    resource: &PluginController,
    file: &Path,
    allowed: &[String],
) -> Result<OfflineDeclaration> {
    let spec = &resource.spec;
    let declared: Vec<_> = spec.children.iter().map(|c| c.kind_ref()).collect();
    kinds::check_children(&declared, allowed).map_err(|refusal| {
        anyhow::anyhow!(
            "the host would refuse the declaration in {}: {refusal}",
            file.display()
        )
    })?;
    let name = resource
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .with_context(|| format!("{} has no metadata.name", file.display()))?;
    let mut policy = PolicyConfig::default();
    if let Some(asked) = &spec.pod_policy {
        policy.policy = crate::delivery::resource::pod_policy_of(asked).stricter_of(policy.policy);
    }
    Ok(OfflineDeclaration {
        file: file.to_path_buf(),
        name,
        parent: ResolvedKind::by_convention(&spec.parent),
        children: spec
            .children
            .iter()
            .map(|c| {
                (
                    ResolvedKind::by_convention(&c.kind_ref()),
                    c.max_count(),
                    c.max_bytes(),
                )
            })
            .collect(),
        observed: spec
            .observe
            .iter()
            .map(|o| {
                (
                    ResolvedKind::by_convention(&o.kind_ref()),
                    o.through.iter().map(ResolvedKind::by_convention).collect(),
                )
            })
            .collect(),
        policy,
    })
}
