//! Declared controllers: every `PluginController` resource is one
//! controller of any kind, started and stopped as the resources come, change
//! and go, without a restart (`run --plugin-controllers`).
//!
//! For each resource a supervisor task resolves its kinds through API
//! discovery ([`kinds`]), opens its plugin source (the same sources and
//! signature policy a `JinghzhuPlugin` has), vets each candidate (digest
//! pin, compile, the world: a contract 0.3 plugin), starts the controller
//! with the first that passes ([`controller`]) and swaps in each later one
//! between reconciles. A refusal keeps what serves, and is said on the
//! resource's status and as a Warning Event on it. Each reconcile's output
//! is checked ([`checks`]) and applied ([`apply`]) by the host. With
//! `--shards`, every replica runs every controller and reconciles only the
//! parents of the shards it holds ([`sharding`]).

pub mod applied;
pub mod apply;
pub mod budget;
pub mod checks;
pub mod children;
pub mod controller;
mod fleet;
pub mod gone;
pub mod kinds;
pub mod observed;
pub mod rbac;
pub mod rollout;
pub mod shadow;
mod shadowing;
pub mod sharding;
mod status;
pub mod status_fields;
mod supervisor;
pub mod tenants;
mod voice;

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::apply::policy::PolicyConfig;
use crate::crd::controller::{PluginController, ROLLOUT_ACTION_ANNOTATION};
use crate::delivery::resource::opener::SourceOpener;
use crate::runtime::Runtime;
use crate::tasks::AbortOnDrop;

pub use controller::{Declaration, Running, Shared};
pub use fleet::leave as leave_fleets;

/// How the host runs declared controllers (from `run`'s flags).
#[derive(Clone)]
pub struct Settings {
    /// What every controller shares (client, Events, metrics).
    pub shared: Shared,
    /// Loads plugins.
    pub runtime: Arc<Runtime>,
    /// Opens plugin sources.
    pub opener: SourceOpener,
    /// The host's pod policy (a resource may only ask for a stricter one).
    pub policy: PolicyConfig,
    /// Sensitive child kinds the admin allows (`--allow-child-kind`).
    pub allowed_child_kinds: Vec<String>,
    /// Reconciles at once per controller.
    pub workers: u16,
    /// Each controller's write budget.
    pub write_budget: WriteRate,
}

/// A controller's write budget: writes per second after a burst
/// (`--controller-writes-per-second`, `--controller-write-burst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteRate {
    /// Writes per second once the burst is spent.
    pub per_second: u32,
    /// Writes at once.
    pub burst: u32,
}

impl Default for WriteRate {
    fn default() -> Self {
        Self {
            per_second: budget::DEFAULT_PER_SECOND,
            burst: budget::DEFAULT_BURST,
        }
    }
}

/// Follows every `PluginController` until the host stops.
pub async fn run(settings: Settings) {
    run_reporting(settings, &crate::telemetry::health::Health::default()).await;
}

/// [`run`], marking `health`'s caches synced once the first list of
/// `PluginController`s is in (the readiness of a host of declared
/// controllers only).
pub async fn run_reporting(settings: Settings, health: &crate::telemetry::health::Health) {
    let api: Api<PluginController> = Api::all(settings.shared.client.clone());
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut supervised: HashMap<String, Supervised> = HashMap::new();
    let tenancy = tenants::Tenancy::new(settings.shared.client.clone());
    // The names a (re)list holds: one gone while the watch was down is
    // stopped when the list ends.
    let mut listed: Option<std::collections::HashSet<String>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed = Some(Default::default()),
            Ok(watcher::Event::InitDone) => {
                health.set_caches_synced();
                if let Some(listed) = listed.take() {
                    supervised.retain(|name, _| listed.contains(name));
                }
            }
            Ok(watcher::Event::Apply(resource) | watcher::Event::InitApply(resource)) => {
                let name = resource.name_any();
                if let Some(listed) = &mut listed {
                    listed.insert(name.clone());
                }
                let generation = resource.metadata.generation;
                let action = rollout_action(&resource);
                if let Some(running) = supervised.get(&name)
                    && running.generation == generation
                {
                    running.actions.send_if_modified(|seen| {
                        let changed = *seen != action;
                        *seen = action;
                        changed
                    });
                    running.seen.send_replace(Arc::new(resource));
                    continue;
                }
                tracing::info!(controller = %name, ?generation, "starting the declared controller");
                supervised.insert(name, Supervised::start(&resource, &settings, &tenancy));
                restart_related(&mut supervised, &resource, false, &settings, &tenancy);
            }
            Ok(watcher::Event::Delete(resource)) => {
                if supervised.remove(&resource.name_any()).is_some() {
                    tracing::info!(controller = %resource.name_any(), "declared controller stopped");
                }
                restart_related(&mut supervised, &resource, true, &settings, &tenancy);
            }
            Err(err) => tracing::warn!("watching PluginControllers: {err}"),
        }
    }
}

/// Starts again the supervisors whose declaration depends on `changed`'s:
/// its tenants (their base changed or went), and, when it is `deleted`,
/// the other controllers of its parent kind (one refused by
/// `controller/parent-taken` may serve now).
fn restart_related(
    supervised: &mut HashMap<String, Supervised>,
    changed: &PluginController,
    deleted: bool,
    settings: &Settings,
    tenancy: &Arc<tenants::Tenancy>,
) {
    let name = changed.name_any();
    for (other, running) in supervised.iter_mut() {
        let spec = &running.resource.spec;
        let tenant_of_it = spec.tenant.as_ref().is_some_and(|t| t.of == name);
        let same_kind = deleted && spec.parent == changed.spec.parent;
        if *other != name && (tenant_of_it || same_kind) {
            tracing::info!(controller = %other, because = %name, "starting the declared controller again");
            *running = Supervised::start(&running.resource, settings, tenancy);
        }
    }
}

/// One resource's supervisor, as the manager keeps it.
struct Supervised {
    /// The resource as last seen.
    resource: PluginController,
    /// The `metadata.generation` it was started for (a new one restarts it).
    generation: Option<i64>,
    /// The rollout-action annotation, as last seen.
    actions: tokio::sync::watch::Sender<Option<String>>,
    /// The resource as last seen (its status: a sharded rollout's
    /// replicas' figures and the judge's decisions).
    seen: tokio::sync::watch::Sender<Arc<PluginController>>,
    _task: AbortOnDrop,
}

impl Supervised {
    fn start(
        resource: &PluginController,
        settings: &Settings,
        tenancy: &Arc<tenants::Tenancy>,
    ) -> Self {
        let (actions, asked) = tokio::sync::watch::channel(rollout_action(resource));
        let (seen, last_seen) = tokio::sync::watch::channel(Arc::new(resource.clone()));
        let task = tokio::spawn(supervisor::supervise(
            resource.clone(),
            settings.clone(),
            (asked, last_seen),
            tenancy.clone(),
        ));
        Self {
            resource: resource.clone(),
            generation: resource.metadata.generation,
            actions,
            seen,
            _task: AbortOnDrop::new(task.abort_handle()),
        }
    }
}

fn rollout_action(resource: &PluginController) -> Option<String> {
    resource
        .annotations()
        .get(ROLLOUT_ACTION_ANNOTATION)
        .cloned()
}
