//! Golden fixtures: every case under `fixtures/` is loaded from its
//! kubectl-style `input.yaml`, reconciled natively, and compared with its
//! `expected.yaml`; then the output is applied as the API server would and
//! reconciled twice more to check the plugin converges (the same checks the
//! host's `wasm-operator reconcile --fixtures` runs on the `.wasm`).

mod fixture_support;

use std::path::{Path, PathBuf};

use fixture_support::actions::{apply, to_actions};
use fixture_support::kube::{PodSelection, load_case, objects};
use replicaset_plugin::{Variant, reconcile_with};
use serde_json::Value;

/// The cases the fixture set must contain.
const REQUIRED_CASES: &[&str] = &[
    "scale-0-to-1",
    "scale-0-to-3",
    "scale-3-to-1",
    "terminating-pods",
    "desired-0",
    "converged-no-change",
    "stale-status-only",
    "foreign-pod-ignored",
    "failed-pod-replaced",
    "not-ready-pending",
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn case_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.join("input.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn expected(dir: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(dir.join("expected.yaml"))
        .map_err(|e| format!("expected.yaml: {e}"))?;
    let mut docs = objects(&text)?;
    match docs.len() {
        1 => Ok(docs.remove(0)),
        n => Err(format!("expected.yaml holds {n} documents, not 1")),
    }
}

/// Runs one case; `Err` says what differs. The fixtures describe the
/// ordinary (v1) build, whatever features this test was compiled with.
fn check_case(dir: &Path) -> Result<(), String> {
    let input = load_case(dir, PodSelection::ControlledOnly)?;
    let output = reconcile_with(&input, Variant::V1);

    let unfiltered = load_case(dir, PodSelection::All)?;
    if reconcile_with(&unfiltered, Variant::V1) != output {
        return Err("the output changes when uncontrolled pods are passed in".into());
    }

    let actual = to_actions(&input, &output)?;
    let expected = expected(dir)?;
    if actual != expected {
        return Err(format!(
            "output differs from expected.yaml\n--- expected\n{}\n--- actual\n{}",
            serde_yaml::to_string(&expected).unwrap_or_default(),
            serde_yaml::to_string(&actual).unwrap_or_default()
        ));
    }

    let mut serial = 0;
    let second_input = apply(&input, &output, &mut serial);
    let second = reconcile_with(&second_input, Variant::V1);
    if !second.create_pods.is_empty() || !second.delete_pods.is_empty() {
        return Err(format!(
            "second reconcile still creates or deletes: {:?}",
            to_actions(&second_input, &second)
        ));
    }
    let third_input = apply(&second_input, &second, &mut serial);
    let third = reconcile_with(&third_input, Variant::V1);
    if !third.is_empty() {
        return Err(format!(
            "third reconcile is not empty: {:?}",
            to_actions(&third_input, &third)
        ));
    }
    Ok(())
}

#[test]
fn every_fixture_matches_and_converges() {
    let dirs = case_dirs();
    let names: Vec<String> = dirs
        .iter()
        .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for required in REQUIRED_CASES {
        assert!(
            names.iter().any(|n| n == required),
            "missing fixture case {required}"
        );
    }
    let failures: Vec<String> = dirs
        .iter()
        .filter_map(|dir| {
            check_case(dir)
                .err()
                .map(|e| format!("{}: {e}", dir.display()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn a_wrong_expectation_is_detected() {
    let dir = fixtures_dir().join("scale-0-to-1");
    let input = load_case(&dir, PodSelection::ControlledOnly).expect("case loads");
    let mut output = reconcile_with(&input, Variant::V1);
    assert_eq!(to_actions(&input, &output), expected(&dir));
    output.create_pods.push(output.create_pods[0].clone());
    assert_ne!(to_actions(&input, &output), expected(&dir));
    let v2 = reconcile_with(&input, Variant::V2);
    assert_ne!(
        to_actions(&input, &v2),
        expected(&dir),
        "the v2 message differs"
    );
}

#[test]
fn loader_reads_what_the_host_would_send() {
    let input = load_case(
        &fixtures_dir().join("scale-3-to-1"),
        PodSelection::ControlledOnly,
    )
    .expect("case loads");
    let jz = &input.jinghzhu;
    assert_eq!(
        (jz.metadata.name.as_str(), jz.metadata.generation),
        ("web", 3)
    );
    assert_eq!(jz.spec.desired, 1);
    assert_eq!(jz.status.as_ref().map(|s| s.current), Some(3));
    let ready: Vec<(&str, bool)> = input
        .pods
        .iter()
        .map(|p| (p.metadata.name.as_str(), p.ready))
        .collect();
    assert_eq!(
        ready,
        [
            ("web-4xq8z", true),
            ("web-b7k2m", false),
            ("web-r9t5w", true)
        ]
    );
    assert!(
        input
            .pods
            .iter()
            .all(|p| p.phase == jinghzhu_plugin_sdk::types::PodPhase::Running)
    );

    let template = load_case(
        &fixtures_dir().join("scale-0-to-3"),
        PodSelection::ControlledOnly,
    )
    .expect("case loads")
    .jinghzhu
    .spec
    .template
    .expect("a template");
    assert_eq!(
        jinghzhu_plugin_sdk::kv::label(&template.labels, "tier"),
        Some("frontend")
    );

    let terminating =
        load_case(&fixtures_dir().join("terminating-pods"), PodSelection::All).expect("case loads");
    assert_eq!(terminating.now.seconds, 1_767_225_605);
    assert_eq!(
        terminating
            .pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count(),
        1
    );
    let foreign = load_case(
        &fixtures_dir().join("foreign-pod-ignored"),
        PodSelection::All,
    )
    .expect("case loads");
    assert_eq!(foreign.pods.len(), 2);
    let controlled = load_case(
        &fixtures_dir().join("foreign-pod-ignored"),
        PodSelection::ControlledOnly,
    )
    .expect("case loads");
    assert!(controlled.pods.is_empty());
}
