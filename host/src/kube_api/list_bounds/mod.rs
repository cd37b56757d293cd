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
//!
//! **Pod lists are sized to the work** (rule `list/sized-to-work`): the
//! flags are the admin's ceiling, but a pod list may take no more than the
//! Jinghzhus the host serves can own: (Jinghzhus in the cache + 1) ×
//! `--list-pods-per-object` pods (default 2000: twice the 1000 pods one
//! Jinghzhu may have, for pods terminating beside their replacements), and
//! that many times [`pods::MAX_CACHED_POD_BYTES`] bytes (each pod is handed
//! on cut to what the cache keeps, see [`pods`]). The one added object is
//! the floor of an empty cluster, and room for a Jinghzhu created while
//! the list runs. So a hostile list is refused near the working set, not
//! at the worst case the flags allow. The controller's pod watch lists
//! only once the Jinghzhu cache has had its list (the count is known);
//! `--list-pods-per-object 0` bounds pod lists by the flags alone.
//!
//! **Pods the host does not control cost it nothing**: every pod list and
//! watch answer is filtered as it streams in, before any bound counts it
//! (rules `pods/not-controlled` and `pods/too-large`, see [`pods`] and
//! [`filter`], with the scanner of [`scan`]).

pub mod filter;
pub mod layer;
pub mod pods;
pub mod scan;
pub mod stream;

pub use pods::PodRules;

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
    /// Pods one Jinghzhu may own, for sizing pod lists: a pod list may take
    /// (Jinghzhus in the cache + 1) × this many pods, and 40 KiB each,
    /// within --list-max-items and --list-max-mib (rule list/sized-to-work).
    /// 0: pod lists are bounded by those flags alone.
    #[arg(long, env = "WASM_OPERATOR_LIST_PODS_PER_OBJECT", default_value_t = pods::DEFAULT_PODS_PER_OBJECT)]
    pub list_pods_per_object: u64,
    /// Most KiB of one pod the host reads from a pod list or watch; a pod
    /// over it is read past, never held whole, and left out of the cache
    /// (rule pods/too-large).
    #[arg(long, env = "WASM_OPERATOR_POD_MAX_KIB", default_value_t = pods::DEFAULT_MAX_POD_KIB, value_parser = clap::value_parser!(u64).range(64..=64 * 1024))]
    pub pod_max_kib: u64,
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

    /// The host's bounds and pod rules these flags give, counting refusals
    /// in `refused` and pods left out in `dropped`.
    pub fn bounds(
        &self,
        refused: Family<ListRefusedLabels, Counter>,
        dropped: Family<pods::PodsDroppedLabels, Counter>,
    ) -> ListBounds {
        ListBounds::new(self.limits(), refused).with_pods(
            PodRules::host(self.pod_max_kib, self.list_pods_per_object).counting(dropped),
        )
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

    /// The rule id.
    pub fn rule(self) -> &'static str {
        match self {
            Self::Pages => "list/pages",
            Self::Items => "list/items",
            Self::Bytes => "list/bytes",
            Self::RepeatedToken => "list/repeated-token",
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

/// The rule id of a pod list bound sized to the work.
pub const RULE_SIZED_TO_WORK: &str = "list/sized-to-work";

/// What sized a pod list's bound: the Jinghzhus served, and the pods each
/// may own (`--list-pods-per-object`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Jinghzhus in the cache.
    pub objects: u64,
    /// `--list-pods-per-object`.
    pub pods_per_object: u64,
}

impl Work {
    /// Pods the served objects may own, with room for one more object.
    pub fn pods(self) -> u64 {
        self.objects
            .saturating_add(1)
            .saturating_mul(self.pods_per_object)
    }

    /// Bytes those pods may take as the client hands them on.
    pub fn bytes(self) -> u64 {
        self.pods().saturating_mul(pods::MAX_CACHED_POD_BYTES)
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
    /// What sized it, when the work did (not the flag).
    pub work: Option<Work>,
}

impl ListRefused {
    /// The rule id.
    pub fn rule(&self) -> &'static str {
        match self.work {
            Some(_) => RULE_SIZED_TO_WORK,
            None => self.bound.rule(),
        }
    }

    /// The flag that raises it.
    pub fn flag(&self) -> Option<&'static str> {
        match self.work {
            Some(_) => Some("--list-pods-per-object"),
            None => self.bound.flag(),
        }
    }

    fn describe(&self) -> String {
        if let Some(work) = self.work {
            let took = match self.bound {
                Bound::Bytes => format!("more than {} MiB", self.limit >> 20),
                _ => format!("more than {} pods", self.limit),
            };
            return format!(
                "list of {} abandoned: it took {took}, more than the {} Jinghzhus this host \
                 serves may own (({} + 1) × {} pods, {} KiB each; rule {RULE_SIZED_TO_WORK}: \
                 raise --list-pods-per-object, or 0 to bound pod lists by --list-max-items and \
                 --list-max-mib alone)",
                self.resource,
                work.objects,
                work.objects,
                work.pods_per_object,
                pods::MAX_CACHED_POD_BYTES >> 10
            );
        }
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
    /// The limits (the flags: the admin's ceiling).
    pub limits: ListLimits,
    /// `wasm_operator_list_refused_total`.
    pub refused: Family<ListRefusedLabels, Counter>,
    /// What the client does with pods, and how pod lists are sized.
    pub pods: PodRules,
}

impl ListBounds {
    /// `limits`, counting refusals in `refused`; pods read as they come
    /// and lists bounded by `limits` alone (see [`Self::with_pods`]).
    pub fn new(limits: ListLimits, refused: Family<ListRefusedLabels, Counter>) -> Self {
        Self {
            limits,
            refused,
            pods: PodRules::default(),
        }
    }

    /// These bounds with `pods` as the pod rules.
    pub fn with_pods(mut self, pods: PodRules) -> Self {
        self.pods = pods;
        self
    }

    /// The bound on `resource`'s lists for `bound` (0: none), and the work
    /// that sized it when that is lower than the flag.
    pub fn limit(&self, resource: &str, bound: Bound) -> (u64, Option<Work>) {
        let flag = match bound {
            Bound::Pages => self.limits.max_pages,
            Bound::Items => self.limits.max_items,
            Bound::Bytes => self.limits.max_bytes,
            Bound::RepeatedToken => return (0, None),
        };
        let objects = match (resource, bound) {
            ("pods", Bound::Items | Bound::Bytes) => self.pods.served_objects(),
            _ => None,
        };
        let Some(objects) = objects else {
            return (flag, None);
        };
        let work = Work {
            objects,
            pods_per_object: self.pods.pods_per_object,
        };
        let sized = match bound {
            Bound::Bytes => work.bytes(),
            _ => work.pods(),
        };
        if flag == 0 || sized < flag {
            (sized, Some(work))
        } else {
            (flag, None)
        }
    }

    /// The refusal of a list of `resource` past `bound`.
    pub fn refusal(&self, resource: &str, bound: Bound) -> ListRefused {
        let (limit, work) = self.limit(resource, bound);
        ListRefused {
            resource: resource.to_string(),
            bound,
            limit,
            work,
        }
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
            rule = refused.rule(),
            flag = refused.flag().unwrap_or("-"),
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
            work: None,
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
            work: None,
        });
        assert_eq!(bounds.refused_of("pods", Bound::RepeatedToken), 1);
        assert_eq!(bounds.refused_of("pods", Bound::Pages), 0);
        assert_eq!(bounds.refused_total(), 1);
    }

    /// A fake API server on a loopback port answering every request with
    /// the JSON body `answer` gives for the request's number. Counts them.
    async fn serving(
        answer: impl Fn(usize) -> String + Send + 'static,
    ) -> (String, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = Arc::new(AtomicUsize::new(0));
        let served = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 16 * 1024];
                let _ = socket.read(&mut buf).await;
                let body = answer(served.fetch_add(1, Ordering::SeqCst));
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, requests)
    }

    /// A pod named `name`, controlled by a Jinghzhu when `owned`, with
    /// `annotation` bytes of annotation.
    fn fake_pod(name: &str, owned: bool, annotation: usize) -> String {
        let owners = if owned {
            r#","ownerReferences":[{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","name":"j","uid":"j1","controller":true}]"#
        } else {
            ""
        };
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"1","annotations":{{"a":"{}"}}{owners}}}}}"#,
            "x".repeat(annotation)
        )
    }

    /// A fake API server answering every pod list with a page of one pod
    /// (controlled by a Jinghzhu when `owned`) and a `continue` token: a
    /// new one each time, or always `same` when `repeat`. Counts the pages.
    async fn endless_pages(repeat: bool, owned: bool) -> (String, Arc<AtomicUsize>) {
        serving(move |page| {
            let token = if repeat {
                "same".to_string()
            } else {
                format!("t{page}")
            };
            format!(
                r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"1","continue":"{token}"}},"items":[{}]}}"#,
                fake_pod(&format!("p{page}"), owned, 0)
            )
        })
        .await
    }

    /// A pod watcher through a host client bounded by `bounds` against `url`.
    fn pod_events(
        url: &str,
        bounds: &ListBounds,
    ) -> stream::Events<k8s_openapi::api::core::v1::Pod> {
        let config = kube::Config::new(url.parse().expect("url"));
        let client = crate::kube_api::client::build_bounded(
            config,
            crate::kube_api::client::MAX_RETRY_WAIT,
            bounds.clone(),
        )
        .expect("client");
        let api = kube::Api::namespaced(client, "ns");
        stream::bounded_watcher(
            api,
            kube::runtime::watcher::Config::default().page_size(1),
            bounds.clone(),
        )
    }

    /// The first error of `events`.
    async fn first_error<K: Send + 'static>(mut events: stream::Events<K>) -> ListRefused {
        use futures::StreamExt;
        tokio::time::timeout(std::time::Duration::from_secs(20), async {
            loop {
                if let Err(err) = events.next().await.expect("endless") {
                    break refusal_in(&err).cloned().expect("a refusal");
                }
            }
        })
        .await
        .expect("refused within 20 s")
    }

    /// The first error of a bounded pod watcher through the host's client
    /// against [`endless_pages`], and the pages served by then.
    async fn first_refusal(repeat: bool, limits: ListLimits) -> (ListRefused, usize, ListBounds) {
        let (url, pages) = endless_pages(repeat, false).await;
        let bounds = ListBounds::new(limits, Family::default());
        let refused = first_error(pod_events(&url, &bounds)).await;
        (refused, pages.load(Ordering::SeqCst), bounds)
    }

    /// A cache of `n` Jinghzhus.
    fn served(n: usize) -> kube::runtime::reflector::Store<crate::crd::Jinghzhu> {
        let (cache, mut writer) = kube::runtime::reflector::store();
        for i in 0..n {
            let jz = wasm_operator_testkit::jinghzhu(&format!("j{i}"))
                .namespace("ns")
                .build();
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(jz));
        }
        cache
    }

    #[test]
    fn pod_lists_are_sized_to_the_jinghzhus_served() {
        let bounds = ListBounds::default().with_pods(PodRules::host(512, 10));
        let flags = ListLimits::default();
        // Before the Jinghzhu cache has had a list: the flags.
        assert_eq!(bounds.limit("pods", Bound::Items), (flags.max_items, None));
        bounds.pods.serve(served(2));
        let work = Some(Work {
            objects: 2,
            pods_per_object: 10,
        });
        assert_eq!(bounds.limit("pods", Bound::Items), (30, work));
        assert_eq!(
            bounds.limit("pods", Bound::Bytes),
            (30 * pods::MAX_CACHED_POD_BYTES, work)
        );
        assert_eq!(bounds.limit("pods", Bound::Pages), (flags.max_pages, None));
        assert_eq!(
            bounds.limit("jinghzhus", Bound::Items),
            (flags.max_items, None)
        );
        let refused = bounds.refusal("pods", Bound::Items);
        assert_eq!(refused.rule(), RULE_SIZED_TO_WORK);
        let text = refused.to_string();
        assert!(
            text.contains("more than 30 pods") && text.contains("--list-pods-per-object"),
            "{text}"
        );
        // The flag is the ceiling; 0 there is no bound, so the work is.
        let tight = ListBounds::new(
            ListLimits {
                max_items: 20,
                ..ListLimits::unbounded()
            },
            Family::default(),
        )
        .with_pods(bounds.pods.clone());
        assert_eq!(tight.limit("pods", Bound::Items), (20, None));
        assert_eq!(
            tight.limit("pods", Bound::Bytes),
            (30 * pods::MAX_CACHED_POD_BYTES, work)
        );
        // Not sized: the flags alone.
        let flags_only = ListBounds::default().with_pods(PodRules::host(512, 0));
        flags_only.pods.serve(served(2));
        assert_eq!(
            flags_only.limit("pods", Bound::Items),
            (flags.max_items, None)
        );
        // An empty cluster: room for one object's pods.
        let empty = ListBounds::default().with_pods(PodRules::host(512, 10));
        empty.pods.serve(served(0));
        assert_eq!(empty.limit("pods", Bound::Items).0, 10);
    }

    #[tokio::test]
    async fn an_endless_chain_of_controlled_pods_is_refused_near_the_work() {
        let (url, pages) = endless_pages(false, true).await;
        let bounds = ListBounds::default().with_pods(PodRules::host(512, 3));
        bounds.pods.serve(served(1));
        let refused = first_error(pod_events(&url, &bounds)).await;
        assert_eq!(refused.bound, Bound::Items);
        assert_eq!(refused.limit, 6);
        assert_eq!(refused.rule(), RULE_SIZED_TO_WORK);
        assert!(pages.load(Ordering::SeqCst) <= 7);
    }

    #[tokio::test]
    async fn pods_nobody_controls_spend_no_bytes_of_a_list() {
        // One page: 40 pods of 10 KiB nobody controls, and one of ours,
        // under a bound of 100 KiB.
        let page = |_| {
            let mut items: Vec<String> = (0..40)
                .map(|i| fake_pod(&format!("n{i}"), false, 10_000))
                .collect();
            items.push(fake_pod("mine", true, 100));
            format!(
                r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"1"}},"items":[{}]}}"#,
                items.join(",")
            )
        };
        let limits = ListLimits {
            max_bytes: 100_000,
            ..ListLimits::default()
        };
        // Read as they come (the filter off): the list is refused.
        let (url, _) = serving(page).await;
        let unfiltered = ListBounds::new(limits, Family::default());
        let refused = first_error(pod_events(&url, &unfiltered)).await;
        assert_eq!(refused.bound, Bound::Bytes);
        // Filtered: the list completes with our pod alone.
        let (url, _) = serving(page).await;
        let filtered = ListBounds::new(limits, Family::default()).with_pods(PodRules::host(512, 0));
        use futures::StreamExt;
        use kube::runtime::watcher::Event;
        let mut events = pod_events(&url, &filtered);
        let mut listed = Vec::new();
        loop {
            match events.next().await.expect("events") {
                Ok(Event::InitApply(pod)) => listed.push(pod.metadata.name.unwrap_or_default()),
                Ok(Event::InitDone) => break,
                Ok(_) => {}
                Err(err) => panic!("the list failed: {err}"),
            }
        }
        assert_eq!(listed, ["mine"]);
        assert_eq!(
            filtered.pods.dropped_of(pods::DropReason::NotControlled),
            40
        );
        assert_eq!(filtered.refused_total(), 0);
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
