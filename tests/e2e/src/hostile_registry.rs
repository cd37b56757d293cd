//! A small hostile OCI registry on a loopback port (plain HTTP), for the
//! supply-chain containment tests (issue 40). In [`Mode::Good`] it serves
//! the Wasm artifacts pushed to it ([`HostileRegistry::push`]) as a real
//! registry would (CNCF layout, `Docker-Content-Digest`); in the other
//! modes every registry request is answered the way an attacker (or a
//! broken registry) would:
//!
//! - [`Mode::Drip`]: headers at once, then one byte of the body every so often;
//! - [`Mode::Hang`]: the connection is accepted and never answered;
//! - [`Mode::Endless`]: a manifest streamed without `Content-Length`, forever;
//! - [`Mode::GiantError`]: a 500 whose body starts with a forged log line,
//!   a newline and a terminal escape, then goes on for `bytes`;
//! - [`Mode::GiantToken`]: a Bearer challenge whose token endpoint answers
//!   an endless JSON string;
//! - [`Mode::RedirectInternal`]: a 302 to a plain-HTTP "internal" service
//!   on another loopback port, which answers a secret and counts requests.
//!
//! A `HEAD` of a manifest never carries a digest outside [`Mode::Good`], so
//! a client falls back to the `GET` the mode is about. Everything it sends
//! is generated on the fly: the registry itself stays small.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sha2::{Digest as _, Sha256};

/// What the registry does with each request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Serves what was pushed.
    Good,
    /// One byte of the body every `every` (headers at once).
    Drip {
        /// Between two bytes.
        every: Duration,
    },
    /// Never answers.
    Hang,
    /// Manifests: 200 with an endless body and no `Content-Length`.
    Endless,
    /// A 500 with a hostile body of `bytes` (no `Content-Length`).
    GiantError {
        /// The body's length.
        bytes: u64,
    },
    /// A 401 Bearer challenge; the token endpoint answers an endless JSON string.
    GiantToken,
    /// A 302 to the internal plain-HTTP service.
    RedirectInternal,
}

/// The start of every [`Mode::GiantError`] body: a forged host log line,
/// raw newlines and a colour escape.
pub const HOSTILE_TEXT: &str =
    "boom\nERROR wasm_operator: forged host line\n\x1b[31mred\x1b[0m\r\nmore";
/// What the internal service answers (it must never reach a status, an
/// Event or a log line).
pub const INTERNAL_SECRET: &str = "internal-secret-7f3a";

#[derive(Default)]
struct Repo {
    tags: HashMap<String, String>,
    manifests: HashMap<String, Bytes>,
    blobs: HashMap<String, Bytes>,
}

struct Shared {
    mode: Mutex<Mode>,
    repos: Mutex<HashMap<String, Repo>>,
    requests: AtomicU64,
    sent: AtomicU64,
    internal_requests: AtomicU64,
    addr: SocketAddr,
    internal: SocketAddr,
}

/// The running registry (stopped when dropped).
pub struct HostileRegistry {
    /// Where it listens (`127.0.0.1:PORT`, plain HTTP).
    pub addr: SocketAddr,
    /// The internal service it redirects to.
    pub internal: SocketAddr,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

impl HostileRegistry {
    /// Starts it (and its internal service) on free loopback ports.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let internal_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let (addr, internal) = (listener.local_addr()?, internal_listener.local_addr()?);
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Good),
            repos: Mutex::new(HashMap::new()),
            requests: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            internal_requests: AtomicU64::new(0),
            addr,
            internal,
        });
        let app = Router::new().fallback(registry).with_state(shared.clone());
        let secret = Router::new()
            .fallback(internal_service)
            .with_state(shared.clone());
        let tasks = vec![
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }),
            tokio::spawn(async move {
                let _ = axum::serve(internal_listener, secret).await;
            }),
        ];
        Ok(Self {
            addr,
            internal,
            shared,
            tasks,
        })
    }

    /// Switches what every later request gets.
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    /// Requests received so far (the token endpoint's included).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Body bytes sent so far in the hostile modes.
    pub fn hostile_bytes_sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// Requests the internal service received.
    pub fn internal_requests(&self) -> u64 {
        self.shared.internal_requests.load(Ordering::Relaxed)
    }

    /// `oci://ADDR/REPO:TAG`.
    pub fn reference(&self, repo: &str, tag: &str) -> String {
        format!("oci://{}/{repo}:{tag}", self.addr)
    }

    /// Pushes `wasm` as a CNCF Wasm artifact to `repo:tag`; returns the
    /// manifest digest.
    pub fn push(&self, repo: &str, tag: &str, wasm: &[u8]) -> String {
        let config = Bytes::from_static(b"{}");
        let layer = Bytes::copy_from_slice(wasm);
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.wasm.config.v0+json",
                "digest": sha256(&config),
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/wasm",
                "digest": sha256(&layer),
                "size": layer.len(),
            }],
        });
        let manifest = Bytes::from(serde_json::to_vec(&manifest).unwrap_or_default());
        let digest = sha256(&manifest);
        let mut repos = self.shared.repos.lock().unwrap_or_else(|e| e.into_inner());
        let entry = repos.entry(repo.to_string()).or_default();
        entry.blobs.insert(sha256(&config), config);
        entry.blobs.insert(sha256(&layer), layer);
        entry.manifests.insert(digest.clone(), manifest);
        entry.tags.insert(tag.to_string(), digest.clone());
        digest
    }
}

/// `/v2/<repo>/manifests/<ref>` or `/v2/<repo>/blobs/<digest>`, split.
fn route(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/v2/")?;
    for kind in ["/manifests/", "/blobs/"] {
        if let Some((repo, reference)) = rest.rsplit_once(kind) {
            return Some((repo, kind.trim_matches('/'), reference));
        }
    }
    None
}

async fn registry(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    shared.requests.fetch_add(1, Ordering::Relaxed);
    let mode = shared
        .mode
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let path = request.uri().path().to_string();
    let head = request.method() == Method::HEAD;
    if path == "/token" {
        return endless(&shared, br#"{"token":""#, b'a', u64::MAX, StatusCode::OK);
    }
    if path == "/v2/" || path == "/v2" {
        return StatusCode::OK.into_response();
    }
    if mode == Mode::Good {
        return good(&shared, &path, head);
    }
    let manifest = route(&path).is_some_and(|(_, kind, _)| kind == "manifests");
    if head && manifest && mode != Mode::Hang && mode != Mode::RedirectInternal {
        // No digest: the client must GET the manifest.
        return StatusCode::OK.into_response();
    }
    match mode {
        Mode::Good => StatusCode::OK.into_response(),
        Mode::Hang => std::future::pending().await,
        Mode::Drip { every } => drip(&shared, every),
        Mode::Endless => endless(
            &shared,
            b"{\"schemaVersion\":2,\"x\":\"",
            b'x',
            u64::MAX,
            StatusCode::OK,
        ),
        Mode::GiantError { bytes } => endless(
            &shared,
            HOSTILE_TEXT.as_bytes(),
            b'E',
            bytes,
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        Mode::GiantToken => {
            let challenge = format!(
                "Bearer realm=\"http://{}/token\",service=\"hostile\"",
                shared.addr
            );
            let mut response = StatusCode::UNAUTHORIZED.into_response();
            if let Ok(value) = HeaderValue::from_str(&challenge) {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
            response
        }
        Mode::RedirectInternal => {
            let mut response = StatusCode::FOUND.into_response();
            let to = format!("http://{}/secret", shared.internal);
            if let Ok(value) = HeaderValue::from_str(&to) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            response
        }
    }
}

/// What a well-behaved registry answers.
fn good(shared: &Shared, path: &str, head: bool) -> Response {
    let Some((repo, kind, reference)) = route(path) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let repos = shared.repos.lock().unwrap_or_else(|e| e.into_inner());
    let Some(repo) = repos.get(repo) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let (bytes, media_type, digest) = if kind == "manifests" {
        let digest = repo
            .tags
            .get(reference)
            .cloned()
            .unwrap_or_else(|| reference.to_string());
        match repo.manifests.get(&digest) {
            Some(bytes) => (
                bytes.clone(),
                "application/vnd.oci.image.manifest.v1+json",
                digest,
            ),
            None => return StatusCode::NOT_FOUND.into_response(),
        }
    } else {
        match repo.blobs.get(reference) {
            Some(bytes) => (
                bytes.clone(),
                "application/octet-stream",
                reference.to_string(),
            ),
            None => return StatusCode::NOT_FOUND.into_response(),
        }
    };
    let length = bytes.len();
    let mut response = if head {
        Response::new(Body::empty())
    } else {
        Response::new(Body::from(bytes))
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if let Ok(value) = HeaderValue::from_str(&digest) {
        headers.insert("docker-content-digest", value);
    }
    response
}

/// A body of `prefix` then `fill` up to `total` bytes, in 64 KiB chunks,
/// without `Content-Length`.
fn endless(
    shared: &Arc<Shared>,
    prefix: &[u8],
    fill: u8,
    total: u64,
    status: StatusCode,
) -> Response {
    const CHUNK: usize = 64 * 1024;
    let shared = shared.clone();
    let filler = Bytes::from(vec![fill; CHUNK]);
    let first = Bytes::copy_from_slice(prefix);
    let stream = futures::stream::unfold(0u64, move |sent| {
        let (shared, filler, first) = (shared.clone(), filler.clone(), first.clone());
        async move {
            if sent >= total {
                return None;
            }
            let chunk = if sent == 0 { first } else { filler };
            let left = usize::try_from(total - sent).unwrap_or(usize::MAX);
            let chunk = chunk.slice(..chunk.len().min(left));
            shared.sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            let next = sent + chunk.len() as u64;
            Some((Ok::<_, std::io::Error>(chunk), next))
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    response
}

/// A manifest-looking body, one byte every `every`.
fn drip(shared: &Arc<Shared>, every: Duration) -> Response {
    let shared = shared.clone();
    let stream = futures::stream::unfold((), move |()| {
        let shared = shared.clone();
        async move {
            tokio::time::sleep(every).await;
            shared.sent.fetch_add(1, Ordering::Relaxed);
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b" ")), ()))
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json"),
    );
    response
}

async fn internal_service(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    shared.internal_requests.fetch_add(1, Ordering::Relaxed);
    (StatusCode::OK, format!("{INTERNAL_SECRET}\n"))
}
