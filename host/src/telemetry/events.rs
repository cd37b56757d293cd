//! The Event sink: reconciles hand their Kubernetes Events to a bounded
//! queue and go on; one background task records them with the
//! [`EventWriter`] (which turns repeats into series).
//!
//! A reconcile never waits for an Event write. When the queue is full (the
//! API server is slow, or something is very noisy) the Event is dropped and
//! `wasm_operator_events_dropped_total` counts it: Events are informational,
//! never worth holding back pods or status. A failure to record is logged,
//! as before. On shutdown [`EventWorker::drain`] records what is still
//! queued, within a time limit; dropping the worker (the host aborted)
//! loses it, as a crash would.
//!
//! Every Event passes [`EventSink::send`], which escapes and bounds its
//! reason and note with [`crate::plugin_text`] (a plugin's text, or a host
//! note quoting one, can neither break a line nor exceed Kubernetes'
//! limits), whoever produced it. The host's own Events carry the host's
//! actions (`Reconcile`, …); the Events a plugin asks for are recorded with
//! [`EventSink::publish_plugin`]: action [`PLUGIN_ACTION`], the note
//! prefixed with the plugin's name, and (by the writer) a reporting
//! instance that says `plugin`, so nobody mistakes them for the host's.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::event_writer::EventWriter;
pub use super::event_writer::PLUGIN_ACTION;
use super::log_limit::{LogLimit, Verdict};
use crate::crd::{Jinghzhu, object_key};
use crate::plugin_text::{self, MAX_EVENT_NOTE, MAX_EVENT_REASON};

/// Events the queue holds before new ones are dropped.
pub const QUEUE_CAPACITY: usize = 1024;

/// An Event waiting to be recorded.
pub struct QueuedEvent {
    /// The Event.
    pub event: Event,
    /// The object it is about.
    pub regarding: ObjectReference,
    /// `namespace/name` of that object, for logs.
    pub object: String,
}

/// Where reconciles send Events; cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct EventSink {
    queue: mpsc::Sender<QueuedEvent>,
    dropped: Counter,
}

impl EventSink {
    /// A sink and the receiving end of its queue (of `capacity` Events);
    /// `dropped` counts the Events a full queue refused.
    pub fn channel(capacity: usize, dropped: Counter) -> (Self, mpsc::Receiver<QueuedEvent>) {
        let (queue, received) = mpsc::channel(capacity.max(1));
        (Self { queue, dropped }, received)
    }

    /// A sink whose Events `writer` records from a background task.
    pub fn start(writer: EventWriter, capacity: usize, dropped: Counter) -> (Self, EventWorker) {
        let (sink, received) = Self::channel(capacity, dropped);
        let failures = std::sync::Arc::new(LogLimit::default());
        let worker = EventWorker::spawn(received, move |queued| {
            let writer = writer.clone();
            let failures = failures.clone();
            async move { record(&writer, queued, &failures).await }
        });
        (sink, worker)
    }

    /// Queues one of the host's own Events on the Jinghzhu (the reconcile's
    /// action; `reason` one of [`crate::event_reasons::HOST_REASONS`]).
    pub fn publish(&self, jz: &Jinghzhu, type_: EventType, reason: &str, note: &str) {
        self.publish_as(jz, type_, reason, note.to_string(), "Reconcile");
    }

    /// Queues an Event the plugin `plugin` (its description) asked for:
    /// action [`PLUGIN_ACTION`], the note prefixed `plugin <plugin>: `.
    pub fn publish_plugin(
        &self,
        jz: &Jinghzhu,
        type_: EventType,
        reason: &str,
        note: &str,
        plugin: &str,
    ) {
        let note = format!("plugin {plugin}: {note}");
        self.publish_as(jz, type_, reason, note, PLUGIN_ACTION);
    }

    fn publish_as(
        &self,
        jz: &Jinghzhu,
        type_: EventType,
        reason: &str,
        note: String,
        action: &str,
    ) {
        self.send(QueuedEvent {
            event: Event {
                type_,
                reason: reason.to_string(),
                note: Some(note),
                action: action.to_string(),
                secondary: None,
            },
            regarding: jz.object_ref(&()),
            object: object_key(jz),
        });
    }

    /// Queues an Event, or drops and counts it when the queue is full.
    /// Returns whether it was queued. The reason and note are escaped and
    /// bounded here ([`plugin_text::escape_within`]) for every producer.
    pub fn send(&self, mut queued: QueuedEvent) -> bool {
        bound_texts(&mut queued.event);
        match self.queue.try_send(queued) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(queued)) => {
                self.dropped.inc();
                tracing::debug!(
                    object = %queued.object,
                    reason = %queued.event.reason,
                    "Event queue full; Event dropped"
                );
                false
            }
            Err(mpsc::error::TrySendError::Closed(queued)) => {
                tracing::debug!(
                    object = %queued.object,
                    reason = %queued.event.reason,
                    "shutting down; Event not recorded"
                );
                false
            }
        }
    }
}

/// Escapes and bounds what an Event says: the reason within
/// [`MAX_EVENT_REASON`], the note within [`MAX_EVENT_NOTE`] bytes (the
/// Kubernetes limits), the action within the reason's limit.
pub fn bound_texts(event: &mut Event) {
    event.reason = plugin_text::escape_within(&event.reason, MAX_EVENT_REASON);
    event.action = plugin_text::escape_within(&event.action, MAX_EVENT_REASON);
    if let Some(note) = &mut event.note {
        *note = plugin_text::escape_within(note, MAX_EVENT_NOTE);
    }
}

/// Records one Event; a failure is logged (rate-limited per object: an
/// outage fails every Event), not fatal.
async fn record(writer: &EventWriter, queued: QueuedEvent, failures: &LogLimit) {
    let Err(err) = writer.write(&queued.event, &queued.regarding).await else {
        return;
    };
    let message = err.to_string();
    let error = plugin_text::shown(&message);
    let reason = &queued.event.reason;
    match failures.check(&queued.object) {
        Verdict::Emit { held_back } => tracing::warn!(
            object = %queued.object,
            %reason,
            %error,
            lines_held_back = held_back,
            "could not record Event"
        ),
        Verdict::HoldBack => tracing::debug!(
            object = %queued.object,
            %reason,
            %error,
            "could not record Event"
        ),
    }
}

/// The background task that records queued Events, one at a time.
#[derive(Debug)]
pub struct EventWorker {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl EventWorker {
    /// Spawns the task: it hands each queued Event to `record` until told to
    /// stop (then records what is left) or until every sink is gone.
    pub fn spawn<F, Fut>(mut received: mpsc::Receiver<QueuedEvent>, mut record: F) -> Self
    where
        F: FnMut(QueuedEvent) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    queued = received.recv() => match queued {
                        Some(queued) => record(queued).await,
                        None => return,
                    },
                    _ = &mut stopped => break,
                }
            }
            // Stopping: refuse new Events, record the ones already queued.
            received.close();
            while let Some(queued) = received.recv().await {
                record(queued).await;
            }
        });
        Self {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Records what is still queued, giving up after `within`; returns
    /// whether everything queued was recorded.
    pub async fn drain(mut self, within: Duration) -> bool {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(mut task) = self.task.take() else {
            return true;
        };
        match tokio::time::timeout(within, &mut task).await {
            Ok(_) => true,
            Err(_) => {
                task.abort();
                tracing::warn!(
                    waited_ms = within.as_millis() as u64,
                    "shutting down before every queued Event was recorded; the rest are dropped"
                );
                false
            }
        }
    }
}

impl Drop for EventWorker {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn jinghzhu(name: &str) -> Jinghzhu {
        wasm_operator_testkit::jinghzhu(name)
            .namespace("ns")
            .uid(&format!("uid-{name}"))
            .build()
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        let dropped = Counter::default();
        let (sink, mut received) = EventSink::channel(2, dropped.clone());
        let jz = jinghzhu("web");
        sink.publish(
            &jz,
            EventType::Normal,
            "SuccessfulCreate",
            "Created 1 pod(s): a",
        );
        sink.publish(
            &jz,
            EventType::Warning,
            "FailedCreate",
            "Error creating pod: x",
        );
        assert_eq!(dropped.get(), 0);
        // Full: these two return at once, dropped and counted.
        sink.publish(
            &jz,
            EventType::Normal,
            "SuccessfulDelete",
            "Deleted 1 pod(s): a",
        );
        sink.publish(
            &jz,
            EventType::Normal,
            "SuccessfulDelete",
            "Deleted 1 pod(s): b",
        );
        assert_eq!(dropped.get(), 2);

        let first = received.try_recv().expect("first Event queued");
        assert_eq!(first.event.reason, "SuccessfulCreate");
        assert_eq!(first.event.note.as_deref(), Some("Created 1 pod(s): a"));
        assert_eq!(first.event.action, "Reconcile");
        assert_eq!(first.event.type_, EventType::Normal);
        assert_eq!(first.regarding.name.as_deref(), Some("web"));
        assert_eq!(first.regarding.uid.as_deref(), Some("uid-web"));
        assert_eq!(first.object, "ns/web");
        // A slot is free again: the next Event is queued, not dropped.
        sink.publish(&jz, EventType::Normal, "Scaled", "later");
        assert_eq!(dropped.get(), 2);
        let rest: Vec<String> = std::iter::from_fn(|| received.try_recv().ok())
            .map(|q| q.event.reason)
            .collect();
        assert_eq!(rest, ["FailedCreate", "Scaled"]);
    }

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let (sink, mut received) = EventSink::channel(1, Counter::default());
        sink.publish(
            &jinghzhu("web"),
            EventType::Warning,
            "RejectedOutput",
            &"é".repeat(600),
        );
        let note = received.try_recv().unwrap().event.note.unwrap();
        assert!(note.len() <= MAX_EVENT_NOTE, "{}", note.len());
        assert!(note.starts_with(&"é".repeat(400)), "{note}");
        assert!(note.ends_with(" bytes more)"), "{note}");
    }

    #[test]
    fn every_event_is_escaped_at_the_sink_and_plugin_events_are_marked() {
        let (sink, mut received) = EventSink::channel(4, Counter::default());
        let forged = "ok\n2026-11-25T00:00:00Z ERROR forged\x1b[31m\u{202e}";
        let jz = jinghzhu("web");
        sink.publish(&jz, EventType::Warning, "PluginFailed", forged);
        sink.publish_plugin(&jz, EventType::Normal, "Scaled", forged, "p@1 (sha256:ab)");
        sink.send(QueuedEvent {
            event: Event {
                type_: EventType::Warning,
                reason: "Bad\nReason".into(),
                note: Some("x".repeat(5000)),
                action: "Decode".into(),
                secondary: None,
            },
            regarding: ObjectReference::default(),
            object: "ns/web".into(),
        });
        let host = received.try_recv().unwrap().event;
        let note = host.note.unwrap();
        assert!(!note.contains(['\n', '\x1b', '\u{202e}']), "{note}");
        assert!(
            note.contains("\\n2026") && note.contains("\\u{1b}[31m"),
            "{note}"
        );
        assert_eq!(host.action, "Reconcile");
        let plugin = received.try_recv().unwrap().event;
        assert_eq!(plugin.action, PLUGIN_ACTION);
        let note = plugin.note.unwrap();
        assert!(note.starts_with("plugin p@1 (sha256:ab): ok\\n"), "{note}");
        let other = received.try_recv().unwrap().event;
        assert_eq!(other.reason, "Bad\\nReason");
        assert!(other.note.unwrap().len() <= MAX_EVENT_NOTE);
    }

    #[test]
    fn sending_after_the_worker_stopped_is_neither_queued_nor_counted() {
        let dropped = Counter::default();
        let (sink, received) = EventSink::channel(4, dropped.clone());
        drop(received);
        sink.publish(&jinghzhu("web"), EventType::Normal, "Scaled", "x");
        assert_eq!(dropped.get(), 0);
    }

    #[tokio::test]
    async fn the_worker_records_in_order_and_drains_on_shutdown() {
        let (sink, received) = EventSink::channel(16, Counter::default());
        let recorded = Arc::new(Mutex::new(Vec::new()));
        // Each record is held up until the test lets it go.
        let (release, gate) = tokio::sync::watch::channel(false);
        let worker = EventWorker::spawn(received, {
            let recorded = recorded.clone();
            move |queued: QueuedEvent| {
                let recorded = recorded.clone();
                let mut gate = gate.clone();
                async move {
                    let _ = gate.wait_for(|open| *open).await;
                    recorded.lock().unwrap().push(queued.event.reason);
                }
            }
        });
        let jz = jinghzhu("web");
        for reason in ["A", "B", "C"] {
            sink.publish(&jz, EventType::Normal, reason, "n");
        }
        tokio::task::yield_now().await;
        assert!(
            recorded.lock().unwrap().is_empty(),
            "publishing never waits"
        );
        release.send(true).unwrap();
        assert!(worker.drain(Duration::from_secs(10)).await);
        assert_eq!(*recorded.lock().unwrap(), ["A", "B", "C"]);
        // Stopped: later Events are refused, not queued.
        assert!(!sink.send(QueuedEvent {
            event: Event {
                type_: EventType::Normal,
                reason: "D".into(),
                note: None,
                action: "Reconcile".into(),
                secondary: None,
            },
            regarding: ObjectReference::default(),
            object: "ns/web".into(),
        }));
    }

    #[tokio::test]
    async fn draining_gives_up_after_its_time_limit() {
        let (sink, received) = EventSink::channel(4, Counter::default());
        let worker = EventWorker::spawn(received, |_queued| std::future::pending::<()>());
        sink.publish(&jinghzhu("web"), EventType::Normal, "Stuck", "n");
        let started = std::time::Instant::now();
        assert!(!worker.drain(Duration::from_millis(100)).await);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
