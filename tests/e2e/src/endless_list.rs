//! A proxy between a host and kube-apiserver whose pod *lists* never end,
//! for the list bounds tests (`tests/list_bounds.rs`, issue 43 case 4):
//! every pod list (a `GET` of `…/pods` that is not a watch) is answered
//! with a fabricated page of fake pods carrying a `continue` token, a new
//! one each time ([`ListMode::Endless`]) or the same one again
//! ([`ListMode::RepeatedToken`]); everything else, watches included, is
//! forwarded to the API server. [`ListMode::Forward`] turns the lie off.
//!
//! It sits beside [`crate::faults::ApiProxy`] rather than inside it: the
//! chaos soak grows that one, and a list fault needs none of its switches.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use axum::body::Body as AxumBody;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, Response, StatusCode};

/// How pod lists are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMode {
    /// Forwarded to the API server.
    Forward,
    /// A page of `page` fake pods and a new `continue` token, every time.
    Endless {
        /// Pods a page.
        page: usize,
    },
    /// A page of `page` fake pods and the same `continue` token every time.
    RepeatedToken {
        /// Pods a page.
        page: usize,
    },
}

struct Shared {
    upstream: kube::Client,
    mode: Mutex<ListMode>,
    /// Fabricated pages served.
    pages: AtomicU64,
    /// Fabricated bytes served.
    bytes: AtomicU64,
    /// When each fabricated chain began (a list without `continue`).
    chains: Mutex<Vec<Instant>>,
}

/// The proxy (stopped when dropped).
pub struct EndlessLists {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl EndlessLists {
    /// Starts the proxy on a free loopback port, forwarding through
    /// `upstream` (see [`crate::faults::ApiProxy::upstream_client`]).
    pub async fn start(upstream: kube::Client, mode: ListMode) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            mode: Mutex::new(mode),
            pages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            chains: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    /// A client configuration that reaches the API server through this proxy.
    pub fn host_config(&self, namespace: &str) -> Result<kube::Config> {
        let mut config = kube::Config::new(format!("http://{}", self.addr).parse()?);
        config.default_namespace = namespace.to_string();
        Ok(config)
    }

    /// A kubeconfig file in `dir` that reaches the API server through this
    /// proxy (plain HTTP, no credentials: the proxy has its own), for a
    /// host run as a process of its own.
    pub fn kubeconfig(&self, dir: &std::path::Path, namespace: &str) -> Result<std::path::PathBuf> {
        let path = dir.join("endless-lists.kubeconfig");
        let server = format!("http://{}", self.addr);
        let text = [
            "apiVersion: v1",
            "kind: Config",
            "clusters:",
            "- name: proxy",
            "  cluster:",
            &format!("    server: {server}"),
            "users:",
            "- name: proxy",
            "  user: {}",
            "contexts:",
            "- name: proxy",
            "  context:",
            "    cluster: proxy",
            "    user: proxy",
            &format!("    namespace: {namespace}"),
            "current-context: proxy",
            "",
        ]
        .join("\n");
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Answers pod lists as `mode` says from now on.
    pub fn set_mode(&self, mode: ListMode) {
        *self.shared.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    /// Fabricated pages served so far.
    pub fn pages(&self) -> u64 {
        self.shared.pages.load(Ordering::SeqCst)
    }

    /// Fabricated bytes served so far.
    pub fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::SeqCst)
    }

    /// When each fabricated chain began.
    pub fn chains(&self) -> Vec<Instant> {
        self.shared
            .chains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for EndlessLists {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn is_pod_list(method: &Method, path: &str, query: &str) -> bool {
    method == Method::GET
        && path.ends_with("/pods")
        && !query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1")
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response<AxumBody> {
    let query = request.uri().query().unwrap_or_default().to_string();
    let mode = *shared.mode.lock().unwrap_or_else(|e| e.into_inner());
    let page = match mode {
        ListMode::Endless { page } | ListMode::RepeatedToken { page }
            if is_pod_list(request.method(), request.uri().path(), &query) =>
        {
            page
        }
        _ => return forward(&shared, request).await,
    };
    let number = shared.pages.fetch_add(1, Ordering::SeqCst);
    if !query.split('&').any(|p| p.starts_with("continue=")) {
        shared
            .chains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
    }
    let token = match mode {
        ListMode::RepeatedToken { .. } => "again".to_string(),
        _ => format!("endless-{number}"),
    };
    let body = fake_page(number, page, &token);
    shared.bytes.fetch_add(body.len() as u64, Ordering::SeqCst);
    let mut answer = Response::new(AxumBody::from(body));
    answer
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    answer
}

/// A `PodList` page of `count` fake pods (page `number`) with `token`.
fn fake_page(number: u64, count: usize, token: &str) -> String {
    let mut body = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"1","continue":"{token}"}},"items":["#
    );
    for i in 0..count {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(
            r#"{{"metadata":{{"name":"endless-{number}-{i}","namespace":"endless","uid":"00000000-0000-4000-8000-{number:06}{i:06}","resourceVersion":"1","creationTimestamp":"2026-11-23T23:00:00Z","labels":{{"app.kubernetes.io/managed-by":"wasm-operator","jinghzhu.io/owner":"endless-{number}"}},"ownerReferences":[{{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","name":"endless-{number}","uid":"10000000-0000-4000-8000-{number:012}","controller":true,"blockOwnerDeletion":true}}]}},"status":{{"phase":"Running","conditions":[{{"type":"Ready","status":"True","lastTransitionTime":"2026-11-23T23:00:01Z"}}]}}}}"#
        ));
    }
    body.push_str("]}");
    body
}

/// Sends `request` to the API server once and streams its answer back.
async fn forward(shared: &Shared, request: Request) -> Response<AxumBody> {
    let (parts, body) = request.into_parts();
    let failed = |code: StatusCode, message: String| {
        let mut answer = Response::new(AxumBody::from(message));
        *answer.status_mut() = code;
        answer
    };
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(body) => body,
        Err(err) => return failed(StatusCode::BAD_REQUEST, err.to_string()),
    };
    let upstream = match crate::faults::upstream_request(parts, &body) {
        Ok(request) => request,
        Err(err) => return failed(StatusCode::BAD_REQUEST, err.to_string()),
    };
    match shared.upstream.send(upstream).await {
        Ok(answer) => {
            let (mut parts, body) = answer.into_parts();
            parts.headers.remove("connection");
            parts.headers.remove("transfer-encoding");
            Response::from_parts(parts, AxumBody::new(body))
        }
        Err(err) => failed(StatusCode::BAD_GATEWAY, err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fake_page_is_a_pod_list() {
        let page: k8s_openapi::List<k8s_openapi::api::core::v1::Pod> =
            serde_json::from_str(&fake_page(7, 3, "t")).expect("a PodList");
        assert_eq!(page.items.len(), 3);
        assert_eq!(page.metadata.continue_.as_deref(), Some("t"));
        assert!(is_pod_list(
            &Method::GET,
            "/api/v1/namespaces/x/pods",
            "limit=500"
        ));
        assert!(!is_pod_list(
            &Method::GET,
            "/api/v1/namespaces/x/pods",
            "watch=true"
        ));
        assert!(!is_pod_list(
            &Method::GET,
            "/api/v1/namespaces/x/pods/p",
            ""
        ));
    }
}
