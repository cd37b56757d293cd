//! Whose API requests are whose: the API server's audit log, kept for the
//! controller's own user only (a ServiceAccount no other client uses), at
//! the `Metadata` level, one JSON line per request when it completes. The
//! controller manager's writes to the same resources (a Deployment's
//! revision annotation, its Events) are not counted as the controller's.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

/// Verbs that change something, as the audit log names them.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The audit policy: every request of `user` at `Metadata` (once, when
/// its response is complete), nothing of anyone else.
pub fn policy(user: &str) -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted, Panic]\nrules:\n\
         - level: Metadata\n  users: [\"{user}\"]\n- level: None\n"
    )
}

/// The kube-apiserver flags that write the log of `policy_file` to `log_file`.
pub fn apiserver_args(policy_file: &Path, log_file: &Path) -> Vec<String> {
    vec![
        format!("--audit-policy-file={}", policy_file.display()),
        format!("--audit-log-path={}", log_file.display()),
        "--audit-log-format=json".to_owned(),
        "--audit-log-mode=blocking".to_owned(),
        "--audit-log-maxsize=0".to_owned(),
    ]
}

/// Requests counted by `"verb resource[/subresource]"`.
pub type Counts = BTreeMap<String, u64>;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    verb: String,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    request_received_timestamp: MicroTime,
}

#[derive(Debug, Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
}

/// The requests in the log `text` received from `from` to `to` (inclusive),
/// on resources (not `/metrics`, `/version`).
pub fn count(text: &str, from: Timestamp, to: Timestamp) -> Result<Counts> {
    let mut counts = Counts::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: AuditEvent = serde_json::from_str(line)
            .with_context(|| format!("audit log line {}: not an audit event", number + 1))?;
        let received = event.request_received_timestamp.0;
        if received < from || received > to {
            continue;
        }
        let Some(object) = event.object_ref.filter(|o| !o.resource.is_empty()) else {
            continue;
        };
        let key = if object.subresource.is_empty() {
            format!("{} {}", event.verb, object.resource)
        } else {
            format!("{} {}/{}", event.verb, object.resource, object.subresource)
        };
        *counts.entry(key).or_default() += 1;
    }
    Ok(counts)
}

/// The log file's requests from `from` to `to`.
pub fn count_file(path: &Path, from: Timestamp, to: Timestamp) -> Result<Counts> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the audit log {}", path.display()))?;
    count(&text, from, to)
}

/// Whether the `"verb resource"` key is a write.
pub fn is_write(key: &str) -> bool {
    WRITE_VERBS.contains(&key.split(' ').next().unwrap_or_default())
}

/// Writes among `counts`.
pub fn writes(counts: &Counts) -> u64 {
    counts
        .iter()
        .filter(|(key, _)| is_write(key))
        .map(|(_, &n)| n)
        .sum()
}

/// Everything but writes (get, list, watch).
pub fn reads(counts: &Counts) -> u64 {
    counts.values().sum::<u64>() - writes(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/apis/apps/v1/namespaces/b/deployments/m?fieldManager=x","verb":"patch","user":{"username":"system:serviceaccount:b:c"},"objectRef":{"resource":"deployments","namespace":"b","name":"m","apiGroup":"apps","apiVersion":"v1"},"responseStatus":{"code":201},"requestReceivedTimestamp":"2026-11-29T14:00:01.000000Z","stageTimestamp":"2026-11-29T14:00:01.010000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"b","stage":"ResponseComplete","requestURI":"/apis/cache.example.com/v1alpha1/namespaces/b/memcacheds/m/status","verb":"patch","user":{"username":"system:serviceaccount:b:c"},"objectRef":{"resource":"memcacheds","namespace":"b","name":"m","apiGroup":"cache.example.com","apiVersion":"v1alpha1","subresource":"status"},"requestReceivedTimestamp":"2026-11-29T14:00:02.000000Z","stageTimestamp":"2026-11-29T14:00:02.010000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"c","stage":"ResponseComplete","requestURI":"/api/v1/pods?watch=true","verb":"watch","user":{"username":"system:serviceaccount:b:c"},"objectRef":{"resource":"pods","apiVersion":"v1"},"requestReceivedTimestamp":"2026-11-29T14:00:03.000000Z","stageTimestamp":"2026-11-29T14:00:09.000000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"d","stage":"ResponseComplete","requestURI":"/version","verb":"get","user":{"username":"system:serviceaccount:b:c"},"requestReceivedTimestamp":"2026-11-29T14:00:04.000000Z","stageTimestamp":"2026-11-29T14:00:04.000000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"e","stage":"ResponseComplete","requestURI":"/apis/events.k8s.io/v1/namespaces/b/events","verb":"create","user":{"username":"system:serviceaccount:b:c"},"objectRef":{"resource":"events","namespace":"b","apiGroup":"events.k8s.io","apiVersion":"v1"},"requestReceivedTimestamp":"2026-11-29T14:10:00.000000Z","stageTimestamp":"2026-11-29T14:10:00.000000Z"}
"#;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    #[test]
    fn counts_requests_on_resources_within_the_window() {
        let counts =
            count(LOG, at("2026-11-29T14:00:00Z"), at("2026-11-29T14:05:00Z")).expect("count");
        assert_eq!(
            counts,
            Counts::from([
                ("patch deployments".to_owned(), 1),
                ("patch memcacheds/status".to_owned(), 1),
                ("watch pods".to_owned(), 1),
            ])
        );
        assert_eq!(writes(&counts), 2);
        assert_eq!(reads(&counts), 1);
        let later =
            count(LOG, at("2026-11-29T14:05:00Z"), at("2026-11-29T14:15:00Z")).expect("count");
        assert_eq!(writes(&later), 1, "the Event after the window's start");
    }

    #[test]
    fn a_line_that_is_no_audit_event_is_an_error() {
        let err = count(
            "not json\n",
            at("2026-11-29T14:00:00Z"),
            at("2026-11-29T14:05:00Z"),
        )
        .expect_err("no event");
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
    }

    #[test]
    fn the_policy_keeps_only_the_controllers_user() {
        let policy = policy("system:serviceaccount:b:c");
        assert!(policy.contains("users: [\"system:serviceaccount:b:c\"]"));
        assert!(policy.trim_end().ends_with("- level: None"));
    }
}
