//! Reading Prometheus text: fetching a controller's `/metrics` over plain
//! HTTP and summing samples with the `prometheus-parse` crate. Every
//! controller reports reconciles under controller-runtime's name
//! (`controller_runtime_reconcile_total`), or — the host until it adopts that
//! name — `wasm_operator_reconciles_total`.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use prometheus_parse::{Sample, Scrape, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// controller-runtime's reconcile counter (the Go peer, the kube-rs peer).
pub const CONTROLLER_RUNTIME_RECONCILES: &str = "controller_runtime_reconcile_total";
/// The host's own reconcile counter.
pub const HOST_RECONCILES: &str = "wasm_operator_reconciles_total";
/// The host's count of shards it holds and reconciles (with `--shards`).
pub const HOST_SHARDS_OWNED: &str = "wasm_operator_shards_owned";
/// 1 per shard the host holds, labelled `shard` and `phase`.
pub const HOST_SHARD_OWNED: &str = "wasm_operator_shard_owned";

/// Parses Prometheus or OpenMetrics text.
pub fn parse(text: &str) -> Result<Vec<Sample>> {
    let scrape =
        Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).context("parsing Prometheus text")?;
    Ok(scrape.samples)
}

/// A sample's value when it is a single number.
pub fn number(sample: &Sample) -> Option<f64> {
    match sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(v),
        Value::Histogram(_) | Value::Summary(_) => None,
    }
}

/// The sum of every sample named `metric`, `None` when there is none.
pub fn sum(samples: &[Sample], metric: &str) -> Option<f64> {
    let mut found = false;
    let mut total = 0.0;
    for sample in samples.iter().filter(|s| s.metric == metric) {
        if let Some(v) = number(sample) {
            found = true;
            total += v;
        }
    }
    found.then_some(total)
}

/// Reconciles so far: controller-runtime's counter if the controller has it,
/// else the host's.
pub fn reconciles(samples: &[Sample]) -> Option<u64> {
    sum(samples, CONTROLLER_RUNTIME_RECONCILES)
        .or_else(|| sum(samples, HOST_RECONCILES))
        .map(|v| v.round() as u64)
}

/// The reconcile time histogram both the host and controller-runtime keep.
pub const RECONCILE_TIME: &str = "controller_runtime_reconcile_time_seconds";

/// What a latency histogram says, all its label sets together.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    /// Observations.
    pub count: f64,
    /// Their mean, seconds (the histogram's sum over its count).
    pub mean: f64,
    /// The median and the 99th percentile, seconds, interpolated linearly
    /// within their bucket (as Prometheus's `histogram_quantile`).
    pub p50: f64,
    /// See `p50`.
    pub p99: f64,
}

/// The histogram `metric` of `samples` (its label sets added up), `None`
/// without observations.
pub fn latency(samples: &[Sample], metric: &str) -> Option<Latency> {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for sample in samples.iter().filter(|s| s.metric == metric) {
        if let Value::Histogram(counts) = &sample.value {
            for bucket in counts {
                match buckets.iter_mut().find(|(le, _)| *le == bucket.less_than) {
                    Some((_, n)) => *n += bucket.count,
                    None => buckets.push((bucket.less_than, bucket.count)),
                }
            }
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let count = sum(samples, &format!("{metric}_count"))?;
    let total = sum(samples, &format!("{metric}_sum"))?;
    if count <= 0.0 {
        return None;
    }
    Some(Latency {
        count,
        mean: total / count,
        p50: quantile(&buckets, 0.5),
        p99: quantile(&buckets, 0.99),
    })
}

/// The `q` quantile of cumulative `buckets` (upper bound, count).
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    let rank = q * total;
    let mut below = (0.0, 0.0);
    for &(le, n) in buckets {
        if n >= rank {
            if le.is_infinite() {
                return below.0;
            }
            let within = n - below.1;
            let share = if within > 0.0 {
                (rank - below.1) / within
            } else {
                1.0
            };
            return below.0 + (le - below.0) * share;
        }
        below = (le, n);
    }
    below.0
}

/// `GET http://<addr>/metrics` (HTTP/1.0, so the body ends at connection close).
pub async fn fetch(addr: SocketAddr) -> Result<String> {
    get(addr, "/metrics").await
}

/// True when the host's `/readyz` answers 200 (its plugin serves and its
/// caches are synced).
pub async fn is_ready(addr: SocketAddr) -> bool {
    get(addr, "/readyz").await.is_ok()
}

/// The body of `GET path` on `addr`, when it answers 200.
async fn get(addr: SocketAddr, path: &str) -> Result<String> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n");
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .with_context(|| format!("{addr}{path} did not answer within 10 s"))?
        .with_context(|| format!("fetching http://{addr}{path}"))?;
    let text = String::from_utf8_lossy(&response);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("malformed HTTP response from {addr}{path}");
    };
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "http://{addr}{path} answered {}",
            head.lines().next().unwrap_or_default()
        );
    }
    Ok(body.to_owned())
}

/// Fetches and parses a controller's reconcile count.
pub async fn fetch_reconciles(addr: SocketAddr) -> Result<u64> {
    let samples = parse(&fetch(addr).await?)?;
    match reconciles(&samples) {
        Some(n) => Ok(n),
        None => bail!(
            "http://{addr}/metrics has neither {CONTROLLER_RUNTIME_RECONCILES} nor {HOST_RECONCILES}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_controller_runtimes_counter_and_sums_its_labels() {
        let text = "# TYPE controller_runtime_reconcile_total counter\n\
            controller_runtime_reconcile_total{controller=\"jinghzhu\",result=\"success\"} 7\n\
            controller_runtime_reconcile_total{controller=\"jinghzhu\",result=\"error\"} 2\n\
            wasm_operator_reconciles_total 100\n";
        assert_eq!(reconciles(&parse(text).expect("parse")), Some(9));
    }

    #[test]
    fn a_histogram_gives_its_mean_and_interpolated_quantiles_over_labels() {
        let text = "# TYPE t histogram\n\
            t_bucket{controller=\"a\",le=\"0.1\"} 40\n\
            t_bucket{controller=\"a\",le=\"1\"} 50\n\
            t_bucket{controller=\"a\",le=\"+Inf\"} 50\n\
            t_sum{controller=\"a\"} 5\n\
            t_count{controller=\"a\"} 50\n\
            t_bucket{controller=\"b\",le=\"0.1\"} 40\n\
            t_bucket{controller=\"b\",le=\"1\"} 50\n\
            t_bucket{controller=\"b\",le=\"+Inf\"} 50\n\
            t_sum{controller=\"b\"} 5\n\
            t_count{controller=\"b\"} 50\n";
        let shown = latency(&parse(text).expect("parse"), "t").expect("observed");
        assert_eq!(shown.count, 100.0);
        assert!((shown.mean - 0.1).abs() < 1e-9, "{shown:?}");
        assert!((shown.p50 - 0.0625).abs() < 1e-9, "{shown:?}");
        assert!((shown.p99 - 0.955).abs() < 1e-9, "{shown:?}");
        assert_eq!(latency(&parse("other 1\n").expect("parse"), "t"), None);
    }

    #[test]
    fn falls_back_to_the_hosts_counter_in_openmetrics_text() {
        let text = "# HELP wasm_operator_reconciles Reconciles started.\n\
            # TYPE wasm_operator_reconciles counter\n\
            wasm_operator_reconciles_total 42\n# EOF\n";
        assert_eq!(reconciles(&parse(text).expect("parse")), Some(42));
        assert_eq!(reconciles(&parse("other_metric 1\n").expect("parse")), None);
    }
}
