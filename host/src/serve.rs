//! The host's HTTP endpoint: `/metrics` (OpenMetrics text), `/status` (JSON:
//! the active plugin, its predecessor's fate, the last swap and refusal,
//! leadership, this replica's shards when sharded, the bound address), and
//! the kubelet's probes:
//!
//! - `/healthz` (liveness): the controller loop is alive — it beats a
//!   [`Health`] heartbeat every second from the task that drives the
//!   controller, so a loop that stopped or a starved runtime fails the probe
//!   after [`HEARTBEAT_STALE`](crate::telemetry::health::HEARTBEAT_STALE);
//! - `/readyz` (readiness): both caches (Jinghzhus, pods) have had their
//!   initial list and a vetted plugin serves. A standby is ready too: it
//!   watches, caches and can take over at once. A host whose plugin was
//!   refused at start is up (live) but unready, `/readyz` and `/status`
//!   (`notServing`) say why, until its source delivers a good plugin.
//!
//! A host of declared controllers only ([`spawn_declared`]) serves the same
//! paths: `/readyz` once the `PluginController` watch has had its initial
//! list (or while it stands by for the leader), `/healthz` on the runtime's
//! heartbeat, `/status` its leadership.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::delivery::swapper::SwapHistory;
use crate::leader::Leadership;
use crate::shards::Shards;
use crate::slot::ActivePlugin;
use crate::telemetry::health::Health;
use crate::telemetry::metrics::Metrics;

/// Identity and Lease of an elected host, for `/status`.
#[derive(Debug, Clone)]
pub struct LeaderInfo {
    /// This host's identity in the Lease.
    pub identity: String,
    /// `namespace/name` of the Lease.
    pub lease: String,
}

/// What the endpoint serves.
pub struct Endpoint {
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// The plugin slot.
    pub active: Arc<ActivePlugin>,
    /// The last swap and refusal.
    pub history: Arc<Mutex<SwapHistory>>,
    /// Probe state.
    pub health: Arc<Health>,
    /// This host's leadership.
    pub leadership: Leadership,
    /// Set with `--leader-elect`.
    pub leader: Option<LeaderInfo>,
    /// Set with `--shards`: its metrics are served too.
    pub shards: Option<Shards>,
}

/// What the endpoint of a host of declared controllers only serves.
pub struct DeclaredEndpoint {
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// Probe state: its caches are the `PluginController` watch's.
    pub health: Arc<Health>,
    /// This host's leadership.
    pub leadership: Leadership,
    /// Set with `--leader-elect`.
    pub leader: Option<LeaderInfo>,
    /// Set with `--shards`: its metrics and `/status` are served too.
    pub shards: Option<Shards>,
}

/// The Jinghzhu plugin's slot and history (none: declared controllers only).
#[derive(Clone)]
struct PluginState {
    active: Arc<ActivePlugin>,
    history: Arc<Mutex<SwapHistory>>,
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    plugin: Option<PluginState>,
    health: Arc<Health>,
    leadership: Leadership,
    leader: Option<LeaderInfo>,
    shards: Option<Shards>,
    bound: SocketAddr,
}

/// Binds `addr` and serves in the background. Returns the bound address
/// (with port 0, the port the system chose).
pub async fn spawn(addr: SocketAddr, endpoint: Endpoint) -> anyhow::Result<SocketAddr> {
    let mut registry = Registry::default();
    endpoint.metrics.register(&mut registry);
    if let Some(shards) = &endpoint.shards {
        shards.metrics().register(&mut registry);
    }
    let listener = bind(addr).await?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("reading the address bound for {addr}"))?;
    let state = AppState {
        registry: Arc::new(registry),
        plugin: Some(PluginState {
            active: endpoint.active,
            history: endpoint.history,
        }),
        health: endpoint.health,
        leadership: endpoint.leadership,
        leader: endpoint.leader,
        shards: endpoint.shards,
        bound,
    };
    serve(listener, state);
    Ok(bound)
}

/// [`spawn`] for a host of declared controllers only.
pub async fn spawn_declared(
    addr: SocketAddr,
    endpoint: DeclaredEndpoint,
) -> anyhow::Result<SocketAddr> {
    let mut registry = Registry::default();
    endpoint.metrics.register(&mut registry);
    if let Some(shards) = &endpoint.shards {
        shards.metrics().register(&mut registry);
    }
    let listener = bind(addr).await?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("reading the address bound for {addr}"))?;
    serve(
        listener,
        AppState {
            registry: Arc::new(registry),
            plugin: None,
            health: endpoint.health,
            leadership: endpoint.leadership,
            leader: endpoint.leader,
            shards: endpoint.shards,
            bound,
        },
    );
    Ok(bound)
}

async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("binding the metrics address {addr} (change it with --metrics-addr)")
    })
}

/// Serves the routes on `listener` in the background.
fn serve(listener: tokio::net::TcpListener, state: AppState) {
    let bound = state.bound;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/status", get(status))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state);
    tracing::info!(addr = %bound, "serving /metrics, /status, /healthz and /readyz");
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!(error = %err, "metrics server stopped");
        }
    });
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

/// Checks in the kube-apiserver's `[+]name ok` / `[-]name failed: why` style.
fn report(checks: &[(&str, Result<(), String>)], probe: &str) -> (StatusCode, String) {
    let mut body = String::new();
    let mut ok = true;
    for (name, result) in checks {
        match result {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(why) => {
                ok = false;
                body.push_str(&format!("[-]{name} failed: {why}\n"));
            }
        }
    }
    if ok {
        body.push_str(&format!("{probe} check passed\n"));
        (StatusCode::OK, body)
    } else {
        body.push_str(&format!("{probe} check failed\n"));
        (StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let since = state.health.since_last_beat();
    let loop_check = if state.health.alive() {
        Ok(())
    } else {
        Err(format!(
            "no heartbeat from the controller loop for {since:?}"
        ))
    };
    report(&[("controller-loop", loop_check)], "healthz")
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let Some(plugin) = &state.plugin else {
        return report(
            &[("plugin-controllers-synced", declared_check(&state))],
            "readyz",
        );
    };
    let caches = if state.health.caches_synced() {
        Ok(())
    } else {
        Err("the Jinghzhu and pod caches have not had their initial list yet".to_string())
    };
    let plugin_check = plugin_check(plugin);
    report(
        &[("caches-synced", caches), ("plugin-loaded", plugin_check)],
        "readyz",
    )
}

/// Declared controllers only: the `PluginController` watch has had its
/// initial list, or this replica stands by (the leader runs them).
fn declared_check(state: &AppState) -> Result<(), String> {
    if state.health.caches_synced() || !state.leadership.is_leading() {
        Ok(())
    } else {
        Err("the PluginController watch has not had its initial list yet".to_string())
    }
}

/// Whether a vetted plugin serves, and if not, why.
fn plugin_check(state: &PluginState) -> Result<(), String> {
    if state.active.serving().is_some() {
        return Ok(());
    }
    let why = state
        .history
        .lock()
        .ok()
        .and_then(|h| h.not_serving.clone())
        .unwrap_or_else(|| "no plugin loaded".to_string());
    // One line per check: the reason may quote a loader's message.
    Err(why.replace(['\n', '\r'], " "))
}

async fn status(State(state): State<AppState>) -> impl IntoResponse {
    let leader_election = state.leader.as_ref().map(|info| {
        serde_json::json!({
            "identity": info.identity,
            "lease": info.lease,
            "leading": state.leadership.is_leading(),
        })
    });
    let Some(slot) = &state.plugin else {
        return axum::Json(serde_json::json!({
            "plugin": null,
            "pluginControllers": true,
            "contractsSupported": crate::runtime::ContractVersion::ALL.map(|v| v.as_str()),
            "metricsAddr": state.bound.to_string(),
            "ready": declared_check(&state).is_ok(),
            "leaderElection": leader_election,
            "shards": state.shards.as_ref().map(shard_status),
        }));
    };
    let history = slot.history.lock().map(|h| h.clone()).unwrap_or_default();
    let plugin = slot.active.serving().map(|plugin| {
        serde_json::json!({
            "name": plugin.info().name,
            "version": plugin.info().version,
            "contract": plugin.contract().as_str(),
            "digest": plugin.digest(),
            "source": plugin.source(),
            "loadedAtUnix": plugin.loaded_at_unix(),
        })
    });
    let shadow = slot.active.shadow().map(|shadow| {
        serde_json::json!({
            "name": shadow.info().name,
            "version": shadow.info().version,
            "digest": shadow.digest(),
            "source": shadow.source(),
        })
    });
    let serving = plugin.is_some();
    let not_serving = if serving {
        None
    } else {
        history.not_serving.clone()
    };
    axum::Json(serde_json::json!({
        "plugin": plugin,
        "contractsSupported": crate::runtime::ContractVersion::ALL.map(|v| v.as_str()),
        "notServing": not_serving,
        "shadow": shadow,
        "shadowRefusal": history.shadow_refusal,
        "swaps": slot.active.swaps_so_far(),
        "lastSwap": history.last_swap,
        "lastRefusal": history.last_refusal,
        "swapsCoalesced": history.swaps_coalesced,
        "lastCoalesced": history.last_coalesced,
        "flapping": history.flapping,
        "metricsAddr": state.bound.to_string(),
        "ready": state.health.caches_synced() && serving,
        "leaderElection": leader_election,
        "shards": state.shards.as_ref().map(shard_status),
    }))
}

/// `/status`'s `shards`: the count, this replica's identity, the shards it
/// holds (number, phase, Lease, running reconciles) and the live replicas.
fn shard_status(shards: &Shards) -> serde_json::Value {
    let (held, members) = shards.status();
    serde_json::json!({
        "count": shards.count(),
        "identity": shards.identity(),
        "owned": held.iter().filter(|h| h.phase == crate::shards::Phase::Active).map(|h| h.shard).collect::<Vec<_>>(),
        "held": held,
        "members": members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared_state(leadership: Leadership) -> AppState {
        AppState {
            registry: Arc::new(Registry::default()),
            plugin: None,
            health: Arc::new(Health::default()),
            leadership,
            leader: None,
            shards: None,
            bound: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    #[tokio::test]
    async fn declared_only_readiness_waits_for_the_plugin_controller_list() {
        let state = declared_state(Leadership::always());
        let before = readyz(State(state.clone())).await.into_response();
        assert_eq!(before.status(), StatusCode::SERVICE_UNAVAILABLE);
        state.health.set_caches_synced();
        let after = readyz(State(state)).await.into_response();
        assert_eq!(after.status(), StatusCode::OK);
        // A standby is ready at once: the leader runs the controllers.
        let standby = declared_state(Leadership::elected());
        assert!(declared_check(&standby).is_ok());
    }
}
