//! One `PluginController` at work: its declaration resolved, its source
//! opened, each candidate vetted and served, and with `spec.rollout` each
//! new plugin rolled out as a canary ([`super::rollout`]) and judged every
//! second until it is promoted or aborted.
//!
//! An aborted canary is not served again for the same `spec` (the status
//! remembers it across restarts of the host; an edit of the spec is a
//! retry). After a restart the stable plugin of the status serves again,
//! from the precompiled cache, and a newer artifact starts its rollout
//! from the first step. Sharded, the holder of shard 0 judges the canary
//! on every replica's figures and the others follow it ([`super::fleet`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::{Resource, ResourceExt};
use tokio::sync::{mpsc, watch};

use super::controller::{self, Declaration, Running};
use super::fleet::{self, Fleet};
use super::rollout::{JUDGE_TICK, Judged, RolloutView};
use super::shadow::Shadow;
use super::shadowing::{self, Shadowing};
use super::status::{RolloutShown, StatusOf, now_rfc3339};
use super::tenants::{self, Registration, Tenancy};
use super::voice::{Standing, Voice};
use super::{Settings, kinds, observed, status_fields};
use crate::apply::policy::PolicyConfig;
use crate::crd::controller::PluginController;
use crate::crd::plugin::RolloutStepRecord;
use crate::delivery::resource::opener::Opened;
use crate::delivery::sources::Candidate;
use crate::delivery::vetting::{self, load_pinned};
use crate::judging::plan::Strategy;
use crate::refusal::Refusal;
use crate::runtime::{LoadedPlugin, digest_of};
use crate::tasks::AbortOnDrop;

/// Judged steps kept in `status.rollout.history`.
pub const HISTORY_KEPT: usize = 32;

/// The rule a candidate aborted as a canary is refused by when offered
/// again.
pub const ABORTED_RULE: &str = "rollout/aborted";

/// One resource: its declaration, its source, its controller.
pub(super) async fn supervise(
    resource: PluginController,
    settings: Settings,
    (actions, seen): (
        watch::Receiver<Option<String>>,
        watch::Receiver<Arc<PluginController>>,
    ),
    tenancy: Arc<Tenancy>,
) {
    let status =
        StatusOf::new(&resource, &settings.shared.client).sharded(settings.shared.shards.clone());
    let voice = Arc::new(Voice::new(
        &resource,
        settings.shared.events.clone(),
        settings.shared.shards.clone(),
    ));
    // A tenant is declared within its base's declaration; any other is
    // checked on its own first (what is wrong with a resource is said
    // before that another serves its kind), then must be alone on its kind.
    let is_tenant = resource.spec.tenant.is_some();
    let resource = if is_tenant {
        match admitted(&resource, &settings, &status, &voice).await {
            Some(effective) => effective,
            None => return stand(&status, &voice).await,
        }
    } else {
        resource
    };
    let declaration = match declare(&resource, &settings, &tenancy).await {
        Ok(declaration) => declaration,
        Err(refusal) => {
            refuse(&resource, &voice, &status, "", &refusal).await;
            return stand(&status, &voice).await;
        }
    };
    if !is_tenant
        && admitted(&resource, &settings, &status, &voice)
            .await
            .is_none()
    {
        return stand(&status, &voice).await;
    }
    let resource_of_shadow = resource.clone();
    let fleet = sharded_rollout(&resource, &settings, &declaration);
    let mut supervisor = Supervisor {
        aborted: aborted_at_this_generation(&resource),
        resource,
        settings,
        status,
        declaration,
        running: None,
        history: Vec::new(),
        tenancy,
        registration: None,
        shadowing: Shadowing::new(&resource_of_shadow),
        voice,
        seen,
        fleet,
    };
    supervisor.run(actions).await;
    stand(&supervisor.status, &supervisor.voice).await;
}

struct Supervisor {
    resource: PluginController,
    settings: Settings,
    status: StatusOf,
    declaration: Declaration,
    running: Option<Running>,
    /// The digest of the canary last aborted at this generation.
    aborted: Option<String>,
    /// The steps of the rollout going on (or last decided) judged so far,
    /// oldest first.
    history: Vec<RolloutStepRecord>,
    /// Who serves which namespace.
    tenancy: Arc<Tenancy>,
    /// A tenant's namespaces taken from its base while it serves.
    registration: Option<Registration>,
    /// The shadow plugin (`spec.shadow`).
    shadowing: Shadowing,
    /// Says the Events about the resource (sharded: from one replica).
    voice: Arc<Voice>,
    /// The resource as last seen (its status: the judge's decisions).
    seen: watch::Receiver<Arc<PluginController>>,
    /// Sharded with `spec.rollout`: this replica's side of the fleet's
    /// rollout.
    fleet: Option<Fleet>,
}

impl Supervisor {
    async fn run(&mut self, mut actions: watch::Receiver<Option<String>>) {
        let spec = self.resource.spec.clone();
        if let Err(refusal) = self
            .settings
            .opener
            .check_trust(&spec.source, spec.verification.as_ref())
        {
            self.refuse("", &refusal).await;
            return;
        }
        self.restore_stable().await;
        self.status
            .resolving(&self.declaration, "opening the plugin source")
            .await;
        let (tx, mut rx) = mpsc::channel::<Candidate>(4);
        let opened = self
            .settings
            .opener
            .open(&spec.source, spec.verification.as_ref(), tx)
            .await;
        let _pulling = match opened {
            Err(refusal) => {
                self.refuse("", &refusal).await;
                return;
            }
            Ok(Opened::Missing(why)) => {
                self.status.resolving(&self.declaration, &why).await;
                None
            }
            Ok(Opened::Pulling(task)) => Some(AbortOnDrop::new(task)),
            Ok(Opened::Bytes(bytes)) => {
                let label = source_label(&self.resource);
                self.offer(bytes, &label).await;
                None
            }
        };
        self.open_shadow().await;
        self.follow(&mut rx, &mut actions).await;
    }

    /// Serves or refuses each later candidate of the source, judges the
    /// canary's steps and acts on a person's decision.
    async fn follow(
        &mut self,
        rx: &mut mpsc::Receiver<Candidate>,
        actions: &mut watch::Receiver<Option<String>>,
    ) {
        let mut tick = tokio::time::interval(JUDGE_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut source_open = true;
        let mut actions_open = true;
        loop {
            tokio::select! {
                candidate = rx.recv(), if source_open => match candidate {
                    Some(candidate) => self.on_candidate(candidate).await,
                    // The source is gone: keep serving what serves until
                    // the resource goes.
                    None => source_open = false,
                },
                candidate = self.shadowing.next() => {
                    if let Some(candidate) = candidate {
                        self.on_shadow_candidate(candidate).await;
                    }
                }
                _ = tick.tick() => {
                    self.status.flush().await;
                    self.voice.hand_over();
                    self.judge().await;
                    self.shadowing.show(self.running.as_ref(), &self.status).await;
                }
                changed = actions.changed(), if actions_open => match changed {
                    Ok(()) => {
                        let action = actions.borrow_and_update().clone();
                        self.act(action.as_deref()).await;
                    }
                    Err(_) => actions_open = false,
                },
            }
            if !source_open && self.running.is_none() {
                return;
            }
        }
    }

    async fn on_candidate(&mut self, candidate: Candidate) {
        if let Some(refused) = &candidate.refusal {
            self.refuse(&refused.digest, &refused.refusal).await;
            return;
        }
        self.offer(candidate.bytes, &candidate.source).await;
    }

    /// Vets `bytes` and serves them: the first starts the controller; a
    /// later one swaps in, or becomes the canary with `spec.rollout`.
    async fn offer(&mut self, bytes: Vec<u8>, from: &str) {
        let digest = digest_of(&bytes);
        if let Some(running) = &self.running {
            let canary = running.slot().canary();
            if running.plugin().digest() == digest || canary.is_some_and(|c| c.digest() == digest) {
                return;
            }
        }
        if self.rolls_out() && self.aborted.as_deref() == Some(digest.as_str()) {
            let refusal = Refusal::new(
                ABORTED_RULE,
                format!(
                    "{digest} was aborted as a canary of this PluginController; it is not rolled \
                     out again until a new digest or an edit of spec (a retry)"
                ),
            );
            self.refuse(&digest, &refusal).await;
            return;
        }
        let plugin = match vet(&self.settings, &self.resource, &bytes, from).await {
            Ok(plugin) => plugin,
            Err(refusal) => {
                self.refuse(&digest, &refusal).await;
                return;
            }
        };
        self.serve(plugin, from).await;
    }

    async fn serve(&mut self, plugin: Arc<LoadedPlugin>, from: &str) {
        if self.fleet.is_some() && self.rolls_out() && self.decided(&plugin).await {
            return;
        }
        let name = &self.declaration.name;
        match (&self.running, &self.resource.spec.rollout) {
            (Some(running), Some(spec)) => {
                tracing::info!(controller = %name, canary = %plugin.describe(), from, "rolling out");
                running
                    .slot()
                    .start_canary(plugin, Strategy::of(spec), spec.paused);
                if spec.shadow_stable {
                    let (shadow, comparisons) = Shadow::start_reporting(
                        running.plugin(),
                        shadowing::rules(&self.declaration, &self.settings.shared),
                        self.resource.object_ref(&()),
                    );
                    running.slot().shadow_stable(shadow, comparisons);
                }
                running.reconcile_all();
                self.history.clear();
                self.show_rollout(
                    if spec.paused { "Paused" } else { "Progressing" },
                    "the canary began its first step",
                    None,
                )
                .await;
                return;
            }
            (Some(running), None) => running.swap(plugin.clone()),
            (None, _) => {
                self.running = Some(controller::start(
                    self.declaration.clone(),
                    plugin.clone(),
                    self.settings.shared.clone(),
                ));
                if self.resource.spec.tenant.is_some() {
                    let voice = self.voice.clone();
                    self.registration = Some(self.tenancy.register(&self.resource, voice));
                }
                self.shadowing
                    .started(self.running.as_ref(), &self.settings, &self.resource);
            }
        }
        tracing::info!(controller = %name, plugin = %plugin.describe(), from, "serving");
        self.voice.withdraw(Standing::Plugin);
        self.status.serving(&self.declaration, &plugin).await;
    }

    /// Opens the shadow's source (`spec.shadow`) and offers its first bytes.
    async fn open_shadow(&mut self) {
        match self.shadowing.open(&self.settings).await {
            Ok(Some(bytes)) => {
                let label = self.shadowing.label();
                self.offer_shadow(bytes, &label).await;
            }
            Ok(None) => {}
            Err(refusal) => self.refuse_shadow("", &refusal).await,
        }
    }

    async fn on_shadow_candidate(&mut self, candidate: Candidate) {
        if let Some(refused) = &candidate.refusal {
            self.refuse_shadow(&refused.digest, &refused.refusal).await;
            return;
        }
        self.offer_shadow(candidate.bytes, &candidate.source).await;
    }

    /// Vets `bytes` as the serving plugin's are (the shadow's own pin) and
    /// runs them as the shadow.
    async fn offer_shadow(&mut self, bytes: Vec<u8>, from: &str) {
        let digest = digest_of(&bytes);
        if self.shadowing.holds(self.running.as_ref(), &digest) {
            return;
        }
        let pin = self.shadowing.pin().map(str::to_string);
        let vetted = match load_pinned(&self.settings.runtime, &bytes, from, pin.as_deref()).await {
            Ok(plugin) => admit(plugin, &self.resource),
            Err(refusal) => Err(refusal),
        };
        match vetted {
            Ok(plugin) => {
                self.voice.withdraw(Standing::Shadow);
                self.shadowing.serve(
                    plugin,
                    self.running.as_ref(),
                    &self.settings,
                    &self.resource,
                );
                self.shadowing
                    .show(self.running.as_ref(), &self.status)
                    .await;
            }
            Err(refusal) => self.refuse_shadow(&digest, &refusal).await,
        }
    }

    /// A shadow candidate refused: the log, `status.shadow.lastRefusal`, a
    /// Warning; what serves (and the shadow running) stays.
    async fn refuse_shadow(&mut self, digest: &str, refusal: &Refusal) {
        tracing::warn!(controller = %self.resource.name_any(), digest, "shadow plugin refused: {refusal}");
        self.shadowing.refused(digest, refusal);
        self.shadowing
            .show(self.running.as_ref(), &self.status)
            .await;
        self.voice.state(
            Standing::Shadow,
            true,
            "PluginRefused",
            &format!("shadow plugin refused (the serving plugin is not affected): {refusal}"),
            "Vet",
        );
    }

    fn rolls_out(&self) -> bool {
        self.resource.spec.rollout.is_some()
    }

    /// After a restart of the host (or of this supervisor), the stable
    /// plugin the status names serves again, from the precompiled cache,
    /// so a newer artifact is rolled out over it rather than served at once.
    async fn restore_stable(&mut self) {
        if !self.rolls_out() {
            return;
        }
        let Some(digest) = self
            .resource
            .status
            .as_ref()
            .map(|s| s.digest.clone())
            .filter(|d| !d.is_empty())
        else {
            return;
        };
        let source = format!(
            "plugincontroller:{} (precompiled cache)",
            self.declaration.name
        );
        let restored = self
            .settings
            .runtime
            .load_precompiled_off_thread(digest.clone(), source.clone())
            .await;
        let Some(plugin) = restored else {
            tracing::warn!(controller = %self.declaration.name, plugin = digest, "the stable plugin is not in the precompiled cache; the next artifact serves without a canary");
            return;
        };
        match admit(plugin, &self.resource) {
            Ok(plugin) => self.serve(plugin, &source).await,
            Err(refusal) => self.refuse(&digest, &refusal).await,
        }
    }

    /// Judges the canary's step; acts on the verdict.
    async fn judge(&mut self) {
        if self.fleet.is_some() {
            self.judge_sharded().await;
            return;
        }
        let Some(running) = &self.running else { return };
        let Some(before) = running.slot().view() else {
            return;
        };
        let (judged, figures) = running.slot().judge(Instant::now(), &[]);
        self.on_judged(&before, judged, &figures).await;
    }

    /// Sharded: the judge's tick, or a follower's ([`super::fleet`]).
    async fn judge_sharded(&mut self) {
        let (Some(fleet), Some(running)) = (self.fleet.as_mut(), &self.running) else {
            return;
        };
        let seen = self.seen.borrow().clone();
        let tick = fleet.tick(running.slot(), &seen).await;
        for warning in &tick.warnings {
            self.voice.say(true, "PluginRefused", warning, "Vet");
        }
        let Some(decided) = tick.decided else { return };
        self.on_judged(&decided.before, decided.judged, &decided.figures)
            .await;
        if let Some(history) = decided.history {
            self.history = history;
        }
    }

    /// Sharded: a canary the judge decided on already (this replica saw
    /// its bytes late) is not rolled out again here: one it promoted
    /// serves at once, one it aborted is refused. False: not decided.
    async fn decided(&mut self, plugin: &Arc<LoadedPlugin>) -> bool {
        let seen = self.seen.borrow().clone();
        let phase = fleet::decision(&seen, plugin.digest()).map(|r| r.phase.clone());
        let Some(running) = &self.running else {
            return false;
        };
        match phase.as_deref() {
            Some("Promoted") => {
                running.swap(plugin.clone());
                tracing::info!(controller = %self.declaration.name, plugin = %plugin.describe(), "serving the canary the judge promoted");
                self.status.serving(&self.declaration, plugin).await;
                true
            }
            Some("Aborted") => {
                self.aborted = Some(plugin.digest().to_string());
                let refusal = Refusal::new(
                    ABORTED_RULE,
                    format!(
                        "{} was aborted as a canary of this PluginController by the judging \
                         replica; it is not rolled out again until a new digest or an edit of \
                         spec (a retry)",
                        plugin.digest()
                    ),
                );
                self.refuse(plugin.digest(), &refusal).await;
                true
            }
            _ => false,
        }
    }

    /// Acts on what was judged of the rollout `before`.
    async fn on_judged(&mut self, before: &RolloutView, judged: Judged, figures: &str) {
        let verdict = match &judged {
            Judged::Hold | Judged::Starved => None,
            Judged::Advanced => Some("Passed"),
            Judged::Promoted(_) => Some("Promoted"),
            Judged::Aborted(..) => Some("Aborted"),
        };
        if let Some(verdict) = verdict {
            self.remember_step(before, verdict, figures);
        }
        let Some(running) = &self.running else { return };
        match judged {
            Judged::Hold => {}
            Judged::Starved => {
                self.show_rollout(
                    "Progressing",
                    &format!("the step waits for reconciles: {figures}"),
                    None,
                )
                .await;
            }
            Judged::Advanced => {
                running.reconcile_all();
                self.show_rollout("Progressing", &format!("step passed: {figures}"), None)
                    .await;
            }
            Judged::Promoted(plugin) => {
                running.reconcile_all();
                let stable = running.plugin();
                self.status.serving(&self.declaration, &plugin).await;
                let message = format!("{} promoted: {figures}", plugin.describe());
                self.status
                    .rollout(RolloutShown {
                        phase: "Promoted",
                        stable: stable.digest(),
                        canary: plugin.digest(),
                        weight: 100,
                        step: before.step,
                        message: &message,
                        rule: None,
                        history: &self.history,
                    })
                    .await;
                self.voice.say(false, "RolloutPromoted", &message, "Vet");
            }
            Judged::Aborted(canary, reason) => {
                running.reconcile_all();
                let stable = running.plugin();
                let message = format!(
                    "canary {} aborted: {} ({figures})",
                    canary.describe(),
                    reason.message
                );
                self.aborted = Some(canary.digest().to_string());
                self.status
                    .rollout(RolloutShown {
                        phase: "Aborted",
                        stable: stable.digest(),
                        canary: canary.digest(),
                        weight: 0,
                        step: before.step,
                        message: &message,
                        rule: Some(reason.rule),
                        history: &self.history,
                    })
                    .await;
                let refusal = Refusal::new(reason.rule, message);
                self.refuse(canary.digest(), &refusal).await;
            }
        }
    }

    /// Adds the step judged to the history (the last [`HISTORY_KEPT`]).
    fn remember_step(&mut self, step: &RolloutView, verdict: &str, figures: &str) {
        self.history.push(RolloutStepRecord {
            step: format!("{}/{}", step.step.0, step.step.1),
            weight: step.weight,
            verdict: verdict.to_string(),
            time: now_rfc3339(),
            message: crate::plugin_text::escape_within(figures, 512),
        });
        let excess = self.history.len().saturating_sub(HISTORY_KEPT);
        self.history.drain(..excess);
    }

    /// A person's decision (`promote sha256:…` or `abort sha256:…`) on the
    /// canary it names.
    async fn act(&mut self, action: Option<&str>) {
        let Some((verb, digest)) = action.and_then(|a| a.trim().split_once(' ')) else {
            return;
        };
        let promote = match verb {
            "promote" => true,
            "abort" => false,
            _ => return,
        };
        let Some(running) = &self.running else { return };
        let Some(before) = running.slot().view() else {
            return;
        };
        if let Some(judged) = running.slot().decide(digest.trim(), promote) {
            self.on_judged(&before, judged, "decided by a person").await;
        }
    }

    /// Shows the rollout going on.
    async fn show_rollout(&self, phase: &str, message: &str, rule: Option<&str>) {
        let Some(view) = self.running.as_ref().and_then(|r| r.slot().view()) else {
            return;
        };
        self.status
            .rollout(RolloutShown {
                phase,
                stable: view.stable.digest(),
                canary: view.canary.digest(),
                weight: view.weight,
                step: view.step,
                message,
                rule,
                history: &self.history,
            })
            .await;
    }

    async fn refuse(&self, digest: &str, refusal: &Refusal) {
        refuse(&self.resource, &self.voice, &self.status, digest, refusal).await;
    }
}

/// Once a supervisor is done (a refusal, or its source gone): sends the
/// status kept for the holder of shard 0 when this replica comes to hold
/// it, and, sharded, keeps looking every second whether this replica came
/// to speak for the resource, to say again what stands
/// ([`Voice::hand_over`]), until the resource changes or goes (its task is
/// dropped then).
async fn stand(status: &StatusOf, voice: &Voice) {
    if voice.shards().is_none() {
        return status.settle().await;
    }
    loop {
        status.flush().await;
        voice.hand_over();
        tokio::time::sleep(JUDGE_TICK).await;
    }
}

/// Sharded with `spec.rollout`: the replica's side of the fleet's rollout.
fn sharded_rollout(
    resource: &PluginController,
    settings: &Settings,
    declaration: &Declaration,
) -> Option<Fleet> {
    resource.spec.rollout.as_ref()?;
    let shards = settings.shared.shards.clone()?;
    Some(Fleet::new(
        settings.shared.client.clone(),
        &resource.name_any(),
        shards,
        declaration.parent.resource.clone(),
    ))
}

/// The canary aborted at the resource's generation now, as its status says.
fn aborted_at_this_generation(resource: &PluginController) -> Option<String> {
    resource
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .filter(|r| r.phase == "Aborted" && r.observed_generation == resource.metadata.generation)
        .and_then(|r| r.canary.clone())
}

/// The digest pin, compile and world, and the contract: 0.3.
async fn vet(
    settings: &Settings,
    resource: &PluginController,
    bytes: &[u8],
    from: &str,
) -> Result<Arc<LoadedPlugin>, Refusal> {
    let plugin = load_pinned(
        &settings.runtime,
        bytes,
        from,
        resource.spec.digest.as_deref(),
    )
    .await?;
    admit(plugin, resource)
}

/// A contract 0.3 plugin, within the resource's limits.
fn admit(
    mut plugin: Arc<LoadedPlugin>,
    resource: &PluginController,
) -> Result<Arc<LoadedPlugin>, Refusal> {
    if !plugin.contract().is_generic() {
        return Err(Refusal::new(
            vetting::rules::CONTRACT,
            format!(
                "{} is a contract {} plugin for the Jinghzhu kind; a PluginController serves a \
                 contract 0.3 plugin (wit/0.3/controller.wit)",
                plugin.describe(),
                plugin.contract()
            ),
        ));
    }
    if let (Some(limits), Some(loaded)) = (&resource.spec.limits, Arc::get_mut(&mut plugin)) {
        let deadline = limits
            .timeout_ms
            .map_or(loaded.deadline(), Duration::from_millis);
        let memory = limits
            .memory_mib
            .map_or(loaded.memory_limit(), |mib| mib.saturating_mul(1024 * 1024));
        loaded.narrow_limits(deadline, memory);
    }
    Ok(plugin)
}

/// `resource` as it may serve ([`tenants::admit_declaration`]): a tenant
/// within its base's declaration, any other alone on its parent kind; a
/// refusal is shown and `None` returned.
async fn admitted(
    resource: &PluginController,
    settings: &Settings,
    status: &StatusOf,
    voice: &Voice,
) -> Option<PluginController> {
    match tenants::admit_declaration(resource, &settings.shared.client, settings.write_budget).await
    {
        Ok(effective) => Some(effective),
        Err(refusal) => {
            refuse(resource, voice, status, "", &refusal).await;
            None
        }
    }
}

/// Checks and resolves the resource's kinds and policy.
async fn declare(
    resource: &PluginController,
    settings: &Settings,
    tenancy: &Arc<Tenancy>,
) -> Result<Declaration, Refusal> {
    let name = resource.name_any();
    if name.len() > 63 {
        return Err(Refusal::new(
            "controller/name",
            format!("the name {name:?} is longer than 63 characters: it labels every child"),
        ));
    }
    let spec = &resource.spec;
    let declared: Vec<_> = spec.children.iter().map(|c| c.kind_ref()).collect();
    kinds::check_children(&declared, &settings.allowed_child_kinds)?;
    let read: Vec<_> = spec.observe.iter().map(|o| o.kind_ref()).collect();
    kinds::check_children(&read, &settings.allowed_child_kinds)?;
    let parent = kinds::resolve(&settings.shared.client, &spec.parent).await?;
    let mut children = Vec::new();
    for child in &spec.children {
        let resolved = kinds::resolve(&settings.shared.client, &child.kind_ref()).await?;
        children.push((resolved, child.max_count(), child.max_bytes()));
    }
    let mut observed = Vec::new();
    for read in &spec.observe {
        let mut through = Vec::new();
        for kind in &read.through {
            through.push(kinds::resolve(&settings.shared.client, kind).await?);
        }
        let kind = kinds::resolve(&settings.shared.client, &read.kind_ref()).await?;
        observed.push(observed::ObservedKind { kind, through });
    }
    let route = tenancy.route(&name, spec.tenant.as_ref().map(|t| t.of.as_str()));
    let checked_status = status_fields::resolve(&spec.checked_status, &declared, &read)?;
    Ok(Declaration {
        name,
        parent,
        children,
        observed,
        policy: pod_policy(resource, &settings.policy),
        workers: settings.workers,
        route,
        checked_status,
        write_budget: tenants::write_budget(spec, settings.write_budget),
    })
}

/// The host's policy, made stricter if the resource asks.
fn pod_policy(resource: &PluginController, host: &PolicyConfig) -> PolicyConfig {
    let asked = resource
        .spec
        .pod_policy
        .as_ref()
        .map(crate::delivery::resource::pod_policy_of);
    let mut policy = host.clone();
    if let Some(asked) = asked {
        policy.policy = asked.stricter_of(host.policy);
    }
    policy
}

fn source_label(resource: &PluginController) -> String {
    crate::delivery::resource::source_label(&resource.spec.source)
}

/// Says a refusal: the log, the status, a Warning Event on the resource
/// (it stands until a plugin serves).
async fn refuse(
    resource: &PluginController,
    voice: &Voice,
    status: &StatusOf,
    digest: &str,
    refusal: &Refusal,
) {
    tracing::warn!(controller = %resource.name_any(), digest, "refused: {refusal}");
    status.refused(digest, refusal).await;
    let note = format!("{refusal}");
    voice.state(Standing::Plugin, true, "PluginRefused", &note, "Vet");
}
