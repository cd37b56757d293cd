//! What the host measures, readable in-process (tests, logs) and exported in
//! the OpenMetrics text format on `--metrics-addr`.
//!
//! Three groups:
//! - controller-runtime's names and labels, so existing dashboards and alerts
//!   work: `controller_runtime_reconcile_total{controller,result}`,
//!   `controller_runtime_reconcile_errors_total`,
//!   `controller_runtime_terminal_reconcile_errors_total`,
//!   `controller_runtime_reconcile_time_seconds` (histogram, controller-runtime's
//!   buckets), `controller_runtime_max_concurrent_reconciles`,
//!   `controller_runtime_active_workers` (all `{controller}`), the `workqueue_*`
//!   family (`{name,controller}`; see [`super::queue::QueueTracker`] for which are
//!   approximations) and `leader_election_master_status{name}`;
//! - per plugin, in the spirit of Kubewarden's policy metrics:
//!   `wasm_operator_plugin_call_duration_seconds` (histogram) and
//!   `wasm_operator_plugin_call_outcomes_total{outcome}`, both labelled with
//!   the plugin's `plugin` (name), `version` and `digest`;
//! - the host's own `wasm_operator_*` counters.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use super::CONTROLLER_NAME;
use super::HistogramFamily;
pub use super::queue::{QueueTracker, WorkToken};
use crate::runtime::{LoadedPlugin, PluginError};

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
pub const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Buckets of plugin call durations: 50 µs (a small plugin) to 10 s (beyond any deadline).
pub const PLUGIN_CALL_BUCKETS: [f64; 17] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// Label set of per-plugin counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// Digest (`sha256:…`) of the plugin that ran.
    pub plugin: String,
}

/// `{verb,outcome}` of `wasm_operator_api_write_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteFailureLabels {
    /// `create`, `delete` or `patch_status`.
    pub verb: String,
    /// `not_sent`, `answered` or `maybe_sent` (see `apply::WriteOutcome`).
    pub outcome: String,
}

/// `{verb,hold}` of `wasm_operator_fenced_writes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FencedLabels {
    /// `create`, `delete`, `patch_status` or `label`.
    pub verb: String,
    /// What had lapsed: `leadership` or `shard`.
    pub hold: String,
}

/// `{resource,count}` of `wasm_operator_plugin_objects`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginObjectsLabels {
    /// The tenant `JinghzhuPlugin` (empty: the default plugin).
    pub resource: String,
    /// `selected` (its selector matches) or `served` (routed to it).
    pub count: String,
}

/// `{kind}` of `wasm_operator_watch_lists_total`: `jinghzhu` or `pod`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    /// The watched kind, lower case.
    pub kind: String,
}

/// `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why, as a short word.
    pub reason: String,
}

/// `{controller}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The controller's name ([`CONTROLLER_NAME`]).
    pub controller: String,
}

/// `{controller,outcome}` of `wasm_operator_declared_shadow_outcomes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowOutcomeLabels {
    /// The `PluginController`'s name.
    pub controller: String,
    /// `agreed`, `differed`, `refused`, `failed` or `dropped`.
    pub outcome: String,
}

/// `{controller,part}` of `wasm_operator_declared_shadow_differences_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowPartLabels {
    /// The `PluginController`'s name.
    pub controller: String,
    /// `creates`, `updates`, `deletes`, `status`, `events` or `requeue`.
    pub part: String,
}

/// `{controller,result}` of `controller_runtime_reconcile_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The controller's name.
    pub controller: String,
    /// `success`, `error`, `requeue` or `requeue_after`.
    pub result: String,
}

/// `{name}` of `leader_election_master_status` (the Lease name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    /// The Lease's name.
    pub name: String,
}

/// Which plugin ran: `{plugin,version,digest}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginCallLabels {
    /// The name the plugin reports.
    pub plugin: String,
    /// The version it reports.
    pub version: String,
    /// `sha256:…` of its bytes.
    pub digest: String,
}

/// `{plugin,version,digest,outcome}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginOutcomeLabels {
    /// The name the plugin reports.
    pub plugin: String,
    /// The version it reports.
    pub version: String,
    /// `sha256:…` of its bytes.
    pub digest: String,
    /// See [`PluginOutcome`].
    pub outcome: String,
}

fn reconcile_time_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

fn plugin_call_histogram() -> Histogram {
    Histogram::new(PLUGIN_CALL_BUCKETS)
}

/// Everything the host counts.
#[derive(Debug)]
pub struct Metrics {
    /// Reconciles started (including those that waited for the cache).
    pub reconciles: Counter,
    /// Reconciles skipped because the cache had not caught up with our writes.
    pub waited_for_cache: Counter,
    /// Lists each watch made: its first, and each relist (410 Gone after a
    /// compaction, or a restart for new shards); a resumed watch lists not.
    pub watch_lists: Family<WatchLabels, Counter>,
    /// Lists abandoned at a bound ([`crate::kube_api::list_bounds`]).
    pub list_refused: Family<crate::kube_api::list_bounds::ListRefusedLabels, Counter>,
    /// Pods the client left out of pod lists and watches, by reason
    /// ([`crate::kube_api::list_bounds::pods`]).
    pub pods_dropped: Family<crate::kube_api::list_bounds::pods::PodsDroppedLabels, Counter>,
    /// Plugin calls by plugin digest.
    pub plugin_calls: Family<PluginLabels, Counter>,
    /// Plugin calls that failed (trap, deadline, memory cap, returned error).
    pub plugin_errors: Family<PluginLabels, Counter>,
    /// Writes (creates, deletes, status) the accepted proposals of each
    /// plugin asked for, by digest.
    pub plugin_writes: Family<PluginLabels, Counter>,
    /// Plugin outputs rejected by validation.
    pub rejected_outputs: Counter,
    /// Failures talking to the API server while applying.
    pub apply_errors: Counter,
    /// Proposals held back because their object's write budget was spent.
    pub budget_exceeded: Counter,
    /// Controlled pods that lost their labels alive and were relabelled
    /// (not replaced); rule `pods/lost-labels`.
    pub pods_relabelled: Counter,
    /// Pods created.
    pub pods_created: Counter,
    /// Pods deleted.
    pub pods_deleted: Counter,
    /// Status patches written.
    pub status_patches: Counter,
    /// Status changes held for their object's coalescing window.
    pub status_held: Counter,
    /// Plugin swaps done / refused / rolled back.
    pub plugin_swaps: Counter,
    /// Plugin candidates refused.
    pub plugin_swaps_refused: Counter,
    /// Automatic rollbacks.
    pub plugin_rollbacks: Counter,
    /// Plugin candidates not swapped in: a newer one from the same
    /// flapping source took their place, or the flapping source settled on
    /// what the slot holds (rule `swap/flapping`).
    pub plugin_swaps_coalesced: Counter,
    /// Plugin sources found flapping (moving again within the quiet
    /// interval, beyond one swap back): their moves held (rule `swap/flapping`).
    pub plugin_source_flaps: Counter,
    /// 1 while a shadow plugin is configured.
    pub shadow_active: Gauge,
    /// Reconciles where the shadow plugin proposed something else.
    pub shadow_differences: Counter,
    /// Shadow calls not made because the shadow queue was full (issue 22).
    pub shadow_dropped: Counter,
    /// Shadow outputs that broke the output bounds (not compared).
    pub shadow_rejected: Counter,
    /// 1 while a vetted plugin serves; 0 after a refused start until a good one arrives.
    pub plugin_serving: Gauge,
    /// Events dropped because the Event queue was full.
    pub events_dropped: Counter,
    /// Objects whose reconciles are held back by pending expectations now.
    pub expectations_waiting: Gauge,
    /// Expectations given up on after `--expectations-timeout`.
    pub expectation_timeouts: Counter,
    /// Failed pod creates, deletes and status patches by verb and outcome.
    pub write_failures: Family<WriteFailureLabels, Counter>,
    /// Writes not sent because the leadership or shard they were for had
    /// lapsed on this host's clock (see `apply::fence`).
    pub fenced_writes: Family<FencedLabels, Counter>,
    /// Objects of this replica's cache each plugin selects and serves.
    pub plugin_objects: Family<PluginObjectsLabels, Gauge>,
    /// Other replicas' rollout figures the judge left out, by why.
    pub rollout_figures_ignored: Family<ReasonLabels, Counter>,
    /// `wasm_operator_declared_parent_entries{controller}`: what a declared
    /// controller keeps per parent between reconciles, all memories together.
    pub declared_parent_entries: Family<ControllerLabels, Gauge>,

    /// `controller_runtime_reconcile_total{controller,result}`.
    pub reconcile_total: Family<ResultLabels, Counter>,
    /// `controller_runtime_reconcile_errors_total{controller}`.
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    /// `controller_runtime_terminal_reconcile_errors_total{controller}`: errors not retried.
    pub terminal_reconcile_errors: Family<ControllerLabels, Counter>,
    /// `controller_runtime_reconcile_time_seconds{controller}`.
    pub reconcile_time: HistogramFamily<ControllerLabels>,
    /// `controller_runtime_max_concurrent_reconciles{controller}`.
    pub max_concurrent_reconciles: Family<ControllerLabels, Gauge>,
    /// `controller_runtime_active_workers{controller}`.
    pub active_workers: Family<ControllerLabels, Gauge>,
    /// The `workqueue_*` family.
    pub queue: std::sync::Arc<QueueTracker>,
    /// `leader_election_master_status{name}`: 1 while this host leads.
    pub leader_status: Family<LeaseLabels, Gauge>,
    /// `wasm_operator_plugin_call_duration_seconds{plugin,version,digest}`.
    pub plugin_call_duration: HistogramFamily<PluginCallLabels>,
    /// `wasm_operator_plugin_call_outcomes_total{plugin,version,digest,outcome}`.
    pub plugin_call_outcomes: Family<PluginOutcomeLabels, Counter>,
    /// `wasm_operator_declared_shadow_calls_total{controller}`.
    pub declared_shadow_calls: Family<ControllerLabels, Counter>,
    /// `wasm_operator_declared_shadow_outcomes_total{controller,outcome}`.
    pub declared_shadow_outcomes: Family<ShadowOutcomeLabels, Counter>,
    /// `wasm_operator_declared_shadow_differences_total{controller,part}`.
    pub declared_shadow_differences: Family<ShadowPartLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            waited_for_cache: Counter::default(),
            watch_lists: Family::default(),
            list_refused: Family::default(),
            pods_dropped: Family::default(),
            plugin_calls: Family::default(),
            plugin_errors: Family::default(),
            plugin_writes: Family::default(),
            rejected_outputs: Counter::default(),
            apply_errors: Counter::default(),
            pods_created: Counter::default(),
            pods_deleted: Counter::default(),
            status_patches: Counter::default(),
            status_held: Counter::default(),
            plugin_swaps: Counter::default(),
            plugin_swaps_refused: Counter::default(),
            plugin_rollbacks: Counter::default(),
            plugin_swaps_coalesced: Counter::default(),
            plugin_source_flaps: Counter::default(),
            shadow_active: Gauge::default(),
            shadow_differences: Counter::default(),
            shadow_dropped: Counter::default(),
            shadow_rejected: Counter::default(),
            plugin_serving: Gauge::default(),
            events_dropped: Counter::default(),
            expectations_waiting: Gauge::default(),
            expectation_timeouts: Counter::default(),
            write_failures: Family::default(),
            fenced_writes: Family::default(),
            plugin_objects: Family::default(),
            rollout_figures_ignored: Family::default(),
            declared_parent_entries: Family::default(),
            budget_exceeded: Counter::default(),
            pods_relabelled: Counter::default(),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            terminal_reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_time_histogram),
            max_concurrent_reconciles: Family::default(),
            active_workers: Family::default(),
            queue: std::sync::Arc::new(QueueTracker::default()),
            leader_status: Family::default(),
            plugin_call_duration: Family::new_with_constructor(plugin_call_histogram),
            plugin_call_outcomes: Family::default(),
            declared_shadow_calls: Family::default(),
            declared_shadow_outcomes: Family::default(),
            declared_shadow_differences: Family::default(),
        }
    }
}

fn controller_labels() -> ControllerLabels {
    ControllerLabels {
        controller: CONTROLLER_NAME.to_string(),
    }
}

impl Metrics {
    /// Registers every metric: controller-runtime's and the workqueue's at
    /// the top level, the host's own under the `wasm_operator_` prefix.
    pub fn register(&self, registry: &mut Registry) {
        self.register_controller_runtime(registry);
        let r = registry.sub_registry_with_prefix("wasm_operator");
        r.register("reconciles", "Reconciles started", self.reconciles.clone());
        // `wasm_operator_plugin_contract_supported{version}` = 1 for each
        // plugin contract version (WIT `jinghzhu:operator`) this host serves.
        let contracts: Family<Vec<(String, String)>, Gauge> = Family::default();
        for version in crate::runtime::ContractVersion::ALL {
            contracts
                .get_or_create(&vec![("version".to_string(), version.as_str().to_string())])
                .set(1);
        }
        r.register(
            "plugin_contract_supported",
            "Plugin contract versions (WIT package jinghzhu:operator) this host serves",
            contracts,
        );
        r.register(
            "waited_for_cache",
            "Reconciles deferred until the cache showed our own writes",
            self.waited_for_cache.clone(),
        );
        r.register(
            "watch_lists",
            "Lists each watch made: the first and every relist (410 Gone, new shards)",
            self.watch_lists.clone(),
        );
        r.register(
            "list_refused",
            "Lists abandoned at a bound (pages, items, bytes, repeated_token), by resource; retried with backoff",
            self.list_refused.clone(),
        );
        r.register(
            "pods_dropped",
            "Pods left out of pod lists and watches before they were cached or counted, by reason (not-controlled, too-large)",
            self.pods_dropped.clone(),
        );
        self.register_plugins(r);
        self.register_writes(r);
        self.register_declared_shadows(r);
    }

    /// Declared controllers' shadow plugins, by controller.
    fn register_declared_shadows(&self, r: &mut Registry) {
        r.register(
            "declared_shadow_calls",
            "Calls of a declared controller's shadow plugin (made, not dropped)",
            self.declared_shadow_calls.clone(),
        );
        r.register(
            "declared_shadow_outcomes",
            "A declared controller's shadow calls by outcome: agreed, differed, refused (by a host rule), failed, dropped (queue full)",
            self.declared_shadow_outcomes.clone(),
        );
        r.register(
            "declared_shadow_differences",
            "A declared controller's shadow outputs that differed, by part (creates, updates, deletes, status, events, requeue)",
            self.declared_shadow_differences.clone(),
        );
    }

    /// Counts one shadow call of the declared controller `controller` that
    /// ended with `outcome` (`dropped`: not made), and for a difference the
    /// `parts` that differed.
    pub fn declared_shadow(&self, controller: &str, outcome: &str, parts: &[&str]) {
        if outcome != "dropped" {
            self.declared_shadow_calls
                .get_or_create(&ControllerLabels {
                    controller: controller.to_string(),
                })
                .inc();
        }
        self.declared_shadow_outcomes
            .get_or_create(&ShadowOutcomeLabels {
                controller: controller.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        for part in parts {
            self.declared_shadow_differences
                .get_or_create(&ShadowPartLabels {
                    controller: controller.to_string(),
                    part: (*part).to_string(),
                })
                .inc();
        }
    }

    /// A declared controller's shadow calls that ended with `outcome` so
    /// far (tests, logs).
    pub fn declared_shadow_outcome(&self, controller: &str, outcome: &str) -> u64 {
        self.declared_shadow_outcomes
            .get_or_create(&ShadowOutcomeLabels {
                controller: controller.to_string(),
                outcome: outcome.to_string(),
            })
            .get()
    }

    /// The plugin's series: calls, outcomes, swaps, rollbacks, the shadow.
    fn register_plugins(&self, r: &mut Registry) {
        r.register(
            "plugin_calls",
            "Plugin reconcile calls",
            self.plugin_calls.clone(),
        );
        r.register(
            "plugin_errors",
            "Failed plugin reconcile calls",
            self.plugin_errors.clone(),
        );
        r.register(
            "plugin_writes",
            "Writes (creates, deletes, status) asked for by accepted plugin proposals",
            self.plugin_writes.clone(),
        );
        r.register(
            "plugin_swaps",
            "Plugins swapped in",
            self.plugin_swaps.clone(),
        );
        r.register(
            "plugin_swaps_refused",
            "Plugin candidates refused",
            self.plugin_swaps_refused.clone(),
        );
        r.register(
            "plugin_rollbacks",
            "Automatic rollbacks",
            self.plugin_rollbacks.clone(),
        );
        r.register(
            "plugin_swaps_coalesced",
            "Plugin candidates coalesced: a newer one from the same flapping source took their place, or it settled on what the slot holds (rule swap/flapping)",
            self.plugin_swaps_coalesced.clone(),
        );
        r.register(
            "plugin_source_flaps",
            "Plugin sources found flapping: moving again within --min-swap-interval-secs of their last change, beyond one swap back; held until quiet (rule swap/flapping)",
            self.plugin_source_flaps.clone(),
        );
        r.register(
            "shadow_active",
            "1 while a shadow plugin runs",
            self.shadow_active.clone(),
        );
        r.register(
            "shadow_differences",
            "Reconciles where the shadow plugin proposed something else",
            self.shadow_differences.clone(),
        );
        r.register(
            "shadow_dropped",
            "Shadow calls dropped because the shadow queue was full",
            self.shadow_dropped.clone(),
        );
        r.register(
            "shadow_rejected",
            "Shadow outputs that broke the output bounds (reported, not compared)",
            self.shadow_rejected.clone(),
        );
        r.register(
            "plugin_serving",
            "1 while a vetted plugin serves; 0 while every plugin offered was refused",
            self.plugin_serving.clone(),
        );
        r.register(
            "plugin_call_duration_seconds",
            "Duration of plugin reconcile calls, by plugin name, version and digest",
            self.plugin_call_duration.clone(),
        );
        r.register(
            "plugin_objects",
            "Jinghzhus of this replica's cache each plugin resource selects and serves, by resource (empty: the default plugin) and count (selected, served)",
            self.plugin_objects.clone(),
        );
        r.register(
            "rollout_figures_ignored",
            "status.replicas entries whose rollout figures the judge left out, by reason (not-live, not-its-own, out-of-bounds)",
            self.rollout_figures_ignored.clone(),
        );
        r.register(
            "declared_parent_entries",
            "Entries a declared controller keeps per parent between reconciles (applied children, input records, expectations, failure counts), by controller",
            self.declared_parent_entries.clone(),
        );
        r.register(
            "plugin_call_outcomes",
            "Plugin reconcile calls by outcome (ok, error, deadline, memory, trap, host, rejected)",
            self.plugin_call_outcomes.clone(),
        );
    }

    /// Records the objects `resource` (empty: the default plugin) selects
    /// and serves on this replica.
    pub fn set_plugin_objects(&self, resource: &str, selected: u64, served: u64) {
        for (count, value) in [("selected", selected), ("served", served)] {
            self.plugin_objects
                .get_or_create(&PluginObjectsLabels {
                    resource: resource.to_string(),
                    count: count.to_string(),
                })
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    /// Sets the entries the declared controller `controller` keeps per
    /// parent.
    pub fn declared_parent_entries(&self, controller: &str, entries: usize) {
        self.declared_parent_entries
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
    }

    /// Drops the series of a tenant `resource` no longer served.
    pub fn forget_plugin_objects(&self, resource: &str) {
        for count in ["selected", "served"] {
            self.plugin_objects.remove(&PluginObjectsLabels {
                resource: resource.to_string(),
                count: count.to_string(),
            });
        }
    }

    /// What the host wrote, held back or could not write.
    fn register_writes(&self, r: &mut Registry) {
        r.register(
            "rejected_outputs",
            "Plugin outputs rejected by validation",
            self.rejected_outputs.clone(),
        );
        r.register(
            "apply_errors",
            "API errors while applying",
            self.apply_errors.clone(),
        );
        r.register(
            "write_budget_exceeded",
            "Proposals held back because their object's write budget was spent",
            self.budget_exceeded.clone(),
        );
        r.register(
            "pods_relabelled",
            "Controlled pods that left the pod watch alive (a label removed) and got their labels back instead of a replacement",
            self.pods_relabelled.clone(),
        );
        r.register("pods_created", "Pods created", self.pods_created.clone());
        r.register("pods_deleted", "Pods deleted", self.pods_deleted.clone());
        r.register(
            "status_patches",
            "Status patches written",
            self.status_patches.clone(),
        );
        r.register(
            "status_held",
            "Status changes held for their object's coalescing window (--status-coalesce-ms)",
            self.status_held.clone(),
        );
        r.register(
            "events_dropped",
            "Events not recorded because the Event queue was full",
            self.events_dropped.clone(),
        );
        r.register(
            "expectations_waiting",
            "Objects whose reconciles wait for the cache to show pods this host created or deleted",
            self.expectations_waiting.clone(),
        );
        r.register(
            "expectation_timeouts",
            "Expectations given up on after the expectations timeout (the object is reconciled with the cache as it is)",
            self.expectation_timeouts.clone(),
        );
        r.register(
            "api_write_failures",
            "Failed pod creates, deletes and status patches, by verb and outcome (not_sent, answered, maybe_sent)",
            self.write_failures.clone(),
        );
        r.register(
            "fenced_writes",
            "Writes not sent because the leadership or shard they were for had lapsed on this host's monotonic clock, by verb and hold",
            self.fenced_writes.clone(),
        );
    }

    fn register_controller_runtime(&self, r: &mut Registry) {
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconcile_total.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.reconcile_errors.clone(),
        );
        r.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            self.terminal_reconcile_errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            self.max_concurrent_reconciles.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            self.active_workers.clone(),
        );
        r.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.queue.adds.clone(),
        );
        r.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.queue.retries.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue.queue_duration.clone(),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            self.queue.work_duration.clone(),
        );
        r.register_collector(Box::new(self.queue.clone()));
        r.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease",
            self.leader_status.clone(),
        );
    }

    /// Records the configured number of workers and creates every
    /// controller and workqueue series at zero, as controller-runtime does
    /// when a controller starts (so rates and alerts work before the first
    /// error).
    pub fn init_controller(&self, workers: u16) {
        let labels = controller_labels();
        self.max_concurrent_reconciles
            .get_or_create(&labels)
            .set(i64::from(workers));
        self.active_workers.get_or_create_owned(&labels);
        for result in ["success", "error", "requeue", "requeue_after"] {
            self.reconcile_total.get_or_create_owned(&ResultLabels {
                controller: CONTROLLER_NAME.to_string(),
                result: result.to_string(),
            });
        }
        self.reconcile_errors.get_or_create_owned(&labels);
        self.terminal_reconcile_errors.get_or_create_owned(&labels);
        self.reconcile_time.get_or_create_owned(&labels);
        let queue = self.queue.labels();
        self.queue.adds.get_or_create_owned(&queue);
        self.queue.retries.get_or_create_owned(&queue);
        self.queue.queue_duration.get_or_create_owned(&queue);
        self.queue.work_duration.get_or_create_owned(&queue);
    }

    /// Records one reconcile of the declared controller `controller` (a
    /// `PluginController`'s name) under the controller-runtime families,
    /// labelled with its name.
    pub fn declared_reconcile(&self, controller: &str, result: &str, took: std::time::Duration) {
        let labels = ControllerLabels {
            controller: controller.to_string(),
        };
        self.reconcile_time
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.to_string(),
                result: result.to_string(),
            })
            .inc();
        if result == "error" {
            self.reconcile_errors.get_or_create(&labels).inc();
        }
    }

    /// Counts a failed write: `verb` (`create`, `delete`, `patch_status`)
    /// whose outcome is `outcome` (`not_sent`, `answered`, `maybe_sent`).
    pub fn write_failed(&self, verb: &str, outcome: &str) {
        self.write_failures
            .get_or_create(&WriteFailureLabels {
                verb: verb.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Counts a write the fence refused: `verb` (`create`, `delete`,
    /// `patch_status`, `label`) for a lapsed `hold` (`leadership`, `shard`).
    pub fn write_fenced(&self, verb: &str, hold: &str) {
        self.fenced_writes
            .get_or_create(&FencedLabels {
                verb: verb.to_string(),
                hold: hold.to_string(),
            })
            .inc();
    }

    /// Failed writes of `verb` with `outcome` so far (tests, logs).
    pub fn write_failures_of(&self, verb: &str, outcome: &str) -> u64 {
        self.write_failures
            .get_or_create(&WriteFailureLabels {
                verb: verb.to_string(),
                outcome: outcome.to_string(),
            })
            .get()
    }

    /// The `leader_election_master_status` gauge of the Lease `name`.
    pub fn leader_status_of(&self, name: &str) -> Gauge {
        self.leader_status.get_or_create_owned(&LeaseLabels {
            name: name.to_string(),
        })
    }

    /// A reconcile of `key` begins (a worker took it off the queue).
    pub fn reconcile_started(&self, key: &str) -> ReconcileObservation<'_> {
        self.active_workers
            .get_or_create(&controller_labels())
            .inc();
        let work = self.queue.started(key);
        ReconcileObservation {
            metrics: self,
            started: Instant::now(),
            work: Some(work),
        }
    }

    /// A plugin call begins.
    pub fn plugin_call(&self, plugin: &LoadedPlugin) -> PluginCall<'_> {
        PluginCall {
            metrics: self,
            labels: Self::plugin_labels(plugin),
            started: Instant::now(),
            returned_after: None,
        }
    }

    /// The `{plugin,version,digest}` labels of `plugin`'s series.
    pub fn plugin_labels(plugin: &LoadedPlugin) -> PluginCallLabels {
        PluginCallLabels {
            plugin: plugin.info().name.clone(),
            version: plugin.info().version.clone(),
            digest: plugin.digest().to_string(),
        }
    }

    /// Drops the series of the plugin `labels` names: its calls, errors,
    /// call durations and outcomes (see
    /// [`crate::slot::RETIRED_PLUGIN_SERIES_KEPT`]).
    pub fn forget_plugin(&self, labels: &PluginCallLabels) {
        let by_digest = PluginLabels {
            plugin: labels.digest.clone(),
        };
        self.plugin_calls.remove(&by_digest);
        self.plugin_errors.remove(&by_digest);
        self.plugin_writes.remove(&by_digest);
        self.plugin_call_duration.remove(labels);
        for outcome in PluginOutcome::ALL {
            self.plugin_call_outcomes.remove(&PluginOutcomeLabels {
                plugin: labels.plugin.clone(),
                version: labels.version.clone(),
                digest: labels.digest.clone(),
                outcome: outcome.label().to_string(),
            });
        }
    }

    /// `controller_runtime_reconcile_total` for `result` (tests, logs).
    pub fn reconcile_count(&self, result: &str) -> u64 {
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: CONTROLLER_NAME.to_string(),
                result: result.to_string(),
            })
            .get()
    }
}

/// How a reconcile ended, as controller-runtime counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; wait for the next change.
    Success,
    /// Done; run again after a delay.
    RequeueAfter,
    /// Failed; retried with backoff.
    Error,
    /// Failed; not retried until the object or the plugin changes.
    TerminalError,
}

/// Times one reconcile; [`ReconcileObservation::finish`] records it. Dropped
/// unfinished (leadership lost, shutdown), it only frees its worker.
pub struct ReconcileObservation<'a> {
    metrics: &'a Metrics,
    started: Instant,
    work: Option<WorkToken>,
}

impl ReconcileObservation<'_> {
    /// Records the reconcile's duration and result.
    pub fn finish(mut self, result: ReconcileResult) {
        let m = self.metrics;
        let labels = controller_labels();
        m.reconcile_time
            .get_or_create(&labels)
            .observe(self.started.elapsed().as_secs_f64());
        let label = match result {
            ReconcileResult::Success => "success",
            ReconcileResult::RequeueAfter => "requeue_after",
            ReconcileResult::Error | ReconcileResult::TerminalError => "error",
        };
        m.reconcile_total
            .get_or_create(&ResultLabels {
                controller: CONTROLLER_NAME.to_string(),
                result: label.to_string(),
            })
            .inc();
        match result {
            ReconcileResult::Error => {
                m.reconcile_errors.get_or_create(&labels).inc();
                m.queue.retries.get_or_create(&m.queue.labels()).inc();
            }
            ReconcileResult::TerminalError => {
                m.reconcile_errors.get_or_create(&labels).inc();
                m.terminal_reconcile_errors.get_or_create(&labels).inc();
            }
            ReconcileResult::Success | ReconcileResult::RequeueAfter => {}
        }
        if let Some(work) = self.work.take() {
            m.queue.finished(work, true);
        }
    }
}

impl Drop for ReconcileObservation<'_> {
    fn drop(&mut self) {
        self.metrics
            .active_workers
            .get_or_create(&controller_labels())
            .dec();
        if let Some(work) = self.work.take() {
            self.metrics.queue.finished(work, false);
        }
    }
}

/// What became of one plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginOutcome {
    /// It returned a proposal that passed validation.
    Ok,
    /// It returned an error value.
    Error,
    /// It hit its CPU deadline.
    Deadline,
    /// It hit its memory cap.
    Memory,
    /// It trapped (a panic, an unreachable, …).
    Trap,
    /// The host could not run it.
    Host,
    /// Its proposal broke a rule and was rejected whole.
    Rejected,
    /// Its output was larger than the host reads (`--plugin-output-limit-kib`).
    OutputTooLarge,
}

impl PluginOutcome {
    /// Every outcome.
    pub const ALL: [PluginOutcome; 8] = [
        PluginOutcome::Ok,
        PluginOutcome::Error,
        PluginOutcome::Deadline,
        PluginOutcome::Memory,
        PluginOutcome::Trap,
        PluginOutcome::Host,
        PluginOutcome::Rejected,
        PluginOutcome::OutputTooLarge,
    ];

    /// The `outcome` label value.
    pub fn label(self) -> &'static str {
        match self {
            PluginOutcome::Ok => "ok",
            PluginOutcome::Error => "error",
            PluginOutcome::Deadline => "deadline",
            PluginOutcome::Memory => "memory",
            PluginOutcome::Trap => "trap",
            PluginOutcome::Host => "host",
            PluginOutcome::Rejected => "rejected",
            PluginOutcome::OutputTooLarge => "output-too-large",
        }
    }
}

impl From<&PluginError> for PluginOutcome {
    fn from(err: &PluginError) -> Self {
        match err {
            PluginError::Deadline(_) => PluginOutcome::Deadline,
            PluginError::MemoryCap(_) => PluginOutcome::Memory,
            PluginError::Trap { .. } => PluginOutcome::Trap,
            PluginError::Returned { .. } => PluginOutcome::Error,
            PluginError::Host(_) => PluginOutcome::Host,
            PluginError::OutputTooLarge(_) => PluginOutcome::OutputTooLarge,
            // A contract-0.2 output with ids or spans outside its tables.
            PluginError::BadOutput(_) => PluginOutcome::Rejected,
            // Host memory the plugin tried to make the host hold.
            PluginError::WasiLimit { .. } => PluginOutcome::Memory,
        }
    }
}

/// One plugin call being measured.
pub struct PluginCall<'a> {
    metrics: &'a Metrics,
    labels: PluginCallLabels,
    started: Instant,
    returned_after: Option<std::time::Duration>,
}

impl PluginCall<'_> {
    /// How long the call took (so far, before it returned).
    pub fn latency(&self) -> std::time::Duration {
        self.returned_after
            .unwrap_or_else(|| self.started.elapsed())
    }

    /// The call returned: records its duration.
    pub fn returned(&mut self) {
        if self.returned_after.is_none() {
            let took = self.started.elapsed();
            self.returned_after = Some(took);
            self.metrics
                .plugin_call_duration
                .get_or_create(&self.labels)
                .observe(took.as_secs_f64());
        }
    }

    /// Records what became of the call (its duration too, if not yet).
    pub fn outcome(mut self, outcome: PluginOutcome) {
        self.returned();
        self.metrics
            .plugin_call_outcomes
            .get_or_create(&PluginOutcomeLabels {
                plugin: self.labels.plugin.clone(),
                version: self.labels.version.clone(),
                digest: self.labels.digest.clone(),
                outcome: outcome.label().to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_gone_objects_leave_the_depth() {
        let metrics = Metrics::default();
        metrics.queue.added("ns/kept".into());
        metrics.queue.added("ns/deleted".into());
        assert_eq!(metrics.queue.depth(), 2);
        metrics.queue.track_liveness(|key| key == "ns/kept");
        assert_eq!(metrics.queue.depth(), 1);
        assert!(
            encoded(&metrics)
                .contains("workqueue_depth{name=\"jinghzhu\",controller=\"jinghzhu\"} 1")
        );
    }

    fn encoded(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    #[test]
    fn a_reconcile_is_counted_timed_and_frees_its_worker() {
        let metrics = Metrics::default();
        metrics.queue.added("ns/a".into());
        metrics.queue.added("ns/a".into());
        assert_eq!(metrics.queue.depth(), 1, "a key waits once");
        let observation = metrics.reconcile_started("ns/a");
        assert_eq!(metrics.queue.depth(), 0);
        let text = encoded(&metrics);
        assert!(
            text.contains("controller_runtime_active_workers{controller=\"jinghzhu\"} 1"),
            "{text}"
        );
        observation.finish(ReconcileResult::Error);
        metrics
            .reconcile_started("ns/b")
            .finish(ReconcileResult::TerminalError);
        metrics
            .reconcile_started("ns/c")
            .finish(ReconcileResult::RequeueAfter);
        drop(metrics.reconcile_started("ns/d")); // cancelled: not counted

        let text = encoded(&metrics);
        for line in [
            "controller_runtime_reconcile_total{controller=\"jinghzhu\",result=\"error\"} 2",
            "controller_runtime_reconcile_total{controller=\"jinghzhu\",result=\"requeue_after\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"jinghzhu\"} 2",
            "controller_runtime_terminal_reconcile_errors_total{controller=\"jinghzhu\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"jinghzhu\"} 3",
            "controller_runtime_active_workers{controller=\"jinghzhu\"} 0",
            "workqueue_adds_total{name=\"jinghzhu\",controller=\"jinghzhu\"} 2",
            "workqueue_retries_total{name=\"jinghzhu\",controller=\"jinghzhu\"} 1",
            "workqueue_queue_duration_seconds_count{name=\"jinghzhu\",controller=\"jinghzhu\"} 1",
            "workqueue_work_duration_seconds_count{name=\"jinghzhu\",controller=\"jinghzhu\"} 3",
            "workqueue_depth{name=\"jinghzhu\",controller=\"jinghzhu\"} 0",
            "workqueue_longest_running_processor_seconds{name=\"jinghzhu\",controller=\"jinghzhu\"} 0.0",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"60.0\",controller=\"jinghzhu\"} 3",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn a_sharded_queue_reports_its_depth_per_shard() {
        let metrics = Metrics::default();
        metrics.queue.added_in_shard("ns/a".into(), Some(2));
        assert!(
            !encoded(&metrics).contains("wasm_operator_shard_queue_depth"),
            "unsharded: no per-shard series"
        );
        metrics.queue.set_shard_count(4);
        metrics.queue.added_in_shard("ns/b".into(), Some(2));
        metrics.queue.added_in_shard("ns/c".into(), Some(0));
        metrics.queue.added_in_shard("ns/d".into(), Some(9));
        let text = encoded(&metrics);
        for line in [
            "wasm_operator_shard_queue_depth{shard=\"0\"} 1",
            "wasm_operator_shard_queue_depth{shard=\"1\"} 0",
            "wasm_operator_shard_queue_depth{shard=\"2\"} 2",
            "wasm_operator_shard_queue_depth{shard=\"3\"} 0",
            "workqueue_depth{name=\"jinghzhu\",controller=\"jinghzhu\"} 4",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        drop(metrics.reconcile_started("ns/b"));
        assert!(
            encoded(&metrics).contains("wasm_operator_shard_queue_depth{shard=\"2\"} 1"),
            "a key taken leaves its shard's depth"
        );
    }

    #[test]
    fn events_a_full_queue_drops_are_exported() {
        use kube::runtime::events::EventType;

        let metrics = Metrics::default();
        let text = encoded(&metrics);
        assert!(
            text.contains("wasm_operator_events_dropped_total 0"),
            "{text}"
        );
        let (sink, _queue) =
            crate::telemetry::events::EventSink::channel(1, metrics.events_dropped.clone());
        let jz = crate::crd::Jinghzhu::new("web", Default::default());
        for _ in 0..3 {
            sink.publish(
                &jz,
                EventType::Normal,
                "SuccessfulCreate",
                "Created 1 pod(s): a",
            );
        }
        let text = encoded(&metrics);
        assert!(
            text.contains("wasm_operator_events_dropped_total 2"),
            "{text}"
        );
    }

    #[test]
    fn a_started_controller_exports_every_series_at_zero() {
        let metrics = Metrics::default();
        metrics.init_controller(4);
        let text = encoded(&metrics);
        for line in [
            "controller_runtime_max_concurrent_reconciles{controller=\"jinghzhu\"} 4",
            "controller_runtime_active_workers{controller=\"jinghzhu\"} 0",
            "controller_runtime_reconcile_total{controller=\"jinghzhu\",result=\"requeue\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"jinghzhu\"} 0",
            "controller_runtime_terminal_reconcile_errors_total{controller=\"jinghzhu\"} 0",
            "controller_runtime_reconcile_time_seconds_count{controller=\"jinghzhu\"} 0",
            "workqueue_retries_total{name=\"jinghzhu\",controller=\"jinghzhu\"} 0",
            "workqueue_queue_duration_seconds_count{name=\"jinghzhu\",controller=\"jinghzhu\"} 0",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn running_reconciles_show_in_unfinished_work_at_scrape_time() {
        let metrics = Metrics::default();
        let running = metrics.reconcile_started("ns/slow");
        std::thread::sleep(std::time::Duration::from_millis(30));
        let text = encoded(&metrics);
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix("workqueue_longest_running_processor_seconds{name=\"jinghzhu\",controller=\"jinghzhu\"} "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("longest running processor sample");
        assert!(value >= 0.03, "{value}");
        running.finish(ReconcileResult::Success);
    }

    #[test]
    fn plugin_errors_map_to_outcomes() {
        use std::time::Duration;
        assert_eq!(
            PluginOutcome::from(&PluginError::Deadline(Duration::from_secs(1))),
            PluginOutcome::Deadline
        );
        assert_eq!(
            PluginOutcome::from(&PluginError::MemoryCap(1)),
            PluginOutcome::Memory
        );
        assert_eq!(
            PluginOutcome::from(&PluginError::Trap {
                message: "x".into()
            }),
            PluginOutcome::Trap
        );
        assert_eq!(
            PluginOutcome::from(&PluginError::Returned {
                message: "x".into(),
                retryable: true
            }),
            PluginOutcome::Error
        );
        assert_eq!(PluginOutcome::Rejected.label(), "rejected");
    }
}
