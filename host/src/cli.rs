//! The command line: `run` (the operator), `reconcile` (a plugin on files,
//! golden fixtures) and `crd` (print the CRD).

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::offline::ReconcileArgs;
use crate::run::RunArgs;

/// A Kubernetes operator host whose reconcile logic is a sandboxed WebAssembly component.
#[derive(Debug, Parser)]
#[command(version, about)]
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
    /// or check a directory of golden fixtures.
    Reconcile(ReconcileArgs),
    /// Print the Jinghzhu CustomResourceDefinition as YAML.
    Crd,
}

fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let result = match cli.command {
        Command::Crd => crate::crd::crd_yaml().map(|yaml| {
            print!("{yaml}");
            ExitCode::SUCCESS
        }),
        Command::Reconcile(args) => crate::offline::run(args),
        Command::Run(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(crate::run::run(*args)))
            .map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
