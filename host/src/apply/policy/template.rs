//! `template` mode: a proposed spec must be semantically equal to the
//! template spec. The host's default template for a Jinghzhu without one
//! lives with the resource, in [`crate::crd::default_template`].
//!
//! Semantic equality: equal typed [`PodSpec`] values, where an empty list
//! equals an absent one (the API server cannot tell them apart either).
//! Other spellings of a default (`hostNetwork: false` where the template
//! omits it) count as differences: they fail safe, and the message names
//! the field. The common case, the host passing the very template value (or
//! a structurally equal copy), costs one pointer or `==` comparison.

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::Value;

use super::report::Report;

/// Most differing fields named in one `template/spec-differs` message.
const MAX_PATHS: usize = 3;

/// `template/spec-differs` unless `proposed` equals `template`.
pub(crate) fn check_equal(proposed: &PodSpec, template: &PodSpec, report: &mut Report) {
    if std::ptr::eq(proposed, template) || proposed == template {
        return;
    }
    // Rare path (a rejection, or an equal spec spelled differently): compare
    // the JSON forms without empty lists and find where they differ.
    let (mut a, mut b) = match (
        serde_json::to_value(proposed),
        serde_json::to_value(template),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        _ => {
            report.push("template/spec-differs", || {
                "spec differs from the template".into()
            });
            return;
        }
    };
    strip_empty_lists(&mut a);
    strip_empty_lists(&mut b);
    let mut paths = Vec::new();
    differences(&a, &b, &mut String::new(), &mut paths);
    if paths.is_empty() {
        return;
    }
    report.push("template/spec-differs", || {
        let more = if paths.len() > MAX_PATHS { ", …" } else { "" };
        let shown: Vec<&str> = paths.iter().take(MAX_PATHS).map(String::as_str).collect();
        format!(
            "spec differs from the template at {}{more} (the pod policy is `template`: \
             a plugin's pods run the Jinghzhu's template spec)",
            shown.join(", ")
        )
    });
}

/// Removes nulls and empty arrays, recursively.
fn strip_empty_lists(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| {
                strip_empty_lists(v);
                !(v.is_null() || v.as_array().is_some_and(Vec::is_empty))
            });
        }
        Value::Array(items) => items.iter_mut().for_each(strip_empty_lists),
        _ => {}
    }
}

/// Appends to `out` the paths (`containers[0].image`) where `a` and `b`
/// differ, stopping after [`MAX_PATHS`] + 1.
fn differences(a: &Value, b: &Value, path: &mut String, out: &mut Vec<String>) {
    if out.len() > MAX_PATHS || a == b {
        return;
    }
    let at = path.len();
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
            for key in keys {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                let null = Value::Null;
                differences(
                    x.get(key).unwrap_or(&null),
                    y.get(key).unwrap_or(&null),
                    path,
                    out,
                );
                path.truncate(at);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                path.push_str(&format!("[{i}]"));
                differences(u, v, path, out);
                path.truncate(at);
            }
        }
        _ => out.push(if path.is_empty() {
            "the top level".to_string()
        } else {
            path.clone()
        }),
    }
}
