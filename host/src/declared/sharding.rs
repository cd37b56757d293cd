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
//!   (the room `voice` of this module's parent), and judges a
//!   controller's canary on every replica's figures ([`super::fleet`]).

use kube::runtime::controller::Action;
use std::time::Duration;

use crate::apply::fence::{Hold, Validity, WriteFence};
use crate::shards::{ShardGuard, ShardHold, Shards};

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
}
