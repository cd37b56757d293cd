//! Which entries of a bounded directory go: when the entries' bytes add up
//! to more than the bound, the least recently used ones that are not
//! pinned, oldest first, until the rest fits. Pinned entries count towards
//! the total but never go, so a directory whose pinned entries alone are
//! over the bound keeps exactly those.
//!
//! Pure: the caller lists its entries (recency is the mtime it sets with
//! [`super::private::touch`] on each use), removes what this chooses, and
//! is crash-safe by removing each entry's files in an order that never
//! leaves a half entry that would be served.

use std::time::SystemTime;

/// One entry of a bounded directory.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its bytes on disk (all its files).
    pub bytes: u64,
    /// When it was last written or used.
    pub last_used: SystemTime,
    /// Never removed (serving, previous, shadow, last known good).
    pub pinned: bool,
}

/// The indexes of the entries to remove so that the rest adds up to at most
/// `bound` bytes (or to the pinned entries alone), least recently used first.
pub fn choose(entries: &[Entry], bound: u64) -> Vec<usize> {
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut candidates: Vec<usize> = (0..entries.len()).filter(|&i| !entries[i].pinned).collect();
    candidates.sort_by_key(|&i| entries[i].last_used);
    let mut out = Vec::new();
    for i in candidates {
        if total <= bound {
            break;
        }
        total = total.saturating_sub(entries[i].bytes);
        out.push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(bytes: u64, age_secs: u64, pinned: bool) -> Entry {
        Entry {
            bytes,
            last_used: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 - age_secs),
            pinned,
        }
    }

    #[test]
    fn under_the_bound_nothing_goes() {
        let entries = [entry(10, 5, false), entry(10, 1, false)];
        assert!(choose(&entries, 20).is_empty());
        assert!(choose(&[], 0).is_empty());
    }

    #[test]
    fn the_least_recently_used_go_first_until_the_rest_fits() {
        let entries = [
            entry(40, 10, false), // 0: second oldest
            entry(30, 1, false),  // 1: newest
            entry(50, 20, false), // 2: oldest
            entry(20, 5, false),  // 3
        ];
        // 140 bytes, bound 90: the oldest (50) makes 90.
        assert_eq!(choose(&entries, 90), vec![2]);
        // Bound 60: then the next oldest (40) too.
        assert_eq!(choose(&entries, 60), vec![2, 0]);
        // Bound 0: all of them, oldest first.
        assert_eq!(choose(&entries, 0), vec![2, 0, 3, 1]);
    }

    #[test]
    fn pinned_entries_never_go_even_over_the_bound() {
        let entries = [
            entry(100, 50, true), // the oldest, but pinned (e.g. the previous plugin)
            entry(10, 40, false),
            entry(100, 1, true),
            entry(10, 2, false),
        ];
        // 220 bytes: both unpinned ones go, and 200 is still over 150.
        assert_eq!(choose(&entries, 150), vec![1, 3]);
        assert_eq!(choose(&entries, 210), vec![1]);
        assert!(choose(&entries, 220).is_empty());
    }
}
