//! Declared controllers under `--shards N`: every replica runs every
//! declared controller's watches (parents, children, observed kinds, all
//! of them: no shard label is needed), but reconciles only the parents
//! whose shard it holds. A parent's shard is the one the Jinghzhu path
//! computes for an object ([`crate::shards::hash::shard_of`] of the
//! parent's UID); its children are never reconciled on their own (their
//! changes wake the parent), so a parent and its children stay together.
//!
//! It owns the pieces the controller and the manager ask for:
//! - [`enter`]: a reconcile's way into the parent's shard (or why not, and
//!   when to look again);
//! - [`fence`]: the write fence of a reconcile, on the shard's hold, which
//!   every write of [`super::apply`] checks right before it is sent;
//! - [`activate_taken`]: on a host of declared controllers only, turns a
//!   taken shard active at once (the watches already show every shard),
//!   after which [`crate::shards::Shards::activations`] re-queues every
//!   parent; with a Jinghzhu plugin beside them, that controller's shard
//!   sync turns shards active instead;
//! - [`writes_resource_status`]: the `PluginController` status is written
//!   by the holder of shard 0 only (the replica that judges the Jinghzhu
//!   path's rollouts and prunes its status), and that replica alone sends
//!   the Events about the resource, a tenant's `status.tenant` included
//!   (the room `voice` of this module's parent);
//! - [`check_rollout`]: `spec.rollout` is refused under shards (no replica
//!   sees every parent's reconciles, so none could judge a canary on them).

use kube::runtime::controller::Action;
use std::time::Duration;

use crate::apply::fence::{Hold, Validity, WriteFence};
use crate::crd::controller::PluginController;
use crate::refusal::Refusal;
use crate::shards::{ShardGuard, ShardHold, Shards};

/// The rule refusing `spec.rollout` on a sharded host.
pub const ROLLOUT_RULE: &str = "controller/rollout-sharded";

/// How soon a parent is looked at again when its shard is active here but
/// its hold lapsed for a moment (a renewal that came back late).
pub const LAPSE_RETRY: Duration = Duration::from_secs(1);

/// The shard whose holder writes the `PluginController` status.
pub const STATUS_SHARD: u32 = 0;

/// Enters the shard of the parent with `uid`: the guard keeps the shard
/// from being handed over until the reconcile ends. `Err` is what to do
/// instead: look again shortly while the shard is active here, else wait
/// (the shard's next holder, or this replica on taking it again,
/// re-queues every parent).
pub fn enter(shards: &Shards, uid: &str) -> Result<ShardGuard, Action> {
    let shard = shards.shard_of(uid);
    shards.enter(shard).ok_or_else(|| {
        shards.metrics().skipped.inc();
        after_lapse(shards, shard)
    })
}

/// What to do with a parent of `shard` whose reconcile was refused or
/// cancelled for the shard's hold.
pub fn after_lapse(shards: &Shards, shard: u32) -> Action {
    if shards.is_active_here(shard) {
        Action::requeue(LAPSE_RETRY)
    } else {
        Action::await_change()
    }
}

/// The write fence of a reconcile in the shard `guard` entered.
pub fn fence(guard: &ShardGuard) -> WriteFence {
    WriteFence::new(ShardFence(guard.hold()))
}

/// A shard's hold, as the fence reads it.
struct ShardFence(ShardHold);

impl Hold for ShardFence {
    fn kind(&self) -> &'static str {
        "shard"
    }

    fn validity(&self) -> Validity {
        self.0
            .valid_until()
            .map_or(Validity::Ended, Validity::Until)
    }
}

/// Whether this replica writes `PluginController` statuses now: always
/// unsharded; sharded, while its hold on [`STATUS_SHARD`] is valid.
pub fn writes_resource_status(shards: Option<&Shards>) -> bool {
    shards.is_none_or(|shards| shards.hold_of(STATUS_SHARD).valid_now())
}

/// Refuses `spec.rollout` on a sharded host, with what to do instead.
pub fn check_rollout(resource: &PluginController, shards: Option<&Shards>) -> Result<(), Refusal> {
    match (&resource.spec.rollout, shards) {
        (Some(_), Some(shards)) => Err(Refusal::new(
            ROLLOUT_RULE,
            format!(
                "spec.rollout is not available while the host runs with --shards {}: each \
                 replica reconciles only its shards' parents, so no replica sees enough of the \
                 canary's reconciles to judge it; remove spec.rollout (a new plugin then swaps \
                 in on every replica), or serve this controller from an unsharded host",
                shards.count()
            ),
        )),
        _ => Ok(()),
    }
}

/// On a host of declared controllers only: turns each taken shard active
/// at once. The declared watches are not narrowed by shard, so a taken
/// shard's parents and children are in the caches already; writes made by
/// its previous holder that the caches do not show yet only make the first
/// reconciles apply again what is there (server-side apply; a delete of a
/// child gone already is a no-op), and the watch events that follow wake
/// the parents again. Runs until dropped.
pub async fn activate_taken(shards: Shards) {
    let mut changes = shards.subscribe();
    loop {
        for (shard, (phase, term, _)) in shards.held() {
            if phase == crate::shards::Phase::Syncing {
                shards.mark_active(shard, term);
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shards::hash::shard_of;

    #[test]
    fn a_parent_s_shard_is_the_jinghzhu_path_s_shard_of_its_uid() {
        let shards = Shards::new(8, "me", "default", "wasm-operator");
        for uid in ["a", "7f8e9d0c-1b2a-4c3d-8e9f-0a1b2c3d4e5f", ""] {
            assert_eq!(shards.shard_of(uid), shard_of(uid, 8));
        }
    }

    #[test]
    fn a_parent_of_a_shard_not_held_is_not_entered() {
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        let skipped = shards.metrics().skipped.get();
        assert!(enter(&shards, "some-uid").is_err());
        assert_eq!(shards.metrics().skipped.get(), skipped + 1);
        assert!(
            !writes_resource_status(Some(&shards)),
            "shard 0 not held: another replica writes the resource's status"
        );
        assert!(writes_resource_status(None), "unsharded: always");
    }

    #[test]
    fn a_rollout_is_refused_only_when_sharded() {
        let mut resource: PluginController = serde_json::from_value(serde_json::json!({
            "apiVersion": "wasm-operator.io/v1alpha1",
            "kind": "PluginController",
            "metadata": {"name": "c"},
            "spec": {
                "parent": {"apiVersion": "example.com/v1", "kind": "Thing"},
                "source": {"file": {"path": "/p.wasm"}},
                "rollout": {"steps": [10, 50]},
            }
        }))
        .expect("a PluginController");
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        let refusal = check_rollout(&resource, Some(&shards)).expect_err("sharded");
        assert_eq!(refusal.rule, ROLLOUT_RULE);
        assert!(refusal.message.contains("--shards 4"), "{refusal}");
        assert!(check_rollout(&resource, None).is_ok());
        resource.spec.rollout = None;
        assert!(check_rollout(&resource, Some(&shards)).is_ok());
    }
}
