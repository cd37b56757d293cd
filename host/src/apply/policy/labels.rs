//! Labels and annotations a plugin puts on its pods.
//!
//! First, the template's own metadata (every mode, `template/metadata`):
//! every label and annotation the Jinghzhu's template sets is on every pod,
//! with the template's value. Dropping one would take pods out of the
//! NetworkPolicies, PodDisruptionBudgets, Services and mesh injection that
//! select them, or lose an annotation-form setting; the proposal is refused
//! (not silently fixed), so the plugin author sees it at once. The SDK's
//! `pod::from_template` copies them. Keys the plugin may never write (rules
//! 1 and 2 below) are not required: the host sets its own keys itself.
//!
//! Then each key the plugin writes is judged in this order (first match decides):
//! 1. The host's own keys: `app.kubernetes.io/managed-by` and every key in
//!    the `jinghzhu.io/` prefix: never (`labels/host-key`,
//!    `annotations/host-key`); the host sets its keys itself.
//! 2. An AppArmor annotation (`container.apparmor.security.beta.kubernetes.io/*`)
//!    whose value is not empty, `runtime/default` or `localhost/*`: never, even
//!    copied from the template (`baseline/apparmor`, the floor of every mode).
//! 3. A key the template's metadata sets: only with the template's value
//!    (another value is `template/metadata`, above), so a plugin keeps
//!    `app: web` and cannot move its pods into another app's Service selector.
//! 4. A key in the reserved `kubernetes.io` / `k8s.io` domains (and their
//!    subdomains), otherwise: never (`*/reserved-key`); some carry authority.
//! 5. A key under an allowed prefix (`--allowed-label-prefix`, default
//!    `plugin.jinghzhu.io/`): an annotation with any value; a **label** only
//!    with a value scoped to its Jinghzhu (`labels/foreign-value`): the
//!    Jinghzhu's name, or the name, `_` and anything ([`scoped_label_value`]).
//!    The prefix is shared by every object, so free values would let one
//!    object's pods copy another's and join the Services and policies that
//!    select them. Jinghzhu names never contain `_`, so the part before the
//!    first `_` names exactly one object.
//! 6. Anything else: never (`*/not-allowed`).
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

/// Whether `value` is a label value scoped to the Jinghzhu `owner`: the name
/// itself, or the name, `_` and anything (`web`, `web_3`, `web_primary`).
/// Jinghzhu names are DNS subdomains (no `_`), so no value is scoped to two
/// objects.
pub fn scoped_label_value(value: &str, owner: &str) -> bool {
    value == owner
        || value
            .strip_prefix(owner)
            .is_some_and(|rest| rest.starts_with('_'))
}

/// Which map is being checked: names the rule ids and messages.
#[derive(Clone, Copy)]
struct Kind {
    noun: &'static str,
    host_key: &'static str,
    reserved_key: &'static str,
    not_allowed: &'static str,
    /// Values under an allowed prefix must be scoped to the owner (labels:
    /// selectors match them; annotations are never selected).
    scoped_values: bool,
}

const LABELS: Kind = Kind {
    noun: "label",
    host_key: "labels/host-key",
    reserved_key: "labels/reserved-key",
    not_allowed: "labels/not-allowed",
    scoped_values: true,
};

const ANNOTATIONS: Kind = Kind {
    noun: "annotation",
    host_key: "annotations/host-key",
    reserved_key: "annotations/reserved-key",
    not_allowed: "annotations/not-allowed",
    scoped_values: false,
};

/// Checks the labels and annotations a plugin puts on a pod of the Jinghzhu
/// named `owner` against the template's metadata and `config` (see the
/// module doc for the rules).
pub fn check_metadata(
    owner: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    template_labels: &BTreeMap<String, String>,
    template_annotations: &BTreeMap<String, String>,
    config: &PolicyConfig,
) -> Vec<Violation> {
    let mut report = Report::new();
    let labels_of = Metadata {
        kind: LABELS,
        proposed: labels,
        template: template_labels,
    };
    let annotations_of = Metadata {
        kind: ANNOTATIONS,
        proposed: annotations,
        template: template_annotations,
    };
    for map in [&labels_of, &annotations_of] {
        map.template_kept(&mut report);
    }
    for map in [&labels_of, &annotations_of] {
        map.check_keys(owner, config, &mut report);
    }
    report.finish()
}

/// One map (labels or annotations) of a proposed pod and of its template.
struct Metadata<'a> {
    kind: Kind,
    proposed: &'a BTreeMap<String, String>,
    template: &'a BTreeMap<String, String>,
}

impl Metadata<'_> {
    /// Whether a plugin may never write `key` = `value` whoever set it
    /// (rules 1 and 2 of the module doc).
    fn never_writable(&self, key: &str, value: &str) -> bool {
        is_host_key(key)
            || (self.kind.noun == "annotation"
                && key.starts_with(APPARMOR_ANNOTATION_PREFIX)
                && !apparmor_value_allowed(value))
    }

    /// `template/metadata`: every template key the plugin may write is on
    /// the pod with the template's value.
    fn template_kept(&self, report: &mut Report) {
        let noun = self.kind.noun;
        for (key, wanted) in self.template {
            if self.never_writable(key, wanted) {
                continue;
            }
            match self.proposed.get(key) {
                Some(value) if value == wanted => {}
                // Refused on its own by `check_keys` (baseline/apparmor).
                Some(value) if self.never_writable(key, value) => {}
                Some(value) => report.push("template/metadata", || {
                    format!(
                        "{noun} {key:?} must keep the template's value {wanted:?}, not {value:?}"
                    )
                }),
                None => report.push("template/metadata", || {
                    format!(
                        "{noun} {key:?}={wanted:?} of the template is missing: every pod carries \
                         the template's labels and annotations"
                    )
                }),
            }
        }
    }

    /// Rules 1, 2 and 4–6 of the module doc for each key the plugin writes.
    fn check_keys(&self, owner: &str, config: &PolicyConfig, report: &mut Report) {
        let kind = self.kind;
        let noun = kind.noun;
        for (key, value) in self.proposed {
            if is_host_key(key) {
                report.push(kind.host_key, || {
                    format!("{noun} {key:?} is the host's own; plugins cannot set it")
                });
                continue;
            }
            if self.never_writable(key, value) {
                report.push("baseline/apparmor", || {
                    format!(
                        "annotation {key:?}: AppArmor profile {value:?} is not allowed; \
                         use runtime/default or localhost/<profile>"
                    )
                });
                continue;
            }
            if self.template.contains_key(key) {
                continue; // the template's value, or reported by `template_kept`
            }
            if is_reserved_key(key) {
                report.push(kind.reserved_key, || {
                    format!(
                        "{noun} {key:?} is in a reserved Kubernetes domain (kubernetes.io, k8s.io)"
                    )
                });
                continue;
            }
            if config
                .allowed_label_prefixes
                .iter()
                .any(|p| key.starts_with(p.as_str()))
            {
                if kind.scoped_values && !scoped_label_value(value, owner) {
                    report.push("labels/foreign-value", || {
                        format!(
                            "label {key:?}={value:?}: values under the shared plugin prefix must be \
                             scoped to this Jinghzhu: {owner:?} or \"{owner}_<anything>\" (so no \
                             object's pods can join another object's selectors)"
                        )
                    });
                }
                continue;
            }
            report.push(kind.not_allowed, || {
                format!(
                    "{noun} {key:?} is neither set by the template nor under an allowed prefix ({})",
                    config.allowed_label_prefixes.join(", ")
                )
            });
        }
    }
}
