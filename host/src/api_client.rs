//! The host's Kubernetes client: how long it waits for an answer and which
//! failed answers it sends again by itself.
//!
//! kube's client, left to its defaults, repeats any request answered 429,
//! 503 or 504, up to 15 times. A 504 from kube-apiserver means "the request
//! did not complete within the timeout": the write may still be made. For a
//! create that is the one answer that must not be repeated: the pods a
//! plugin proposes usually carry `generateName`, so each repeat of a create
//! that was in fact made is another pod (the object then has a surplus to
//! delete, and a pod that never should have run). [`build`] keeps kube's
//! retries (same backoff, same honouring of `Retry-After`) except that a
//! `POST` answered 504 is handed back as it is; the apply layer counts it
//! as *maybe sent* and waits for the watch to show the pod (see
//! `docs/operating.md`, "When the control plane misbehaves"). client-go
//! does not repeat such a create either (it repeats only answers that carry
//! `Retry-After`). 429 and 503 answers say the request was not handled, so
//! they are repeated for every method.

use std::time::Duration;

use anyhow::{Context, Result};
use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use tower::BoxError;
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};

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

/// The client the host talks to the API server with: `config` (with
/// [`with_read_timeout`]) and kube's retries, except that a create answered
/// 504 is not sent again ([`NoRepeatedCreates`]).
pub fn build(config: kube::Config) -> Result<Client> {
    let mut config = with_read_timeout(config);
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config).context("building the Kubernetes client")?;
    // A retry sends a request again through the same service, so it needs a
    // clonable one: a buffer in front of kube's stack (as kube's `Client`
    // has in front of the whole). Must run inside the tokio runtime.
    Ok(builder
        .with_layer(&BufferLayer::new(BUFFERED_REQUESTS))
        .with_layer(&RetryLayer::new(NoRepeatedCreates::default()))
        .build())
}

/// kube's [`RetryPolicy::server_retry`] (429, 503 and 504 answers, 5 ms
/// doubling to 1000 s, at most 15 repeats, `Retry-After` honoured) that
/// leaves a `POST` answered 504 to the caller.
#[derive(Clone)]
pub struct NoRepeatedCreates {
    inner: RetryPolicy,
}

impl Default for NoRepeatedCreates {
    fn default() -> Self {
        Self {
            inner: RetryPolicy::server_retry(),
        }
    }
}

/// Whether a request answered `status` may have been carried out and must
/// not be sent again: a create (`POST`) that timed out on the server.
pub fn may_be_made_already(method: &Method, status: StatusCode) -> bool {
    method == Method::POST && status == StatusCode::GATEWAY_TIMEOUT
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for NoRepeatedCreates {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if let Ok(answer) = result
            && may_be_made_already(request.method(), answer.status())
        {
            return None;
        }
        self.inner.retry(request, result)
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
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
    use kube::api::PostParams;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on a loopback port that answers every request 504 (as
    /// kube-apiserver does when a request outlives its timeout) and counts
    /// the requests.
    async fn always_timing_out() -> (String, Arc<AtomicUsize>) {
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
                let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Timeout: request did not complete within requested timeout","reason":"Timeout","code":504}"#;
                let answer = format!(
                    "HTTP/1.1 504 Gateway Timeout\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, requests)
    }

    fn pods(url: &str) -> Api<Pod> {
        let config = kube::Config::new(url.parse().expect("url"));
        Api::namespaced(build(config).expect("client"), "ns")
    }

    #[tokio::test]
    async fn a_create_answered_504_is_sent_once() {
        let (url, requests) = always_timing_out().await;
        // Repeats would come within 1 s (5 ms doubling).
        let outcome = tokio::time::timeout(
            Duration::from_secs(2),
            pods(&url).create(&PostParams::default(), &Pod::default()),
        )
        .await;
        assert_eq!(
            requests.load(Ordering::SeqCst),
            1,
            "the create was repeated"
        );
        let err = outcome
            .expect("answered at once")
            .expect_err("the server only times out");
        assert!(
            matches!(&err, kube::Error::Api(status) if status.code == 504),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_read_answered_504_is_repeated() {
        let (url, requests) = always_timing_out().await;
        // kube's backoff starts at 5 ms and doubles: several tries fit in 1 s.
        let _ = tokio::time::timeout(Duration::from_secs(1), pods(&url).get("p")).await;
        assert!(
            requests.load(Ordering::SeqCst) >= 3,
            "only {} tries",
            requests.load(Ordering::SeqCst)
        );
    }

    #[test]
    fn only_a_create_that_timed_out_is_left_alone() {
        assert!(may_be_made_already(
            &Method::POST,
            StatusCode::GATEWAY_TIMEOUT
        ));
        for status in [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
        ] {
            assert!(!may_be_made_already(&Method::POST, status), "{status}");
        }
        for method in [Method::GET, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(
                !may_be_made_already(&method, StatusCode::GATEWAY_TIMEOUT),
                "{method}"
            );
        }
    }
}
