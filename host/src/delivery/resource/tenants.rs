//! Tenant plugins (`--tenant-plugins`): every `JinghzhuPlugin` with
//! `spec.selector` serves the Jinghzhus it selects in the namespaces that
//! opt in to it, beside the default plugin. Each is followed by a
//! [`Driver`] of its own (source, pin, signatures, limits, pod policy,
//! status and Events, as for `--plugin-resource`) swapping into a slot of
//! its own, which the [`PluginRouter`] hands the objects it serves; a
//! resource deleted, or its selector removed, gives its objects back to the
//! default plugin.
//!
//! A namespace opts in when a cluster admin labels it
//! [`TENANT_LABEL`]`=<resource name>`: this module follows those labels
//! (a metadata-only watch of the labelled Namespaces) and hands them to the
//! router, so a label set or removed re-routes the namespace's objects at
//! once. A resource that names namespaces that do not opt in, or that
//! selects by labels while no namespace opts in, is told so by rule
//! `tenant/namespace-not-allowed`: its `Namespaces` condition (written by
//! the replica that judges rollouts, under a field manager of its own so
//! the drivers' writes leave it alone) and a `PluginRefused` Warning per
//! change. A tenant's verification keys may name only the Secrets the
//! admin allows ([`super::keys::AllowedKeySecrets`]).
//!
//! The resources named by `--plugin-resource` and `--shadow-plugin-resource`
//! are never tenants, and neither is a resource in `mode: shadow`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};

use super::keys::AllowedKeySecrets;
use super::status::{self, StatusWriter};
use super::{Driver, ResourceOptions};
use crate::crd::plugin::{JinghzhuPlugin, PluginCondition, PluginMode};
use crate::delivery::swapper::SwapHistory;
use crate::runtime::Runtime;
use crate::slot::ActivePlugin;
use crate::slot::router::{
    NamespaceView, OBJECT_COUNT_INTERVAL, OptIns, PluginRouter, Selection, TENANT_LABEL,
};
use crate::tasks::AbortOnDrop;
use crate::telemetry::metrics::Metrics;

/// How every tenant's slot is set up (the host's swap flags).
#[derive(Debug, Clone)]
pub struct SlotSettings {
    /// `--plugin-allow-downgrade`.
    pub allow_downgrade: bool,
    /// `--min-swap-interval-secs`.
    pub min_swap_interval: Duration,
    /// `--tenant-key-secret`: the Secrets tenants' keys may name.
    pub key_secrets: AllowedKeySecrets,
}

/// The rule that keeps a tenant out of namespaces that do not opt in.
pub const NAMESPACE_RULE: &str = "tenant/namespace-not-allowed";

/// The condition type saying which namespaces a tenant serves.
pub const NAMESPACES_CONDITION: &str = "Namespaces";

/// The field manager of the `Namespaces` condition: one for the fleet (the
/// view is computed from the resources and the namespaces' labels alone),
/// apart from the replicas' own, whose writes leave it alone.
const NAMESPACES_MANAGER: &str = "wasm-operator:tenant-namespaces";

/// Most namespaces a message lists.
const LISTED_NAMESPACES: usize = 16;

/// Checks the host may list Namespaces (`--tenant-plugins` follows those
/// that opt in); errors say what to do.
pub async fn check_access(client: &Client) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api
        .list_metadata(&ListParams::default().labels(TENANT_LABEL).limit(1))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 403 => bail!(
            "--tenant-plugins: this host's account may not list Namespaces ({}), which it needs to \
             follow the namespaces that opt in to a tenant plugin (label {TENANT_LABEL}): bind it \
             to the ClusterRole in examples/deploy/rbac.yaml",
            status.message
        ),
        Err(err) => bail!("listing Namespaces for --tenant-plugins: {err}"),
    }
}

/// A tenant being served: its slot and its driver's task, and the
/// resource and selection last seen.
struct Serving {
    slot: Arc<ActivePlugin>,
    _driver: AbortOnDrop,
    resource: Arc<JinghzhuPlugin>,
    selection: Selection,
}

/// The `Namespaces` condition last written for a tenant.
#[derive(Debug, Clone, PartialEq)]
struct NamespaceReport {
    view: NamespaceView,
    generation: Option<i64>,
    /// The condition's status (`True`: nothing refused).
    allowed: bool,
    transition: String,
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
    /// Which namespace opts in to which tenant, once listed.
    opt_ins: Option<OptIns>,
    /// The `Namespaces` condition of each tenant, as last written here.
    namespace_reports: HashMap<String, NamespaceReport>,
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
        opt_ins: None,
        namespace_reports: HashMap::new(),
    };
    tokio::spawn(tenants.run());
}

impl Tenants {
    async fn run(mut self) {
        let api: Api<JinghzhuPlugin> = Api::all(self.client.clone());
        let mut resources = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        // Metadata only: the labels are all it reads.
        let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(self.client.clone());
        let mut labels = watcher(namespaces, watcher::Config::default().labels(TENANT_LABEL))
            .default_backoff()
            .boxed();
        // Names seen since the last (re)list began: the rest were deleted.
        let mut listed: HashSet<String> = HashSet::new();
        // The namespaces of a (re)list going on.
        let mut listing = OptIns::new();
        // Every 5 s too: a replica that became the judge writes the
        // conditions then, without waiting for a change.
        let mut ticks = tokio::time::interval(OBJECT_COUNT_INTERVAL);
        loop {
            tokio::select! {
                event = resources.next() => match event {
                    Some(event) => self.on_resource_event(event, &mut listed),
                    None => break,
                },
                event = labels.next() => match event {
                    Some(event) => self.on_namespace_event(event, &mut listing),
                    None => break,
                },
                _ = ticks.tick() => {}
            }
            self.report_namespaces().await;
        }
    }

    /// A JinghzhuPlugin event.
    fn on_resource_event(
        &mut self,
        event: watcher::Result<Event<JinghzhuPlugin>>,
        listed: &mut HashSet<String>,
    ) {
        match event {
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(resource)) => {
                listed.insert(resource.name_any());
                self.on_resource(resource);
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
            Ok(Event::Apply(resource)) => self.on_resource(resource),
            Ok(Event::Delete(resource)) => self.stop(&resource.name_any(), "deleted"),
            Err(err) => {
                tracing::warn!(error = %err, "JinghzhuPlugin watch (tenant plugins) error; retrying");
            }
        }
    }

    /// An event of the Namespaces labelled [`TENANT_LABEL`]: the router
    /// learns the namespaces that opt in once they are listed, and every
    /// change after.
    fn on_namespace_event(
        &mut self,
        event: watcher::Result<Event<PartialObjectMeta<Namespace>>>,
        listing: &mut OptIns,
    ) {
        let label = |ns: &PartialObjectMeta<Namespace>| ns.labels().get(TENANT_LABEL).cloned();
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(ns)) => {
                if let Some(tenant) = label(&ns) {
                    listing.insert(ns.name_any(), tenant);
                }
            }
            Ok(Event::InitDone) => self.set_opt_ins(std::mem::take(listing)),
            Ok(Event::Apply(ns)) => {
                let mut opt_ins = self.opt_ins.clone().unwrap_or_default();
                match label(&ns) {
                    Some(tenant) => opt_ins.insert(ns.name_any(), tenant),
                    None => opt_ins.remove(&ns.name_any()),
                };
                self.set_opt_ins(opt_ins);
            }
            Ok(Event::Delete(ns)) => {
                let mut opt_ins = self.opt_ins.clone().unwrap_or_default();
                opt_ins.remove(&ns.name_any());
                self.set_opt_ins(opt_ins);
            }
            Err(err) => {
                tracing::warn!(error = %err, "Namespace watch (tenant plugins) error; retrying");
            }
        }
    }

    /// The namespaces that opt in now: the router re-routes their objects.
    fn set_opt_ins(&mut self, opt_ins: OptIns) {
        if self.router.set_opt_ins(opt_ins.clone()) {
            tracing::info!(
                namespaces = opt_ins.len(),
                "the namespaces opting in to tenant plugins (label {TENANT_LABEL}) changed; objects re-routed"
            );
        }
        self.opt_ins = Some(opt_ins);
    }

    /// Serves `resource` for its objects if it is a tenant, else stops it.
    fn on_resource(&mut self, resource: JinghzhuPlugin) {
        let resource = Arc::new(resource);
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
                self.report_unusable(&resource, why);
                return;
            }
        };
        self.reported.remove(&name);
        let slot = match self.serving.get_mut(&name) {
            Some(serving) => {
                serving.resource = resource.clone();
                serving.selection = selection.clone();
                serving.slot.clone()
            }
            None => self.serve(&resource, &selection),
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

    /// Starts a slot and a driver for the tenant `resource`.
    fn serve(
        &mut self,
        resource: &Arc<JinghzhuPlugin>,
        selection: &Selection,
    ) -> Arc<ActivePlugin> {
        let name = resource.name_any();
        let name = name.as_str();
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
        driver.limit_key_secrets(self.settings.key_secrets.clone());
        let task = AbortOnDrop::from(tokio::spawn(driver.run()));
        tracing::info!(resource = %name, "tenant plugin resource: serving it for the objects it selects");
        self.serving.insert(
            name.to_string(),
            Serving {
                slot: slot.clone(),
                _driver: task,
                resource: resource.clone(),
                selection: selection.clone(),
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
        // Not a tenant any more: its Namespaces condition goes.
        if self.namespace_reports.remove(name).is_some() && why != "deleted" {
            let (client, name) = (self.client.clone(), name.to_string());
            tokio::spawn(async move { write_namespaces_condition(&client, &name, None).await });
        }
    }
}

impl Tenants {
    /// Writes each tenant's `Namespaces` condition where it changed, and a
    /// Warning where what it is refused changed: on the replica that judges
    /// rollouts only (one writer for the fleet), once the namespaces are
    /// listed.
    async fn report_namespaces(&mut self) {
        if !self.options.judge.here() {
            // Another replica writes; if this one judges again, it starts afresh.
            self.namespace_reports.clear();
            return;
        }
        let Some(opt_ins) = &self.opt_ins else { return };
        let mut changed = Vec::new();
        for (name, serving) in &self.serving {
            let view = serving.selection.namespace_view(name, opt_ins);
            let generation = serving.resource.metadata.generation;
            let last = self.namespace_reports.get(name);
            if last.is_some_and(|r| r.view == view && r.generation == generation) {
                continue;
            }
            let allowed = view_allows(&serving.selection, &view);
            let transition = match last {
                Some(last) if last.allowed == allowed => last.transition.clone(),
                _ => status::now(),
            };
            let warn = !allowed && last.is_none_or(|r| r.allowed || r.view != view);
            let report = NamespaceReport {
                view,
                generation,
                allowed,
                transition,
            };
            changed.push((serving.resource.clone(), report, warn));
        }
        for (resource, report, warn) in changed {
            let name = resource.name_any();
            let message = namespaces_message(&name, &report.view, report.allowed);
            let condition = PluginCondition {
                type_: NAMESPACES_CONDITION.to_string(),
                status: if report.allowed { "True" } else { "False" }.to_string(),
                reason: if report.allowed {
                    "OptedIn"
                } else {
                    "NamespaceNotAllowed"
                }
                .to_string(),
                message: crate::plugin_text::escape_within(&message, 1024),
                last_transition_time: report.transition.clone(),
                observed_generation: report.generation,
            };
            write_namespaces_condition(&self.client, &name, Some(condition)).await;
            if warn {
                tracing::warn!(resource = %name, refused = ?report.view.refused, rule = NAMESPACE_RULE, "a tenant plugin selects namespaces that do not opt in to it; their objects stay with the default plugin");
                let writer = StatusWriter::new(self.client.clone(), &name, &self.options.replica);
                let refused = match report.view.refused.is_empty() {
                    true => "every namespace (none opts in)".to_string(),
                    false => format!("namespaces {}", listed(&report.view.refused)),
                };
                writer
                    .warn(
                        &resource,
                        &format!("{refused} refused by rule {NAMESPACE_RULE}, their objects stay with the default plugin: {message}"),
                    )
                    .await;
            }
            self.namespace_reports.insert(name, report);
        }
    }
}

/// Whether `view` refuses nothing: every namespace the selection names opts
/// in, or (a selection by labels alone) at least one namespace does.
fn view_allows(selection: &Selection, view: &NamespaceView) -> bool {
    match selection.names_namespaces() {
        true => view.refused.is_empty(),
        false => !view.allowed.is_empty(),
    }
}

/// Up to [`LISTED_NAMESPACES`] names, then how many more.
fn listed(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_string();
    }
    let mut text = names
        .iter()
        .take(LISTED_NAMESPACES)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED_NAMESPACES {
        text.push_str(&format!(" and {} more", names.len() - LISTED_NAMESPACES));
    }
    text
}

/// The `Namespaces` condition's message for the tenant `name`.
fn namespaces_message(name: &str, view: &NamespaceView, allowed: bool) -> String {
    let serves = format!(
        "serves the namespaces labelled {TENANT_LABEL}={name}: {}",
        listed(&view.allowed)
    );
    if allowed {
        return serves;
    }
    // A label value is at most 63 characters.
    let too_long = if name.len() > 63 {
        " (this resource's name is longer than a label value may be, 63 characters: rename it)"
    } else {
        ""
    };
    let how = format!(
        "a cluster admin opts a namespace in with `kubectl label namespace NAMESPACE \
         {TENANT_LABEL}={name}`{too_long}"
    );
    if view.refused.is_empty() {
        return format!(
            "[{NAMESPACE_RULE}] no namespace opts in to this plugin, so it serves no object (the \
             objects its labels select stay with the default plugin); {how}"
        );
    }
    format!(
        "[{NAMESPACE_RULE}] spec.selector names namespaces that do not opt in to this plugin: \
         {}; their objects stay with the default plugin; {how}; {serves}",
        listed(&view.refused)
    )
}

/// Applies (or with `None` removes) the `Namespaces` condition of the
/// resource `name` under its own field manager. Errors are logged: the
/// next change writes it again.
async fn write_namespaces_condition(
    client: &Client,
    name: &str,
    condition: Option<PluginCondition>,
) {
    let status = match condition {
        Some(condition) => serde_json::json!({ "conditions": [condition] }),
        None => serde_json::json!({}),
    };
    let body = serde_json::json!({
        "apiVersion": "jinghzhu.io/v1",
        "kind": "JinghzhuPlugin",
        "metadata": { "name": name },
        "status": status,
    });
    let api: Api<JinghzhuPlugin> = Api::all(client.clone());
    let params = PatchParams::apply(NAMESPACES_MANAGER).force();
    if let Err(err) = api.patch_status(name, &params, &Patch::Apply(&body)).await {
        tracing::warn!(resource = %name, error = %err, "could not write the tenant plugin's Namespaces condition");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::plugin::ObjectSelectorSpec;

    fn view(allowed: &[&str], refused: &[&str]) -> NamespaceView {
        NamespaceView {
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            refused: refused.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn by_namespaces() -> Selection {
        Selection::from_spec(&ObjectSelectorSpec {
            namespaces: vec!["a".into()],
            labels: None,
        })
        .expect("a selection")
    }

    #[test]
    fn a_refusal_names_the_rule_the_namespaces_and_the_label_to_set() {
        let refused = view(&["a"], &["victim"]);
        assert!(!view_allows(&by_namespaces(), &refused));
        let message = namespaces_message("team", &refused, false);
        for part in [
            "[tenant/namespace-not-allowed]",
            "victim",
            "jinghzhu.io/tenant-plugin=team",
            "labelled jinghzhu.io/tenant-plugin=team: a",
        ] {
            assert!(message.contains(part), "{part} in {message}");
        }
        assert!(view_allows(&by_namespaces(), &view(&["a"], &[])));
        let long = "x".repeat(64);
        assert!(namespaces_message(&long, &view(&[], &["a"]), false).contains("rename"));
    }

    #[test]
    fn a_selection_by_labels_is_refused_only_while_no_namespace_opts_in() {
        let spec = ObjectSelectorSpec {
            namespaces: Vec::new(),
            labels: Some(Default::default()),
        };
        let by_labels = Selection::from_spec(&spec).expect("a selection");
        assert!(!view_allows(&by_labels, &view(&[], &[])));
        let message = namespaces_message("team", &view(&[], &[]), false);
        assert!(message.contains("no namespace opts in"), "{message}");
        assert!(view_allows(&by_labels, &view(&["b"], &[])));
    }

    #[test]
    fn long_lists_are_cut() {
        let names: Vec<String> = (0..20).map(|i| format!("ns-{i}")).collect();
        let text = listed(&names);
        assert!(text.ends_with("ns-15 and 4 more"), "{text}");
        assert_eq!(listed(&[]), "none");
    }
}
