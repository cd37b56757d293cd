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
    /// `random-flood`: asks the host for 32 MiB of random bytes through
    /// `wasi:random` in a loop, forever (a host limit must stop it).
    RandomFlood,
    /// `pollable-flood`: keeps subscribing to hour-long durations, keeping
    /// every pollable (entries in the host's resource table), forever.
    PollableFlood,
    /// `wasi-script:<ops>`: runs the WASI calls `<ops>` describes (see
    /// [`crate::wasi_work::parse_script`]), then the normal output with a
    /// `WasiScript` Event summing up what it did.
    WasiScript(String),
    /// `fat-annotations[:<bytes>]`: the normal output, with every created
    /// pod annotated `plugin.jinghzhu.io/fat` (key and value together
    /// `<bytes>` long, by default [`crate::FAT_ANNOTATION_BYTES`], the most
    /// the host accepts on one pod).
    FatAnnotations(usize),
    /// `empty-spec`: the normal output with every create's `spec-json`
    /// empty (the template's spec, per the WIT contract): a tiny output
    /// the host expands into full pods.
    EmptySpec,
    /// `forge:<where>`: puts [`crate::FORGED_TEXT`] (a newline and a fake
    /// host `ERROR` line, ANSI colour, U+2028, a bidi override) where the
    /// host writes plugin text to its log: `error` returns a retryable error
    /// of it followed by 3 MiB; `panic` panics with it; `label` adds to the
    /// first create a label whose key is it (the rejection quotes the key);
    /// `event` adds a Warning Event `Forged` saying it.
    Forge(String),
    /// `bad-wire:<what>`: the normal output, broken after the SDK encoded
    /// it into contract 0.2's wire form (an id or span outside its table,
    /// bytes that are not UTF-8); see [`crate::wire_tamper`].
    BadWire(String),
    /// `impersonate`: the normal output plus a Normal `SuccessfulCreate` and
    /// a Warning `RejectedOutput` Event, the host's own reasons.
    Impersonate,
    /// `turncoat`: by the input's clock, 10 s of `impersonate`, then 10 s of
    /// `bad-name`, and so on: two different rejections of one unchanged
    /// object.
    Turncoat,
    /// `drop-template-metadata`: the normal output, with every created pod's
    /// labels and annotations (the template's, copied by the SDK) removed.
    DropTemplateMetadata,
    /// `foreign-label-value`: the normal output, with every created pod
    /// labelled `plugin.jinghzhu.io/role=database_primary` (the value of
    /// another object, `database`, under the shared plugin prefix).
    ForeignLabelValue,
    /// `squat-names`: the normal output, but each created pod is named
    /// `<name>-db-<i>` (names of a Jinghzhu `<name>-db`'s pods).
    SquatNames,
    /// `lie-status[:<field>]`: a status whose observable fields say what
    /// the host did not observe (issue 40, hazard 10). Without `<field>`,
    /// no creates or deletes and the status `current: 3`, a `podList` of
    /// [`crate::FOREIGN_PODS`], `state: Running` and `observedGeneration:
    /// 2^63-1`. With `current`, `pod-list` or `generation`: the normal
    /// output (its creates too), with only that field of its status a lie.
    LieStatus(String),
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
            "drop-template-metadata" => Mode::DropTemplateMetadata,
            "foreign-label-value" => Mode::ForeignLabelValue,
            "squat-names" => Mode::SquatNames,
            "impersonate" => Mode::Impersonate,
            "turncoat" => Mode::Turncoat,
            other if other.starts_with("forge:") => Mode::Forge(other["forge:".len()..].to_owned()),
            other if other.starts_with("bad-wire:") => {
                Mode::BadWire(other["bad-wire:".len()..].to_owned())
            }
            "random-flood" => Mode::RandomFlood,
            "pollable-flood" => Mode::PollableFlood,
            other if other.starts_with("wasi-script:") => {
                Mode::WasiScript(other["wasi-script:".len()..].to_owned())
            }
            "fat-annotations" => Mode::FatAnnotations(crate::FAT_ANNOTATION_BYTES),
            "empty-spec" => Mode::EmptySpec,
            "lie-status" => Mode::LieStatus(String::new()),
            other if other.starts_with("lie-status:") => {
                Mode::LieStatus(other["lie-status:".len()..].to_owned())
            }
            other if other.starts_with("fat-annotations:") => {
                match other["fat-annotations:".len()..].parse() {
                    Ok(bytes) => Mode::FatAnnotations(bytes),
                    Err(_) => Mode::Unknown(other.to_owned()),
                }
            }
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
            ("forge:error", Mode::Forge("error".into())),
            ("bad-wire:span", Mode::BadWire("span".into())),
            ("impersonate", Mode::Impersonate),
            ("turncoat", Mode::Turncoat),
            ("random-flood", Mode::RandomFlood),
            ("pollable-flood", Mode::PollableFlood),
            ("wasi-script:u64*2", Mode::WasiScript("u64*2".into())),
            (
                "fat-annotations",
                Mode::FatAnnotations(crate::FAT_ANNOTATION_BYTES),
            ),
            ("fat-annotations:1000", Mode::FatAnnotations(1000)),
            ("empty-spec", Mode::EmptySpec),
            ("drop-template-metadata", Mode::DropTemplateMetadata),
            ("foreign-label-value", Mode::ForeignLabelValue),
            ("squat-names", Mode::SquatNames),
            ("lie-status", Mode::LieStatus(String::new())),
            ("lie-status:current", Mode::LieStatus("current".into())),
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
