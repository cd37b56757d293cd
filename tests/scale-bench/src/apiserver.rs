//! API requests as the API server counts them: snapshots of
//! `apiserver_request_total` from its own `/metrics`, summed by verb and
//! resource (`pods`, `jinghzhus/status`, ...), and the difference between
//! two snapshots. Requests to non-resource URLs (`/metrics`, `/readyz`,
//! `/version`) are left out.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use kube::Client;

use crate::metrics;

/// The API server's request counter.
pub const REQUEST_TOTAL: &str = "apiserver_request_total";

/// The resources whose requests the report breaks down; anything else (the
/// API server's own leases, the controller manager's lookups) is background.
pub const RESOURCES: [&str; 4] = ["jinghzhus", "jinghzhus/status", "pods", "events"];

/// Verbs that change something.
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "DELETECOLLECTION",
    "APPLY",
];

/// Request counts keyed by `"VERB resource[/subresource]"`.
pub type Requests = BTreeMap<String, u64>;

/// The API server's request counts now.
pub async fn snapshot(client: &Client) -> Result<Requests> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the /metrics request")?;
    let text = client
        .request_text(request)
        .await
        .context("reading the API server's /metrics")?;
    parse(&text)
}

/// [`snapshot`] from the text of `/metrics`.
pub fn parse(text: &str) -> Result<Requests> {
    // Only the counter's lines: the whole text is megabytes of histograms.
    let lines: String = text
        .lines()
        .filter(|l| l.starts_with(REQUEST_TOTAL) || l.starts_with("# TYPE apiserver_request_total"))
        .flat_map(|l| [l, "\n"])
        .collect();
    let mut requests = Requests::new();
    for sample in metrics::parse(&lines)? {
        if sample.metric != REQUEST_TOTAL {
            continue;
        }
        let resource = sample.labels.get("resource").unwrap_or_default();
        if resource.is_empty() {
            continue;
        }
        let verb = sample.labels.get("verb").unwrap_or_default();
        let key = match sample.labels.get("subresource").unwrap_or_default() {
            "" => format!("{verb} {resource}"),
            sub => format!("{verb} {resource}/{sub}"),
        };
        *requests.entry(key).or_default() += metrics::number(&sample).unwrap_or(0.0).round() as u64;
    }
    Ok(requests)
}

/// `after - before`, keeping only keys that grew.
pub fn diff(before: &Requests, after: &Requests) -> Requests {
    after
        .iter()
        .filter_map(|(key, &n)| {
            let grown = n.saturating_sub(before.get(key).copied().unwrap_or(0));
            (grown > 0).then(|| (key.clone(), grown))
        })
        .collect()
}

/// `requests - own`: takes out the requests the harness itself made.
pub fn without(requests: &Requests, own: &Requests) -> Requests {
    requests
        .iter()
        .filter_map(|(key, &n)| {
            let left = n.saturating_sub(own.get(key).copied().unwrap_or(0));
            (left > 0).then(|| (key.clone(), left))
        })
        .collect()
}

/// Splits a key into verb and resource.
pub fn split(key: &str) -> (&str, &str) {
    key.split_once(' ').unwrap_or((key, ""))
}

/// Requests on the [`RESOURCES`] a controller works with.
pub fn on_controller_resources(requests: &Requests) -> Requests {
    requests
        .iter()
        .filter(|(key, _)| RESOURCES.contains(&split(key).1))
        .map(|(k, &n)| (k.clone(), n))
        .collect()
}

/// Writes (see [`WRITE_VERBS`]) among `requests`.
pub fn writes(requests: &Requests) -> u64 {
    requests
        .iter()
        .filter(|(key, _)| WRITE_VERBS.contains(&split(key).0))
        .map(|(_, &n)| n)
        .sum()
}

/// Everything but writes (GET, LIST, WATCH).
pub fn reads(requests: &Requests) -> u64 {
    requests.values().sum::<u64>() - writes(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 30
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="jinghzhu.io",resource="jinghzhus",scope="resource",subresource="status",verb="PATCH",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 3
apiserver_request_duration_seconds_bucket{le="0.1"} 9
"#;

    #[test]
    fn sums_by_verb_and_resource_without_non_resource_urls() {
        let requests = parse(TEXT).expect("parse");
        assert_eq!(requests.get("POST pods"), Some(&32));
        assert_eq!(requests.get("PATCH jinghzhus/status"), Some(&10));
        assert_eq!(requests.len(), 3, "{requests:?}");
        let ours = on_controller_resources(&requests);
        assert_eq!(writes(&ours), 42);
        assert_eq!(reads(&ours), 0);
    }

    #[test]
    fn differences_and_own_requests() {
        let before = Requests::from([("POST pods".to_owned(), 2), ("LIST pods".to_owned(), 1)]);
        let after = Requests::from([("POST pods".to_owned(), 7), ("LIST pods".to_owned(), 1)]);
        let grown = diff(&before, &after);
        assert_eq!(grown, Requests::from([("POST pods".to_owned(), 5)]));
        let own = Requests::from([("POST pods".to_owned(), 5)]);
        assert!(without(&grown, &own).is_empty());
    }
}
