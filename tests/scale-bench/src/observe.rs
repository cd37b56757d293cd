//! The harness's own view of the cluster: a watch (reflector cache) of the
//! benchmark namespace's Jinghzhus and Pods, independent of the controller
//! under test, and the questions the benchmark asks of it — has every object
//! converged, has one object caught up with an edit, are all pods gone.
//!
//! The watches are opened before the measured window, so they add no
//! requests to it (a watch is counted by the API server when it ends).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;
use wasm_operator::crd::Jinghzhu;
// A pod counts when it is neither terminating nor finished, as for the host.
use wasm_operator::observed::{is_live, is_ready};

/// How many times its own cost a poll of [`Observer::poll_until`] waits
/// at least before the next.
pub const POLL_COST_FACTOR: u32 = 20;

/// Watches of one namespace.
pub struct Observer {
    jinghzhus: Store<Jinghzhu>,
    pods: Store<Pod>,
    changed: Arc<Notify>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Counts over the namespace at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    /// Jinghzhus.
    pub objects: usize,
    /// Jinghzhus whose status reports exactly their live pods (see [`converged`]).
    pub converged: usize,
    /// Live pods (not terminating, not finished) controlled by a Jinghzhu.
    pub live_pods: usize,
    /// The sum of `spec.desired`.
    pub desired_pods: usize,
    /// Every pod, terminating ones included.
    pub pods: usize,
}

impl Census {
    /// True when there are `objects` Jinghzhus, all converged, and exactly
    /// as many live pods as they desire.
    pub fn all_converged(&self, objects: usize) -> bool {
        self.objects == objects && self.converged == objects && self.live_pods == self.desired_pods
    }
}

/// True when a pod is Running and its Ready condition is True.
fn is_running_and_ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && is_ready(pod)
}

/// The uid of the pod's controller, if any.
fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// True when `jz` has exactly `desired` live pods (`live`, names sorted) and
/// its status says so: `current`, `podList`, state `Running`, and
/// `observedGeneration` equal to its generation.
pub fn converged(jz: &Jinghzhu, live: &[&str]) -> bool {
    let desired = jz.spec.desired as usize;
    let Some(status) = &jz.status else {
        return false;
    };
    live.len() == desired
        && status.current as usize == desired
        && status.state == "Running"
        && status.observed_generation == jz.metadata.generation
        && status.pod_list.len() == live.len()
        && status.pod_list.iter().zip(live).all(|(a, b)| a == b)
}

impl Observer {
    /// Starts watching `namespace` and waits for both initial lists.
    pub async fn start(client: &Client, namespace: &str) -> Result<Self> {
        let changed = Arc::new(Notify::new());
        let (jinghzhus, jz_writer) = reflector::store();
        let (pods, pod_writer) = reflector::store();
        let jz_stream = watcher(
            Api::<Jinghzhu>::namespaced(client.clone(), namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|jz: &mut Jinghzhu| jz.managed_fields_mut().clear())
        .reflect(jz_writer);
        let pod_stream = watcher(
            Api::<Pod>::namespaced(client.clone(), namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|pod: &mut Pod| {
            pod.managed_fields_mut().clear();
            pod.spec = None;
        })
        .reflect(pod_writer);
        let tasks = vec![
            tokio::spawn(drive(jz_stream, changed.clone())),
            tokio::spawn(drive(pod_stream, changed.clone())),
        ];
        let observer = Self {
            jinghzhus,
            pods,
            changed,
            tasks,
        };
        let ready = async {
            observer.jinghzhus.wait_until_ready().await?;
            observer.pods.wait_until_ready().await
        };
        match tokio::time::timeout(Duration::from_secs(60), ready).await {
            Ok(Ok(())) => Ok(observer),
            Ok(Err(_)) => bail!("the harness's watch stopped before its first list"),
            Err(_) => bail!("the harness's watches did not list within 60 s"),
        }
    }

    /// Counts everything now.
    pub fn census(&self) -> Census {
        let pods = self.pods.state();
        let mut live: HashMap<&str, Vec<&str>> = HashMap::new();
        let mut census = Census {
            pods: pods.len(),
            ..Census::default()
        };
        for pod in pods.iter().filter(|p| is_live(p)) {
            if let Some(uid) = controller_uid(pod) {
                live.entry(uid)
                    .or_default()
                    .push(pod.metadata.name.as_deref().unwrap_or_default());
            }
        }
        let jinghzhus = self.jinghzhus.state();
        census.objects = jinghzhus.len();
        for jz in &jinghzhus {
            census.desired_pods += jz.spec.desired as usize;
            let mut names = jz
                .metadata
                .uid
                .as_deref()
                .and_then(|uid| live.get(uid))
                .cloned()
                .unwrap_or_default();
            census.live_pods += names.len();
            names.sort_unstable();
            if converged(jz, &names) {
                census.converged += 1;
            }
        }
        census
    }

    /// The UID of the Jinghzhu `name`, if it is in the cache.
    pub fn uid_of(&self, name: &str) -> Option<String> {
        self.jinghzhus
            .state()
            .into_iter()
            .find(|jz| jz.metadata.name.as_deref() == Some(name))
            .and_then(|jz| jz.metadata.uid.clone())
    }

    /// The live pods controlled by the Jinghzhu with `uid`: name, and
    /// whether it is Running and Ready.
    pub fn live_pods_of(&self, uid: &str) -> Vec<(String, bool)> {
        self.pods
            .state()
            .iter()
            .filter(|p| is_live(p) && controller_uid(p) == Some(uid))
            .map(|p| (p.name_any(), is_running_and_ready(p)))
            .collect()
    }

    /// True when the Jinghzhu `name` has converged at generation `generation` or later.
    pub fn object_converged(&self, name: &str, generation: i64) -> bool {
        let Some(jz) = self
            .jinghzhus
            .state()
            .into_iter()
            .find(|jz| jz.metadata.name.as_deref() == Some(name))
        else {
            return false;
        };
        if jz.metadata.generation.unwrap_or_default() < generation {
            return false;
        }
        let Some(uid) = jz.metadata.uid.as_deref() else {
            return false;
        };
        let pods = self.live_pods_of(uid);
        let mut names: Vec<&str> = pods.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        converged(&jz, &names)
    }

    /// Polls `done` every `every` until it holds; returns when it first did.
    ///
    /// A check that looks at every object costs O(N), so polling it at a
    /// fixed pace made the harness's own CPU grow as N² (at N = 3000 it
    /// took 21 CPU-seconds of a saturated 2-core machine, 9.6× its
    /// N = 1000 figure): the wait after each check is at least
    /// [`POLL_COST_FACTOR`] times what the check took, so the harness keeps
    /// to about 1/POLL_COST_FACTOR of a core whatever N is.
    pub async fn poll_until(
        &self,
        what: &str,
        every: Duration,
        timeout: Duration,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let checked = Instant::now();
            if done(self) {
                return Ok(Instant::now());
            }
            let cost = checked.elapsed();
            tokio::time::sleep(every.max(cost * POLL_COST_FACTOR)).await;
            if Instant::now() > deadline {
                bail!(
                    "{what} did not happen within {timeout:?}; now: {:?}",
                    self.census()
                );
            }
        }
    }

    /// Checks `done` after every watch event until it holds; returns when it
    /// first did (for latencies: no polling interval in the figure).
    pub async fn wait_event_until(
        &self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            if done(self) {
                return Ok(Instant::now());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, changed).await.is_err() {
                bail!(
                    "{what} did not happen within {timeout:?}; now: {:?}",
                    self.census()
                );
            }
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn drive<S, K>(stream: S, changed: Arc<Notify>)
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        if let Err(err) = event {
            tracing::debug!(error = %err, "harness watch error (retrying)");
        }
        changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use wasm_operator::crd::JinghzhuStatus;

    use super::*;

    fn jinghzhu(desired: u32, status: Option<JinghzhuStatus>) -> Jinghzhu {
        let mut jz = wasm_operator_testkit::jinghzhu("a")
            .desired(desired)
            .generation(2)
            .build();
        jz.status = status;
        jz
    }

    fn status(pods: &[&str], generation: i64) -> JinghzhuStatus {
        JinghzhuStatus {
            current: pods.len() as u32,
            pod_list: pods.iter().map(|p| p.to_string()).collect(),
            state: "Running".into(),
            message: String::new(),
            observed_generation: Some(generation),
            ready_replicas: None,
            reconciled_by: None,
        }
    }

    #[test]
    fn converged_needs_the_exact_pods_in_a_current_status() {
        assert!(converged(
            &jinghzhu(2, Some(status(&["a-1", "a-2"], 2))),
            &["a-1", "a-2"]
        ));
        assert!(!converged(&jinghzhu(2, None), &["a-1", "a-2"]));
        assert!(!converged(
            &jinghzhu(2, Some(status(&["a-1", "a-2"], 1))),
            &["a-1", "a-2"]
        ));
        assert!(!converged(
            &jinghzhu(2, Some(status(&["a-1", "a-3"], 2))),
            &["a-1", "a-2"]
        ));
        assert!(!converged(
            &jinghzhu(3, Some(status(&["a-1", "a-2"], 2))),
            &["a-1", "a-2"]
        ));
        assert!(!converged(
            &jinghzhu(1, Some(status(&["a-1"], 2))),
            &["a-1", "a-2"]
        ));
    }

    #[test]
    fn all_converged_needs_every_object_and_the_exact_pod_total() {
        let census = Census {
            objects: 3,
            converged: 3,
            live_pods: 9,
            desired_pods: 9,
            pods: 9,
        };
        assert!(census.all_converged(3));
        assert!(!census.all_converged(4));
        assert!(
            !Census {
                live_pods: 10,
                ..census
            }
            .all_converged(3)
        );
        assert!(
            !Census {
                converged: 2,
                ..census
            }
            .all_converged(3)
        );
    }
}
