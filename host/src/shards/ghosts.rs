//! Ghost members: a membership Lease that is renewed by something that does
//! no work (forged by anyone with write access to Leases, or a process
//! whose Lease loop alone survives) is left out of the assignment, so the
//! shards it would be given are taken by the replicas that work.
//!
//! Without this rule a ghost counts as live for as long as its Lease is
//! renewed: [`super::assign`] gives it a fair share of the shards, their
//! holders drain and release them, and nobody ever takes them (their
//! objects go unreconciled for good).
//!
//! **The rule**, computed by every replica from the Leases it lists, the
//! same way for every member (its own clock only measures how long a
//! state lasted, as the Lease expiry does):
//!
//! - a live member *stalls* while it holds no shard Lease (it is the holder
//!   of none) and at least one shard the assignment gives it (over the
//!   members not judged ghosts) has a Lease that is missing, released or
//!   expired, i.e. free for it to take;
//! - a member that has stalled without a break for [`ghost_grace`] (three
//!   lease durations: a working replica takes a free shard of its own
//!   within a retry period or two) is a **ghost**: it is left out of the
//!   assignment (and of `wasm_operator_shard_members`), and counted in
//!   `wasm_operator_shard_ghost_members`;
//! - it stops being one when it holds a shard Lease, when its membership
//!   Lease record changes (another holder, or a new `acquireTime`: a
//!   restarted or re-joining replica), or when it is no longer live (its
//!   Lease expired or was released).
//!
//! A stall is only counted while one of the member's shards is free: a
//! replica joining waits for the others to drain and release its shards,
//! which does not count against it.
//!
//! A replica never judges itself a ghost (it keeps itself in its own
//! assignment). When the rule, applied to itself, says the others now
//! judge it one (it could not take a free shard of its own for the grace),
//! it re-acquires its membership Lease (a new `acquireTime`), which the
//! others take as a new record: it is admitted again and gets its shards
//! back through the ordinary handover.
//!
//! What it cannot tell: a process that holds and renews shard Leases but
//! reconciles nothing (its holds are as good as a working replica's), and a
//! forger who also rewrites `acquireTime` on every renewal (admitted again
//! each time; its shards stay free for a grace each round of it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::assign;

/// The rule id in logs and docs.
pub const RULE: &str = "shards/ghost-member";

/// How long a member may stall before it is a ghost: three lease durations.
pub fn ghost_grace(lease_duration: Duration) -> Duration {
    lease_duration * 3
}

/// What the rule needs to know of one shard's Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardView {
    /// Its holder (empty: released, or no Lease).
    pub holder: String,
    /// Whether the member it is assigned to may take it now (no Lease,
    /// released, or expired).
    pub free: bool,
}

#[derive(Debug, Clone)]
struct Track {
    /// The membership Lease record (`holder/acquireTime`) the state is for.
    record: String,
    stalled_since: Option<Instant>,
    ghost: bool,
}

/// The verdict of one round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The members to leave out of the assignment.
    pub ghosts: BTreeSet<String>,
    /// This replica would be judged a ghost by the others: re-acquire the
    /// membership Lease.
    pub rejoin: bool,
}

/// The per-member state of the rule on one replica.
#[derive(Debug, Default)]
pub struct Ghosts {
    tracks: HashMap<String, Track>,
}

impl Ghosts {
    /// One round of the rule. `live` maps each live member's identity to its
    /// membership Lease record; `me` is this replica (always kept in);
    /// `shards[s]` is shard `s`'s Lease as seen now.
    pub fn judge(
        &mut self,
        now: Instant,
        me: &str,
        live: &BTreeMap<String, String>,
        shards: &[ShardView],
        grace: Duration,
    ) -> Verdict {
        self.tracks.retain(|member, track| {
            live.get(member)
                .is_some_and(|record| *record == track.record)
        });
        let holders: BTreeSet<&str> = shards
            .iter()
            .map(|s| s.holder.as_str())
            .filter(|h| !h.is_empty())
            .collect();
        for (member, record) in live {
            let track = self.tracks.entry(member.clone()).or_insert_with(|| Track {
                record: record.clone(),
                stalled_since: None,
                ghost: false,
            });
            if holders.contains(member.as_str()) {
                track.stalled_since = None;
                track.ghost = false;
            }
        }
        let admitted: BTreeSet<String> =
            live.keys().filter(|m| !self.is_ghost(m)).cloned().collect();
        let count = u32::try_from(shards.len()).unwrap_or(u32::MAX);
        let assignment = assign::assign(count, &admitted);
        let mut rejoin = false;
        for (member, assigned) in &assignment {
            let Some(track) = self.tracks.get_mut(member) else {
                continue;
            };
            let stalling = !holders.contains(member.as_str())
                && assigned
                    .iter()
                    .any(|s| shards.get(*s as usize).is_some_and(|v| v.free));
            if !stalling {
                track.stalled_since = None;
                continue;
            }
            let since = *track.stalled_since.get_or_insert(now);
            if now.saturating_duration_since(since) < grace {
                continue;
            }
            if member == me {
                rejoin = true;
                track.stalled_since = None;
            } else {
                track.ghost = true;
            }
        }
        Verdict {
            ghosts: live.keys().filter(|m| self.is_ghost(m)).cloned().collect(),
            rejoin,
        }
    }

    fn is_ghost(&self, member: &str) -> bool {
        self.tracks.get(member).is_some_and(|t| t.ghost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(12);

    fn live(members: &[&str]) -> BTreeMap<String, String> {
        members
            .iter()
            .map(|m| (m.to_string(), format!("{m}/t0")))
            .collect()
    }

    /// 6 shards: each held by its holder in `holders` (empty: free).
    fn shards(holders: &[&str]) -> Vec<ShardView> {
        holders
            .iter()
            .map(|h| ShardView {
                holder: h.to_string(),
                free: h.is_empty(),
            })
            .collect()
    }

    /// The shards `assign` gives `member` among `members`.
    fn of(member: &str, members: &[&str], count: u32) -> BTreeSet<u32> {
        let set: BTreeSet<String> = members.iter().map(|m| m.to_string()).collect();
        assign::assign(count, &set)
            .remove(member)
            .unwrap_or_default()
    }

    /// The two replicas hold every shard except the ghost's, which are free.
    fn all_but(ghost_shards: &BTreeSet<u32>, count: u32) -> Vec<ShardView> {
        (0..count)
            .map(|s| {
                if ghost_shards.contains(&s) {
                    ShardView {
                        holder: String::new(),
                        free: true,
                    }
                } else {
                    ShardView {
                        holder: if s % 2 == 0 { "a" } else { "b" }.into(),
                        free: false,
                    }
                }
            })
            .collect()
    }

    #[test]
    fn a_member_that_never_takes_its_free_shards_is_a_ghost_after_the_grace() {
        let t0 = Instant::now();
        let members = live(&["a", "b", "ghost"]);
        let theirs = of("ghost", &["a", "b", "ghost"], 6);
        assert!(!theirs.is_empty());
        let view = all_but(&theirs, 6);
        let mut rule = Ghosts::default();
        for secs in [0, 5, 11] {
            let v = rule.judge(t0 + Duration::from_secs(secs), "a", &members, &view, GRACE);
            assert!(v.ghosts.is_empty(), "not before the grace ({secs} s)");
        }
        let v = rule.judge(t0 + GRACE, "a", &members, &view, GRACE);
        assert_eq!(v.ghosts, BTreeSet::from(["ghost".to_string()]));
        assert!(!v.rejoin);
        // It stays out while nothing changes.
        let v = rule.judge(t0 + GRACE * 5, "a", &members, &view, GRACE);
        assert_eq!(v.ghosts.len(), 1);
    }

    #[test]
    fn a_joining_member_waiting_for_a_handover_is_not_stalling() {
        let t0 = Instant::now();
        let members = live(&["a", "b", "new"]);
        // Its shards are still held (draining) by the others.
        let view = shards(&["a", "b", "a", "b", "a", "b"]);
        let mut rule = Ghosts::default();
        let v = rule.judge(t0, "a", &members, &view, GRACE);
        let v2 = rule.judge(t0 + GRACE * 2, "a", &members, &view, GRACE);
        assert!(v.ghosts.is_empty() && v2.ghosts.is_empty());
        // Released at last: the clock starts only now.
        let theirs = of("new", &["a", "b", "new"], 6);
        let freed = all_but(&theirs, 6);
        let v = rule.judge(t0 + GRACE * 3, "a", &members, &freed, GRACE);
        assert!(v.ghosts.is_empty(), "the clock starts when a shard is free");
        let v = rule.judge(
            t0 + GRACE * 3 + Duration::from_secs(2),
            "a",
            &members,
            &freed,
            GRACE,
        );
        assert!(v.ghosts.is_empty());
    }

    #[test]
    fn a_ghost_is_admitted_again_when_it_holds_a_shard_or_its_record_changes() {
        let t0 = Instant::now();
        let mut members = live(&["a", "b", "ghost"]);
        let theirs = of("ghost", &["a", "b", "ghost"], 6);
        let view = all_but(&theirs, 6);
        let mut rule = Ghosts::default();
        rule.judge(t0, "a", &members, &view, GRACE);
        assert_eq!(
            rule.judge(t0 + GRACE, "a", &members, &view, GRACE)
                .ghosts
                .len(),
            1
        );
        // Holds a shard: admitted.
        let mut holding = view.clone();
        holding[0].holder = "ghost".into();
        let v = rule.judge(t0 + GRACE * 2, "a", &members, &holding, GRACE);
        assert!(v.ghosts.is_empty());
        // Judged again, then its Lease record changes (a restart).
        rule.judge(t0 + GRACE * 3, "a", &members, &view, GRACE);
        assert_eq!(
            rule.judge(t0 + GRACE * 4, "a", &members, &view, GRACE)
                .ghosts
                .len(),
            1
        );
        members.insert("ghost".into(), "ghost/t1".into());
        let v = rule.judge(t0 + GRACE * 4, "a", &members, &view, GRACE);
        assert!(v.ghosts.is_empty());
        // Gone (expired): forgotten.
        members.remove("ghost");
        let v = rule.judge(t0 + GRACE * 5, "a", &members, &view, GRACE);
        assert!(v.ghosts.is_empty() && rule.tracks.len() == 2);
    }

    #[test]
    fn a_replica_never_judges_itself_a_ghost_but_rejoins() {
        let t0 = Instant::now();
        let members = live(&["a", "b", "me"]);
        let mine = of("me", &["a", "b", "me"], 6);
        let view = all_but(&mine, 6);
        let mut rule = Ghosts::default();
        rule.judge(t0, "me", &members, &view, GRACE);
        let v = rule.judge(t0 + GRACE, "me", &members, &view, GRACE);
        assert!(v.ghosts.is_empty());
        assert!(v.rejoin, "the others judge it a ghost now: re-acquire");
        let v = rule.judge(
            t0 + GRACE + Duration::from_secs(1),
            "me",
            &members,
            &view,
            GRACE,
        );
        assert!(!v.rejoin, "once per grace");
    }

    #[test]
    fn every_replica_reaches_the_same_verdict_from_the_same_leases() {
        let t0 = Instant::now();
        let members = live(&["a", "b", "g1", "g2"]);
        let ghosts_shards: BTreeSet<u32> = of("g1", &["a", "b", "g1", "g2"], 12)
            .union(&of("g2", &["a", "b", "g1", "g2"], 12))
            .copied()
            .collect();
        let view = all_but(&ghosts_shards, 12);
        let (mut on_a, mut on_b) = (Ghosts::default(), Ghosts::default());
        for rule in [&mut on_a, &mut on_b] {
            rule.judge(t0, "x", &members, &view, GRACE);
        }
        let a = on_a.judge(t0 + GRACE, "a", &members, &view, GRACE);
        let b = on_b.judge(t0 + GRACE, "b", &members, &view, GRACE);
        assert_eq!(a.ghosts, b.ghosts);
        assert_eq!(a.ghosts.len(), 2);
    }
}
