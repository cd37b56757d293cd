//! The view against the owned records: on owned inputs, and (contract 0.2)
//! on their wire form against the owned decoding, including broken wire
//! inputs, which both must refuse without panicking.

use super::InputView;
use crate::kv;
use crate::testing::{compare_view, input, jinghzhu, pod};
use crate::types::{JinghzhuStatus, PodPhase, PodTemplate, ReconcileInput};

/// Inputs with every kind of field set and unset.
fn samples() -> Vec<ReconcileInput> {
    let web = jinghzhu("web", "shop", 3)
        .label("app", "web")
        .annotation("note", "ü and 日本")
        .template(PodTemplate {
            labels: kv::from_pairs([("app", "web"), ("tier", "front")]),
            annotations: kv::from_pairs([("x", "")]),
            spec_json: r#"{"containers":[{"name":"c","image":"i"}]}"#.into(),
        })
        .status(JinghzhuStatus {
            current: 2,
            pod_list: vec!["web-b".into(), "web-a".into()],
            state: "Scaling".into(),
            message: "2/3 pods".into(),
            observed_generation: Some(4),
        });
    let other = jinghzhu("other", "shop", 1).build();
    vec![
        input(jinghzhu("empty", "default", 0)).build(),
        input(web.clone())
            .pod(pod("web-b", PodPhase::Running).created_at(1_000))
            .pod(pod("web-a", PodPhase::Pending).ready(false).label("k", "v"))
            .pod(pod("web-c", PodPhase::Running).terminating())
            .pod(pod("web-d", PodPhase::Failed).no_creation_timestamp())
            .pod(pod("web-e", PodPhase::Unknown).owned_by(&other))
            .pod(pod("web-f", PodPhase::Succeeded).unowned())
            .now(1_800_000_000)
            .build(),
        input(web.deleting_at(5))
            .pods((0..100).map(|i| pod(&format!("web-{i:03}"), PodPhase::Running)))
            .build(),
    ]
}

#[test]
fn a_view_of_owned_records_reads_them() {
    for owned in samples() {
        let view = InputView::of(&owned);
        compare_view(&view, &owned).expect("same fields");
        assert_eq!(view.owned(), owned);
    }
}

#[test]
fn status_same_as_follows_status_equal() {
    let owned = &samples()[1];
    let view = InputView::of(owned);
    let status = view.jinghzhu().status().expect("has a status");
    let mut other = status.owned();
    assert!(status.same_as(&other));
    other.pod_list.reverse();
    assert!(status.same_as(&other), "order does not matter");
    other.pod_list[0] = "web-z".into();
    assert!(!status.same_as(&other));
    let mut other = status.owned();
    other.message.push('!');
    assert!(!status.same_as(&other));
    let mut other = status.owned();
    other.observed_generation = None;
    assert!(!status.same_as(&other));
}

#[test]
fn pod_helpers_agree_with_the_owned_ones() {
    for owned in samples() {
        let view = InputView::of(&owned);
        let uid = view.jinghzhu().metadata().uid();
        for (v, p) in view.pods().iter().zip(&owned.pods) {
            assert_eq!(v.is_live(), crate::pod::is_live(p));
            assert_eq!(v.is_terminating(), crate::pod::is_terminating(p));
            assert_eq!(v.is_finished(), crate::pod::is_finished(p));
            assert_eq!(
                v.is_running_and_ready(),
                crate::pod::is_running_and_ready(p)
            );
            assert_eq!(
                v.is_controlled_by(uid),
                crate::pod::is_controlled_by(p, &owned.jinghzhu)
            );
        }
        assert_eq!(
            view.jinghzhu().pod_from_template(),
            crate::pod::from_template(&owned.jinghzhu)
        );
    }
}

#[cfg(not(feature = "contract-0-1"))]
mod wire {
    use super::*;
    use crate::wire::{decode_input, encode_input};

    #[test]
    fn a_view_of_the_wire_reads_what_the_owned_decoding_makes() {
        for owned in samples() {
            let raw = encode_input(&owned);
            let view = InputView::from_wire(&raw).expect("a valid input");
            let decoded = decode_input(raw.clone()).expect("decodes");
            compare_view(&view, &decoded).expect("same fields as decoded");
            compare_view(&view, &owned).expect("same fields as encoded");
            assert_eq!(view.owned(), decoded);
        }
    }

    /// Both readers on one (possibly broken) input: they must agree on
    /// whether it is readable, and read the same when it is.
    fn agree(raw: &Raw) -> bool {
        let view = InputView::from_wire(raw);
        let decoded = decode_input(raw.clone());
        match (&view, &decoded) {
            (Ok(v), Ok(d)) => {
                compare_view(v, d).expect("same fields");
                true
            }
            (Err(_), Err(_)) => false,
            _ => panic!("view {view:?} but decoding {decoded:?}"),
        }
    }

    type Raw = crate::bindings::jinghzhu::operator::types::ReconcileInput;

    /// Breaks a valid input; the argument is the first id past its table.
    type Break = fn(&mut Raw, u32);

    /// Ways to break a valid input, by name.
    const BREAKS: &[(&str, Break)] = &[
        ("name id", |r, past| r.jinghzhu.metadata.name = past),
        ("pod uid id", |r, _| r.pods[2].metadata.uid = u32::MAX),
        ("label key id", |r, past| r.pairs[0].key = past),
        ("owner uid id", |r, past| r.owners[0].uid = past + 7),
        ("status name id", |r, past| {
            if let Some(s) = r.jinghzhu.status.as_mut() {
                s.pod_list[1] = past;
            }
        }),
        ("template spec id", |r, past| {
            if let Some(t) = r.jinghzhu.spec.template.as_mut() {
                t.spec_json = past;
            }
        }),
        ("labels span", |r, _| {
            r.jinghzhu.metadata.labels.len = 10_000
        }),
        ("overflowing span", |r, _| {
            r.pods[0].metadata.annotations.start = u32::MAX;
            r.pods[0].metadata.annotations.len = u32::MAX;
        }),
        ("owners span", |r, _| {
            r.pods[1].metadata.owner_references.start = 9_999;
        }),
        ("bytes not UTF-8", |r, _| r.strings.bytes.push(0xff)),
        ("string ends inside a character", |r, _| {
            // "ü" is two bytes (0xc3 0xbc): end a string between them.
            let at = r.strings.bytes.iter().position(|&b| b == 0xc3);
            let at = at.expect("the input holds a ü");
            let i = r.strings.ends.iter().position(|&e| e as usize > at);
            let i = i.expect("a string ends after it");
            r.strings.ends[i] = u32::try_from(at + 1).expect("small");
        }),
        ("ends going back", |r, _| {
            let i = r.strings.ends.len() - 1;
            r.strings.ends[i] = 0;
        }),
    ];

    #[test]
    fn broken_inputs_are_errors_not_panics() {
        let owned = &samples()[1];
        let good = encode_input(owned);
        let past = u32::try_from(good.strings.ends.len()).expect("small");
        assert!(agree(&good));
        for (what, breaking) in BREAKS {
            let mut raw = good.clone();
            breaking(&mut raw, past);
            assert!(
                InputView::from_wire(&raw).is_err(),
                "{what}: the view accepted it"
            );
            assert!(!agree(&raw), "{what}: accepted");
        }
    }

    /// A small deterministic generator (no dependency for one test).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, below: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(self.0 >> 33).unwrap_or(0) % below.max(1)
        }
    }

    #[test]
    fn randomly_broken_inputs_agree_with_the_owned_decoding() {
        let owned = &samples()[1];
        let good = encode_input(owned);
        let mut rng = Lcg(42);
        let (mut accepted, mut refused) = (0, 0);
        for _ in 0..2_000 {
            let mut raw = good.clone();
            let value = match rng.next(3) {
                0 => u32::try_from(rng.next(good.strings.ends.len() + 3)).unwrap_or(0),
                1 => u32::MAX - u32::try_from(rng.next(3)).unwrap_or(0),
                _ => u32::try_from(rng.next(40)).unwrap_or(0),
            };
            let pod = rng.next(raw.pods.len());
            match rng.next(8) {
                0 => raw.jinghzhu.metadata.name = value,
                1 => raw.pods[pod].metadata.name = value,
                2 => raw.pods[pod].metadata.labels.start = value,
                3 => raw.pods[pod].metadata.owner_references.len = value,
                4 => raw.pairs[rng.next(good.pairs.len())].value = value,
                5 => raw.owners[rng.next(good.owners.len())].kind = value,
                6 => raw.strings.ends[rng.next(good.strings.ends.len())] = value,
                _ => raw.jinghzhu.metadata.annotations.len = value,
            }
            if agree(&raw) {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
        assert!(accepted > 0 && refused > 0, "{accepted} / {refused}");
    }
}
