//! A "plugin" written as a binary crate: built for wasm32-wasip2 it is a
//! WASI command (it exports `wasi:cli/run`), which the host refuses with an
//! error naming the fix (a cdylib library calling `export!`).

fn main() {
    println!("a plugin is a library, not a program");
}
