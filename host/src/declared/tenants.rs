//! Tenant controllers: a `PluginController` with `spec.tenant` serves the
//! parents of some namespaces in place of another controller of the same
//! parent kind (its *base*), with a plugin, status and Events of its own.
//!
//! A namespace is served by a tenant only when a cluster admin labels it
//! [`TENANT_LABEL_PREFIX`]`<base>=<tenant>` and the tenant asks for it in
//! `spec.tenant.namespaces`; every other parent stays with the base. The
//! host follows those labels (a metadata-only watch of Namespaces, started
//! with the first tenant), and [`Route::serves`] answers for every
//! controller from the same state, so a parent is reconciled by exactly one
//! of them, and a label set or removed re-routes its namespace at once
//! (both controllers reconcile every parent again). Namespaces asked for
//! but not labelled are refused by rule [`NAMESPACE_RULE`] (the same rule as
//! the `Jinghzhu` path's tenant plugins): the tenant's `status.tenant` lists
//! them and a Warning `PluginRefused` names them, once per change.
//!
//! A tenant never loosens what the admin's base allows ([`effective`]):
//! child kinds are a subset of the base's, bounds, limits and the write
//! budget at most the base's, the pod policy at least as strict; what it
//! leaves out is the base's. A looser ask refuses the tenant whole
//! ([`rules::LOOSER`]). Both write children under the base's name (label
//! and field manager), so a parent's children carry over either way.
//! Two controllers of one parent kind that are not base and tenant are
//! refused: the oldest serves, the others by [`rules::PARENT_TAKEN`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::voice::{Standing, Voice};
use crate::crd::controller::{
    PluginController, PluginControllerSpec, TENANT_LABEL_PREFIX, WriteBudgetSpec,
};
use crate::delivery::resource::pod_policy_of;
use crate::locks::{MutexExt, RwLockExt};
use crate::refusal::Refusal;
use crate::tasks::AbortOnDrop;

pub use crate::delivery::resource::tenants::NAMESPACE_RULE;

/// The rules of tenants and of controllers sharing a parent kind.
pub mod rules {
    /// The base named is missing, is a tenant itself, or serves another
    /// parent kind.
    pub const BASE: &str = "tenant/base";
    /// The tenant asks for more than its base allows.
    pub const LOOSER: &str = "tenant/looser-than-base";
    /// Another controller (not its base or tenant) serves the parent kind.
    pub const PARENT_TAKEN: &str = "controller/parent-taken";
}

/// Checks `resource` against every `PluginController` there is: a tenant
/// gets its effective declaration (within its base's), any other must be
/// the only (or the oldest) controller of its parent kind.
pub async fn admit_declaration(
    resource: &PluginController,
    client: &Client,
    default_budget: super::WriteRate,
) -> Result<PluginController, Refusal> {
    let all = list_all(client).await?;
    match &resource.spec.tenant {
        Some(tenant) => {
            let base = all
                .items
                .iter()
                .find(|other| other.name_any() == tenant.of)
                .ok_or_else(|| {
                    Refusal::new(
                        rules::BASE,
                        format!(
                            "spec.tenant.of names the PluginController {:?}, which does not \
                             exist; create it (the base serves every namespace not labelled for \
                             a tenant) or name another",
                            tenant.of
                        ),
                    )
                })?;
            // The base's budget as it serves: the host's default
            // (`--controller-writes-per-second`, `--controller-write-burst`)
            // where its spec says nothing.
            let mut base = base.clone();
            let (per_second, burst) = write_budget(&base.spec, default_budget);
            base.spec.write_budget = Some(WriteBudgetSpec {
                per_second: Some(per_second),
                burst: Some(burst),
            });
            effective(resource, &base)
        }
        None => {
            parent_not_taken(resource, &all.items)?;
            Ok(resource.clone())
        }
    }
}

/// Every `PluginController`, retried a few times (a refusal stays until
/// the resource is edited).
async fn list_all(client: &Client) -> Result<kube::api::ObjectList<PluginController>, Refusal> {
    let api: Api<PluginController> = Api::all(client.clone());
    let mut attempt = 0;
    loop {
        match api.list(&ListParams::default()).await {
            Ok(all) => return Ok(all),
            Err(err) if attempt >= 4 => {
                return Err(Refusal::new(
                    rules::PARENT_TAKEN,
                    format!(
                        "listing the PluginControllers to check who serves the parent kind: \
                         {err}; edit the resource to try again"
                    ),
                ));
            }
            Err(err) => {
                tracing::warn!("listing the PluginControllers: {err}; trying again");
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_secs(1 << attempt)).await;
            }
        }
    }
}

/// Refuses `me` when an older controller that is not a tenant serves the
/// same parent kind (the oldest by `creationTimestamp`, then name, wins).
pub fn parent_not_taken(me: &PluginController, all: &[PluginController]) -> Result<(), Refusal> {
    let key = |c: &PluginController| (c.metadata.creation_timestamp.clone(), c.name_any());
    let mine = key(me);
    let older = all.iter().find(|other| {
        other.name_any() != me.name_any()
            && other.spec.tenant.is_none()
            && other.spec.parent == me.spec.parent
            && key(other) < mine
    });
    match older {
        None => Ok(()),
        Some(older) => Err(Refusal::new(
            rules::PARENT_TAKEN,
            format!(
                "the PluginController {:?} serves {} already; two controllers of one parent kind \
                 would fight over every parent. To serve some namespaces with another plugin, \
                 make this one its tenant (spec.tenant.of: {:?}, spec.tenant.namespaces) and \
                 label the namespaces {TENANT_LABEL_PREFIX}{}=<this name>",
                older.name_any(),
                me.spec.parent,
                older.name_any(),
                older.name_any()
            ),
        )),
    }
}

/// The tenant's declaration within its base's: refused whole when it asks
/// for more; what it does not say is the base's.
pub fn effective(
    tenant: &PluginController,
    base: &PluginController,
) -> Result<PluginController, Refusal> {
    let looser = |what: String| {
        Refusal::new(
            rules::LOOSER,
            format!(
                "{what}: a tenant serves within what its base PluginController {:?} allows; ask \
                 for as much or less",
                base.name_any()
            ),
        )
    };
    let name = tenant.name_any();
    if base.spec.tenant.is_some() || base.name_any() == name {
        return Err(Refusal::new(
            rules::BASE,
            format!(
                "spec.tenant.of names {:?}, which is a tenant itself (or this one): name the \
                 controller the tenant specialises",
                base.name_any()
            ),
        ));
    }
    if base.spec.parent != tenant.spec.parent {
        return Err(Refusal::new(
            rules::BASE,
            format!(
                "the base {:?} serves {}, this tenant {}: a tenant serves its base's parent kind",
                base.name_any(),
                base.spec.parent,
                tenant.spec.parent
            ),
        ));
    }
    if let Some(bad) = tenant
        .spec
        .tenant
        .iter()
        .flat_map(|t| &t.namespaces)
        .find(|ns| !crate::apply::names::is_dns1123_label(ns))
    {
        return Err(Refusal::new(
            NAMESPACE_RULE,
            format!("spec.tenant.namespaces: {bad:?} is not a namespace name"),
        ));
    }
    let mut spec: PluginControllerSpec = tenant.spec.clone();
    for child in &mut spec.children {
        let Some(allowed) = base
            .spec
            .children
            .iter()
            .find(|b| b.kind_ref() == child.kind_ref())
        else {
            return Err(looser(format!(
                "the child kind {} is not one of the base's",
                child.kind_ref()
            )));
        };
        // Bounds left out are the base's.
        let count = child.max_count.unwrap_or(allowed.max_count());
        let bytes = child
            .max_bytes
            .map_or(allowed.max_bytes(), |b| b.min(1_048_576));
        if count > allowed.max_count() || bytes > allowed.max_bytes() {
            return Err(looser(format!(
                "{}: maxCount {count} and maxBytes {bytes} are over the base's {} and {}",
                child.kind_ref(),
                allowed.max_count(),
                allowed.max_bytes()
            )));
        }
        child.max_count = Some(count);
        child.max_bytes = Some(bytes);
    }
    if let Some(read) = spec.observe.iter().find(|o| !base.spec.observe.contains(o)) {
        return Err(looser(format!(
            "the observed kind {} is not one of the base's",
            read.kind_ref()
        )));
    }
    match (&spec.pod_policy, &base.spec.pod_policy) {
        (Some(asked), Some(allowed))
            if pod_policy_of(asked).is_looser_than(pod_policy_of(allowed)) =>
        {
            return Err(looser(format!(
                "the pod policy {} is looser than the base's {}",
                asked.policy, allowed.policy
            )));
        }
        (None, Some(allowed)) => spec.pod_policy = Some(allowed.clone()),
        _ => {}
    }
    spec.limits = narrower_limits(&spec, &base.spec).map_err(looser)?;
    spec.write_budget = narrower_budget(&spec, &base.spec).map_err(looser)?;
    let mut effective = tenant.clone();
    effective.spec = spec;
    Ok(effective)
}

/// The tenant's limits, each at most the base's; absent ones the base's.
fn narrower_limits(
    tenant: &PluginControllerSpec,
    base: &PluginControllerSpec,
) -> Result<Option<crate::crd::plugin::PluginLimitsSpec>, String> {
    let (asked, allowed) = (
        tenant.limits.clone(),
        base.limits.clone().unwrap_or_default(),
    );
    let Some(mut asked) = asked else {
        return Ok(base.limits.clone());
    };
    if let (Some(a), Some(b)) = (asked.timeout_ms, allowed.timeout_ms)
        && a > b
    {
        return Err(format!("limits.timeoutMs {a} is over the base's {b}"));
    }
    if let (Some(a), Some(b)) = (asked.memory_mib, allowed.memory_mib)
        && a > b
    {
        return Err(format!("limits.memoryMiB {a} is over the base's {b}"));
    }
    asked.timeout_ms = asked.timeout_ms.or(allowed.timeout_ms);
    asked.memory_mib = asked.memory_mib.or(allowed.memory_mib);
    Ok(Some(asked))
}

/// The tenant's write budget, at most the base's; absent parts the base's.
fn narrower_budget(
    tenant: &PluginControllerSpec,
    base: &PluginControllerSpec,
) -> Result<Option<WriteBudgetSpec>, String> {
    // The base's own budget: `admit_declaration` filled in the host's
    // default for the parts it leaves out.
    let (per_second, burst) = write_budget(base, super::WriteRate::default());
    let asked = tenant.write_budget.clone().unwrap_or_default();
    let asked_rate = asked.per_second.unwrap_or(per_second);
    let asked_burst = asked.burst.unwrap_or(burst);
    if asked_rate > per_second || asked_burst > burst {
        return Err(format!(
            "writeBudget {asked_rate}/s (bursts of {asked_burst}) is over the base's \
             {per_second}/s (bursts of {burst})"
        ));
    }
    Ok(Some(WriteBudgetSpec {
        per_second: Some(asked_rate),
        burst: Some(asked_burst),
    }))
}

/// A declaration's write budget: writes per second and burst.
pub fn write_budget(spec: &PluginControllerSpec, default: super::WriteRate) -> (u32, u32) {
    let asked = spec.write_budget.clone().unwrap_or_default();
    (
        asked.per_second.unwrap_or(default.per_second).max(1),
        asked.burst.unwrap_or(default.burst).max(1),
    )
}

/// Which namespace goes to which tenant, for every controller of a host.
pub struct Tenancy {
    client: Client,
    state: RwLock<State>,
    changed: watch::Sender<u64>,
    following: Mutex<Option<AbortOnDrop>>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether the namespaces' first list is in.
    synced: bool,
    /// Namespace → (base → tenant), from the namespaces' labels.
    opt_ins: HashMap<String, BTreeMap<String, String>>,
    /// The tenants serving: tenant → (base, namespaces asked for).
    tenants: HashMap<String, (String, BTreeSet<String>)>,
}

impl State {
    /// The tenant serving `namespace`'s parents in place of `base`.
    fn tenant_of(&self, base: &str, namespace: &str) -> Option<&str> {
        let tenant = self.opt_ins.get(namespace)?.get(base)?;
        let (its_base, asked) = self.tenants.get(tenant)?;
        (its_base == base && asked.contains(namespace)).then_some(tenant.as_str())
    }
}

impl std::fmt::Debug for Tenancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenancy")
            .field("state", &*self.state.read_unpoisoned())
            .finish_non_exhaustive()
    }
}

impl Tenancy {
    /// No tenants yet; Namespaces are followed from the first.
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self {
            client,
            state: RwLock::new(State::default()),
            changed: watch::channel(0).0,
            following: Mutex::new(None),
        })
    }

    /// The route of `controller` (a tenant of `base`, or a base).
    pub fn route(self: &Arc<Self>, controller: &str, base: Option<&str>) -> Route {
        Route {
            tenancy: self.clone(),
            controller: controller.to_string(),
            base: base.map(str::to_string),
        }
    }

    /// `tenant` serves from now on (its registration undoes it); its
    /// namespaces are reported on its status and as Events, by the replica
    /// that speaks for it (`voice`).
    pub(super) fn register(
        self: &Arc<Self>,
        tenant: &PluginController,
        voice: Arc<Voice>,
    ) -> Registration {
        let asked = tenant.spec.tenant.clone().unwrap_or_default();
        let name = tenant.name_any();
        self.follow_namespaces();
        self.state.write_unpoisoned().tenants.insert(
            name.clone(),
            (asked.of.clone(), asked.namespaces.iter().cloned().collect()),
        );
        self.bump();
        let reporter = Reporter {
            tenancy: self.clone(),
            api: Api::all(self.client.clone()),
            resource: tenant.clone(),
            voice,
        };
        let task = tokio::spawn(reporter.run());
        Registration {
            tenancy: self.clone(),
            tenant: name,
            _reporter: AbortOnDrop::new(task.abort_handle()),
        }
    }

    /// Which of `asked` are labelled for `tenant` of `base`, and which not.
    fn view(&self, tenant: &str, base: &str, asked: &[String]) -> (Vec<String>, Vec<String>) {
        let state = self.state.read_unpoisoned();
        let labelled = |ns: &String| {
            state
                .opt_ins
                .get(ns)
                .and_then(|o| o.get(base))
                .map(String::as_str)
                == Some(tenant)
        };
        let set: BTreeSet<&String> = asked.iter().collect();
        set.into_iter().cloned().partition(labelled)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Starts the watch of the Namespaces' labels, once.
    fn follow_namespaces(self: &Arc<Self>) {
        let mut following = self.following.lock_unpoisoned();
        if following.is_none() {
            let task = tokio::spawn(follow(Arc::downgrade(self), self.client.clone()));
            *following = Some(AbortOnDrop::new(task.abort_handle()));
        }
    }

    /// Sets `namespace`'s opt-ins from its labels (`None`: gone).
    fn set_labels(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) {
        let opt_ins = labels.map(opt_ins_of).unwrap_or_default();
        let mut state = self.state.write_unpoisoned();
        let before = state.opt_ins.get(namespace).cloned().unwrap_or_default();
        if before == opt_ins {
            return;
        }
        if opt_ins.is_empty() {
            state.opt_ins.remove(namespace);
        } else {
            state.opt_ins.insert(namespace.to_string(), opt_ins);
        }
        drop(state);
        self.bump();
    }

    fn set_all(&self, all: HashMap<String, BTreeMap<String, String>>) {
        let mut state = self.state.write_unpoisoned();
        state.opt_ins = all;
        state.synced = true;
        drop(state);
        self.bump();
    }
}

/// The tenant opt-ins a namespace's labels carry: base → tenant.
fn opt_ins_of(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter_map(|(key, value)| {
            let base = key.strip_prefix(TENANT_LABEL_PREFIX)?;
            Some((base.to_string(), value.clone()))
        })
        .collect()
}

/// Follows every Namespace's labels (metadata only) while the tenancy lives.
async fn follow(tenancy: std::sync::Weak<Tenancy>, client: Client) {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = HashMap::new();
    while let Some(event) = events.next().await {
        let Some(tenancy) = tenancy.upgrade() else {
            return;
        };
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(ns)) => {
                let opt_ins = opt_ins_of(ns.labels());
                if !opt_ins.is_empty() {
                    listing.insert(ns.name_any(), opt_ins);
                }
            }
            Ok(watcher::Event::InitDone) => tenancy.set_all(std::mem::take(&mut listing)),
            Ok(watcher::Event::Apply(ns)) => tenancy.set_labels(&ns.name_any(), Some(ns.labels())),
            Ok(watcher::Event::Delete(ns)) => tenancy.set_labels(&ns.name_any(), None),
            Err(err) => tracing::warn!(
                "watching Namespaces for their {TENANT_LABEL_PREFIX}<base> labels: {err}"
            ),
        }
    }
}

/// A tenant serving; dropping it gives its namespaces back to the base.
pub struct Registration {
    tenancy: Arc<Tenancy>,
    tenant: String,
    _reporter: AbortOnDrop,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.tenancy
            .state
            .write_unpoisoned()
            .tenants
            .remove(&self.tenant);
        self.tenancy.bump();
    }
}

/// Which parents one controller serves, by their namespace.
#[derive(Clone)]
pub struct Route {
    tenancy: Arc<Tenancy>,
    controller: String,
    base: Option<String>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("controller", &self.controller)
            .field("base", &self.base)
            .finish()
    }
}

impl Route {
    /// Whether this controller reconciles parents in `namespace`: a base
    /// all but its tenants' namespaces, a tenant only its own.
    pub fn serves(&self, namespace: &str) -> bool {
        let state = self.tenancy.state.read_unpoisoned();
        match &self.base {
            None => state.tenant_of(&self.controller, namespace).is_none(),
            Some(base) => state.tenant_of(base, namespace) == Some(self.controller.as_str()),
        }
    }

    /// The name children are written under (label and field manager): the
    /// base's, so children carry over between a base and its tenants.
    pub fn family(&self) -> &str {
        self.base.as_deref().unwrap_or(&self.controller)
    }

    /// Ticks each time any route may have changed.
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut changed = self.tenancy.changed.subscribe();
        changed.mark_unchanged();
        futures::stream::unfold(changed, |mut changed| async move {
            changed.changed().await.ok().map(|()| ((), changed))
        })
    }
}

/// Says a tenant's namespaces on its status and, when some are refused,
/// as a Warning, each time they change. Sharded, the replica that speaks
/// for the resource does (the holder of shard 0); one that comes to speak
/// writes the status again, and its voice says the Warning again.
struct Reporter {
    tenancy: Arc<Tenancy>,
    api: Api<PluginController>,
    resource: PluginController,
    voice: Arc<Voice>,
}

impl Reporter {
    async fn run(self) {
        let mut changed = self.tenancy.changed.subscribe();
        let mut shards = self.voice.shards().map(crate::shards::Shards::subscribe);
        let asked = self.resource.spec.tenant.clone().unwrap_or_default();
        let name = self.resource.name_any();
        let mut last = None;
        let mut written = false;
        loop {
            let speaks = self.voice.speaks();
            if self.tenancy.state.read_unpoisoned().synced {
                let view = self.tenancy.view(&name, &asked.of, &asked.namespaces);
                if last.as_ref() != Some(&view) || (speaks && !written) {
                    written = speaks;
                    self.report(&asked.of, &view, last.as_ref() != Some(&view), speaks)
                        .await;
                    last = Some(view);
                }
            }
            written &= speaks;
            let shards_changed = async {
                match shards.as_mut() {
                    Some(shards) => shards.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                open = changed.changed() => if open.is_err() { return },
                open = shards_changed => if !open { shards = None },
            }
        }
    }

    /// Writes `status.tenant` when this replica `speaks`; when the view
    /// `is_new`, says (or withdraws) the Warning naming the refused.
    async fn report(
        &self,
        base: &str,
        (serving, refused): &(Vec<String>, Vec<String>),
        is_new: bool,
        speaks: bool,
    ) {
        let name = self.resource.name_any();
        let message = if refused.is_empty() {
            String::new()
        } else {
            format!(
                "[{NAMESPACE_RULE}] namespaces {refused:?} are not labelled \
                 {TENANT_LABEL_PREFIX}{base}={name}: their parents stay with {base:?}; a cluster \
                 admin opts one in with `kubectl label namespace NS {TENANT_LABEL_PREFIX}{base}={name}`"
            )
        };
        let status = json!({"status": {"tenant": {
            "serving": serving,
            "refused": refused,
            "rule": (!refused.is_empty()).then_some(NAMESPACE_RULE),
            "message": message,
        }}});
        if speaks
            && let Err(err) = self
                .api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
        {
            tracing::warn!(controller = %name, "writing status.tenant: {err}");
        }
        if !is_new {
            return;
        }
        tracing::info!(controller = %name, ?serving, ?refused, "tenant namespaces");
        if refused.is_empty() {
            self.voice.withdraw(Standing::TenantNamespaces);
        } else {
            let what = Standing::TenantNamespaces;
            self.voice
                .state(what, true, "PluginRefused", &message, "Route");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn controller(name: &str, created: &str, spec: serde_json::Value) -> PluginController {
        let mut resource: PluginController = serde_json::from_value(json!({
            "apiVersion": "wasm-operator.io/v1alpha1", "kind": "PluginController",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": spec,
        }))
        .expect("a PluginController");
        resource.metadata.name = Some(name.into());
        resource
    }

    fn base_spec() -> serde_json::Value {
        json!({
            "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
            "children": [{"apiVersion": "apps/v1", "kind": "Deployment", "maxCount": 2}],
            "source": {"file": {"path": "/base.wasm"}},
            "limits": {"timeoutMs": 500},
            "podPolicy": {"policy": "restricted"},
        })
    }

    fn tenant_spec(extra: serde_json::Value) -> serde_json::Value {
        let mut spec = json!({
            "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
            "children": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "source": {"file": {"path": "/team-a.wasm"}},
            "tenant": {"of": "memcached", "namespaces": ["team-a"]},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        spec
    }

    #[test]
    fn a_tenant_inherits_what_it_does_not_say_and_narrows_the_rest() {
        let base = controller("memcached", "2026-01-01T00:00:00Z", base_spec());
        let tenant = controller(
            "team-a",
            "2026-01-02T00:00:00Z",
            tenant_spec(json!({
                "limits": {"memoryMiB": 32},
                "writeBudget": {"perSecond": 10},
            })),
        );
        let effective = effective(&tenant, &base).expect("within the base");
        let spec = effective.spec;
        assert_eq!(spec.children[0].max_count, Some(2), "the base's bound");
        assert_eq!(
            spec.pod_policy.map(|p| p.policy).as_deref(),
            Some("restricted")
        );
        let limits = spec.limits.expect("limits");
        assert_eq!(
            (limits.timeout_ms, limits.memory_mib),
            (Some(500), Some(32))
        );
        assert_eq!(
            write_budget(
                &spec_of(spec.write_budget),
                crate::declared::WriteRate::default()
            ),
            (10, crate::declared::budget::DEFAULT_BURST)
        );
    }

    fn spec_of(budget: Option<WriteBudgetSpec>) -> PluginControllerSpec {
        PluginControllerSpec {
            write_budget: budget,
            ..PluginControllerSpec::default()
        }
    }

    #[test]
    fn a_tenant_asking_for_more_than_its_base_is_refused_by_name() {
        let base = controller("memcached", "2026-01-01T00:00:00Z", base_spec());
        for (extra, what) in [
            (
                json!({"children": [{"apiVersion": "v1", "kind": "Service"}]}),
                "v1/Service",
            ),
            (
                json!({"children": [{"apiVersion": "apps/v1", "kind": "Deployment", "maxCount": 3}]}),
                "maxCount 3",
            ),
            (
                json!({"podPolicy": {"policy": "baseline"}}),
                "pod policy baseline",
            ),
            (json!({"limits": {"timeoutMs": 900}}), "timeoutMs 900"),
            (json!({"writeBudget": {"burst": 6000}}), "bursts of 6000"),
            (
                json!({"observe": [{"apiVersion": "v1", "kind": "Pod"}]}),
                "observed kind v1/Pod",
            ),
        ] {
            let tenant = controller("team-a", "2026-01-02T00:00:00Z", tenant_spec(extra));
            let refusal = effective(&tenant, &base).expect_err(what);
            assert_eq!(refusal.rule, rules::LOOSER, "{what}");
            assert!(
                refusal.message.contains(what),
                "{what}: {}",
                refusal.message
            );
        }
    }

    #[test]
    fn a_tenant_of_another_kind_or_of_a_tenant_is_refused() {
        let base = controller("memcached", "2026-01-01T00:00:00Z", base_spec());
        let mut other = tenant_spec(json!({}));
        other["parent"]["kind"] = json!("Other");
        let tenant = controller("team-a", "2026-01-02T00:00:00Z", other);
        assert_eq!(
            effective(&tenant, &base).expect_err("kind").rule,
            rules::BASE
        );
        let tenant = controller("team-a", "2026-01-02T00:00:00Z", tenant_spec(json!({})));
        let nested = controller("team-b", "2026-01-03T00:00:00Z", tenant_spec(json!({})));
        assert_eq!(
            effective(&nested, &tenant).expect_err("nested").rule,
            rules::BASE
        );
        let bad = controller(
            "team-c",
            "2026-01-02T00:00:00Z",
            tenant_spec(json!({"tenant": {"of": "memcached", "namespaces": ["Not_A_Name"]}})),
        );
        assert_eq!(
            effective(&bad, &base).expect_err("name").rule,
            NAMESPACE_RULE
        );
    }

    #[test]
    fn a_second_controller_of_a_parent_kind_is_refused_unless_a_tenant() {
        let first = controller("memcached", "2026-01-01T00:00:00Z", base_spec());
        let second = controller("rival", "2026-01-02T00:00:00Z", base_spec());
        let tenant = controller("team-a", "2025-01-01T00:00:00Z", tenant_spec(json!({})));
        let all = [first.clone(), second.clone(), tenant];
        assert!(parent_not_taken(&first, &all).is_ok(), "the oldest serves");
        let refusal = parent_not_taken(&second, &all).expect_err("taken");
        assert_eq!(refusal.rule, rules::PARENT_TAKEN);
        assert!(
            refusal.message.contains("\"memcached\""),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn routes_follow_the_labels_and_the_tenants_serving() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let _entered = runtime.enter();
        let tenancy = Arc::new(Tenancy {
            client: offline_client(),
            state: RwLock::new(State::default()),
            changed: watch::channel(0).0,
            following: Mutex::new(Some(AbortOnDrop::new(
                tokio::spawn(async {}).abort_handle(),
            ))),
        });
        let base = tenancy.route("memcached", None);
        let team_a = tenancy.route("team-a", Some("memcached"));
        assert_eq!(team_a.family(), "memcached");
        let labels = BTreeMap::from([(
            format!("{TENANT_LABEL_PREFIX}memcached"),
            "team-a".to_string(),
        )]);
        tenancy.set_labels("team-a", Some(&labels));
        tenancy.set_labels("team-b", Some(&labels));
        assert!(
            base.serves("team-a") && !team_a.serves("team-a"),
            "not serving yet"
        );
        tenancy.state.write_unpoisoned().tenants.insert(
            "team-a".into(),
            ("memcached".into(), BTreeSet::from(["team-a".to_string()])),
        );
        assert!(!base.serves("team-a") && team_a.serves("team-a"));
        assert!(
            base.serves("team-b") && !team_a.serves("team-b"),
            "not asked for"
        );
        assert!(base.serves("default") && !team_a.serves("default"));
        tenancy.set_labels("team-a", None);
        assert!(
            base.serves("team-a") && !team_a.serves("team-a"),
            "label removed"
        );
        assert_eq!(
            tenancy.view("team-a", "memcached", &["team-b".into(), "team-a".into()]),
            (vec!["team-b".to_string()], vec!["team-a".to_string()])
        );
    }

    /// A client that is never called.
    fn offline_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        Client::try_from(config).expect("a client")
    }
}
