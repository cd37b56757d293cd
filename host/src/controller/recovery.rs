//! Prompt recovery after an API server outage.
//!
//! An object whose reconcile failed because the API server could not be
//! reached (no HTTP answer: the connection refused, reset or timed out; see
//! [`crate::apply::ApplyError::is_unreachable`]), or whose unknown creates
//! could not be settled by a read, is *stranded*: its failure says nothing
//! about the object, only about the server. Such an object
//! - is requeued after at most [`OUTAGE_RETRY`]: an outage's failures never
//!   grow its backoff past that (the per-object backoff doubles from 5 ms,
//!   so ten failures in a row during a restart would otherwise wait 5 s);
//! - is queued again *at once*, its backoff reset, when the outage ends:
//!   while any object is stranded, [`Recovery`] probes the API server's
//!   `/readyz` every [`PROBE_EVERY`]; once a probe has failed (the server is
//!   down) the first one that succeeds releases them all (the workers then
//!   take them in turn).
//!
//! A probe that succeeds before any failed means the server was never down
//! for the probe (the outage was shorter than a probe, or only some
//! requests fail, as behind a proxy dropping connections): the stranded
//! objects are left to their own backoff, capped as above, and nothing is
//! reset, so a fault that hits some requests only never turns into a hot
//! loop. Answers (429, 5xx) never strand an object: the server is up and
//! the object's backoff spaces its retries as the server asked.
//!
//! Without this, objects whose writes met a restarting API server sat out
//! backoffs of 10 s and more after it was back (issue 43's third case).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use kube::Client;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use super::PerObject;
use crate::crd::Jinghzhu;
use crate::locks::MutexExt;

/// The longest a stranded object waits before it is tried again, however
/// many times the outage failed it.
pub const OUTAGE_RETRY: Duration = Duration::from_secs(2);

/// How often the API server is probed while objects are stranded.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// The stranded objects, by UID.
#[derive(Debug, Default)]
pub struct Recovery {
    stranded: Mutex<HashMap<String, ObjectRef<Jinghzhu>>>,
    wake: Notify,
}

impl Recovery {
    /// Records that the object `uid` (`object`) failed because the API
    /// server could not be reached; returns how long it waits at most.
    pub fn strand(&self, uid: &str, object: ObjectRef<Jinghzhu>) -> Duration {
        self.lock().insert(uid.to_string(), object);
        self.wake.notify_one();
        OUTAGE_RETRY
    }

    /// How many objects are stranded now.
    pub fn stranded(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ObjectRef<Jinghzhu>>> {
        self.stranded.lock_unpoisoned()
    }

    /// Takes every stranded object, forgetting its failures in `objects`.
    fn release(&self, objects: &PerObject) -> Vec<ObjectRef<Jinghzhu>> {
        let released: Vec<_> = self.lock().drain().collect();
        released
            .into_iter()
            .map(|(uid, object)| {
                objects.backoff.succeeded(&uid);
                object
            })
            .collect()
    }

    /// The objects to queue again: each batch of stranded objects once an
    /// outage ends (the API server's `/readyz`, probed through `client` every
    /// [`PROBE_EVERY`] while any is stranded, failed and then answers).
    pub fn requeues(
        self: Arc<Self>,
        client: Client,
        objects: Arc<PerObject>,
    ) -> impl Stream<Item = ObjectRef<Jinghzhu>> + Send + 'static {
        let batches = futures::stream::unfold(
            (self, client, objects),
            |(recovery, client, objects)| async move {
                let released = recovery.next_release(&client, &objects).await;
                Some((released, (recovery, client, objects)))
            },
        );
        futures::StreamExt::flat_map(batches, futures::stream::iter)
    }

    /// Waits for the end of the next outage that strands objects, and
    /// returns them (their backoff forgotten).
    async fn next_release(&self, client: &Client, objects: &PerObject) -> Vec<ObjectRef<Jinghzhu>> {
        let mut down = false;
        loop {
            if self.stranded() == 0 {
                self.wake.notified().await;
                continue;
            }
            let up = answers(client).await;
            if up && down {
                let released = self.release(objects);
                tracing::info!(
                    objects = released.len(),
                    "the API server answers again: objects whose writes could not reach it are queued now"
                );
                return released;
            }
            if up {
                // Not an outage the probe saw: the objects' own (capped)
                // backoff brings them back.
                self.lock().clear();
            }
            down = !up;
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }
}

/// Whether the API server says it is ready (`GET /readyz` answered 200).
async fn answers(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    match tokio::time::timeout(Duration::from_secs(2), client.request_text(request)).await {
        Ok(Ok(_)) => true,
        Ok(Err(err)) => {
            tracing::trace!(error = %err, "the API server does not answer yet");
            false
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stranded_object_is_released_once_with_its_backoff_forgotten() {
        let objects = PerObject::new(Duration::from_secs(300), Default::default(), Duration::ZERO);
        for _ in 0..10 {
            objects.backoff.failed("u1");
        }
        let recovery = Recovery::default();
        assert_eq!(
            recovery.strand("u1", ObjectRef::new("a").within("ns")),
            OUTAGE_RETRY
        );
        recovery.strand("u1", ObjectRef::new("a").within("ns"));
        recovery.strand("u2", ObjectRef::new("b").within("ns"));
        assert_eq!(recovery.stranded(), 2, "one entry per object");
        let mut released = recovery.release(&objects);
        released.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            released,
            vec![
                ObjectRef::new("a").within("ns"),
                ObjectRef::new("b").within("ns")
            ]
        );
        assert_eq!(objects.backoff.failures("u1"), 0, "backoff reset");
        assert_eq!(recovery.stranded(), 0);
        assert!(recovery.release(&objects).is_empty());
    }
}
