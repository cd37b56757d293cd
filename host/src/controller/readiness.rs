//! A readiness gate on a cache that any number of reconciles can await at once.
//!
//! kube's `Store::wait_until_ready` resolves through a single oneshot
//! receiver, which keeps only the waker of the task that polled it last: when
//! several reconciles wait on it concurrently, only one is woken when the
//! cache fills and the others stay parked — each holding a worker slot — until
//! something unrelated wakes them. With four workers that stalls the whole
//! controller. [`CacheReady`] polls that future from one place
//! ([`futures::future::Shared`]) and wakes every waiter.
//!
//! ```
//! # async fn demo() {
//! use k8s_openapi::api::core::v1::Pod;
//! use kube::runtime::reflector;
//! use wasm_operator::controller::readiness::CacheReady;
//!
//! let (store, _writer) = reflector::store::<Pod>();
//! let ready = CacheReady::new(&store);
//! // In each reconcile: ready.wait().await?;
//! # let _ = ready;
//! # }
//! ```

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::WriterDropped;

/// Resolves for every waiter once the store has had its initial list.
#[derive(Clone)]
pub struct CacheReady {
    ready: Shared<BoxFuture<'static, bool>>,
}

/// How often a waiter looks at the store again (see [`CacheReady::new`]).
const RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// The cache's writer went away before the initial list (its watch stream ended).
#[derive(Debug, thiserror::Error)]
#[error("the cache stopped before its initial list was complete")]
pub struct CacheStopped;

impl CacheReady {
    /// A gate on `store`'s initial list.
    pub fn new<K>(store: &Store<K>) -> Self
    where
        K: kube::Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let store = store.clone();
        let ready = async move {
            // kube's `Store::wait_until_ready` wakes only the most recently
            // registered waiter (a oneshot underneath), and kube's own
            // `Controller` waits on the same store: poll again every tick so
            // this waiter is never the one left asleep.
            loop {
                let wait = store.wait_until_ready();
                match tokio::time::timeout(RECHECK, wait).await {
                    Ok(result) => {
                        let result: Result<(), WriterDropped> = result;
                        break result.is_ok();
                    }
                    Err(_elapsed) => continue,
                }
            }
        }
        .boxed()
        .shared();
        Self { ready }
    }

    /// Waits until the cache has been listed once.
    pub async fn wait(&self) -> Result<(), CacheStopped> {
        if self.ready.clone().await {
            Ok(())
        } else {
            Err(CacheStopped)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::reflector;
    use kube::runtime::watcher;

    use super::*;

    #[tokio::test]
    async fn every_concurrent_waiter_is_released_when_the_cache_fills() {
        let (store, mut writer) = reflector::store::<Pod>();
        let gate = CacheReady::new(&store);
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.wait().await })
            })
            .collect();
        // Let every waiter register before the cache fills.
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for waiter in waiters {
            let released = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("a waiter was left parked after the cache filled")
                .expect("waiter task");
            assert!(released.is_ok());
        }
    }

    /// kube's `Controller` waits on the same store; its waker must not
    /// replace ours for good (this hung `/readyz` forever).
    #[tokio::test]
    async fn a_waiter_is_released_when_someone_else_also_waits_on_the_store() {
        let (store, mut writer) = reflector::store::<Pod>();
        let gate = CacheReady::new(&store);
        let ours = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let theirs = tokio::spawn({
            let store = store.clone();
            async move { store.wait_until_ready().await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let released = tokio::time::timeout(Duration::from_secs(5), ours)
            .await
            .expect("our waiter was left parked")
            .expect("waiter task");
        assert!(released.is_ok());
        assert!(theirs.await.expect("their task"));
    }

    #[tokio::test]
    async fn waiters_learn_when_the_cache_stops_before_its_initial_list() {
        let (store, writer) = reflector::store::<Pod>();
        let gate = CacheReady::new(&store);
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(writer);
        let result = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("waiter released")
            .expect("waiter task");
        assert!(result.is_err());
    }
}
