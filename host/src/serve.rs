//! The host's HTTP endpoint: `/metrics` (Prometheus text format),
//! `/status` (JSON: the active plugin, its predecessor's fate, the last swap
//! and refusal) and `/healthz`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::controller::metrics::Metrics;
use crate::hotswap::ActivePlugin;
use crate::hotswap::swapper::SwapHistory;

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    active: Arc<ActivePlugin>,
    history: Arc<Mutex<SwapHistory>>,
}

/// Binds `addr` and serves in the background.
pub async fn spawn(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    active: Arc<ActivePlugin>,
    history: Arc<Mutex<SwapHistory>>,
) -> anyhow::Result<()> {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let state = AppState {
        registry: Arc::new(registry),
        active,
        history,
    };
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/status", get(status))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("binding the metrics address {addr} (change it with --metrics-addr)")
    })?;
    tracing::info!(%addr, "serving /metrics, /status and /healthz");
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!(error = %err, "metrics server stopped");
        }
    });
    Ok(())
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            err.to_string(),
        ),
    }
}

async fn status(State(state): State<AppState>) -> impl IntoResponse {
    let plugin = state.active.current();
    let history = state.history.lock().map(|h| h.clone()).unwrap_or_default();
    axum::Json(serde_json::json!({
        "plugin": {
            "name": plugin.info().name,
            "version": plugin.info().version,
            "digest": plugin.digest(),
            "source": plugin.source(),
            "loadedAtUnix": plugin.loaded_at_unix(),
        },
        "swaps": state.active.generation(),
        "lastSwap": history.last_swap,
        "lastRefusal": history.last_refusal,
    }))
}
