//! Which shard an object belongs to, and how shards are spelled in labels,
//! Lease names and label selectors.
//!
//! The shard of a Jinghzhu is **FNV-1a 64 of the bytes of its
//! `metadata.uid`, modulo the shard count** (offset basis
//! `0xcbf29ce484222325`, prime `0x100000001b3`). A pod's shard is its
//! controlling Jinghzhu's (the hash of the owner reference's UID). This
//! mapping is part of the on-cluster format: it must never change between
//! versions, or two versions side by side would both own an object. The
//! unit tests pin it.
//!
//! Kubernetes 1.36's server-side sharded list and watch (KEP-5866, alpha,
//! feature gate `ShardedListAndWatch`) hashes the UID with the same FNV-1a
//! 64 but selects *ranges* of the hash (`shardRange(object.metadata.uid,
//! '0x…', '0x…')`), so a shard of this modulo mapping is not one range;
//! and it can only hash a pod's own UID, never its owner's. Using it for
//! Jinghzhus would need a range mapping (a change of this format, with an
//! upgrade path); pods would keep the label either way. Tried on
//! kube-apiserver v1.36.3 with the gate on: Jinghzhu lists and watches are
//! filtered exactly as [`fnv1a64`] predicts, but a custom resource's list
//! does not echo `shardInfo` (docs/replicas.md, "Not yet"; the figures are in
//! docs/performance.md).
//!
//! The label value is `<shard>-of-<count>` (`jinghzhu.io/shard: 7-of-32`):
//! a value written under another shard count never matches a selector of
//! this one, so changing `--shards` makes every object "unlabelled" again
//! and the labeller rewrites it, instead of silently leaving pods outside
//! their owner's cache.

use std::collections::BTreeSet;

pub use crate::ownership::SHARD_LABEL;

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The shard of the object with this UID among `count` shards (`count` > 0).
pub fn shard_of(uid: &str, count: u32) -> u32 {
    let count = u64::from(count.max(1));
    u32::try_from(fnv1a64(uid.as_bytes()) % count).unwrap_or(0)
}

/// The value of [`SHARD_LABEL`] for `shard` of `count`.
pub fn label_value(shard: u32, count: u32) -> String {
    format!("{shard}-of-{count}")
}

/// The shard a label value names, if it was written for `count` shards.
pub fn parse_label(value: &str, count: u32) -> Option<u32> {
    let (shard, of) = value.split_once("-of-")?;
    let shard: u32 = shard.parse().ok()?;
    (of.parse::<u32>().ok()? == count && shard < count).then_some(shard)
}

/// `jinghzhu.io/shard in (0-of-N,…)` for `shards`; a selector that matches
/// nothing when the set is empty (no Kubernetes label value is `none-of-N`
/// written by this host).
pub fn selector_in(shards: &BTreeSet<u32>, count: u32) -> String {
    if shards.is_empty() {
        return format!("{SHARD_LABEL} in (none-of-{count})");
    }
    let values: Vec<String> = shards.iter().map(|s| label_value(*s, count)).collect();
    format!("{SHARD_LABEL} in ({})", values.join(","))
}

/// Objects whose label is missing or not one of this shard count's values:
/// what the labeller (re)writes.
pub fn selector_unlabelled(count: u32) -> String {
    let values: Vec<String> = (0..count).map(|s| label_value(s, count)).collect();
    format!("{SHARD_LABEL} notin ({})", values.join(","))
}

/// Name of the Lease of `shard`: `<prefix>-shard-07`.
pub fn shard_lease_name(prefix: &str, shard: u32) -> String {
    format!("{prefix}-shard-{shard:02}")
}

/// Name of the membership Lease of the replica `identity` (identities may
/// hold characters a name may not, so the name carries their hash).
pub fn member_lease_name(prefix: &str, identity: &str) -> String {
    format!("{prefix}-member-{:016x}", fnv1a64(identity.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fnv1a_64_and_never_changes() {
        // Reference values of FNV-1a 64 (draft-eastlake-fnv test vectors).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        // Pinned shards: changing these would move objects between versions.
        let uid = "6f1c2a43-8e0b-4c55-9d4e-1b2f3a4c5d6e";
        assert_eq!(shard_of(uid, 32), (fnv1a64(uid.as_bytes()) % 32) as u32);
        assert_eq!(shard_of("a", 32), (0xaf63_dc4c_8601_ec8c_u64 % 32) as u32);
        assert_eq!(shard_of("anything", 1), 0);
    }

    #[test]
    fn label_values_carry_the_shard_count() {
        assert_eq!(label_value(7, 32), "7-of-32");
        assert_eq!(parse_label("7-of-32", 32), Some(7));
        assert_eq!(parse_label("7-of-16", 32), None, "another shard count");
        assert_eq!(parse_label("40-of-32", 32), None);
        assert_eq!(parse_label("7", 32), None);
        let set = BTreeSet::from([3, 12]);
        assert_eq!(
            selector_in(&set, 16),
            "jinghzhu.io/shard in (3-of-16,12-of-16)"
        );
        assert!(selector_in(&BTreeSet::new(), 16).contains("none-of-16"));
        assert_eq!(
            selector_unlabelled(2),
            "jinghzhu.io/shard notin (0-of-2,1-of-2)"
        );
        assert_eq!(
            shard_lease_name("wasm-operator", 7),
            "wasm-operator-shard-07"
        );
        let member = member_lease_name("wasm-operator", "host_1234");
        assert!(member.starts_with("wasm-operator-member-") && member.len() == 37);
    }
}
