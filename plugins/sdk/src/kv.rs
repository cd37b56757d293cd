//! Helpers for `list<key-value>`, the WIT shape of labels and annotations.
//!
//! The host sends these lists sorted by key; the helpers here keep them
//! sorted and free of duplicate keys when they build or change one. When a
//! list does hold a key twice (nothing forbids it), the last entry wins, as it
//! would when the list is turned into a map.

use std::collections::BTreeMap;

use crate::types::KeyValue;

impl KeyValue {
    /// Builds one entry.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// The value of `key` in `list`, if present.
pub fn get<'a>(list: &'a [KeyValue], key: &str) -> Option<&'a str> {
    list.iter()
        .rev()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}

/// The value of label `key` in a list of labels (same as [`get`]).
pub fn label<'a>(labels: &'a [KeyValue], key: &str) -> Option<&'a str> {
    get(labels, key)
}

/// The value of annotation `key` in a list of annotations (same as [`get`]).
pub fn annotation<'a>(annotations: &'a [KeyValue], key: &str) -> Option<&'a str> {
    get(annotations, key)
}

/// The list as a map; for a key present twice the last value wins.
pub fn to_map(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

/// A map as a list sorted by key.
pub fn from_map(map: &BTreeMap<String, String>) -> Vec<KeyValue> {
    map.iter().map(|(k, v)| KeyValue::new(k, v)).collect()
}

/// Pairs as a list sorted by key; for a key given twice the last value wins.
pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Vec<KeyValue>
where
    K: Into<String>,
    V: Into<String>,
{
    let map: BTreeMap<String, String> = pairs
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    map.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect()
}

/// Sets `key` to `value`, replacing every earlier entry of `key` and keeping a
/// sorted list sorted.
pub fn set(list: &mut Vec<KeyValue>, key: impl Into<String>, value: impl Into<String>) {
    let key = key.into();
    list.retain(|kv| kv.key != key);
    let at = list.partition_point(|kv| kv.key < key);
    list.insert(at, KeyValue::new(key, value));
}

/// Removes every entry of `key`; returns the value that [`get`] would have.
pub fn remove(list: &mut Vec<KeyValue>, key: &str) -> Option<String> {
    let old = get(list, key).map(str::to_owned);
    list.retain(|kv| kv.key != key);
    old
}

/// `base` with `overlay` applied on top (overlay wins), sorted by key.
pub fn merge(base: &[KeyValue], overlay: &[KeyValue]) -> Vec<KeyValue> {
    let mut map = to_map(base);
    map.extend(to_map(overlay));
    from_map(&map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_finds_last_entry() {
        let list = vec![
            KeyValue::new("a", "1"),
            KeyValue::new("b", "2"),
            KeyValue::new("a", "3"),
        ];
        assert_eq!(get(&list, "a"), Some("3"));
        assert_eq!(label(&list, "b"), Some("2"));
        assert_eq!(annotation(&list, "c"), None);
    }

    #[test]
    fn map_round_trip_is_sorted() {
        let list = from_pairs([("z", "1"), ("a", "2"), ("m", "3"), ("a", "4")]);
        let keys: Vec<&str> = list.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(keys, ["a", "m", "z"]);
        assert_eq!(get(&list, "a"), Some("4"));
        assert_eq!(from_map(&to_map(&list)), list);
    }

    #[test]
    fn set_replaces_and_keeps_order() {
        let mut list = from_pairs([("a", "1"), ("c", "3")]);
        set(&mut list, "b", "2");
        set(&mut list, "a", "9");
        assert_eq!(list, from_pairs([("a", "9"), ("b", "2"), ("c", "3")]));
        assert_eq!(remove(&mut list, "b"), Some("2".to_owned()));
        assert_eq!(remove(&mut list, "b"), None);
        assert_eq!(list.len(), 2);
    }

    #[test]
    fn merge_overlay_wins() {
        let base = from_pairs([("a", "1"), ("b", "2")]);
        let overlay = from_pairs([("b", "x"), ("c", "3")]);
        assert_eq!(
            merge(&base, &overlay),
            from_pairs([("a", "1"), ("b", "x"), ("c", "3")])
        );
    }
}
