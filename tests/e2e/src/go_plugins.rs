//! The Go set-up the language tests share (`tests/languages.rs`, the 0.2
//! SDK of `plugins/go/sdk`; `tests/languages_controller.rs`, the 0.3 SDK of
//! `plugins/go/controller`): `plugins/go` with its toolchain linked in, the
//! SDKs' native tests (`go test`), the check that committed bindings are
//! what `wit-bindgen go` generates today, and running a scaffolded
//! project's scripts.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use wasm_artifacts::workspace_root;

/// The module path of `plugins/go`.
pub const GO_MODULE: &str = "github.com/wasm-operator/wasm-operator/plugins/go";

/// Runs `program ARGS...` in `dir` and fails with its output unless it
/// succeeds; returns the output (stdout then stderr).
pub fn run_in(dir: &Path, program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .with_context(|| {
            format!(
                "starting {program} in {} (run tests/setup.sh)",
                dir.display()
            )
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "{program} {args:?} in {} failed:\n{text}",
        dir.display()
    );
    Ok(text)
}

/// `plugins/go`, with its toolchain's runtime package linked in
/// (`toolchain.sh`, a warm cache: no download).
pub fn go_plugin_dir() -> Result<PathBuf> {
    let dir = workspace_root().join("plugins/go");
    run_in(&dir, "./toolchain.sh", &[])?;
    Ok(dir)
}

/// `go test -count=1 PATTERNS...` in `plugins/go`: fails unless it passes
/// and each of `tested` (package paths in the module, e.g. `sdk`) printed
/// its `ok` line; returns go test's output.
pub fn go_test(patterns: &[&str], tested: &[&str]) -> Result<String> {
    let dir = go_plugin_dir()?;
    let mut args = vec!["test", "-count=1"];
    args.extend(patterns);
    let text = run_in(&dir, "go", &args)?;
    ensure!(!text.contains("FAIL"), "{text}");
    for package in tested {
        let ok = format!("ok  \t{GO_MODULE}/{package}\t");
        ensure!(
            text.lines().any(|l| l.starts_with(&ok)),
            "go test ran no test of {package}:\n{text}"
        );
    }
    Ok(text)
}

/// Fails unless the bindings committed in `SDK/bindings` (`sdk` relative
/// to the workspace root: `plugins/go` or `plugins/go/controller`) are,
/// file for file, what `SDK/gen-bindings.sh` generates from the WIT today.
pub fn bindings_match_the_wit(sdk: &str) -> Result<()> {
    go_plugin_dir()?;
    let dir = workspace_root().join(sdk);
    let fresh = tempfile::TempDir::new()?;
    let out = fresh.path().to_str().context("a temporary path in UTF-8")?;
    run_in(&dir, "./gen-bindings.sh", &[out])?;
    for part in ["imports", "exports/wit_exports"] {
        let generated = fresh.path().join(part);
        let committed = dir.join("bindings").join(part);
        let names = files_under(&generated)?;
        ensure!(!names.is_empty(), "wit-bindgen generated nothing in {part}");
        ensure!(
            names == files_under(&committed)?,
            "{sdk}/bindings/{part} holds other files than wit-bindgen generates: run {sdk}/gen-bindings.sh"
        );
        for name in names {
            ensure!(
                std::fs::read(generated.join(&name))? == std::fs::read(committed.join(&name))?,
                "{sdk}/bindings/{part}/{} differs from what wit-bindgen generates: run {sdk}/gen-bindings.sh",
                name.display()
            );
        }
    }
    Ok(())
}

/// Every file under `dir`, as paths relative to it, sorted.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.push(path.strip_prefix(dir)?.to_path_buf());
            }
        }
    }
    out.sort();
    Ok(out)
}
