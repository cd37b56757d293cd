//! The misbehaviours a Jinghzhu can ask for, by annotation.

use jinghzhu_plugin_sdk::kv;
use jinghzhu_plugin_sdk::types::Jinghzhu;

/// The annotation that selects a [`Mode`].
pub const MISBEHAVE_ANNOTATION: &str = "test.jinghzhu.io/misbehave";

/// What the plugin does instead of (or on top of) reconciling normally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `spin`: loops forever (the host's deadline must stop it).
    Spin,
    /// `hog`: allocates and touches memory in 1 MiB chunks forever (the
    /// host's memory cap must stop it).
    Hog,
    /// `panic`: panics, which traps the component.
    Panic,
    /// `error`: returns a retryable error.
    Error,
    /// `fatal`: returns a non-retryable error.
    Fatal,
    /// `delete-foreign`: the normal output plus a delete of the pod
    /// `not-owned-by-me`.
    DeleteForeign,
    /// `bad-name`: the normal output plus a create of a pod named
    /// `Invalid_Name!`.
    BadName,
    /// `many`: the normal output with 100000 pod creates instead.
    Many,
    /// `log`: five log lines through the `log` import (levels info, info,
    /// info, warn, error; fields `misbehave=log`, `line=1..5`,
    /// `jinghzhu=<name>`), one line on stdout and one on stderr, then the
    /// normal output.
    Log,
    /// `probe-sandbox`: the normal output plus a `SandboxProbe` Event whose
    /// message reports what the plugin could reach through WASI:
    /// environment variables, arguments, the filesystem and the network.
    ProbeSandbox,
    /// `sleep`: sleeps for an hour inside a blocking WASI call (the host's
    /// deadline must still stop it).
    Sleep,
    /// `recurse`: recurses without end (the guest's stack must trap cleanly).
    Recurse,
    /// `log-flood`: one log call with a 64 KiB message and 100000 with
    /// 1 KiB ones, full of newlines and escape sequences, then the normal
    /// output.
    LogFlood,
    /// `requeue-zero`: the normal output, asking to be reconciled again
    /// after 0 ms.
    RequeueZero,
    /// `volatile-status`: the normal output, but the status message carries
    /// the input's `now` down to the nanosecond, so it changes every call,
    /// and it asks to be requeued after 1 ms.
    VolatileStatus,
    /// `event-flood`: the normal output plus 20 Events, each with a reason
    /// never used before (`Flood<now-nanos><i>`).
    EventFlood,
    /// `over-create`: creates `desired + 50` pods whatever exists.
    OverCreate,
    /// `huge-status`: a status whose podList has 100000 entries.
    HugeStatus,
    /// `escalate:<what>`: the normal output, but every created pod's spec
    /// asks for more authority than the template gives; see
    /// [`crate::hazards::escalated_spec`] for the values of `<what>`.
    Escalate(String),
    /// `foreign-labels`: the normal output, with created pods labelled
    /// `app=database` (to join another app's Service).
    ForeignLabels,
    /// `remember`: the normal output, with a status message counting the
    /// calls this instance has seen, in a global and on the heap (both must
    /// be 1: every call gets a fresh instance).
    Remember,
    /// Any other value: logs a warning and behaves normally.
    Unknown(String),
}

impl Mode {
    /// The mode `jinghzhu` asks for, if any.
    pub fn of(jinghzhu: &Jinghzhu) -> Option<Mode> {
        kv::annotation(&jinghzhu.metadata.annotations, MISBEHAVE_ANNOTATION).map(Mode::parse)
    }

    /// The mode an annotation value names.
    pub fn parse(value: &str) -> Mode {
        match value.trim() {
            "spin" => Mode::Spin,
            "hog" => Mode::Hog,
            "panic" => Mode::Panic,
            "error" => Mode::Error,
            "fatal" => Mode::Fatal,
            "delete-foreign" => Mode::DeleteForeign,
            "bad-name" => Mode::BadName,
            "many" => Mode::Many,
            "log" => Mode::Log,
            "probe-sandbox" => Mode::ProbeSandbox,
            "sleep" => Mode::Sleep,
            "recurse" => Mode::Recurse,
            "log-flood" => Mode::LogFlood,
            "requeue-zero" => Mode::RequeueZero,
            "volatile-status" => Mode::VolatileStatus,
            "event-flood" => Mode::EventFlood,
            "over-create" => Mode::OverCreate,
            "huge-status" => Mode::HugeStatus,
            "foreign-labels" => Mode::ForeignLabels,
            "remember" => Mode::Remember,
            other => match other.strip_prefix("escalate:") {
                Some(what) => Mode::Escalate(what.to_owned()),
                None => Mode::Unknown(other.to_owned()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jinghzhu_plugin_sdk::testing::jinghzhu;

    #[test]
    fn parses_every_mode() {
        let cases = [
            ("spin", Mode::Spin),
            ("hog", Mode::Hog),
            ("panic", Mode::Panic),
            ("error", Mode::Error),
            ("fatal", Mode::Fatal),
            ("delete-foreign", Mode::DeleteForeign),
            ("bad-name", Mode::BadName),
            ("many", Mode::Many),
            (" log ", Mode::Log),
            ("probe-sandbox", Mode::ProbeSandbox),
            ("sleep", Mode::Sleep),
            ("recurse", Mode::Recurse),
            ("log-flood", Mode::LogFlood),
            ("remember", Mode::Remember),
            ("requeue-zero", Mode::RequeueZero),
            ("volatile-status", Mode::VolatileStatus),
            ("event-flood", Mode::EventFlood),
            ("over-create", Mode::OverCreate),
            ("huge-status", Mode::HugeStatus),
            ("foreign-labels", Mode::ForeignLabels),
            (
                "escalate:capabilities",
                Mode::Escalate("capabilities".into()),
            ),
            ("other", Mode::Unknown("other".into())),
        ];
        for (value, mode) in cases {
            assert_eq!(Mode::parse(value), mode, "{value}");
        }
        assert_eq!(Mode::of(&jinghzhu("a", "b", 1).build()), None);
        let jz = jinghzhu("a", "b", 1)
            .annotation(MISBEHAVE_ANNOTATION, "hog")
            .build();
        assert_eq!(Mode::of(&jz), Some(Mode::Hog));
    }
}
