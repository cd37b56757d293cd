//! Reading the parent: its name (which names a Service) and the `spec`
//! fields the plugin uses (`content`, `replicas`, `port`), checked, with
//! error messages that say what to fix (hand-written rather than
//! `Input::spec_as`, so that each names the field, what it accepts and the
//! value found). The CRD's schema
//! bounds most of them; the plugin checks again so that it never proposes
//! children from a spec it does not understand, and checks what the schema
//! cannot (file names a ConfigMap accepts, the total size).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use wasm_operator_controller_sdk::Value;
use wasm_operator_controller_sdk::serde_json::Map;

/// The most replicas accepted (the CRD's `maximum`).
pub const MAX_REPLICAS: i64 = 10;
/// `spec.replicas` when absent.
pub const DEFAULT_REPLICAS: i64 = 1;
/// `spec.port` when absent.
pub const DEFAULT_PORT: i64 = 80;
/// The most bytes of content (names and texts): a ConfigMap holds 1 MiB
/// in all, metadata included.
pub const MAX_CONTENT_BYTES: usize = 1_000_000;

/// What the plugin reads from a StaticSite's `spec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteSpec {
    /// File name -> text, served at `/<name>`.
    pub content: BTreeMap<String, String>,
    /// Replicas of the nginx Deployment (0..=[`MAX_REPLICAS`]).
    pub replicas: i64,
    /// The Service's port (1..=65535).
    pub port: i64,
}

/// Checks that the site's name can name its Service (a DNS-1035 label:
/// at most 63 lowercase letters, digits and `-`, starting with a letter
/// and ending with a letter or digit).
pub fn check_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let fits = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes[bytes.len() - 1] != b'-'
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if fits {
        return Ok(());
    }
    Err(format!(
        "the name {name:?} cannot name a Service: use at most 63 lowercase letters, digits and '-', starting with a letter"
    ))
}

/// Reads and checks `spec.content`, `spec.replicas` and `spec.port` of the
/// parent's body (`Input::body`).
pub fn read_spec(body: &Value) -> Result<SiteSpec, String> {
    let spec = match body.get("spec") {
        Some(Value::Object(spec)) => spec,
        Some(other) => return Err(format!("spec must be an object, got {other}")),
        None => return Err("spec is missing: set spec.content (file name -> text)".to_string()),
    };
    Ok(SiteSpec {
        content: content(spec.get("content"))?,
        replicas: integer(spec, "replicas", DEFAULT_REPLICAS, 0..=MAX_REPLICAS)?,
        port: integer(spec, "port", DEFAULT_PORT, 1..=65535)?,
    })
}

/// `spec.content`: a map of valid ConfigMap keys to strings, within
/// [`MAX_CONTENT_BYTES`].
fn content(value: Option<&Value>) -> Result<BTreeMap<String, String>, String> {
    let files = match value {
        Some(Value::Object(files)) => files,
        None | Some(Value::Null) => {
            return Err(
                "spec.content is missing: set it to a map of file name -> text".to_string(),
            );
        }
        Some(other) => {
            return Err(format!(
                "spec.content must be a map of file name -> text, got {other}"
            ));
        }
    };
    let mut content = BTreeMap::new();
    let mut bytes = 0;
    for (name, text) in files {
        check_file_name(name)?;
        let Value::String(text) = text else {
            return Err(format!("spec.content.{name} must be a string, got {text}"));
        };
        bytes += name.len() + text.len();
        content.insert(name.clone(), text.clone());
    }
    if bytes > MAX_CONTENT_BYTES {
        return Err(format!(
            "spec.content is {bytes} bytes, more than the {MAX_CONTENT_BYTES} a ConfigMap holds: make the site smaller"
        ));
    }
    Ok(content)
}

/// A file name must be a ConfigMap key: 1 to 253 of `[-._a-zA-Z0-9]`, and
/// not `.` or `..`.
fn check_file_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if (1..=253).contains(&name.len()) && name.chars().all(allowed) && name != "." && name != ".." {
        return Ok(());
    }
    Err(format!(
        "spec.content has the file name {name:?}: use 1 to 253 letters, digits, '-', '_' and '.' (no directories)"
    ))
}

/// `spec.<field>` as an integer within `range`, `default` when absent or
/// null.
fn integer(
    spec: &Map<String, Value>,
    field: &str,
    default: i64,
    range: RangeInclusive<i64>,
) -> Result<i64, String> {
    let value = match spec.get(field) {
        None | Some(Value::Null) => return Ok(default),
        Some(value) => value,
    };
    match value.as_i64() {
        Some(n) if range.contains(&n) => Ok(n),
        _ => Err(format!(
            "spec.{field} must be an integer from {} to {}, got {value}: change spec.{field}",
            range.start(),
            range.end()
        )),
    }
}
