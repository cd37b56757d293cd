//! Constructors for what a reconcile returns: the [`ReconcileOutput`], its
//! [`Event`]s, a [`ReconcileError`], and the plugin's [`PluginInfo`]; plus
//! [`Timestamp`] conversions.

use crate::types::{Event, EventType, PluginInfo, ReconcileError, ReconcileOutput, Timestamp};

/// An output that asks for nothing: no creates, no deletes, no status write,
/// no requeue, no events.
pub fn empty_output() -> ReconcileOutput {
    ReconcileOutput::default()
}

impl ReconcileOutput {
    /// Same as [`empty_output`].
    pub fn empty() -> Self {
        Self::default()
    }

    /// True when the output asks for nothing at all.
    pub fn is_empty(&self) -> bool {
        self.create_pods.is_empty()
            && self.delete_pods.is_empty()
            && self.status.is_none()
            && self.requeue_after_ms.is_none()
            && self.events.is_empty()
    }
}

impl Event {
    /// An Event of the given type.
    pub fn new(
        event_type: EventType,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            event_type,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A `Normal` Event; `reason` is short UpperCamelCase, e.g. `ScalingUp`.
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(EventType::Normal, reason, message)
    }

    /// A `Warning` Event.
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(EventType::Warning, reason, message)
    }
}

/// A `Normal` Event (see [`Event::normal`]).
pub fn normal_event(reason: impl Into<String>, message: impl Into<String>) -> Event {
    Event::normal(reason, message)
}

/// A `Warning` Event (see [`Event::warning`]).
pub fn warning_event(reason: impl Into<String>, message: impl Into<String>) -> Event {
    Event::warning(reason, message)
}

impl ReconcileError {
    /// An error worth retrying later; the host backs off exponentially.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    /// An error only a change to the object (or the plugin) can fix.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
}

impl PluginInfo {
    /// Name and version, e.g. `PluginInfo::new("replicaset", env!("CARGO_PKG_VERSION"))`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
        }
    }
}

impl Timestamp {
    /// Whole seconds since the Unix epoch.
    pub fn from_secs(seconds: i64) -> Self {
        Self {
            seconds,
            nanoseconds: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_empty() {
        assert!(empty_output().is_empty());
        assert_eq!(ReconcileOutput::empty(), empty_output());
        let mut o = empty_output();
        o.requeue_after_ms = Some(1);
        assert!(!o.is_empty());
        let mut o = empty_output();
        o.events.push(normal_event("X", "y"));
        assert!(!o.is_empty());
    }

    #[test]
    fn events_and_errors() {
        let e = normal_event("ScalingUp", "up");
        assert_eq!(e.event_type, EventType::Normal);
        assert_eq!((e.reason.as_str(), e.message.as_str()), ("ScalingUp", "up"));
        assert_eq!(warning_event("Bad", "x").event_type, EventType::Warning);
        assert!(ReconcileError::retryable("r").retryable);
        assert!(!ReconcileError::fatal("f").retryable);
        assert_eq!(PluginInfo::new("n", "1").version, "1");
        assert!(
            Timestamp::from_secs(1)
                < Timestamp {
                    seconds: 1,
                    nanoseconds: 1
                }
        );
    }
}
