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
//! Built with `bad-info`, `info()` reports a name the host refuses.
//!
//! Build: `cargo build --release --target wasm32-wasip2 -p misbehaving-plugin`
//! (and with `--features always-trap --target-dir <another dir>` for the
//! trapping build).

use jinghzhu_plugin_sdk::prelude::*;
use replicaset_logic::Variant;

pub mod hazards;
pub mod mode;

pub use mode::{MISBEHAVE_ANNOTATION, Mode};

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

/// The plugin: implements the exported `reconciler` interface.
pub struct MisbehavingPlugin;

impl Guest for MisbehavingPlugin {
    fn info() -> PluginInfo {
        if cfg!(feature = "bad-info") {
            return PluginInfo::new("Bad Name\nINFO forged host line", "1.0");
        }
        let suffix = if cfg!(feature = "always-trap") {
            "+always-trap"
        } else {
            ""
        };
        PluginInfo::new(
            PLUGIN_NAME,
            format!("{}{suffix}", env!("CARGO_PKG_VERSION")),
        )
    }

    fn reconcile(input: ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
        if cfg!(feature = "always-trap") {
            panic!("misbehaving plugin built with always-trap: every reconcile traps");
        }
        reconcile(&input)
    }
}

/// What the plugin does for `input` (without the `always-trap` feature).
pub fn reconcile(input: &ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
    let normal = || replicaset_logic::reconcile_with(input, Variant::V1);
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
            let mut status = out
                .status
                .take()
                .or_else(|| input.jinghzhu.status.clone())
                .unwrap_or_else(|| {
                    jinghzhu_plugin_sdk::status::build(Vec::<String>::new(), "Pending", "", None)
                });
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
            let mut status = out
                .status
                .take()
                .or_else(|| input.jinghzhu.status.clone())
                .unwrap_or_else(|| {
                    jinghzhu_plugin_sdk::status::build(Vec::<String>::new(), "Pending", "", None)
                });
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
        Some(Mode::HugeStatus) => {
            let mut out = normal();
            let names = (0..HUGE_POD_LIST).map(|i| format!("pod-{i}"));
            out.status = Some(jinghzhu_plugin_sdk::status::build(
                names, "Running", "huge", None,
            ));
            Ok(out)
        }
        Some(Mode::Escalate(what)) => {
            let mut out = normal();
            let spec = hazards::escalated_spec(&what);
            for create in &mut out.create_pods {
                create.spec_json = spec.clone();
            }
            Ok(out)
        }
        Some(Mode::ForeignLabels) => {
            let mut out = normal();
            for create in &mut out.create_pods {
                jinghzhu_plugin_sdk::kv::set(&mut create.labels, "app", "database");
            }
            Ok(out)
        }
        Some(Mode::Unknown(value)) => {
            jinghzhu_plugin_sdk::log::warn(
                "unknown misbehave mode; behaving",
                &[("annotation", MISBEHAVE_ANNOTATION), ("value", &value)],
            );
            Ok(normal())
        }
    }
}

jinghzhu_plugin_sdk::export!(MisbehavingPlugin);

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

    fn run(mode: Option<&str>) -> Result<ReconcileOutput, ReconcileError> {
        reconcile(&web(mode).build())
    }

    #[test]
    fn without_annotation_it_is_the_replicaset_plugin() {
        let input = web(None).build();
        assert_eq!(
            reconcile(&input),
            Ok(replicaset_logic::reconcile_with(&input, Variant::V1))
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
    fn unknown_mode_behaves() {
        assert_eq!(run(Some("dance")), run(None));
    }
}
