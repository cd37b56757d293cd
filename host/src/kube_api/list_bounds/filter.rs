//! The client's side of [`super::pods`]: a tower layer, inside the list
//! bounds' layer (so the bounds count only the bytes it hands on), that
//! runs the body of every pod list and watch answer (a `GET` of a pods
//! collection, any namespace, any selector) through the [`Scanner`] with
//! a [`PodJudge`]. A pod is read one at a time and at most
//! `--pod-max-kib` of it is ever held; the body kube reads holds the kept
//! pods only, cut to what the cache keeps.
//!
//! Answers that are not a success, or not JSON, are passed on as they
//! came (an error's `Status` body, a single pod's `GET`). A body the
//! scanner cannot walk fails the read, as kube's own decoding would.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{Method, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use tower::{BoxError, Layer, Service};

use super::layer::collection;
use super::pods::{PodJudge, PodRules};
use super::scan::{Scanner, Shape};

/// Puts [`PodFilter`] around a client's service.
#[derive(Debug, Clone)]
pub struct PodFilterLayer {
    rules: PodRules,
}

impl PodFilterLayer {
    /// A layer applying `rules` (nothing is filtered unless `rules.filter`).
    pub fn new(rules: PodRules) -> Self {
        Self { rules }
    }
}

impl<S> Layer<S> for PodFilterLayer {
    type Service = PodFilter<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PodFilter {
            inner,
            rules: self.rules.clone(),
        }
    }
}

/// The service [`PodFilterLayer`] makes.
#[derive(Debug, Clone)]
pub struct PodFilter<S> {
    inner: S,
    rules: PodRules,
}

/// The shape of the answer to a pod list (`List`) or watch (`Watch`);
/// `None` for any other request.
pub fn pod_read(method: &Method, uri: &Uri) -> Option<Shape> {
    // Core pods only (`/api/v1/…`), not a resource of that name in a group.
    if method != Method::GET
        || !uri.path().starts_with("/api/")
        || collection(uri.path()) != Some("pods")
    {
        return None;
    }
    let watch = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair == "watch=true" || pair == "watch=1");
    Some(if watch { Shape::Watch } else { Shape::List })
}

/// Whether an answer's body is JSON (or says nothing, as kube's client
/// then reads it as JSON too).
fn is_json(headers: &http::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.trim_start().starts_with("application/json"))
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for PodFilter<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<FilteredBody<B>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shape = self
            .rules
            .filter
            .then(|| pod_read(request.method(), request.uri()))
            .flatten();
        let rules = self.rules.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await.map_err(Into::into)?;
            let (mut parts, body) = answer.into_parts();
            let filtering = match shape {
                Some(shape) if parts.status.is_success() && is_json(&parts.headers) => {
                    // The body kube reads is not the one announced.
                    parts.headers.remove(CONTENT_LENGTH);
                    Some(Box::new(Filtering {
                        scanner: Scanner::new(shape, rules.max_pod_bytes),
                        judge: PodJudge::new(shape, rules),
                        ended: false,
                    }))
                }
                _ => None,
            };
            Ok(Response::from_parts(
                parts,
                FilteredBody {
                    inner: body,
                    filtering,
                },
            ))
        })
    }
}

/// A body being filtered.
#[derive(Debug)]
struct Filtering {
    scanner: Scanner,
    judge: PodJudge,
    /// The inner body ended or failed: nothing more comes.
    ended: bool,
}

/// An answer's body: a pod list's or watch's filtered (see the module
/// documentation), any other passed on as it is.
#[derive(Debug)]
pub struct FilteredBody<B> {
    inner: B,
    filtering: Option<Box<Filtering>>,
}

impl<B> Body for FilteredBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(filtering) = this.filtering.as_mut() else {
            return Pin::new(&mut this.inner).poll_frame(cx).map_err(Into::into);
        };
        loop {
            if filtering.ended {
                return Poll::Ready(None);
            }
            let mut out = Vec::new();
            let step = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => filtering
                        .scanner
                        .feed(&data, &mut out, &mut filtering.judge),
                    // Trailers: passed on.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(Some(Err(err))) => {
                    filtering.ended = true;
                    return Poll::Ready(Some(Err(err.into())));
                }
                Poll::Ready(None) => {
                    filtering.ended = true;
                    filtering.scanner.finish(&mut out, &mut filtering.judge)
                }
            };
            if let Err(err) = step {
                filtering.ended = true;
                return Poll::Ready(Some(Err(err.into())));
            }
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.filtering {
            Some(filtering) => filtering.ended,
            None => self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.filtering {
            Some(_) => SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_api::list_bounds::pods::DropReason;
    use std::convert::Infallible;

    /// A body of these frames (an `Err` frame fails the read).
    struct Frames(std::collections::VecDeque<Result<Bytes, &'static str>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Ready(
                self.0
                    .pop_front()
                    .map(|f| f.map(Frame::data).map_err(BoxError::from)),
            )
        }
    }

    /// Answers every request with `status`, `content_type` and `body` in
    /// frames of 100 bytes (then `tail`), announcing its length.
    #[derive(Clone)]
    struct Server {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
        tail: Option<&'static str>,
    }

    impl Service<Request<()>> for Server {
        type Response = Response<Frames>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<Frames>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            let mut frames: std::collections::VecDeque<_> = self
                .body
                .chunks(100)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            if let Some(tail) = self.tail {
                frames.push_back(Err(tail));
            }
            let answer = Response::builder()
                .status(self.status)
                .header(CONTENT_TYPE, self.content_type)
                .header(CONTENT_LENGTH, self.body.len())
                .body(Frames(frames))
                .expect("answer");
            std::future::ready(Ok(answer))
        }
    }

    fn pods_list() -> Vec<u8> {
        let pod = |name: &str, owned: bool| {
            let owners = if owned {
                serde_json::json!([{"apiVersion": "jinghzhu.io/v1", "kind": "Jinghzhu", "name": "j", "uid": "j1", "controller": true}])
            } else {
                serde_json::json!([])
            };
            serde_json::json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
                "ownerReferences": owners, "annotations": {"a": "x".repeat(5000)}}})
        };
        serde_json::to_vec(
            &serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {},
            "items": [pod("mine", true), pod("theirs", false)]}),
        )
        .expect("json")
    }

    fn server(body: Vec<u8>) -> Server {
        Server {
            status: 200,
            content_type: "application/json",
            body,
            tail: None,
        }
    }

    /// Sends a `GET uri` through a filter of `rules` over `server`: the
    /// answer's `Content-Length` and its body read whole, or the error.
    async fn get(
        rules: &PodRules,
        server: Server,
        uri: &str,
    ) -> (Option<String>, Result<Vec<u8>, BoxError>) {
        let mut service = PodFilterLayer::new(rules.clone()).layer(server);
        let request = Request::get(uri).body(()).expect("request");
        let answer = service.call(request).await.expect("an answer");
        let length = answer
            .headers()
            .get(CONTENT_LENGTH)
            .map(|v| v.to_str().unwrap_or_default().to_string());
        let mut body = answer.into_body();
        let mut read = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            match frame {
                Ok(frame) => read.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d)),
                Err(err) => return (length, Err(err)),
            }
        }
        (length, Ok(read))
    }

    fn names(body: &[u8]) -> Vec<String> {
        let list: serde_json::Value = serde_json::from_slice(body).expect("JSON");
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| {
                i["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    #[tokio::test]
    async fn pod_lists_and_watches_are_filtered_and_lose_their_length() {
        let rules = PodRules::host(512, 2000);
        for uri in [
            "/api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=500",
            "/api/v1/pods",
        ] {
            let (length, body) = get(&rules, server(pods_list()), uri).await;
            assert_eq!(length, None, "{uri}");
            assert_eq!(names(&body.expect("read")), ["mine"]);
        }
        assert_eq!(rules.dropped_of(DropReason::NotControlled), 2);
        let line = |name: &str| {
            format!(
                r#"{{"type":"ADDED","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","resourceVersion":"3"}}}}}}"#
            )
        };
        let watch = format!("{}\n{}\n", line("x"), line("y"));
        let (_, body) = get(
            &rules,
            server(watch.into_bytes()),
            "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=1",
        )
        .await;
        let body = String::from_utf8(body.expect("read")).expect("utf-8");
        assert_eq!(body.matches("BOOKMARK").count(), 2, "{body}");
    }

    #[tokio::test]
    async fn other_answers_are_passed_on_as_they_came() {
        let rules = PodRules::host(512, 2000);
        let list = pods_list();
        let length = Some(list.len().to_string());
        let untouched =
            |(l, body): (Option<String>, Result<Vec<u8>, BoxError>)| (l, body.expect("read"));
        // Not a pod collection, not a GET of one, not a success, not JSON,
        // or filtering off.
        for uri in [
            "/api/v1/namespaces/ns/pods/web-0",
            "/api/v1/namespaces/ns/configmaps",
            "/apis/jinghzhu.io/v1/jinghzhus",
        ] {
            assert_eq!(
                untouched(get(&rules, server(list.clone()), uri).await),
                (length.clone(), list.clone()),
                "{uri}"
            );
        }
        let failed = Server {
            status: 500,
            ..server(list.clone())
        };
        assert_eq!(
            untouched(get(&rules, failed, "/api/v1/pods").await),
            (length.clone(), list.clone())
        );
        let protobuf = Server {
            content_type: "application/vnd.kubernetes.protobuf",
            ..server(list.clone())
        };
        assert_eq!(
            untouched(get(&rules, protobuf, "/api/v1/pods").await),
            (length.clone(), list.clone())
        );
        assert_eq!(
            untouched(get(&PodRules::default(), server(list.clone()), "/api/v1/pods").await),
            (length, list)
        );
        assert_eq!(rules.dropped_of(DropReason::NotControlled), 0);
    }

    #[tokio::test]
    async fn a_body_cut_short_or_broken_fails_the_read() {
        let rules = PodRules::host(512, 2000);
        let mut list = pods_list();
        list.truncate(list.len() - 5);
        let (_, body) = get(&rules, server(list.clone()), "/api/v1/pods").await;
        assert!(body.is_err(), "a truncated list was read");
        let broken = Server {
            tail: Some("connection reset"),
            ..server(list)
        };
        let (_, body) = get(&rules, broken, "/api/v1/pods").await;
        let err = body.expect_err("the inner error");
        assert!(err.to_string().contains("connection reset"), "{err}");
    }

    #[test]
    fn pod_reads_are_told_from_other_requests() {
        let shape = |method: Method, uri: &str| pod_read(&method, &uri.parse().expect("uri"));
        assert_eq!(
            shape(Method::GET, "/api/v1/pods?limit=5"),
            Some(Shape::List)
        );
        assert_eq!(
            shape(
                Method::GET,
                "/api/v1/namespaces/n/pods?watch=1&labelSelector=x"
            ),
            Some(Shape::Watch)
        );
        assert_eq!(shape(Method::POST, "/api/v1/namespaces/n/pods"), None);
        assert_eq!(shape(Method::GET, "/api/v1/namespaces/n/pods/p"), None);
        assert_eq!(
            shape(Method::GET, "/api/v1/namespaces/n/pods/p/status"),
            None
        );
        assert_eq!(shape(Method::GET, "/apis/x.io/v1/pods"), None);
    }
}
