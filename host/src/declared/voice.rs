//! Who speaks for a `PluginController`: the Events about the resource
//! itself (a plugin refused, a rollout decided, a tenant's namespaces
//! refused). Unsharded, the host does. Sharded, every replica supervises
//! every resource and comes to the same refusals, so one replica speaks
//! for all: the holder of shard 0, the one that writes the resource's
//! status ([`super::sharding::writes_resource_status`]); the others only
//! log what they would have said.
//!
//! What stands (the refusal in force of the plugin, of the shadow plugin,
//! of a tenant's namespaces) is kept by every replica until it is
//! withdrawn, and a replica that comes to speak (it took shard 0) says it
//! again once, so a hand-over of shard 0 loses nothing: its status is
//! flushed by the status writer (`StatusOf`), its standing Warnings here.
//! Events about parents are not this room's: they come from the replica
//! reconciling the parent, the holder of the parent's shard.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use crate::crd::controller::PluginController;
use crate::locks::MutexExt;
use crate::shards::Shards;
use crate::telemetry::events::{EventSink, QueuedEvent};

/// What stands on a resource until it is withdrawn, one Event each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Standing {
    /// The last refusal of the serving plugin's source (withdrawn when a
    /// plugin serves).
    Plugin,
    /// The last refusal of the shadow plugin (withdrawn when one runs).
    Shadow,
    /// A tenant's namespaces that did not opt in (withdrawn when none).
    TenantNamespaces,
}

/// Speaks for one resource (see the module's doc).
pub(super) struct Voice {
    sink: EventSink,
    regarding: ObjectReference,
    name: String,
    shards: Option<Shards>,
    state: std::sync::Mutex<Said>,
}

#[derive(Default)]
struct Said {
    /// The term of the hold on shard 0 this replica last spoke in (`0`
    /// unsharded): what stands is said again in a new term only, not
    /// after a renewal that came back late.
    term: Option<u64>,
    standing: BTreeMap<Standing, Utterance>,
}

/// An Event about the resource, as kept until it is sent.
#[derive(Debug, Clone)]
struct Utterance {
    warning: bool,
    reason: String,
    note: String,
    action: String,
}

impl Utterance {
    fn new(warning: bool, reason: &str, note: &str, action: &str) -> Self {
        Self {
            warning,
            reason: reason.to_string(),
            note: note.to_string(),
            action: action.to_string(),
        }
    }

    fn event(self) -> Event {
        Event {
            type_: if self.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: self.reason,
            note: Some(self.note),
            action: self.action,
            secondary: None,
        }
    }
}

impl Voice {
    pub(super) fn new(
        resource: &PluginController,
        sink: EventSink,
        shards: Option<Shards>,
    ) -> Self {
        Self {
            sink,
            regarding: resource.object_ref(&()),
            name: resource.name_any(),
            shards,
            state: std::sync::Mutex::new(Said::default()),
        }
    }

    /// Whether this replica speaks for the resource now.
    pub(super) fn speaks(&self) -> bool {
        super::sharding::writes_resource_status(self.shards.as_ref())
    }

    /// The term of this replica's hold on shard 0 while it speaks (`0`
    /// unsharded); `None` while it does not.
    fn speaking_term(&self) -> Option<u64> {
        let Some(shards) = &self.shards else {
            return Some(0);
        };
        let shard = super::sharding::STATUS_SHARD;
        let term = shards.held().get(&shard).map(|(_, term, _)| *term);
        term.filter(|_| self.speaks())
    }

    /// The replica's shards, to follow their changes (`None` unsharded).
    pub(super) fn shards(&self) -> Option<&Shards> {
        self.shards.as_ref()
    }

    /// Says an Event that passes (a rollout step decided): sent when this
    /// replica speaks, else logged.
    pub(super) fn say(&self, warning: bool, reason: &str, note: &str, action: &str) {
        let event = Utterance::new(warning, reason, note, action);
        let mut said = self.state.lock_unpoisoned();
        if self.catch_up(&mut said) {
            self.send(event);
        } else {
            self.held_back(&event);
        }
    }

    /// Says what stands now for `what` (replacing what stood): sent when
    /// this replica speaks, and said again by the next replica to speak.
    pub(super) fn state(
        &self,
        what: Standing,
        warning: bool,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        let event = Utterance::new(warning, reason, note, action);
        let mut said = self.state.lock_unpoisoned();
        if self.catch_up(&mut said) {
            self.send(event.clone());
        } else {
            self.held_back(&event);
        }
        said.standing.insert(what, event);
    }

    /// `what` no longer stands (a plugin serves again).
    pub(super) fn withdraw(&self, what: Standing) {
        self.state.lock_unpoisoned().standing.remove(&what);
    }

    /// Looks whether this replica came to speak (it took shard 0): then
    /// says once again what stands. Called every second by the supervisor.
    pub(super) fn hand_over(&self) {
        let mut said = self.state.lock_unpoisoned();
        self.catch_up(&mut said);
    }

    /// Whether this replica speaks now; if it did not in this term of its
    /// hold on shard 0, what stands is said again first.
    fn catch_up(&self, said: &mut Said) -> bool {
        let Some(term) = self.speaking_term() else {
            return false;
        };
        if said.term != Some(term) {
            for event in said.standing.values() {
                let mut again = event.clone();
                if self.shards.is_some() {
                    again.note = format!(
                        "{} (said again by the new holder of shard {})",
                        again.note,
                        super::sharding::STATUS_SHARD
                    );
                }
                tracing::info!(controller = %self.name, reason = %again.reason, "this replica speaks for the resource now: saying again what stands");
                self.send(again);
            }
            said.term = Some(term);
        }
        true
    }

    fn held_back(&self, event: &Utterance) {
        tracing::info!(
            controller = %self.name,
            reason = %event.reason,
            note = %event.note,
            "Event not sent from this replica: the holder of shard {} speaks for the resource",
            super::sharding::STATUS_SHARD
        );
    }

    fn send(&self, said: Utterance) {
        self.sink.send(QueuedEvent {
            event: said.event(),
            regarding: self.regarding.clone(),
            object: self.name.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use std::time::Duration;
    use tokio::sync::mpsc::Receiver;
    use tokio::time::Instant;

    fn resource() -> PluginController {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "wasm-operator.io/v1alpha1",
            "kind": "PluginController",
            "metadata": {"name": "c"},
            "spec": {
                "parent": {"apiVersion": "example.com/v1", "kind": "Thing"},
                "source": {"file": {"path": "/p.wasm"}},
            }
        }))
        .expect("a PluginController")
    }

    fn sent(received: &mut Receiver<QueuedEvent>) -> Vec<(String, String)> {
        let mut all = Vec::new();
        while let Ok(queued) = received.try_recv() {
            all.push((queued.event.reason, queued.event.note.unwrap_or_default()));
        }
        all
    }

    #[test]
    fn unsharded_the_host_speaks_and_says_each_event_once() {
        let (sink, mut received) = EventSink::channel(16, Counter::default());
        let voice = Voice::new(&resource(), sink, None);
        voice.state(Standing::Plugin, true, "PluginRefused", "bad", "Vet");
        voice.say(false, "RolloutPromoted", "done", "Vet");
        voice.hand_over();
        assert_eq!(
            sent(&mut received),
            [
                ("PluginRefused".to_string(), "bad".to_string()),
                ("RolloutPromoted".to_string(), "done".to_string())
            ]
        );
    }

    #[test]
    fn sharded_only_shard_0_s_holder_speaks_and_a_new_holder_says_once_what_stands() {
        let (sink, mut received) = EventSink::channel(16, Counter::default());
        let shards = Shards::new(4, "me", "default", "wasm-operator");
        let voice = Voice::new(&resource(), sink, Some(shards.clone()));
        voice.state(Standing::Plugin, true, "PluginRefused", "bad", "Vet");
        voice.state(Standing::Shadow, true, "PluginRefused", "shadow bad", "Vet");
        voice.withdraw(Standing::Shadow);
        voice.say(false, "RolloutPromoted", "passes", "Vet");
        voice.hand_over();
        assert!(sent(&mut received).is_empty(), "shard 0 held elsewhere");

        shards.hold_for_test(1, Instant::now() + Duration::from_secs(60));
        voice.hand_over();
        assert!(sent(&mut received).is_empty(), "shard 1 is not shard 0");

        shards.hold_for_test(0, Instant::now() + Duration::from_millis(80));
        voice.hand_over();
        voice.hand_over();
        let again = sent(&mut received);
        assert_eq!(again.len(), 1, "the refusal in force, once: {again:?}");
        assert_eq!(again[0].0, "PluginRefused");
        assert!(again[0].1.starts_with("bad (said again"), "{again:?}");

        voice.state(Standing::Plugin, true, "PluginRefused", "worse", "Vet");
        assert_eq!(sent(&mut received).len(), 1, "said while speaking");

        std::thread::sleep(Duration::from_millis(100));
        voice.hand_over();
        voice.say(false, "RolloutPromoted", "not here", "Vet");
        assert!(sent(&mut received).is_empty(), "the hold ran out");
        shards.hold_for_test(0, Instant::now() + Duration::from_secs(60));
        voice.hand_over();
        let again = sent(&mut received);
        assert_eq!(again.len(), 1, "taken again: said again, once: {again:?}");
        assert!(again[0].1.starts_with("worse"), "{again:?}");
    }
}
