//! Helpers for the Jinghzhu's status: building one, comparing two, and
//! deciding whether a reconcile needs to write it at all.
//!
//! The host replaces the whole status with the one a plugin returns, and
//! makes no write when the plugin returns none. A plugin should therefore
//! return a status only when it differs from the observed one
//! ([`status_patch`]); that keeps an unchanged object free of writes.

use crate::types::{Jinghzhu, JinghzhuStatus};

/// `state` when the desired number of Pods is live and every one of them is
/// running and ready.
pub const RUNNING: &str = "Running";
/// `state` when the desired number of Pods is live but some are not running
/// and ready yet.
pub const PENDING: &str = "Pending";
/// `state` while the number of live Pods differs from the desired one (Pods
/// are being added or removed).
pub const SCALING: &str = "Scaling";

/// The one-word state for `live` Pods of which `ready` are running and
/// ready, when `desired` are wanted: [`SCALING`] while `live != desired`,
/// else [`PENDING`] while `ready < live`, else [`RUNNING`] (so `desired` 0
/// with no Pods is `Running`).
///
/// ```
/// use jinghzhu_plugin_sdk::status::{state, PENDING, RUNNING, SCALING};
/// assert_eq!(state(0, 0, 3), SCALING);
/// assert_eq!(state(3, 2, 3), PENDING);
/// assert_eq!(state(3, 3, 3), RUNNING);
/// ```
pub fn state(live: usize, ready: usize, desired: u32) -> &'static str {
    let desired = usize::try_from(desired).unwrap_or(usize::MAX);
    if live != desired {
        SCALING
    } else if ready < live {
        PENDING
    } else {
        RUNNING
    }
}

/// Builds a status: `current` is the number of names, `pod-list` the names
/// sorted.
pub fn build<S: Into<String>>(
    pod_names: impl IntoIterator<Item = S>,
    state: impl Into<String>,
    message: impl Into<String>,
    observed_generation: Option<i64>,
) -> JinghzhuStatus {
    let mut pod_list: Vec<String> = pod_names.into_iter().map(Into::into).collect();
    pod_list.sort();
    JinghzhuStatus {
        current: u32::try_from(pod_list.len()).unwrap_or(u32::MAX),
        pod_list,
        state: state.into(),
        message: message.into(),
        observed_generation,
    }
}

/// True when two statuses say the same thing. The order of `pod-list` does
/// not matter.
pub fn status_equal(a: &JinghzhuStatus, b: &JinghzhuStatus) -> bool {
    if a.current != b.current
        || a.state != b.state
        || a.message != b.message
        || a.observed_generation != b.observed_generation
        || a.pod_list.len() != b.pod_list.len()
    {
        return false;
    }
    if a.pod_list == b.pod_list {
        return true;
    }
    let mut x: Vec<&String> = a.pod_list.iter().collect();
    let mut y: Vec<&String> = b.pod_list.iter().collect();
    x.sort();
    y.sort();
    x == y
}

/// The status to return from a reconcile: `Some(computed)` when it differs
/// from `observed` (or there is none yet), `None` when nothing changed.
pub fn status_patch(
    observed: Option<&JinghzhuStatus>,
    computed: JinghzhuStatus,
) -> Option<JinghzhuStatus> {
    match observed {
        Some(old) if status_equal(old, &computed) => None,
        _ => Some(computed),
    }
}

/// [`status_patch`] against the status `jinghzhu` currently has.
pub fn patch_for(jinghzhu: &Jinghzhu, computed: JinghzhuStatus) -> Option<JinghzhuStatus> {
    status_patch(jinghzhu.status.as_ref(), computed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_follows_counts_then_readiness() {
        assert_eq!(state(0, 0, 1), SCALING, "none yet: the count differs");
        assert_eq!(state(1, 0, 1), PENDING, "there but not ready");
        assert_eq!(state(1, 1, 1), RUNNING);
        assert_eq!(state(3, 3, 2), SCALING, "too many, even if all ready");
        assert_eq!(state(0, 0, 0), RUNNING);
    }

    #[test]
    fn build_sorts_and_counts() {
        let s = build(["b", "a"], RUNNING, "2 of 2 pods present", Some(3));
        assert_eq!(s.current, 2);
        assert_eq!(s.pod_list, ["a", "b"]);
        assert_eq!(s.state, "Running");
        assert_eq!(s.observed_generation, Some(3));
    }

    #[test]
    fn equality_ignores_pod_order() {
        let a = build(["a", "b"], RUNNING, "m", Some(1));
        let mut b = a.clone();
        b.pod_list.reverse();
        assert!(status_equal(&a, &b));
        b.message = "other".into();
        assert!(!status_equal(&a, &b));
        let mut c = a.clone();
        c.pod_list = vec!["a".into(), "c".into()];
        assert!(!status_equal(&a, &c));
        let mut d = a.clone();
        d.observed_generation = None;
        assert!(!status_equal(&a, &d));
    }

    #[test]
    fn patch_only_when_changed() {
        let s = build(["a"], RUNNING, "1 of 1 pod present", Some(1));
        assert_eq!(status_patch(None, s.clone()), Some(s.clone()));
        assert_eq!(status_patch(Some(&s), s.clone()), None);
        let newer = build(["a"], RUNNING, "1 of 1 pod present", Some(2));
        assert_eq!(status_patch(Some(&s), newer.clone()), Some(newer));
    }
}
