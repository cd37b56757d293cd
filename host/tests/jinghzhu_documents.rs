//! A property test of reading Jinghzhus from the API server
//! (`wasm_operator::crd::incoming`): generated documents (nested up to
//! thousands of levels in every place the API server keeps open or types,
//! strings of up to 200 KB (and one of 2 MB), unicode and escapes, wrong types, numbers out of
//! range, duplicate keys, lone surrogates) inside a whole list envelope, next
//! to a good neighbour, and each on its own watch line. The list and every
//! line must parse (0 list failures, 0 panics, no stack overflow), and every
//! object must come out read or reported on its own, under the rule its
//! shape calls for, with its identity.
//!
//! `PROPTEST_CASES` sets the number of cases (default here: 2 000). The
//! figure quoted in the README comes from
//! `PROPTEST_CASES=50000 cargo test -p wasm-operator --test jinghzhu_documents`.

use kube::Resource;
use kube::core::{ObjectList, WatchEvent};
use proptest::prelude::*;
use wasm_operator::crd::incoming::{
    Incoming, MAX_DEPTH, RULE_TOO_DEEP, RULE_WRONG_SHAPE, nesting_depth,
};

/// Where a generated value goes, and the nesting level of the object or
/// array that holds it (the document itself is level 1).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// `spec.template.spec.x`: open, ignored by the host.
    TemplateSpecUnknown,
    /// `spec.template.metadata.annotations.x`: must be a string.
    Annotation,
    /// `status.x`: unknown to the status type, ignored.
    StatusUnknown,
    /// `metadata.managedFields[0].fieldsV1`: any JSON.
    FieldsV1,
    /// A top-level field the type does not know.
    TopLevelUnknown,
}

impl Place {
    fn level(self) -> usize {
        match self {
            Self::TopLevelUnknown => 1,
            Self::StatusUnknown => 2,
            Self::TemplateSpecUnknown | Self::FieldsV1 => 4,
            Self::Annotation => 5,
        }
    }
}

/// A shallow oddity, and whether the host can still read the object.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Odd {
    None,
    DesiredString,
    DesiredNegative,
    DesiredHugeFloat,
    DesiredHugeInteger,
    ContainersString,
    DuplicateDesired,
    LoneSurrogate,
    LabelNumber,
    PortsString,
    TemplateNull,
}

impl Odd {
    fn readable(self) -> bool {
        matches!(self, Self::None | Self::TemplateNull)
    }
}

#[derive(Debug, Clone)]
struct Doc {
    name: String,
    text: String,
    /// `Some(rule)` when the host must skip it, `None` when it must read it.
    expect: Option<&'static str>,
}

/// A value nested `depth` levels (objects and arrays mixed by `pattern`),
/// or a string when `depth` is 0. Built as text: a `serde_json::Value` that
/// deep would overflow the stack when dropped.
fn nested(depth: usize, pattern: u64) -> String {
    if depth == 0 {
        return "\"leaf\"".to_string();
    }
    let mut open = String::new();
    let mut close = Vec::with_capacity(depth);
    for level in 0..depth {
        if pattern.rotate_left(level as u32 % 64) & 1 == 0 {
            open.push_str("{\"k\":");
            close.push('}');
        } else {
            open.push('[');
            close.push(']');
        }
    }
    // The innermost container holds a number.
    open.push('1');
    close.reverse();
    open.extend(close);
    open
}

/// String contents (already JSON-escaped) that a reader must take in its
/// stride: unicode, escapes, separators, control characters.
fn string_body() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("plain".to_string()),
        Just("ü漢字🎉".to_string()),
        Just("\\u00e9\\ud83d\\ude00".to_string()),
        Just("\\n\\r\\t\\u0000\\u001b[31m".to_string()),
        Just("\\u2028\\u2029\\u202e".to_string()),
        Just("\\\"quoted\\\" \\\\ {[}]".to_string()),
        "[a-zA-Z0-9 ]{0,40}",
    ];
    (
        prop::collection::vec(piece, 0..8),
        0usize..4,
        0usize..200_000,
    )
        .prop_map(|(pieces, big, len)| {
            let mut body = pieces.concat();
            // Now and then a big one (see also `two_megabytes_of_text_are_read`).
            if big == 0 {
                body.push_str(&"x".repeat(len));
            }
            body
        })
}

fn document(index: usize) -> impl Strategy<Value = Doc> {
    let place = prop_oneof![
        Just(Place::TemplateSpecUnknown),
        Just(Place::Annotation),
        Just(Place::StatusUnknown),
        Just(Place::FieldsV1),
        Just(Place::TopLevelUnknown),
    ];
    let depth = prop_oneof![
        Just(0usize),
        1usize..40,
        (MAX_DEPTH - 8)..(MAX_DEPTH + 8),
        100usize..200,
        200usize..5_000,
    ];
    let odd = prop_oneof![
        4 => Just(Odd::None),
        1 => Just(Odd::DesiredString),
        1 => Just(Odd::DesiredNegative),
        1 => Just(Odd::DesiredHugeFloat),
        1 => Just(Odd::DesiredHugeInteger),
        1 => Just(Odd::ContainersString),
        1 => Just(Odd::DuplicateDesired),
        1 => Just(Odd::LoneSurrogate),
        1 => Just(Odd::LabelNumber),
        1 => Just(Odd::PortsString),
        1 => Just(Odd::TemplateNull),
    ];
    (place, depth, any::<u64>(), odd, string_body()).prop_map(
        move |(place, depth, pattern, odd, body)| build(index, place, depth, pattern, odd, &body),
    )
}

fn build(index: usize, place: Place, depth: usize, pattern: u64, odd: Odd, body: &str) -> Doc {
    let name = format!("doc-{index}");
    let value = nested(depth, pattern);
    let at = |here: Place| -> String {
        if place == here {
            format!(",\"x\":{value}")
        } else {
            String::new()
        }
    };
    let desired = match odd {
        Odd::DesiredString => "\"3\"",
        Odd::DesiredNegative => "-3",
        Odd::DesiredHugeFloat => "1e400",
        Odd::DesiredHugeInteger => "123456789012345678901234567890",
        Odd::DuplicateDesired => "3,\"desired\":4",
        _ => "3",
    };
    let containers = match odd {
        Odd::ContainersString => "\"oops\"".to_string(),
        Odd::PortsString => r#"[{"name":"app","image":"pause","ports":"oops"}]"#.to_string(),
        _ => r#"[{"name":"app","image":"pause"}]"#.to_string(),
    };
    let label = match odd {
        Odd::LabelNumber => "7",
        _ => "\"web\"",
    };
    let note = match odd {
        Odd::LoneSurrogate => format!("{body}\\ud800"),
        _ => body.to_string(),
    };
    let annotation = if place == Place::Annotation {
        format!(",\"x\":{value}")
    } else {
        String::new()
    };
    let template = match odd {
        Odd::TemplateNull => "null".to_string(),
        _ => format!(
            r#"{{"metadata":{{"labels":{{"app":{label}}},"annotations":{{"note":"{note}"{annotation}}}}},"spec":{{"containers":{containers}{}}}}}"#,
            at(Place::TemplateSpecUnknown)
        ),
    };
    let fields_v1 = if place == Place::FieldsV1 {
        value.clone()
    } else {
        r#"{"f:spec":{}}"#.to_string()
    };
    let text = format!(
        r#"{{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","metadata":{{"name":"{name}","namespace":"ns","uid":"uid-{index}","resourceVersion":"{index}","managedFields":[{{"manager":"m","operation":"Update","fieldsV1":{fields_v1}}}]}},"spec":{{"desired":{desired},"template":{template}}},"status":{{"current":0{}}}{}}}"#,
        at(Place::StatusUnknown),
        at(Place::TopLevelUnknown)
    );
    // The base document nests 6 levels (spec.template.spec.containers[0]);
    // a null template leaves out what would have gone into it.
    let in_template = matches!(place, Place::Annotation | Place::TemplateSpecUnknown);
    let present = !(in_template && odd == Odd::TemplateNull);
    let total = if present {
        6.max(place.level() + depth)
    } else {
        6
    };
    let typed_place = place == Place::Annotation && present;
    let expect = if total > MAX_DEPTH {
        Some(RULE_TOO_DEEP)
    } else if !odd.readable() || (typed_place && depth > 0) {
        Some(RULE_WRONG_SHAPE)
    } else {
        None
    };
    Doc { name, text, expect }
}

fn good_neighbour() -> Doc {
    build(999, Place::TemplateSpecUnknown, 3, 0, Odd::None, "fine")
}

/// Checks one decoded object against what its document calls for.
fn check(doc: &Doc, item: &Incoming) -> Result<(), TestCaseError> {
    prop_assert_eq!(item.meta().name.as_deref(), Some(doc.name.as_str()));
    let got = match item {
        Incoming::Read(jz) => {
            prop_assert_eq!(jz.spec.desired, 3);
            prop_assert!(jz.metadata.managed_fields.is_none());
            None
        }
        Incoming::Unreadable(why) => {
            prop_assert!(why.metadata.uid.is_some(), "identity kept");
            prop_assert!(why.note().contains(why.rule));
            prop_assert!(why.note().len() < 800, "bounded note");
            prop_assert!(!why.note().chars().any(char::is_control), "escaped");
            Some(why.rule)
        }
    };
    prop_assert_eq!(
        got,
        doc.expect,
        "{} (depth {}): {:?}",
        doc.name,
        nesting_depth(&doc.text),
        item
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(2_000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_document_is_read_or_reported_on_its_own(
        docs in (0usize..4).prop_flat_map(|n| {
            (0..n).map(document).collect::<Vec<_>>()
        })
    ) {
        let mut all = docs;
        all.insert(all.len() / 2, good_neighbour());
        let items: Vec<&str> = all.iter().map(|d| d.text.as_str()).collect();
        let body = format!(
            r#"{{"apiVersion":"jinghzhu.io/v1","kind":"JinghzhuList","metadata":{{"resourceVersion":"1","continue":""}},"items":[{}]}}"#,
            items.join(",")
        );
        let list: ObjectList<Incoming> = match serde_json::from_str(&body) {
            Ok(list) => list,
            Err(err) => return Err(TestCaseError::fail(format!("the list failed: {err}"))),
        };
        prop_assert_eq!(list.items.len(), all.len());
        for (doc, item) in all.iter().zip(&list.items) {
            check(doc, item)?;
        }
        for (kind, doc) in ["ADDED", "MODIFIED", "DELETED"].iter().cycle().zip(&all) {
            let line = format!(r#"{{"type":"{kind}","object":{}}}"#, doc.text);
            let event: WatchEvent<Incoming> = match serde_json::from_str(&line) {
                Ok(event) => event,
                Err(err) => return Err(TestCaseError::fail(format!("the line failed: {err}"))),
            };
            match event {
                WatchEvent::Added(item) | WatchEvent::Modified(item) | WatchEvent::Deleted(item) => {
                    check(doc, &item)?;
                }
                other => return Err(TestCaseError::fail(format!("unexpected event {other:?}"))),
            }
        }
    }
}

/// A big object the API server takes (it refuses requests over 3 MiB) is
/// read like any other.
#[test]
fn two_megabytes_of_text_are_read() {
    let big = build(
        3,
        Place::Annotation,
        0,
        0,
        Odd::None,
        &"ü".repeat(1_000_000),
    );
    assert!(big.text.len() > 2_000_000);
    let item: Incoming = serde_json::from_str(&big.text).expect("parses");
    check(&big, &item).expect("read");
}

/// The extreme the API server lets through: a million levels (2 MB of
/// brackets) in the open template, between two good objects.
#[test]
fn a_million_levels_deep_is_one_skipped_object() {
    let deep = build(1, Place::TemplateSpecUnknown, 1_000_000, 0, Odd::None, "");
    assert_eq!(deep.expect, Some(RULE_TOO_DEEP));
    let all = [
        good_neighbour(),
        deep,
        build(2, Place::StatusUnknown, 2, 0, Odd::None, ""),
    ];
    let items: Vec<&str> = all.iter().map(|d| d.text.as_str()).collect();
    let body = format!(r#"{{"items":[{}]}}"#, items.join(","));
    let list: ObjectList<Incoming> = serde_json::from_str(&body).expect("the list parses");
    for (doc, item) in all.iter().zip(&list.items) {
        check(doc, item).expect("as expected");
    }
}
