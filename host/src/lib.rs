//! wasm-operator host.
