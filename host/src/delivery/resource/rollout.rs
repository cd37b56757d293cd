//! A resource's canary rollout (`spec.rollout`, see
//! [`crate::judging::plan`]): a vetted artifact that is not the one
//! serving becomes a canary instead of being swapped in. Every second each
//! replica publishes its figures for the step in its `status.replicas`
//! entry; the judging replica ([`super::fleet`]) judges the step on the
//! fleet's figures and writes each decision to `status.rollout` (with the
//! step history) and the `Rollout` condition; the others follow it. An
//! abort is a refusal (the criterion's rule, e.g. `rollout/failure-rate`,
//! in a `PluginRefused` Warning naming the figures).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fleet::{followed, since, step_of};
use super::{Driver, fleet, status};
use crate::crd::plugin::{
    JinghzhuPlugin, PluginMode, RolloutSpec, RolloutStatus, RolloutStepRecord,
};
use crate::delivery::swapper;
use crate::judging::plan::Strategy;
use crate::plugin_text;
use crate::refusal::Refusal;
use crate::runtime::LoadedPlugin;
use crate::slot::canary::{CanaryStart, RolloutChange, RolloutView};

/// The annotation by which a person promotes or aborts a canary:
/// `promote sha256:…` or `abort sha256:…` (the canary's digest, so a
/// decision never applies to a later canary). `wasm-operator rollout` writes it.
pub const ROLLOUT_ACTION_ANNOTATION: &str = "jinghzhu.io/rollout-action";

/// How often a rollout's step is judged.
pub const ROLLOUT_TICK: Duration = Duration::from_secs(1);

/// The shortest time between two writes of a replica's figures.
pub const FIGURES_INTERVAL: Duration = Duration::from_secs(2);

/// The longest a follower waits for its fresh read of the judge's decision
/// before it starts a canary.
pub const JUDGE_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the judge counts the cluster's Jinghzhus (the bound of any
/// replica's figures).
pub const FLEET_COUNT_INTERVAL: Duration = Duration::from_secs(30);

/// How often the judge looks for `status.replicas` entries no replica wrote.
pub const PLANTED_INTERVAL: Duration = Duration::from_secs(5);

/// How often a replica whose entry did not fit tries to write it again.
pub const ENTRY_RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// Judged steps kept in `status.rollout.history`.
pub const HISTORY_KEPT: usize = 32;

/// What became of a vetted artifact offered to the rollout.
pub(super) enum Offer {
    /// It is the canary now (or still).
    Canary,
    /// Refused (an aborted canary offered again); the refusal is written.
    Refused,
    /// No rollout: serve it directly.
    Serve,
}

/// The strategy `spec` describes.
/// The rollout the judge wrote for the canary `digest` at the resource's
/// current generation, if any.
fn judged<'a>(resource: Option<&'a JinghzhuPlugin>, digest: &str) -> Option<&'a RolloutStatus> {
    let resource = resource?;
    let rollout = resource.status.as_ref()?.rollout.as_ref();
    fleet::decided_for(rollout, resource.metadata.generation, digest)
}

/// The rollout the judge wrote at the resource's current generation, for
/// any canary.
fn at_generation(resource: Option<&JinghzhuPlugin>) -> Option<&RolloutStatus> {
    let resource = resource?;
    let rollout = resource.status.as_ref()?.rollout.as_ref()?;
    (rollout.observed_generation == resource.metadata.generation).then_some(rollout)
}

/// The plugin the fleet serves as stable in `rollout`: the canary it
/// promoted, else the stable one.
fn fleet_stable(rollout: &RolloutStatus) -> Option<&str> {
    if rollout.phase == "Promoted" {
        rollout.canary.as_deref()
    } else {
        rollout.stable.as_deref()
    }
}

/// The `jinghzhu.io/rollout-action` annotation of `resource`, if any.
fn rollout_action(resource: &JinghzhuPlugin) -> Option<String> {
    resource
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROLLOUT_ACTION_ANNOTATION))
        .cloned()
}

/// A driver's side of its resource's rollout: `driver.rollout()`.
pub(super) struct RolloutSide<'a> {
    pub(super) driver: &'a mut Driver,
}

impl RolloutSide<'_> {
    /// `status.rollout` for `view` in `phase`, as this replica (the judge) writes it.
    fn rollout_status(&self, view: &RolloutView, phase: &str, message: String) -> RolloutStatus {
        let generation = self
            .driver
            .last_seen
            .as_ref()
            .and_then(|r| r.metadata.generation);
        RolloutStatus {
            phase: phase.into(),
            stable: Some(view.stable.clone()),
            canary: Some(view.canary.clone()),
            weight: view.weight,
            step: Some(format!("{}/{}", view.step.0, view.step.1)),
            message: Some(message),
            rule: None,
            observed_generation: generation,
            step_started: Some(status::now()),
            judge: Some(self.driver.writer.replica().to_string()),
            history: self.driver.rollout_history.clone(),
            last_action: self.driver.last_rollout_action.clone(),
        }
    }

    /// Offers the vetted `plugin` to `resource`'s rollout, if it asks for
    /// one and this driver serves the active plugin. The fleet's decision
    /// comes first: a canary the judge aborted (at this generation) is
    /// refused, one it promoted serves at once, and a replica that serves
    /// nothing yet (restarted, or new) takes up the rollout going on.
    pub(super) async fn offer_canary(
        &mut self,
        resource: &JinghzhuPlugin,
        plugin: &Arc<LoadedPlugin>,
        seen_at: Instant,
    ) -> Offer {
        let Some(spec) = resource.spec.rollout.as_ref() else {
            return Offer::Serve;
        };
        if self.driver.role != PluginMode::Active {
            return Offer::Serve;
        }
        if !self.driver.judge.here() {
            self.read_judge_decision().await;
        }
        let decided =
            judged(self.driver.last_seen.as_deref(), plugin.digest()).map(|r| r.phase.clone());
        match decided.as_deref() {
            Some("Promoted") => return Offer::Serve,
            Some("Aborted") => self.driver.active.canary().refuse(plugin.digest()),
            _ => {}
        }
        if self.driver.active.serving().is_none()
            && let Some(taken) = self.take_up_rollout(resource, spec, plugin).await
        {
            return self.offered(resource, plugin, taken, seen_at).await;
        }
        let started =
            self.driver
                .active
                .canary()
                .start(plugin.clone(), Strategy::of(spec), spec.paused);
        self.offered(resource, plugin, started, seen_at).await
    }

    /// Reports what became of a canary offered.
    async fn offered(
        &mut self,
        resource: &JinghzhuPlugin,
        plugin: &Arc<LoadedPlugin>,
        start: Result<CanaryStart, String>,
        seen_at: Instant,
    ) -> Offer {
        match start {
            Ok(CanaryStart::NoRollout) => Offer::Serve,
            Ok(start) => {
                if start == CanaryStart::Started {
                    self.driver.rollout_history.clear();
                }
                self.report_canary(plugin, start).await;
                Offer::Canary
            }
            Err(why) => {
                let refusal = Refusal::new("rollout/aborted", why);
                self.driver
                    .refuse(resource, plugin.digest(), refusal, seen_at)
                    .await;
                Offer::Refused
            }
        }
    }

    /// With nothing serving here yet, the fleet's rollout at this
    /// generation is taken up before `plugin` serves anything: its stable
    /// plugin is restored from the precompiled cache, and `plugin` is the
    /// canary at the judge's step (a canary the judge rolls out) or at the
    /// first step (a newer one). `None`: there is no rollout to take up, or
    /// `plugin` is the fleet's stable plugin (it serves as a first load).
    async fn take_up_rollout(
        &mut self,
        resource: &JinghzhuPlugin,
        spec: &RolloutSpec,
        plugin: &Arc<LoadedPlugin>,
    ) -> Option<Result<CanaryStart, String>> {
        let rollout = at_generation(self.driver.last_seen.as_deref())?.clone();
        let stable = fleet_stable(&rollout)?.to_string();
        if stable == plugin.digest() {
            return None;
        }
        match self.driver.restore(resource, &stable).await {
            Some(restored) => {
                self.driver.active.load_first(restored);
                swapper::lock(&self.driver.history).not_serving = None;
            }
            None => {
                swapper::lock(&self.driver.history).not_serving = Some(format!(
                    "the rollout's stable plugin {stable} has no copy on this replica: the \
                     canary serves its cohort, the other objects wait for the rollout's end"
                ));
            }
        }
        let at = match judged(self.driver.last_seen.as_deref(), plugin.digest()) {
            Some(r) if r.phase == "Progressing" || r.phase == "Paused" => {
                (step_of(r), since(r.step_started.as_deref()), spec.paused)
            }
            _ if self.driver.active.serving().is_some() => return None,
            _ => (1, Duration::ZERO, spec.paused),
        };
        if let Some(action) = rollout.last_action {
            self.driver.last_rollout_action = Some(action);
        }
        self.driver.rollout_history = rollout.history;
        Some(
            self.driver
                .active
                .canary()
                .resume(plugin.clone(), &stable, Strategy::of(spec), at),
        )
    }

    /// Reads the resource (its status: the judge's decisions) afresh into
    /// `last_seen`. The watch's events wait while new bytes are vetted, so
    /// what it last showed can be older than the judge's abort of the very
    /// canary being offered: a follower that went by it started a canary
    /// the fleet had aborted and routed its share of objects to it until
    /// the next event came. On a failed read, or one that takes longer than
    /// [`JUDGE_READ_TIMEOUT`] (the client's own waits and retries run to
    /// minutes), the last seen stays.
    async fn read_judge_decision(&mut self) {
        let api: kube::Api<JinghzhuPlugin> = kube::Api::all(self.driver.client.clone());
        match tokio::time::timeout(JUDGE_READ_TIMEOUT, api.get_status(&self.driver.name)).await {
            Ok(Ok(fresh)) => self.driver.last_seen = Some(Arc::new(fresh)),
            Ok(Err(err)) => tracing::debug!(resource = %self.driver.name, error = %err,
                "reading the judge's decision before a canary failed; going by the last seen"),
            Err(_) => tracing::debug!(resource = %self.driver.name,
                "reading the judge's decision before a canary timed out; going by the last seen"),
        }
    }

    /// Writes that `plugin` is the canary, then follows the judge's step.
    async fn report_canary(&mut self, plugin: &Arc<LoadedPlugin>, start: CanaryStart) {
        let Some(view) = self.driver.active.canary().view() else {
            return;
        };
        let phase = if view.paused { "Paused" } else { "Progressing" };
        let message = format!(
            "{} canary at step {}/{}: {}% of the objects",
            plugin.describe(),
            view.step.0,
            view.step.1,
            view.weight
        );
        if start == CanaryStart::Started {
            tracing::info!(resource = %self.driver.name, %message, "canary rollout");
            // An action written before this rollout began is not for it.
            if let Some(action) = self.driver.last_seen.as_deref().and_then(rollout_action) {
                self.driver.last_rollout_action = Some(action);
            }
        }
        self.driver.writer.set("Rollout", true, phase, &message);
        let status = self.rollout_status(&view, phase, message);
        self.driver.writer.set_rollout(Some(status));
        if let Some(resource) = self.driver.last_seen.clone() {
            self.follow_judge(&resource).await;
        }
    }

    /// Every second: publishes this replica's figures and, on the judging
    /// replica, judges the rollout's step and writes what changed.
    pub(super) async fn on_tick(&mut self, resource: Option<Arc<JinghzhuPlugin>>) {
        self.publish_figures().await;
        self.report_flapping().await;
        self.write_left_out_entry().await;
        if !self.driver.judge.here() {
            return;
        }
        self.remove_planted_entries().await;
        let counted = self.counted_figures().await;
        self.report_ignored(&counted.ignored, resource.as_deref())
            .await;
        let before = self.driver.active.canary().view();
        let Some((change, figures)) = self
            .driver
            .active
            .canary()
            .advance(Instant::now(), &counted.figures)
        else {
            return;
        };
        if let Some(before) = before {
            self.report_rollout(before, change, Some(figures), resource)
                .await;
        }
    }

    /// The other replicas' figures the judge counts (see
    /// [`fleet::others_figures`]): live members' own entries, each within
    /// the fleet's objects.
    async fn counted_figures(&mut self) -> fleet::Counted {
        let live = self.driver.judge.live_members();
        let others = self.driver.last_seen.as_deref().is_some_and(|r| {
            r.status.as_ref().is_some_and(|s| {
                s.replicas
                    .iter()
                    .any(|e| e.rollout.is_some() && e.name != self.driver.writer.replica())
            })
        });
        let bound = if others {
            self.fleet_objects().await
        } else {
            u64::MAX
        };
        fleet::others_figures(
            self.driver.last_seen.as_deref(),
            self.driver.writer.replica(),
            &live,
            bound,
        )
    }

    /// How many Jinghzhus the cluster holds (no replica can have seen
    /// more), counted with a one-item list at most every
    /// [`FLEET_COUNT_INTERVAL`]; unknown (no bound) until counted.
    async fn fleet_objects(&mut self) -> u64 {
        if let Some((count, at)) = self.driver.fleet_objects
            && at.elapsed() < FLEET_COUNT_INTERVAL
        {
            return count;
        }
        let api: kube::Api<crate::crd::Jinghzhu> = kube::Api::all(self.driver.client.clone());
        let count = match fleet::count_objects(api, JUDGE_READ_TIMEOUT).await {
            Some(count) => count,
            None => self
                .driver
                .fleet_objects
                .map_or(u64::MAX, |(count, _)| count),
        };
        self.driver.fleet_objects = Some((count, Instant::now()));
        count
    }

    /// Counts and reports (once per entry and reason while the rollout
    /// lasts) the entries whose figures the judge left out: a metric and a
    /// Warning naming the rule `rollout/figures-not-counted`.
    async fn report_ignored(
        &mut self,
        ignored: &[(String, fleet::Ignored)],
        resource: Option<&JinghzhuPlugin>,
    ) {
        for (name, why) in ignored {
            if !self.driver.ignored_reported.insert((name.clone(), *why)) {
                continue;
            }
            self.driver
                .metrics
                .rollout_figures_ignored
                .get_or_create(&crate::telemetry::metrics::ReasonLabels {
                    reason: why.as_str().to_string(),
                })
                .inc();
            let text = match why {
                fleet::Ignored::NotLive => "its replica is not a live member of the fleet",
                fleet::Ignored::NotItsOwn => "it was not written by its replica's field manager",
                fleet::Ignored::OutOfBounds => "it claims more objects than the cluster holds",
            };
            let message = format!(
                "the rollout's judge leaves out the figures of the status.replicas entry {} \
                 (rule rollout/figures-not-counted): {text}",
                plugin_text::escape_within(name, 253)
            );
            tracing::warn!(resource = %self.driver.name, entry = %plugin_text::escape_within(name, 253), reason = why.as_str(), "rollout figures not counted");
            if let Some(resource) = resource {
                self.driver.writer.warn(resource, &message).await;
            }
        }
    }

    /// Removes the `status.replicas` entries no replica wrote (not owned by
    /// the field manager of the replica they name), all of them in one
    /// guarded patch every [`PLANTED_INTERVAL`]: they are not the fleet's,
    /// and a full list keeps real replicas' entries out.
    async fn remove_planted_entries(&mut self) {
        if self
            .driver
            .planted_checked
            .is_some_and(|at| at.elapsed() < PLANTED_INTERVAL)
        {
            return;
        }
        let Some(resource) = self.driver.last_seen.clone() else {
            return;
        };
        self.driver.planted_checked = Some(Instant::now());
        let entries = resource.status.as_ref().map(|s| s.replicas.as_slice());
        let planted = fleet::planted_entries(&resource.metadata, entries.unwrap_or_default());
        if planted.is_empty() {
            return;
        }
        match status::StatusWriter::remove_entries(&self.driver.client, &self.driver.name, &planted)
            .await
        {
            Ok(()) => {
                tracing::info!(resource = %self.driver.name, removed = planted.len(), "removed the status.replicas entries no replica wrote");
                // The list has room now: this replica's own entry goes in
                // at once rather than at its next retry.
                self.driver.entry_retried = None;
                self.write_left_out_entry().await;
            }
            Err(err) => {
                tracing::debug!(resource = %self.driver.name, error = %err, "the status.replicas entries no replica wrote were not removed (moved meanwhile?); looked at again next time")
            }
        }
    }

    /// The `Flapping` condition follows the damper: `True` (reason
    /// `Flapping`, rule `swap/flapping`) while the source's changes are held,
    /// `False` once it has settled; written when that changes.
    async fn report_flapping(&mut self) {
        let flap = swapper::lock(&self.driver.history).flapping.clone();
        let held = flap.as_ref().map(|f| f.held.clone());
        if held == self.driver.flap_reported {
            return;
        }
        let was = self.driver.flap_reported.is_some();
        self.driver.flap_reported = held;
        match flap {
            Some(flap) => {
                let message = format!(
                    "[{}] the source keeps moving: its changes are held until it has been quiet \
                     for {} ms, then only its newest plugin ({}) is offered",
                    flap.rule, flap.hold_ms, flap.held
                );
                self.driver
                    .writer
                    .set("Flapping", true, "Flapping", &message);
            }
            None if was => {
                self.driver
                    .writer
                    .set("Flapping", false, "Settled", "the source has settled");
            }
            None => return,
        }
        self.driver.writer.write().await;
    }

    /// Writes the status again when the last write had to leave this
    /// replica's entry out (the list was full: the judge removes entries
    /// of replicas that are not live, and those no replica wrote), at most
    /// every [`ENTRY_RETRY_INTERVAL`].
    async fn write_left_out_entry(&mut self) {
        if !self.driver.writer.entry_left_out()
            || self
                .driver
                .entry_retried
                .is_some_and(|at| at.elapsed() < ENTRY_RETRY_INTERVAL)
        {
            return;
        }
        self.driver.entry_retried = Some(Instant::now());
        self.driver.writer.forget_written();
        self.driver.writer.write().await;
    }

    /// Writes this replica's figures for the step in its entry, when they
    /// changed and not more often than [`FIGURES_INTERVAL`].
    async fn publish_figures(&mut self) {
        if self
            .driver
            .figures_written
            .is_some_and(|at| at.elapsed() < FIGURES_INTERVAL)
        {
            return;
        }
        if self
            .driver
            .writer
            .set_replica_rollout(self.driver.active.canary().figures())
        {
            self.driver.figures_written = Some(Instant::now());
            self.driver.writer.write().await;
        }
    }

    /// A replica that does not judge follows the judge's `status.rollout`
    /// for the canary it rolls out: its step, its promotion or its abort.
    pub(super) async fn follow_judge(&mut self, resource: &Arc<JinghzhuPlugin>) {
        self.driver.last_seen = Some(resource.clone());
        if self.driver.role != PluginMode::Active || self.driver.judge.here() {
            return;
        }
        let Some(before) = self.driver.active.canary().view() else {
            return;
        };
        let Some(decision) = judged(Some(resource), &before.canary).and_then(followed) else {
            return;
        };
        let Some(change) = self.driver.active.canary().follow(&before.canary, decision) else {
            return;
        };
        self.report_rollout(before, change, None, Some(resource.clone()))
            .await;
    }

    /// A person's decision in the `jinghzhu.io/rollout-action` annotation
    /// (`promote sha256:…` or `abort sha256:…`, naming the canary it is
    /// for), acted on once per value.
    pub(super) async fn on_action(&mut self, resource: &Arc<JinghzhuPlugin>) {
        let action = rollout_action(resource);
        let recorded = at_generation(Some(resource)).and_then(|r| r.last_action.clone());
        if action.is_none() || action == self.driver.last_rollout_action || action == recorded {
            return;
        }
        self.driver.last_rollout_action = action.clone();
        let Some((verb, digest)) = action.as_deref().and_then(|a| a.split_once(' ')) else {
            tracing::warn!(resource = %self.driver.name, action = ?action, "{ROLLOUT_ACTION_ANNOTATION} is not `promote DIGEST` or `abort DIGEST`; ignored");
            return;
        };
        let promote = match verb {
            "promote" => true,
            "abort" => false,
            _ => {
                tracing::warn!(resource = %self.driver.name, verb, "unknown rollout action; ignored");
                return;
            }
        };
        let before = self.driver.active.canary().view();
        let Some(change) = self.driver.active.canary().decide(digest.trim(), promote) else {
            tracing::info!(resource = %self.driver.name, verb, digest, "rollout action for a canary not rolling out here; nothing to do");
            return;
        };
        if let Some(before) = before {
            self.report_rollout(before, change, None, Some(resource.clone()))
                .await;
        }
    }

    /// A step held past twice its duration with nothing to judge: the
    /// `Rollout` condition and a Warning (rule `rollout/too-little-traffic`)
    /// say why it waits.
    async fn report_starved(
        &mut self,
        before: &RolloutView,
        resource: Option<Arc<JinghzhuPlugin>>,
    ) {
        let message = format!(
            "step {}/{} ({}%) waits: no object was reconciled in it, so there is nothing to \
             judge it on (rule rollout/too-little-traffic); it goes on once objects are \
             reconciled, or by hand (wasm-operator rollout promote|abort)",
            before.step.0, before.step.1, before.weight
        );
        tracing::warn!(resource = %self.driver.name, %message, "canary rollout starved");
        self.driver
            .writer
            .set("Rollout", true, "TooLittleTraffic", &message);
        self.driver.writer.write().await;
        if let Some(resource) = resource {
            self.driver.writer.warn(&resource, &message).await;
        }
    }

    /// Records a judged step in the history (the judge's; a replica that
    /// took the judging over goes on from the history in the status).
    fn remember_step(&mut self, before: &RolloutView, verdict: &str, figures: &str) {
        if self.driver.rollout_history.is_empty()
            && let Some(judged) = judged(self.driver.last_seen.as_deref(), &before.canary)
        {
            self.driver.rollout_history = judged.history.clone();
        }
        self.driver.rollout_history.push(RolloutStepRecord {
            step: format!("{}/{}", before.step.0, before.step.1),
            weight: before.weight,
            verdict: verdict.into(),
            time: status::now(),
            message: plugin_text::escape_within(figures, 1024),
        });
        let excess = self
            .driver
            .rollout_history
            .len()
            .saturating_sub(HISTORY_KEPT);
        self.driver.rollout_history.drain(..excess);
    }

    /// Writes a rollout's change (status, condition; an abort as a
    /// refusal); `figures`, the judge's, go to the step history.
    async fn report_rollout(
        &mut self,
        before: RolloutView,
        change: RolloutChange,
        figures: Option<String>,
        resource: Option<Arc<JinghzhuPlugin>>,
    ) {
        let figures = figures.unwrap_or_default();
        match change {
            RolloutChange::Starved => {
                self.report_starved(&before, resource).await;
                return;
            }
            RolloutChange::Advanced { weight, empty } => {
                let verdict = if empty { "Empty" } else { "Passed" };
                self.remember_step(&before, verdict, &figures);
                let view = self.driver.active.canary().view().unwrap_or(before);
                let message = format!(
                    "step {}/{}: the canary serves {weight}% of the objects",
                    view.step.0, view.step.1
                );
                self.driver
                    .writer
                    .set("Rollout", true, "Progressing", &message);
                let status = self.rollout_status(&view, "Progressing", message);
                self.driver.writer.set_rollout(Some(status));
            }
            RolloutChange::Promoted => {
                self.remember_step(&before, "Promoted", &figures);
                let message = format!("{} promoted: it serves every object", before.canary);
                self.driver
                    .writer
                    .set("Rollout", true, "Promoted", &message);
                let mut status = self.rollout_status(&before, "Promoted", message);
                status.weight = 100;
                self.driver.writer.set_rollout(Some(status));
                self.driver.report_serving();
            }
            RolloutChange::Aborted { canary, reason } => {
                self.remember_step(
                    &before,
                    "Aborted",
                    &format!("{}; {figures}", reason.message),
                );
                let message = format!("aborted by {}: {}", reason.rule, reason.message);
                let mut status = self.rollout_status(&before, "Aborted", reason.message.clone());
                status.rule = Some(reason.rule.to_string());
                self.driver.writer.set_rollout(Some(status));
                if let Some(resource) = resource {
                    let refusal = Refusal::new(reason.rule, reason.message);
                    self.driver
                        .refuse(&resource, &canary, refusal, Instant::now())
                        .await;
                }
                self.driver
                    .writer
                    .set("Rollout", false, "Aborted", &message);
            }
        }
        self.driver
            .writer
            .set_replica_rollout(self.driver.active.canary().figures());
        self.driver.writer.write().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::plugin::JinghzhuPluginStatus;
    use crate::slot::canary::Followed;

    fn resource_at(generation: i64, rollout: RolloutStatus) -> JinghzhuPlugin {
        let mut resource = JinghzhuPlugin::new("p", Default::default());
        resource.metadata.generation = Some(generation);
        resource.status = Some(JinghzhuPluginStatus {
            rollout: Some(rollout),
            ..JinghzhuPluginStatus::default()
        });
        resource
    }

    fn rollout(phase: &str, step: &str) -> RolloutStatus {
        RolloutStatus {
            phase: phase.into(),
            canary: Some("sha256:c".into()),
            step: Some(step.into()),
            observed_generation: Some(2),
            rule: Some("rollout/difference".into()),
            ..RolloutStatus::default()
        }
    }

    #[test]
    fn a_follower_reads_the_judges_decision_for_its_canary_at_this_generation() {
        let resource = resource_at(2, rollout("Progressing", "2/4"));
        assert!(judged(Some(&resource), "sha256:c").is_some());
        assert!(
            judged(Some(&resource), "sha256:other").is_none(),
            "another canary"
        );
        let edited = resource_at(3, rollout("Aborted", "1/4"));
        assert!(
            judged(Some(&edited), "sha256:c").is_none(),
            "decided before the edit (a retry)"
        );
        let Some(Followed::Step { step, .. }) = followed(&rollout("Paused", "2/4")) else {
            panic!("a step");
        };
        assert_eq!(step, 2);
        let Some(Followed::Aborted(reason)) = followed(&rollout("Aborted", "1/4")) else {
            panic!("an abort");
        };
        assert_eq!(reason.rule, "rollout/difference");
        assert_eq!(
            followed(&rollout("Promoted", "3/3")),
            Some(Followed::Promoted)
        );
        assert_eq!(followed(&rollout("Weird", "3/3")), None);
    }

    #[test]
    fn the_strategy_reads_percentages_and_the_shadow_switch() {
        let spec = RolloutSpec {
            shadow_stable: true,
            max_difference_percent: 5,
            stall_seconds: 0,
            ..RolloutSpec::default()
        };
        let strategy = Strategy::of(&spec);
        assert_eq!(strategy.thresholds.max_difference, Some(0.05));
        assert_eq!(
            strategy.thresholds.stall,
            Duration::from_secs(1),
            "at least a second"
        );
        assert_eq!(strategy.thresholds.max_writes_increase, 1.0);
        let without = strategy_of_default();
        assert_eq!(without.thresholds.max_difference, None);
    }

    fn strategy_of_default() -> Strategy {
        Strategy::of(&RolloutSpec::default())
    }
}
