//! Which replica should hold which shard: a pure function of the shard count
//! and the set of live replicas, so every replica computes the same answer
//! from the same membership without talking to the others.
//!
//! Fair: each of `m` replicas gets `⌊N/m⌋` or `⌈N/m⌉` of the `N` shards.
//! Stable: rendezvous (highest-random-weight) hashing with bounded loads.
//! Every (shard, replica) pair gets a weight, FNV-1a 64 of
//! `"<shard>/<identity>"`; pairs are taken heaviest first, each giving the
//! shard to the replica if the shard is still free and the replica has room.
//! A replica joining or leaving changes the weights of its own pairs only, so
//! most shards keep their holder (the unit tests bound the moves).
//!
//! Agreement is only needed for liveness: a replica takes a shard only when
//! its Lease is free or expired (see [`super::coordinator`]), so two replicas
//! with different views of the membership never hold one shard together;
//! they converge once their views agree.

use std::collections::{BTreeMap, BTreeSet};

use super::hash::fnv1a64;

/// The shards each of `members` should hold (every member has an entry).
pub fn assign(count: u32, members: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<u32>> {
    let mut out: BTreeMap<String, BTreeSet<u32>> = members
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    let m = u32::try_from(members.len()).unwrap_or(u32::MAX);
    if m == 0 || count == 0 {
        return out;
    }
    let (base, extra) = (count / m, count % m);
    let mut pairs: Vec<(u64, u32, &String)> = Vec::with_capacity(count as usize * members.len());
    for shard in 0..count {
        for member in members {
            let weight = fnv1a64(format!("{shard}/{member}").as_bytes());
            pairs.push((weight, shard, member));
        }
    }
    // Heaviest first; ties (practically impossible) by shard then identity.
    pairs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(b.2)));
    let mut taken = vec![false; count as usize];
    let mut extras_used = 0u32;
    for (_, shard, member) in pairs {
        if taken[shard as usize] {
            continue;
        }
        let Some(held) = out.get_mut(member) else {
            continue;
        };
        let load = u32::try_from(held.len()).unwrap_or(u32::MAX);
        let room = load < base || (load == base && extras_used < extra);
        if !room {
            continue;
        }
        if load == base {
            extras_used += 1;
        }
        held.insert(shard);
        taken[shard as usize] = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn owner_map(assignment: &BTreeMap<String, BTreeSet<u32>>) -> BTreeMap<u32, String> {
        assignment
            .iter()
            .flat_map(|(m, shards)| shards.iter().map(move |s| (*s, m.clone())))
            .collect()
    }

    fn moved(a: &BTreeMap<u32, String>, b: &BTreeMap<u32, String>) -> usize {
        a.iter().filter(|(s, m)| b.get(s) != Some(m)).count()
    }

    #[test]
    fn every_shard_has_exactly_one_holder_and_shares_are_fair() {
        for count in [1u32, 2, 7, 12, 32, 100] {
            for m in 1..=7usize {
                let names: Vec<String> = (0..m).map(|i| format!("replica-{i}")).collect();
                let set: BTreeSet<String> = names.iter().cloned().collect();
                let assignment = assign(count, &set);
                let owners = owner_map(&assignment);
                assert_eq!(owners.len(), count as usize, "count {count}, {m} members");
                let total: usize = assignment.values().map(BTreeSet::len).sum();
                assert_eq!(total, count as usize, "no shard twice");
                let (lo, hi) = (count as usize / m, (count as usize).div_ceil(m));
                for (member, shards) in &assignment {
                    assert!(
                        (lo..=hi).contains(&shards.len()),
                        "{member} holds {} of {count} with {m} members",
                        shards.len()
                    );
                }
            }
        }
        assert!(assign(32, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn the_assignment_is_deterministic() {
        let a = assign(32, &members(&["a", "b", "c"]));
        let b = assign(32, &members(&["c", "b", "a"]));
        assert_eq!(a, b);
    }

    #[test]
    fn joining_or_leaving_moves_few_shards() {
        let count = 32u32;
        let three = owner_map(&assign(count, &members(&["host-a", "host-b", "host-c"])));
        let four = owner_map(&assign(
            count,
            &members(&["host-a", "host-b", "host-c", "host-d"]),
        ));
        let two = owner_map(&assign(count, &members(&["host-a", "host-b"])));
        // The ideal is N/4 = 8 moved on a join and N/3 ≈ 11 on a leave;
        // modulo-style assignment would move most of the 32.
        let join = moved(&three, &four);
        let leave = moved(&three, &two);
        assert!(join <= 12, "a join moved {join} of {count} shards");
        assert!(leave <= 14, "a leave moved {leave} of {count} shards");
        // Shards of the one who left go to the others; shards of those who
        // stayed mostly stay.
        let kept = three
            .iter()
            .filter(|(_, m)| m.as_str() != "host-c")
            .filter(|(s, m)| two.get(s) == Some(m))
            .count();
        let stayed = three.values().filter(|m| m.as_str() != "host-c").count();
        assert!(
            kept + 3 >= stayed,
            "{kept} of {stayed} shards kept their holder"
        );
    }
}
