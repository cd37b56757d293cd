//! Bounds on one list: how many pages, items and bytes a chain of pages
//! (a list and the `continue` requests that follow it) may take before the
//! host abandons it, and the refusal of a `continue` token the chain has
//! already followed.
//!
//! kube's watcher pages an initial list (500 objects a page) and the
//! reflector buffers every object until the last page; nothing bounds the
//! chain. An API server (or a proxy in front of it) that keeps answering
//! with a new `continue` token makes the host buffer forever: 1303 pages
//! (651 500 pods) in 15.6 s took a host from 49 MB to over 1 GB, and it
//! never became ready (issue 43). A token that comes back is a loop.
//!
//! Each bound is enforced where it is seen *before* the memory is spent:
//!
//! - **pages and repeated tokens**, in the client ([`layer`]): a tower
//!   layer sees every list request, so it counts the pages of each chain
//!   (keyed by path, selectors, page size and `Accept`) and refuses the
//!   request for page `--list-max-pages + 1`, or one carrying a `continue`
//!   token already followed in the chain, without sending it;
//! - **bytes**, in the client too: each list answer's body is counted as it
//!   is read, against what the chain has read so far, and fails the read as
//!   soon as the chain passes `--list-max-mib` (an answer whose
//!   `Content-Length` alone would pass it is refused unread). kube collects
//!   a list body whole before decoding it, so a 4 GiB page is cut at the
//!   bound, never read whole;
//! - **items**, on the watch stream ([`stream`]): only the decoded list
//!   knows its items, and the watcher hands them one at a time to the
//!   cache's buffer, so the stream counts them between `Init` and
//!   `InitDone` and abandons the list at item `--list-max-items + 1`.
//!
//! A refused list fails like any failed list: the watcher starts over with
//! a fresh list, the caches drop what they had buffered of it (see
//! [`crate::controller::watch`]), a warning names the bound and the flag
//! that raises it, `wasm_operator_list_refused_total{resource,bound}`
//! counts it, and the next try waits a backoff (0.8 s doubling to 30 s,
//! reset only by a list that completes or a watch event, not by the start
//! of another list). A cache that never completes a list stays unready
//! (`/readyz`); once the API server answers sane lists the host converges.
//!
//! Every list the host's client makes is bounded by pages, tokens and bytes
//! (the watches of the controller, the leader's catch-up list, the shard
//! labeller's, `record`); items are counted on the controller's two
//! watches, whose caches are what a long list fills.

pub mod layer;
pub mod stream;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// Default of `--list-max-pages`: 10 000 pages (5 million objects at the
/// watcher's 500 a page; the bound is for chains of short or empty pages).
pub const DEFAULT_MAX_PAGES: u64 = 10_000;
/// Default of `--list-max-items`: 200 000 objects, a third more than the
/// 150 000 pods of the largest cluster Kubernetes supports. A pod buffered
/// by a list costs the host about 2.9 KiB of RSS at the peak (the cache
/// entry, 1.7 KiB of heap in `tests/cache_footprint.rs`, plus the owner
/// index, the expectations' note and the allocator's slack; measured by
/// `tests/e2e/tests/list_bounds.rs`: +844 MiB for 300 000), so a list
/// refused at this bound has grown the host by about 560 MiB.
pub const DEFAULT_MAX_ITEMS: u64 = 200_000;
/// Default of `--list-max-mib`: 512 MiB of answer bodies per list (about
/// 115 000 pods as the API server sends them, spec, status and
/// managedFields included, at 4.5 KiB each). It bounds what fat objects
/// cost, which the item count does not: a pod keeps up to 32 KiB of
/// labels and annotations in the cache, so a list of such pods is cut
/// with at most about 512 MiB of them buffered.
pub const DEFAULT_MAX_MIB: u64 = 512;

/// The bounds on one list (one chain of pages); 0 is no bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimits {
    /// Pages (the first request and each `continue`).
    pub max_pages: u64,
    /// Objects, counted on the watch streams.
    pub max_items: u64,
    /// Bytes of answer bodies, all pages together.
    pub max_bytes: u64,
}

impl Default for ListLimits {
    fn default() -> Self {
        Self {
            max_pages: DEFAULT_MAX_PAGES,
            max_items: DEFAULT_MAX_ITEMS,
            max_bytes: DEFAULT_MAX_MIB << 20,
        }
    }
}

impl ListLimits {
    /// No bound at all but the refusal of a repeated `continue` token.
    pub fn unbounded() -> Self {
        Self {
            max_pages: 0,
            max_items: 0,
            max_bytes: 0,
        }
    }
}

/// The list bounds flags of `wasm-operator run`.
#[derive(Debug, Clone, clap::Args)]
pub struct ListBoundArgs {
    /// Most pages one list may take (the first request and each `continue`);
    /// a list that needs more is abandoned and tried again with backoff. 0: no bound.
    #[arg(long, env = "WASM_OPERATOR_LIST_MAX_PAGES", default_value_t = DEFAULT_MAX_PAGES)]
    pub list_max_pages: u64,
    /// Most objects one list of Jinghzhus or pods may bring into the cache
    /// before it is abandoned and tried again with backoff. 0: no bound.
    #[arg(long, env = "WASM_OPERATOR_LIST_MAX_ITEMS", default_value_t = DEFAULT_MAX_ITEMS)]
    pub list_max_items: u64,
    /// Most MiB of answers one list may read, all its pages together; the
    /// read stops at the bound and the list is tried again with backoff. 0: no bound.
    #[arg(long, env = "WASM_OPERATOR_LIST_MAX_MIB", default_value_t = DEFAULT_MAX_MIB, value_parser = clap::value_parser!(u64).range(0..=1 << 30))]
    pub list_max_mib: u64,
}

impl ListBoundArgs {
    /// The limits these flags give.
    pub fn limits(&self) -> ListLimits {
        ListLimits {
            max_pages: self.list_max_pages,
            max_items: self.list_max_items,
            max_bytes: self.list_max_mib << 20,
        }
    }
}

/// Which bound a list passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    /// More pages than `--list-max-pages`.
    Pages,
    /// More objects than `--list-max-items`.
    Items,
    /// More bytes than `--list-max-mib`.
    Bytes,
    /// A `continue` token the list had already followed.
    RepeatedToken,
}

impl Bound {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pages => "pages",
            Self::Items => "items",
            Self::Bytes => "bytes",
            Self::RepeatedToken => "repeated_token",
        }
    }

    /// The flag that raises it (`None`: a repeated token is never allowed).
    pub fn flag(self) -> Option<&'static str> {
        match self {
            Self::Pages => Some("--list-max-pages"),
            Self::Items => Some("--list-max-items"),
            Self::Bytes => Some("--list-max-mib"),
            Self::RepeatedToken => None,
        }
    }
}

/// A list the host abandoned: the error its caller gets.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", self.describe())]
pub struct ListRefused {
    /// The listed resource (`pods`, `jinghzhus`, …).
    pub resource: String,
    /// The bound it passed.
    pub bound: Bound,
    /// That bound's value (pages, items or bytes; 0 for a repeated token).
    pub limit: u64,
}

impl ListRefused {
    fn describe(&self) -> String {
        let what = match self.bound {
            Bound::Pages => format!("more than {} pages", self.limit),
            Bound::Items => format!("more than {} objects", self.limit),
            Bound::Bytes => format!("more than {} MiB", self.limit >> 20),
            Bound::RepeatedToken => {
                return format!(
                    "list of {} abandoned: the API server sent a continue token this list had \
                     already followed (a loop)",
                    self.resource
                );
            }
        };
        format!(
            "list of {} abandoned: it took {what} (raise {} if the cluster really holds that much)",
            self.resource,
            self.bound.flag().unwrap_or_default()
        )
    }
}

/// The [`ListRefused`] somewhere in `err`'s chain of sources.
pub fn refusal_in<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a ListRefused> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(refused) = err.downcast_ref::<ListRefused>() {
            return Some(refused);
        }
        next = err.source();
    }
    None
}

/// `{resource, bound}` of `wasm_operator_list_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListRefusedLabels {
    /// The listed resource (`pods`, `jinghzhus`, …).
    pub resource: String,
    /// `pages`, `items`, `bytes` or `repeated_token`.
    pub bound: String,
}

/// The limits and the refusal counter, shared by the client's layer and
/// the watch streams (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct ListBounds {
    /// The limits.
    pub limits: ListLimits,
    /// `wasm_operator_list_refused_total`.
    pub refused: Family<ListRefusedLabels, Counter>,
}

impl ListBounds {
    /// `limits`, counting refusals in `refused`.
    pub fn new(limits: ListLimits, refused: Family<ListRefusedLabels, Counter>) -> Self {
        Self { limits, refused }
    }

    /// Lists refused so far (all resources and bounds).
    pub fn refused_total(&self) -> u64 {
        // A Family has no iterator: ask for every label it can hold.
        let mut total = 0;
        for resource in ["pods", "jinghzhus"] {
            for bound in [
                Bound::Pages,
                Bound::Items,
                Bound::Bytes,
                Bound::RepeatedToken,
            ] {
                total += self.refused_of(resource, bound);
            }
        }
        total
    }

    /// Lists of `resource` refused for `bound` so far.
    pub fn refused_of(&self, resource: &str, bound: Bound) -> u64 {
        self.refused
            .get_or_create(&ListRefusedLabels {
                resource: resource.to_string(),
                bound: bound.as_str().to_string(),
            })
            .get()
    }

    /// Counts and logs `refused`; returns it.
    pub fn refuse(&self, refused: ListRefused) -> ListRefused {
        self.refused
            .get_or_create(&ListRefusedLabels {
                resource: refused.resource.clone(),
                bound: refused.bound.as_str().to_string(),
            })
            .inc();
        tracing::warn!(
            resource = %refused.resource,
            bound = refused.bound.as_str(),
            limit = refused.limit,
            flag = refused.bound.flag().unwrap_or("-"),
            "{refused}; retrying with backoff"
        );
        refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_found_under_the_errors_that_carry_it() {
        let refused = ListRefused {
            resource: "pods".into(),
            bound: Bound::Pages,
            limit: 3,
        };
        let client = kube::Error::Service(Box::new(refused));
        let watch = kube::runtime::watcher::Error::InitialListFailed(client);
        let found = refusal_in(&watch).expect("found");
        assert_eq!(found.bound, Bound::Pages);
        assert!(watch.to_string().contains("--list-max-pages"), "{watch}");
        let other = kube::Error::Service("another failure".into());
        assert!(refusal_in(&other).is_none());
    }

    #[test]
    fn a_refusal_is_counted_by_resource_and_bound() {
        let bounds = ListBounds::default();
        bounds.refuse(ListRefused {
            resource: "pods".into(),
            bound: Bound::RepeatedToken,
            limit: 0,
        });
        assert_eq!(bounds.refused_of("pods", Bound::RepeatedToken), 1);
        assert_eq!(bounds.refused_of("pods", Bound::Pages), 0);
        assert_eq!(bounds.refused_total(), 1);
    }

    /// A fake API server on a loopback port answering every pod list with
    /// a page of one pod and a `continue` token: a new one each time, or
    /// always `same` when `repeat`. Counts the pages it served.
    async fn endless_pages(repeat: bool) -> (String, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let pages = Arc::new(AtomicUsize::new(0));
        let served = pages.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 16 * 1024];
                let _ = socket.read(&mut buf).await;
                let page = served.fetch_add(1, Ordering::SeqCst);
                let token = if repeat {
                    "same".to_string()
                } else {
                    format!("t{page}")
                };
                let body = format!(
                    r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"1","continue":"{token}"}},"items":[{{"metadata":{{"name":"p{page}","namespace":"ns","uid":"u{page}"}}}}]}}"#
                );
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, pages)
    }

    /// The first error of a bounded pod watcher through the host's client
    /// against [`endless_pages`], and the pages served by then.
    async fn first_refusal(repeat: bool, limits: ListLimits) -> (ListRefused, usize, ListBounds) {
        use futures::StreamExt;
        use k8s_openapi::api::core::v1::Pod;
        let (url, pages) = endless_pages(repeat).await;
        let bounds = ListBounds::new(limits, Family::default());
        let config = kube::Config::new(url.parse().expect("url"));
        let client = crate::api_client::build_bounded(
            config,
            crate::api_client::MAX_RETRY_WAIT,
            bounds.clone(),
        )
        .expect("client");
        let api: kube::Api<Pod> = kube::Api::namespaced(client, "ns");
        let mut events = stream::bounded_watcher(
            api,
            kube::runtime::watcher::Config::default().page_size(1),
            bounds.clone(),
        );
        let refused = tokio::time::timeout(std::time::Duration::from_secs(20), async {
            loop {
                if let Err(err) = events.next().await.expect("endless") {
                    break refusal_in(&err).cloned().expect("a refusal");
                }
            }
        })
        .await
        .expect("refused within 20 s");
        (refused, pages.load(Ordering::SeqCst), bounds)
    }

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn an_endless_chain_through_the_client_is_cut_at_each_bound() {
        let pages = ListLimits {
            max_pages: 20,
            ..ListLimits::unbounded()
        };
        let (refused, served, bounds) = first_refusal(false, pages).await;
        assert_eq!(
            (refused.bound, refused.resource.as_str()),
            (Bound::Pages, "pods")
        );
        assert_eq!(served, 20, "pages served before the refusal");
        assert_eq!(bounds.refused_of("pods", Bound::Pages), 1);

        let items = ListLimits {
            max_items: 7,
            ..ListLimits::unbounded()
        };
        let (refused, served, _) = first_refusal(false, items).await;
        assert_eq!(refused.bound, Bound::Items);
        assert!(served <= 8, "{served} pages for 7 items");

        let bytes = ListLimits {
            max_bytes: 2000,
            ..ListLimits::unbounded()
        };
        let (refused, served, _) = first_refusal(false, bytes).await;
        assert_eq!(refused.bound, Bound::Bytes);
        // Each page is about 150 bytes.
        assert!((10..=20).contains(&served), "{served} pages for 2000 bytes");

        let (refused, served, _) = first_refusal(true, ListLimits::default()).await;
        assert_eq!(refused.bound, Bound::RepeatedToken);
        assert_eq!(served, 2, "the repeated token was followed");
    }
}
