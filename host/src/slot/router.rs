//! Which plugin serves which Jinghzhu: the default slot (the plugin of
//! `--plugin` or `--plugin-resource`) and the tenant plugins, each a
//! `JinghzhuPlugin` with `spec.selector`, served for the objects it
//! selects (`--tenant-plugins`). Each tenant has a slot of its own
//! ([`ActivePlugin`]): its own vetting, limits, pod policy, swaps and
//! rollbacks, so one tenant's failures never touch another's objects.
//!
//! A namespace opts in to one tenant: a cluster admin labels it
//! [`TENANT_LABEL`]`=<resource name>` (rule `tenant/namespace-not-allowed`).
//! A tenant serves an object only if it selects the object and the
//! object's namespace names that tenant; every other object stays with the
//! default slot, whatever the resources select. The namespaces' labels are
//! handed in with [`PluginRouter::set_opt_ins`] (followed by
//! [`crate::delivery::resource::tenants`]).
//!
//! One rule settles overlaps, computed from the resources and the
//! namespaces' labels alone, so every replica (and every shard holder)
//! routes an object the same way: a resource that names namespaces beats
//! one that selects by labels across the cluster; among equals the oldest
//! (`creationTimestamp`) wins, then the name. Objects no resource serves
//! get the default slot.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use tokio::sync::watch;

use crate::crd::Jinghzhu;
use crate::crd::plugin::ObjectSelectorSpec;
use crate::locks::{MutexExt, RwLockExt};
use crate::slot::ActivePlugin;
use crate::tasks::AbortOnDrop;

/// The namespace label naming the one tenant resource that may serve the
/// namespace's objects. Namespace labels are cluster-admin territory (a
/// Namespace is a cluster-scoped object): a namespace's users cannot set it.
pub const TENANT_LABEL: &str = "jinghzhu.io/tenant-plugin";

/// Which namespace opts in to which tenant: namespace → resource name.
pub type OptIns = HashMap<String, String>;

/// The objects a tenant resource selects.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Only objects of these namespaces (any namespace when empty).
    namespaces: Vec<String>,
    /// Only objects with these labels (any when `None`).
    labels: Option<Selector>,
}

impl Selection {
    /// The selection `spec` describes; an error names what is wrong with it.
    pub fn from_spec(spec: &ObjectSelectorSpec) -> Result<Self, String> {
        let labels = spec
            .labels
            .clone()
            .map(Selector::try_from)
            .transpose()
            .map_err(|err| format!("spec.selector.labels: {err}"))?;
        if spec.namespaces.is_empty() && labels.is_none() {
            return Err(
                "spec.selector selects every object: name namespaces, labels or both".into(),
            );
        }
        Ok(Self {
            namespaces: spec.namespaces.clone(),
            labels,
        })
    }

    /// Whether `jz` is selected.
    pub fn matches(&self, jz: &Jinghzhu) -> bool {
        // Borrowed, not `ResourceExt::namespace` (a copy per tenant tried).
        let namespace = jz.metadata.namespace.as_deref().unwrap_or_default();
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == namespace) {
            return false;
        }
        self.labels
            .as_ref()
            .is_none_or(|selector| selector.matches(jz.labels()))
    }

    /// A selection by namespace takes precedence over a cluster-wide one.
    fn namespaced(&self) -> bool {
        !self.namespaces.is_empty()
    }

    /// Whether it names namespaces (else it selects by labels alone).
    pub fn names_namespaces(&self) -> bool {
        self.namespaced()
    }

    /// Which namespaces the tenant `name` with this selection serves, and
    /// which namespaces it names that do not opt in to it.
    pub fn namespace_view(&self, name: &str, opt_ins: &OptIns) -> NamespaceView {
        let opted_in = |namespace: &str| opt_ins.get(namespace).is_some_and(|n| n == name);
        if self.namespaced() {
            let (allowed, refused): (BTreeSet<&String>, BTreeSet<&String>) =
                self.namespaces.iter().partition(|ns| opted_in(ns));
            return NamespaceView {
                allowed: allowed.into_iter().cloned().collect(),
                refused: refused.into_iter().cloned().collect(),
            };
        }
        let allowed: BTreeSet<&String> = opt_ins
            .iter()
            .filter(|(_, tenant)| *tenant == name)
            .map(|(namespace, _)| namespace)
            .collect();
        NamespaceView {
            allowed: allowed.into_iter().cloned().collect(),
            refused: Vec::new(),
        }
    }
}

/// The namespaces a tenant serves and those it is refused (see
/// [`Selection::namespace_view`]), each sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceView {
    /// Named by the selection (or, for a selection by labels alone, any
    /// namespace) and labelled with the tenant's name.
    pub allowed: Vec<String>,
    /// Named by the selection but not labelled with the tenant's name:
    /// their objects stay with the default plugin.
    pub refused: Vec<String>,
}

/// How often the controller counts the objects each resource selects and
/// serves ([`PluginRouter::count`]), and tenants' drivers report them.
pub const OBJECT_COUNT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// How many objects a resource selects and serves (see
/// [`PluginRouter::count`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// Matched by its selector.
    pub selected: u64,
    /// Routed to it: its namespace opts in to it (and no resource of
    /// higher precedence takes it).
    pub served: u64,
}

/// A tenant resource and its slot.
pub struct Tenant {
    /// The resource's name.
    pub name: String,
    created: Option<Time>,
    selection: Selection,
    /// Its plugin slot.
    pub slot: Arc<ActivePlugin>,
    /// Its objects at the last count.
    counts: ObjectCounts,
    /// Forwards the slot's swaps to the router's (stopped with the tenant).
    _forwarding: AbortOnDrop,
}

/// Where an object is reconciled.
#[derive(Clone)]
pub struct Route {
    /// The tenant resource serving it (`None`: the default slot).
    pub tenant: Option<String>,
    /// The slot its plugin comes from.
    pub slot: Arc<ActivePlugin>,
}

/// The default slot and the tenants' (see the module documentation).
pub struct PluginRouter {
    default: Arc<ActivePlugin>,
    /// In order of precedence.
    tenants: RwLock<Vec<Tenant>>,
    /// The namespaces that opt in, and to which tenant.
    opt_ins: RwLock<OptIns>,
    /// Counts the changes that re-route or re-serve objects: a swap in any
    /// slot, a tenant added, removed or re-selected.
    generation: watch::Sender<u64>,
    /// The default slot's objects at the last count (`selected`: all).
    default_counts: std::sync::Mutex<ObjectCounts>,
    _default_forwarding: AbortOnDrop,
}

/// Bumps `generation` at each swap of `slot`.
fn forward_swaps(slot: &ActivePlugin, generation: watch::Sender<u64>) -> AbortOnDrop {
    let mut swaps = slot.swaps().boxed();
    AbortOnDrop::from(tokio::spawn(async move {
        while swaps.next().await.is_some() {
            generation.send_modify(|g| *g += 1);
        }
    }))
}

impl PluginRouter {
    /// A router serving every object from `default` until tenants come.
    /// Call within a Tokio runtime (it forwards the slots' swaps).
    pub fn new(default: Arc<ActivePlugin>) -> Self {
        let generation = watch::Sender::new(0);
        let forwarding = forward_swaps(&default, generation.clone());
        Self {
            default,
            tenants: RwLock::new(Vec::new()),
            opt_ins: RwLock::new(OptIns::new()),
            generation,
            default_counts: std::sync::Mutex::new(ObjectCounts::default()),
            _default_forwarding: forwarding,
        }
    }

    /// The default slot.
    pub fn default_slot(&self) -> &Arc<ActivePlugin> {
        &self.default
    }

    /// Where `jz` is reconciled: the first tenant that selects it and
    /// that its namespace opts in to, else the default slot.
    pub fn route(&self, jz: &Jinghzhu) -> Route {
        let tenants = self.tenants.read_unpoisoned();
        let opt_ins = self.opt_ins.read_unpoisoned();
        // One lookup: a namespace that opts in to no tenant is done here.
        let allowed = opted_in_to(jz, &opt_ins);
        match allowed.and_then(|name| {
            tenants
                .iter()
                .find(|t| t.name == name && t.selection.matches(jz))
        }) {
            Some(tenant) => Route {
                tenant: Some(tenant.name.clone()),
                slot: tenant.slot.clone(),
            },
            None => Route {
                tenant: None,
                slot: self.default.clone(),
            },
        }
    }

    /// Adds the tenant `name` (or changes its selection), serving from `slot`.
    pub fn upsert(
        &self,
        name: &str,
        created: Option<Time>,
        selection: Selection,
        slot: &Arc<ActivePlugin>,
    ) {
        {
            let mut tenants = self.tenants.write_unpoisoned();
            if let Some(tenant) = tenants.iter_mut().find(|t| t.name == name) {
                if tenant.selection == selection && Arc::ptr_eq(&tenant.slot, slot) {
                    return;
                }
                tenant.selection = selection;
                tenant.created = created;
            } else {
                tenants.push(Tenant {
                    name: name.to_string(),
                    created,
                    selection,
                    slot: slot.clone(),
                    counts: ObjectCounts::default(),
                    _forwarding: forward_swaps(slot, self.generation.clone()),
                });
            }
            tenants.sort_by_key(precedence);
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// Removes the tenant `name`: its objects go back to the default slot.
    pub fn remove(&self, name: &str) {
        let removed = {
            let mut tenants = self.tenants.write_unpoisoned();
            let before = tenants.len();
            tenants.retain(|t| t.name != name);
            before != tenants.len()
        };
        if removed {
            self.generation.send_modify(|g| *g += 1);
        }
    }

    /// Sets which namespaces opt in to which tenant (the namespaces'
    /// [`TENANT_LABEL`]); a change re-routes, so the controller re-queues
    /// every object. Returns whether anything changed.
    pub fn set_opt_ins(&self, opt_ins: OptIns) -> bool {
        {
            let mut current = self.opt_ins.write_unpoisoned();
            if *current == opt_ins {
                return false;
            }
            *current = opt_ins;
        }
        self.generation.send_modify(|g| *g += 1);
        true
    }

    /// The tenants' names, in order of precedence.
    pub fn tenant_names(&self) -> Vec<String> {
        let tenants = self.tenants.read_unpoisoned();
        tenants.iter().map(|t| t.name.clone()).collect()
    }

    /// A stream that yields once per change re-serving objects (a swap in
    /// any slot, a tenant added, removed or re-selected): the controller
    /// re-queues every object on it.
    pub fn swaps(&self) -> impl Stream<Item = ()> + Send + 'static {
        crate::slot::changes(&self.generation)
    }

    /// Counts, for each tenant, the `objects` its selector matches and
    /// those routed to it, and the objects left to the default slot; read
    /// back with [`PluginRouter::counts`].
    pub fn count<'a>(&self, objects: impl IntoIterator<Item = &'a Jinghzhu>) {
        // Counted under the read lock, which every reconcile's route takes
        // too; the write lock only stores the results.
        let tenants = self.tenants.read_unpoisoned();
        let opt_ins = self.opt_ins.read_unpoisoned();
        let mut counts = vec![ObjectCounts::default(); tenants.len()];
        let mut default = ObjectCounts::default();
        for jz in objects {
            default.selected += 1;
            let allowed = opted_in_to(jz, &opt_ins);
            let mut served = false;
            for (tenant, counts) in tenants.iter().zip(counts.iter_mut()) {
                if tenant.selection.matches(jz) {
                    counts.selected += 1;
                    if !served && allowed == Some(tenant.name.as_str()) {
                        counts.served += 1;
                        served = true;
                    }
                }
            }
            if !served {
                default.served += 1;
            }
        }
        let counted: Vec<(String, ObjectCounts)> =
            tenants.iter().map(|t| t.name.clone()).zip(counts).collect();
        drop(opt_ins);
        drop(tenants);
        let mut tenants = self.tenants.write_unpoisoned();
        for (name, counts) in counted {
            // A tenant added meanwhile keeps its zero counts until the next count.
            if let Some(tenant) = tenants.iter_mut().find(|t| t.name == name) {
                tenant.counts = counts;
            }
        }
        drop(tenants);
        *self.default_counts.lock_unpoisoned() = default;
    }

    /// The objects the tenant `name` selects and serves at the last count;
    /// `None` (the default slot's): every object, and those no tenant serves.
    pub fn counts(&self, tenant: Option<&str>) -> Option<ObjectCounts> {
        match tenant {
            None => Some(*self.default_counts.lock_unpoisoned()),
            Some(name) => self
                .tenants
                .read_unpoisoned()
                .iter()
                .find(|t| t.name == name)
                .map(|t| t.counts),
        }
    }

    /// Forgets the object `uid` in every slot's bookkeeping.
    pub fn forget_object(&self, uid: &str) {
        self.default.forget_object(uid);
        let tenants = self.tenants.read_unpoisoned();
        for tenant in tenants.iter() {
            tenant.slot.forget_object(uid);
        }
    }
}

/// The tenant `jz`'s namespace opts in to, if any: the only one that may
/// serve it.
fn opted_in_to<'a>(jz: &Jinghzhu, opt_ins: &'a OptIns) -> Option<&'a str> {
    let namespace = jz.metadata.namespace.as_deref().unwrap_or_default();
    opt_ins.get(namespace).map(String::as_str)
}

/// The order of precedence: namespaced first, then the oldest, then by name.
fn precedence(tenant: &Tenant) -> (bool, Option<k8s_openapi::jiff::Timestamp>, String) {
    (
        !tenant.selection.namespaced(),
        tenant.created.as_ref().map(|t| t.0),
        tenant.name.clone(),
    )
}

impl std::fmt::Debug for PluginRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRouter")
            .field("tenants", &self.tenant_names())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot::RollbackPolicy;
    use crate::telemetry::metrics::Metrics;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn slot() -> Arc<ActivePlugin> {
        Arc::new(ActivePlugin::empty(
            RollbackPolicy::default(),
            Arc::new(Metrics::default()),
        ))
    }

    fn object(namespace: &str, labels: &[(&str, &str)]) -> Jinghzhu {
        let mut jz = Jinghzhu::new("web", Default::default());
        jz.metadata.namespace = Some(namespace.into());
        jz.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        jz
    }

    fn selection(namespaces: &[&str], labels: &[(&str, &str)]) -> Selection {
        let labels = (!labels.is_empty()).then(|| LabelSelector {
            match_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..LabelSelector::default()
        });
        Selection::from_spec(&ObjectSelectorSpec {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            labels,
        })
        .expect("a selection")
    }

    fn at(seconds: i64) -> Option<Time> {
        Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(seconds).expect("a time"),
        ))
    }

    #[test]
    fn a_selector_must_select_something_narrower_than_everything() {
        let everything = Selection::from_spec(&ObjectSelectorSpec::default());
        assert!(everything.is_err(), "{everything:?}");
    }

    fn opt_ins(pairs: &[(&str, &str)]) -> OptIns {
        pairs
            .iter()
            .map(|(ns, tenant)| (ns.to_string(), tenant.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn a_tenant_serves_only_the_namespaces_that_opt_in_to_it() {
        let default = slot();
        let router = PluginRouter::new(default.clone());
        let (team_a, team_b, by_label, younger) = (slot(), slot(), slot(), slot());
        // Added out of order: precedence does not depend on it.
        router.upsert(
            "by-label",
            at(10),
            selection(&[], &[("team", "a")]),
            &by_label,
        );
        router.upsert("younger-a", at(30), selection(&["ns-a"], &[]), &younger);
        router.upsert("team-a", at(20), selection(&["ns-a"], &[]), &team_a);
        router.upsert("team-b", at(40), selection(&["ns-b"], &[]), &team_b);
        assert_eq!(
            router.tenant_names(),
            ["team-a", "younger-a", "team-b", "by-label"]
        );
        let route = |jz: &Jinghzhu| router.route(jz).tenant;
        // No namespace opts in yet: every object stays with the default.
        assert_eq!(route(&object("ns-a", &[("team", "a")])), None);
        assert_eq!(route(&object("ns-b", &[])), None);
        router.set_opt_ins(opt_ins(&[
            ("ns-a", "team-a"),
            ("ns-b", "team-b"),
            ("ns-c", "by-label"),
        ]));
        assert_eq!(
            route(&object("ns-a", &[("team", "a")])).as_deref(),
            Some("team-a")
        );
        assert_eq!(route(&object("ns-b", &[])).as_deref(), Some("team-b"));
        assert_eq!(
            route(&object("ns-c", &[("team", "a")])).as_deref(),
            Some("by-label")
        );
        // Selected by labels, but its namespace does not opt in.
        assert_eq!(route(&object("ns-d", &[("team", "a")])), None);
        assert_eq!(route(&object("ns-c", &[("team", "b")])), None);
        assert!(Arc::ptr_eq(
            &router.route(&object("ns-c", &[])).slot,
            &default
        ));
        let objects = [
            object("ns-a", &[("team", "a")]),
            object("ns-a", &[]),
            object("ns-c", &[("team", "a")]),
            object("ns-c", &[]),
            object("ns-d", &[("team", "a")]),
        ];
        router.count(objects.iter());
        let counts = |name| router.counts(name).expect("counted");
        assert_eq!(
            counts(Some("team-a")),
            ObjectCounts {
                selected: 2,
                served: 2
            }
        );
        // Selects ns-a, which opts in to team-a only.
        assert_eq!(
            counts(Some("younger-a")),
            ObjectCounts {
                selected: 2,
                served: 0
            }
        );
        assert_eq!(
            counts(Some("by-label")),
            ObjectCounts {
                selected: 3,
                served: 1
            }
        );
        assert_eq!(
            counts(None),
            ObjectCounts {
                selected: 5,
                served: 2
            }
        );
        // Removed: its namespace's objects go back to the default, not to
        // another tenant that selects them, until the namespace says so.
        router.remove("team-a");
        assert_eq!(route(&object("ns-a", &[])), None);
        router.set_opt_ins(opt_ins(&[("ns-a", "younger-a")]));
        assert_eq!(route(&object("ns-a", &[])).as_deref(), Some("younger-a"));
        assert_eq!(route(&object("ns-b", &[])), None);
    }

    #[test]
    fn the_namespace_view_names_what_is_served_and_what_is_refused() {
        let labels = opt_ins(&[("a", "t"), ("b", "other"), ("c", "t")]);
        let view = selection(&["victim", "c", "b", "a"], &[]).namespace_view("t", &labels);
        assert_eq!(
            view,
            NamespaceView {
                allowed: vec!["a".into(), "c".into()],
                refused: vec!["b".into(), "victim".into()],
            }
        );
        // By labels alone: every namespace that opts in, none refused.
        let by_labels = selection(&[], &[("team", "t")]);
        assert_eq!(
            by_labels.namespace_view("t", &labels),
            NamespaceView {
                allowed: vec!["a".into(), "c".into()],
                refused: Vec::new(),
            }
        );
        assert_eq!(
            by_labels.namespace_view("nobody", &labels),
            NamespaceView::default()
        );
    }

    #[tokio::test]
    async fn changes_that_reroute_objects_are_swaps_for_the_controller() {
        let router = PluginRouter::new(slot());
        let mut swaps = Box::pin(router.swaps());
        let tenant = slot();
        router.upsert("t", at(1), selection(&["ns"], &[]), &tenant);
        tokio::time::timeout(std::time::Duration::from_secs(1), swaps.next())
            .await
            .expect("a tenant added re-queues");
        // The same selection again changes nothing.
        router.upsert("t", at(1), selection(&["ns"], &[]), &tenant);
        // A namespace opting in (or out) re-routes its objects.
        assert!(router.set_opt_ins(opt_ins(&[("ns", "t")])));
        tokio::time::timeout(std::time::Duration::from_secs(1), swaps.next())
            .await
            .expect("an opt-in re-queues");
        assert!(!router.set_opt_ins(opt_ins(&[("ns", "t")])));
        router.remove("t");
        tokio::time::timeout(std::time::Duration::from_secs(1), swaps.next())
            .await
            .expect("a tenant removed re-queues");
    }
}
