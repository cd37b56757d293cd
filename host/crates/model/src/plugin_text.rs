//! Plugin text: the one way a string that came from a plugin or a Jinghzhu
//! author reaches a host log line, an Event or a metric label.
//!
//! This module owns escaping and bounding such text. A plugin's returned
//! error message, its trap (panic) message, its status fields and Event
//! texts, rejection reasons that quote its values (names, label keys,
//! capabilities), shadow differences, and values a Jinghzhu author wrote
//! (template values, a status written through the API) all pass through
//! [`escape`] (or its lazy form [`shown`]) before they are written out:
//!
//! - **Escaped**: every character that could end, rewrite or reorder a
//!   line: control characters (Unicode `Cc`: `\n`, `\r`, `\t`, ESC and the
//!   rest of C0, DEL, C1), format characters (`Cf`: the bidi controls
//!   U+202A–U+202E and U+2066–U+2069, zero-width characters, U+FEFF, tag
//!   characters…) and the line and paragraph separators U+2028/U+2029
//!   (`Zl`, `Zp`). Each is written as a Rust escape (`\n`, `\u{1b}`,
//!   `\u{202e}`), so what a plugin says stays on one line of the host's log
//!   and can neither recolour a terminal nor forge a host line. Text that
//!   needs no escape is returned unchanged.
//! - **Bounded**: at most `max` bytes of escaped text, cut on a character
//!   boundary (never inside an escape), followed by `…(N bytes more)` when
//!   something was cut, N counting the bytes of the original left out. The
//!   marker is at most [`MARKER_MAX`] bytes. Work is proportional to `max`,
//!   not to the length of the input. Text that was cut already (it ends
//!   with a marker, e.g. an error message quoted in another) keeps its
//!   marker, and a second cut adds to its count, so N always counts the
//!   bytes of the plugin's original text left out.
//!
//! Bounds used by the host: [`MAX_LOG_TEXT`] for one value in a log line,
//! [`MAX_EVENT_NOTE`] and [`MAX_EVENT_REASON`] for Events (the Kubernetes
//! limits, marker included).

use std::fmt;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Most bytes of one plugin-originated value in a host log line (the
/// escaped text; the cut marker comes on top).
pub const MAX_LOG_TEXT: usize = 4096;
/// Most bytes of an Event note, marker included (Kubernetes refuses more
/// than 1 KiB).
pub const MAX_EVENT_NOTE: usize = 1024;
/// Most bytes of an Event reason, marker included (Kubernetes' limit).
pub const MAX_EVENT_REASON: usize = 128;
/// Longest cut marker, `…(N bytes more)` (N up to 20 digits).
pub const MARKER_MAX: usize = "…( bytes more)".len() + 20;

/// True for a character [`escape`] writes as an escape: control and format
/// characters and the line and paragraph separators.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c.general_category(),
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
                | GeneralCategory::Control
        )
}

/// `text` with every character of [`needs_escape`] escaped, cut to at most
/// `max` bytes of escaped text (on a character boundary) and marked
/// `…(N bytes more)` when cut. Clean text that fits is returned as it is.
pub fn escape(text: &str, max: usize) -> String {
    let (body, left_out) = split_marker(text);
    let mut out = String::with_capacity(body.len().min(max) + MARKER_MAX);
    for (at, c) in body.char_indices() {
        let start = out.len();
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(start);
            out.push_str(&marker(body.len() - at + left_out));
            return out;
        }
    }
    if left_out > 0 {
        out.push_str(&marker(left_out));
    }
    out
}

/// `text` without a cut marker it ends with, and the count in that marker
/// (0 when there is none).
fn split_marker(text: &str) -> (&str, usize) {
    let Some(rest) = text.strip_suffix(" bytes more)") else {
        return (text, 0);
    };
    let Some(open) = rest.rfind("…(") else {
        return (text, 0);
    };
    let digits = &rest[open + "…(".len()..];
    match digits.parse::<usize>() {
        Ok(count) if digits.bytes().all(|b| b.is_ascii_digit()) => (&text[..open], count),
        _ => (text, 0),
    }
}

/// [`escape`] with the whole result, marker included, within `max` bytes
/// (for fields with a hard limit, such as an Event's note). `max` should be
/// well above [`MARKER_MAX`].
pub fn escape_within(text: &str, max: usize) -> String {
    let escaped = escape(text, max);
    if escaped.len() <= max {
        return escaped;
    }
    escape(text, max.saturating_sub(MARKER_MAX))
}

fn marker(left_out: usize) -> String {
    format!("…({left_out} bytes more)")
}

/// Shows `text` escaped and cut to [`MAX_LOG_TEXT`] when formatted: for a
/// log field, `error = %plugin_text::shown(&message)`.
pub fn shown(text: &str) -> Shown<'_> {
    Shown {
        text,
        max: MAX_LOG_TEXT,
    }
}

/// Plugin text to be formatted escaped and bounded (see [`shown`]).
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a> {
    text: &'a str,
    max: usize,
}

impl Shown<'_> {
    /// The same text, cut to `max` bytes instead.
    pub fn within(self, max: usize) -> Self {
        Self { max, ..self }
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let clean = self.text.len() <= self.max && !self.text.chars().any(needs_escape);
        if clean {
            f.write_str(self.text)
        } else {
            f.write_str(&escape(self.text, self.max))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_of_control_and_format_character_is_escaped() {
        let cases = [
            ("a\nb", "a\\nb"),
            ("a\rb", "a\\rb"),
            ("a\tb", "a\\tb"),
            ("\x1b[31mred", "\\u{1b}[31mred"),
            ("nul\0", "nul\\u{0}"),
            ("del\x7f", "del\\u{7f}"),
            ("c1\u{85}\u{9b}", "c1\\u{85}\\u{9b}"),
            ("ls\u{2028}ps\u{2029}", "ls\\u{2028}ps\\u{2029}"),
            (
                "\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}",
                "\\u{202a}\\u{202b}\\u{202c}\\u{202d}\\u{202e}",
            ),
            (
                "\u{2066}\u{2067}\u{2068}\u{2069}",
                "\\u{2066}\\u{2067}\\u{2068}\\u{2069}",
            ),
            (
                "zw\u{200b}\u{200d}\u{200e}\u{feff}",
                "zw\\u{200b}\\u{200d}\\u{200e}\\u{feff}",
            ),
            ("soft\u{ad}tag\u{e0041}", "soft\\u{ad}tag\\u{e0041}"),
        ];
        for (raw, want) in cases {
            assert_eq!(escape(raw, 1000), want, "{raw:?}");
            assert_eq!(shown(raw).to_string(), want, "{raw:?}");
        }
    }

    #[test]
    fn clean_text_is_unchanged_and_escaping_is_idempotent() {
        for clean in [
            "",
            "plugin replicaset@0.1.0 failed: no pods",
            "ünïcødé, 日本語, emoji 🦀, backslash \\n stays",
            "create #0: label \"a\\nb\" is not a valid label",
        ] {
            assert_eq!(escape(clean, 1000), clean);
            assert_eq!(shown(clean).to_string(), clean);
        }
        let dirty = "a\nb\x1b[0m\u{202e}c";
        let once = escape(dirty, 1000);
        assert_eq!(escape(&once, 1000), once);
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary_with_a_marker() {
        assert_eq!(escape("abcdef", 3), "abc…(3 bytes more)");
        // "é" is two bytes: three fit in 7, the fourth does not.
        assert_eq!(escape(&"é".repeat(10), 7), "ééé…(14 bytes more)");
        // An escape is never split: "\n" needs two bytes.
        assert_eq!(escape("ab\ncd", 3), "ab…(3 bytes more)");
        let huge = "A".repeat(3 * 1024 * 1024);
        let cut = escape(&huge, MAX_LOG_TEXT);
        assert!(cut.len() <= MAX_LOG_TEXT + MARKER_MAX, "{}", cut.len());
        assert!(cut.ends_with(&format!("…({} bytes more)", huge.len() - MAX_LOG_TEXT)));
        assert_eq!(shown(&huge).to_string(), cut);
    }

    #[test]
    fn text_cut_twice_keeps_counting_the_original_bytes() {
        let huge = "A".repeat(1_000_000);
        let inner = escape(&huge, 100);
        assert_eq!(escape(&inner, 100), inner, "idempotent on cut text");
        let quoted = format!("the plugin failed: {inner}");
        let outer = escape(&quoted, 100);
        assert_eq!(
            outer,
            format!("the plugin failed: {}…(999919 bytes more)", "A".repeat(81))
        );
        assert_eq!(escape("x…(12 bytes more)", 100), "x…(12 bytes more)");
        assert_eq!(
            escape("x…(twelve bytes more)", 100),
            "x…(twelve bytes more)"
        );
        let within = escape_within(&quoted, 60);
        assert!(within.len() <= 60, "{within}");
    }

    #[test]
    fn within_keeps_the_marker_inside_the_limit() {
        let note = escape_within(&"x\n".repeat(2000), MAX_EVENT_NOTE);
        assert!(note.len() <= MAX_EVENT_NOTE, "{}", note.len());
        assert!(note.contains("bytes more)"));
        assert_eq!(escape_within("short", MAX_EVENT_NOTE), "short");
        assert!(MARKER_MAX >= marker(usize::MAX).len());
    }
}
