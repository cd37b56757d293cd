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
//! is checked ([`checks`]) and applied ([`apply`]) by the host.

pub mod apply;
pub mod budget;
pub mod checks;
pub mod children;
pub mod controller;
pub mod kinds;
pub mod observed;
pub mod owners;
pub mod rbac;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::apply::policy::PolicyConfig;
use crate::crd::controller::PluginController;
use crate::crd::plugin::PluginRefusal;
use crate::delivery::resource::opener::{Opened, SourceOpener};
use crate::delivery::sources::Candidate;
use crate::delivery::vetting::{self, load_pinned};
use crate::refusal::Refusal;
use crate::runtime::{LoadedPlugin, Runtime, digest_of};
use crate::tasks::AbortOnDrop;
use crate::telemetry::events::QueuedEvent;

pub use controller::{Declaration, Running, Shared};

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
}

/// Follows every `PluginController` until the host stops.
pub async fn run(settings: Settings) {
    let api: Api<PluginController> = Api::all(settings.shared.client.clone());
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut supervised: HashMap<String, (Option<i64>, AbortOnDrop)> = HashMap::new();
    // The names a (re)list holds: one gone while the watch was down is
    // stopped when the list ends.
    let mut listed: Option<std::collections::HashSet<String>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed = Some(Default::default()),
            Ok(watcher::Event::InitDone) => {
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
                if supervised
                    .get(&name)
                    .is_some_and(|(seen, _)| *seen == generation)
                {
                    continue;
                }
                tracing::info!(controller = %name, ?generation, "starting the declared controller");
                let task = tokio::spawn(supervise(resource, settings.clone()));
                supervised.insert(name, (generation, AbortOnDrop::new(task.abort_handle())));
            }
            Ok(watcher::Event::Delete(resource)) => {
                if supervised.remove(&resource.name_any()).is_some() {
                    tracing::info!(controller = %resource.name_any(), "declared controller stopped");
                }
            }
            Err(err) => tracing::warn!("watching PluginControllers: {err}"),
        }
    }
}

/// One resource: its declaration, its source, its controller.
async fn supervise(resource: PluginController, settings: Settings) {
    let status = StatusOf::new(&resource, &settings.shared.client);
    let declaration = match declare(&resource, &settings).await {
        Ok(declaration) => declaration,
        Err(refusal) => {
            refuse(&resource, &settings, &status, "", &refusal).await;
            return;
        }
    };
    if let Err(refusal) = settings
        .opener
        .check_trust(&resource.spec.source, resource.spec.verification.as_ref())
    {
        refuse(&resource, &settings, &status, "", &refusal).await;
        return;
    }
    status
        .resolving(&declaration, "opening the plugin source")
        .await;
    let (tx, mut rx) = mpsc::channel::<Candidate>(4);
    let opened = settings
        .opener
        .open(
            &resource.spec.source,
            resource.spec.verification.as_ref(),
            tx,
        )
        .await;
    let _pulling = match opened {
        Err(refusal) => {
            refuse(&resource, &settings, &status, "", &refusal).await;
            return;
        }
        Ok(Opened::Missing(why)) => {
            status.resolving(&declaration, &why).await;
            None
        }
        Ok(Opened::Pulling(task)) => Some(AbortOnDrop::new(task)),
        Ok(Opened::Bytes(bytes)) => {
            let label = source_label(&resource);
            let mut running = None;
            offer(
                &resource,
                &settings,
                &status,
                &declaration,
                &mut running,
                bytes,
                &label,
            )
            .await;
            return follow(
                &resource,
                &settings,
                &status,
                &declaration,
                running,
                &mut rx,
            )
            .await;
        }
    };
    follow(&resource, &settings, &status, &declaration, None, &mut rx).await;
}

/// Serves or refuses each later candidate of the source.
async fn follow(
    resource: &PluginController,
    settings: &Settings,
    status: &StatusOf,
    declaration: &Declaration,
    mut running: Option<Running>,
    rx: &mut mpsc::Receiver<Candidate>,
) {
    while let Some(candidate) = rx.recv().await {
        if let Some(refused) = &candidate.refusal {
            refuse(
                resource,
                settings,
                status,
                &refused.digest,
                &refused.refusal,
            )
            .await;
            continue;
        }
        offer(
            resource,
            settings,
            status,
            declaration,
            &mut running,
            candidate.bytes,
            &candidate.source,
        )
        .await;
    }
    // The source is gone: keep serving what serves until the resource goes.
    if running.is_some() {
        std::future::pending::<()>().await;
    }
}

/// Vets `bytes` and serves them (starting the controller on the first).
async fn offer(
    resource: &PluginController,
    settings: &Settings,
    status: &StatusOf,
    declaration: &Declaration,
    running: &mut Option<Running>,
    bytes: Vec<u8>,
    from: &str,
) {
    let digest = digest_of(&bytes);
    if running
        .as_ref()
        .is_some_and(|r| r.plugin().digest() == digest)
    {
        return;
    }
    let plugin = match vet(settings, resource, &bytes, from).await {
        Ok(plugin) => plugin,
        Err(refusal) => {
            refuse(resource, settings, status, &digest, &refusal).await;
            return;
        }
    };
    tracing::info!(controller = %declaration.name, plugin = %plugin.describe(), from, "serving");
    match running {
        Some(serving) => serving.swap(plugin.clone()),
        None => {
            *running = Some(controller::start(
                declaration.clone(),
                plugin.clone(),
                settings.shared.clone(),
            ))
        }
    }
    status.serving(declaration, &plugin).await;
}

/// The digest pin, compile and world, and the contract: 0.3.
async fn vet(
    settings: &Settings,
    resource: &PluginController,
    bytes: &[u8],
    from: &str,
) -> Result<Arc<LoadedPlugin>, Refusal> {
    let mut plugin = load_pinned(
        &settings.runtime,
        bytes,
        from,
        resource.spec.digest.as_deref(),
    )
    .await?;
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

/// Checks and resolves the resource's kinds and policy.
async fn declare(resource: &PluginController, settings: &Settings) -> Result<Declaration, Refusal> {
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
    Ok(Declaration {
        name,
        parent,
        children,
        observed,
        policy: pod_policy(resource, &settings.policy),
        workers: settings.workers,
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

/// Says a refusal: the log, the status, a Warning Event on the resource.
async fn refuse(
    resource: &PluginController,
    settings: &Settings,
    status: &StatusOf,
    digest: &str,
    refusal: &Refusal,
) {
    tracing::warn!(controller = %resource.name_any(), digest, "refused: {refusal}");
    status.refused(digest, refusal).await;
    settings.shared.events.send(QueuedEvent {
        event: Event {
            type_: EventType::Warning,
            reason: "PluginRefused".into(),
            note: Some(format!("{refusal}")),
            action: "Vet".into(),
            secondary: None,
        },
        regarding: resource.object_ref(&()),
        object: resource.name_any(),
    });
}

/// Writes a resource's status (merge patches on its status subresource).
struct StatusOf {
    api: Api<PluginController>,
    name: String,
    generation: Option<i64>,
}

impl StatusOf {
    fn new(resource: &PluginController, client: &Client) -> Self {
        Self {
            api: Api::all(client.clone()),
            name: resource.name_any(),
            generation: resource.metadata.generation,
        }
    }

    async fn resolving(&self, declaration: &Declaration, why: &str) {
        self.write(json!({
            "state": "Resolving",
            "resources": resources(declaration),
            "conditions": [condition("Serving", false, "Resolving", why, self.generation)],
        }))
        .await;
    }

    async fn serving(&self, declaration: &Declaration, plugin: &LoadedPlugin) {
        self.write(json!({
            "state": "Serving",
            "plugin": plugin.describe(),
            "digest": plugin.digest(),
            "resources": resources(declaration),
            "conditions": [condition("Serving", true, "Serving", &format!("{} serves", plugin.describe()), self.generation)],
        }))
        .await;
    }

    async fn refused(&self, digest: &str, refusal: &Refusal) {
        let last = PluginRefusal {
            digest: digest.to_string(),
            rule: refusal.rule.to_string(),
            message: refusal.message.clone(),
            time: now_rfc3339(),
            replica: std::env::var("POD_NAME").unwrap_or_default(),
        };
        self.write(json!({
            "state": "Refused",
            "lastRefusal": last,
        }))
        .await;
    }

    async fn write(&self, mut status: serde_json::Value) {
        status["observedGeneration"] = json!(self.generation);
        let patch = json!({ "status": status });
        if let Err(err) = self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(controller = %self.name, "writing the PluginController's status: {err}");
        }
    }
}

/// The parent's resource, the children's, then each observed kind's and
/// its chain's.
fn resources(declaration: &Declaration) -> Vec<String> {
    std::iter::once(&declaration.parent)
        .chain(declaration.children.iter().map(|(kind, ..)| kind))
        .chain(
            declaration
                .observed
                .iter()
                .flat_map(|o| std::iter::once(&o.kind).chain(&o.through)),
        )
        .map(kinds::ResolvedKind::resource_name)
        .collect()
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> serde_json::Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": crate::plugin_text::escape_within(message, 1024),
        "lastTransitionTime": now_rfc3339(),
        "observedGeneration": generation,
    })
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
