//! The host's rooms read top-down: every `crate::`/`super::` path in the
//! host's sources (outside comments and unit tests) points to a room below
//! the one it is written in, and no files import each other in a circle.
//!
//! A room is a top-level module of `host/src` (`controller/`, `apply/`,
//! `serve.rs`, …) or a walled crate of `host/crates/` that `lib.rs`
//! re-exports under a room's name (`runtime`, `crd`, …: [`WALLED`]). [`LAYERS`] lists them from the top; a room may import
//! only rooms on a later line. A file may always use its own ancestors
//! (`super::` in a child is how a room's `mod.rs` shares its types), and
//! files of one room may import each other as long as no circle forms.
//!
//! When this fails, move the shared type down (or merge the two files)
//! rather than adding an arrow that runs back up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The rooms, top first. A room may import only rooms of later lines.
const LAYERS: &[&[&str]] = &[
    &["main", "lib"],
    &["cli"],
    &["offline", "scaffold"],
    &["run"],
    &["serve"],
    &["controller", "declared"],
    &["delivery"],
    &["shards"],
    &["slot", "leader"],
    &["apply"],
    &["telemetry"],
    &["judging", "event_reasons"],
    &["kube_api"],
    &["tasks", "refusal"],
    // The walled crates, re-exported by `lib.rs` ([`WALLED`]): the bottom
    // floors. Cargo keeps them from importing the host at all, and the
    // registry and the runtime do not import each other.
    &["registry", "runtime"],
    &[
        "actions",
        "cached_pod",
        "crd",
        "disk",
        "locks",
        "observed",
        "ownership",
        "plugin_text",
    ],
];

/// Rooms that are crates of their own (`host/crates/`), re-exported by
/// `lib.rs` under these names: no file under `host/src`, but a path the
/// host's rooms name, and it counts.
const WALLED: &[&str] = &[
    "registry",
    "runtime",
    "actions",
    "cached_pod",
    "crd",
    "disk",
    "locks",
    "observed",
    "ownership",
    "plugin_text",
];

/// The module path of the source file `file` under `src` (`mod.rs` is its
/// directory's module).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut path: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("reading the source directory")
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs")
            // A unit-test module file (`mod tests;`) is not part of the room's shape.
            && path.file_name().is_some_and(|name| name != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The code of `text` without comment lines and without its inline unit
/// test module (`#[cfg(test)] mod tests { … }`, which ends the file).
fn code_of(text: &str) -> String {
    let text = text
        .split("#[cfg(test)]\nmod tests {")
        .next()
        .unwrap_or_default();
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path the code names through `crate::` or `super::` (each
/// as long as it goes; `super::{a, b}` counts as the parent).
fn named_paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (start, in_parent) in [("crate::", false), ("super::", true)] {
        for (at, _) in code.match_indices(start) {
            // Not the tail of a longer identifier (`my_crate::`).
            if code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
            {
                continue;
            }
            let rest = &code[at + start.len()..];
            let mut segments: Vec<String> = Vec::new();
            let mut tail = rest;
            loop {
                let ident: String = tail
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if ident.is_empty() {
                    break;
                }
                tail = &tail[ident.len()..];
                segments.push(ident);
                match tail.strip_prefix("::") {
                    Some(next) => tail = next,
                    None => break,
                }
            }
            // `super` of module a::b (`a/b.rs` or `a/b/mod.rs`) is `a`.
            let mut path: Vec<String> = if in_parent {
                here[..here.len().saturating_sub(1)].to_vec()
            } else {
                Vec::new()
            };
            for segment in segments {
                if segment == "super" {
                    path.pop(); // `super::super::…`
                } else {
                    path.push(segment);
                }
            }
            found.push(path);
        }
    }
    found
}

/// The longest prefix of `path` that is a module file under `src`, or the
/// walled crate it names.
fn resolve(src: &Path, path: &[String]) -> Option<Vec<String>> {
    if let Some(first) = path
        .first()
        .filter(|first| WALLED.contains(&first.as_str()))
    {
        return Some(vec![first.clone()]);
    }
    (1..=path.len()).rev().find_map(|len| {
        let base = path[..len].iter().fold(src.to_path_buf(), |p, s| p.join(s));
        let exists = base.with_extension("rs").is_file() || base.join("mod.rs").is_file();
        exists.then(|| path[..len].to_vec())
    })
}

/// `file → module` edges between distinct modules, leaving out a module's
/// use of its own ancestors.
fn edges() -> BTreeSet<(Vec<String>, Vec<String>)> {
    edges_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// [`edges`] of the crate whose sources are `src`.
fn edges_in(src: &Path) -> BTreeSet<(Vec<String>, Vec<String>)> {
    let src = src.to_path_buf();
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut edges = BTreeSet::new();
    for file in files {
        let here = module_path(&src, &file);
        let text = std::fs::read_to_string(&file).expect("reading a source file");
        for named in named_paths(&code_of(&text), &here) {
            let Some(target) = resolve(&src, &named) else {
                continue; // an item of the crate root, or not a module path
            };
            if target != here && !here.starts_with(&target) {
                edges.insert((here.clone(), target));
            }
        }
    }
    edges
}

fn layer_of(room: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&room))
}

#[test]
fn every_room_imports_only_rooms_below_it() {
    let mut wrong = Vec::new();
    let mut unknown = BTreeSet::new();
    for (from, to) in edges() {
        let (a, b) = (&from[0], &to[0]);
        if a == b {
            continue;
        }
        match (layer_of(a), layer_of(b)) {
            (Some(x), Some(y)) if x < y => {}
            (Some(_), Some(_)) => wrong.push(format!("{} -> {}", from.join("/"), to.join("/"))),
            (None, _) => {
                unknown.insert(a.clone());
            }
            (_, None) => {
                unknown.insert(b.clone());
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "rooms missing from LAYERS in tests/rooms.rs (place each where it belongs): {unknown:?}"
    );
    assert!(
        wrong.is_empty(),
        "imports that run up or sideways between rooms (move the shared piece down):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, to) in edges() {
        graph.entry(from).or_default().insert(to);
    }
    // Depth-first search; a back edge closes a circle.
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, bool>,
        stack: &mut Vec<Vec<String>>,
        circles: &mut Vec<String>,
    ) {
        state.insert(node.clone(), false); // on the stack
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(false) => {
                    let from = stack.iter().position(|n| n == next).unwrap_or(0);
                    let mut circle: Vec<String> =
                        stack[from..].iter().map(|n| n.join("/")).collect();
                    circle.push(next.join("/"));
                    circles.push(circle.join(" -> "));
                }
                Some(true) => {}
                None => visit(next, graph, state, stack, circles),
            }
        }
        stack.pop();
        state.insert(node.clone(), true); // done
    }
    let mut state = BTreeMap::new();
    let mut circles = Vec::new();
    for node in graph.keys() {
        if !state.contains_key(node) {
            visit(node, &graph, &mut state, &mut Vec::new(), &mut circles);
        }
    }
    assert!(
        circles.is_empty(),
        "import circles (move the shared type down, or make the two files one):\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_checker_sees_imports() {
    // Guards the guard: a checker that found no edges would pass anything.
    let edges = edges();
    let has = |from: &str, to: &str| {
        edges
            .iter()
            .any(|(a, b)| a.join("/") == from && b.join("/") == to)
    };
    assert!(
        has("controller/reconcile", "telemetry/metrics"),
        "{edges:?}"
    );
    assert!(has("apply", "telemetry/events"));
    assert!(has("apply/policy/host_rules", "apply/policy/pss"));
    // Into the walled crates too.
    assert!(has("controller/reconcile", "runtime"), "{edges:?}");
    assert!(has("kube_api/list_bounds/pods", "cached_pod"), "{edges:?}");
}

/// The model crate's rooms (`host/crates/model/src`), top first.
const MODEL_LAYERS: &[&[&str]] = &[
    &["cached_pod"],
    &["observed", "ownership", "actions"],
    &["crd"],
    &["plugin_text", "disk"],
    &["locks"],
];

/// The imports in the walled crate whose sources are `src` (a directory of
/// `host/`) that run up, sideways or to a room missing from `layers`; the
/// crate must show `sample` (`from`, `to`), so a checker that saw nothing
/// fails.
fn wrong_imports_in(src: &str, layers: &[&[&str]], sample: (&str, &str)) -> Vec<String> {
    let edges = edges_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join(src));
    assert!(
        edges
            .iter()
            .any(|(a, b)| a.join("/") == sample.0 && b.join("/") == sample.1),
        "the checker sees the imports of {src}: {edges:?}"
    );
    let layer = |room: &str| layers.iter().position(|l| l.contains(&room));
    let mut wrong = Vec::new();
    for (from, to) in edges {
        let (a, b) = (&from[0], &to[0]);
        match (layer(a), layer(b)) {
            _ if a == b => {}
            (Some(x), Some(y)) if x < y => {}
            _ => wrong.push(format!("{} -> {}", from.join("/"), to.join("/"))),
        }
    }
    wrong
}

#[test]
fn the_model_crate_s_rooms_import_only_rooms_below_them() {
    let wrong = wrong_imports_in("crates/model/src", MODEL_LAYERS, ("ownership", "crd"));
    assert!(
        wrong.is_empty(),
        "imports in host/crates/model that run up, sideways or to a room missing from \
         MODEL_LAYERS:\n{}",
        wrong.join("\n")
    );
}

/// The registry crate's rooms (`host/crates/registry/src`), top first, and
/// the only rooms of the model it may name (the bottom line). `lib.rs`'s
/// `OciError` and `rules`, which every file names through `super::`, are
/// the crate root's items, not a room.
const REGISTRY_LAYERS: &[&[&str]] = &[
    &["lib"],
    &["push", "args"],
    &["oci"],
    &["store"],
    &["http"],
    &["auth", "bounded", "reference", "signature"],
    &["disk", "locks", "plugin_text"],
];

#[test]
fn the_registry_crate_s_rooms_import_only_rooms_below_them() {
    let wrong = wrong_imports_in("crates/registry/src", REGISTRY_LAYERS, ("oci", "store"));
    assert!(
        wrong.is_empty(),
        "imports in host/crates/registry that run up, sideways or to a room missing from \
         REGISTRY_LAYERS:\n{}",
        wrong.join("\n")
    );
}

/// The packages a walled crate's manifest names (dependencies of every kind).
fn dependencies_of(manifest: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(manifest);
    let text = std::fs::read_to_string(&path).expect("reading a crate manifest");
    let manifest: toml::Table = text.parse().expect("a crate manifest is TOML");
    ["dependencies", "dev-dependencies", "build-dependencies"]
        .iter()
        .filter_map(|kind| manifest.get(*kind).and_then(toml::Value::as_table))
        .flat_map(|table| table.keys().cloned())
        .collect()
}

/// The model's rooms the code under `src` (a directory of `host/`) names
/// through `wasm_operator_model::room…` or `wasm_operator_model::{room…, …}`.
fn model_rooms_named_in(src: &str) -> BTreeSet<String> {
    const MODEL: &str = "wasm_operator_model::";
    let identifier = |text: &str| -> String {
        text.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut files = Vec::new();
    source_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join(src), &mut files);
    let mut named = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("reading a source file");
        let code = code_of(&text);
        for (at, _) in code.match_indices(MODEL) {
            let rest = &code[at + MODEL.len()..];
            let names: Vec<String> = match rest.strip_prefix('{') {
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(identifier)
                    .collect(),
                None => vec![identifier(rest)],
            };
            named.extend(names.into_iter().filter(|name| !name.is_empty()));
        }
    }
    named
}

#[test]
fn the_registry_crate_stands_on_the_model_alone() {
    // No host (cargo would refuse the circle anyway), no runtime and so no
    // wasmtime or Cranelift, no Kubernetes client: registry credentials are
    // a mounted file.
    let dependencies = dependencies_of("crates/registry/Cargo.toml");
    assert!(
        dependencies.contains("wasm-operator-model") && dependencies.contains("oci-client"),
        "the checker reads the registry's manifest: {dependencies:?}"
    );
    let forbidden: Vec<&String> = dependencies
        .iter()
        .filter(|name| {
            (name.starts_with("wasm-operator") && *name != "wasm-operator-model")
                || name.starts_with("wasmtime")
                || name.starts_with("cranelift")
                || name.starts_with("kube")
                || *name == "k8s-openapi"
        })
        .collect();
    assert!(
        forbidden.is_empty(),
        "host/crates/registry may depend on the model only among the workspace's crates, \
         and on no wasmtime or Kubernetes client: {forbidden:?}"
    );
    // The model's rooms it names are those of REGISTRY_LAYERS' bottom line.
    let allowed = REGISTRY_LAYERS.last().expect("a bottom line");
    let named = model_rooms_named_in("crates/registry/src");
    assert!(
        named.contains("disk"),
        "the checker sees the model's rooms the registry names: {named:?}"
    );
    let unexpected: Vec<&String> = named
        .iter()
        .filter(|name| !allowed.contains(&name.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "host/crates/registry names rooms of the model outside {allowed:?}: {unexpected:?}"
    );
}

#[test]
fn the_walled_crates_are_not_also_files_of_the_host() {
    // A room both re-exported and kept as a file would be two rooms of one name.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for room in WALLED {
        let base = src.join(room);
        assert!(
            !base.with_extension("rs").exists() && !base.is_dir(),
            "{room} is a walled crate (host/crates/) and a module under host/src"
        );
        assert!(
            std::fs::read_to_string(src.join("lib.rs"))
                .expect("lib.rs")
                .contains(room),
            "{room} is listed as walled but lib.rs does not re-export it"
        );
    }
}

/// The test-support crate (`host/crates/testkit`): what it may depend on,
/// and the shipped crates that must not depend on it.
const TESTKIT: &str = "wasm-operator-testkit";
const TESTKIT_DEPENDENCIES: &[&str] = &["k8s-openapi", "serde_json", "wasm-operator-model"];
const SHIPPED: &[&str] = &["", "crates/model", "crates/runtime", "crates/compile"];

/// The names in a manifest's `table` (`dependencies`, `dev-dependencies`).
fn manifest_deps(crate_dir: &str, table: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(crate_dir)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&path).expect("manifest");
    let manifest: toml::Table = text.parse().expect("manifest is TOML");
    manifest
        .get(table)
        .and_then(toml::Value::as_table)
        .map(|deps| deps.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn the_testkit_is_a_dev_dependency_only_and_depends_on_the_model_alone() {
    for shipped in SHIPPED {
        assert!(
            !manifest_deps(shipped, "dependencies").contains(TESTKIT)
                && !manifest_deps(shipped, "build-dependencies").contains(TESTKIT),
            "{TESTKIT} is a normal or build dependency of host/{shipped}: test builders would \
             ship; make it a dev-dependency"
        );
    }
    // The check reads the tables it means: the host's tests do use it.
    assert!(manifest_deps("", "dev-dependencies").contains(TESTKIT));
    assert!(manifest_deps("", "dependencies").contains("wasm-operator-model"));
    let own: Vec<String> = manifest_deps("crates/testkit", "dependencies")
        .into_iter()
        .collect();
    assert_eq!(
        own, TESTKIT_DEPENDENCIES,
        "the testkit builds objects from the model's types: no client, no async runtime, no \
         wasmtime"
    );
}
