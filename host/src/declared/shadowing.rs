//! The supervisor's side of a declared controller's shadow (`spec.shadow`):
//! its source opened with the same source kinds and signature policy as
//! `spec.source`, each candidate vetted as the serving plugin is (digest
//! pin `spec.shadow.digest`, compile, contract 0.3, the resource's
//! limits), the one that passes started beside the serving plugin
//! ([`super::shadow::Shadow`]) with every parent reconciled once more (so
//! the shadow sees each, not only those that change) and its figures written to `status.shadow`
//! when they move (at most every [`STATUS_EVERY`]). A shadow refused is
//! shown in `status.shadow.lastRefusal` and a Warning `PluginRefused`; it
//! never touches the serving plugin's state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Resource;
use tokio::sync::mpsc;

use super::Settings;
use super::controller::{Declaration, Running, Shared};
use super::shadow::{Shadow, ShadowRules};
use super::status::{StatusOf, now_rfc3339};
use crate::crd::controller::{PluginController, ShadowSpec};
use crate::crd::plugin::PluginRefusal;
use crate::delivery::resource::opener::Opened;
use crate::delivery::sources::Candidate;
use crate::refusal::Refusal;
use crate::runtime::LoadedPlugin;
use crate::tasks::AbortOnDrop;

/// Most often `status.shadow` is written while its figures move.
pub const STATUS_EVERY: Duration = Duration::from_secs(2);

/// What the supervisor keeps of the shadow.
pub(super) struct Shadowing {
    spec: Option<ShadowSpec>,
    candidates: Option<mpsc::Receiver<Candidate>>,
    _pulling: Option<AbortOnDrop>,
    /// Vetted before the controller started: started with it.
    waiting: Option<Arc<LoadedPlugin>>,
    last_refusal: Option<PluginRefusal>,
    /// The figures' version last written, and when.
    shown: Option<(u64, Instant)>,
    /// A `status.shadow` left from a spec that had a shadow: removed.
    stale: bool,
}

impl Shadowing {
    pub(super) fn new(resource: &PluginController) -> Self {
        Self {
            spec: resource.spec.shadow.clone(),
            candidates: None,
            _pulling: None,
            waiting: None,
            last_refusal: None,
            shown: None,
            stale: resource.spec.shadow.is_none()
                && resource.status.as_ref().is_some_and(|s| s.shadow.is_some()),
        }
    }

    /// Opens the shadow's source: its first bytes, if there, are returned
    /// to vet; later candidates come from [`Shadowing::next`].
    pub(super) async fn open(&mut self, settings: &Settings) -> Result<Option<Vec<u8>>, Refusal> {
        let Some(spec) = &self.spec else {
            return Ok(None);
        };
        settings
            .opener
            .check_trust(&spec.source, spec.verification.as_ref())?;
        let (tx, rx) = mpsc::channel::<Candidate>(4);
        self.candidates = Some(rx);
        match settings
            .opener
            .open(&spec.source, spec.verification.as_ref(), tx)
            .await?
        {
            Opened::Bytes(bytes) => Ok(Some(bytes)),
            Opened::Pulling(task) => {
                self._pulling = Some(AbortOnDrop::new(task));
                Ok(None)
            }
            Opened::Missing(why) => {
                tracing::info!(shadow = %source_label(spec), "the shadow's source holds nothing yet: {why}");
                Ok(None)
            }
        }
    }

    /// The shadow source's next candidate (pending forever without one).
    pub(super) async fn next(&mut self) -> Option<Candidate> {
        match self.candidates.as_mut() {
            Some(rx) => {
                let next = rx.recv().await;
                if next.is_none() {
                    self.candidates = None;
                }
                next
            }
            None => std::future::pending().await,
        }
    }

    /// Where the shadow's bytes come from, for logs.
    pub(super) fn label(&self) -> String {
        self.spec.as_ref().map(source_label).unwrap_or_default()
    }

    /// The digest pin of the shadow.
    pub(super) fn pin(&self) -> Option<&str> {
        self.spec.as_ref().and_then(|s| s.digest.as_deref())
    }

    /// Whether `digest` is the shadow running or waiting already.
    pub(super) fn holds(&self, running: Option<&Running>, digest: &str) -> bool {
        self.waiting.as_ref().is_some_and(|w| w.digest() == digest)
            || running
                .and_then(Running::shadow)
                .is_some_and(|s| s.plugin().digest() == digest)
    }

    /// Starts `plugin` as the shadow of `running`, or keeps it until the
    /// controller starts.
    pub(super) fn serve(
        &mut self,
        plugin: Arc<LoadedPlugin>,
        running: Option<&Running>,
        settings: &Settings,
        resource: &PluginController,
    ) {
        let Some(running) = running else {
            self.waiting = Some(plugin);
            return;
        };
        let queue = self.spec.as_ref().map_or(1, ShadowSpec::queue);
        tracing::info!(controller = %running.declaration().name, shadow = %plugin.describe(), queue, "the shadow plugin runs beside the serving one; nothing of it is applied");
        running.set_shadow(Some(Shadow::start(
            plugin,
            rules(running.declaration(), &settings.shared),
            queue,
            resource.object_ref(&()),
        )));
        // Every parent once more, so the shadow sees each (a parent that is
        // converged costs a call and no write).
        running.reconcile_all();
        self.shown = None;
    }

    /// Starts the shadow kept until the controller started.
    pub(super) fn started(
        &mut self,
        running: Option<&Running>,
        settings: &Settings,
        resource: &PluginController,
    ) {
        if let Some(plugin) = self.waiting.take() {
            self.serve(plugin, running, settings, resource);
        }
    }

    /// Remembers a refused shadow candidate for the status.
    pub(super) fn refused(&mut self, digest: &str, refusal: &Refusal) {
        self.last_refusal = Some(PluginRefusal {
            digest: digest.to_string(),
            rule: refusal.rule.to_string(),
            message: refusal.message.clone(),
            time: now_rfc3339(),
            replica: std::env::var("POD_NAME").unwrap_or_default(),
        });
        self.shown = None;
    }

    /// Writes `status.shadow` when its figures moved (at most every
    /// [`STATUS_EVERY`]) or a refusal is new.
    pub(super) async fn show(&mut self, running: Option<&Running>, status: &StatusOf) {
        if self.spec.is_none() {
            if std::mem::take(&mut self.stale) {
                status.shadow_removed().await;
            }
            return;
        }
        let shadow = running.and_then(Running::shadow);
        let version = shadow.as_ref().map_or(0, |s| s.figures().version());
        let now = Instant::now();
        if let Some((shown, at)) = self.shown
            && (shown == version || now.duration_since(at) < STATUS_EVERY)
        {
            return;
        }
        let mut figures = shadow
            .as_ref()
            .map(|s| s.figures().status())
            .unwrap_or_default();
        figures.last_refusal = self.last_refusal.clone();
        status.shadow(&figures).await;
        self.shown = Some((version, now));
    }
}

/// The rules a shadow of `declaration` is held to, and where it reports.
pub(super) fn rules(declaration: &Declaration, shared: &Shared) -> ShadowRules {
    ShadowRules {
        controller: declaration.name.clone(),
        parent: declaration.parent.clone(),
        children: declaration.children.clone(),
        policy: declaration.policy.clone(),
        metrics: shared.metrics.clone(),
        events: shared.events.clone(),
    }
}

fn source_label(spec: &ShadowSpec) -> String {
    crate::delivery::resource::source_label(&spec.source)
}
