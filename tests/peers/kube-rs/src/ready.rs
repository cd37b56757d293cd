//! A gate every reconcile awaits until the pod cache has had its initial
//! list, so no reconcile acts on a partial pod list (that is how restarts
//! over-create). kube's `Store::wait_until_ready` wakes only the task that
//! polled it last, so concurrent waiters share one polled future.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;

/// Resolves for every waiter once the store has been listed once.
#[derive(Clone)]
pub struct CacheReady(Shared<BoxFuture<'static, bool>>);

/// The cache's watch ended before its first list.
#[derive(Debug)]
pub struct CacheStopped;

impl CacheReady {
    /// A gate on `store`'s initial list.
    pub fn new(store: &Store<Pod>) -> Self {
        let store = store.clone();
        Self(
            async move { store.wait_until_ready().await.is_ok() }
                .boxed()
                .shared(),
        )
    }

    /// Waits until the cache has been listed once.
    pub async fn wait(&self) -> Result<(), CacheStopped> {
        if self.0.clone().await {
            Ok(())
        } else {
            Err(CacheStopped)
        }
    }
}
