//! The soak's invariants, as a pure state machine fed with what the
//! harness sees (its own writes of `spec.desired`, the pod watch in
//! resourceVersion order, the Jinghzhu watch, the replicas' requests as
//! their fault proxies logged them, the shard Leases), so each can be
//! unit-tested with a synthetic timeline. Each invariant and its bound:
//!
//! - **Duplicate** ([`Violation::Duplicate`], bound 0): a pod that becomes
//!   live while its object already has `reference` live pods, where
//!   `reference` is the largest `spec.desired` the harness has written for
//!   the object since it last had exactly that many pods, lowered as
//!   pods go away (see [`Checker::pod_removed`]). Such a pod answers no
//!   desired count the host could have seen: it is a create no expectation
//!   accounts for. Judged event by event on the pod watch, whose events
//!   come in the API server's order, against desired counts the harness
//!   records *before* it sends them, so neither watch lag nor an edit in
//!   flight makes a false positive.
//! - **Surplus during scale-up** ([`Violation::Surplus`], bound
//!   [`Bounds::surplus`] = 0): while every edit of an object since it was
//!   last exact went up (or it was not edited), its live pods never exceed
//!   the last desired count written. The largest excess of any object at
//!   any time, scale-downs in progress included, is reported as "max live
//!   pods over desired".
//! - **Fence** ([`Violation::Fence`], window [`Bounds::fence_window`] = the
//!   lease duration): two writes for the same object (a pod create, a pod
//!   delete, a status patch) from two replicas closer together than the
//!   window, where the replica that sent one of them did not hold the
//!   object's shard when it sent it: another replica had acquired (or it
//!   had released) the shard's Lease before, or its last renewal plus the
//!   lease duration had passed ([`fence_violations`]).
//! - **Final convergence** ([`Violation::NotConverged`], bound
//!   [`Bounds::final_convergence`] = 60 s): once the last fault has ended
//!   and churn has stopped, every object is exact (its live pods are
//!   `desired` and its status says so at its generation) within the bound.
//! - **Replica exit** ([`Violation::ReplicaExit`], bound 0): a replica
//!   process that exits other than by the harness's kill or SIGTERM.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde::Serialize;

/// The documented bounds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Bounds {
    /// Most live pods over the desired count during a scale-up.
    pub surplus: u32,
    /// Two replicas' writes for one object closer than this, one of them
    /// unfenced, violate the fence.
    #[serde(serialize_with = "secs")]
    pub fence_window: Duration,
    /// Every object exact within this after the last fault and churn end.
    #[serde(serialize_with = "secs")]
    pub final_convergence: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "invariant", rename_all = "kebab-case")]
pub enum Violation {
    /// A pod became live with `live` pods (itself included) over `reference`.
    Duplicate {
        at_secs: f64,
        object: String,
        pod: String,
        live: u32,
        reference: u32,
    },
    /// More live pods than desired while scaling up.
    Surplus {
        at_secs: f64,
        object: String,
        live: u32,
        desired: u32,
    },
    /// Two replicas wrote for one object within the fence window.
    Fence {
        object: String,
        shard: u32,
        /// The unfenced write: replica, seconds, request.
        unfenced: (u32, f64, String),
        /// The other replica's write.
        other: (u32, f64, String),
        /// Why the first was unfenced.
        why: String,
    },
    /// Objects not exact within the bound after the last fault.
    NotConverged {
        after_secs: f64,
        objects: Vec<String>,
    },
    /// A replica process exited on its own.
    ReplicaExit {
        at_secs: f64,
        replica: u32,
        what: String,
    },
}

/// What the harness knows of one object.
#[derive(Debug, Clone, Default)]
struct Object {
    /// The last `spec.desired` the harness wrote.
    current: u32,
    /// See the module doc.
    reference: u32,
    /// Every edit since the object was last exact went up.
    scaling_up: bool,
    /// Live pods by name.
    live: BTreeSet<String>,
    /// Pods seen live at some point (a pod is counted once).
    ever_live: BTreeSet<String>,
    /// Most live pods over `current` ever seen.
    max_over: i64,
    deleted: bool,
}

/// A pod as the checker needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Its name.
    pub name: String,
    /// The name of its controller (a Jinghzhu), if any.
    pub owner: Option<String>,
    /// Neither terminating nor finished.
    pub live: bool,
}

/// The invariant checker's state.
#[derive(Debug, Default)]
pub struct Checker {
    objects: HashMap<String, Object>,
    /// Pod name → owner name, for every pod ever seen.
    pod_owner: HashMap<String, String>,
    /// Every violation so far.
    pub violations: Vec<Violation>,
    /// Pods that became live, by owner.
    pub pods_made: BTreeMap<String, u32>,
    surplus_bound: u32,
}

impl Checker {
    /// A checker with `bounds`.
    pub fn new(bounds: &Bounds) -> Self {
        Self {
            surplus_bound: bounds.surplus,
            ..Self::default()
        }
    }

    /// The harness is about to write `desired` for `object` (its create or
    /// a scale edit).
    pub fn desired_set(&mut self, object: &str, desired: u32) {
        let o = self.objects.entry(object.to_owned()).or_insert(Object {
            scaling_up: true,
            ..Object::default()
        });
        if desired < o.current {
            o.scaling_up = false;
        }
        o.current = desired;
        o.reference = o.reference.max(desired);
    }

    /// The harness deleted `object` (its pods are the garbage collector's).
    pub fn object_deleted(&mut self, object: &str) {
        if let Some(o) = self.objects.get_mut(object) {
            o.deleted = true;
        }
    }

    /// The Jinghzhu watch shows `object` exact at `spec_desired`.
    pub fn exact(&mut self, object: &str, spec_desired: u32) {
        if let Some(o) = self.objects.get_mut(object) {
            o.reference = spec_desired.max(o.current);
            o.scaling_up = true;
        }
    }

    /// A pod event (added or changed) at `at_secs`.
    pub fn pod_applied(&mut self, pod: &PodView, at_secs: f64) {
        let Some(owner) = pod.owner.clone() else {
            return;
        };
        self.pod_owner.insert(pod.name.clone(), owner.clone());
        if !pod.live {
            self.pod_removed(&pod.name);
            return;
        }
        let o = self.objects.entry(owner.clone()).or_default();
        if o.live.contains(&pod.name) || o.ever_live.contains(&pod.name) {
            return;
        }
        o.live.insert(pod.name.clone());
        o.ever_live.insert(pod.name.clone());
        *self.pods_made.entry(owner.clone()).or_default() += 1;
        let live = o.live.len() as u32;
        o.max_over = o.max_over.max(i64::from(live) - i64::from(o.current));
        if o.deleted {
            return;
        }
        if live > o.reference {
            self.violations.push(Violation::Duplicate {
                at_secs,
                object: owner.clone(),
                pod: pod.name.clone(),
                live,
                reference: o.reference,
            });
        }
        if o.scaling_up && live > o.current + self.surplus_bound {
            self.violations.push(Violation::Surplus {
                at_secs,
                object: owner,
                live,
                desired: o.current,
            });
        }
    }

    /// A pod is gone or no longer live: the reference comes down with the
    /// live pods, never below the last desired count written.
    pub fn pod_removed(&mut self, pod: &str) {
        let Some(owner) = self.pod_owner.get(pod) else {
            return;
        };
        if let Some(o) = self.objects.get_mut(owner)
            && o.live.remove(pod)
        {
            let live = o.live.len() as u32;
            o.reference = o.current.max(o.reference.min(live));
        }
    }

    /// The pod watch listed again: `pods` is everything now. Pods not seen
    /// before are judged as they come; pods gone are removed.
    pub fn relisted(&mut self, pods: &[PodView], at_secs: f64) {
        let now: BTreeSet<&str> = pods
            .iter()
            .filter(|p| p.live)
            .map(|p| p.name.as_str())
            .collect();
        let gone: Vec<String> = self
            .objects
            .values()
            .flat_map(|o| o.live.iter())
            .filter(|name| !now.contains(name.as_str()))
            .cloned()
            .collect();
        for pod in gone {
            self.pod_removed(&pod);
        }
        for pod in pods {
            self.pod_applied(pod, at_secs);
        }
    }

    /// The owner of a pod ever seen.
    pub fn owner_of_pod(&self, pod: &str) -> Option<&str> {
        self.pod_owner.get(pod).map(String::as_str)
    }

    /// Live pod names of `object`, sorted.
    pub fn live_pods(&self, object: &str) -> Vec<&str> {
        self.objects
            .get(object)
            .map(|o| o.live.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// The largest live-over-desired excess of any object so far (scale-downs included).
    pub fn max_over_desired(&self) -> i64 {
        self.objects.values().map(|o| o.max_over).max().unwrap_or(0)
    }
}

/// One write a replica sent, as its proxy logged it.
#[derive(Debug, Clone)]
pub struct Write {
    /// Which replica.
    pub replica: u32,
    /// When it reached the proxy, seconds since the soak started.
    pub at_secs: f64,
    /// For which Jinghzhu.
    pub object: String,
    /// `POST pods`, `DELETE pods/x`, `PATCH status`.
    pub what: String,
}

/// One observed version of a shard's Lease (times in seconds since the
/// soak started, from the Lease's own wall-clock fields).
#[derive(Debug, Clone)]
pub struct LeaseSeen {
    /// `holderIdentity` (empty: released).
    pub holder: String,
    /// `acquireTime`.
    pub acquired_secs: f64,
    /// `renewTime`.
    pub renewed_secs: f64,
    /// `leaseDurationSeconds`.
    pub duration_secs: f64,
}

/// Clock slack when comparing a proxy's arrival time with a Lease's wall
/// clock (both on this machine; the Lease's fields have microseconds).
pub const CLOCK_SLACK_SECS: f64 = 0.25;

/// When a Lease version changed hands: a holder's from its `acquireTime`;
/// a release (empty holder) keeps the `acquireTime` of the hold it ends,
/// so it counts from its `renewTime`, which the releaser sets.
fn changed_hands_secs(lease: &LeaseSeen) -> f64 {
    if lease.holder.is_empty() {
        lease.renewed_secs.max(lease.acquired_secs)
    } else {
        lease.acquired_secs
    }
}

/// Why the replica `identity` did not hold the shard whose Lease history
/// is `leases` at `at_secs`, or `None` when it did (or the history does
/// not say: no version before, a change of hands within
/// [`CLOCK_SLACK_SECS`] of the write, or renewals the harness may have
/// missed).
///
/// Two things the Lease records alone get wrong, measured in the CI soak
/// (seed 43: the 50 listed of the 55 writes it counted as sent without
/// the shard were all one or the other, 45.2-46.8 s into the run, as the
/// kube-apiserver became ready again after its restart at 35.9 s):
/// - A take is a renewal: the host writes `renewTime` = `acquireTime` when
///   it takes a Lease, so a version's `acquireTime` is a renewal by its
///   holder even when the harness never saw the take's own version (its
///   watch relisted later and saw only a later renewal of that hold).
/// - `gaps` are the intervals in which the harness's own Lease watch was
///   down (from its last event before an error or a relist to the end of
///   the relist, see `watch_leases`): renewals made then were never seen,
///   and only the version current at the relist was. A write whose last
///   seen renewal lapsed across such a gap is not judged by the renewal
///   (a change of hands still is: `acquireTime` survives the gap). The
///   replicas reach the restarted API server before the harness's watch,
///   whose backoff is longer, does: without this, every write made after
///   a restart until the harness relisted was counted.
pub fn unheld(
    identity: &str,
    leases: &[LeaseSeen],
    gaps: &[(f64, f64)],
    at_secs: f64,
) -> Option<String> {
    let last = leases
        .iter()
        .filter(|l| changed_hands_secs(l) <= at_secs + CLOCK_SLACK_SECS)
        .max_by(|a, b| changed_hands_secs(a).total_cmp(&changed_hands_secs(b)))?;
    let changed = changed_hands_secs(last);
    if last.holder != identity {
        if changed > at_secs - CLOCK_SLACK_SECS || lapsed_before(last, leases, at_secs) {
            return None;
        }
        return Some(if last.holder.is_empty() {
            format!("the Lease had been released at {changed:.2} s")
        } else {
            format!("{} had acquired the Lease at {changed:.2} s", last.holder)
        });
    }
    let renewed = leases
        .iter()
        .filter(|l| l.holder == identity)
        .flat_map(|l| {
            [
                (l.renewed_secs, l.duration_secs),
                (l.acquired_secs, l.duration_secs),
            ]
        })
        .filter(|(at, _)| *at <= at_secs + CLOCK_SLACK_SECS)
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    let unseen = gaps
        .iter()
        .any(|(from, to)| *from < at_secs && *to > renewed.0);
    (!unseen && renewed.0 + renewed.1 < at_secs - CLOCK_SLACK_SECS).then(|| {
        format!(
            "its last renewal ({:.2} s) plus the lease duration ({} s) had passed",
            renewed.0, renewed.1
        )
    })
}

/// Whether the hold `last` belongs to (its holder, its `acquireTime`) had
/// lapsed by the Lease records before `at_secs`: its last seen renewal plus
/// its duration had passed (a renewal seen after `at_secs` counts: the same
/// `acquireTime` then proves nobody took the Lease in between). Any
/// replica could then take the Lease in a
/// version the harness never saw (its watch missed a brief take and
/// release), so a write by another replica is not judged by it: a CI soak
/// counted a replica's writes during such a hold (taken 14 s after the
/// recorded holder's last renewal, released 0.9 s later, both seen in that
/// replica's log, neither in the harness's Lease watch).
fn lapsed_before(last: &LeaseSeen, leases: &[LeaseSeen], at_secs: f64) -> bool {
    if last.holder.is_empty() {
        return false;
    }
    let expiry = leases
        .iter()
        .filter(|l| l.holder == last.holder && l.acquired_secs == last.acquired_secs)
        .map(|l| l.renewed_secs.max(l.acquired_secs) + l.duration_secs)
        .fold(f64::MIN, f64::max);
    expiry < at_secs - CLOCK_SLACK_SECS
}

/// A write sent by a replica that did not hold the object's shard by the
/// Lease records (a violation only with another replica's write within the
/// fence window).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unfenced {
    /// The object.
    pub object: String,
    /// Its shard.
    pub shard: u32,
    /// The replica that sent it.
    pub replica: u32,
    /// When it reached the replica's proxy (s since the start).
    pub at_secs: f64,
    /// The request.
    pub what: String,
    /// Why the replica did not hold the shard then.
    pub why: String,
}

/// The fence violations among `writes` (see the module doc): `shard_of`
/// gives an object's shard, `leases` each shard's history, `gaps` when the
/// harness's Lease watch was down (see [`unheld`]), `identity` a replica's
/// holder identity.
pub fn fence_violations(
    writes: &[Write],
    leases: &BTreeMap<u32, Vec<LeaseSeen>>,
    gaps: &[(f64, f64)],
    shard_of: impl Fn(&str) -> Option<u32>,
    identity: impl Fn(u32) -> String,
    window: Duration,
) -> (Vec<Violation>, Vec<Unfenced>) {
    let mut by_object: HashMap<&str, Vec<&Write>> = HashMap::new();
    for w in writes {
        by_object.entry(w.object.as_str()).or_default().push(w);
    }
    let mut violations = Vec::new();
    let mut unfenced_writes = Vec::new();
    for (object, mut list) in by_object {
        let Some(shard) = shard_of(object) else {
            continue;
        };
        let history = leases.get(&shard).map(Vec::as_slice).unwrap_or_default();
        list.sort_by(|a, b| a.at_secs.total_cmp(&b.at_secs));
        for w in &list {
            let Some(why) = unheld(&identity(w.replica), history, gaps, w.at_secs) else {
                continue;
            };
            unfenced_writes.push(Unfenced {
                object: object.to_owned(),
                shard,
                replica: w.replica,
                at_secs: w.at_secs,
                what: w.what.clone(),
                why: why.clone(),
            });
            let other = list.iter().find(|o| {
                o.replica != w.replica && (o.at_secs - w.at_secs).abs() < window.as_secs_f64()
            });
            if let Some(other) = other {
                violations.push(Violation::Fence {
                    object: object.to_owned(),
                    shard,
                    unfenced: (w.replica, w.at_secs, w.what.clone()),
                    other: (other.replica, other.at_secs, other.what.clone()),
                    why,
                });
            }
        }
    }
    (violations, unfenced_writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        surplus: 0,
        fence_window: Duration::from_secs(4),
        final_convergence: Duration::from_secs(60),
    };

    fn pod(name: &str, owner: &str, live: bool) -> PodView {
        PodView {
            name: name.to_owned(),
            owner: Some(owner.to_owned()),
            live,
        }
    }

    #[test]
    fn pods_up_to_the_desired_count_are_fine_and_one_more_is_a_duplicate() {
        let mut c = Checker::new(&BOUNDS);
        c.desired_set("a", 2);
        c.pod_applied(&pod("a-1", "a", true), 1.0);
        c.pod_applied(&pod("a-2", "a", true), 1.1);
        // The same pod again (its status changed): not a second pod.
        c.pod_applied(&pod("a-2", "a", true), 1.2);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        c.pod_applied(&pod("a-3", "a", true), 1.3);
        assert!(matches!(
            c.violations.as_slice(),
            [
                Violation::Duplicate {
                    live: 3,
                    reference: 2,
                    ..
                },
                Violation::Surplus {
                    live: 3,
                    desired: 2,
                    ..
                }
            ]
        ));
        assert_eq!(c.max_over_desired(), 1);
        assert_eq!(c.pods_made["a"], 3);
    }

    #[test]
    fn a_scale_down_then_up_before_the_deletes_is_no_duplicate() {
        let mut c = Checker::new(&BOUNDS);
        c.desired_set("a", 3);
        for i in 1..=3 {
            c.pod_applied(&pod(&format!("a-{i}"), "a", true), 1.0);
        }
        c.exact("a", 3);
        c.desired_set("a", 1);
        c.desired_set("a", 2);
        // The host saw 1 and deleted two, then saw 2 and made one.
        c.pod_applied(&pod("a-1", "a", false), 2.0);
        c.pod_removed("a-2");
        c.pod_applied(&pod("a-4", "a", true), 2.1);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        // A second create for the same missing pod is one too many.
        c.pod_applied(&pod("a-5", "a", true), 2.2);
        assert!(
            matches!(
                c.violations.as_slice(),
                [Violation::Duplicate {
                    live: 3,
                    reference: 2,
                    ..
                }]
            ),
            "{:?}",
            c.violations
        );
    }

    #[test]
    fn a_pod_replacing_a_deleted_one_after_a_scale_down_is_a_duplicate() {
        let mut c = Checker::new(&BOUNDS);
        c.desired_set("a", 3);
        for i in 1..=3 {
            c.pod_applied(&pod(&format!("a-{i}"), "a", true), 1.0);
        }
        c.desired_set("a", 1);
        c.pod_removed("a-1");
        c.pod_removed("a-2");
        // Not exact yet at the checker's last census, but down to 1: a new
        // pod answers no desired count.
        c.pod_applied(&pod("a-4", "a", true), 3.0);
        assert!(matches!(
            c.violations.as_slice(),
            [Violation::Duplicate { .. }]
        ));
    }

    #[test]
    fn a_relist_judges_new_pods_and_forgets_gone_ones() {
        let mut c = Checker::new(&BOUNDS);
        c.desired_set("a", 2);
        c.pod_applied(&pod("a-1", "a", true), 1.0);
        c.pod_applied(&pod("a-2", "a", true), 1.0);
        c.relisted(&[pod("a-2", "a", true), pod("a-3", "a", true)], 5.0);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert_eq!(c.live_pods("a"), ["a-2", "a-3"]);
        c.relisted(
            &[
                pod("a-2", "a", true),
                pod("a-3", "a", true),
                pod("a-4", "a", true),
            ],
            6.0,
        );
        assert_eq!(c.violations.len(), 2, "{:?}", c.violations);
    }

    #[test]
    fn deleted_objects_and_unowned_pods_are_not_judged() {
        let mut c = Checker::new(&BOUNDS);
        c.desired_set("a", 1);
        c.object_deleted("a");
        c.pod_applied(&pod("a-1", "a", true), 1.0);
        c.pod_applied(&pod("a-2", "a", true), 1.0);
        c.pod_applied(
            &PodView {
                name: "loose".into(),
                owner: None,
                live: true,
            },
            1.0,
        );
        assert!(c.violations.is_empty());
    }

    fn lease(holder: &str, acquired: f64, renewed: f64) -> LeaseSeen {
        LeaseSeen {
            holder: holder.to_owned(),
            acquired_secs: acquired,
            renewed_secs: renewed,
            duration_secs: 4.0,
        }
    }

    fn write(replica: u32, at: f64) -> Write {
        Write {
            replica,
            at_secs: at,
            object: "a".into(),
            what: "POST pods".into(),
        }
    }

    fn fence(writes: &[Write], history: Vec<LeaseSeen>) -> (Vec<Violation>, Vec<Unfenced>) {
        fence_violations(
            writes,
            &BTreeMap::from([(0, history)]),
            &[],
            |_| Some(0),
            |r| format!("replica-{r}"),
            Duration::from_secs(4),
        )
    }

    #[test]
    fn a_handover_by_the_lease_is_fenced() {
        let history = vec![
            lease("replica-0", 0.0, 0.0),
            lease("replica-0", 0.0, 9.0),
            lease("", 10.0, 10.0),
            lease("replica-1", 10.2, 10.2),
        ];
        let writes = [write(0, 9.5), write(1, 10.5)];
        let (violations, unfenced) = fence(&writes, history);
        assert!(
            violations.is_empty() && unfenced.is_empty(),
            "{violations:?}"
        );
    }

    #[test]
    fn a_write_after_another_replica_took_the_lease_violates_the_fence() {
        // replica-0 stopped at 5 s (last renewal), replica-1 took the
        // expired Lease at 9.5 s, replica-0 resumed and wrote at 10 s.
        let history = vec![lease("replica-0", 0.0, 5.0), lease("replica-1", 9.5, 9.5)];
        let writes = [write(1, 9.8), write(0, 10.0)];
        let (violations, unfenced) = fence(&writes, history.clone());
        assert_eq!(unfenced.len(), 1);
        assert!(
            matches!(
                &violations[..],
                [Violation::Fence {
                    unfenced: (0, _, _),
                    other: (1, _, _),
                    ..
                }]
            ),
            "{violations:?}"
        );
        // Alone (no other replica wrote for it nearby) it is counted, not a violation.
        let mut renewed = history;
        renewed.push(lease("replica-1", 9.5, 19.0));
        let (violations, unfenced) = fence(&[write(0, 10.0), write(1, 20.0)], renewed);
        assert!(violations.is_empty() && unfenced.len() == 1);
    }

    #[test]
    fn a_write_while_the_recorded_holder_had_lapsed_is_not_judged() {
        // replica-0 last renewed at 39.7 s; replica-2 took and released the
        // Lease unseen around 54 s; replica-0 took it again at 54.6 s.
        let history = vec![
            lease("replica-0", 1.7, 39.7),
            lease("replica-0", 54.6, 54.6),
        ];
        let (violations, unfenced) = fence(&[write(2, 54.1), write(0, 55.3)], history.clone());
        assert!(
            violations.is_empty() && unfenced.is_empty(),
            "{violations:?}"
        );
        // While replica-0's hold was fresh, another replica's write is judged.
        let (violations, unfenced) = fence(&[write(2, 40.0), write(0, 41.0)], history);
        assert_eq!(unfenced.len(), 1);
        assert_eq!(violations.len(), 1);
    }

    #[test]
    fn a_release_counts_from_its_renew_time_not_the_acquire_time_it_keeps() {
        // As the soak saw it: replica-2 took shard 0 at 31.78 s, wrote at
        // 32.62 s, released at 33.19 s (the release keeps acquireTime
        // 31.78 s), replica-0 took it at 33.27 s.
        let history = vec![
            lease("replica-0", 1.21, 27.14),
            lease("replica-2", 31.78, 31.78),
            lease("replica-2", 31.78, 32.92),
            lease("", 31.78, 33.19),
            lease("replica-0", 33.27, 33.27),
        ];
        assert!(unheld("replica-2", &history, &[], 32.62).is_none());
        assert!(unheld("replica-2", &history, &[], 33.6).is_some());
        assert!(unheld("replica-0", &history, &[], 33.9).is_none());
        // replica-0 past its renewals, before replica-2 took over.
        assert!(unheld("replica-0", &history, &[], 31.5).is_some());
        // Its own acquisition just after the write's arrival: within the slack.
        assert!(unheld("replica-2", &history, &[], 31.7).is_none());
    }

    #[test]
    fn a_write_after_the_lease_expired_is_unfenced() {
        let history = vec![lease("replica-0", 0.0, 5.0)];
        assert!(unheld("replica-0", &history, &[], 8.0).is_none());
        assert!(unheld("replica-0", &history, &[], 9.5).is_some());
        assert!(unheld("replica-1", &history, &[], 3.0).is_some());
        // Before any record: the history does not say.
        assert!(unheld("replica-1", &[lease("replica-1", 20.0, 20.0)], &[], 3.0).is_none());
    }

    #[test]
    fn a_take_is_a_renewal_and_renewals_unseen_while_the_harness_watch_was_down_are_not_judged() {
        // As the CI soak saw it (seed 43): the kube-apiserver restarted at
        // 35.9 s; the harness's Lease watch last saw replica-2's renewal at
        // 26.87 s, then, relisting at about 49 s, a version it had taken at
        // 45.93 s and renewed at 49.19 s; replica-2 wrote at 46.2 s.
        let history = vec![
            lease("replica-2", 0.91, 26.87),
            lease("replica-2", 45.93, 49.19),
        ];
        assert!(
            unheld("replica-2", &history, &[], 46.2).is_none(),
            "taken at 45.93 s"
        );
        // replica-0 renewed at 27.18 s, then (unseen) after the restart;
        // the harness saw its next renewal at 49.11 s.
        let history = vec![
            lease("replica-0", 1.21, 27.18),
            lease("replica-0", 1.21, 49.11),
        ];
        assert!(
            unheld("replica-0", &history, &[], 45.2).is_some(),
            "without the gap"
        );
        let gaps = [(35.8, 49.0)];
        assert!(unheld("replica-0", &history, &gaps, 45.2).is_none());
        // A gap before the last renewal seen, or after the write, excuses nothing.
        assert!(unheld("replica-0", &history, &[(10.0, 20.0)], 45.2).is_some());
        assert!(unheld("replica-0", &history, &[(46.0, 49.0)], 45.2).is_some());
        // Nor a change of hands: the new holder's acquireTime survives the gap.
        let history = vec![
            lease("replica-0", 1.21, 27.18),
            lease("replica-1", 40.0, 49.0),
        ];
        let why = unheld("replica-0", &history, &gaps, 45.2).expect("replica-1 had taken it");
        assert!(why.contains("replica-1 had acquired"), "{why}");
        let (violations, _) = fence_violations(
            &[write(0, 45.2), write(1, 45.4)],
            &BTreeMap::from([(0, history)]),
            &gaps,
            |_| Some(0),
            |r| format!("replica-{r}"),
            Duration::from_secs(4),
        );
        assert_eq!(
            violations.len(),
            1,
            "two replicas writing within the window"
        );
    }
}
