//! The watch side of the list bounds: kube's watcher with the items of
//! each list counted (`--list-max-items`) and every failure, a refused
//! list included, followed by a backoff that the start of another list
//! does not reset.
//!
//! kube's `default_backoff` resets on any event, and a list that fails
//! restarts with `Init`, an event: a list refused every time would be
//! retried every 0.8 s for ever. Here the backoff (kube's default: 0.8 s
//! doubling to 30 s, with jitter, forgotten after 120 s without a failure)
//! is reset only by progress: a list that completes (`InitDone`) or a watch
//! event.
//!
//! Any other failure (the API server unreachable or restarting, a watch cut,
//! a resourceVersion expired) is retried sooner: 250 ms doubling to
//! [`MAX_RECONNECT_BACKOFF`] (2 s), so the caches show what happened during
//! an API server restart within about 2 s of it being back (a 410 Expired,
//! which a restarted server answers to an old watch, starts over at
//! 250 ms: the server is up), and the objects
//! whose events the outage held back are queued then. After a failure
//! with no answer at all (connection refused, reset or cut) the next try
//! is a fresh watcher, which lists before it watches: resuming from the
//! old resourceVersion, a restarted server kept the watch waiting until its
//! watch cache was ready and then answered 410 (see [`is_unanswered`]).
//! (kube's default
//! backoff had grown to 3–6 s over an 8 s restart, and the Jinghzhu watch
//! relisted 8 s after the server was back.) While the server is down that
//! costs it one refused connection per watch every 2 s.
//!
//! The items are counted as the watcher hands them over, one by one, to
//! the cache's buffer; at item `--list-max-items + 1` the watcher (with
//! what it still holds of its page) is dropped for a fresh one, and the
//! stream yields the refusal, on which the caches drop their buffer (see
//! [`crate::controller::watch`]).

use std::fmt::Debug;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::{Bound, ListBounds, refusal_in};

/// A watch event stream.
pub type Events<K> = Pin<Box<dyn Stream<Item = Result<Event<K>, watcher::Error>> + Send>>;

/// The longest wait before a refused list is tried again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The longest wait before a watch or list that failed for any other reason
/// (the API server unreachable, a watch cut, 410 Expired) is tried again.
pub const MAX_RECONNECT_BACKOFF: Duration = Duration::from_secs(2);

/// The first wait after such a failure.
const FIRST_RECONNECT_BACKOFF: Duration = Duration::from_millis(250);

/// A watch the API server ended with 410 Gone / Expired (its
/// resourceVersion is older than the server's history, as after a restart
/// or a compaction): the watcher lists again.
fn is_expired(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// A failure with no answer from the API server (a connection refused,
/// reset or cut): it may be restarting, and a restarted server answers a
/// watch resumed from an old resourceVersion only once its watch cache is
/// ready (here 3.5–4 s after `/readyz`, then 410 Expired, then a list).
/// So the watcher after such a failure is a fresh one, which lists first
/// (a consistent list: the server reads it from etcd until its cache is
/// ready) and watches from there.
fn is_unanswered(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(inner)
        | watcher::Error::WatchStartFailed(inner)
        | watcher::Error::WatchFailed(inner) => {
            matches!(
                inner,
                kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)
            )
        }
        _ => false,
    }
}

/// 250 ms doubling to [`MAX_RECONNECT_BACKOFF`], each wait up to 10% longer
/// at random (replicas that lost the server together do not come back in
/// step).
#[derive(Debug)]
struct Reconnect {
    next: Duration,
}

impl Default for Reconnect {
    fn default() -> Self {
        Self {
            next: FIRST_RECONNECT_BACKOFF,
        }
    }
}

impl Reconnect {
    fn next(&mut self) -> Duration {
        use std::hash::{BuildHasher, Hasher};
        let wait = self.next;
        self.next = (wait * 2).min(MAX_RECONNECT_BACKOFF);
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0);
        wait.mul_f64(1.0 + (hasher.finish() % 1000) as f64 / 10_000.0)
    }

    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// kube's `watcher(api, config)` with its lists' items bounded by
/// `bounds` and a backoff after each failure (in place of
/// `.default_backoff()`).
pub fn bounded_watcher<K>(api: Api<K>, config: watcher::Config, bounds: ListBounds) -> Events<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let resource = K::plural(&K::DynamicType::default()).into_owned();
    let start: Box<dyn Fn() -> Events<K> + Send> =
        Box::new(move || Box::pin(watcher(api.clone(), config.clone())));
    bounded(start, resource, bounds)
}

/// [`bounded_watcher`] over the watchers `start` makes (one at first, a
/// fresh one after each list abandoned for its items).
pub fn bounded<K: Send + 'static>(
    start: Box<dyn Fn() -> Events<K> + Send>,
    resource: String,
    bounds: ListBounds,
) -> Events<K> {
    let state = Bounded {
        current: start(),
        start,
        resource,
        bounds,
        items: 0,
        backoff: DefaultBackoff::default(),
        reconnect: Reconnect::default(),
        wait: None,
        start_over: false,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        if let Some(wait) = state.wait.take() {
            tokio::time::sleep(wait).await;
        }
        if std::mem::take(&mut state.start_over) {
            state.current = (state.start)();
            state.items = 0;
        }
        let item = state.current.next().await?;
        let item = state.observe(item);
        Some((item, state))
    }))
}

struct Bounded<K> {
    current: Events<K>,
    start: Box<dyn Fn() -> Events<K> + Send>,
    resource: String,
    bounds: ListBounds,
    /// Items of the list under way.
    items: u64,
    backoff: DefaultBackoff,
    /// After any other failure.
    reconnect: Reconnect,
    /// Before the next poll.
    wait: Option<Duration>,
    /// The next poll is a fresh watcher's (see [`is_unanswered`]).
    start_over: bool,
}

impl<K> Bounded<K> {
    /// Counts `item`, or abandons the list it takes past the bound.
    fn observe(
        &mut self,
        item: Result<Event<K>, watcher::Error>,
    ) -> Result<Event<K>, watcher::Error> {
        match &item {
            Ok(Event::Init) => self.items = 0,
            Ok(Event::InitApply(_)) => {
                self.items += 1;
                let max = self.bounds.limit(&self.resource, Bound::Items).0;
                if max > 0 && self.items > max {
                    return Err(self.abandon());
                }
            }
            Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => {
                self.backoff.reset();
                self.reconnect.reset();
            }
            // A refusal in the client was reported there.
            Err(err) if refusal_in(err).is_some() => self.back_off(),
            Err(err) => {
                if is_expired(err) {
                    // The server is up and says: list again. Nothing to
                    // wait out (a server that says it every time is paced
                    // at 250 ms, as one whose lists complete would be).
                    self.reconnect.reset();
                }
                self.start_over = is_unanswered(err);
                let wait = self.reconnect.next();
                tracing::debug!(resource = %self.resource, wait_ms = wait.as_millis() as u64, "watch: failed; trying again shortly");
                self.wait = Some(wait);
            }
        }
        item
    }

    /// Drops the watcher (and its buffered page) for a fresh one, tried
    /// after the backoff.
    fn abandon(&mut self) -> watcher::Error {
        let refused = self
            .bounds
            .refuse(self.bounds.refusal(&self.resource, Bound::Items));
        self.current = (self.start)();
        self.items = 0;
        self.back_off();
        watcher::Error::InitialListFailed(kube::Error::Service(Box::new(refused)))
    }

    fn back_off(&mut self) {
        let wait = self.backoff.next().unwrap_or(MAX_BACKOFF).min(MAX_BACKOFF);
        tracing::debug!(resource = %self.resource, wait_ms = wait.as_millis() as u64, "watch: failed; trying again after a backoff");
        self.wait = Some(wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_api::list_bounds::{ListLimits, refusal_in};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Item = Result<Event<u32>, watcher::Error>;

    /// Watchers that each list forever, one item at a time (a new
    /// `continue` every page); counts the watchers made.
    fn endless(started: Arc<AtomicUsize>) -> Box<dyn Fn() -> Events<u32> + Send> {
        Box::new(move || {
            started.fetch_add(1, Ordering::SeqCst);
            let items = futures::stream::iter(0u32..).map(|i| Ok(Event::InitApply(i)));
            Box::pin(futures::stream::once(async { Ok(Event::Init) }).chain(items))
        })
    }

    fn bounds(max_items: u64) -> ListBounds {
        ListBounds::new(
            ListLimits {
                max_items,
                ..ListLimits::unbounded()
            },
            Default::default(),
        )
    }

    fn is_items_refusal(item: &Item) -> bool {
        matches!(item, Err(err) if refusal_in(err).is_some_and(|r| r.bound == Bound::Items))
    }

    #[tokio::test(start_paused = true)]
    async fn an_endless_list_is_abandoned_at_the_bound_and_retried_with_growing_waits() {
        let started = Arc::new(AtomicUsize::new(0));
        let bounds = bounds(1000);
        let mut events = bounded(endless(started.clone()), "pods".into(), bounds.clone());
        let mut refused_at = Vec::new();
        let began = tokio::time::Instant::now();
        while refused_at.len() < 6 {
            let mut items = 0;
            assert!(matches!(events.next().await, Some(Ok(Event::Init))));
            loop {
                let item = events.next().await.expect("endless");
                if is_items_refusal(&item) {
                    break;
                }
                assert!(matches!(item, Ok(Event::InitApply(_))));
                items += 1;
            }
            assert_eq!(items, 1000, "items handed over before the refusal");
            refused_at.push(began.elapsed());
        }
        // The first watcher, and a fresh one after each refusal.
        assert_eq!(started.load(Ordering::SeqCst), 7);
        assert_eq!(bounds.refused_of("pods", Bound::Items), 6);
        // The waits between the refusals grow (0.8 s doubling, with jitter)
        // though each retry starts with `Init`, and stay under the cap.
        let waits: Vec<Duration> = refused_at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(waits.windows(2).all(|w| w[1] > w[0]), "{waits:?}");
        assert!(waits[0] >= Duration::from_millis(800), "{waits:?}");
        assert!(waits.iter().all(|w| *w <= MAX_BACKOFF), "{waits:?}");
    }

    fn failure() -> Item {
        Err(watcher::Error::InitialListFailed(kube::Error::Service(
            "refused".into(),
        )))
    }

    #[tokio::test(start_paused = true)]
    async fn reconnects_wait_at_most_two_seconds() {
        let script: Box<dyn Fn() -> Events<u32> + Send> =
            Box::new(|| Box::pin(futures::stream::iter((0..8).map(|_| failure()))));
        let mut events = bounded(script, "pods".into(), bounds(0));
        let mut at = vec![tokio::time::Instant::now()];
        for _ in 0..8 {
            let _ = events.next().await.expect("scripted");
            at.push(tokio::time::Instant::now());
        }
        let waits: Vec<Duration> = at.windows(2).skip(1).map(|w| w[1] - w[0]).collect();
        assert!(waits[0] >= FIRST_RECONNECT_BACKOFF, "{waits:?}");
        assert!(
            waits
                .iter()
                .all(|w| *w <= MAX_RECONNECT_BACKOFF.mul_f64(1.1)),
            "{waits:?}"
        );
        assert!(waits[6] >= MAX_RECONNECT_BACKOFF, "{waits:?}");
    }

    /// A failure the API server answered (500).
    fn answered() -> Item {
        Err(watcher::Error::InitialListFailed(kube::Error::Api(
            Box::new(
                kube::core::Status::failure("etcdserver: request timed out", "InternalError")
                    .with_code(500),
            ),
        )))
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_without_an_answer_starts_a_fresh_watcher_and_an_answered_one_does_not() {
        let started = Arc::new(AtomicUsize::new(0));
        let counted = started.clone();
        let script: Box<dyn Fn() -> Events<u32> + Send> = Box::new(move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            // The first watcher: answered failures, then one unanswered;
            // the next: a list.
            let items = if n == 0 {
                vec![answered(), answered(), failure(), Ok(Event::Init)]
            } else {
                vec![
                    Ok(Event::Init),
                    Ok(Event::InitApply(7)),
                    Ok(Event::InitDone),
                ]
            };
            Box::pin(futures::stream::iter(items).chain(futures::stream::pending()))
        });
        let mut events = bounded(script, "pods".into(), bounds(0));
        for _ in 0..3 {
            let _ = events.next().await.expect("scripted");
        }
        assert_eq!(
            started.load(Ordering::SeqCst),
            1,
            "answered failures keep the watcher"
        );
        assert!(matches!(events.next().await, Some(Ok(Event::Init))));
        assert!(matches!(events.next().await, Some(Ok(Event::InitApply(7)))));
        assert_eq!(started.load(Ordering::SeqCst), 2, "a fresh watcher lists");
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_completed_list_resets_the_backoff() {
        // Three failed lists (each restarting with `Init`), one that
        // completes, one more failure, then a watch event.
        let script: Box<dyn Fn() -> Events<u32> + Send> = Box::new(|| {
            let items = [
                Ok(Event::Init),
                answered(),
                Ok(Event::Init),
                answered(),
                Ok(Event::Init),
                answered(),
                Ok(Event::Init),
                Ok(Event::InitApply(1)),
                Ok(Event::InitDone),
                answered(),
                Ok(Event::Apply(2)),
            ];
            Box::pin(futures::stream::iter(items).chain(futures::stream::pending()))
        });
        let mut events = bounded(script, "pods".into(), bounds(0));
        let mut at = Vec::new();
        let began = tokio::time::Instant::now();
        for _ in 0..11 {
            let _ = events.next().await.expect("scripted");
            at.push(began.elapsed());
        }
        // Waits after each failure (not a refusal: the reconnect
        // backoff): [0.25, 0.275), [0.5, 0.55), [1, 1.1) s, then, the list
        // completed, [0.25, 0.275) s again.
        let after = |i: usize| at[i + 1] - at[i];
        assert!(after(1) >= Duration::from_millis(250), "{at:?}");
        assert!(after(3) >= Duration::from_millis(500), "{at:?}");
        assert!(after(5) >= Duration::from_millis(1000), "{at:?}");
        assert!(after(5) < Duration::from_millis(1100), "{at:?}");
        assert!(after(9) < Duration::from_millis(500), "{at:?}");
        assert!(after(9) >= Duration::from_millis(250), "{at:?}");
    }
}
