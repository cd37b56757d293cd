//! Kubernetes' syntax rules for the names and labels a plugin may propose,
//! checked before anything is sent to the API server (the same rules as
//! apimachinery's `validation` package).

/// Longest object name (DNS-1123 subdomain).
pub const MAX_NAME_LEN: usize = 253;
/// Longest `generateName` prefix we accept: the API server appends 5
/// characters, and pod names end up as hostnames (DNS labels, 63 max).
pub const MAX_GENERATE_NAME_LEN: usize = 58;
/// Longest label value and label-key name part.
pub const MAX_LABEL_LEN: usize = 63;

/// A DNS-1123 label: lowercase alphanumerics and `-`, starting and ending
/// alphanumeric, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL_LEN
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME_LEN && s.split('.').all(is_dns1123_label)
}

/// A valid pod name. Pods become hostnames, so we hold them to a DNS-1123
/// label (stricter than the API server's subdomain rule, never looser).
pub fn is_pod_name(s: &str) -> bool {
    is_dns1123_label(s)
}

/// A valid `generateName` for a pod: a pod name prefix short enough for the
/// 5-character suffix, ending in anything a name may continue from.
pub fn is_pod_generate_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_GENERATE_NAME_LEN
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

/// A qualified name part: `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63.
fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= MAX_LABEL_LEN
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A label or annotation key: an optional DNS subdomain prefix and `/`, then
/// a qualified name part.
pub fn is_qualified_key(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_qualified_name_part(name),
        None => is_qualified_name_part(s),
    }
}

/// A label value: empty, or a qualified name part.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_qualified_name_part(s)
}

/// An Event reason: UpperCamelCase-ish, letters and digits, at most 128.
pub fn is_event_reason(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes().next().is_some_and(|b| b.is_ascii_uppercase())
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names() {
        assert!(is_pod_name("web-x7k2p"));
        assert!(!is_pod_name("Invalid_Name!"));
        assert!(!is_pod_name("-web"));
        assert!(!is_pod_name("web-"));
        assert!(!is_pod_name(""));
        assert!(!is_pod_name(&"a".repeat(64)));
        assert!(is_pod_generate_name("web-"));
        assert!(!is_pod_generate_name("Web-"));
        assert!(!is_pod_generate_name(&"a".repeat(59)));
    }

    #[test]
    fn label_keys_and_values() {
        assert!(is_qualified_key("app"));
        assert!(is_qualified_key("app.kubernetes.io/name"));
        assert!(!is_qualified_key("app.kubernetes.io/"));
        assert!(!is_qualified_key("Bad_Prefix/name"));
        assert!(!is_qualified_key("-x"));
        assert!(is_label_value(""));
        assert!(is_label_value("v1.2_3"));
        assert!(!is_label_value("has space"));
        assert!(!is_label_value(&"a".repeat(64)));
    }

    #[test]
    fn event_reasons() {
        assert!(is_event_reason("ScalingUp"));
        assert!(!is_event_reason("scaling up"));
        assert!(!is_event_reason(""));
    }
}
