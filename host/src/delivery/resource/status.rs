//! Writing what one replica made of a `JinghzhuPlugin`: its conditions, its
//! entry in `status.replicas`, the last refusal, with server-side apply
//! under this replica's own field manager (`wasm-operator/<replica>`), and
//! `PluginRefused` Warning Events on the resource.
//!
//! Each replica applies only its own entry of the `replicas` map list, so
//! replicas never remove or overwrite each other's entries; the shared
//! fields (conditions, digest, state) are applied with `force` and show the
//! last writer's view. A replica that stops gracefully removes its entry
//! ([`StatusWriter::leave`]); the entry of a replica that crashed is
//! pruned by [`super::prune`] when sharded (see docs/replicas.md). When the list is full (256 entries), the status is
//! written without this replica's entry rather than not at all.

use std::collections::BTreeMap;

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

use super::FIELD_MANAGER_PREFIX;
use super::fleet::RolloutJudge;
use crate::crd::plugin::PluginMode;
use crate::crd::plugin::{
    EffectiveLimits, JinghzhuPlugin, PluginCondition, PluginRefusal, ReplicaRollout, ReplicaStatus,
    RolloutStatus, ServedVersion,
};
use crate::delivery::report::{REFUSED_REASON, RefusedCandidate, Report};
use crate::delivery::vetting;
use crate::locks::MutexExt;
use crate::plugin_text;
use crate::refusal::Refusal;
use crate::registry;
use crate::runtime::LoadedPlugin;
use crate::slot::ActivePlugin;
use crate::slot::router::ObjectCounts;
use crate::slot::served::Served;

/// A count as the status stores it (Kubernetes has no unsigned integers).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The condition types, in the order they are written.
pub const CONDITION_TYPES: [&str; 7] = [
    "Resolved", "Verified", "Compiled", "Serving", "Refused", "Rollout", "Flapping",
];

/// Now, as Kubernetes writes times (RFC 3339, seconds).
pub fn now() -> String {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now()))
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What this replica serves, for its entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Serving {
    /// `sha256:…` (empty: nothing).
    pub digest: String,
    /// `name@version`.
    pub plugin: Option<String>,
}

/// How long an unchanged status goes without being written again (then it
/// is, in case another writer removed or changed what it holds).
pub const REWRITE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// A status body applied.
struct Written {
    body: serde_json::Value,
    with_entry: bool,
    at: std::time::Instant,
}

/// One replica's view of one resource, and how it writes it.
pub struct StatusWriter {
    out: Arc<dyn StatusOut>,
    name: String,
    replica: String,
    conditions: BTreeMap<&'static str, PluginCondition>,
    serving: Serving,
    since: Option<String>,
    state: String,
    generation: Option<i64>,
    effective: Option<EffectiveLimits>,
    last_refusal: Option<PluginRefusal>,
    objects: Option<ObjectCounts>,
    rollout: Option<RolloutStatus>,
    /// Whether this replica judges the rollout: only the judge writes
    /// `status.rollout`, which the others follow.
    judge: RolloutJudge,
    replica_rollout: Option<ReplicaRollout>,
    newest_served: Option<ServedVersion>,
    /// The body last applied, whether this replica's entry was in it, and
    /// when: an unchanged status is not written again for
    /// [`REWRITE_INTERVAL`], and an entry left out (the list was full) is
    /// tried again.
    last_written: std::sync::Mutex<Option<Written>>,
}

impl StatusWriter {
    /// A writer for the resource `name` as replica `replica`.
    pub fn new(client: Client, name: &str, replica: &str) -> Self {
        let out = Arc::new(ToTheCluster {
            api: Api::all(client.clone()),
            client,
            replica: replica.to_string(),
        });
        Self::with_out(out, name, replica)
    }

    /// A writer for the resource `name` as replica `replica`, writing to
    /// `out`.
    pub fn with_out(out: Arc<dyn StatusOut>, name: &str, replica: &str) -> Self {
        Self {
            out,
            name: name.to_string(),
            replica: replica.to_string(),
            conditions: BTreeMap::new(),
            serving: Serving::default(),
            since: None,
            state: "Pending".into(),
            generation: None,
            effective: None,
            last_refusal: None,
            objects: None,
            rollout: None,
            judge: RolloutJudge::default(),
            replica_rollout: None,
            newest_served: None,
            last_written: std::sync::Mutex::new(None),
        }
    }

    /// The newest plugin version the slot served, for `newestServed`.
    pub fn set_newest_served(&mut self, served: Option<Served>) {
        self.newest_served = served.map(|s| ServedVersion {
            name: s.name,
            version: s.version,
            digest: s.digest,
        });
    }

    /// Whether the last write left this replica's entry out (the list was
    /// full), so it is to be tried again.
    pub fn entry_left_out(&self) -> bool {
        self.last_written
            .lock_unpoisoned()
            .as_ref()
            .is_some_and(|written| !written.with_entry)
    }

    /// Forgets the body last written: the next write is sent whatever it
    /// holds (a new generation, or another object under the same name).
    pub fn forget_written(&self) {
        *self.last_written.lock_unpoisoned() = None;
    }

    /// The canary rollout to show (`status.rollout`), written while this
    /// replica judges it ([`StatusWriter::set_judge`]).
    pub fn set_rollout(&mut self, rollout: Option<RolloutStatus>) {
        self.rollout = rollout;
    }

    /// Who judges rollouts: this replica writes `status.rollout` only
    /// while it does.
    pub fn set_judge(&mut self, judge: RolloutJudge) {
        self.judge = judge;
    }

    /// This replica's figures for the rollout's step, for its entry.
    /// Returns whether they changed.
    pub fn set_replica_rollout(&mut self, figures: Option<ReplicaRollout>) -> bool {
        let changed = self.replica_rollout != figures;
        self.replica_rollout = figures;
        changed
    }

    /// The objects this replica sees the resource select and serve.
    /// Returns whether they changed.
    pub fn set_objects(&mut self, objects: ObjectCounts) -> bool {
        let changed = self.objects != Some(objects);
        self.objects = Some(objects);
        changed
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The field manager of this replica.
    pub fn manager(&self) -> String {
        format!("{FIELD_MANAGER_PREFIX}{}", self.replica)
    }

    /// Sets the generation the next write describes.
    pub fn observe(&mut self, generation: Option<i64>) {
        self.generation = generation;
    }

    /// Sets one condition; its transition time moves only when its status does.
    pub fn set(&mut self, type_: &'static str, status: bool, reason: &str, message: &str) {
        let status = if status { "True" } else { "False" };
        let transition = match self.conditions.get(type_) {
            Some(old) if old.status == status => old.last_transition_time.clone(),
            _ => now(),
        };
        self.conditions.insert(
            type_,
            PluginCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: reason.to_string(),
                message: plugin_text::escape_within(message, 1024),
                last_transition_time: transition,
                observed_generation: self.generation,
            },
        );
    }

    /// The one-word state of this replica.
    pub fn set_state(&mut self, state: &str) {
        self.state = state.to_string();
    }

    /// The limits in force.
    pub fn set_effective(&mut self, effective: Option<EffectiveLimits>) {
        self.effective = effective;
    }

    /// What this replica serves now; `since` moves when the digest does.
    pub fn set_serving(&mut self, serving: Serving) {
        if serving.digest != self.serving.digest || self.since.is_none() {
            self.since = Some(now());
        }
        self.serving = serving;
    }

    /// Records a refusal (the last one is kept in the status).
    pub fn set_refusal(&mut self, digest: &str, rule: &str, message: &str) {
        self.last_refusal = Some(PluginRefusal {
            digest: digest.to_string(),
            rule: rule.to_string(),
            message: plugin_text::escape_within(message, 1024),
            time: now(),
            replica: self.replica.clone(),
        });
    }

    /// Applies this replica's view. Errors are logged, never fatal: the
    /// status is a report, and the next outcome writes it again.
    pub async fn write(&self) {
        let status = serde_json::json!({
            "observedGeneration": self.generation,
            "conditions": CONDITION_TYPES
                .iter()
                .filter_map(|t| self.conditions.get(t))
                .collect::<Vec<_>>(),
            "digest": (!self.serving.digest.is_empty()).then_some(&self.serving.digest),
            "plugin": self.serving.plugin,
            "state": self.state,
            "effectiveLimits": self.effective,
            "lastRefusal": self.last_refusal,
            "newestServed": self.newest_served,
            "rollout": self.rollout.as_ref().filter(|_| self.judge.here()),
            "replicas": [ReplicaStatus {
                name: self.replica.clone(),
                digest: self.serving.digest.clone(),
                plugin: self.serving.plugin.clone(),
                since: self.since.clone(),
                state: self.state.clone(),
                observed_generation: self.generation,
                objects_selected: self.objects.map(|o| count(o.selected)),
                objects_served: self.objects.map(|o| count(o.served)),
                rollout: self.replica_rollout.clone(),
            }],
        });
        let body = serde_json::json!({
            "apiVersion": "jinghzhu.io/v1",
            "kind": "JinghzhuPlugin",
            "metadata": { "name": self.name },
            "status": strip_nulls(status),
        });
        {
            let last = self.last_written.lock_unpoisoned();
            let unchanged = last.as_ref().is_some_and(|written| {
                written.with_entry
                    && written.body == body
                    && written.at.elapsed() < REWRITE_INTERVAL
            });
            if unchanged {
                return;
            }
        }
        let params = PatchParams::apply(&self.manager()).force();
        let mut with_entry = true;
        let mut result = self.out.apply_status(&self.name, &params, &body).await;
        if let Err(kube::Error::Api(status)) = &result
            && status.code == 422
        {
            // The replicas list may be full (its 256 items): the resource's
            // conditions matter more than this replica's entry.
            let mut without_entry = body.clone();
            if let Some(status) = without_entry
                .get_mut("status")
                .and_then(serde_json::Value::as_object_mut)
            {
                status.remove("replicas");
            }
            tracing::warn!(resource = %self.name, error = %status.message, "the JinghzhuPlugin status was refused with this replica's entry (is status.replicas full?); writing it without");
            with_entry = false;
            result = self
                .out
                .apply_status(&self.name, &params, &without_entry)
                .await;
        }
        match result {
            Ok(_) => {
                *self.last_written.lock_unpoisoned() = Some(Written {
                    body,
                    with_entry,
                    at: std::time::Instant::now(),
                });
            }
            Err(err) => {
                *self.last_written.lock_unpoisoned() = None;
                tracing::warn!(
                    resource = %self.name,
                    error = %err,
                    "could not write the JinghzhuPlugin status"
                );
            }
        }
    }

    /// Removes `replica`'s entry from the resource `name`'s `status.replicas`
    /// (a replica stopping gracefully: its entry would otherwise stay for
    /// good). Errors are logged.
    pub async fn leave(client: &Client, name: &str, replica: &str) {
        let api: Api<JinghzhuPlugin> = Api::all(client.clone());
        // The object, not its status subresource: the shipped RBAC grants
        // `get` on `jinghzhuplugins` and only `patch` on their status.
        let entries = match api.get(name).await {
            Ok(resource) => resource.status.map(|s| s.replicas).unwrap_or_default(),
            Err(err) => {
                tracing::warn!(resource = %name, error = %err, "could not read the JinghzhuPlugin to remove this replica's entry");
                return;
            }
        };
        let Some(index) = entries.iter().position(|r| r.name == replica) else {
            return;
        };
        match Self::remove_entry(client, name, index, replica).await {
            Ok(()) => {
                tracing::info!(resource = %name, replica, "removed this replica's entry from the JinghzhuPlugin status")
            }
            Err(err) => {
                tracing::warn!(resource = %name, error = %err, "could not remove this replica's entry from the JinghzhuPlugin status")
            }
        }
    }

    /// Removes the entry at `index` of the resource `name`'s
    /// `status.replicas` if it is still `replica`'s: a JSON patch guarded
    /// by a `test` of the entry's name, so an entry that moved meanwhile is
    /// left alone (the patch is refused).
    pub async fn remove_entry(
        client: &Client,
        name: &str,
        index: usize,
        replica: &str,
    ) -> Result<(), String> {
        Self::remove_entries(client, name, &[(index, replica.to_string())]).await
    }

    /// Removes the entries at these indexes of the resource `name`'s
    /// `status.replicas`, each if it still names its replica, in one JSON
    /// patch: all of them or none (an entry that moved meanwhile refuses
    /// the whole patch). Indexes may come in any order; they are removed
    /// from the last so a removal does not move the ones still to come.
    pub async fn remove_entries(
        client: &Client,
        name: &str,
        entries: &[(usize, String)],
    ) -> Result<(), String> {
        remove_entries_of::<JinghzhuPlugin>(client, name, entries).await
    }

    /// Records a `PluginRefused` Warning Event on the resource.
    pub async fn warn(&self, resource: &JinghzhuPlugin, note: &str) {
        let note = plugin_text::escape_within(note, plugin_text::MAX_EVENT_NOTE);
        self.out.warn(resource.object_ref(&()), note).await;
    }

    /// Shows what `slot` serves in `role`: the `Serving` condition, this
    /// replica's entry, the newest version served, the state.
    pub fn show_serving(&mut self, slot: &ActivePlugin, role: PluginMode) {
        let served = match role {
            PluginMode::Active => slot.serving(),
            PluginMode::Shadow => slot.shadow(),
        };
        match &served {
            Some(plugin) => {
                let what = match role {
                    PluginMode::Active => "serves",
                    PluginMode::Shadow => "runs as the shadow",
                };
                self.set(
                    "Serving",
                    true,
                    "Serving",
                    &format!("{} {what}", plugin.describe()),
                );
                self.set_serving(Serving {
                    digest: plugin.digest().to_string(),
                    plugin: Some(format!("{}@{}", plugin.info().name, plugin.info().version)),
                });
                self.set_newest_served(slot.newest_served());
            }
            None => {
                self.set("Serving", false, "NothingServes", "no plugin serves yet");
                self.set_serving(Serving::default());
            }
        }
        self.set_state(if served.is_some() {
            "Serving"
        } else {
            "Pending"
        });
    }
}

/// Where a [`StatusWriter`] writes: the cluster ([`ToTheCluster`]), or
/// anything that keeps what it is given (a test's record).
pub trait StatusOut: Send + Sync {
    /// Applies `body` to the resource `name`'s status subresource.
    fn apply_status<'a>(
        &'a self,
        name: &'a str,
        params: &'a PatchParams,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
    /// Records a `PluginRefused` Warning Event (`note`, escaped and
    /// bounded) on `regarding`.
    fn warn(&self, regarding: ObjectReference, note: String) -> BoxFuture<'_, ()>;
}

/// The cluster: server-side apply of the status, Events by the replica.
struct ToTheCluster {
    api: Api<JinghzhuPlugin>,
    client: Client,
    replica: String,
}

impl StatusOut for ToTheCluster {
    fn apply_status<'a>(
        &'a self,
        name: &'a str,
        params: &'a PatchParams,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            self.api
                .patch_status(name, params, &Patch::Apply(body))
                .await
                .map(|_| ())
        })
    }

    fn warn(&self, regarding: ObjectReference, note: String) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let recorder = Recorder::new(
                self.client.clone(),
                Reporter {
                    controller: "wasm-operator".into(),
                    instance: Some(self.replica.clone()),
                },
            );
            let event = Event {
                type_: EventType::Warning,
                reason: REFUSED_REASON.into(),
                note: Some(note),
                action: "HotSwap".into(),
                secondary: None,
            };
            if let Err(err) = recorder.publish(&event, &regarding).await {
                tracing::warn!(error = %err, "could not record the refusal Event on the JinghzhuPlugin");
            }
        })
    }
}

/// The condition a refusal by `refusal`'s rule turns false.
pub fn condition_of(refusal: &Refusal) -> &'static str {
    match refusal.rule {
        vetting::rules::DIGEST_PIN
        | "verification/source"
        | "verification/unsigned-source"
        | "verification/keys"
        | "verification/secret-not-allowed"
        | "verification/policy"
        | registry::rules::UNSIGNED
        | registry::rules::SIGNATURE => "Verified",
        vetting::rules::LOAD | vetting::rules::SMOKE_RECONCILE => "Compiled",
        rule if rule.starts_with("rollout/") => "Rollout",
        _ => "Resolved",
    }
}

/// The delivery pipeline's [`Report`] for a resource's driver: what
/// serves, and each refusal, in the resource's status (its condition,
/// `Refused`, `lastRefusal`, this replica's entry) and a `PluginRefused`
/// Warning Event on it.
pub struct ResourceReport<'a> {
    /// The status being written.
    pub writer: &'a mut StatusWriter,
    /// The slot the resource feeds, and in which role.
    pub slot: (&'a ActivePlugin, PluginMode),
    /// The resource (the Event's object).
    pub resource: &'a JinghzhuPlugin,
}

impl Report for ResourceReport<'_> {
    fn served<'a>(&'a mut self, _plugin: &'a LoadedPlugin) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.writer.show_serving(self.slot.0, self.slot.1);
            self.writer.write().await;
        })
    }

    fn refused<'a>(&'a mut self, refused: RefusedCandidate<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let refusal = refused.refusal;
            let text = refusal.to_string();
            let reason = refusal.reason();
            self.writer
                .set(condition_of(refusal), false, &reason, &text);
            self.writer.set("Refused", true, &reason, &text);
            self.writer
                .set_refusal(refused.digest, refusal.rule, &refusal.message);
            self.writer.show_serving(self.slot.0, self.slot.1);
            self.writer.set_state("Refused");
            self.writer.write().await;
            self.writer.warn(self.resource, &refused.note()).await;
        })
    }
}

/// Drops `null` members (an apply would own them as nulls otherwise).
fn strip_nulls(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(strip_nulls).collect())
        }
        other => other,
    }
}

/// Removes the entries at these indexes of the `status.replicas` of the
/// cluster-scoped resource `name` of kind `K`, each if it still names its
/// replica, in one JSON patch: all of them or none (an entry that moved
/// meanwhile refuses the whole patch). Indexes may come in any order; they
/// are removed from the last so a removal does not move the ones still to
/// come.
pub async fn remove_entries_of<K>(
    client: &Client,
    name: &str,
    entries: &[(usize, String)],
) -> Result<(), String>
where
    K: kube::Resource<DynamicType = ()>,
{
    if entries.is_empty() {
        return Ok(());
    }
    let url = format!(
        "/apis/{}/{}/{name}/status",
        K::api_version(&()),
        K::plural(&())
    );
    let request = http::Request::patch(url)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(removal_patch(entries).to_string().into_bytes())
        .map_err(|err| format!("building the patch: {err}"))?;
    client
        .request::<serde_json::Value>(request)
        .await
        .map(|_| ())
        .map_err(|err| err.to_string())
}

/// The JSON patch removing these `status.replicas` entries: for each, from
/// the highest index down, a `test` of its name then its `remove`.
fn removal_patch(entries: &[(usize, String)]) -> serde_json::Value {
    let mut sorted: Vec<&(usize, String)> = entries.iter().collect();
    sorted.sort_by_key(|e| std::cmp::Reverse(e.0));
    sorted.dedup_by_key(|e| e.0);
    let ops: Vec<serde_json::Value> = sorted
        .into_iter()
        .flat_map(|(index, replica)| {
            [
                serde_json::json!({"op": "test", "path": format!("/status/replicas/{index}/name"), "value": replica}),
                serde_json::json!({"op": "remove", "path": format!("/status/replicas/{index}")}),
            ]
        })
        .collect();
    serde_json::Value::Array(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_are_dropped_at_every_depth() {
        let value = serde_json::json!({"a": null, "b": [{"c": null, "d": 1}], "e": {"f": null}});
        assert_eq!(
            strip_nulls(value),
            serde_json::json!({"b": [{"d": 1}], "e": {}})
        );
    }

    #[test]
    fn a_removal_patch_tests_and_removes_from_the_highest_index_down() {
        let patch = removal_patch(&[(1, "a".into()), (7, "b".into()), (1, "a".into())]);
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": "/status/replicas/7/name", "value": "b"},
                {"op": "remove", "path": "/status/replicas/7"},
                {"op": "test", "path": "/status/replicas/1/name", "value": "a"},
                {"op": "remove", "path": "/status/replicas/1"},
            ])
        );
    }

    #[test]
    fn now_is_rfc3339() {
        let t = now();
        assert!(t.ends_with('Z') && t.contains('T'), "{t}");
    }

    #[test]
    fn each_refusal_turns_the_condition_of_its_stage_false() {
        let by = |rule| condition_of(&Refusal::new(rule, "m"));
        assert_eq!(by(crate::delivery::vetting::rules::DIGEST_PIN), "Verified");
        assert_eq!(by(crate::registry::rules::UNSIGNED), "Verified");
        assert_eq!(by(crate::delivery::vetting::rules::LOAD), "Compiled");
        assert_eq!(
            by(crate::delivery::vetting::rules::SMOKE_RECONCILE),
            "Compiled"
        );
        assert_eq!(by("rollout/aborted"), "Rollout");
        assert_eq!(by("resource/mode"), "Resolved");
    }
}
