//! The command line: `run` (the operator), `reconcile` (a plugin on files,
//! golden fixtures, comparing two plugins), `record` (fixture cases from a
//! live cluster), `new` (scaffold a plugin crate), `crd` (print the CRDs)
//! and `rbac` (the roles, or the Helm chart's values, for declared
//! controllers).

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::offline::ReconcileArgs;
use crate::offline::record::RecordArgs;
use crate::run::RunArgs;
use crate::scaffold::NewArgs;

/// A Kubernetes operator host whose reconcile logic is a sandboxed WebAssembly component.
#[derive(Debug, Parser)]
#[command(version = crate::runtime::contract::VERSION_LINE, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, env = "WASM_OPERATOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: watch Jinghzhus and their pods, reconcile them with the plugin.
    Run(Box<RunArgs>),
    /// Run a plugin once on objects from files (no cluster) and print what it proposes,
    /// check a directory of golden fixtures, or compare two plugins on them.
    Reconcile(ReconcileArgs),
    /// Record fixture cases from a live cluster: Jinghzhus and their pods as the host
    /// sees them, or with --controller a declared controller's parents and their objects
    /// (and, with --plugin, the plugin's proposal as expected.yaml).
    Record(RecordArgs),
    /// Create a new plugin crate (standalone cargo workspace) with a test and a fixture.
    New(NewArgs),
    /// Print the CustomResourceDefinitions (Jinghzhu, JinghzhuPlugin,
    /// PluginController) as YAML.
    Crd,
    /// Print the RBAC a host needs for the PluginControllers in FILES:
    /// exactly their kinds, never a wildcard (`--format helm-values`: the
    /// Helm chart's values for a host of exactly these controllers).
    Rbac(crate::declared::rbac::RbacArgs),
    /// Push a plugin component to an OCI registry as a Wasm artifact
    /// (`wasm-operator push plugin.wasm oci://REGISTRY/REPO:TAG`); prints its digest.
    Push(crate::registry::push::PushArgs),
    /// Promote, abort, pause or resume the canary rollout of a JinghzhuPlugin
    /// (patches the resource only; the hosts act on it).
    Rollout(crate::delivery::resource::rollout_cli::RolloutArgs),
    /// Compile the component on stdin to native code on stdout, for an engine
    /// with the host's settings, as `wasm-operator-compile` does (only in a
    /// build with the runtime's `compile` feature: tests and benchmarks).
    #[command(name = "compile-plugin", hide = true)]
    CompilePlugin(crate::runtime::compiler::CompilePluginArgs),
}

/// Sets up logging to stderr; `hide_plugin_logs` drops the plugins' own
/// lines (target `plugin`), as `reconcile` does without `--plugin-logs`.
fn init_tracing(format: LogFormat, hide_plugin_logs: bool) {
    use tracing_subscriber::EnvFilter;
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if hide_plugin_logs && let Ok(directive) = "plugin=off".parse() {
        filter = filter.add_directive(directive);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The environment variable that named two different caches; no longer read.
pub const DEPRECATED_CACHE_DIR_ENV: &str = "WASM_OPERATOR_CACHE_DIR";

/// Warns when the retired `WASM_OPERATOR_CACHE_DIR` is set: it used to set
/// the precompiled-plugin cache here and the Kubernetes binary cache in the
/// test harness.
fn warn_about_renamed_env() {
    if std::env::var_os(DEPRECATED_CACHE_DIR_ENV).is_some_and(|v| !v.is_empty()) {
        tracing::warn!(
            "{DEPRECATED_CACHE_DIR_ENV} is no longer read by wasm-operator: set \
             WASM_OPERATOR_PRECOMPILED_DIR (or --cache-dir) for the precompiled-plugin cache; \
             WASM_OPERATOR_KUBE_CACHE_DIR is the local control plane's Kubernetes binary cache"
        );
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let hide_plugin_logs =
        matches!(&cli.command, Command::Reconcile(args) if args.hides_plugin_logs());
    init_tracing(cli.log_format, hide_plugin_logs);
    warn_about_renamed_env();
    match execute(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// How long `run` waits, after the host stopped, for blocking work (a
/// plugin call) before the process exits anyway.
const RUNTIME_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// Parses `args` (the program name first) and runs them with [`execute`].
pub fn execute_args<I, T>(args: I) -> anyhow::Result<ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    execute(Cli::try_parse_from(args)?)
}

/// Runs a parsed command line (without setting up logging): what `main`
/// does, callable in-process by tests. Blocking; `run` and `record` start
/// their own async runtime, so call it outside one (e.g. `spawn_blocking`).
pub fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Crd => crate::crd::crd_yaml().map(|yaml| {
            print!("{yaml}");
            ExitCode::SUCCESS
        }),
        Command::Reconcile(args) => crate::offline::run(args),
        Command::Record(args) => crate::offline::record_command(args),
        Command::New(args) => crate::scaffold::run(args),
        Command::Push(args) => crate::registry::push::run(args),
        Command::Rbac(args) => crate::declared::rbac::run(&args),
        Command::Rollout(args) => rollout(&args),
        Command::CompilePlugin(args) => {
            crate::runtime::compiler::compile_plugin(args).map(|()| ExitCode::SUCCESS)
        }
        Command::Run(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                let stopped = rt.block_on(crate::run::run(*args));
                // A plugin call still running on a blocking thread does not
                // hold the exit (the shutdown is bounded; see `run`).
                rt.shutdown_timeout(RUNTIME_STOP_TIMEOUT);
                stopped
            })
            .map(|()| ExitCode::SUCCESS),
    }
}

/// `wasm-operator rollout`: patches the resource, prints what it did.
fn rollout(args: &crate::delivery::resource::rollout_cli::RolloutArgs) -> anyhow::Result<ExitCode> {
    let done = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = crate::run::connect().await?;
            use crate::delivery::resource::rollout_cli::{apply, apply_to_controller};
            if args.controller {
                apply_to_controller(&client, &args.name, args.action).await
            } else {
                apply(&client, &args.name, args.action).await
            }
        })?;
    println!("{done}");
    Ok(ExitCode::SUCCESS)
}
