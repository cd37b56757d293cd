//! The shard metrics of one replica, registered on `/metrics` next to the
//! host's others when `--shards` is on:
//!
//! - `wasm_operator_shards_owned`: shards this replica holds and reconciles
//!   (phase `active`); `wasm_operator_shard_owned{shard,phase}` is 1 per held
//!   shard in its phase (`syncing`, `active`, `draining`);
//! - `wasm_operator_shard_handovers_total{direction}`: shards `acquired`,
//!   `released` (handed over after draining) and `lost` (the Lease could not
//!   be renewed in time, or another replica holds it);
//! - `wasm_operator_shard_objects{shard}`: Jinghzhus of each held shard in
//!   this replica's cache;
//! - `wasm_operator_shard_members`: live replicas this replica sees (the
//!   assignment's members: ghosts left out);
//! - `wasm_operator_shard_ghost_members`: live membership Leases judged
//!   ghosts ([`super::ghosts`]);
//! - `wasm_operator_plugin_resource_entries_pruned_total`: `status.replicas`
//!   entries of replicas without a live membership Lease removed by this
//!   replica (the holder of shard 0, see `delivery::resource::prune`);
//! - `wasm_operator_shard_skipped_reconciles_total`: reconciles skipped
//!   because this replica does not (or no longer, or not yet) own the
//!   object's shard;
//! - `wasm_operator_shard_labels_written_total{kind}`: shard labels the
//!   labeller wrote (`jinghzhu`, `pod`);
//! - `wasm_operator_shard_declared_writes_total{controller,shard}`: writes
//!   (children applied or deleted, parent statuses) this replica sent for
//!   the parents of each shard, by declared controller (`--plugin-controllers`).
//!
//! The work queue's own metrics (`workqueue_depth`, …) are per replica, so in
//! sharded mode they count the owned shards' objects only; the queue's
//! depth per shard is `wasm_operator_shard_queue_depth{shard}` (exported
//! with the queue's metrics, `telemetry::metrics::QueueTracker`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `{shard,phase}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardPhaseLabels {
    /// Shard number.
    pub shard: String,
    /// `syncing`, `active` or `draining`.
    pub phase: String,
}

/// `{shard}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabels {
    /// Shard number.
    pub shard: String,
}

/// `{direction}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandoverLabels {
    /// `acquired`, `released` or `lost`.
    pub direction: String,
}

/// `{kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `jinghzhu` or `pod`.
    pub kind: String,
}

/// `{controller,shard}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerShardLabels {
    /// The `PluginController`'s name.
    pub controller: String,
    /// Shard number.
    pub shard: String,
}

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub struct ShardMetrics {
    /// Shards held and active.
    pub owned: Gauge,
    /// 1 per held shard and phase.
    pub phase: Family<ShardPhaseLabels, Gauge>,
    /// Shards acquired, released, lost.
    pub handovers: Family<HandoverLabels, Counter>,
    /// Cached Jinghzhus per held shard.
    pub objects: Family<ShardLabels, Gauge>,
    /// Live replicas seen (ghosts left out).
    pub members: Gauge,
    /// Live membership Leases judged ghosts.
    pub ghosts: Gauge,
    /// `status.replicas` entries pruned (replicas without a live Lease).
    pub entries_pruned: Counter,
    /// Reconciles skipped for a shard not (or not yet) owned.
    pub skipped: Counter,
    /// Labels written by the labeller.
    pub labels_written: Family<KindLabels, Counter>,
    /// Writes of declared controllers, by controller and shard.
    pub declared_writes: Family<ControllerShardLabels, Counter>,
}

impl ShardMetrics {
    /// Adds them to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "wasm_operator_shards_owned",
            "Shards this replica holds and reconciles",
            self.owned.clone(),
        );
        registry.register(
            "wasm_operator_shard_owned",
            "1 per shard this replica holds, by phase (syncing, active, draining)",
            self.phase.clone(),
        );
        registry.register(
            "wasm_operator_shard_handovers",
            "Shards acquired, released after draining, or lost",
            self.handovers.clone(),
        );
        registry.register(
            "wasm_operator_shard_objects",
            "Jinghzhus of each held shard in this replica's cache",
            self.objects.clone(),
        );
        registry.register(
            "wasm_operator_shard_members",
            "Live replicas this replica sees",
            self.members.clone(),
        );
        registry.register(
            "wasm_operator_shard_ghost_members",
            "Live membership Leases left out of the assignment as ghosts (they took none of their free shards for three lease durations)",
            self.ghosts.clone(),
        );
        registry.register(
            "wasm_operator_plugin_resource_entries_pruned",
            "JinghzhuPlugin status.replicas entries removed because their replica had no live membership Lease (by the holder of shard 0)",
            self.entries_pruned.clone(),
        );
        registry.register(
            "wasm_operator_shard_skipped_reconciles",
            "Reconciles skipped because this replica does not own the object's shard",
            self.skipped.clone(),
        );
        registry.register(
            "wasm_operator_shard_labels_written",
            "Shard labels written on Jinghzhus and pods",
            self.labels_written.clone(),
        );
        registry.register(
            "wasm_operator_shard_declared_writes",
            "Writes a declared controller sent for the parents of each shard (children applied or deleted, statuses)",
            self.declared_writes.clone(),
        );
    }

    /// Counts `writes` a declared controller sent for a parent of `shard`.
    pub fn declared_wrote(&self, controller: &str, shard: u32, writes: u32) {
        self.declared_writes
            .get_or_create(&ControllerShardLabels {
                controller: controller.to_string(),
                shard: shard.to_string(),
            })
            .inc_by(u64::from(writes));
    }

    /// Counts a handover.
    pub fn handover(&self, direction: &str) {
        self.handovers
            .get_or_create(&HandoverLabels {
                direction: direction.to_string(),
            })
            .inc();
    }

    /// Handovers so far in `direction`.
    pub fn handovers_of(&self, direction: &str) -> u64 {
        self.handovers
            .get_or_create(&HandoverLabels {
                direction: direction.to_string(),
            })
            .get()
    }
}
