//! Faults of the control plane, for the tests of `tests/faults.rs`: an
//! HTTP proxy between a host and kube-apiserver that can slow every request
//! down, answer chosen requests with an error status for a while or a
//! number of times (with the `Retry-After` it is told), end the
//! watches open now, refuse new watches, or leave the watches open now
//! silent (the connection stays open, nothing more arrives: a half-dead
//! connection behind a NAT or load balancer).
//!
//! The host talks plain HTTP to the proxy (a kubeconfig-free
//! [`kube::Config`] from [`ApiProxy::host_config`]); the proxy forwards
//! each request once (no retries of its own) through an admin
//! [`kube::Client`], so TLS and authentication to the API server are its
//! business, as with `kubectl proxy`. Every request is logged
//! ([`ApiProxy::seen`]) with its answer's status, so a test can count
//! creates, relists and retries.
//!
//! For the chaos soak (`tests/scale-bench`'s `soak`) it can also drop the
//! connections of chosen requests (no answer, before or after forwarding:
//! [`ApiProxy::drop_connections`]), end the watches open now with an error
//! mid-stream instead of cleanly ([`ApiProxy::truncate_watches`]), and it
//! logs the controller owner of each object a write carries
//! ([`Seen::owner_uid`]), so a write can be told apart by object.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Result;
use axum::body::{Body as AxumBody, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, Response, StatusCode};
use http_body::Frame;

/// One request the proxy handled.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When it arrived.
    pub at: Instant,
    /// `GET`, `POST`, …
    pub method: Method,
    /// The path, e.g. `/api/v1/namespaces/x/pods`.
    pub path: String,
    /// The query string (empty when none).
    pub query: String,
    /// The status answered (injected or the API server's).
    pub status: u16,
    /// Whether the proxy answered it itself (an injected failure).
    pub injected: bool,
    /// What the API server answered, when the request reached it (an
    /// injected failure after forwarding: [`Failure::after_forwarding`]).
    pub upstream_status: Option<u16>,
    /// The UID of the controller owner reference of the object in the
    /// request's JSON body (a pod create names its Jinghzhu), if any.
    pub owner_uid: Option<String>,
    /// The proxy dropped the connection instead of answering
    /// ([`ApiProxy::drop_connections`]; `status` is then 0).
    pub dropped: bool,
}

impl Seen {
    /// A watch request (`?watch=true`).
    pub fn is_watch(&self) -> bool {
        self.query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1")
    }

    /// A list (a GET of a collection that is not a watch) of `resource`
    /// (`pods`, `jinghzhus`).
    pub fn is_list_of(&self, resource: &str) -> bool {
        self.method == Method::GET
            && !self.is_watch()
            && self.path.ends_with(&format!("/{resource}"))
    }

    /// A create (POST) of `resource`.
    pub fn is_create_of(&self, resource: &str) -> bool {
        self.method == Method::POST && self.path.ends_with(&format!("/{resource}"))
    }
}

/// Which requests an injected failure answers.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The status to answer (429, 500, 503, …).
    pub status: u16,
    /// Only requests with this method (any when `None`).
    pub method: Option<Method>,
    /// Only paths ending with this (e.g. `/pods`).
    pub path_suffix: String,
    /// Until when.
    pub until: Instant,
    /// Forward the request first and answer `status` instead of the API
    /// server's answer: the write is made, the client is told it may not
    /// be (kube-apiserver's 504 when a request outlives its timeout).
    pub after_forwarding: bool,
    /// The `Retry-After` (seconds) an injected 429 or 503 carries (1 when
    /// `None`).
    pub retry_after_secs: Option<u64>,
    /// Answer at most this many requests, then forward again (no limit
    /// but `until` when `None`).
    pub times: Option<usize>,
}

impl Failure {
    /// `status` for every request with `method` to a path ending with
    /// `path_suffix`, for `period` from now, before forwarding, with a
    /// `Retry-After` of 1 s (change the fields for more).
    pub fn new(status: u16, method: Method, path_suffix: &str, period: Duration) -> Self {
        Self {
            status,
            method: Some(method),
            path_suffix: path_suffix.to_string(),
            until: Instant::now() + period,
            after_forwarding: false,
            retry_after_secs: None,
            times: None,
        }
    }
}

/// Which requests the proxy answers by dropping the connection: no status,
/// the client sees the connection end mid-answer (a reset, a load balancer
/// that went away).
#[derive(Debug, Clone)]
pub struct Dropped {
    /// Only requests with this method (any when `None`).
    pub method: Option<Method>,
    /// Only paths ending with this (e.g. `/pods`; empty: any).
    pub path_suffix: String,
    /// Until when.
    pub until: Instant,
    /// Forward the request first (the write is made, its answer lost).
    pub after_forwarding: bool,
}

#[derive(Debug, Default)]
struct Faults {
    latency: Duration,
    failure: Option<Failure>,
    dropped: Option<Dropped>,
    /// Requests the current failure answered.
    failed: usize,
    refuse_watches_until: Option<Instant>,
}

struct Shared {
    upstream: kube::Client,
    /// Requests (not watches) arrived and not yet answered.
    in_flight: AtomicU64,
    faults: Mutex<Faults>,
    seen: Mutex<Vec<Seen>>,
    /// Bumped to end every watch open now.
    cut: Arc<AtomicU64>,
    /// Bumped to silence every watch open now.
    silence: Arc<AtomicU64>,
    /// Bumped to end every watch open now with an error.
    truncate: Arc<AtomicU64>,
}

/// The proxy (stopped when dropped).
pub struct ApiProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl ApiProxy {
    /// Starts a proxy on a free loopback port that forwards to the API
    /// server `upstream` talks to (give it a client without retries: see
    /// [`ApiProxy::upstream_client`]).
    pub async fn start(upstream: kube::Client) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            in_flight: AtomicU64::new(0),
            faults: Mutex::new(Faults::default()),
            seen: Mutex::new(Vec::new()),
            cut: Arc::new(AtomicU64::new(0)),
            silence: Arc::new(AtomicU64::new(0)),
            truncate: Arc::new(AtomicU64::new(0)),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    /// An admin client for the proxy's side: the control plane's, sending
    /// each request once (kube's client retries 429/503/504 by default).
    pub async fn upstream_client(
        control_plane: &local_control_plane::ControlPlane,
    ) -> Result<kube::Client> {
        let mut config = control_plane.config().await?;
        config.default_retry = false;
        Ok(kube::Client::try_from(config)?)
    }

    /// A client configuration that reaches the API server through this proxy.
    pub fn host_config(&self, namespace: &str) -> Result<kube::Config> {
        let mut config = kube::Config::new(format!("http://{}", self.addr).parse()?);
        config.default_namespace = namespace.to_string();
        Ok(config)
    }

    /// Delays every request (watches included) by `latency` from now on.
    pub fn set_latency(&self, latency: Duration) {
        self.faults().latency = latency;
    }

    /// Answers requests matching `failure` with its status until its deadline.
    pub fn fail(&self, failure: Failure) {
        let mut faults = self.faults();
        faults.failure = Some(failure);
        faults.failed = 0;
    }

    /// Ends every watch open now (cleanly: a client resumes from its last
    /// resourceVersion).
    pub fn cut_watches(&self) {
        self.shared.cut.fetch_add(1, Ordering::SeqCst);
    }

    /// Ends every watch open now with an error mid-stream (the connection
    /// is aborted, not closed cleanly: a truncated chunked answer).
    pub fn truncate_watches(&self) {
        self.shared.truncate.fetch_add(1, Ordering::SeqCst);
    }

    /// Drops the connection of requests (not watches) matching `dropped`
    /// until its deadline, instead of answering them.
    pub fn drop_connections(&self, dropped: Dropped) {
        self.faults().dropped = Some(dropped);
    }

    /// Answers new watches with 503 for `period`.
    pub fn refuse_watches(&self, period: Duration) {
        self.faults().refuse_watches_until = Some(Instant::now() + period);
    }

    /// New watches are forwarded again.
    pub fn allow_watches(&self) {
        self.faults().refuse_watches_until = None;
    }

    /// The watches open now stop forwarding anything, for good, and stay
    /// open; new watches work.
    pub fn silence_watches(&self) {
        self.shared.silence.fetch_add(1, Ordering::SeqCst);
    }

    /// Requests other than watches that arrived and are not answered yet
    /// (e.g. held by [`ApiProxy::set_latency`]).
    pub fn in_flight(&self) -> u64 {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// Every request handled so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests since `since` for which `pick` holds.
    pub fn count_since(&self, since: Instant, pick: impl Fn(&Seen) -> bool) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.at >= since && pick(s))
            .count()
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.shared.faults.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A Kubernetes `Status` answer with `code` (a 429 or 503 says to retry
/// after `retry_after` seconds).
fn status_answer(code: u16, message: &str, retry_after: u64) -> Response<AxumBody> {
    let reason = match code {
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": { "retryAfterSeconds": retry_after },
        "code": code,
    });
    let mut answer = Response::new(AxumBody::from(body.to_string()));
    *answer.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    answer
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    if (code == 429 || code == 503)
        && let Ok(value) = HeaderValue::from_str(&retry_after.to_string())
    {
        answer.headers_mut().insert("retry-after", value);
    }
    answer
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response<AxumBody> {
    let at = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let (request, owner_uid) = match owner_of(request).await {
        Ok(read) => read,
        Err(answer) => return answer,
    };
    let mut seen = Seen {
        at,
        method: method.clone(),
        path: path.clone(),
        query,
        status: 0,
        injected: true,
        upstream_status: None,
        owner_uid,
        dropped: false,
    };
    let (latency, injected, dropped) = {
        let mut faults = shared.faults.lock().unwrap_or_else(|e| e.into_inner());
        let injected = if seen.is_watch() {
            faults
                .refuse_watches_until
                .filter(|until| at < *until)
                .map(|_| (503, false, 1))
        } else {
            let failed = faults.failed;
            faults
                .failure
                .as_ref()
                .filter(|f| {
                    at < f.until
                        && f.times.is_none_or(|times| failed < times)
                        && f.method.as_ref().is_none_or(|m| *m == method)
                        && path.ends_with(&f.path_suffix)
                })
                .map(|f| {
                    (
                        f.status,
                        f.after_forwarding,
                        f.retry_after_secs.unwrap_or(1),
                    )
                })
        };
        if injected.is_some() && !seen.is_watch() {
            faults.failed += 1;
        }
        let dropped = faults
            .dropped
            .as_ref()
            .filter(|d| {
                !seen.is_watch()
                    && at < d.until
                    && d.method.as_ref().is_none_or(|m| *m == method)
                    && path.ends_with(&d.path_suffix)
            })
            .map(|d| d.after_forwarding);
        (faults.latency, injected, dropped)
    };
    let _counted = (!seen.is_watch()).then(|| InFlight::count(&shared.in_flight));
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let answer = match (dropped, injected) {
        (Some(after_forwarding), _) => {
            if after_forwarding {
                let upstream = pass_on(&shared, request, false).await;
                seen.upstream_status = Some(upstream.status().as_u16());
            }
            seen.dropped = true;
            shared
                .seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(seen);
            return dropped_answer();
        }
        (None, Some((code, true, retry_after))) => {
            let upstream = pass_on(&shared, request, false).await;
            seen.upstream_status = Some(upstream.status().as_u16());
            status_answer(
                code,
                "injected by the test proxy after forwarding",
                retry_after,
            )
        }
        (None, Some((code, false, retry_after))) => {
            status_answer(code, "injected by the test proxy", retry_after)
        }
        (None, None) => {
            seen.injected = false;
            let watch = seen.is_watch();
            pass_on(&shared, request, watch).await
        }
    };
    seen.status = answer.status().as_u16();
    shared
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(seen);
    answer
}

/// Reads the body of a request that may carry an object (not a GET) and
/// returns the request rebuilt with it, and the UID of the object's
/// controller owner reference when the body is JSON and has one.
async fn owner_of(request: Request) -> Result<(Request, Option<String>), Response<AxumBody>> {
    if request.method() == Method::GET {
        return Ok((request, None));
    }
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .map_err(|err| status_answer(400, &format!("reading the request: {err}"), 1))?;
    let owner = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|object| {
            object["metadata"]["ownerReferences"]
                .as_array()?
                .iter()
                .find(|o| o["controller"] == serde_json::Value::Bool(true))
                .and_then(|o| o["uid"].as_str().map(str::to_owned))
        });
    Ok((Request::from_parts(parts, AxumBody::from(body)), owner))
}

/// An answer whose body fails at once: hyper aborts the connection, so the
/// client gets a status line and then a connection that ends mid-answer.
fn dropped_answer() -> Response<AxumBody> {
    let mut answer = Response::new(AxumBody::new(Aborted));
    answer
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    answer
}

/// A body that fails on its first poll.
struct Aborted;

impl http_body::Body for Aborted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection dropped by the test proxy",
        ))))
    }
}

/// Counts a request in flight until dropped (answered, or given up when
/// the client went away).
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn count(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The request to send the API server for one a proxy received: its
/// method, URI, headers (but those of the proxy's own connection and
/// credentials) and `body`.
pub fn upstream_request(
    parts: axum::http::request::Parts,
    body: &[u8],
) -> Result<axum::http::Request<kube::client::Body>, axum::http::Error> {
    let mut upstream = axum::http::Request::builder()
        .method(parts.method)
        .uri(parts.uri);
    for (name, value) in &parts.headers {
        if !matches!(
            name.as_str(),
            "host" | "authorization" | "connection" | "content-length" | "transfer-encoding"
        ) {
            upstream = upstream.header(name, value);
        }
    }
    upstream.body(kube::client::Body::from(body.to_vec()))
}

/// Sends `request` to the API server once and streams its answer back.
async fn pass_on(shared: &Shared, request: Request, watch: bool) -> Response<AxumBody> {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(body) => body,
        Err(err) => return status_answer(400, &format!("reading the request: {err}"), 1),
    };
    let upstream = match upstream_request(parts, &body) {
        Ok(request) => request,
        Err(err) => return status_answer(400, &format!("building the request: {err}"), 1),
    };
    let answer = match shared.upstream.send(upstream).await {
        Ok(answer) => answer,
        // What a proxy says when the server behind it is gone.
        Err(err) => {
            return status_answer(502, &format!("the API server is unreachable: {err}"), 1);
        }
    };
    let (mut parts, body) = answer.into_parts();
    parts.headers.remove("connection");
    parts.headers.remove("transfer-encoding");
    let body = if watch {
        parts.headers.remove("content-length");
        AxumBody::new(Watch {
            inner: body,
            cut: shared.cut.clone(),
            cut_at_open: shared.cut.load(Ordering::SeqCst),
            silence: shared.silence.clone(),
            silence_at_open: shared.silence.load(Ordering::SeqCst),
            truncate: shared.truncate.clone(),
            truncate_at_open: shared.truncate.load(Ordering::SeqCst),
            tick: Box::pin(tokio::time::sleep(TICK)),
        })
    } else {
        AxumBody::new(body)
    };
    Response::from_parts(parts, body)
}

/// How often a watch body looks at the proxy's switches while idle.
const TICK: Duration = Duration::from_millis(100);

/// A watch answer's body that ends when the watches are cut (with an error
/// when they are truncated) and stops
/// forwarding (for good) when they are silenced.
struct Watch {
    inner: kube::client::Body,
    cut: Arc<AtomicU64>,
    cut_at_open: u64,
    silence: Arc<AtomicU64>,
    silence_at_open: u64,
    truncate: Arc<AtomicU64>,
    truncate_at_open: u64,
    tick: Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for Watch {
    type Data = Bytes;
    type Error = kube::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, kube::Error>>> {
        if self.silence.load(Ordering::SeqCst) != self.silence_at_open {
            // Never wakes again: the connection stays open and says nothing.
            return Poll::Pending;
        }
        if self.cut.load(Ordering::SeqCst) != self.cut_at_open {
            return Poll::Ready(None);
        }
        if self.truncate.load(Ordering::SeqCst) != self.truncate_at_open {
            return Poll::Ready(Some(Err(kube::Error::ReadEvents(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "watch truncated by the test proxy",
            )))));
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        // Look at the switches again soon.
        while self.tick.as_mut().poll(cx).is_ready() {
            let next = tokio::time::Instant::now() + TICK;
            self.tick.as_mut().reset(next);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        false
    }
}
