//! Tenant plugins (`--tenant-plugins`): every `JinghzhuPlugin` with
//! `spec.selector` serves the Jinghzhus it selects, beside the default
//! plugin. Each is followed by a [`Driver`] of its own (source, pin,
//! signatures, limits, pod policy, status and Events, as for
//! `--plugin-resource`) swapping into a slot of its own, which the
//! [`PluginRouter`] hands the objects it selects; a resource deleted, or
//! its selector removed, gives its objects back to the default plugin.
//!
//! The resources named by `--plugin-resource` and `--shadow-plugin-resource`
//! are never tenants, and neither is a resource in `mode: shadow`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};

use super::status::StatusWriter;
use super::{Driver, ResourceOptions};
use crate::crd::plugin::{JinghzhuPlugin, PluginMode};
use crate::hotswap::ActivePlugin;
use crate::hotswap::router::{PluginRouter, Selection};
use crate::hotswap::swapper::SwapHistory;
use crate::runtime::Runtime;
use crate::tasks::AbortOnDrop;
use crate::telemetry::metrics::Metrics;

/// How every tenant's slot is set up (the host's swap flags).
#[derive(Debug, Clone, Copy)]
pub struct SlotSettings {
    /// `--plugin-allow-downgrade`.
    pub allow_downgrade: bool,
    /// `--min-swap-interval-secs`.
    pub min_swap_interval: Duration,
}

/// A tenant being served: its slot and its driver's task.
struct Serving {
    slot: Arc<ActivePlugin>,
    _driver: AbortOnDrop,
}

/// Follows every `JinghzhuPlugin` and serves the tenants among them.
pub struct Tenants {
    client: Client,
    runtime: Arc<Runtime>,
    options: ResourceOptions,
    settings: SlotSettings,
    metrics: Arc<Metrics>,
    router: Arc<PluginRouter>,
    serving: HashMap<String, Serving>,
    /// The generation of each resource whose unusable selector was reported.
    reported: HashMap<String, Option<i64>>,
}

/// Starts following the tenant resources (until the host stops).
pub fn start(
    client: &Client,
    runtime: Arc<Runtime>,
    options: ResourceOptions,
    settings: SlotSettings,
    metrics: Arc<Metrics>,
    router: Arc<PluginRouter>,
) {
    let tenants = Tenants {
        client: client.clone(),
        runtime,
        options,
        settings,
        metrics,
        router,
        serving: HashMap::new(),
        reported: HashMap::new(),
    };
    tokio::spawn(tenants.run());
}

impl Tenants {
    async fn run(mut self) {
        let api: Api<JinghzhuPlugin> = Api::all(self.client.clone());
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        // Names seen since the last (re)list began: the rest were deleted.
        let mut listed: HashSet<String> = HashSet::new();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => listed.clear(),
                Ok(Event::InitApply(resource)) => {
                    listed.insert(resource.name_any());
                    self.on_resource(&resource);
                }
                Ok(Event::InitDone) => {
                    let gone: Vec<String> = self
                        .serving
                        .keys()
                        .filter(|name| !listed.contains(*name))
                        .cloned()
                        .collect();
                    for name in gone {
                        self.stop(&name, "deleted");
                    }
                }
                Ok(Event::Apply(resource)) => self.on_resource(&resource),
                Ok(Event::Delete(resource)) => self.stop(&resource.name_any(), "deleted"),
                Err(err) => {
                    tracing::warn!(error = %err, "JinghzhuPlugin watch (tenant plugins) error; retrying");
                }
            }
        }
    }

    /// Serves `resource` for its objects if it is a tenant, else stops it.
    fn on_resource(&mut self, resource: &JinghzhuPlugin) {
        let name = resource.name_any();
        if name == self.options.name || self.options.shadow.as_deref() == Some(&name) {
            return;
        }
        let Some(selector) = &resource.spec.selector else {
            self.stop(&name, "its spec.selector was removed");
            return;
        };
        if resource.spec.mode == PluginMode::Shadow {
            self.stop(&name, "it is a shadow");
            return;
        }
        let selection = match Selection::from_spec(selector) {
            Ok(selection) => selection,
            Err(why) => {
                tracing::warn!(resource = %name, reason = %why, "a tenant plugin's selector is not usable; its objects stay with the default plugin");
                self.stop(&name, "its selector is not usable");
                self.report_unusable(resource, why);
                return;
            }
        };
        self.reported.remove(&name);
        let slot = match self.serving.get(&name) {
            Some(serving) => serving.slot.clone(),
            None => self.serve(&name),
        };
        self.router
            .upsert(&name, resource.creation_timestamp(), selection, &slot);
    }

    /// Says once per generation, on the resource, that its selector is not
    /// usable (rule `tenant/selector`): the `Refused` condition and a
    /// `PluginRefused` Warning.
    fn report_unusable(&mut self, resource: &JinghzhuPlugin, why: String) {
        let name = resource.name_any();
        let generation = resource.metadata.generation;
        if self.reported.insert(name.clone(), generation) == Some(generation) {
            return;
        }
        let mut writer = StatusWriter::new(self.client.clone(), &name, &self.options.replica);
        writer.set_judge(self.options.judge.clone());
        writer.observe(generation);
        let text = format!(
            "[tenant/selector] spec.selector is not usable, so this plugin serves no object (they stay with the default plugin): {why}"
        );
        writer.set("Refused", true, "TenantSelector", &text);
        writer.set_state("Refused");
        let resource = resource.clone();
        tokio::spawn(async move {
            writer.write().await;
            writer.warn(&resource, &text).await;
        });
    }

    /// Starts a slot and a driver for the tenant `name`.
    fn serve(&mut self, name: &str) -> Arc<ActivePlugin> {
        let slot = Arc::new(ActivePlugin::empty(
            self.options.rollback.clone(),
            self.metrics.clone(),
        ));
        slot.allow_downgrades(self.settings.allow_downgrade);
        slot.set_min_swap_interval(self.settings.min_swap_interval);
        let mut driver = Driver::new(
            &self.client,
            &self.runtime,
            &self.options,
            (slot.clone(), Arc::new(Mutex::new(SwapHistory::default()))),
            &self.metrics,
            (name.to_string(), PluginMode::Active),
        );
        driver.counting = Some(self.router.clone());
        let task = AbortOnDrop::from(tokio::spawn(driver.run()));
        tracing::info!(resource = %name, "tenant plugin resource: serving it for the objects it selects");
        self.serving.insert(
            name.to_string(),
            Serving {
                slot: slot.clone(),
                _driver: task,
            },
        );
        slot
    }

    /// Stops serving the tenant `name` (if it was): its objects go back to
    /// the default plugin.
    fn stop(&mut self, name: &str, why: &str) {
        if self.serving.remove(name).is_some() {
            self.router.remove(name);
            tracing::info!(resource = %name, reason = why, "tenant plugin resource no longer served; its objects go back to the default plugin");
        }
    }
}
