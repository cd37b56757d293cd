//! Labels and annotations a plugin puts on its pods.
//!
//! Each key is judged in this order (first match decides):
//! 1. The host's own keys: `app.kubernetes.io/managed-by` and every key in
//!    the `jinghzhu.io/` prefix: never (`labels/host-key`,
//!    `annotations/host-key`); the host sets its keys itself.
//! 2. An AppArmor annotation (`container.apparmor.security.beta.kubernetes.io/*`)
//!    whose value is not empty, `runtime/default` or `localhost/*`: never, even
//!    copied from the template (`baseline/apparmor`, the floor of every mode).
//! 3. A key the template's metadata sets, with the template's value: allowed
//!    (this is how a plugin keeps `app: web` or `app.kubernetes.io/name`).
//! 4. A key in the reserved `kubernetes.io` / `k8s.io` domains (and their
//!    subdomains), otherwise: never (`*/reserved-key`); some carry authority.
//! 5. A key under an allowed prefix (`--allowed-label-prefix`, default
//!    `plugin.jinghzhu.io/`): allowed, any value.
//! 6. A key the template sets, with another value: never (`*/template-value`),
//!    so a plugin cannot move its pods into another app's Service selector.
//! 7. Anything else: never (`*/not-allowed`).
//!
//! Validity of keys and values (syntax, sizes) is the validator's job.

use std::collections::BTreeMap;

use super::PolicyConfig;
use super::report::{Report, Violation};

/// The host's own label (see `crate::ownership`).
const MANAGED_BY_KEY: &str = "app.kubernetes.io/managed-by";
/// The host's own key prefix (owner label, reconciled-by annotation, …).
const HOST_DOMAIN: &str = "jinghzhu.io";
/// The AppArmor annotation prefix (the annotation form of `baseline/apparmor`).
const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The DNS prefix of a key (`example.com` of `example.com/name`), if any.
fn key_domain(key: &str) -> Option<&str> {
    key.split_once('/').map(|(domain, _)| domain)
}

fn is_host_key(key: &str) -> bool {
    key == MANAGED_BY_KEY || key_domain(key) == Some(HOST_DOMAIN)
}

fn is_reserved_domain(domain: &str) -> bool {
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| domain == *d || domain.strip_suffix(d).is_some_and(|s| s.ends_with('.')))
}

fn is_reserved_key(key: &str) -> bool {
    key_domain(key).is_some_and(is_reserved_domain)
}

/// Whether an allowed-prefix setting is unusable: it must name a key prefix
/// with its domain (`example.com/`, `example.com/plugin-`), outside the
/// host's domain and the reserved ones (keys there are never allowed).
pub(crate) fn prefix_is_forbidden(prefix: &str) -> bool {
    match prefix.split_once('/') {
        Some((domain, _)) => {
            domain.is_empty() || domain == HOST_DOMAIN || is_reserved_domain(domain)
        }
        None => true,
    }
}

fn apparmor_value_allowed(value: &str) -> bool {
    value.is_empty() || value == "runtime/default" || value.starts_with("localhost/")
}

/// Which map is being checked: names the rule ids and messages.
#[derive(Clone, Copy)]
struct Kind {
    noun: &'static str,
    host_key: &'static str,
    reserved_key: &'static str,
    template_value: &'static str,
    not_allowed: &'static str,
}

const LABELS: Kind = Kind {
    noun: "label",
    host_key: "labels/host-key",
    reserved_key: "labels/reserved-key",
    template_value: "labels/template-value",
    not_allowed: "labels/not-allowed",
};

const ANNOTATIONS: Kind = Kind {
    noun: "annotation",
    host_key: "annotations/host-key",
    reserved_key: "annotations/reserved-key",
    template_value: "annotations/template-value",
    not_allowed: "annotations/not-allowed",
};

/// Checks the labels and annotations a plugin puts on a pod against the
/// template's metadata and `config` (see the module doc for the rules).
pub fn check_metadata(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    template_labels: &BTreeMap<String, String>,
    template_annotations: &BTreeMap<String, String>,
    config: &PolicyConfig,
) -> Vec<Violation> {
    let mut report = Report::new();
    check_map(LABELS, labels, template_labels, config, &mut report);
    check_map(
        ANNOTATIONS,
        annotations,
        template_annotations,
        config,
        &mut report,
    );
    report.finish()
}

fn check_map(
    kind: Kind,
    proposed: &BTreeMap<String, String>,
    template: &BTreeMap<String, String>,
    config: &PolicyConfig,
    report: &mut Report,
) {
    let noun = kind.noun;
    for (key, value) in proposed {
        if is_host_key(key) {
            report.push(kind.host_key, || {
                format!("{noun} {key:?} is the host's own; plugins cannot set it")
            });
            continue;
        }
        if kind.noun == "annotation"
            && key.starts_with(APPARMOR_ANNOTATION_PREFIX)
            && !apparmor_value_allowed(value)
        {
            report.push("baseline/apparmor", || {
                format!(
                    "annotation {key:?}: AppArmor profile {value:?} is not allowed; \
                     use runtime/default or localhost/<profile>"
                )
            });
            continue;
        }
        let template_value = template.get(key);
        if template_value == Some(value) {
            continue;
        }
        if is_reserved_key(key) {
            report.push(kind.reserved_key, || {
                let hint = match template_value {
                    Some(v) => format!("; only the template's value {v:?} may be used"),
                    None => String::new(),
                };
                format!(
                    "{noun} {key:?} is in a reserved Kubernetes domain (kubernetes.io, k8s.io){hint}"
                )
            });
            continue;
        }
        if config
            .allowed_label_prefixes
            .iter()
            .any(|p| key.starts_with(p.as_str()))
        {
            continue;
        }
        match template_value {
            Some(v) => report.push(kind.template_value, || {
                format!("{noun} {key:?} must keep the template's value {v:?}, not {value:?}")
            }),
            None => report.push(kind.not_allowed, || {
                format!(
                    "{noun} {key:?} is neither set by the template nor under an allowed prefix ({})",
                    config.allowed_label_prefixes.join(", ")
                )
            }),
        }
    }
}
