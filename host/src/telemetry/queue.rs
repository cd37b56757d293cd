//! The workqueue's metrics (`workqueue_*`, client-go's names), observed
//! from outside kube-runtime's scheduler, which exposes none: which keys
//! wait, since when, and which a worker holds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::CONTROLLER_NAME;
use super::HistogramFamily;
use crate::locks::MutexExt;

/// `{name,controller}` of the workqueue metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue's name (controller-runtime uses the controller's name).
    pub name: String,
    /// The controller's name.
    pub controller: String,
}

/// controller-runtime's workqueue buckets: `ExponentialBuckets(10e-9, 10, 12)`.
fn workqueue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// The workqueue metrics, observed from outside kube-runtime's scheduler
/// (which exposes none):
///
/// - `workqueue_adds_total`: every trigger (a Jinghzhu event, an event of a
///   pod it controls, a re-queue of everything after a swap or a takeover).
///   *Approximation*: client-go does not count an add of a key already
///   waiting; here every trigger counts. Timed re-queues (`requeue_after`,
///   backoff) are not counted.
/// - `workqueue_depth`: keys triggered and not yet taken by a worker, of
///   objects the controller still has (a key whose object was deleted, or
///   left this replica's shards, is dropped: see
///   [`QueueTracker::track_liveness`]).
///   *Approximation*: keys waiting on a timer are not in it (as in client-go,
///   whose delaying queue adds them only when due), and kube-runtime's
///   debounce is not visible.
/// - `workqueue_queue_duration_seconds`: from a key's first trigger to a
///   worker taking it (on a standby this includes the time until it leads).
/// - `workqueue_work_duration_seconds`: how long a worker spent on a key.
/// - `workqueue_retries_total`: reconciles that failed and were re-queued
///   with backoff (client-go's `AddRateLimited`). Exact.
/// - `workqueue_unfinished_work_seconds` and
///   `workqueue_longest_running_processor_seconds`: computed at scrape time
///   from the reconciles running then. Exact.
#[derive(Debug)]
pub struct QueueTracker {
    /// `workqueue_adds_total`.
    pub adds: Family<QueueLabels, Counter>,
    /// `workqueue_retries_total`.
    pub retries: Family<QueueLabels, Counter>,
    /// `workqueue_queue_duration_seconds`.
    pub queue_duration: HistogramFamily<QueueLabels>,
    /// `workqueue_work_duration_seconds`.
    pub work_duration: HistogramFamily<QueueLabels>,
    state: Mutex<QueueState>,
    /// Whether a waiting key's object is still the controller's.
    live: std::sync::OnceLock<Liveness>,
}

/// Says whether the object of a `namespace/name` key is still one the
/// controller may reconcile (it is in its cache).
pub struct Liveness(Box<dyn Fn(&str) -> bool + Send + Sync>);

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Liveness(..)")
    }
}

#[derive(Debug, Default)]
struct QueueState {
    /// Since when each key waits, and its shard when the host is sharded.
    waiting: HashMap<String, (Instant, Option<u32>)>,
    running: HashMap<u64, Instant>,
    next_id: u64,
    /// `--shards`, once the controller says so (0: unsharded).
    shard_count: u32,
    /// When the keys of gone objects were last dropped.
    pruned_at: Option<Instant>,
}

/// How often the waiting keys are checked for objects that are gone.
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// `{shard}` of `wasm_operator_shard_queue_depth`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardQueueLabels {
    shard: String,
}

/// A reconcile in progress, for the workqueue metrics.
#[derive(Debug)]
pub struct WorkToken(u64);

impl Default for QueueTracker {
    fn default() -> Self {
        Self {
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(workqueue_histogram),
            work_duration: Family::new_with_constructor(workqueue_histogram),
            state: Mutex::new(QueueState::default()),
            live: std::sync::OnceLock::new(),
        }
    }
}

impl QueueTracker {
    pub(super) fn labels(&self) -> QueueLabels {
        QueueLabels {
            name: CONTROLLER_NAME.to_string(),
            controller: CONTROLLER_NAME.to_string(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock_unpoisoned()
    }

    /// `key` was triggered.
    pub fn added(&self, key: String) {
        self.added_in_shard(key, None);
    }

    /// `key`, an object of `shard`, was triggered.
    pub fn added_in_shard(&self, key: String, shard: Option<u32>) {
        self.adds.get_or_create(&self.labels()).inc();
        self.lock()
            .waiting
            .entry(key)
            .or_insert_with(|| (Instant::now(), shard));
    }

    /// The host runs with `count` shards: the depth is also exported per
    /// shard (`wasm_operator_shard_queue_depth{shard}`, every shard, 0 when
    /// none of its keys waits).
    pub fn set_shard_count(&self, count: u32) {
        self.lock().shard_count = count;
    }

    /// From now on, waiting keys whose object `live` says is gone are
    /// dropped when the depth is read: the controller never takes the key
    /// of a deleted object (or of one that left this replica's shards), so
    /// it would wait for good (300 objects created and deleted left a depth
    /// of 300). The first call wins.
    pub fn track_liveness(&self, live: impl Fn(&str) -> bool + Send + Sync + 'static) {
        let _ = self.live.set(Liveness(Box::new(live)));
    }

    /// The state, with the keys of gone objects dropped (looked at most
    /// once per [`PRUNE_EVERY`]: the depth is read on every pod batch).
    fn pruned(&self) -> std::sync::MutexGuard<'_, QueueState> {
        let mut state = self.lock();
        if let Some(Liveness(live)) = self.live.get()
            && state.pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY)
        {
            state.waiting.retain(|key, _| live(key));
            state.pruned_at = Some(Instant::now());
        }
        state
    }

    /// Keys waiting for a worker.
    pub fn depth(&self) -> usize {
        self.pruned().waiting.len()
    }

    pub(super) fn started(&self, key: &str) -> WorkToken {
        let mut state = self.lock();
        if let Some((since, _)) = state.waiting.remove(key) {
            self.queue_duration
                .get_or_create(&self.labels())
                .observe(since.elapsed().as_secs_f64());
        }
        state.next_id += 1;
        let id = state.next_id;
        state.running.insert(id, Instant::now());
        WorkToken(id)
    }

    pub(super) fn finished(&self, work: WorkToken, observe: bool) {
        let since = self.lock().running.remove(&work.0);
        if let (Some(since), true) = (since, observe) {
            self.work_duration
                .get_or_create(&self.labels())
                .observe(since.elapsed().as_secs_f64());
        }
    }
}

impl Collector for QueueTracker {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (depth, unfinished, longest, per_shard) = {
            let state = self.pruned();
            let now = Instant::now();
            let ages = state
                .running
                .values()
                .map(|s| now.duration_since(*s).as_secs_f64());
            let unfinished: f64 = ages.clone().sum();
            let longest = ages.fold(0.0_f64, f64::max);
            let mut per_shard = vec![0i64; state.shard_count as usize];
            for (_, shard) in state.waiting.values() {
                if let Some(depth) = shard.and_then(|s| per_shard.get_mut(s as usize)) {
                    *depth += 1;
                }
            }
            (state.waiting.len(), unfinished, longest, per_shard)
        };
        if !per_shard.is_empty() {
            let family = Family::<ShardQueueLabels, Gauge>::default();
            for (shard, depth) in per_shard.iter().enumerate() {
                family
                    .get_or_create(&ShardQueueLabels {
                        shard: shard.to_string(),
                    })
                    .set(*depth);
            }
            family.encode(encoder.encode_descriptor(
                "wasm_operator_shard_queue_depth",
                "Keys of each shard triggered and not yet taken by a worker",
                None,
                MetricType::Gauge,
            )?)?;
        }
        let labels = self.labels();
        let depth_family = Family::<QueueLabels, Gauge>::default();
        depth_family
            .get_or_create(&labels)
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
        depth_family.encode(encoder.encode_descriptor(
            "workqueue_depth",
            "Current depth of workqueue",
            None,
            MetricType::Gauge,
        )?)?;
        for (name, help, value) in [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
                unfinished,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                longest,
            ),
        ] {
            let family = Family::<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
            family.get_or_create(&labels).set(value);
            family.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}
