//! `wasm-operator`: see `wasm-operator --help`.

fn main() -> std::process::ExitCode {
    wasm_operator::cli::main()
}
