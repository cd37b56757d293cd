//! Counters of what the controller did, readable in-process (tests, logs)
//! and exported in the Prometheus text format on `--metrics-addr`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label set of per-plugin counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// Digest (`sha256:…`) of the plugin that ran.
    pub plugin: String,
}

/// Everything the controller counts.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Reconciles started (including those that waited for the cache).
    pub reconciles: Counter,
    /// Reconciles skipped because the cache had not caught up with our writes.
    pub waited_for_cache: Counter,
    /// Plugin calls by plugin digest.
    pub plugin_calls: Family<PluginLabels, Counter>,
    /// Plugin calls that failed (trap, deadline, memory cap, returned error).
    pub plugin_errors: Family<PluginLabels, Counter>,
    /// Plugin outputs rejected by validation.
    pub rejected_outputs: Counter,
    /// Failures talking to the API server while applying.
    pub apply_errors: Counter,
    /// Proposals held back because their object's write budget was spent.
    pub budget_exceeded: Counter,
    /// Pods created.
    pub pods_created: Counter,
    /// Pods deleted.
    pub pods_deleted: Counter,
    /// Status patches written.
    pub status_patches: Counter,
    /// Plugin swaps done / refused / rolled back.
    pub plugin_swaps: Counter,
    /// Plugin candidates refused.
    pub plugin_swaps_refused: Counter,
    /// Automatic rollbacks.
    pub plugin_rollbacks: Counter,
    /// 1 while a shadow plugin is configured.
    pub shadow_active: Gauge,
    /// Reconciles where the shadow plugin proposed something else.
    pub shadow_differences: Counter,
}

impl Metrics {
    /// Registers every metric under the `wasm_operator_` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("wasm_operator");
        r.register("reconciles", "Reconciles started", self.reconciles.clone());
        r.register(
            "waited_for_cache",
            "Reconciles deferred until the cache showed our own writes",
            self.waited_for_cache.clone(),
        );
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
        r.register("pods_created", "Pods created", self.pods_created.clone());
        r.register("pods_deleted", "Pods deleted", self.pods_deleted.clone());
        r.register(
            "status_patches",
            "Status patches written",
            self.status_patches.clone(),
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
            "shadow_active",
            "1 while a shadow plugin runs",
            self.shadow_active.clone(),
        );
        r.register(
            "shadow_differences",
            "Reconciles where the shadow plugin proposed something else",
            self.shadow_differences.clone(),
        );
    }
}
