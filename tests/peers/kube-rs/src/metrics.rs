//! The peer's Prometheus counters, named as controller-runtime names them
//! (`controller_runtime_reconcile_total{controller,result}`) so the scale
//! benchmark reads every controller the same way, and the HTTP endpoint
//! serving them on `--metrics-addr`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The controller name in every label set.
pub const CONTROLLER: &str = "jinghzhu";

/// Labels of `controller_runtime_reconcile_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// Always [`CONTROLLER`].
    pub controller: String,
    /// `success` or `error`.
    pub result: String,
}

/// Everything the peer counts.
#[derive(Debug)]
pub struct Metrics {
    /// Reconciles by result.
    pub reconciles: Family<ReconcileLabels, Counter>,
}

impl Default for Metrics {
    /// Every result starts at 0 (as controller-runtime's do), so a scrape
    /// before the first reconcile already shows the counter.
    fn default() -> Self {
        let metrics = Self {
            reconciles: Family::default(),
        };
        for result in ["success", "error"] {
            let _ = metrics.reconciles.get_or_create(&labels(result));
        }
        metrics
    }
}

fn labels(result: &str) -> ReconcileLabels {
    ReconcileLabels {
        controller: CONTROLLER.to_owned(),
        result: result.to_owned(),
    }
}

impl Metrics {
    /// Counts one finished reconcile.
    pub fn count_reconcile(&self, ok: bool) {
        self.reconciles
            .get_or_create(&labels(if ok { "success" } else { "error" }))
            .inc();
    }

    /// Reconciles finished so far, whatever their result.
    #[cfg(test)]
    fn total(&self) -> u64 {
        ["success", "error"]
            .iter()
            .map(|result| self.reconciles.get_or_create(&labels(result)).get())
            .sum()
    }
}

/// Binds `addr` and serves `/metrics` in the background; returns the bound address.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr> {
    let mut registry = Registry::default();
    registry
        .sub_registry_with_prefix("controller_runtime")
        .register(
            "reconcile",
            "Total number of reconciliations per controller",
            metrics.reconciles.clone(),
        );
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .with_state(Arc::new(registry));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("binding the metrics address {addr} (change it with --metrics-addr)")
    })?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!(error = %err, "metrics server stopped");
        }
    });
    Ok(bound)
}

async fn metrics_text(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    let mut text = String::new();
    if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::error!(error = %err, "encoding metrics");
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_are_counted_by_result_under_controller_runtimes_name() {
        let metrics = Metrics::default();
        assert_eq!(metrics.total(), 0);
        metrics.count_reconcile(true);
        metrics.count_reconcile(true);
        metrics.count_reconcile(false);
        assert_eq!(metrics.total(), 3);
        let mut registry = Registry::default();
        registry
            .sub_registry_with_prefix("controller_runtime")
            .register("reconcile", "help", metrics.reconciles.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(
                r#"controller_runtime_reconcile_total{controller="jinghzhu",result="success"} 2"#
            ),
            "{text}"
        );
    }
}
