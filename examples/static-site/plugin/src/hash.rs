//! The content hash: FNV-1a 64 over the site's files in name order, each
//! name and text prefixed with its length (so that no two different
//! contents encode alike), as 16 lowercase hex digits. Stable across
//! builds and platforms; not a cryptographic hash (it only detects
//! changes, to roll the pods and to show in the status).

use std::collections::BTreeMap;

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`, continuing from `hash`.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}

/// FNV-1a 64 of `bytes` alone (the standard function).
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    fnv1a(OFFSET_BASIS, bytes)
}

/// The hash of a site's content, as 16 hex digits.
pub fn content_hash(content: &BTreeMap<String, String>) -> String {
    let mut hash = OFFSET_BASIS;
    for (name, text) in content {
        for part in [name, text] {
            hash = fnv1a(hash, &(part.len() as u64).to_le_bytes());
            hash = fnv1a(hash, part.as_bytes());
        }
    }
    format!("{hash:016x}")
}
