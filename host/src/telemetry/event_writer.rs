//! Writing Events to `events.k8s.io/v1` for the event worker ([`super::events`]).
//!
//! A new Event is created. The same Event again (same type, action and
//! reason, about the same object at the same resourceVersion, the identity
//! kube's `Recorder` and client-go's recorder use) within [`SERIES_WINDOW`]
//! becomes a series patch on the first: `series.count` and
//! `series.lastObservedTime` only. If that Event is gone (the API server
//! keeps Events an hour), a new one is created.
//!
//! Who speaks is part of that identity: an Event a plugin asked for (action
//! [`PLUGIN_ACTION`]) is written with the reporting instance
//! `<instance>/plugin` and never joins a series of the host's; and a host
//! Warning is the same Event only with the same note (a hash of it is in
//! the key), so a new set of broken rules is a new Event that says so
//! rather than a count on an old one.
//!
//! Of each Event written the writer remembers only what a series patch
//! needs: its name and namespace, how often it was seen and when last, under
//! a compact key (about 300 bytes in all). kube's `Recorder`, which this
//! replaces, kept the whole `Event` and its key (about 3 KiB each), for every
//! Event of the last 6 minutes without bound: 14 MiB at the scale benchmark's
//! N = 1000 (`cargo test -p wasm-operator --test cache_footprint`). At most
//! [`RECENT_CAPACITY`] are remembered; past that the least recently seen
//! quarter is forgotten, so a flood of distinct Events (say a plugin naming a
//! new reason every call) cannot grow the host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, ResourceExt};

use crate::locks::MutexExt;
use crate::plugin_text::{MAX_EVENT_NOTE, MAX_EVENT_REASON, escape_within};

/// The `action` of every Event a plugin asked for (the host's own Events
/// never use it).
pub const PLUGIN_ACTION: &str = "PluginEvent";

/// How long a repeat still joins the first Event's series (kube's and
/// client-go's value).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Most Events remembered for series at once.
pub const RECENT_CAPACITY: usize = 4096;

/// Longest `reportingInstance` Kubernetes accepts.
const MAX_REPORTING_INSTANCE: usize = 128;

/// Who writes the Events: `reportingController` and `reportingInstance`.
#[derive(Debug, Clone)]
pub struct Reporter {
    /// The controller's name (`reportingController`).
    pub controller: String,
    /// This replica (`reportingInstance`), e.g. the pod's name; the
    /// controller's name when unset.
    pub instance: Option<String>,
}

/// Writes Events and turns repeats into series. Cheap to clone; clones share
/// what they remember.
#[derive(Clone)]
pub struct EventWriter {
    client: Client,
    controller: String,
    instance: String,
    recent: Arc<Mutex<RecentEvents>>,
}

impl EventWriter {
    /// A writer for `reporter`, remembering at most [`RECENT_CAPACITY`] Events.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        let instance = reporter
            .instance
            .unwrap_or_else(|| reporter.controller.clone());
        Self {
            client,
            controller: reporter.controller,
            instance,
            recent: Arc::new(Mutex::new(RecentEvents::new(
                RECENT_CAPACITY,
                SERIES_WINDOW,
            ))),
        }
    }

    /// Writes `event` about `regarding`: creates it, or patches the series of
    /// the same Event written within [`SERIES_WINDOW`].
    pub async fn write(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = RepeatKey::new(event, regarding);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let repeat = self.recent().repeat(&key, Instant::now());
        if let Some(Repeat { name, count }) = repeat {
            let series = serde_json::json!({
                "series": {
                    "count": count,
                    "lastObservedTime": MicroTime(Timestamp::now()),
                }
            });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => return Ok(()),
                // Expired (or deleted): start over with a new Event.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err),
            }
        }
        let created = api
            .create(&PostParams::default(), &self.new_event(event, regarding))
            .await?;
        self.recent()
            .remember(key, created.name_any().into(), Instant::now());
        Ok(())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, RecentEvents> {
        self.recent.lock_unpoisoned()
    }

    /// The Event as created: named `<object>.<nanoseconds in hex>` like
    /// client-go's, in the object's namespace; its texts escaped and bounded
    /// again here (the sink did it already; a direct caller may not have).
    fn new_event(&self, event: &Event, regarding: &ObjectReference) -> K8sEvent {
        let now = Timestamp::now();
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(type_name(event.type_).to_string()),
            action: Some(escape_within(&event.action, MAX_EVENT_REASON)),
            reason: Some(escape_within(&event.reason, MAX_EVENT_REASON)),
            note: event
                .note
                .as_deref()
                .map(|n| escape_within(n, MAX_EVENT_NOTE)),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(reporting_instance(&self.instance, event)),
            ..K8sEvent::default()
        }
    }
}

/// Who reports `event`: this replica (`instance`), or for an Event a plugin
/// asked for, `<instance>/plugin`.
pub fn reporting_instance(instance: &str, event: &Event) -> String {
    if event.action != PLUGIN_ACTION {
        return instance.to_string();
    }
    const SUFFIX: &str = "/plugin";
    let mut end = instance.len().min(MAX_REPORTING_INSTANCE - SUFFIX.len());
    while !instance.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &instance[..end])
}

fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// What makes two Events the same for a series: type, action (which tells
/// a plugin's Events from the host's), reason, the object (kind, namespace,
/// name, UID) at its resourceVersion, the related object if any, and for
/// the host's Warnings a hash of the note. Kept as one string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepeatKey(Box<str>);

impl RepeatKey {
    /// The key of `event` about `regarding`.
    pub fn new(event: &Event, regarding: &ObjectReference) -> Self {
        let mut key = format!(
            "{}\t{}\t{}\n{}",
            type_name(event.type_),
            event.action,
            event.reason,
            reference_key(regarding)
        );
        if let Some(related) = &event.secondary {
            key.push('\n');
            key.push_str(&reference_key(related));
        }
        if event.type_ == EventType::Warning && event.action != PLUGIN_ACTION {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::hash::DefaultHasher::new();
            event.note.hash(&mut hasher);
            key.push_str(&format!("\n{:016x}", hasher.finish()));
        }
        Self(key.into())
    }
}

fn reference_key(r: &ObjectReference) -> String {
    fn field(f: &Option<String>) -> &str {
        f.as_deref().unwrap_or("")
    }
    [
        field(&r.api_version),
        field(&r.kind),
        field(&r.namespace),
        field(&r.name),
        field(&r.uid),
        field(&r.resource_version),
    ]
    .join("\t")
}

/// An Event the writer created: its name, how often it has been seen, when
/// last.
#[derive(Debug)]
struct Written {
    name: Box<str>,
    count: i32,
    last_seen: Instant,
}

/// A repeat of a remembered Event: patch `name`'s series to `count`.
#[derive(Debug, PartialEq, Eq)]
pub struct Repeat {
    /// The Event to patch.
    pub name: String,
    /// Its new `series.count` (2 for the first repeat).
    pub count: i32,
}

/// The Events written recently, for series: bounded in number and age.
#[derive(Debug)]
pub struct RecentEvents {
    written: HashMap<RepeatKey, Written>,
    capacity: usize,
    window: Duration,
}

impl RecentEvents {
    /// Remembers at most `capacity` Events, each for `window` after it was
    /// last seen.
    pub fn new(capacity: usize, window: Duration) -> Self {
        Self {
            written: HashMap::new(),
            capacity: capacity.max(1),
            window,
        }
    }

    /// How many Events are remembered.
    pub fn len(&self) -> usize {
        self.written.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.written.is_empty()
    }

    /// If `key` was written within the window before `now`, counts this
    /// repeat and says which Event to patch; otherwise `None` (create one).
    pub fn repeat(&mut self, key: &RepeatKey, now: Instant) -> Option<Repeat> {
        let window = self.window;
        let written = self.written.get_mut(key)?;
        if now.saturating_duration_since(written.last_seen) > window {
            self.written.remove(key);
            return None;
        }
        written.count = written.count.saturating_add(1);
        written.last_seen = now;
        Some(Repeat {
            name: written.name.to_string(),
            count: written.count,
        })
    }

    /// Remembers that `key` was just created as `name`. When full, forgets
    /// what is past the window and, if still full, the least recently seen
    /// quarter.
    pub fn remember(&mut self, key: RepeatKey, name: Box<str>, now: Instant) {
        if self.written.len() >= self.capacity && !self.written.contains_key(&key) {
            self.make_room(now);
        }
        self.written.insert(
            key,
            Written {
                name,
                count: 1,
                last_seen: now,
            },
        );
    }

    fn make_room(&mut self, now: Instant) {
        let window = self.window;
        self.written
            .retain(|_, w| now.saturating_duration_since(w.last_seen) <= window);
        if self.written.len() < self.capacity {
            return;
        }
        let mut seen: Vec<Instant> = self.written.values().map(|w| w.last_seen).collect();
        let quarter = (seen.len() / 4).max(1);
        let (_, &mut cutoff, _) = seen.select_nth_unstable(quarter - 1);
        self.written.retain(|_, w| w.last_seen > cutoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some("n".into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn object(name: &str, resource_version: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("jinghzhu.io/v1".into()),
            kind: Some("Jinghzhu".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some(resource_version.into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn the_same_event_again_joins_the_series_of_the_first() {
        let mut recent = RecentEvents::new(16, SERIES_WINDOW);
        let t0 = Instant::now();
        let key = RepeatKey::new(&event("Scaled"), &object("web", "7"));
        assert_eq!(recent.repeat(&key, t0), None, "never written: create");
        recent.remember(key.clone(), "web.1".into(), t0);
        let again = |recent: &mut RecentEvents, secs| {
            recent.repeat(
                &RepeatKey::new(&event("Scaled"), &object("web", "7")),
                t0 + Duration::from_secs(secs),
            )
        };
        assert_eq!(
            again(&mut recent, 1),
            Some(Repeat {
                name: "web.1".into(),
                count: 2
            })
        );
        assert_eq!(again(&mut recent, 2).map(|r| r.count), Some(3));
    }

    #[test]
    fn another_reason_object_or_resource_version_is_another_event() {
        let mut recent = RecentEvents::new(16, SERIES_WINDOW);
        let now = Instant::now();
        recent.remember(
            RepeatKey::new(&event("Scaled"), &object("web", "7")),
            "web.1".into(),
            now,
        );
        for key in [
            RepeatKey::new(&event("Other"), &object("web", "7")),
            RepeatKey::new(&event("Scaled"), &object("db", "7")),
            RepeatKey::new(&event("Scaled"), &object("web", "8")),
            RepeatKey::new(
                &Event {
                    type_: EventType::Warning,
                    ..event("Scaled")
                },
                &object("web", "7"),
            ),
        ] {
            assert_eq!(recent.repeat(&key, now), None, "{key:?}");
        }
    }

    #[test]
    fn plugin_events_never_join_the_host_s_and_host_warnings_differ_by_note() {
        let mut recent = RecentEvents::new(16, SERIES_WINDOW);
        let now = Instant::now();
        let web = object("web", "7");
        recent.remember(
            RepeatKey::new(&event("SuccessfulCreate"), &web),
            "web.1".into(),
            now,
        );
        let plugin = Event {
            action: PLUGIN_ACTION.into(),
            ..event("SuccessfulCreate")
        };
        assert_eq!(recent.repeat(&RepeatKey::new(&plugin, &web), now), None);

        let warning = |action: &str, note: &str| Event {
            type_: EventType::Warning,
            action: action.into(),
            note: Some(note.into()),
            ..event("RejectedOutput")
        };
        let first = warning("Reconcile", "breaks events/reserved-reason");
        recent.remember(RepeatKey::new(&first, &web), "web.2".into(), now);
        assert!(recent.repeat(&RepeatKey::new(&first, &web), now).is_some());
        let other_rules = warning("Reconcile", "breaks names/pod-name");
        assert_eq!(
            recent.repeat(&RepeatKey::new(&other_rules, &web), now),
            None
        );
        // A plugin's Warnings are one series whatever they say.
        let plugin_a = warning(PLUGIN_ACTION, "a");
        recent.remember(RepeatKey::new(&plugin_a, &web), "web.3".into(), now);
        let plugin_b = warning(PLUGIN_ACTION, "b");
        assert!(
            recent
                .repeat(&RepeatKey::new(&plugin_b, &web), now)
                .is_some()
        );
    }

    #[test]
    fn plugin_events_say_so_in_the_reporting_instance() {
        let host = event("Scaled");
        assert_eq!(reporting_instance("replica-a", &host), "replica-a");
        let plugin = Event {
            action: PLUGIN_ACTION.into(),
            ..event("Scaled")
        };
        assert_eq!(reporting_instance("replica-a", &plugin), "replica-a/plugin");
        let long = "r".repeat(200);
        assert_eq!(
            reporting_instance(&long, &plugin).len(),
            MAX_REPORTING_INSTANCE
        );
    }

    #[test]
    fn a_repeat_after_the_window_starts_a_new_event() {
        let window = Duration::from_secs(60);
        let mut recent = RecentEvents::new(16, window);
        let t0 = Instant::now();
        let key = RepeatKey::new(&event("Scaled"), &object("web", "7"));
        recent.remember(key.clone(), "web.1".into(), t0);
        // Seen again within the window: the window restarts from there.
        assert!(recent.repeat(&key, t0 + Duration::from_secs(50)).is_some());
        assert!(recent.repeat(&key, t0 + Duration::from_secs(100)).is_some());
        assert_eq!(recent.repeat(&key, t0 + Duration::from_secs(161)), None);
        assert!(recent.is_empty(), "an expired Event is forgotten");
    }

    #[test]
    fn a_flood_of_distinct_events_stays_within_capacity_and_keeps_the_newest() {
        let mut recent = RecentEvents::new(100, SERIES_WINDOW);
        let t0 = Instant::now();
        let key = |i: usize| RepeatKey::new(&event(&format!("Reason{i}")), &object("web", "7"));
        for i in 0..1000 {
            recent.remember(
                key(i),
                format!("web.{i}").into(),
                t0 + Duration::from_millis(i as u64),
            );
            assert!(recent.len() <= 100, "{} remembered", recent.len());
        }
        let now = t0 + Duration::from_secs(1);
        assert!(
            recent.repeat(&key(999), now).is_some(),
            "the newest is kept"
        );
        assert_eq!(recent.repeat(&key(0), now), None, "the oldest is forgotten");
    }

    #[test]
    fn expired_events_make_room_before_recent_ones_are_forgotten() {
        let window = Duration::from_secs(60);
        let mut recent = RecentEvents::new(4, window);
        let t0 = Instant::now();
        let key = |i: usize| RepeatKey::new(&event(&format!("R{i}")), &object("web", "7"));
        recent.remember(key(0), "a".into(), t0);
        recent.remember(key(1), "b".into(), t0);
        let later = t0 + Duration::from_secs(30);
        recent.remember(key(2), "c".into(), later);
        recent.remember(key(3), "d".into(), later);
        // Full; the first two have expired by now.
        let now = t0 + Duration::from_secs(70);
        recent.remember(key(4), "e".into(), now);
        assert_eq!(recent.len(), 3);
        for i in [2, 3, 4] {
            assert!(recent.repeat(&key(i), now).is_some(), "R{i} kept");
        }
    }
}
