//! The serving slot: which plugin serves a reconcile now. The stable
//! plugin, switched atomically between reconciles; its predecessor on
//! probation, kept for rollback ([`probation`]); the shadow that runs
//! beside it and is never applied ([`shadow`]); a canary on its cohort
//! ([`canary`]); the router that hands each object the slot of its tenant
//! ([`router`]); and the stable plugin's check of a canary's failures
//! ([`stable_check`]).
//!
//! What it may import: `apply/` (whatever serves is held to the same
//! rules), `judging/` (a canary's steps and tallies), `telemetry/`,
//! `runtime/`, `disk` (it pins the plugins it holds, so the precompiled
//! cache and the OCI store never evict them) and the shared model. What
//! reaches the slot and how is `delivery/`'s job.
//!
//! A reconcile clones the current `Arc` at its start and finishes on that
//! plugin even if a swap happens meanwhile; every later reconcile gets the
//! new one, and a swap re-queues every known object once.
//!
//! The slot may be empty: a host whose plugin was refused at start keeps
//! running, unready, and serves the first good plugin its source delivers.

pub mod canary;
pub mod probation;
pub mod router;
pub mod served;
pub mod shadow;
pub mod stable_check;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::Stream;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::actions::ProposedActions;
use crate::apply::Limits;
use crate::apply::policy::{PodPolicy, PolicyConfig};
use crate::crd::Jinghzhu;
use crate::crd::plugin::PluginMode;
use crate::locks::{MutexExt, RwLockExt};
use crate::runtime::LoadedPlugin;
use crate::telemetry::metrics::{Metrics, PluginCallLabels};

/// When to roll back to the previous plugin: judged per object, over the
/// objects that were not failing under the previous plugin (see
/// [`probation`]).
#[derive(Debug, Clone)]
pub struct RollbackPolicy {
    /// How long after a swap failures are watched.
    pub window: Duration,
    /// Share of the judged objects (0..=1) that failed under the new plugin
    /// in the window that triggers a rollback.
    pub max_failure_ratio: f64,
    /// Fewest objects judged in the window before the ratio is trusted.
    pub min_calls: u32,
}

impl Default for RollbackPolicy {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(60),
            max_failure_ratio: 0.5,
            min_calls: 5,
        }
    }
}

/// The pod policies asked for by the resources feeding one slot (each
/// `None` where the host's alone holds).
#[derive(Debug, Clone, Copy, Default)]
struct RolePolicies {
    /// The active resource's, for everything it serves.
    active: Option<PodPolicy>,
    /// The shadow resource's, for its shadow.
    shadow: Option<PodPolicy>,
}

/// A stream that yields once per change of `counter` after now (several
/// changes between two polls yield once).
pub(crate) fn changes(counter: &watch::Sender<u64>) -> impl Stream<Item = ()> + Send + 'static {
    let mut rx = counter.subscribe();
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

/// The active plugin (none while every plugin offered was refused), the one
/// before it, and an optional shadow candidate.
pub struct ActivePlugin {
    current: RwLock<Option<Arc<LoadedPlugin>>>,
    previous: Mutex<Option<Arc<LoadedPlugin>>>,
    probation: Mutex<Option<probation::Probation>>,
    /// Objects whose latest reconcile failed, and under which plugin.
    failing: Mutex<probation::FailingObjects>,
    /// Whether an older version of the serving plugin may be swapped in
    /// (`--plugin-allow-downgrade`; off by default).
    downgrades_allowed: std::sync::atomic::AtomicBool,
    policy: RollbackPolicy,
    generation: watch::Sender<u64>,
    /// Re-queues that were a first load ([`ActivePlugin::load_first`]), not a swap.
    first_loads: std::sync::atomic::AtomicU64,
    shadow: RwLock<Option<shadow::ShadowQueue>>,
    /// The pod policies the resources feeding this slot ask for, within
    /// the host's: one for everything the active resource serves, one for
    /// the shadow resource's plugin.
    pod_policies: RwLock<RolePolicies>,
    /// The last swap or rollback, and the quiet interval of the sources.
    swap_clock: Mutex<(Option<Instant>, Duration)>,
    /// Plugins that stopped serving whose metric series are still kept,
    /// oldest first (see [`ActivePlugin::retire`]).
    retired: Mutex<VecDeque<PluginCallLabels>>,
    /// A canary rollout going on ([`canary`]).
    canary: RwLock<Option<canary::Canary>>,
    /// The digest of the last canary aborted (not rolled out again until a retry).
    aborted: Mutex<Option<String>>,
    /// The newest version served by this slot or, as its resource's status
    /// says, by the fleet before this replica started: an older version of
    /// the same plugin is a downgrade.
    newest: Mutex<Option<served::Served>>,
    /// The digests of the current, previous and shadow plugins, which the
    /// bounded directories keep ([`crate::disk::pins`]).
    pins: crate::disk::pins::PinHolder,
    metrics: Arc<Metrics>,
}

/// Plugins no longer serving whose per-plugin metric series (calls,
/// errors, durations, outcomes) are kept, so a dashboard still shows the
/// last few versions; older ones' series are dropped, so a long life of
/// pushes does not grow `/metrics` without end.
pub const RETIRED_PLUGIN_SERIES_KEPT: usize = 4;

/// The quiet interval of a slot's sources by default
/// (`--min-swap-interval-secs`): a move after this long without one swaps
/// at once; moves closer together than this (but a single swap back) are
/// a flapping source's (see `delivery::damper`).
pub const DEFAULT_MIN_SWAP_INTERVAL: Duration = Duration::from_secs(10);

impl std::fmt::Debug for ActivePlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActivePlugin")
            .field("serving", &self.serving().map(|p| p.describe()))
            .finish_non_exhaustive()
    }
}

impl ActivePlugin {
    /// A slot serving `plugin`.
    pub fn new(plugin: Arc<LoadedPlugin>, policy: RollbackPolicy, metrics: Arc<Metrics>) -> Self {
        let slot = Self::empty(policy, metrics);
        *slot.current.write_unpoisoned() = Some(plugin);
        slot.metrics.plugin_serving.set(1);
        slot.repin();
        slot
    }

    /// A slot serving nothing yet: the plugin offered at start was refused.
    /// Reconciles wait (see [`ActivePlugin::serving`]) until the first good
    /// plugin is swapped in, which re-queues every object.
    pub fn empty(policy: RollbackPolicy, metrics: Arc<Metrics>) -> Self {
        metrics.plugin_serving.set(0);
        Self {
            current: RwLock::new(None),
            previous: Mutex::new(None),
            probation: Mutex::new(None),
            failing: Mutex::new(probation::FailingObjects::default()),
            downgrades_allowed: std::sync::atomic::AtomicBool::new(false),
            policy,
            generation: watch::Sender::new(0),
            first_loads: std::sync::atomic::AtomicU64::new(0),
            shadow: RwLock::new(None),
            pod_policies: RwLock::new(RolePolicies::default()),
            swap_clock: Mutex::new((None, DEFAULT_MIN_SWAP_INTERVAL)),
            retired: Mutex::new(VecDeque::new()),
            canary: RwLock::new(None),
            aborted: Mutex::new(None),
            newest: Mutex::new(None),
            pins: crate::disk::pins::PinHolder::new(),
            metrics,
        }
    }

    /// Pins the plugins this slot holds (current, previous, shadow) so the
    /// precompiled cache and the OCI store never evict them; called after
    /// each change of any of them.
    fn repin(&self) {
        self.pins.set(
            self.in_use()
                .into_iter()
                .map(|plugin| plugin.digest().to_string()),
        );
    }

    /// The plugins this slot holds now: serving, previous (the rollback
    /// target), shadow and canary.
    fn in_use(&self) -> Vec<Arc<LoadedPlugin>> {
        [
            self.serving(),
            self.previous.lock_unpoisoned().clone(),
            self.shadow(),
            self.canary
                .read_unpoisoned()
                .as_ref()
                .map(|canary| canary.plugin.clone()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Sets the quiet interval of this slot's sources
    /// (`--min-swap-interval-secs`; zero: swaps are never held): a move
    /// after this long without one swaps at once, closer moves (beyond one
    /// swap back) are a flapping source's (`delivery::damper`).
    pub fn set_min_swap_interval(&self, interval: Duration) {
        self.swap_clock.lock_unpoisoned().1 = interval;
    }

    /// The quiet interval of this slot's sources (`delivery::damper`).
    pub fn quiet_interval(&self) -> Duration {
        self.swap_clock.lock_unpoisoned().1
    }

    /// How long ago the last swap or rollback was, if one happened.
    pub fn since_last_swap(&self) -> Option<Duration> {
        let (last, _) = *self.swap_clock.lock_unpoisoned();
        last.map(|at| at.elapsed())
    }

    /// Records that a swap or a rollback happened now.
    fn swapped_now(&self) {
        self.swap_clock.lock_unpoisoned().0 = Some(Instant::now());
    }

    /// The plugin the object `uid` is reconciled with now: the canary for
    /// its cohort while a rollout goes on, else the one serving.
    pub fn plugin_for(&self, uid: &str) -> Option<Arc<LoadedPlugin>> {
        let canary = self.canary.read_unpoisoned();
        if let Some(canary) = canary.as_ref()
            && canary.steps.serves(uid)
        {
            return Some(canary.plugin.clone());
        }
        drop(canary);
        self.serving()
    }

    /// The rollout going on in this slot, if any: start, judge, follow,
    /// decide ([`canary::CanarySide`]).
    pub fn canary(&self) -> canary::CanarySide<'_> {
        canary::CanarySide { slot: self }
    }

    /// The plugin a reconcile starting now uses; `None` while no plugin
    /// serves (every plugin offered so far was refused).
    pub fn serving(&self) -> Option<Arc<LoadedPlugin>> {
        self.current.read_unpoisoned().clone()
    }

    /// The plugin a reconcile starting now uses, for callers that started
    /// the slot with a plugin ([`ActivePlugin::new`]: tests, benchmarks).
    ///
    /// # Panics
    /// When no plugin serves; the host itself uses [`ActivePlugin::serving`].
    #[track_caller]
    pub fn current(&self) -> Arc<LoadedPlugin> {
        self.serving()
            .expect("no plugin serves: the one offered at start was refused")
    }

    /// Serves `plugin`, the first one a source delivered at start, in an
    /// empty slot: not counted as a swap, but every object is re-queued
    /// (the controller may have started while it was pulled or compiled).
    /// A slot that serves already takes it as a [`ActivePlugin::swap`].
    pub fn load_first(&self, plugin: Arc<LoadedPlugin>) {
        self.note_served(served::Served::of(&plugin));
        {
            let mut current = self.current.write_unpoisoned();
            if current.is_none() {
                *current = Some(plugin);
                self.metrics.plugin_serving.set(1);
                self.first_loads
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                drop(current);
                self.repin();
                self.generation.send_modify(|g| *g += 1);
                return;
            }
        }
        self.swap(plugin);
    }

    /// Lets an older version of the serving plugin be swapped in
    /// (`--plugin-allow-downgrade`).
    pub fn allow_downgrades(&self, allowed: bool) {
        self.downgrades_allowed
            .store(allowed, std::sync::atomic::Ordering::Relaxed);
    }

    /// The downgrade rule for a vetted `candidate`: refused when it is an
    /// older version of the plugin that serves, or of the newest this slot
    /// (or its fleet, see [`ActivePlugin::note_served`]) served
    /// ([`served::is_downgrade`]), and downgrades are not allowed.
    pub fn check_downgrade(&self, candidate: &LoadedPlugin) -> Result<(), crate::refusal::Refusal> {
        let allowed = self
            .downgrades_allowed
            .load(std::sync::atomic::Ordering::Relaxed);
        if allowed {
            return Ok(());
        }
        let serving = self.serving().map(|p| served::Served::of(&p));
        let newest = self.newest_served();
        for served in [serving, newest].into_iter().flatten() {
            if served::is_downgrade(&served, candidate) {
                return Err(served::downgrade(&served.describe(), &candidate.describe()));
            }
        }
        Ok(())
    }

    /// Notes that `served` served (here, or in the fleet as the resource's
    /// status says): it becomes the newest unless an equal or newer version
    /// of the same plugin is noted already.
    pub fn note_served(&self, served: served::Served) {
        let mut newest = self.newest.lock_unpoisoned();
        let newer = newest
            .as_ref()
            .is_none_or(|known| known.name != served.name || known.is_older_than(&served));
        if newer {
            *newest = Some(served);
        }
    }

    /// The newest version noted ([`ActivePlugin::note_served`]).
    pub fn newest_served(&self) -> Option<served::Served> {
        self.newest.lock_unpoisoned().clone()
    }

    /// Makes `plugin` the active one (it has passed every check already).
    pub fn swap(&self, plugin: Arc<LoadedPlugin>) {
        self.note_served(served::Served::of(&plugin));
        // A plugin swapped in directly ends any rollout.
        *self.canary.write_unpoisoned() = None;
        let old = {
            let mut current = self.current.write_unpoisoned();
            current.replace(plugin.clone())
        };
        self.metrics.plugin_serving.set(1);
        self.swapped_now();
        let Some(old) = old else {
            self.repin();
            // The first good plugin after a refused start: nothing to roll
            // back to, so no probation.
            tracing::info!(
                new = %plugin.describe(),
                "first plugin serving after a refused start; re-queueing every object"
            );
            self.metrics.plugin_swaps.inc();
            self.generation.send_modify(|g| *g += 1);
            return;
        };
        tracing::info!(
            old = %old.describe(),
            new = %plugin.describe(),
            "plugin swapped; re-queueing every object"
        );
        let inherited = self.failing.lock_unpoisoned().failing_under(old.digest());
        *self.probation.lock_unpoisoned() =
            Some(probation::Probation::start(plugin.digest(), inherited));
        let displaced = self.previous.lock_unpoisoned().replace(old);
        if let Some(displaced) = displaced {
            self.retire(&displaced);
        }
        self.repin();
        self.metrics.plugin_swaps.inc();
        self.generation.send_modify(|g| *g += 1);
    }

    /// A stream that yields once per swap (the controller re-queues all objects on it).
    pub fn swaps(&self) -> impl Stream<Item = ()> + Send + 'static {
        changes(&self.generation)
    }

    /// Counts the re-queues of every object: swaps, rollbacks and a first
    /// load ([`ActivePlugin::load_first`]); 0 at start.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Swaps and rollbacks so far: [`ActivePlugin::generation`] without
    /// the first load at start (`/status` `swaps`).
    pub fn swaps_so_far(&self) -> u64 {
        self.generation()
            .saturating_sub(self.first_loads.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Records the outcome of a reconcile of `object` (its UID) by plugin
    /// `digest`; rolls back if too many of the objects judged under the
    /// plugin swapped in last fail within the window ([`probation`]).
    pub fn record_outcome(&self, object: &str, digest: &str, ok: bool) {
        self.failing.lock_unpoisoned().record(object, digest, ok);
        let rollback = {
            let mut probation = self.probation.lock_unpoisoned();
            let Some(p) = probation.as_mut() else { return };
            if p.digest != digest {
                return;
            }
            if p.since.elapsed() > self.policy.window {
                *probation = None;
                return;
            }
            let standing = p.record(object, ok);
            let failing = standing.objects >= self.policy.min_calls as usize
                && standing.ratio() > self.policy.max_failure_ratio;
            if failing {
                *probation = None;
            }
            failing.then_some(standing)
        };
        if let Some(standing) = rollback {
            let Some(previous) = self.previous.lock_unpoisoned().take() else {
                return;
            };
            tracing::error!(
                failing = digest,
                failure_ratio = standing.ratio(),
                objects_judged = standing.objects,
                objects_failed = standing.failed,
                failures_excused = standing.excused,
                back_to = %previous.describe(),
                "plugin fails on too many objects after the swap; rolling back (objects failing before the swap are not judged)"
            );
            let failed = {
                let mut current = self.current.write_unpoisoned();
                current.replace(previous)
            };
            if let Some(failed) = failed {
                self.retire(&failed);
            }
            self.repin();
            self.metrics.plugin_rollbacks.inc();
            self.swapped_now();
            self.generation.send_modify(|g| *g += 1);
        }
    }

    /// Forgets the object `uid` (deleted, or no longer this replica's) in
    /// the rollback judge's memory of failing objects.
    pub fn forget_object(&self, uid: &str) {
        self.failing.lock_unpoisoned().forget(uid);
    }

    /// `plugin` stopped serving (displaced as the previous plugin, or
    /// rolled back): its metric series are kept among the last
    /// [`RETIRED_PLUGIN_SERIES_KEPT`] retired plugins, and the oldest beyond
    /// those are dropped, unless that digest serves again (as the active,
    /// previous or shadow plugin).
    fn retire(&self, plugin: &LoadedPlugin) {
        let labels = Metrics::plugin_labels(plugin);
        let dropped: Vec<PluginCallLabels> = {
            let mut retired = self.retired.lock_unpoisoned();
            retired.retain(|kept| kept != &labels);
            retired.push_back(labels);
            let excess = retired.len().saturating_sub(RETIRED_PLUGIN_SERIES_KEPT);
            retired.drain(..excess).collect()
        };
        let in_use: Vec<String> = self
            .in_use()
            .iter()
            .map(|p| p.digest().to_string())
            .collect();
        for labels in dropped {
            if !in_use.contains(&labels.digest) {
                self.metrics.forget_plugin(&labels);
            }
        }
    }

    /// Sets (or clears) the shadow plugin; it runs in a queue of its own
    /// holding at most `queue` waiting calls (see [`shadow::ShadowQueue`]).
    pub fn set_shadow(&self, plugin: Option<Arc<LoadedPlugin>>, queue: usize) {
        self.metrics.shadow_active.set(i64::from(plugin.is_some()));
        let queue =
            plugin.map(|plugin| shadow::ShadowQueue::start(plugin, queue, self.metrics.clone()));
        *self.shadow.write_unpoisoned() = queue;
        self.repin();
    }

    /// The shadow plugin, if one runs.
    pub fn shadow(&self) -> Option<Arc<LoadedPlugin>> {
        self.shadow
            .read_unpoisoned()
            .as_ref()
            .map(|queue| queue.plugin().clone())
    }

    /// Records the pod policy the resource in `role` asks for where it is
    /// stricter than the host's (`None`: the host's alone), replacing what
    /// it asked before. It holds every plugin that resource serves: for the
    /// active resource the stable plugin, the one before it and a canary
    /// (so a rollout never moves the policy), for the shadow resource its
    /// shadow. Set before a plugin serves, so its first reconcile is
    /// already held to it.
    pub fn narrow_pod_policy(&self, role: PluginMode, policy: Option<PodPolicy>) {
        let mut policies = self.pod_policies.write_unpoisoned();
        match role {
            PluginMode::Active => policies.active = policy,
            PluginMode::Shadow => policies.shadow = policy,
        }
    }

    /// The rules the output of the plugin with `digest` is held to: the
    /// host's, with the pod policy narrowed to what the resource serving
    /// it asked for (both resources' when one digest serves both roles).
    pub fn policy_for<'a>(&self, digest: &str, host: &'a PolicyConfig) -> Cow<'a, PolicyConfig> {
        let policies = *self.pod_policies.read_unpoisoned();
        let shadow = self.shadow().is_some_and(|s| s.digest() == digest);
        let active = !shadow || self.holds_actively(digest);
        let narrowed = [
            active.then_some(policies.active).flatten(),
            shadow.then_some(policies.shadow).flatten(),
        ]
        .into_iter()
        .flatten()
        .fold(host.policy, PodPolicy::stricter_of);
        if narrowed == host.policy {
            Cow::Borrowed(host)
        } else {
            Cow::Owned(PolicyConfig {
                policy: narrowed,
                ..host.clone()
            })
        }
    }

    /// Whether `digest` is one the active role holds: the serving plugin,
    /// the one before it, or the canary.
    fn holds_actively(&self, digest: &str) -> bool {
        let canary = self
            .canary
            .read_unpoisoned()
            .as_ref()
            .map(|c| c.plugin.clone());
        let previous = self.previous.lock_unpoisoned().clone();
        [self.serving(), previous, canary]
            .into_iter()
            .flatten()
            .any(|plugin| plugin.digest() == digest)
    }

    /// Offers the shadow plugin (if any) the same input as the active one
    /// (`key` the object's, `digest` the plugin's that proposed `active`),
    /// and a canary's proposal to the stable shadow of its rollout, if it
    /// runs one. Never waits: the call runs later in the shadow's own queue and is
    /// dropped (and counted) when that queue is full. Its output is held to
    /// `limits` and `policy`, as the active plugin's is, before anything is
    /// compared with `active`; nothing of it is applied.
    pub fn offer_shadow(
        &self,
        jz: &Arc<Jinghzhu>,
        pods: &[Pod],
        (key, digest): (&str, &str),
        active: &ProposedActions,
        rules: (&Limits, &PolicyConfig),
    ) {
        self.canary()
            .offer_stable_shadow(jz, pods, (key, digest), active, rules);
        if let Some(queue) = self.shadow.read_unpoisoned().as_ref() {
            self.offer_to(queue, jz, pods, key, active, rules);
        }
    }

    /// Offers one reconcile to `queue`, under the pod policy of the
    /// plugin that queue runs.
    pub(super) fn offer_to(
        &self,
        queue: &shadow::ShadowQueue,
        jz: &Arc<Jinghzhu>,
        pods: &[Pod],
        key: &str,
        active: &ProposedActions,
        rules: (&Limits, &PolicyConfig),
    ) {
        let policy = self.policy_for(queue.plugin().digest(), rules.1);
        queue.offer(jz, pods, key, active, (rules.0, &policy));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The active resource's policy holds whatever digest the slot serves
    /// for it (a canary's too), and never below the host's.
    #[test]
    fn the_active_resources_policy_holds_every_digest_it_serves() {
        let slot = ActivePlugin::empty(RollbackPolicy::default(), Arc::new(Metrics::default()));
        let host = PolicyConfig {
            policy: PodPolicy::Baseline,
            ..PolicyConfig::default()
        };
        assert_eq!(
            slot.policy_for("sha256:aa", &host).policy,
            PodPolicy::Baseline
        );
        slot.narrow_pod_policy(PluginMode::Active, Some(PodPolicy::Template));
        for digest in ["sha256:aa", "sha256:canary"] {
            assert_eq!(slot.policy_for(digest, &host).policy, PodPolicy::Template);
        }
        // The shadow resource's policy holds only a shadow (none runs here).
        slot.narrow_pod_policy(PluginMode::Shadow, Some(PodPolicy::Restricted));
        assert_eq!(
            slot.policy_for("sha256:aa", &host).policy,
            PodPolicy::Template
        );
        slot.narrow_pod_policy(PluginMode::Active, Some(PodPolicy::Restricted));
        let strict_host = PolicyConfig::default();
        assert_eq!(
            slot.policy_for("sha256:aa", &strict_host).policy,
            PodPolicy::Template,
            "never looser than the host's"
        );
    }
}
