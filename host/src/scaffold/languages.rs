//! `wasm-operator new --lang python|js`: the files of a standalone plugin
//! project in Python (componentize-py) or JavaScript (componentize-js), of
//! contract `jinghzhu:operator@0.2.0`.
//!
//! A project carries its SDK (the files of `plugins/python/sdk` or
//! `plugins/js/sdk`, embedded in this binary), the WIT, the logic of the
//! example `replicaset` plugin under the project's name (so, untouched, it
//! proposes what that plugin does), native tests, a golden fixture, and the
//! scripts to install the toolchain and build: `toolchain.sh` (the same pins
//! and the same cache under `~/.cache/wasm-operator` as this repository's
//! `tests/setup.sh`: a venv with componentize-py; `npm ci` from the
//! lockfile) and `build.sh`. Nothing else is needed to build and test it.

use std::path::{Path, PathBuf};

use crate::runtime::bindings::v2::WIT_PACKAGE;

/// The language of a scaffolded plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Lang {
    /// A Rust crate (cargo; the SDK crate as a dependency).
    #[default]
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript (ES modules), built with componentize-js.
    Js,
}

const WIT: &str = include_str!("../../../wit/0.2/operator.wit");
const DEFAULT_POD_SPEC: &str = include_str!("../../../wit/default-pod-spec.json");
const FIXTURE_INPUT: &str = include_str!("template/fixtures/scale-up/input.yaml");
const FIXTURE_EXPECTED: &str = include_str!("template/fixtures/scale-up/expected.yaml");
const FIXTURE_NOW: &str = include_str!("template/fixtures/scale-up/now");

macro_rules! embed {
    ($dir:literal, [$($file:literal),* $(,)?]) => {
        &[$(($file, include_str!(concat!("../../../", $dir, "/", $file)))),*]
    };
}

/// The Python SDK, as in `plugins/python/sdk`.
const PYTHON_SDK: &[(&str, &str)] = embed!(
    "plugins/python/sdk",
    [
        "wit_bindings.py",
        "jinghzhu_plugin_sdk/__init__.py",
        "jinghzhu_plugin_sdk/_wit.py",
        "jinghzhu_plugin_sdk/fixtures.py",
        "jinghzhu_plugin_sdk/input.py",
        "jinghzhu_plugin_sdk/kv.py",
        "jinghzhu_plugin_sdk/log.py",
        "jinghzhu_plugin_sdk/output.py",
        "jinghzhu_plugin_sdk/plugin.py",
        "jinghzhu_plugin_sdk/pod.py",
        "jinghzhu_plugin_sdk/status.py",
        "jinghzhu_plugin_sdk/testing.py",
        "jinghzhu_plugin_sdk/time.py",
    ]
);

/// The JavaScript SDK, as in `plugins/js/sdk`.
const JS_SDK: &[(&str, &str)] = embed!(
    "plugins/js/sdk",
    [
        "fixtures.js",
        "index.js",
        "input.js",
        "kv.js",
        "log.js",
        "output.js",
        "plugin.js",
        "pod.js",
        "status.js",
        "testing.js",
        "time.js",
    ]
);

const PY_LOGIC: &str = include_str!("../../../plugins/python/replicaset/replicaset.py");
const PY_REQUIREMENTS: &str = include_str!("../../../plugins/python/requirements.txt");
const PY_TOOLCHAIN: &str = include_str!("../../../plugins/python/toolchain.sh");
const PY_PYTEST_INI: &str = include_str!("../../../plugins/python/pytest.ini");
const PY_BUILD: &str = include_str!("template/python/build.sh");
const PY_TEST: &str = include_str!("template/python/test.sh");
const PY_CONFTEST: &str = include_str!("template/python/conftest.py");
const PY_APP: &str = include_str!("template/python/app.py");
const PY_TEST_FIXTURES: &str = include_str!("template/python/test_fixtures.py");
const PY_TEST_PLUGIN: &str = include_str!("template/python/test_plugin.py");
const PY_GITIGNORE: &str = include_str!("template/python/gitignore");
const PY_README: &str = include_str!("template/python/README.md.tmpl");

const JS_LOGIC: &str = include_str!("../../../plugins/js/replicaset/replicaset.js");
const JS_PACKAGE: &str = include_str!("../../../plugins/js/package.json");
const JS_LOCK: &str = include_str!("../../../plugins/js/package-lock.json");
const JS_TOOLCHAIN: &str = include_str!("../../../plugins/js/toolchain.sh");
const JS_TYPES: &str = include_str!("../../../plugins/js/tools/types.mjs");
const JS_BUILD: &str = include_str!("template/js/build.sh");
const JS_PACKAGE_TEMPLATE: &str = include_str!("template/js/package.json.tmpl");
const JS_APP: &str = include_str!("template/js/app.js");
const JS_PATHS: &str = include_str!("template/js/paths.js");
const JS_TEST_FIXTURES: &str = include_str!("template/js/fixtures.test.js");
const JS_TEST_PLUGIN: &str = include_str!("template/js/plugin.test.js");
const JS_GITIGNORE: &str = include_str!("template/js/gitignore");
const JS_README: &str = include_str!("template/js/README.md.tmpl");

/// The name the example plugins report, replaced by the project's name.
const PY_EXAMPLE_NAME: &str = "PLUGIN_NAME = \"replicaset-py\"";
const JS_EXAMPLE_NAME: &str = "export const PLUGIN_NAME = 'replicaset-js';";
/// The name of the example JavaScript package, replaced in the lockfile.
const JS_EXAMPLE_PACKAGE: &str = "\"name\": \"@wasm-operator/replicaset-js\"";

fn fill(template: &str, name: &str, host_version: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{wit_package}}", WIT_PACKAGE)
        .replace("{{host_version}}", host_version)
}

fn common(files: &mut Vec<(PathBuf, String)>) {
    let case = Path::new("fixtures").join("scale-up");
    files.push(("wit/operator.wit".into(), WIT.to_string()));
    files.push((
        "wit/default-pod-spec.json".into(),
        DEFAULT_POD_SPEC.to_string(),
    ));
    files.push((case.join("input.yaml"), FIXTURE_INPUT.to_string()));
    files.push((case.join("expected.yaml"), FIXTURE_EXPECTED.to_string()));
    files.push((case.join("now"), FIXTURE_NOW.to_string()));
}

/// The files of a Python plugin project named `name`.
pub fn python_files(name: &str, host_version: &str) -> Vec<(PathBuf, String)> {
    let logic = PY_LOGIC.replace(PY_EXAMPLE_NAME, &format!("PLUGIN_NAME = {name:?}"));
    let mut files: Vec<(PathBuf, String)> = vec![
        ("README.md".into(), fill(PY_README, name, host_version)),
        (".gitignore".into(), PY_GITIGNORE.to_string()),
        ("requirements.txt".into(), PY_REQUIREMENTS.to_string()),
        ("toolchain.sh".into(), PY_TOOLCHAIN.to_string()),
        ("build.sh".into(), fill(PY_BUILD, name, host_version)),
        ("test.sh".into(), PY_TEST.to_string()),
        ("pytest.ini".into(), PY_PYTEST_INI.to_string()),
        ("conftest.py".into(), PY_CONFTEST.to_string()),
        ("src/app.py".into(), PY_APP.to_string()),
        ("src/plugin.py".into(), logic),
        (
            "tests/test_fixtures.py".into(),
            PY_TEST_FIXTURES.to_string(),
        ),
        ("tests/test_plugin.py".into(), PY_TEST_PLUGIN.to_string()),
    ];
    for (path, text) in PYTHON_SDK {
        files.push((Path::new("sdk").join(path), (*text).to_string()));
    }
    common(&mut files);
    files
}

/// The `devDependencies` object of the example JavaScript package: the
/// pins the embedded lockfile resolves.
fn js_dev_dependencies() -> String {
    let package: serde_json::Value = serde_json::from_str(JS_PACKAGE).unwrap_or_default();
    let deps = package
        .get("devDependencies")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    serde_json::to_string_pretty(&deps)
        .unwrap_or_else(|_| "{}".to_string())
        .replace('\n', "\n  ")
}

/// The files of a JavaScript plugin project named `name`.
pub fn js_files(name: &str, host_version: &str) -> Vec<(PathBuf, String)> {
    let logic = JS_LOGIC.replace(
        JS_EXAMPLE_NAME,
        &format!("export const PLUGIN_NAME = {};", serde_json::json!(name)),
    );
    let package = fill(JS_PACKAGE_TEMPLATE, name, host_version)
        .replace("{{dev_dependencies}}", &js_dev_dependencies());
    let lock = JS_LOCK.replace(
        JS_EXAMPLE_PACKAGE,
        &format!("\"name\": {}", serde_json::json!(name)),
    );
    let mut files: Vec<(PathBuf, String)> = vec![
        ("README.md".into(), fill(JS_README, name, host_version)),
        (".gitignore".into(), JS_GITIGNORE.to_string()),
        ("package.json".into(), package),
        ("package-lock.json".into(), lock),
        ("toolchain.sh".into(), JS_TOOLCHAIN.to_string()),
        ("build.sh".into(), fill(JS_BUILD, name, host_version)),
        ("tools/types.mjs".into(), JS_TYPES.to_string()),
        ("src/app.js".into(), JS_APP.to_string()),
        ("src/plugin.js".into(), logic),
        ("test/paths.js".into(), JS_PATHS.to_string()),
        ("test/fixtures.test.js".into(), JS_TEST_FIXTURES.to_string()),
        ("test/plugin.test.js".into(), JS_TEST_PLUGIN.to_string()),
    ];
    for (path, text) in JS_SDK {
        files.push((Path::new("sdk").join(path), (*text).to_string()));
    }
    common(&mut files);
    files
}

/// Whether a scaffolded file must be executable (the shell scripts).
pub fn is_executable(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "sh")
}

/// The next steps `new` prints for a project in `dir`.
pub fn next_steps(lang: Lang, dir: &Path, name: &str, wasm_operator: &str) -> String {
    let (test, build) = match lang {
        Lang::Python => ("./test.sh", "./build.sh"),
        Lang::Js => ("./toolchain.sh && npm test", "./build.sh"),
        Lang::Rust => ("cargo test", "cargo build --release --target wasm32-wasip2"),
    };
    format!(
        "\n  cd {}\n  {test}\n  {build}\n  {wasm_operator} reconcile --plugin target/{name}.wasm --fixtures fixtures\n  cp target/{name}.wasm target/live.wasm   # the host runs a copy: replacing it swaps plugins\n  {wasm_operator} run --plugin target/live.wasm",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_names_are_replaced() {
        assert!(
            PY_LOGIC.contains(PY_EXAMPLE_NAME),
            "plugins/python renamed its plugin"
        );
        assert!(
            JS_LOGIC.contains(JS_EXAMPLE_NAME),
            "plugins/js renamed its plugin"
        );
        assert_eq!(JS_LOCK.matches(JS_EXAMPLE_PACKAGE).count(), 2);
        let py = python_files("even", "wasm-operator 0.0.0");
        let logic = &py
            .iter()
            .find(|(p, _)| p == Path::new("src/plugin.py"))
            .expect("logic")
            .1;
        assert!(logic.contains("PLUGIN_NAME = \"even\""));
        let js = js_files("even-js", "wasm-operator 0.0.0");
        let logic = &js
            .iter()
            .find(|(p, _)| p == Path::new("src/plugin.js"))
            .expect("logic")
            .1;
        assert!(logic.contains("export const PLUGIN_NAME = \"even-js\";"));
        for (path, text) in py.iter().chain(&js) {
            assert!(
                !text.contains("{{"),
                "{} has an unfilled placeholder",
                path.display()
            );
        }
    }

    #[test]
    fn the_js_package_and_lockfile_agree() {
        let js = js_files("p", "wasm-operator 0.0.0");
        let get = |name: &str| {
            let text = &js.iter().find(|(p, _)| p == Path::new(name)).expect(name).1;
            serde_json::from_str::<serde_json::Value>(text).expect("JSON")
        };
        let (package, lock) = (get("package.json"), get("package-lock.json"));
        assert_eq!(package["name"], "p");
        assert_eq!(lock["name"], "p");
        assert_eq!(
            package["devDependencies"], lock["packages"][""]["devDependencies"],
            "npm ci refuses a lockfile whose pins differ from package.json"
        );
    }
}
