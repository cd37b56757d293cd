//! `bad-wire:<what>`: breaks the contract 0.2 wire form of an otherwise
//! normal output, after the SDK encoded it, in a way only the host's checks
//! of ids, spans and the string table can catch.
//!
//! [`crate::reconcile`] notes the request ([`request`]); the component's
//! export (at the bottom of `lib.rs`) encodes the output with the SDK and
//! then calls [`apply_requested`]. `<what>` is one of [`KINDS`].

use std::cell::RefCell;

use jinghzhu_plugin_sdk::bindings::jinghzhu::operator::types as raw;

/// The values `bad-wire:<what>` takes.
pub const KINDS: [&str; 4] = ["string-id", "span", "utf8", "ends"];

thread_local! {
    static REQUESTED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Asks [`apply_requested`] to break the next encoded output as `what` says.
pub fn request(what: &str) {
    REQUESTED.with(|r| *r.borrow_mut() = Some(what.to_owned()));
}

/// Breaks `out` as the last [`request`] asked (once), or returns it as is.
pub fn apply_requested(out: raw::ReconcileOutput) -> raw::ReconcileOutput {
    match REQUESTED.with(|r| r.borrow_mut().take()) {
        Some(what) => tamper(out, &what),
        None => out,
    }
}

fn push_string(table: &mut raw::StringTable, bytes: &[u8]) -> u32 {
    table.bytes.extend_from_slice(bytes);
    table.ends.push(table.bytes.len() as u32);
    (table.ends.len() - 1) as u32
}

/// `out` broken as `what` says: `string-id` deletes a pod named by an id
/// past the table's end; `span` creates a pod whose labels span runs past
/// `pairs`; `utf8` deletes a pod whose name is not UTF-8; `ends` makes the
/// table's last end point past its bytes (and deletes the pod it names). An unknown `what` changes nothing.
pub fn tamper(mut out: raw::ReconcileOutput, what: &str) -> raw::ReconcileOutput {
    match what {
        "string-id" => {
            let past_the_end = out.strings.ends.len() as u32 + 7;
            out.delete_pods.push(past_the_end);
        }
        "span" => {
            let prefix = push_string(&mut out.strings, b"bad-span-");
            let empty = push_string(&mut out.strings, b"");
            out.create_pods.push(raw::PodCreate {
                name: None,
                generate_name: Some(prefix),
                labels: raw::Span {
                    start: out.pairs.len() as u32,
                    len: 3,
                },
                annotations: raw::Span { start: 0, len: 0 },
                spec_json: empty,
            });
        }
        "utf8" => {
            let id = push_string(&mut out.strings, &[b'p', 0xff, 0xfe]);
            out.delete_pods.push(id);
        }
        "ends" => {
            let beyond = out.strings.bytes.len() as u32 + 100;
            out.strings.ends.push(beyond);
            out.delete_pods.push((out.strings.ends.len() - 1) as u32);
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jinghzhu_plugin_sdk::wire::{decode_output, encode_output};

    #[test]
    fn every_kind_breaks_an_output_the_sdk_reads_otherwise() {
        let normal = jinghzhu_plugin_sdk::empty_output();
        let encoded = encode_output(&normal);
        assert!(decode_output(&encoded).is_ok());
        for what in KINDS {
            let broken = tamper(encode_output(&normal), what);
            assert!(decode_output(&broken).is_err(), "{what} still reads");
        }
        assert!(decode_output(&tamper(encode_output(&normal), "other")).is_ok());
    }

    #[test]
    fn a_request_applies_once() {
        request("ends");
        let broken = apply_requested(encode_output(&jinghzhu_plugin_sdk::empty_output()));
        assert!(decode_output(&broken).is_err());
        let next = apply_requested(encode_output(&jinghzhu_plugin_sdk::empty_output()));
        assert!(decode_output(&next).is_ok());
    }
}
