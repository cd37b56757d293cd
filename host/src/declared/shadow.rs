//! The shadow plugin of one declared controller (`spec.shadow`): called on
//! the same kept input as the serving plugin, after it and off the write
//! path; its output is checked by the same host rules ([`super::checks`])
//! and compared with the serving plugin's checked output, never applied.
//!
//! A reconcile only *offers* a copy of its input and its checked plan to
//! the shadow's bounded queue ([`ShadowSeat::reserve`]: it never waits;
//! with the queue full the call is dropped and counted), worked one call at
//! a time by a task of its own, each call within the plugin's deadline. So
//! a slow, failing or spinning shadow loses comparisons; it never delays,
//! fails or changes a serving reconcile. The figures are counted here
//! ([`ShadowFigures`]), in the metrics labelled with the controller, and
//! shown on the resource's `status.shadow` by the supervisor; an output a
//! rule refuses is a Warning `ShadowOutputRefused` on the resource naming
//! the rule, and calls dropped for a full queue a Warning
//! `ShadowCallsDropped` naming [`QUEUE_FULL_RULE`], each at most one a
//! minute.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use serde_json::Value;
use tokio::sync::mpsc;

use super::checks::{self, Declared, Parent, Plan};
use super::kinds::ResolvedKind;
use crate::apply::policy::PolicyConfig;
use crate::crd::controller::{ShadowFinding, ShadowStatus};
use crate::locks::{MutexExt, RwLockExt};
use crate::plugin_text;
use crate::runtime::LoadedPlugin;
use crate::runtime::bindings::v3;
use crate::tasks::AbortOnDrop;
use crate::telemetry::events::{EventSink, QueuedEvent};
use crate::telemetry::metrics::Metrics;

/// The reason of the Warning Event an output the rules refuse records.
pub const REFUSED_REASON: &str = "ShadowOutputRefused";

/// Most one Warning `ShadowOutputRefused` per controller this often (the
/// next says how many were held back); the same for `ShadowCallsDropped`.
pub const REFUSED_EVENT_EVERY: Duration = Duration::from_secs(60);

/// The reason of the Warning Event calls dropped for a full queue record.
pub const DROPPED_REASON: &str = "ShadowCallsDropped";

/// The rule a call is dropped by when the shadow's queue is full (the
/// shadow is slower than the serving plugin's reconciles).
pub const QUEUE_FULL_RULE: &str = "shadow/queue-full";

/// Bytes of a difference or a refusal shown on the status and in an Event.
const SHOWN_MAX: usize = 512;

/// Children named in one part of a difference before the rest are counted.
const NAMES_SHOWN: usize = 5;

/// The rules a controller's shadow is held to, and where it reports: its
/// declaration's, as the serving plugin's.
#[derive(Clone)]
pub struct ShadowRules {
    /// The `PluginController`'s name.
    pub controller: String,
    /// The parent kind.
    pub parent: ResolvedKind,
    /// The child kinds with their bounds (most children, most bytes).
    pub children: Vec<(ResolvedKind, u32, u32)>,
    /// The pod policy pod templates in children are held to.
    pub policy: PolicyConfig,
    /// The host's metrics.
    pub metrics: Arc<Metrics>,
    /// Where Events go.
    pub events: EventSink,
}

/// Where a controller's shadow sits: none, or one running.
#[derive(Default)]
pub struct ShadowSeat(RwLock<Option<Arc<Shadow>>>);

impl ShadowSeat {
    /// Runs `shadow` from the next reconcile on (`None`: none).
    pub fn set(&self, shadow: Option<Arc<Shadow>>) {
        *self.0.write_unpoisoned() = shadow;
    }

    /// The shadow running, if any.
    pub fn get(&self) -> Option<Arc<Shadow>> {
        self.0.read_unpoisoned().clone()
    }

    /// Takes a place in the shadow's queue and a copy of the input the
    /// serving plugin was called with (`lent`), if a shadow runs and its
    /// queue has room (else the call is counted as dropped). Never waits.
    pub fn reserve(&self, lent: Option<&v3::ReconcileInput>) -> Option<Reserved> {
        self.get()?.reserve(lent)
    }
}

/// A place in the shadow's queue with the input to call it on.
pub struct Reserved {
    permit: mpsc::OwnedPermit<ShadowCall>,
    input: v3::ReconcileInput,
}

impl Reserved {
    /// Queues the call: the parent, its controlled children by kind (name
    /// → uid) and the serving plugin's checked plan.
    pub fn send(self, parent: &Parent<'_>, owned: &[BTreeMap<String, String>], serving: &Plan) {
        self.permit.send(ShadowCall {
            input: self.input,
            name: parent.name.to_string(),
            namespace: parent.namespace.to_string(),
            uid: parent.uid.to_string(),
            owned: owned.to_vec(),
            serving: serving.clone(),
        });
    }
}

/// One reconcile's input and the serving plugin's plan, waiting for the
/// shadow.
pub struct ShadowCall {
    input: v3::ReconcileInput,
    name: String,
    namespace: String,
    uid: String,
    owned: Vec<BTreeMap<String, String>>,
    serving: Plan,
}

impl ShadowCall {
    fn object(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A shadow plugin at work: its queue and the task that works it (stopped
/// when this is dropped; a call running ends at its deadline).
pub struct Shadow {
    plugin: Arc<LoadedPlugin>,
    rules: ShadowRules,
    calls: mpsc::Sender<ShadowCall>,
    figures: Arc<ShadowFigures>,
    reporting: bool,
    /// Where the `ShadowCallsDropped` Warnings go, and their bound.
    regarding: ObjectReference,
    dropped_events: Mutex<EventBound>,
    _worker: AbortOnDrop,
}

/// Comparisons a reporting shadow keeps for its reader before dropping more.
pub const REPORTED_COMPARISONS: usize = 1024;

impl Shadow {
    /// Starts `plugin` as a shadow held to `rules` with room for `queue`
    /// waiting calls; refusals are Warnings on `regarding` (the resource).
    pub fn start(
        plugin: Arc<LoadedPlugin>,
        rules: ShadowRules,
        queue: usize,
        regarding: ObjectReference,
    ) -> Arc<Self> {
        Self::start_with(plugin, rules, queue, regarding, None)
    }

    /// The stable plugin as a shadow on a canary's cohort
    /// (`spec.rollout.shadowStable`): each comparison is reported on the
    /// returned channel (true: the outputs differed, or the stable plugin
    /// failed; a refused output is not compared) for the rollout's judge,
    /// and kept out of the `spec.shadow` metrics and Events.
    pub fn start_reporting(
        stable: Arc<LoadedPlugin>,
        rules: ShadowRules,
        regarding: ObjectReference,
    ) -> (Arc<Self>, mpsc::Receiver<bool>) {
        let (report, reports) = mpsc::channel(REPORTED_COMPARISONS);
        let queue = crate::crd::controller::DEFAULT_SHADOW_QUEUE as usize;
        let shadow = Self::start_with(stable, rules, queue, regarding, Some(report));
        (shadow, reports)
    }

    fn start_with(
        plugin: Arc<LoadedPlugin>,
        rules: ShadowRules,
        queue: usize,
        regarding: ObjectReference,
        report: Option<mpsc::Sender<bool>>,
    ) -> Arc<Self> {
        let (calls, waiting) = mpsc::channel(queue.max(1));
        let figures = Arc::new(ShadowFigures::new(&plugin));
        let reporting = report.is_some();
        let worker = Worker {
            plugin: plugin.clone(),
            rules: rules.clone(),
            figures: figures.clone(),
            regarding: regarding.clone(),
            events: Mutex::new(EventBound::default()),
            report,
        };
        let task = tokio::spawn(worker.run(waiting));
        Arc::new(Self {
            plugin,
            rules,
            calls,
            figures,
            reporting,
            regarding,
            dropped_events: Mutex::new(EventBound::default()),
            _worker: AbortOnDrop::from(task),
        })
    }

    /// Takes a place in the queue and a copy of the input the serving
    /// plugin was called with (`lent`), if there is room (else the call is
    /// counted as dropped). Never waits.
    pub fn reserve(&self, lent: Option<&v3::ReconcileInput>) -> Option<Reserved> {
        let input = lent?;
        match self.calls.clone().try_reserve_owned() {
            Ok(permit) => Some(Reserved {
                permit,
                input: input.clone(),
            }),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.figures.dropped.fetch_add(1, Ordering::Relaxed);
                self.figures.touch();
                if !self.reporting {
                    self.rules
                        .metrics
                        .declared_shadow(&self.rules.controller, "dropped", &[]);
                    self.dropped_event(&input.parent.metadata);
                }
                None
            }
            Err(mpsc::error::TrySendError::Closed(_)) => None,
        }
    }

    /// A Warning naming [`QUEUE_FULL_RULE`], unless one went within the
    /// last minute (never waits: the Event queue drops when full).
    fn dropped_event(&self, parent: &v3::ObjectMeta) {
        let Some(held) = self.dropped_events.lock_unpoisoned().admit(Instant::now()) else {
            return;
        };
        let object = format!("{}/{}", parent.namespace, parent.name);
        tracing::warn!(controller = %self.rules.controller, object, shadow = %self.plugin.describe(),
            rule = QUEUE_FULL_RULE, "the shadow's queue is full; shadow calls are dropped");
        let note = dropped_note(
            &self.plugin.describe(),
            self.calls.max_capacity(),
            &object,
            held,
        );
        self.rules.events.send(QueuedEvent {
            event: Event {
                type_: EventType::Warning,
                reason: DROPPED_REASON.into(),
                note: Some(plugin_text::escape_within(&note, 1024)),
                action: "Shadow".into(),
                secondary: None,
            },
            regarding: self.regarding.clone(),
            object: self.rules.controller.clone(),
        });
    }

    /// The shadow plugin.
    pub fn plugin(&self) -> &Arc<LoadedPlugin> {
        &self.plugin
    }

    /// Its figures.
    pub fn figures(&self) -> &Arc<ShadowFigures> {
        &self.figures
    }
}

/// What a shadow did since it started.
pub struct ShadowFigures {
    plugin: String,
    digest: String,
    since: String,
    agreed: AtomicU64,
    differed: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    /// Bumped by every change (the supervisor writes the status when it moved).
    version: AtomicU64,
    last: Mutex<(Option<ShadowFinding>, Option<ShadowFinding>)>,
}

impl ShadowFigures {
    fn new(plugin: &LoadedPlugin) -> Self {
        Self {
            plugin: plugin.describe(),
            digest: plugin.digest().to_string(),
            since: now_rfc3339(),
            agreed: AtomicU64::new(0),
            differed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            version: AtomicU64::new(0),
            last: Mutex::new((None, None)),
        }
    }

    fn touch(&self) {
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// A number that moves with every change.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    /// The figures as `status.shadow` shows them.
    pub fn status(&self) -> ShadowStatus {
        let (agreed, differed, refused, failed) = (
            self.agreed.load(Ordering::Relaxed),
            self.differed.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        );
        let (last_difference, last_refused) = self.last.lock_unpoisoned().clone();
        ShadowStatus {
            plugin: self.plugin.clone(),
            digest: self.digest.clone(),
            since: self.since.clone(),
            calls: agreed + differed + refused + failed,
            agreed,
            differed,
            refused,
            failed,
            dropped: self.dropped.load(Ordering::Relaxed),
            last_difference,
            last_refused,
            last_refusal: None,
        }
    }
}

/// The note of a `ShadowCallsDropped` Warning: the call for `object`
/// dropped, `held` more since the last such Event.
fn dropped_note(shadow: &str, queue: usize, object: &str, held: u64) -> String {
    let mut note = format!(
        "shadow plugin {shadow}: its queue of {queue} calls is full, so its call for {object} \
         is dropped by rule {QUEUE_FULL_RULE} (the shadow is slower than the serving plugin's \
         reconciles; nothing is compared for that call; the serving plugin is not affected; \
         a larger spec.shadow.queue holds longer bursts)"
    );
    if held > 0 {
        note.push_str(&format!(
            "; {held} more calls dropped since the last such Event"
        ));
    }
    note
}

/// Holds one kind of shadow Warning (`ShadowOutputRefused`,
/// `ShadowCallsDropped`) to one per [`REFUSED_EVENT_EVERY`].
#[derive(Default)]
struct EventBound {
    last: Option<Instant>,
    held: u64,
}

impl EventBound {
    /// Whether an Event may go now; else it is counted as held back.
    /// Returns the count held back since the last one that went.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < REFUSED_EVENT_EVERY)
        {
            self.held += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held))
    }
}

/// The task that calls the shadow, one call at a time.
struct Worker {
    plugin: Arc<LoadedPlugin>,
    rules: ShadowRules,
    figures: Arc<ShadowFigures>,
    regarding: ObjectReference,
    events: Mutex<EventBound>,
    /// Where a reporting shadow sends each comparison (true: differed).
    report: Option<mpsc::Sender<bool>>,
}

/// How one shadow call ended.
enum Outcome {
    Agreed,
    Differed(Vec<Difference>),
    Refused { rule: String, message: String },
    Failed(String),
}

impl Worker {
    async fn run(self, mut waiting: mpsc::Receiver<ShadowCall>) {
        while let Some(call) = waiting.recv().await {
            let object = call.object();
            let outcome = self.call(call).await;
            match &self.report {
                Some(report) => self.report(report, &object, &outcome),
                None => self.count(&object, outcome),
            }
        }
    }

    /// Sends a reporting shadow's comparison to the judge (a full channel
    /// drops it: its reader lags).
    fn report(&self, report: &mpsc::Sender<bool>, object: &str, outcome: &Outcome) {
        let differed = match outcome {
            Outcome::Agreed => false,
            Outcome::Differed(differences) => {
                tracing::debug!(controller = %self.rules.controller, object, differences = %summary(differences), "the canary's output differs from the stable plugin's");
                true
            }
            Outcome::Failed(_) => true,
            Outcome::Refused { .. } => return,
        };
        let _ = report.try_send(differed);
    }

    /// Calls the shadow on `call`'s input, checks its output and compares.
    async fn call(&self, call: ShadowCall) -> Outcome {
        let object = call.object();
        let ShadowCall {
            input,
            name,
            namespace,
            uid,
            owned,
            serving,
        } = call;
        let output = match self.plugin.reconcile_generic(input, object).await {
            Ok(output) => output,
            Err(err) => return Outcome::Failed(err.to_string()),
        };
        let rules = &self.rules;
        let declared = Declared {
            controller: &rules.controller,
            parent: &rules.parent,
            children: &rules.children,
            policy: &rules.policy,
        };
        let about = Parent {
            name: &name,
            namespace: &namespace,
            uid: &uid,
        };
        match checks::check(&declared, &about, &owned, output) {
            Err(refusal) => Outcome::Refused {
                rule: refusal.rule.to_string(),
                message: refusal.message,
            },
            Ok(shadow) => {
                let kinds: Vec<&str> = rules
                    .children
                    .iter()
                    .map(|(kind, ..)| kind.declared.kind.as_str())
                    .collect();
                let differences = differences(&serving, &shadow, &owned, &kinds);
                if differences.is_empty() {
                    Outcome::Agreed
                } else {
                    Outcome::Differed(differences)
                }
            }
        }
    }

    /// Counts `outcome` in the figures and the metrics, logs it, and says
    /// a refusal in a Warning (rate-bounded).
    fn count(&self, object: &str, outcome: Outcome) {
        let figures = &self.figures;
        let controller = self.rules.controller.as_str();
        let shadow = self.plugin.describe();
        let metrics = &self.rules.metrics;
        match outcome {
            Outcome::Agreed => {
                figures.agreed.fetch_add(1, Ordering::Relaxed);
                metrics.declared_shadow(controller, "agreed", &[]);
                tracing::debug!(controller, object, %shadow, "the shadow agrees");
            }
            Outcome::Differed(differences) => {
                figures.differed.fetch_add(1, Ordering::Relaxed);
                let parts: BTreeSet<&str> = differences.iter().map(|d| d.part).collect();
                let parts: Vec<&str> = parts.into_iter().collect();
                metrics.declared_shadow(controller, "differed", &parts);
                let message = summary(&differences);
                tracing::info!(controller, object, %shadow, differences = %message, "the shadow plugin proposes something else (not applied)");
                figures.last.lock_unpoisoned().0 = Some(finding(object, None, message));
            }
            Outcome::Refused { rule, message } => {
                figures.refused.fetch_add(1, Ordering::Relaxed);
                metrics.declared_shadow(controller, "refused", &[]);
                let message = plugin_text::escape_within(&message, SHOWN_MAX);
                tracing::warn!(controller, object, %shadow, %rule, "the shadow's output is refused (not compared, not applied): {message}");
                self.refused_event(object, &rule, &message);
                figures.last.lock_unpoisoned().1 = Some(finding(object, Some(rule), message));
            }
            Outcome::Failed(error) => {
                figures.failed.fetch_add(1, Ordering::Relaxed);
                metrics.declared_shadow(controller, "failed", &[]);
                tracing::warn!(controller, object, %shadow, error = %plugin_text::shown(&error), "the shadow plugin failed (the serving plugin is not affected)");
            }
        }
        figures.touch();
    }

    /// A Warning naming the rule, unless one went within the last minute.
    fn refused_event(&self, object: &str, rule: &str, message: &str) {
        let Some(held) = self.events.lock_unpoisoned().admit(Instant::now()) else {
            return;
        };
        let mut note = format!(
            "shadow plugin {}: its output for {object} is refused by rule {rule}: {message} \
             (not applied; the serving plugin is not affected)",
            self.plugin.describe()
        );
        if held > 0 {
            note.push_str(&format!("; {held} more refusals since the last such Event"));
        }
        self.rules.events.send(QueuedEvent {
            event: Event {
                type_: EventType::Warning,
                reason: REFUSED_REASON.into(),
                note: Some(plugin_text::escape_within(&note, 1024)),
                action: "Shadow".into(),
                secondary: None,
            },
            regarding: self.regarding.clone(),
            object: self.rules.controller.clone(),
        });
    }
}

fn finding(object: &str, rule: Option<String>, message: String) -> ShadowFinding {
    ShadowFinding {
        object: object.to_string(),
        rule,
        message,
        time: now_rfc3339(),
    }
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// One part of two plans that differs.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// `creates`, `updates`, `deletes`, `status`, `events` or `requeue`.
    pub part: &'static str,
    /// What differs, in short (plugin text escaped).
    pub what: String,
}

/// `part: what; part: what`, escaped and bounded.
pub fn summary(differences: &[Difference]) -> String {
    let text = differences
        .iter()
        .map(|d| format!("{}: {}", d.part, d.what))
        .collect::<Vec<_>>()
        .join("; ");
    plugin_text::escape_within(&text, SHOWN_MAX)
}

/// Where the shadow's checked plan differs from the serving plugin's,
/// order-insensitive: children applied that exist (`owned`, by kind) are
/// updates, the others creates; `kinds` names each declared kind.
pub fn differences(
    serving: &Plan,
    shadow: &Plan,
    owned: &[BTreeMap<String, String>],
    kinds: &[&str],
) -> Vec<Difference> {
    let exists = |kind: usize, name: &str| owned.get(kind).is_some_and(|o| o.contains_key(name));
    let applies = |plan: &Plan, update: bool| -> BTreeMap<(usize, String), Value> {
        plan.applies
            .iter()
            .filter(|a| exists(a.kind, &a.name) == update)
            .map(|a| ((a.kind, a.name.clone()), a.object.clone()))
            .collect()
    };
    let mut out = Vec::new();
    for (part, update) in [("creates", false), ("updates", true)] {
        if let Some(what) =
            compare_children(&applies(serving, update), &applies(shadow, update), kinds)
        {
            out.push(Difference { part, what });
        }
    }
    let deletes = |plan: &Plan| -> BTreeMap<(usize, String), Value> {
        plan.deletes
            .iter()
            .map(|d| ((d.kind, d.name.clone()), Value::Null))
            .collect()
    };
    if let Some(what) = compare_children(&deletes(serving), &deletes(shadow), kinds) {
        out.push(Difference {
            part: "deletes",
            what,
        });
    }
    if serving.status != shadow.status {
        let null = Value::Null;
        let (a, b) = (
            serving.status.as_ref().unwrap_or(&null),
            shadow.status.as_ref().unwrap_or(&null),
        );
        out.push(Difference {
            part: "status",
            what: value_difference(a, b),
        });
    }
    let events = |plan: &Plan| {
        let mut all = plan.events.clone();
        all.sort();
        all
    };
    if events(serving) != events(shadow) {
        out.push(Difference {
            part: "events",
            what: format!(
                "serving {} ({}) vs shadow {} ({})",
                serving.events.len(),
                reasons(serving),
                shadow.events.len(),
                reasons(shadow)
            ),
        });
    }
    if serving.requeue_after != shadow.requeue_after {
        out.push(Difference {
            part: "requeue",
            what: format!(
                "serving {:?} vs shadow {:?}",
                serving.requeue_after, shadow.requeue_after
            ),
        });
    }
    out
}

fn reasons(plan: &Plan) -> String {
    let reasons: BTreeSet<&str> = plan.events.iter().map(|(_, r, _)| r.as_str()).collect();
    reasons.into_iter().collect::<Vec<_>>().join(", ")
}

/// What differs between two sets of children (kind, name → body): those
/// only one side names, then those whose bodies differ and where first.
fn compare_children(
    serving: &BTreeMap<(usize, String), Value>,
    shadow: &BTreeMap<(usize, String), Value>,
    kinds: &[&str],
) -> Option<String> {
    let name = |(kind, name): &(usize, String)| {
        format!("{} {}", kinds.get(*kind).copied().unwrap_or("?"), name)
    };
    let only = |a: &BTreeMap<(usize, String), Value>, b: &BTreeMap<(usize, String), Value>| {
        a.keys()
            .filter(|k| !b.contains_key(*k))
            .map(name)
            .collect::<Vec<_>>()
    };
    let mut parts = Vec::new();
    let serving_only = only(serving, shadow);
    if !serving_only.is_empty() {
        parts.push(format!(
            "only the serving plugin: {}",
            listed(&serving_only)
        ));
    }
    let shadow_only = only(shadow, serving);
    if !shadow_only.is_empty() {
        parts.push(format!("only the shadow: {}", listed(&shadow_only)));
    }
    let differing: Vec<String> = serving
        .iter()
        .filter_map(|(key, body)| {
            let other = shadow.get(key)?;
            (other != body).then(|| format!("{} ({})", name(key), value_difference(body, other)))
        })
        .collect();
    if !differing.is_empty() {
        parts.push(format!("bodies differ: {}", listed(&differing)));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn listed(names: &[String]) -> String {
    let mut shown: Vec<String> = names.iter().take(NAMES_SHOWN).cloned().collect();
    if names.len() > NAMES_SHOWN {
        shown.push(format!("… and {} more", names.len() - NAMES_SHOWN));
    }
    shown.join(", ")
}

/// The first place two JSON values differ: `at /path: serving X vs shadow Y`
/// (each value bounded).
pub fn value_difference(serving: &Value, shadow: &Value) -> String {
    let (path, a, b) = first_difference(serving, shadow, String::new());
    let show = |v: Option<&Value>| {
        v.map_or("absent".to_string(), |v| {
            plugin_text::escape_within(&v.to_string(), 80)
        })
    };
    let path = if path.is_empty() {
        "/".to_string()
    } else {
        path
    };
    format!("at {path}: serving {} vs shadow {}", show(a), show(b))
}

fn first_difference<'a>(
    a: &'a Value,
    b: &'a Value,
    path: String,
) -> (String, Option<&'a Value>, Option<&'a Value>) {
    if let (Value::Object(x), Value::Object(y)) = (a, b) {
        let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
        for key in keys {
            let here = format!("{path}/{key}");
            match (x.get(key), y.get(key)) {
                (Some(p), Some(q)) if p == q => {}
                (Some(p), Some(q)) => return first_difference(p, q, here),
                (p, q) => return (here, p, q),
            }
        }
    }
    if let (Value::Array(x), Value::Array(y)) = (a, b)
        && x.len() == y.len()
        && let Some(at) = (0..x.len()).find(|&i| x[i] != y[i])
    {
        return first_difference(&x[at], &y[at], format!("{path}/{at}"));
    }
    (path, Some(a), Some(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declared::checks::{ChildApply, ChildDelete};
    use serde_json::json;

    fn apply(kind: usize, name: &str, object: Value) -> ChildApply {
        ChildApply {
            kind,
            name: name.into(),
            object,
        }
    }

    fn owned(names: &[&str]) -> Vec<BTreeMap<String, String>> {
        vec![
            names
                .iter()
                .map(|n| (n.to_string(), format!("uid-{n}")))
                .collect(),
            BTreeMap::new(),
        ]
    }

    #[test]
    fn the_same_plan_in_another_order_agrees() {
        let serving = Plan {
            applies: vec![apply(0, "a", json!({"x": 1})), apply(1, "b", json!({}))],
            events: vec![
                (false, "One".into(), "1".into()),
                (true, "Two".into(), "2".into()),
            ],
            status: Some(json!({"ready": 1})),
            ..Plan::default()
        };
        let mut shadow = serving.clone();
        shadow.applies.reverse();
        shadow.events.reverse();
        assert!(
            differences(
                &serving,
                &shadow,
                &owned(&["a"]),
                &["Deployment", "Service"]
            )
            .is_empty()
        );
    }

    #[test]
    fn updates_creates_deletes_and_status_are_told_apart() {
        let serving = Plan {
            applies: vec![
                apply(
                    0,
                    "a",
                    json!({"metadata": {"annotations": {}}, "spec": {"replicas": 1}}),
                ),
                apply(1, "new", json!({})),
            ],
            deletes: vec![ChildDelete {
                kind: 0,
                name: "old".into(),
                uid: "uid-old".into(),
            }],
            status: Some(json!({"ready": 1})),
            ..Plan::default()
        };
        let shadow = Plan {
            applies: vec![apply(
                0,
                "a",
                json!({"metadata": {"annotations": {"build": "v2"}}, "spec": {"replicas": 1}}),
            )],
            status: Some(json!({"ready": 2})),
            requeue_after: Some(Duration::from_secs(5)),
            ..Plan::default()
        };
        let found = differences(
            &serving,
            &shadow,
            &owned(&["a", "old"]),
            &["Deployment", "Service"],
        );
        let parts: Vec<&str> = found.iter().map(|d| d.part).collect();
        assert_eq!(
            parts,
            ["creates", "updates", "deletes", "status", "requeue"]
        );
        assert_eq!(found[0].what, "only the serving plugin: Service new");
        assert_eq!(
            found[1].what,
            "bodies differ: Deployment a (at /metadata/annotations/build: serving absent vs shadow \"v2\")"
        );
        assert_eq!(found[2].what, "only the serving plugin: Deployment old");
        assert_eq!(found[3].what, "at /ready: serving 1 vs shadow 2");
        let text = summary(&found);
        assert!(
            text.starts_with("creates: only the serving plugin: Service new; updates:"),
            "{text}"
        );
    }

    #[test]
    fn plugin_text_in_a_difference_is_escaped_and_bounded() {
        let serving = Plan {
            status: Some(json!({"m": "a\nb"})),
            ..Plan::default()
        };
        let shadow = Plan {
            status: Some(json!({"m": "x".repeat(5000)})),
            ..Plan::default()
        };
        let text = summary(&differences(&serving, &shadow, &[], &[]));
        assert!(!text.contains('\n'), "{text}");
        assert!(text.len() <= SHOWN_MAX + 8, "{}", text.len());
    }

    #[test]
    fn a_dropped_call_names_the_rule_the_queue_and_the_drops_held() {
        let first = dropped_note("shadow.wasm", 8, "ns/a", 0);
        assert!(first.contains(QUEUE_FULL_RULE), "{first}");
        assert!(first.contains("queue of 8 calls"), "{first}");
        assert!(first.contains("ns/a"), "{first}");
        assert!(!first.contains("since the last"), "{first}");
        let later = dropped_note("shadow.wasm", 8, "ns/b", 41);
        assert!(
            later.ends_with("; 41 more calls dropped since the last such Event"),
            "{later}"
        );
    }

    #[test]
    fn refusal_events_go_once_a_minute_and_say_how_many_were_held() {
        let mut bound = EventBound::default();
        let start = Instant::now();
        assert_eq!(bound.admit(start), Some(0));
        assert_eq!(bound.admit(start + Duration::from_secs(10)), None);
        assert_eq!(bound.admit(start + Duration::from_secs(30)), None);
        assert_eq!(bound.admit(start + Duration::from_secs(61)), Some(2));
        assert_eq!(bound.admit(start + Duration::from_secs(62)), None);
    }
}
