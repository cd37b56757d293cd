//! A reconcile plugin that misbehaves on request, for tests of the host's
//! sandbox, limits and output validation.
//!
//! It reconciles exactly like `replicaset-plugin` (reusing its logic from
//! `replicaset-logic`, in the ordinary `v1` variant),
//! unless the Jinghzhu has the annotation [`MISBEHAVE_ANNOTATION`]; see
//! [`mode::Mode`] for its values. Built with the cargo feature `always-trap`,
//! every reconcile panics whatever the input (a broken plugin for hot-swap
//! rollback tests), and `info().version` ends with `+always-trap`.
//!
//! Built with `bad-info`, `info()` reports a name the host refuses. Built
//! with `v2`, it reconciles as the replicaset plugin's `v2` variant and its
//! version ends with `+v2` (another digest that misbehaves alike); with
//! `older`, its version is 0.0.1 (a downgrade of the default build).
//! Built with `fail-fifth`, reconcile fails on the fifth of objects whose
//! name's FNV-1a 64 hash is 0 modulo 5; with `differ`, every created pod
//! carries one extra label (see [`variants`]). Features that change
//! reconciles are named in the version's build metadata (`+v2.fail-fifth`).
//!
//! Build: `cargo build --release --target wasm32-wasip2 -p misbehaving-plugin`
//! (and with `--features always-trap --target-dir <another dir>` for the
//! trapping build).

use jinghzhu_plugin_sdk::prelude::*;
use replicaset_logic::Variant;

pub mod hazards;
pub mod mode;
pub mod variants;
pub mod wasi_work;
pub mod wire_tamper;

pub use mode::{MISBEHAVE_ANNOTATION, Mode};
pub use variants::Build;

/// The name the plugin reports.
pub const PLUGIN_NAME: &str = "misbehaving";

/// The pod `delete-foreign` asks to delete.
pub const FOREIGN_POD: &str = "not-owned-by-me";

/// The pod name `bad-name` asks to create (not a DNS-1123 name).
pub const BAD_POD_NAME: &str = "Invalid_Name!";

/// How many pods `many` asks to create.
pub const MANY_PODS: usize = 200_000;

/// How many extra pods `over-create` asks for beyond `desired`.
pub const OVER_CREATE_EXTRA: u32 = 50;

/// How many Events `event-flood` proposes in all (its normal ones, then
/// new reasons up to this many: the per-reconcile limit, so only the
/// per-object write budget can stop it).
pub const FLOOD_EVENTS: usize = 20;

/// How many podList entries `huge-status` writes.
pub const HUGE_POD_LIST: usize = 100_000;

/// How many lines `log` writes through the `log` import.
pub const LOG_LINES: usize = 5;

/// The Event reason of `probe-sandbox`'s report.
pub const PROBE_REASON: &str = "SandboxProbe";

/// The Event reason of `wasi-script`'s summary.
pub const WASI_SCRIPT_REASON: &str = "WasiScript";

/// Bytes (key and value) of the annotation `fat-annotations` puts on every
/// pod by default: the most the host accepts on one created pod.
pub const FAT_ANNOTATION_BYTES: usize = 16 * 1024;

/// The annotation `fat-annotations` writes.
pub const FAT_ANNOTATION_KEY: &str = "plugin.jinghzhu.io/fat";

/// What `forge:<where>` writes: a line break followed by what looks like a
/// host `ERROR` line, an ANSI colour, a line separator and a right-to-left
/// override. Each forged piece carries [`FORGED_MARKER`].
pub const FORGED_TEXT: &str = "harmless\n2026-11-25T00:00:00.000000Z ERROR wasm_operator::controller::reconcile: FORGED-BY-PLUGIN host compromised\r\u{1b}[31mFORGED-BY-PLUGIN red\u{1b}[0m\u{2028}FORGED-BY-PLUGIN ls\u{202e}txt.exe";

/// The mark of every forged piece of [`FORGED_TEXT`].
pub const FORGED_MARKER: &str = "FORGED-BY-PLUGIN";

/// Bytes `forge:error` adds after [`FORGED_TEXT`].
pub const FORGED_PADDING: usize = 3 * 1024 * 1024;

/// The label `foreign-label-value` sets, to [`FOREIGN_LABEL_VALUE`].
pub const FOREIGN_LABEL_KEY: &str = "plugin.jinghzhu.io/role";

/// A value scoped to another object (`database`), under the shared prefix.
pub const FOREIGN_LABEL_VALUE: &str = "database_primary";

/// The pods `lie-status` claims (someone else's: the misbehaving object has none).
pub const FOREIGN_PODS: [&str; 3] = ["database-0", "database-1", "database-2"];

/// The plugin: implements the exported `reconciler` interface.
pub struct MisbehavingPlugin;

impl Guest for MisbehavingPlugin {
    fn info() -> PluginInfo {
        if cfg!(feature = "bad-info") {
            return PluginInfo::new("Bad Name\nINFO forged host line", "1.0");
        }
        let version = if cfg!(feature = "older") {
            "0.0.1"
        } else {
            env!("CARGO_PKG_VERSION")
        };
        PluginInfo::new(PLUGIN_NAME, format!("{version}{VERSION_SUFFIX}"))
    }

    fn reconcile(input: ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
        if cfg!(feature = "always-trap") {
            panic!("misbehaving plugin built with always-trap: every reconcile traps");
        }
        reconcile(&input)
    }
}

/// The build metadata `info().version` ends with: `+` and the features
/// that change reconciles, dot-separated (`+v2.fail-fifth`), or nothing.
/// A literal, so `plugins/build-components.sh` finds it in the artifact.
const VERSION_SUFFIX: &str = match (
    cfg!(feature = "always-trap"),
    cfg!(feature = "idle"),
    cfg!(feature = "slow"),
    cfg!(feature = "v2"),
    cfg!(feature = "fail-fifth"),
    cfg!(feature = "differ"),
) {
    (true, ..) => "+always-trap",
    (false, true, ..) => "+idle",
    (false, false, true, ..) => "+slow",
    (false, false, false, false, false, false) => "",
    (false, false, false, true, false, false) => "+v2",
    (false, false, false, false, true, false) => "+fail-fifth",
    (false, false, false, true, true, false) => "+v2.fail-fifth",
    (false, false, false, false, false, true) => "+differ",
    (false, false, false, true, false, true) => "+v2.differ",
    (false, false, false, false, true, true) => "+fail-fifth.differ",
    (false, false, false, true, true, true) => "+v2.fail-fifth.differ",
};

/// The status `out` proposes, taken out of it to be altered: else the
/// object's own, else an empty pending one.
fn take_status(
    input: &ReconcileInput,
    out: &mut ReconcileOutput,
) -> jinghzhu_plugin_sdk::types::JinghzhuStatus {
    out.status
        .take()
        .or_else(|| input.jinghzhu.status.clone())
        .unwrap_or_else(|| {
            jinghzhu_plugin_sdk::status::build(Vec::<String>::new(), "Pending", "", None)
        })
}

/// `lie-status[:<field>]` (see [`Mode::LieStatus`]): `normal` with a
/// status that lies about `field` (or the whole lie).
fn lie_about_status(
    input: &ReconcileInput,
    field: &str,
    normal: ReconcileOutput,
) -> ReconcileOutput {
    let mut out = normal;
    let mut status = take_status(input, &mut out);
    match field {
        "current" => status.current = status.current.saturating_add(1),
        "pod-list" => {
            status.pod_list = FOREIGN_PODS
                .iter()
                .take(status.pod_list.len().max(1))
                .map(|p| p.to_string())
                .collect()
        }
        "generation" => status.observed_generation = Some(i64::MAX),
        _ => {
            out.create_pods.clear();
            out.delete_pods.clear();
            status = jinghzhu_plugin_sdk::status::build(
                FOREIGN_PODS,
                "Running",
                "3/3 pods, 3/3 ready",
                Some(i64::MAX),
            );
        }
    }
    out.status = Some(status);
    out
}

/// What the plugin does for `input` (without the `always-trap` feature):
/// [`reconcile_as`] this build.
pub fn reconcile(input: &ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
    reconcile_as(input, Build::THIS)
}

/// What a build with the features `build` names does for `input`: the
/// `fail-fifth` error first, else the annotation's misbehaviour (or the
/// normal output), labelled by `differ`.
pub fn reconcile_as(
    input: &ReconcileInput,
    build: Build,
) -> Result<ReconcileOutput, ReconcileError> {
    let name = &input.jinghzhu.metadata.name;
    if build.fail_fifth
        && let Some(error) = variants::fail_fifth(name)
    {
        return Err(error);
    }
    if build.slow {
        variants::burn_cpu();
    }
    let mut out = as_asked(input)?;
    if build.differ {
        variants::mark_differ(&mut out, name);
    }
    if build.idle {
        out.create_pods.clear();
        out.delete_pods.clear();
    }
    Ok(out)
}

/// What the annotation asks for (the normal output without one).
fn as_asked(input: &ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
    let variant = if cfg!(feature = "v2") {
        Variant::V2
    } else {
        Variant::V1
    };
    let normal = || replicaset_logic::reconcile_with(input, variant);
    match Mode::of(&input.jinghzhu) {
        None => Ok(normal()),
        Some(Mode::Spin) => hazards::spin_forever(),
        Some(Mode::Hog) => hazards::hog_memory_forever(),
        Some(Mode::Panic) => panic!(
            "misbehaving plugin: asked to panic by {MISBEHAVE_ANNOTATION} on {}",
            input.jinghzhu.metadata.name
        ),
        Some(Mode::Error) => Err(ReconcileError::retryable(
            "misbehaving plugin: asked for a retryable error",
        )),
        Some(Mode::Fatal) => Err(ReconcileError::fatal(
            "misbehaving plugin: asked for a fatal error",
        )),
        Some(Mode::DeleteForeign) => {
            let mut out = normal();
            out.delete_pods.push(FOREIGN_POD.to_owned());
            Ok(out)
        }
        Some(Mode::BadName) => {
            let mut out = normal();
            let mut bad = jinghzhu_plugin_sdk::pod::from_template(&input.jinghzhu);
            bad.name = Some(BAD_POD_NAME.to_owned());
            bad.generate_name = None;
            out.create_pods.push(bad);
            Ok(out)
        }
        Some(Mode::Many) => {
            let mut out = normal();
            let create = jinghzhu_plugin_sdk::pod::from_template(&input.jinghzhu);
            out.create_pods = vec![create; MANY_PODS];
            Ok(out)
        }
        Some(Mode::Log) => {
            hazards::chatter(&input.jinghzhu.metadata.name);
            Ok(normal())
        }
        Some(Mode::ProbeSandbox) => {
            let mut out = normal();
            out.events.push(jinghzhu_plugin_sdk::output::normal_event(
                PROBE_REASON,
                hazards::probe_sandbox(),
            ));
            Ok(out)
        }
        Some(Mode::Sleep) => {
            hazards::sleep_an_hour();
            Ok(normal())
        }
        Some(Mode::Recurse) => {
            let depth = hazards::recurse(1);
            Err(ReconcileError::fatal(format!(
                "recursion ended at {depth}?"
            )))
        }
        Some(Mode::LogFlood) => {
            hazards::flood_log();
            Ok(normal())
        }
        Some(Mode::RequeueZero) => {
            let mut out = normal();
            out.requeue_after_ms = Some(0);
            Ok(out)
        }
        Some(Mode::VolatileStatus) => {
            let mut out = normal();
            let mut status = take_status(input, &mut out);
            status.message = format!(
                "observed at {}.{:09}",
                input.now.seconds, input.now.nanoseconds
            );
            out.status = Some(status);
            out.requeue_after_ms = Some(1);
            Ok(out)
        }
        Some(Mode::Remember) => {
            let mut out = normal();
            let mut status = take_status(input, &mut out);
            let (global, heap) = hazards::count_this_call();
            status.message = format!("calls seen by this instance: global {global}, heap {heap}");
            out.status = Some(status);
            Ok(out)
        }
        Some(Mode::EventFlood) => {
            let mut out = normal();
            for i in out.events.len()..FLOOD_EVENTS {
                out.events.push(jinghzhu_plugin_sdk::output::normal_event(
                    format!("Flood{}{i}", input.now.nanoseconds),
                    "a reason never seen before",
                ));
            }
            Ok(out)
        }
        Some(Mode::OverCreate) => {
            let mut out = normal();
            let create = jinghzhu_plugin_sdk::pod::from_template(&input.jinghzhu);
            let count = input
                .jinghzhu
                .spec
                .desired
                .saturating_add(OVER_CREATE_EXTRA) as usize;
            out.create_pods = vec![create; count];
            Ok(out)
        }
        Some(mode) => with_output_altered(input, mode, normal),
    }
}

/// The modes that alter the normal output (the rest of [`as_asked`]).
fn with_output_altered(
    input: &ReconcileInput,
    mode: Mode,
    normal: impl Fn() -> ReconcileOutput,
) -> Result<ReconcileOutput, ReconcileError> {
    match mode {
        Mode::HugeStatus => {
            let mut out = normal();
            let names = (0..HUGE_POD_LIST).map(|i| format!("pod-{i}"));
            out.status = Some(jinghzhu_plugin_sdk::status::build(
                names, "Running", "huge", None,
            ));
            Ok(out)
        }
        Mode::Escalate(what) => {
            let mut out = normal();
            let spec = hazards::escalated_spec(&what);
            for create in &mut out.create_pods {
                create.spec_json = spec.clone();
            }
            Ok(out)
        }
        Mode::ForeignLabels => {
            let mut out = normal();
            for create in &mut out.create_pods {
                jinghzhu_plugin_sdk::kv::set(&mut create.labels, "app", "database");
            }
            Ok(out)
        }
        Mode::RandomFlood => wasi_work::random_flood(),
        Mode::PollableFlood => wasi_work::pollable_flood(),
        Mode::WasiScript(script) => {
            let steps = wasi_work::parse_script(&script)
                .map_err(|why| ReconcileError::fatal(format!("wasi-script: {why}")))?;
            let summary = wasi_work::run_script(&steps);
            let mut out = normal();
            out.events.push(jinghzhu_plugin_sdk::output::normal_event(
                WASI_SCRIPT_REASON,
                summary,
            ));
            Ok(out)
        }
        Mode::EmptySpec => {
            let mut out = normal();
            for create in &mut out.create_pods {
                create.spec_json.clear();
            }
            Ok(out)
        }
        Mode::FatAnnotations(bytes) => {
            let mut out = normal();
            let value = "x".repeat(bytes.saturating_sub(FAT_ANNOTATION_KEY.len()));
            for create in &mut out.create_pods {
                jinghzhu_plugin_sdk::kv::set(&mut create.annotations, FAT_ANNOTATION_KEY, &value);
            }
            Ok(out)
        }
        Mode::Forge(place) => hazards::forge(input, &place, normal()),
        Mode::BadWire(what) => {
            wire_tamper::request(&what);
            Ok(normal())
        }
        Mode::Turncoat if (input.now.seconds / 10) % 2 == 1 => {
            let mut out = normal();
            let mut bad = jinghzhu_plugin_sdk::pod::from_template(&input.jinghzhu);
            bad.name = Some(BAD_POD_NAME.to_owned());
            bad.generate_name = None;
            out.create_pods.push(bad);
            Ok(out)
        }
        Mode::Impersonate | Mode::Turncoat => {
            let mut out = normal();
            out.events.push(jinghzhu_plugin_sdk::output::normal_event(
                "SuccessfulCreate",
                "Created 1 pod(s): not-really",
            ));
            out.events.push(jinghzhu_plugin_sdk::output::warning_event(
                "RejectedOutput",
                "harmless: nothing wrong here",
            ));
            Ok(out)
        }
        Mode::DropTemplateMetadata => {
            let mut out = normal();
            for create in &mut out.create_pods {
                create.labels.clear();
                create.annotations.clear();
            }
            Ok(out)
        }
        Mode::ForeignLabelValue => {
            let mut out = normal();
            for create in &mut out.create_pods {
                jinghzhu_plugin_sdk::kv::set(
                    &mut create.labels,
                    FOREIGN_LABEL_KEY,
                    FOREIGN_LABEL_VALUE,
                );
            }
            Ok(out)
        }
        Mode::LieStatus(field) => Ok(lie_about_status(input, &field, normal())),
        Mode::SquatNames => {
            let mut out = normal();
            for (i, create) in out.create_pods.iter_mut().enumerate() {
                create.name = Some(format!("{}-db-{i}", input.jinghzhu.metadata.name));
                create.generate_name = None;
            }
            Ok(out)
        }
        Mode::Unknown(value) => {
            jinghzhu_plugin_sdk::log::warn(
                "unknown misbehave mode; behaving",
                &[("annotation", MISBEHAVE_ANNOTATION), ("value", &value)],
            );
            Ok(normal())
        }
        // The other modes are `as_asked`'s own, never passed here.
        _ => Ok(normal()),
    }
}

// The component's export: what `jinghzhu_plugin_sdk::export!` expands to,
// plus the `bad-wire` tampering of the encoded output.
#[cfg(target_arch = "wasm32")]
struct MisbehavingExport;

#[cfg(target_arch = "wasm32")]
impl jinghzhu_plugin_sdk::bindings::exports::jinghzhu::operator::reconciler::Guest
    for MisbehavingExport
{
    fn info() -> jinghzhu_plugin_sdk::bindings::jinghzhu::operator::types::PluginInfo {
        jinghzhu_plugin_sdk::wire::info::<MisbehavingPlugin>()
    }

    fn reconcile(
        input: jinghzhu_plugin_sdk::bindings::jinghzhu::operator::types::ReconcileInput,
    ) -> Result<
        jinghzhu_plugin_sdk::bindings::jinghzhu::operator::types::ReconcileOutput,
        jinghzhu_plugin_sdk::bindings::jinghzhu::operator::types::ReconcileError,
    > {
        jinghzhu_plugin_sdk::wire::reconcile::<MisbehavingPlugin>(input)
            .map(wire_tamper::apply_requested)
    }
}

#[cfg(target_arch = "wasm32")]
jinghzhu_plugin_sdk::bindings::export!(MisbehavingExport with_types_in jinghzhu_plugin_sdk::bindings);

#[cfg(all(test, not(feature = "always-trap")))]
mod tests {
    use super::*;
    use jinghzhu_plugin_sdk::log;
    use jinghzhu_plugin_sdk::testing::{InputBuilder, jinghzhu, pod};
    use jinghzhu_plugin_sdk::types::PodPhase;

    fn web(mode: Option<&str>) -> InputBuilder {
        let jz = jinghzhu("web", "default", 2);
        let jz = match mode {
            Some(m) => jz.annotation(MISBEHAVE_ANNOTATION, m),
            None => jz,
        };
        jz.input().pod(pod("web-a", PodPhase::Running))
    }

    /// What the plugin does for `input` without the variant features.
    fn plain(input: &ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
        reconcile_as(input, Build::default())
    }

    fn run(mode: Option<&str>) -> Result<ReconcileOutput, ReconcileError> {
        plain(&web(mode).build())
    }

    #[test]
    fn without_annotation_it_is_the_replicaset_plugin() {
        let input = web(None).build();
        let variant = if cfg!(feature = "v2") {
            Variant::V2
        } else {
            Variant::V1
        };
        assert_eq!(
            plain(&input),
            Ok(replicaset_logic::reconcile_with(&input, variant))
        );
        assert_eq!(run(None).map(|o| o.create_pods.len()), Ok(1));
        assert_eq!(MisbehavingPlugin::info().name, "misbehaving");
    }

    #[test]
    fn errors() {
        assert_eq!(run(Some("error")).map_err(|e| e.retryable), Err(true));
        assert_eq!(run(Some("fatal")).map_err(|e| e.retryable), Err(false));
    }

    #[test]
    fn panic_mode_panics() {
        let outcome = std::panic::catch_unwind(|| run(Some("panic")));
        assert!(outcome.is_err());
    }

    #[test]
    fn metadata_and_name_attacks_change_only_what_they_say() {
        let normal = run(None).expect("normal output");
        let dropped = run(Some("drop-template-metadata")).expect("output");
        assert_eq!(dropped.create_pods.len(), normal.create_pods.len());
        assert!(
            dropped
                .create_pods
                .iter()
                .all(|c| c.labels.is_empty() && c.annotations.is_empty())
        );
        let foreign = run(Some("foreign-label-value")).expect("output");
        assert_eq!(
            jinghzhu_plugin_sdk::kv::get(&foreign.create_pods[0].labels, FOREIGN_LABEL_KEY),
            Some(FOREIGN_LABEL_VALUE)
        );
        let squat = run(Some("squat-names")).expect("output");
        assert_eq!(squat.create_pods[0].name.as_deref(), Some("web-db-0"));
        assert_eq!(squat.create_pods[0].generate_name, None);
    }

    #[test]
    fn bad_outputs_carry_the_normal_output_too() {
        let normal = run(None).expect("normal output");
        let foreign = run(Some("delete-foreign")).expect("output");
        assert_eq!(foreign.delete_pods, [FOREIGN_POD]);
        assert_eq!(foreign.create_pods, normal.create_pods);

        let bad = run(Some("bad-name")).expect("output");
        assert_eq!(bad.create_pods.len(), normal.create_pods.len() + 1);
        assert_eq!(
            bad.create_pods.last().and_then(|c| c.name.as_deref()),
            Some(BAD_POD_NAME)
        );

        let many = run(Some("many")).expect("output");
        assert_eq!(many.create_pods.len(), MANY_PODS);
        assert_eq!(many.status, normal.status);
    }

    #[test]
    fn log_mode_logs_five_lines_with_fields() {
        log::take_captured();
        let out = run(Some("log")).expect("output");
        assert_eq!(Ok(out), run(None));
        let lines: Vec<_> = log::take_captured()
            .into_iter()
            .filter(|r| r.field("misbehave") == Some("log"))
            .collect();
        assert_eq!(lines.len(), LOG_LINES);
        assert_eq!(lines[4].field("line"), Some("5"));
        assert_eq!(lines[0].field("jinghzhu"), Some("web"));
    }

    #[test]
    fn forge_modes_carry_the_forged_text_and_impersonate_uses_host_reasons() {
        let err = run(Some("forge:error")).expect_err("an error");
        assert!(err.message.starts_with(FORGED_TEXT));
        assert_eq!(err.message.len(), FORGED_TEXT.len() + FORGED_PADDING);
        let label = run(Some("forge:label")).expect("output");
        assert!(
            label.create_pods[0]
                .labels
                .iter()
                .any(|kv| kv.key == FORGED_TEXT)
        );
        let event = run(Some("forge:event")).expect("output");
        assert!(event.events.iter().any(|e| e.message == FORGED_TEXT));
        let mimic = run(Some("impersonate")).expect("output");
        let reasons: Vec<&str> = mimic.events.iter().map(|e| e.reason.as_str()).collect();
        assert!(reasons.contains(&"SuccessfulCreate") && reasons.contains(&"RejectedOutput"));
    }

    #[test]
    fn fail_fifth_fails_by_name_and_is_normal_elsewhere() {
        let build = Build {
            fail_fifth: true,
            ..Build::default()
        };
        let names: Vec<String> = (0..50).map(|i| format!("web-{i}")).collect();
        let (failing, passing): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| variants::fails_by_name(n));
        assert!(!failing.is_empty() && !passing.is_empty());
        for name in failing {
            let input = jinghzhu(name, "default", 2).input().build();
            let err = reconcile_as(&input, build).expect_err("a failing name");
            assert!(err.retryable && err.message.contains(name.as_str()));
        }
        for name in passing {
            let input = jinghzhu(name, "default", 2).input().build();
            assert_eq!(reconcile_as(&input, build), plain(&input));
        }
    }

    #[test]
    fn idle_writes_the_status_and_makes_no_pod() {
        let build = Build {
            idle: true,
            ..Build::default()
        };
        let input = web(None).build();
        let normal = plain(&input).expect("normal output");
        let idle = reconcile_as(&input, build).expect("idle output");
        assert!(!normal.create_pods.is_empty());
        assert!(idle.create_pods.is_empty() && idle.delete_pods.is_empty());
        assert_eq!(idle.status, normal.status);
    }

    #[test]
    fn differ_adds_one_label_and_nothing_else() {
        let build = Build {
            differ: true,
            ..Build::default()
        };
        let input = web(None).build();
        let normal = plain(&input).expect("normal output");
        let differ = reconcile_as(&input, build).expect("differ output");
        assert_eq!(differ.create_pods.len(), 1);
        assert_eq!(
            jinghzhu_plugin_sdk::kv::get(&differ.create_pods[0].labels, variants::DIFFER_LABEL_KEY),
            Some("web")
        );
        assert_eq!(differ.status, normal.status);
        assert_eq!(differ.requeue_after_ms, normal.requeue_after_ms);
        // Converged, it proposes exactly what the normal plugin does.
        let converged = jinghzhu("web", "default", 1)
            .input()
            .pod(pod("web-a", PodPhase::Running))
            .build();
        assert_eq!(reconcile_as(&converged, build), plain(&converged));
    }

    #[test]
    fn the_version_names_the_features_that_change_reconciles() {
        let version = MisbehavingPlugin::info().version;
        let suffix = VERSION_SUFFIX;
        assert!(version.ends_with(suffix));
        let named: Vec<&str> = suffix.trim_start_matches('+').split('.').collect();
        assert_eq!(named.contains(&"fail-fifth"), cfg!(feature = "fail-fifth"));
        assert_eq!(named.contains(&"differ"), cfg!(feature = "differ"));
        assert_eq!(named.contains(&"v2"), cfg!(feature = "v2"));
        assert_eq!(Build::THIS.fail_fifth, cfg!(feature = "fail-fifth"));
        assert_eq!(Build::THIS.differ, cfg!(feature = "differ"));
    }

    #[test]
    fn unknown_mode_behaves() {
        assert_eq!(run(Some("dance")), run(None));
    }
}
