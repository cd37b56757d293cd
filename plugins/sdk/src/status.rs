//! Helpers for the Jinghzhu's status: building one, comparing two, and
//! deciding whether a reconcile needs to write it at all.
//!
//! The host replaces the whole status with the one a plugin returns, and
//! makes no write when the plugin returns none. A plugin should therefore
//! return a status only when it differs from the observed one
//! ([`status_patch`]); that keeps an unchanged object free of writes.

use crate::types::{Jinghzhu, JinghzhuStatus};
use crate::view::StatusView;

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

/// [`status_patch`] against a borrowed `observed` status (see
/// [`crate::view`]), for the status [`build`] would make from `pod_names`
/// (in any order), `state`, `message` and `observed_generation`: `None`
/// when `observed` says the same, else the built status. Unlike building
/// first, an unchanged status costs no allocation per name.
///
/// ```
/// use jinghzhu_plugin_sdk::status::{build, patch_from_view, RUNNING};
/// use jinghzhu_plugin_sdk::testing::jinghzhu;
/// use jinghzhu_plugin_sdk::view::JinghzhuView;
///
/// let jz = jinghzhu("web", "default", 2)
///     .status(build(["web-a", "web-b"], RUNNING, "2/2", Some(1)))
///     .build();
/// let observed = JinghzhuView::of(&jz).status();
/// assert_eq!(patch_from_view(observed, vec!["web-b", "web-a"], RUNNING, "2/2".into(), Some(1)), None);
/// let changed = patch_from_view(observed, vec!["web-b"], RUNNING, "1/2".into(), Some(1));
/// assert_eq!(changed.map(|s| s.pod_list), Some(vec!["web-b".to_owned()]));
/// ```
pub fn patch_from_view(
    observed: Option<StatusView<'_>>,
    mut pod_names: Vec<&str>,
    state: &str,
    message: String,
    observed_generation: Option<i64>,
) -> Option<JinghzhuStatus> {
    pod_names.sort_unstable();
    let unchanged = observed.is_some_and(|old| {
        let names = old.pod_list();
        old.current() == u32::try_from(pod_names.len()).unwrap_or(u32::MAX)
            && old.state() == state
            && old.message() == message
            && old.observed_generation() == observed_generation
            && names.len() == pod_names.len()
            && (names.iter().eq(pod_names.iter().copied()) || {
                let mut old_names: Vec<&str> = names.iter().collect();
                old_names.sort_unstable();
                old_names == pod_names
            })
    });
    (!unchanged).then(|| build(pod_names, state, message, observed_generation))
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
    fn patch_from_view_is_status_patch_of_build() {
        use crate::view::StatusView;
        let old = build(["b", "a", "c"], RUNNING, "3 of 3", Some(2));
        let mut shuffled = old.clone();
        shuffled.pod_list = vec!["c".into(), "a".into(), "b".into()];
        let cases: Vec<(Vec<&str>, &str, &str, Option<i64>)> = vec![
            (vec!["a", "b", "c"], RUNNING, "3 of 3", Some(2)),
            (vec!["c", "b", "a"], RUNNING, "3 of 3", Some(2)),
            (vec!["a", "b"], RUNNING, "3 of 3", Some(2)),
            (vec!["a", "b", "d"], RUNNING, "3 of 3", Some(2)),
            (vec!["a", "b", "c"], PENDING, "3 of 3", Some(2)),
            (vec!["a", "b", "c"], RUNNING, "3 of 4", Some(2)),
            (vec!["a", "b", "c"], RUNNING, "3 of 3", None),
        ];
        for observed in [None, Some(&old), Some(&shuffled)] {
            let view = observed.map(StatusView::of);
            for (names, state, message, generation) in &cases {
                let built = build(names.clone(), *state, *message, *generation);
                assert_eq!(
                    patch_from_view(view, names.clone(), state, message.to_string(), *generation),
                    status_patch(observed, built),
                    "{observed:?} against {names:?} {state} {message} {generation:?}"
                );
            }
        }
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
