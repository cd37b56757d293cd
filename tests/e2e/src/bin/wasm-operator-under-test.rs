//! The host's `main`, built in the test profile beside the tests, for the
//! tests that run `wasm-operator run` as a process of its own (its `/proc`
//! figures, its probes, its log): `CARGO_BIN_EXE_wasm-operator-under-test`.
//! The same two lines as `host/src/main.rs`. Built with the runtime's
//! `compile` feature (a dependency of this package), the child compiler it
//! starts is itself (`/proc/self/exe compile-plugin`); the shipped binary
//! has none and starts `wasm-operator-compile`.

fn main() -> std::process::ExitCode {
    wasm_operator::runtime::reclaim::pin_allocator_thresholds();
    wasm_operator::cli::main()
}
