//! The host's Kubernetes client: how long it waits for an answer and which
//! failed answers it sends again by itself.
//!
//! kube's client, left to its defaults, repeats any request answered 429,
//! 503 or 504, up to 15 times, and waits as long as `Retry-After` says.
//! Both are wrong for a controller's writes:
//!
//! - **A repeated create may be a second pod.** A 504 ("did not complete
//!   within the timeout"), a 503 from a proxy or load balancer whose
//!   upstream went away mid-request, a 5xx after the handler ran: the
//!   write may have been made. The pods a plugin proposes usually carry
//!   `generateName`, so each repeat of a create that was in fact made is
//!   another pod (measured through a proxy answering 503 after forwarding
//!   for 3 s: 52 creates made for 20 needed).
//! - **A write parked on `Retry-After` parks a worker.** A 429 with
//!   `Retry-After: 86400` held a reconcile (and shutdown) for a day.
//!
//! So [`build`] repeats only reads ([`repeated_by_the_client`]: `GET`,
//! `HEAD`; lists and watches are `GET`s): answers 429, 503 and 504, kube's
//! backoff (5 ms doubling, at most 15 repeats) and its honouring of
//! `Retry-After`, but no wait longer than [`MAX_RETRY_WAIT`]. Every write
//! (`POST`, `PUT`, `PATCH`, `DELETE`) goes out once and its answer, whatever
//! it is, goes back to the caller: the apply layer classifies it
//! ([`crate::apply::classify`]: a 503 or a timeout is *maybe sent*, the
//! object waits for the watch to show the pod; a 429 or another error
//! answer is *answered*, the object is requeued with its per-object
//! backoff), and the Lease loops try again on their own schedule.
//!
//! Some writes would be safe to repeat: a `DELETE` with a UID precondition
//! (a repeat gets 404 or 409, never another pod's deletion) and a status
//! `PATCH` (the same status again, guarded by a resourceVersion) are
//! idempotent. They are not repeated here either, so that no write ever
//! waits inside the client: the reconcile fails at once and comes back
//! through the controller's backoff, reading the cache afresh. Errors with
//! no answer (a connect failure, a reset, a read timeout) are never
//! repeated by the client, for any method (kube's policy looks at answers
//! only). See `docs/faults.md`, "When the control plane misbehaves".

use std::time::Duration;

use anyhow::{Context, Result};
use http::{Method, Request, Response};
use kube::Client;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use tower::BoxError;
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};

use crate::kube_api::list_bounds::ListBounds;
use crate::kube_api::list_bounds::filter::PodFilterLayer;
use crate::kube_api::list_bounds::layer::ListBoundsLayer;

/// Requests queued for the client's connection pool (kube's own buffer
/// holds as many).
const BUFFERED_REQUESTS: usize = 1024;

/// How long the host's client waits for the next bytes of an answer
/// before it gives the connection up. A watch that has gone silent (a
/// half-dead connection behind a NAT or load balancer) is noticed after
/// this and resumed on a new connection; kube's watcher alone notices only
/// after its 295 s idle timeout. A healthy watch hears at least a bookmark
/// about every minute, and the API server ends any request after 60 s.
pub const API_READ_TIMEOUT: Duration = Duration::from_secs(120);

/// `config` with [`API_READ_TIMEOUT`] unless it sets a read timeout itself,
/// counted from when a request was written (not from when its pooled
/// connection went idle).
pub fn with_read_timeout(mut config: kube::Config) -> kube::Config {
    if config.read_timeout.is_none() {
        config.read_timeout = Some(API_READ_TIMEOUT);
        config.reset_reader_on_write = true;
    }
    config
}

/// The longest the client waits before repeating a read, whatever
/// `Retry-After` says (kube's backoff alone grows to 1000 s). A write is
/// never repeated, so never waits ([`repeated_by_the_client`]).
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

/// The client the host talks to the API server with: `config` (with
/// [`with_read_timeout`]) and [`ReadRetries`] with [`MAX_RETRY_WAIT`].
pub fn build(config: kube::Config) -> Result<Client> {
    build_with_max_wait(config, MAX_RETRY_WAIT)
}

/// [`build`] with another cap on the wait before a repeated read.
pub fn build_with_max_wait(config: kube::Config, max_wait: Duration) -> Result<Client> {
    build_bounded(config, max_wait, ListBounds::default())
}

// ---- List bounds (issue 43; see `crate::kube_api::list_bounds`) ----

/// [`build_with_max_wait`] with its lists bounded by `lists` (pages, bytes
/// and repeated `continue` tokens, by a layer outside the retries: a read
/// the client repeats is one page), and its pod lists and watches filtered
/// by `lists.pods` (a layer inside that one, so only the pods it keeps are
/// counted; see [`crate::kube_api::list_bounds::pods`]).
pub fn build_bounded(
    config: kube::Config,
    max_wait: Duration,
    lists: ListBounds,
) -> Result<Client> {
    let mut config = with_read_timeout(config);
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config).context("building the Kubernetes client")?;
    // A retry sends a request again through the same service, so it needs a
    // clonable one: a buffer in front of kube's stack (as kube's `Client`
    // has in front of the whole). Must run inside the tokio runtime.
    Ok(builder
        .with_layer(&BufferLayer::new(BUFFERED_REQUESTS))
        .with_layer(&RetryLayer::new(ReadRetries::new(max_wait)))
        .with_layer(&PodFilterLayer::new(lists.pods.clone()))
        .with_layer(&ListBoundsLayer::new(lists))
        .build())
}

// ---- end of list bounds ----

/// kube's [`RetryPolicy::server_retry`] (429, 503 and 504 answers, 5 ms
/// doubling, at most 15 repeats, `Retry-After` honoured) for reads only,
/// each wait cut to `max_wait`. Writes are handed back as answered.
#[derive(Clone)]
pub struct ReadRetries {
    inner: RetryPolicy,
    max_wait: Duration,
}

impl ReadRetries {
    /// Repeats reads, waiting at most `max_wait` before each repeat.
    pub fn new(max_wait: Duration) -> Self {
        Self {
            inner: RetryPolicy::server_retry(),
            max_wait,
        }
    }
}

impl Default for ReadRetries {
    /// Waits at most [`MAX_RETRY_WAIT`].
    fn default() -> Self {
        Self::new(MAX_RETRY_WAIT)
    }
}

/// Whether the client itself may send a request with `method` again: only
/// reads (`GET`, which lists and watches are too, and `HEAD`). Every write
/// goes out once; see the module documentation for why.
pub fn repeated_by_the_client(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for ReadRetries {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if !repeated_by_the_client(request.method()) {
            return None;
        }
        let wait = self.inner.retry(request, result)?;
        let latest = tokio::time::Instant::now() + self.max_wait;
        Some(tokio::time::sleep_until(wait.deadline().min(latest)))
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        if !repeated_by_the_client(request.method()) {
            // Never sent again: no need to keep a copy of its body.
            return None;
        }
        <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::clone_request(
            &mut self.inner,
            request,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on a loopback port that answers every request with the
    /// status `code` (a Kubernetes `Status` body) and `headers` (each
    /// `name: value`), and counts the requests.
    async fn always_answering(code: u16, headers: &'static str) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                counted.fetch_add(1, Ordering::SeqCst);
                let body = format!(
                    r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","reason":"","code":{code}}}"#
                );
                let answer = format!(
                    "HTTP/1.1 {code} Injected\r\ncontent-type: application/json\r\n{headers}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, requests)
    }

    /// A server that answers every request 504 (as kube-apiserver does when
    /// a request outlives its timeout) and counts the requests.
    async fn always_timing_out() -> (String, Arc<AtomicUsize>) {
        always_answering(504, "").await
    }

    /// A server that answers every request 429 and says to come back in a day.
    async fn come_back_tomorrow() -> (String, Arc<AtomicUsize>) {
        always_answering(429, "retry-after: 86400\r\n").await
    }

    fn pods_with_max_wait(url: &str, max_wait: Duration) -> Api<Pod> {
        let config = kube::Config::new(url.parse().expect("url"));
        Api::namespaced(build_with_max_wait(config, max_wait).expect("client"), "ns")
    }

    fn pods(url: &str) -> Api<Pod> {
        pods_with_max_wait(url, MAX_RETRY_WAIT)
    }

    /// Sends one create to `url` and returns the error and how long it took.
    async fn create_at(url: &str) -> (kube::Error, Duration) {
        let started = Instant::now();
        // Repeats would come within 1 s (5 ms doubling) or after Retry-After.
        let outcome = tokio::time::timeout(
            Duration::from_secs(2),
            pods(url).create(&PostParams::default(), &Pod::default()),
        )
        .await;
        let err = outcome
            .expect("answered at once")
            .expect_err("the server only fails");
        (err, started.elapsed())
    }

    fn code_of(err: &kube::Error) -> Option<u16> {
        match err {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_create_answered_504_or_503_is_sent_once() {
        for (status, (url, requests)) in [
            (504, always_timing_out().await),
            (503, always_answering(503, "retry-after: 1\r\n").await),
        ] {
            let (err, _) = create_at(&url).await;
            assert_eq!(
                requests.load(Ordering::SeqCst),
                1,
                "the create answered {status} was repeated"
            );
            assert_eq!(code_of(&err), Some(status), "{err}");
        }
    }

    #[tokio::test]
    async fn a_create_told_to_come_back_tomorrow_returns_at_once() {
        let (url, requests) = come_back_tomorrow().await;
        let (err, took) = create_at(&url).await;
        assert_eq!(
            requests.load(Ordering::SeqCst),
            1,
            "the create was repeated"
        );
        assert_eq!(code_of(&err), Some(429), "{err}");
        // A repeat would have waited MAX_RETRY_WAIT (30 s) first; 5 s leaves
        // room for a loaded machine without letting one through.
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }

    #[tokio::test]
    async fn no_write_is_repeated() {
        let (url, requests) = always_answering(503, "").await;
        let api = pods(&url);
        let patch = serde_json::json!({ "status": {} });
        // Repeats would come within 1 s (5 ms doubling).
        let writes = async {
            let _ = api
                .patch_status("p", &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            let _ = api.delete("p", &DeleteParams::default()).await;
            let _ = api
                .replace("p", &PostParams::default(), &Pod::default())
                .await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), writes).await;
        assert_eq!(requests.load(Ordering::SeqCst), 3, "a write was repeated");
    }

    #[tokio::test]
    async fn a_read_answered_504_or_503_is_repeated() {
        for (status, (url, requests)) in [
            (504, always_timing_out().await),
            (503, always_answering(503, "").await),
        ] {
            // kube's backoff starts at 5 ms and doubles: several tries fit in 1 s.
            let _ = tokio::time::timeout(Duration::from_secs(1), pods(&url).get("p")).await;
            assert!(
                requests.load(Ordering::SeqCst) >= 3,
                "a read answered {status}: only {} tries",
                requests.load(Ordering::SeqCst)
            );
        }
    }

    #[tokio::test]
    async fn a_read_told_to_come_back_tomorrow_waits_only_the_cap() {
        let (url, requests) = come_back_tomorrow().await;
        let max_wait = Duration::from_millis(200);
        let _ = tokio::time::timeout(
            Duration::from_millis(1500),
            pods_with_max_wait(&url, max_wait).get("p"),
        )
        .await;
        // Honoured uncapped, Retry-After would allow one try in 1.5 s; at
        // most 200 ms apart, about seven.
        let tries = requests.load(Ordering::SeqCst);
        assert!(
            tries >= 4,
            "only {tries} tries in 1.5 s: Retry-After not capped"
        );
    }

    #[test]
    fn only_reads_are_repeated_by_the_client() {
        for method in [Method::GET, Method::HEAD] {
            assert!(repeated_by_the_client(&method), "{method}");
        }
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(!repeated_by_the_client(&method), "{method}");
        }
    }
}
