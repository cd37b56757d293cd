//! Kubernetes' syntax rules for the names and labels a plugin may propose,
//! checked before anything is sent to the API server (the same rules as
//! apimachinery's `validation` package), and the host's rule for which pod
//! names a Jinghzhu may take ([`check_pod_prefix`], `names/pod-prefix`).

use super::policy::Violation;
use crate::actions::PodToCreate;

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

/// Whether the pod name `name` belongs to the Jinghzhu named `owner`:
/// `<owner>-<suffix>`, where the suffix is not empty and has no `-`
/// (`web-0`, `web-x7k2p`). The owner of a pod name is therefore the part
/// before its last `-`: no two Jinghzhus can take the same name, so one
/// cannot squat the names another's plugin will ask for (`web` cannot take
/// `web-db-0`, which is `web-db`'s), nor names of other workloads that are
/// not named after it.
pub fn is_owned_pod_name(name: &str, owner: &str) -> bool {
    name.strip_prefix(owner)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|suffix| !suffix.is_empty() && !suffix.contains('-'))
}

/// Whether the `generateName` `prefix` gives pod names that belong to the
/// Jinghzhu named `owner` (see [`is_owned_pod_name`]): `<owner>-` and at
/// most a suffix without `-` (the API server appends five characters of
/// `bcdfghjklmnpqrstvwxz2456789`, never a `-`). The SDK's
/// `pod::from_template` uses `<owner>-`.
pub fn is_owned_generate_name(prefix: &str, owner: &str) -> bool {
    prefix
        .strip_prefix(owner)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|suffix| !suffix.contains('-'))
}

/// `names/pod-prefix`: a create for the Jinghzhu named `owner` whose `name`
/// or `generateName` is not one of the owner's (see [`is_owned_pod_name`]).
/// Nothing when neither or both are set (that is `names/pod-name`'s).
pub fn check_pod_prefix(owner: &str, create: &PodToCreate) -> Option<Violation> {
    pod_prefix_violation(
        owner,
        create.name.as_deref(),
        create.generate_name.as_deref(),
    )
}

fn pod_prefix_violation(
    owner: &str,
    name: Option<&str>,
    generate_name: Option<&str>,
) -> Option<Violation> {
    let (field, value, owned) = match (name, generate_name) {
        (Some(name), None) => ("name", name, is_owned_pod_name(name, owner)),
        (None, Some(prefix)) => (
            "generateName",
            prefix,
            is_owned_generate_name(prefix, owner),
        ),
        _ => return None,
    };
    (!owned).then(|| Violation {
        rule: "names/pod-prefix",
        message: format!(
            "pod {field} {value:?} is not one of {owner:?}'s: pod names are \"{owner}-<suffix>\" \
             with no '-' in the suffix (generateName \"{owner}-\"), so no object can take \
             names another needs"
        ),
    })
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
    fn pod_names_belong_to_their_jinghzhu() {
        for name in ["web-0", "web-x7k2p", "web-a1b2"] {
            assert!(is_owned_pod_name(name, "web"), "{name}");
        }
        // Another object's (web-db's), a bare name, an empty suffix, another owner.
        for name in ["web-db-0", "web", "web-", "webdb-0", "db-0", "we-b", ""] {
            assert!(!is_owned_pod_name(name, "web"), "{name}");
        }
        assert!(is_owned_pod_name("web-db-0", "web-db"));
        assert!(is_owned_generate_name("web-", "web"));
        assert!(is_owned_generate_name("web-x", "web"));
        for prefix in ["web-db-", "web", "db-", "web-a-", ""] {
            assert!(!is_owned_generate_name(prefix, "web"), "{prefix}");
        }
        assert_eq!(pod_prefix_violation("web", Some("web-0"), None), None);
        assert_eq!(pod_prefix_violation("web", None, Some("web-")), None);
        assert_eq!(pod_prefix_violation("web", Some("a"), Some("b")), None);
        let squat = pod_prefix_violation("web", Some("web-db-0"), None).expect("refused");
        assert_eq!(squat.rule, "names/pod-prefix");
        assert!(squat.message.contains("\"web-db-0\""), "{}", squat.message);
        let generated = pod_prefix_violation("web", None, Some("db-")).expect("refused");
        assert!(
            generated.message.contains("generateName"),
            "{}",
            generated.message
        );
    }

    /// The owner of any name two Jinghzhus could both take is unique: the
    /// part before the last '-'.
    #[test]
    fn no_pod_name_belongs_to_two_jinghzhus() {
        let owners = ["web", "web-db", "web-db-0", "w", "we", "web-0", "a-b-c"];
        let names = [
            "web-0",
            "web-db-0",
            "web-db-0-1",
            "w-1",
            "we-b",
            "web-0-1",
            "a-b-c-d",
            "web-db",
        ];
        for name in names {
            let claimed: Vec<&str> = owners
                .iter()
                .copied()
                .filter(|o| is_owned_pod_name(name, o))
                .collect();
            assert!(claimed.len() <= 1, "{name}: {claimed:?}");
        }
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
