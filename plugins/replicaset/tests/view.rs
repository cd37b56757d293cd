//! The SDK's borrowed view against its owned records on every golden
//! fixture (`fixtures/`), with and without the uncontrolled pods, and on the
//! inputs the convergence check of `tests/fixtures.rs` builds from each
//! (with the status and pods the plugin's output made): every field the
//! view reads equals the owned decoding's, and the plugin's output is the
//! same through the view as through the owned records.

// Shared with `tests/fixtures.rs`, which uses the rest of it.
#[allow(dead_code)]
mod fixture_support;

use std::path::{Path, PathBuf};

use fixture_support::actions::apply;
use fixture_support::kube::{PodSelection, load_case};
use jinghzhu_plugin_sdk::testing::compare_view;
use jinghzhu_plugin_sdk::types::ReconcileInput;
use jinghzhu_plugin_sdk::view::InputView;
use replicaset_plugin::{Variant, reconcile_with};

fn case_dirs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("fixtures directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.join("input.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// Every input to check: each case in both selections, and the two inputs
/// after it that `apply` makes from the plugin's outputs.
fn inputs() -> Vec<(String, ReconcileInput)> {
    let mut all = Vec::new();
    for dir in case_dirs() {
        let case = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        let case = case.unwrap_or_default();
        for selection in [PodSelection::ControlledOnly, PodSelection::All] {
            let input = load_case(&dir, selection).expect("case loads");
            let mut serial = 0;
            let second = apply(&input, &reconcile_with(&input, Variant::V1), &mut serial);
            let third = apply(&second, &reconcile_with(&second, Variant::V1), &mut serial);
            for (step, input) in [input, second, third].into_iter().enumerate() {
                all.push((format!("{case} ({selection:?}, step {step})"), input));
            }
        }
    }
    assert!(all.len() >= 60, "{} inputs: fixtures missing", all.len());
    all
}

#[test]
fn the_view_of_owned_records_reads_every_field_of_every_fixture() {
    for (name, owned) in inputs() {
        let view = InputView::of(&owned);
        if let Err(problem) = compare_view(&view, &owned) {
            panic!("{name}: {problem}");
        }
        assert_eq!(view.owned(), owned, "{name}");
    }
}

#[cfg(not(feature = "contract-0-1"))]
mod wire {
    use super::*;
    use jinghzhu_plugin_sdk::Guest;
    use jinghzhu_plugin_sdk::wire::{decode_input, decode_output, encode_input};
    use replicaset_plugin::{ReplicaSetPlugin, reconcile_view};

    #[test]
    fn the_view_of_the_wire_reads_what_the_owned_decoding_makes_on_every_fixture() {
        for (name, owned) in inputs() {
            let raw = encode_input(&owned);
            let view = InputView::from_wire(&raw).expect("the host's input is valid");
            let decoded = decode_input(raw.clone()).expect("decodes");
            if let Err(problem) = compare_view(&view, &decoded) {
                panic!("{name}: against the owned decoding: {problem}");
            }
            if let Err(problem) = compare_view(&view, &owned) {
                panic!("{name}: against the input encoded: {problem}");
            }
            assert_eq!(view.owned(), decoded, "{name}");
        }
    }

    #[test]
    fn the_plugin_proposes_the_same_through_the_view_on_every_fixture() {
        for (name, owned) in inputs() {
            let expected = reconcile_with(&owned, Variant::V1);
            let raw = encode_input(&owned);
            let view = InputView::from_wire(&raw).expect("valid");
            assert_eq!(reconcile_view(&view, Variant::V1), expected, "{name}");
            // The component's own path: the wire input through the SDK's
            // export glue into `Guest::reconcile_view`, against `reconcile`.
            let out = jinghzhu_plugin_sdk::wire::reconcile::<ReplicaSetPlugin>(raw)
                .map_err(|e| e.message)
                .and_then(|out| decode_output(&out));
            assert_eq!(
                out,
                <ReplicaSetPlugin as Guest>::reconcile(owned).map_err(|e| e.message),
                "{name}"
            );
        }
    }
}
