//! Prunes the `status.replicas` entries of replicas that are gone without
//! saying so (crashed, killed, their node lost): a replica that stops
//! gracefully removes its own entry ([`super::status::StatusWriter::leave`]),
//! one that crashes cannot, and its entry stayed for good (with 256 of them
//! no new replica could write its own).
//!
//! **Who is alive** is what the fleet's Leases say. Sharded (`--shards N`)
//! every replica renews a membership Lease, so an entry whose replica is
//! not a live member ([`crate::shards::Shards::members`], ghosts left out)
//! for a whole lease duration, as the pruner sees it, belongs to a replica
//! that is gone; it is removed with a JSON patch whose `test` op checks the
//! entry's name at its index, as `leave` does (an entry that moved
//! meanwhile is left alone and looked at again next time).
//!
//! **Who prunes** is the holder of shard 0, so replicas never race on it;
//! each removal is a write on behalf of that shard, sent only while its
//! hold is valid on this host's clock (as the write fence checks).
//!
//! Without shards nothing is pruned: with `--leader-elect` only the leader
//! holds a Lease, so a standby (whose entry is as live as the leader's)
//! cannot be told from a crashed replica; a single host without either is
//! the only replica and has no one to prune (a crashed predecessor's entry
//! under the same name is rewritten by it).

use std::collections::HashMap;
use std::time::Duration;

use kube::{Api, Client};
use tokio::time::Instant;

use super::status::StatusWriter;
use crate::crd::plugin::JinghzhuPlugin;
use crate::shards::Shards;

/// How often the holder of shard 0 looks at the entries.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(5);

/// The shard whose holder prunes.
pub const PRUNING_SHARD: u32 = super::fleet::JUDGING_SHARD;

/// Starts pruning the entries of `resources` (sharded hosts only); the task
/// runs until aborted.
pub fn start(
    client: Client,
    resources: Vec<String>,
    shards: Shards,
    lease_duration: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut absent = Absent::default();
        loop {
            tokio::time::sleep(PRUNE_INTERVAL).await;
            if !shards.is_active_here(PRUNING_SHARD) {
                absent.since.clear();
                continue;
            }
            for name in &resources {
                prune_one(&client, name, &shards, lease_duration, &mut absent).await;
            }
        }
    })
}

/// Since when each (resource, replica) entry has had no live member.
#[derive(Default)]
struct Absent {
    since: HashMap<(String, String), Instant>,
}

/// The entries of `name` to remove now: (index, replica) of those whose
/// replica has not been a member for `grace`. Updates `absent`.
fn due(
    name: &str,
    entries: &[String],
    members: &[String],
    now: Instant,
    grace: Duration,
    absent: &mut Absent,
) -> Vec<(usize, String)> {
    absent
        .since
        .retain(|(resource, replica), _| resource != name || entries.contains(replica));
    let mut out = Vec::new();
    for (index, replica) in entries.iter().enumerate() {
        let key = (name.to_string(), replica.clone());
        if members.contains(replica) {
            absent.since.remove(&key);
            continue;
        }
        let since = *absent.since.entry(key).or_insert(now);
        if now.saturating_duration_since(since) >= grace {
            out.push((index, replica.clone()));
        }
    }
    out
}

async fn prune_one(
    client: &Client,
    name: &str,
    shards: &Shards,
    grace: Duration,
    absent: &mut Absent,
) {
    let api: Api<JinghzhuPlugin> = Api::all(client.clone());
    // The object (its status with it): `get` on the status subresource is
    // not in the shipped RBAC.
    let entries: Vec<String> = match api.get(name).await {
        Ok(resource) => resource
            .status
            .map(|s| s.replicas.into_iter().map(|r| r.name).collect())
            .unwrap_or_default(),
        Err(err) => {
            tracing::debug!(resource = %name, error = %err, "pruning: could not read the JinghzhuPlugin");
            return;
        }
    };
    let members = shards.members();
    let mut removed = 0;
    // From the last: a removal does not move the indexes still to come.
    for (index, replica) in due(name, &entries, &members, Instant::now(), grace, absent)
        .into_iter()
        .rev()
    {
        if !shards.hold_of(PRUNING_SHARD).valid_now() {
            tracing::info!(resource = %name, "pruning: the hold of shard 0 lapsed; nothing more removed");
            return;
        }
        match StatusWriter::remove_entry(client, name, index, &replica).await {
            Ok(()) => {
                removed += 1;
                absent.since.remove(&(name.to_string(), replica.clone()));
                tracing::info!(resource = %name, replica, "pruning: removed the status entry of a replica without a live membership Lease");
            }
            Err(err) => {
                tracing::debug!(resource = %name, replica, error = %err, "pruning: the entry was not removed (moved meanwhile?); looked at again next time")
            }
        }
    }
    if removed > 0 {
        shards.metrics().entries_pruned.inc_by(removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_entry_goes_after_its_replica_was_no_member_for_the_grace() {
        let grace = Duration::from_secs(4);
        let t0 = Instant::now();
        let mut absent = Absent::default();
        let entries = names(&["a", "b", "gone"]);
        let members = names(&["a", "b"]);
        assert!(due("r", &entries, &members, t0, grace, &mut absent).is_empty());
        assert!(due("r", &entries, &members, t0 + grace / 2, grace, &mut absent).is_empty());
        assert_eq!(
            due("r", &entries, &members, t0 + grace, grace, &mut absent),
            vec![(2, "gone".to_string())]
        );
        // Back as a member: its clock starts again.
        let members = names(&["a", "b", "gone"]);
        assert!(due("r", &entries, &members, t0 + grace * 2, grace, &mut absent).is_empty());
        let members = names(&["a", "b"]);
        assert!(due("r", &entries, &members, t0 + grace * 3, grace, &mut absent).is_empty());
    }
}
