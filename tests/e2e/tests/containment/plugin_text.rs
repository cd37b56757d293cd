//! Containment, round two (issue 22), hazards 3 and 4: plugin text reaches
//! the host's log and Events escaped and bounded; plugin Events cannot use
//! the host's reasons, are marked as the plugin's, and never hide a host
//! Warning.

use e2e_tests::LogCapture;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Patch, PatchParams};

#[allow(unused_imports)]
use super::*;

/// The mark of every forged piece the misbehaving plugin writes
/// (`misbehaving_plugin::FORGED_MARKER`).
const FORGED_MARKER: &str = "FORGED-BY-PLUGIN";
/// How the fake host line in the forged text begins.
const FORGED_LINE_START: &str = "2026-11-25T00:00:00.000000Z ERROR";
/// Longest host log line allowed about these objects: a line carries at
/// most two plugin-originated values of 4 KiB (`plugin_text::MAX_LOG_TEXT`)
/// and the host's own fields.
const LINE_BOUND: usize = 12 * 1024;
/// How long the forging plugins run while the log is measured.
const WINDOW: Duration = Duration::from_secs(8);

/// The host's log has no line a plugin forged (a line break, a carriage
/// return, ANSI, U+2028 or a bidi override reaching it raw), no line over
/// the bound however long the plugin's text, and a bounded volume while
/// four plugins return 3 MiB errors and rejected 3 MiB label keys with
/// backoff; the Events say the same text escaped; the neighbour converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_text_reaches_the_log_escaped_and_bounded() -> anyhow::Result<()> {
    let log = LogCapture::start();
    let env = TestEnv::new("plugin-text").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    let forgers = [
        ("ferror", "forge:error"),
        ("fpanic", "forge:panic"),
        ("flabel", "forge:label"),
        ("fevent", "forge:event"),
    ];
    // The first seconds, while the backoff is short, are the loudest.
    let start = log.text().len();
    for (name, mode) in forgers {
        env.create(name, 2, &[(MISBEHAVE, mode)]).await?;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let first_4s = bytes_about(&log.text(), start, &env.namespace);
    with_good_neighbour(&env, &[]).await?;
    let returned = env
        .wait_event("ferror", "PluginFailed", FORGED_MARKER, CONVERGE)
        .await?;
    env.wait_event("fpanic", "PluginFailed", "trapped", CONVERGE)
        .await?;
    env.wait_event("flabel", "RejectedOutput", "names/label", CONVERGE)
        .await?;
    let forged_event = env
        .wait_event("fevent", "Forged", FORGED_MARKER, CONVERGE)
        .await?;
    for note in [&returned, &forged_event] {
        assert!(
            !note.contains(['\n', '\r', '\u{1b}', '\u{2028}', '\u{202e}']),
            "an Event note carries raw control text: {note:?}"
        );
        assert!(
            note.contains("\\n2026-11-25"),
            "escaped, not dropped: {note}"
        );
        assert!(note.len() <= 1024, "{} bytes", note.len());
    }
    // A Jinghzhu author's status.state reaches the "reconcile start" line.
    env.create("fstate", 1, &[]).await?;
    env.wait_converged("fstate", 1, CONVERGE).await?;
    env.jinghzhus()
        .patch_status(
            "fstate",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "status": {"state": format!("ok\n2026-11-25 ERROR {FORGED_MARKER} \u{1b}[31mred")}
            })),
        )
        .await?;

    // Let the forgers go on (backoff) while the log is measured.
    let start = log.text().len();
    tokio::time::sleep(WINDOW).await;
    let in_window = bytes_about(&log.text(), start, &env.namespace);
    env.wait_converged("good", 2, CONVERGE).await?;
    host.stop().await;

    let text = log.text();
    let ours = |line: &&str| line.contains(&env.namespace) || line.contains(FORGED_MARKER);
    let lines: Vec<&str> = text.lines().filter(ours).collect();
    let forged_pieces = lines.iter().filter(|l| l.contains(FORGED_MARKER)).count();
    assert!(
        forged_pieces > 0,
        "the forged text was logged (escaped) at all"
    );
    for line in &lines {
        assert!(
            !line.starts_with(FORGED_LINE_START) && !line.trim_start().starts_with(FORGED_MARKER),
            "a line the plugin forged: {line:.300}"
        );
        assert!(
            !line.contains(['\r', '\u{1b}', '\u{2028}', '\u{2029}', '\u{202e}']),
            "raw control text in the host log: {line:.300?}"
        );
        assert!(
            line.len() <= LINE_BOUND,
            "a host log line of {} bytes: {:.300}",
            line.len(),
            line
        );
    }
    let longest = lines.iter().map(|l| l.len()).max().unwrap_or(0);
    let ours_bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    eprintln!(
        "plugin text: {} host log lines about the forgers, longest {longest} bytes, \
         {ours_bytes} bytes in all: {first_4s} in their first 4 s, {in_window} in {WINDOW:?} later; \
         whole log {} bytes",
        lines.len(),
        log.bytes()
    );
    assert!(first_4s < 2 * 1024 * 1024, "{first_4s} bytes of log in 4 s");
    assert!(
        in_window < 1024 * 1024,
        "{in_window} bytes of log in {WINDOW:?}"
    );
    Ok(())
}

/// Bytes of the log lines in `text` after `start` that mention `namespace`.
fn bytes_about(text: &str, start: usize, namespace: &str) -> usize {
    text.get(start..)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(namespace))
        .map(|line| line.len() + 1)
        .sum()
}

/// Events recorded on `name` with `reason`.
async fn events_with(env: &TestEnv, name: &str, reason: &str) -> anyhow::Result<Vec<Event>> {
    Ok(env
        .events_of(name)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect())
}

/// A plugin Event with a host reason is refused whole under
/// `events/reserved-reason`; a plugin's own Event is marked as the
/// plugin's (action, reporting instance, note); and a host Warning naming
/// new broken rules of the same unchanged object is a new Event, not a
/// count on the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_events_cannot_speak_with_the_host_s_voice() -> anyhow::Result<()> {
    let env = TestEnv::new("plugin-voice").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    with_good_neighbour(
        &env,
        &[
            ("mimic", "impersonate"),
            ("turncoat", "turncoat"),
            ("voice", "forge:event"),
        ],
    )
    .await?;
    env.wait_event(
        "mimic",
        "RejectedOutput",
        "events/reserved-reason",
        CONVERGE,
    )
    .await?;
    assert!(
        env.owned_pods("mimic").await?.is_empty(),
        "rejected whole: nothing applied"
    );
    assert!(
        events_with(&env, "mimic", "SuccessfulCreate")
            .await?
            .is_empty(),
        "the plugin's SuccessfulCreate was not recorded"
    );

    // Two different rejections of one unchanged object: both are visible.
    env.wait_event(
        "turncoat",
        "RejectedOutput",
        "events/reserved-reason",
        CONVERGE,
    )
    .await?;
    env.wait_event(
        "turncoat",
        "RejectedOutput",
        "limits/creates-beyond-desired",
        CONVERGE,
    )
    .await?;

    // The plugin's own Event says whose it is.
    env.wait_event("voice", "Forged", FORGED_MARKER, CONVERGE)
        .await?;
    for event in events_with(&env, "voice", "Forged").await? {
        assert_eq!(event.action.as_deref(), Some("PluginEvent"), "{event:?}");
        assert!(
            event
                .reporting_instance
                .as_deref()
                .is_some_and(|i| i.ends_with("/plugin")),
            "{event:?}"
        );
        assert!(
            event
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("plugin misbehaving@")),
            "{event:?}"
        );
    }
    // The host's own Events keep the host's voice.
    for event in events_with(&env, "good", "SuccessfulCreate").await? {
        assert_eq!(event.action.as_deref(), Some("Reconcile"), "{event:?}");
    }
    env.wait_converged("good", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}
