//! The client's side of the list bounds: a tower layer, outermost in the
//! host's client stack (so a read the client repeats after a 503 is one
//! page, not two), that counts each list's pages and bytes and refuses a
//! repeated `continue` token.
//!
//! A list request is a `GET` of a collection (`/api/v1/namespaces/x/pods`,
//! `/apis/g/v/jinghzhus`) that is not a watch. Its chain is keyed by path,
//! `labelSelector`, `fieldSelector`, `limit` and `Accept`: a request
//! without `continue` starts the chain afresh, one with `continue` is its
//! next page. Two identical lists running at once share a key (the second
//! to start restarts the count); the host makes no such pair.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::header::{ACCEPT, CONTENT_LENGTH};
use http::{Method, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use tower::{BoxError, Layer, Service};

use super::{Bound, ListBounds, ListRefused};
use crate::locks::MutexExt;

/// A chain not used for this long is forgotten (when another starts).
const CHAIN_IDLE: Duration = Duration::from_secs(600);

/// Puts [`BoundedLists`] around a client's service.
#[derive(Debug, Clone)]
pub struct ListBoundsLayer {
    bounds: ListBounds,
    chains: Arc<Mutex<HashMap<String, Chain>>>,
}

impl ListBoundsLayer {
    /// A layer enforcing `bounds` (pages, bytes, repeated tokens).
    pub fn new(bounds: ListBounds) -> Self {
        Self {
            bounds,
            chains: Arc::default(),
        }
    }
}

impl<S> Layer<S> for ListBoundsLayer {
    type Service = BoundedLists<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BoundedLists {
            inner,
            bounds: self.bounds.clone(),
            chains: self.chains.clone(),
        }
    }
}

/// One chain of pages seen so far.
#[derive(Debug)]
struct Chain {
    pages: u64,
    /// Hashes of the `continue` tokens followed.
    tokens: HashSet<u64>,
    /// Body bytes read, all pages together.
    bytes: Arc<AtomicU64>,
    used: Instant,
}

impl Chain {
    fn new(now: Instant) -> Self {
        Self {
            pages: 0,
            tokens: HashSet::new(),
            bytes: Arc::default(),
            used: now,
        }
    }
}

/// A list request: its chain's key, its `continue` token, the resource.
#[derive(Debug, PartialEq, Eq)]
struct ListRequest<'a> {
    key: String,
    token: Option<&'a str>,
    resource: &'a str,
}

impl<'a> ListRequest<'a> {
    /// `None` unless `method` and `uri` are a list (not a watch, not a get).
    fn parse(method: &Method, uri: &'a Uri, accept: &str) -> Option<Self> {
        if method != Method::GET {
            return None;
        }
        let resource = collection(uri.path())?;
        let mut token = None;
        let mut keyed = Vec::new();
        for pair in uri.query().unwrap_or_default().split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "watch" if value == "true" || value == "1" => return None,
                "continue" if !value.is_empty() => token = Some(value),
                "labelSelector" | "fieldSelector" | "limit" => keyed.push(pair),
                _ => {}
            }
        }
        keyed.sort_unstable();
        let key = format!("{}?{} accept={accept}", uri.path(), keyed.join("&"));
        Some(Self {
            key,
            token,
            resource,
        })
    }
}

/// The resource a path lists, when it is a collection's path.
pub(super) fn collection(path: &str) -> Option<&str> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        rest => rest,
    };
    match rest {
        [resource] if !resource.is_empty() => Some(resource),
        _ => None,
    }
}

/// The service [`ListBoundsLayer`] makes.
#[derive(Debug, Clone)]
pub struct BoundedLists<S> {
    inner: S,
    bounds: ListBounds,
    chains: Arc<Mutex<HashMap<String, Chain>>>,
}

impl<S> BoundedLists<S> {
    /// Counts `request` in its chain: the byte budget its answer reads
    /// from (`None`: not a list), or the refusal of a page past the bound
    /// or a token the chain already followed.
    fn admit<B>(&self, request: &Request<B>) -> Result<Option<ByteBudget>, ListRefused> {
        let accept = request
            .headers()
            .get(ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let Some(list) = ListRequest::parse(request.method(), request.uri(), accept) else {
            return Ok(None);
        };
        let refused = |bound| self.bounds.refusal(list.resource, bound);
        let max_pages = self.bounds.limit(list.resource, Bound::Pages).0;
        let now = Instant::now();
        let mut chains = self.chains.lock_unpoisoned();
        if list.token.is_none() {
            chains.retain(|_, chain| now.duration_since(chain.used) < CHAIN_IDLE);
            chains.insert(list.key.clone(), Chain::new(now));
        }
        let chain = chains
            .entry(list.key.clone())
            .or_insert_with(|| Chain::new(now));
        chain.used = now;
        if let Some(token) = list.token {
            let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(token);
            if !chain.tokens.insert(hash) {
                chains.remove(&list.key);
                return Err(refused(Bound::RepeatedToken));
            }
        }
        chain.pages += 1;
        if max_pages > 0 && chain.pages > max_pages {
            chains.remove(&list.key);
            return Err(refused(Bound::Pages));
        }
        Ok(Some(ByteBudget {
            spent: chain.bytes.clone(),
            resource: list.resource.to_string(),
            bounds: self.bounds.clone(),
        }))
    }
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for BoundedLists<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<CountedBody<B>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let budget = match self.admit(&request) {
            Ok(budget) => budget,
            Err(refused) => {
                let refused = self.bounds.refuse(refused);
                return Box::pin(async move { Err(BoxError::from(refused)) });
            }
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await.map_err(Into::into)?;
            let (parts, body) = answer.into_parts();
            if let Some(budget) = &budget {
                // An answer that says it is too long is not read at all.
                let announced = parts
                    .headers
                    .get(CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                if let Some(length) = announced {
                    budget.check(length)?;
                }
            }
            Ok(Response::from_parts(
                parts,
                CountedBody {
                    inner: body,
                    budget,
                },
            ))
        })
    }
}

/// What a chain's answers may still read.
#[derive(Debug)]
pub struct ByteBudget {
    spent: Arc<AtomicU64>,
    resource: String,
    bounds: ListBounds,
}

impl ByteBudget {
    fn refused(&self) -> ListRefused {
        self.bounds
            .refuse(self.bounds.refusal(&self.resource, Bound::Bytes))
    }

    /// The chain's bound now (a pod list's grows with the Jinghzhus served).
    fn max(&self) -> u64 {
        self.bounds.limit(&self.resource, Bound::Bytes).0
    }

    /// Refuses when `more` bytes would take the chain past the bound.
    fn check(&self, more: u64) -> Result<(), ListRefused> {
        let max = self.max();
        if max > 0 && self.spent.load(Ordering::Relaxed).saturating_add(more) > max {
            return Err(self.refused());
        }
        Ok(())
    }

    /// Counts `read` bytes; refuses once the chain is past the bound.
    fn spend(&self, read: u64) -> Result<(), ListRefused> {
        let max = self.max();
        let spent = self.spent.fetch_add(read, Ordering::Relaxed) + read;
        if max > 0 && spent > max {
            return Err(self.refused());
        }
        Ok(())
    }
}

/// An answer's body, counted against its chain's bytes when it answers a
/// list; the read fails once the chain passes the bound.
#[derive(Debug)]
pub struct CountedBody<B> {
    inner: B,
    budget: Option<ByteBudget>,
}

impl<B> Body for CountedBody<B>
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
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(budget)) = (frame.data_ref(), &this.budget)
                    && let Err(refused) = budget.spend(data.len() as u64)
                {
                    // Read no further: the next frame would not be looked at.
                    this.budget = None;
                    return Poll::Ready(Some(Err(refused.into())));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(err.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_api::list_bounds::ListLimits;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;

    /// A body of `chunks` frames of `size` bytes each.
    struct Chunks {
        chunks: usize,
        size: usize,
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if self.chunks == 0 {
                return Poll::Ready(None);
            }
            self.chunks -= 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; self.size])))))
        }
    }

    /// Answers every request with a body of `chunks` × `size` bytes (and
    /// that `Content-Length` when `announce`), counting the requests.
    #[derive(Clone)]
    struct Server {
        calls: Arc<AtomicUsize>,
        chunks: usize,
        size: usize,
        announce: bool,
    }

    impl Service<Request<()>> for Server {
        type Response = Response<Chunks>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<Chunks>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let mut answer = Response::new(Chunks {
                chunks: self.chunks,
                size: self.size,
            });
            if self.announce {
                answer.headers_mut().insert(
                    CONTENT_LENGTH,
                    (self.chunks * self.size)
                        .to_string()
                        .parse()
                        .expect("value"),
                );
            }
            std::future::ready(Ok(answer))
        }
    }

    fn bounded(limits: ListLimits, chunks: usize, size: usize) -> (BoundedLists<Server>, Server) {
        let server = Server {
            calls: Arc::default(),
            chunks,
            size,
            announce: false,
        };
        let layer = ListBoundsLayer::new(ListBounds::new(limits, Default::default()));
        (layer.layer(server.clone()), server)
    }

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).expect("request")
    }

    const PODS: &str = "/api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=500";

    fn page(token: &str) -> Request<()> {
        get(&format!("{PODS}&continue={token}"))
    }

    /// Sends `request` and reads its answer whole: the bytes read, or the refusal.
    async fn send(
        service: &mut BoundedLists<Server>,
        request: Request<()>,
    ) -> Result<usize, ListRefused> {
        let refusal = |err: BoxError| {
            err.downcast::<ListRefused>()
                .map(|r| *r)
                .expect("a refusal")
        };
        let answer = service.call(request).await.map_err(refusal)?;
        read_all(answer.into_body()).await.map_err(refusal)
    }

    /// The bytes of `body`, read frame by frame.
    async fn read_all<B: Body<Data = Bytes> + Unpin>(mut body: B) -> Result<usize, B::Error> {
        let mut read = 0;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            read += frame?.data_ref().map_or(0, Bytes::len);
        }
        Ok(read)
    }

    #[test]
    fn lists_are_told_from_gets_and_watches() {
        let parse = |method: Method, uri: &str| {
            let uri: Uri = uri.parse().expect("uri");
            ListRequest::parse(&method, &uri, "json")
                .map(|l| (l.resource.to_string(), l.token.map(str::to_string)))
        };
        let list = |r: &str| Some((r.to_string(), None));
        assert_eq!(parse(Method::GET, "/api/v1/pods?limit=500"), list("pods"));
        assert_eq!(
            parse(Method::GET, "/api/v1/namespaces/ns/pods"),
            list("pods")
        );
        assert_eq!(parse(Method::GET, "/api/v1/namespaces"), list("namespaces"));
        assert_eq!(
            parse(Method::GET, "/apis/jinghzhu.io/v1/jinghzhus"),
            list("jinghzhus")
        );
        assert_eq!(
            parse(
                Method::GET,
                "/apis/jinghzhu.io/v1/namespaces/ns/jinghzhus?continue=abc"
            ),
            Some(("jinghzhus".to_string(), Some("abc".to_string())))
        );
        for not_a_list in [
            "/api/v1/namespaces/ns/pods/web-0",
            "/api/v1/namespaces/ns",
            "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=7",
            "/apis/jinghzhu.io/v1/namespaces/ns/jinghzhus/web/status",
            "/version",
            "/apis",
        ] {
            assert_eq!(parse(Method::GET, not_a_list), None, "{not_a_list}");
        }
        assert_eq!(parse(Method::POST, "/api/v1/namespaces/ns/pods"), None);
    }

    #[tokio::test]
    async fn the_page_past_the_bound_is_not_sent() {
        let limits = ListLimits {
            max_pages: 3,
            ..ListLimits::unbounded()
        };
        let (mut service, server) = bounded(limits, 1, 10);
        send(&mut service, get(PODS)).await.expect("page 1");
        send(&mut service, page("t1")).await.expect("page 2");
        send(&mut service, page("t2")).await.expect("page 3");
        let refused = send(&mut service, page("t3")).await.expect_err("page 4");
        assert_eq!((refused.bound, refused.limit), (Bound::Pages, 3));
        assert_eq!(refused.resource, "pods");
        assert_eq!(server.calls.load(Ordering::SeqCst), 3, "page 4 was sent");
        assert_eq!(service.bounds.refused_of("pods", Bound::Pages), 1);
        // A new list starts a new count; another selector is another chain.
        send(&mut service, get(PODS)).await.expect("a new list");
        send(&mut service, page("t1")).await.expect("its page 2");
        send(&mut service, get("/api/v1/namespaces/ns/pods?limit=500"))
            .await
            .expect("another list");
        send(&mut service, page("t2"))
            .await
            .expect("page 3 of the first");
    }

    #[tokio::test]
    async fn a_token_followed_before_is_refused_at_once() {
        let (mut service, server) = bounded(ListLimits::default(), 1, 10);
        send(&mut service, get(PODS)).await.expect("page 1");
        send(&mut service, page("a")).await.expect("page 2");
        send(&mut service, page("b")).await.expect("page 3");
        let refused = send(&mut service, page("a")).await.expect_err("a loop");
        assert_eq!(refused.bound, Bound::RepeatedToken);
        assert_eq!(server.calls.load(Ordering::SeqCst), 3);
        // A fresh list may follow the same tokens again.
        send(&mut service, get(PODS)).await.expect("page 1");
        send(&mut service, page("a")).await.expect("page 2 again");
    }

    #[tokio::test]
    async fn bytes_are_counted_across_pages_and_cut_as_they_are_read() {
        // 4 pages of 10 × 1000 bytes under a bound of 35 000: the fourth
        // page is cut after its fifth frame.
        let limits = ListLimits {
            max_bytes: 35_000,
            ..ListLimits::unbounded()
        };
        let (mut service, _) = bounded(limits, 10, 1000);
        for request in [get(PODS), page("1"), page("2")] {
            assert_eq!(
                send(&mut service, request).await.expect("under the bound"),
                10_000
            );
        }
        let refused = send(&mut service, page("3"))
            .await
            .expect_err("past the bound");
        assert_eq!((refused.bound, refused.limit), (Bound::Bytes, 35_000));
        // A 4 GiB page is never read whole: cut within the bound.
        let limits = ListLimits {
            max_bytes: 1 << 20,
            ..ListLimits::unbounded()
        };
        let (mut service, _) = bounded(limits, 1 << 16, 1 << 16);
        let started = Instant::now();
        let refused = send(&mut service, get(PODS)).await.expect_err("4 GiB");
        assert_eq!(refused.bound, Bound::Bytes);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn an_answer_announced_past_the_bound_is_not_read() {
        let limits = ListLimits {
            max_bytes: 1000,
            ..ListLimits::unbounded()
        };
        let (mut service, mut server) = bounded(limits, 2, 1000);
        server.announce = true;
        service.inner = server;
        let answer = service.call(get(PODS)).await;
        let err = answer.err().expect("refused before reading");
        assert_eq!(
            err.downcast_ref::<ListRefused>().map(|r| r.bound),
            Some(Bound::Bytes)
        );
    }

    #[tokio::test]
    async fn gets_and_watches_are_not_counted() {
        let limits = ListLimits {
            max_pages: 1,
            max_bytes: 100,
            ..ListLimits::unbounded()
        };
        let (mut service, _) = bounded(limits, 1, 1000);
        for _ in 0..3 {
            let uri = "/api/v1/namespaces/ns/pods/web-0";
            assert_eq!(send(&mut service, get(uri)).await.expect("a get"), 1000);
            let watch = "/api/v1/namespaces/ns/pods?watch=true&continue=x";
            assert_eq!(send(&mut service, get(watch)).await.expect("a watch"), 1000);
        }
    }
}
