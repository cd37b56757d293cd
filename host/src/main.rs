//! `wasm-operator`: see `wasm-operator --help`.

fn main() -> std::process::ExitCode {
    // Before any other thread: big plugin outputs must not stay resident.
    wasm_operator::runtime::reclaim::pin_allocator_thresholds();
    wasm_operator::cli::main()
}
