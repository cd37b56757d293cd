//! `wasm-operator-compile`: the compile helper. The serving `wasm-operator`
//! has no compiler; it starts this executable as its child, sandboxed and
//! limited, for every plugin it compiles (`compile-plugin`: the component
//! on stdin, the artifact on stdout). It must come from the same release as
//! the host: it refuses to compile for an engine whose key differs from its
//! own.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use wasm_operator_runtime::compiler::{self, CompilePluginArgs};

#[derive(Debug, Parser)]
#[command(name = "wasm-operator-compile", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile the component on stdin to native code on stdout, for the
    /// engine whose key is given (the host's).
    #[command(name = "compile-plugin")]
    CompilePlugin(CompilePluginArgs),
    /// Print the key of the engine this helper compiles for.
    EngineKey,
}

fn main() -> ExitCode {
    let outcome = match Cli::parse().command {
        Command::CompilePlugin(args) => compiler::compile_plugin(args),
        Command::EngineKey => compiler::helper_engine_key().map(|key| println!("{key}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
