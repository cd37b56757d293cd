//! The files both Go scaffolds write alike, the plugin of contract 0.2
//! ([`super::languages`]) and the controller of contract 0.3
//! ([`super::go_controller`]): `go.mod` (its module path the project's
//! name), `go.sum`, `toolchain.sh`, `.gitignore`, `build.sh` for the
//! project's WIT world, and the logger both Go SDKs re-export
//! (`plugins/go/internal/pluginlog`). Imports of this repository's Go
//! module in embedded files are rewritten to the project's ([`with_module`]).

use std::path::PathBuf;

/// The module path of `plugins/go`, replaced by the project's.
pub(super) const GO_MODULE: &str = "github.com/wasm-operator/wasm-operator/plugins/go";

const GO_MOD: &str = include_str!("../../../plugins/go/go.mod");
const GO_SUM: &str = include_str!("../../../plugins/go/go.sum");
const TOOLCHAIN: &str = include_str!("../../../plugins/go/toolchain.sh");
const GITIGNORE: &str = include_str!("template/go-common/gitignore");
const BUILD: &str = include_str!("template/go-common/build.sh");
/// The packages of `plugins/go` both SDKs import, at the same paths.
const SHARED: &[(&str, &str)] = embed!("plugins/go", ["internal/pluginlog/log.go"]);

/// `text` with this repository's Go module path replaced by `name`.
pub(super) fn with_module(text: &str, name: &str) -> String {
    text.replace(GO_MODULE, name)
}

/// The shared files of the Go project `name` whose component is the WIT
/// world `world` of its `wit/`; `fill` fills the scaffold's placeholders
/// (`{{name}}`, `{{wit_package}}`) in `build.sh`.
pub(super) fn files(
    name: &str,
    world: &str,
    fill: impl Fn(&str) -> String,
) -> Vec<(PathBuf, String)> {
    let mut files: Vec<(PathBuf, String)> = vec![
        (".gitignore".into(), GITIGNORE.to_string()),
        ("go.mod".into(), with_module(GO_MOD, name)),
        ("go.sum".into(), GO_SUM.to_string()),
        ("toolchain.sh".into(), TOOLCHAIN.to_string()),
        (
            "build.sh".into(),
            fill(BUILD).replace("{{wit_world}}", world),
        ),
    ];
    for (path, text) in SHARED {
        files.push((path.into(), with_module(text, name)));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_sh_names_the_world_and_leaves_no_placeholder() {
        let files = files("p", "controller", |t| {
            t.replace("{{name}}", "p")
                .replace("{{wit_package}}", "w:p@0.3.0")
        });
        let build = &files
            .iter()
            .find(|(p, _)| p == &PathBuf::from("build.sh"))
            .expect("build.sh")
            .1;
        assert!(build.contains("component embed wit --world controller "));
        assert!(!build.contains("{{"), "{build}");
        let log = &files
            .iter()
            .find(|(p, _)| p == &PathBuf::from("internal/pluginlog/log.go"))
            .expect("the shared logger")
            .1;
        assert!(log.starts_with("// Package pluginlog "), "{log}");
    }
}
