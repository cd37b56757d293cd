//! An incremental JSON scanner for the bodies of list and watch answers:
//! it finds each *unit* (an element of a list's top-level `items` array,
//! or one event of a watch stream) as the body streams in, whatever the
//! chunk boundaries, and hands each one, alone, to a judge that says what
//! to write in its place (nothing, or other bytes).
//!
//! The scanner keeps one unit at a time, and at most `max_unit` bytes of
//! it: a unit over that is not buffered further (what was buffered is
//! freed); the scanner reads on to its end and hands the judge only what
//! it picked up on the way ([`Captured`]: the event type, kind, apiVersion
//! and the metadata's name, namespace, uid and resourceVersion). Outside
//! the units, a list's bytes are passed on as they come (its `kind`,
//! `metadata` and the brackets of `items`), without whitespace; the
//! commas between kept items are written anew.
//!
//! It checks the structure it walks (brackets, colons, commas, strings),
//! not the scalars or the text inside strings: a unit's bytes are checked
//! by whoever decodes them, the rest by the client reading the body.
//! Malformed input fails with a [`ScanError`], never a panic.

/// Deepest nesting accepted (a pod, with its managed fields, nests about a
/// dozen levels).
const MAX_DEPTH: usize = 256;

/// Longest captured string, quotes and escapes included (a name is at most
/// 253 bytes).
const MAX_CAPTURE: usize = 1024;

/// Longest object key compared with the keys the scanner looks for.
const MAX_KEY: usize = 16;

/// What the body holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One JSON object whose top-level `items` array holds the units.
    List,
    /// JSON objects one after the other (one a line), each a unit.
    Watch,
}

/// A unit, as the judge gets it.
#[derive(Debug)]
pub enum Unit {
    /// Its bytes, whole (at most `max_unit`).
    Whole(Vec<u8>),
    /// It was larger than `max_unit`: what was picked up while it streamed past.
    TooLarge(Captured),
}

/// Strings picked up from a unit over the cap (each `None` when absent or
/// longer than 1 KiB).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Its bytes.
    pub bytes: u64,
    /// A watch event's `type`.
    pub event_type: Option<String>,
    /// The object's `kind`.
    pub kind: Option<String>,
    /// The object's `apiVersion`.
    pub api_version: Option<String>,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
}

/// A body the scanner could not walk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// A byte that cannot come where it came.
    #[error("malformed JSON at byte {at}: {what}")]
    Malformed {
        /// Its offset in the body.
        at: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// Nested deeper than the scanner follows.
    #[error("JSON nested deeper than {MAX_DEPTH} levels at byte {at}")]
    TooDeep {
        /// Where.
        at: u64,
    },
    /// The body ended inside a value.
    #[error("the body ended inside a JSON value (after {at} bytes)")]
    Truncated {
        /// Bytes read.
        at: u64,
    },
    /// The judge refused a unit.
    #[error("{0}")]
    Judged(String),
}

/// Decides what replaces each unit: `Ok(None)` leaves it out.
pub trait Judge {
    /// What to write for `unit`.
    fn judge(&mut self, unit: Unit) -> Result<Option<Vec<u8>>, ScanError>;
}

impl<F: FnMut(Unit) -> Result<Option<Vec<u8>>, ScanError>> Judge for F {
    fn judge(&mut self, unit: Unit) -> Result<Option<Vec<u8>>, ScanError> {
        self(unit)
    }
}

/// Keys the scanner tells apart; every other key is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Other,
    Items,
    Metadata,
    Object,
    Type,
    Kind,
    ApiVersion,
    Name,
    Namespace,
    Uid,
    ResourceVersion,
}

impl Key {
    fn of(raw: &[u8]) -> Self {
        match raw {
            b"items" => Self::Items,
            b"metadata" => Self::Metadata,
            b"object" => Self::Object,
            b"type" => Self::Type,
            b"kind" => Self::Kind,
            b"apiVersion" => Self::ApiVersion,
            b"name" => Self::Name,
            b"namespace" => Self::Namespace,
            b"uid" => Self::Uid,
            b"resourceVersion" => Self::ResourceVersion,
            _ => Self::Other,
        }
    }
}

/// An open object or array, and (an object) the key of the member being read.
#[derive(Debug, Clone, Copy)]
struct Frame {
    object: bool,
    key: Key,
}

/// What may come next, outside strings and scalars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value (after `:`, `,` in an array, or at the top).
    Value,
    /// A value or `]` (just after `[`).
    ValueOrClose,
    /// A key (after `,` in an object).
    Key,
    /// A key or `}` (just after `{`).
    KeyOrClose,
    /// `:` after a key.
    Colon,
    /// `,` or the close of the container, after a value.
    CommaOrClose,
    /// Nothing but whitespace (a list's one value has ended).
    End,
}

/// Where the lexer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Between tokens.
    Between,
    /// Inside a string (a key or a value), after a backslash or not.
    String { key: bool, escape: bool },
    /// Inside a number, `true`, `false` or `null`.
    Scalar,
}

/// Which captured field a string value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    EventType,
    Kind,
    ApiVersion,
    Name,
    Namespace,
    Uid,
    ResourceVersion,
}

/// The unit being read.
#[derive(Debug)]
struct Open {
    /// The stack depth of its own frame.
    base: usize,
    buf: Vec<u8>,
    over: bool,
    captured: Captured,
    /// The string value being captured, and its raw bytes so far.
    capture: Option<(Field, Vec<u8>)>,
}

/// Where the bytes being scanned go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sink {
    /// The unit being read.
    Unit,
    /// The output (a list's bytes outside `items`).
    Out,
    /// Nowhere (between units; a unit over the cap).
    Nowhere,
}

/// The scanner of one body (see the module documentation).
#[derive(Debug)]
pub struct Scanner {
    shape: Shape,
    max_unit: usize,
    stack: Vec<Frame>,
    expect: Expect,
    lex: Lex,
    /// The key being read, when it may be one the scanner looks for (its
    /// first bytes, and how many it has: more than [`MAX_KEY`] is none).
    key: Option<([u8; MAX_KEY], usize)>,
    /// A list: inside its `items` array.
    in_items: bool,
    /// Units written so far.
    written: u64,
    unit: Option<Open>,
    /// Bytes consumed before the chunk being scanned.
    offset: u64,
    /// Where in the chunk being scanned the bytes not yet sent to their
    /// sink begin.
    from: usize,
}

fn is_scalar_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.')
}

impl Scanner {
    /// A scanner of a body of `shape` that keeps at most `max_unit` bytes of a unit.
    pub fn new(shape: Shape, max_unit: usize) -> Self {
        Self {
            shape,
            max_unit,
            stack: Vec::new(),
            expect: Expect::Value,
            lex: Lex::Between,
            key: None,
            in_items: false,
            written: 0,
            unit: None,
            offset: 0,
            from: 0,
        }
    }

    /// Scans `chunk`, appending what replaces it to `out`.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        judge: &mut impl Judge,
    ) -> Result<(), ScanError> {
        self.from = 0;
        let mut i = 0;
        while i < chunk.len() {
            i += match self.lex {
                Lex::String { key, escape: false } => self.string_run(&chunk[i..], key),
                Lex::String { key, escape: true } => {
                    self.lex = Lex::String { key, escape: false };
                    self.take_string_bytes(&chunk[i..=i], key);
                    1
                }
                Lex::Scalar => match chunk[i..].iter().position(|b| !is_scalar_byte(*b)) {
                    None => chunk.len() - i,
                    Some(run) => {
                        // The scalar ended; the byte after it is looked at next.
                        self.lex = Lex::Between;
                        self.value_done(chunk, i + run, out, judge)?;
                        run
                    }
                },
                Lex::Between => {
                    self.structural(chunk, i, out, judge)?;
                    1
                }
            };
        }
        self.flush(chunk, chunk.len(), out);
        self.offset += chunk.len() as u64;
        Ok(())
    }

    /// The body ended: fails unless it ended between values (a list: after
    /// its one value).
    pub fn finish(&mut self, out: &mut Vec<u8>, judge: &mut impl Judge) -> Result<(), ScanError> {
        if self.lex == Lex::Scalar {
            self.lex = Lex::Between;
            self.value_done(&[], 0, out, judge)?;
        }
        let ended = self.lex == Lex::Between
            && self.stack.is_empty()
            && match self.shape {
                Shape::List => self.expect == Expect::End,
                Shape::Watch => true,
            };
        if ended {
            Ok(())
        } else {
            Err(ScanError::Truncated { at: self.offset })
        }
    }

    fn sink(&self) -> Sink {
        match &self.unit {
            Some(unit) if !unit.over => Sink::Unit,
            Some(_) => Sink::Nowhere,
            None if self.shape == Shape::List && !self.in_items => Sink::Out,
            None => Sink::Nowhere,
        }
    }

    /// Sends `chunk[self.from..to]` to where the bytes go now.
    fn flush(&mut self, chunk: &[u8], to: usize, out: &mut Vec<u8>) {
        let bytes = chunk.get(self.from..to).unwrap_or_default();
        self.from = to;
        match self.sink() {
            Sink::Out => out.extend_from_slice(bytes),
            Sink::Nowhere | Sink::Unit => {
                let Some(unit) = &mut self.unit else {
                    return;
                };
                unit.captured.bytes += bytes.len() as u64;
                if unit.over {
                } else if unit.buf.len() + bytes.len() > self.max_unit {
                    unit.over = true;
                    unit.buf = Vec::new();
                } else {
                    unit.buf.extend_from_slice(bytes);
                }
            }
        }
    }

    /// Inside a string, not after a backslash: consumes up to and including
    /// its closing quote or next backslash; how many bytes.
    fn string_run(&mut self, rest: &[u8], key: bool) -> usize {
        let Some(stop) = rest.iter().position(|b| *b == b'"' || *b == b'\\') else {
            self.take_string_bytes(rest, key);
            return rest.len();
        };
        if rest[stop] == b'\\' {
            self.take_string_bytes(&rest[..=stop], key);
            self.lex = Lex::String { key, escape: true };
            return stop + 1;
        }
        self.lex = Lex::Between;
        if key {
            self.take_string_bytes(&rest[..stop], key);
            let found = match self.key.take() {
                Some((name, len)) if len <= MAX_KEY => Key::of(&name[..len]),
                _ => Key::Other,
            };
            if let Some(top) = self.stack.last_mut() {
                top.key = found;
            }
            self.expect = Expect::Colon;
        } else {
            self.take_string_bytes(&rest[..=stop], key);
            // Units are objects: a string never ends one.
            self.end_capture();
            self.expect = self.after_value();
        }
        stop + 1
    }

    /// Bytes of a string: kept when it is a key the scanner may look for,
    /// or a value it captures.
    fn take_string_bytes(&mut self, bytes: &[u8], key: bool) {
        if key {
            if let Some((name, len)) = &mut self.key {
                if let Some(room) = name.get_mut(*len..*len + bytes.len()) {
                    room.copy_from_slice(bytes);
                }
                *len += bytes.len();
            }
            return;
        }
        let Some(unit) = &mut self.unit else {
            return;
        };
        if let Some((_, raw)) = &mut unit.capture {
            if raw.len() + bytes.len() <= MAX_CAPTURE {
                raw.extend_from_slice(bytes);
            } else {
                unit.capture = None;
            }
        }
    }

    fn structural(
        &mut self,
        chunk: &[u8],
        i: usize,
        out: &mut Vec<u8>,
        judge: &mut impl Judge,
    ) -> Result<(), ScanError> {
        match chunk[i] {
            b' ' | b'\t' | b'\n' | b'\r' => Ok(()),
            b @ (b'{' | b'[') => self.open(b == b'{', chunk, i, out),
            b @ (b'}' | b']') => self.close(b == b'}', chunk, i, out, judge),
            b':' => {
                self.expecting(&[Expect::Colon], i, "a ':' out of place")?;
                self.expect = Expect::Value;
                Ok(())
            }
            b',' => {
                self.expecting(&[Expect::CommaOrClose], i, "a ',' out of place")?;
                let Some(top) = self.stack.last() else {
                    return Err(self.malformed(i, "a ',' outside any object or array"));
                };
                self.expect = if top.object {
                    Expect::Key
                } else {
                    Expect::Value
                };
                Ok(())
            }
            b'"' if matches!(self.expect, Expect::Key | Expect::KeyOrClose) => {
                self.lex = Lex::String {
                    key: true,
                    escape: false,
                };
                self.key = self.key_wanted().then_some(([0; MAX_KEY], 0));
                Ok(())
            }
            b'"' => {
                self.begin_value(b'"', chunk, i, out)?;
                self.lex = Lex::String {
                    key: false,
                    escape: false,
                };
                self.begin_capture();
                Ok(())
            }
            b if is_scalar_byte(b) => {
                self.begin_value(b, chunk, i, out)?;
                self.lex = Lex::Scalar;
                Ok(())
            }
            _ => Err(self.malformed(i, "a byte that cannot start a JSON token")),
        }
    }

    /// Whether the key starting now may be one the scanner looks for: a
    /// list's top-level key, or one of a unit's first three levels.
    fn key_wanted(&self) -> bool {
        match &self.unit {
            Some(unit) => self.stack.len() - unit.base <= 3,
            None => self.shape == Shape::List && self.stack.len() == 1,
        }
    }

    fn malformed(&self, i: usize, what: &'static str) -> ScanError {
        ScanError::Malformed {
            at: self.offset + i as u64,
            what,
        }
    }

    fn expecting(&self, allowed: &[Expect], i: usize, what: &'static str) -> Result<(), ScanError> {
        if allowed.contains(&self.expect) {
            Ok(())
        } else {
            Err(self.malformed(i, what))
        }
    }

    /// A value starts with `chunk[i]`: checks it may, and opens a unit
    /// when it is one.
    fn begin_value(
        &mut self,
        b: u8,
        chunk: &[u8],
        i: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), ScanError> {
        self.expecting(
            &[Expect::Value, Expect::ValueOrClose],
            i,
            "a value where none may come",
        )?;
        let is_unit = match self.shape {
            Shape::List => self.in_items && self.stack.len() == 2,
            Shape::Watch => self.stack.is_empty(),
        };
        if is_unit {
            if b != b'{' {
                return Err(self.malformed(i, "an item or event that is not an object"));
            }
            // What came before goes where it went; the unit starts here.
            self.flush(chunk, i, out);
            self.unit = Some(Open {
                base: self.stack.len(),
                buf: Vec::new(),
                over: false,
                captured: Captured::default(),
                capture: None,
            });
        }
        Ok(())
    }

    fn open(
        &mut self,
        object: bool,
        chunk: &[u8],
        i: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), ScanError> {
        self.begin_value(if object { b'{' } else { b'[' }, chunk, i, out)?;
        if self.stack.len() >= MAX_DEPTH {
            return Err(ScanError::TooDeep {
                at: self.offset + i as u64,
            });
        }
        // A list's `items`: the array under the top object's `items` key.
        // Its bracket is passed on; what is inside goes to the units.
        if self.shape == Shape::List
            && !object
            && self.stack.len() == 1
            && self.stack[0].key == Key::Items
        {
            self.flush(chunk, i + 1, out);
            self.in_items = true;
        }
        self.stack.push(Frame {
            object,
            key: Key::Other,
        });
        self.expect = if object {
            Expect::KeyOrClose
        } else {
            Expect::ValueOrClose
        };
        Ok(())
    }

    fn close(
        &mut self,
        object: bool,
        chunk: &[u8],
        i: usize,
        out: &mut Vec<u8>,
        judge: &mut impl Judge,
    ) -> Result<(), ScanError> {
        let allowed = if object {
            [Expect::KeyOrClose, Expect::CommaOrClose]
        } else {
            [Expect::ValueOrClose, Expect::CommaOrClose]
        };
        self.expecting(&allowed, i, "a closing bracket out of place")?;
        match self.stack.last() {
            Some(top) if top.object == object => {}
            _ => return Err(self.malformed(i, "a closing bracket that does not match")),
        }
        if self.in_items && self.stack.len() == 2 {
            // The end of `items`: what was between the units goes nowhere,
            // the bracket is passed on.
            self.flush(chunk, i, out);
            self.in_items = false;
        }
        self.stack.pop();
        self.value_done(chunk, i + 1, out, judge)
    }

    /// A number, literal, object or array just ended, its last byte before
    /// `chunk[end]`.
    fn value_done(
        &mut self,
        chunk: &[u8],
        end: usize,
        out: &mut Vec<u8>,
        judge: &mut impl Judge,
    ) -> Result<(), ScanError> {
        if self
            .unit
            .as_ref()
            .is_some_and(|unit| unit.base == self.stack.len())
        {
            self.flush(chunk, end, out);
            if let Some(unit) = self.unit.take() {
                self.hand_over(unit, out, judge)?;
            }
        }
        self.expect = self.after_value();
        Ok(())
    }

    /// What may come after a value ends.
    fn after_value(&self) -> Expect {
        match (self.stack.is_empty(), self.shape) {
            (false, _) => Expect::CommaOrClose,
            (true, Shape::List) => Expect::End,
            (true, Shape::Watch) => Expect::Value,
        }
    }

    /// Hands a finished unit to the judge and writes what it says.
    fn hand_over(
        &mut self,
        unit: Open,
        out: &mut Vec<u8>,
        judge: &mut impl Judge,
    ) -> Result<(), ScanError> {
        let unit = if unit.over {
            Unit::TooLarge(unit.captured)
        } else {
            Unit::Whole(unit.buf)
        };
        let Some(bytes) = judge.judge(unit)? else {
            return Ok(());
        };
        match self.shape {
            Shape::List => {
                if self.written > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&bytes);
            }
            Shape::Watch => {
                out.extend_from_slice(&bytes);
                out.push(b'\n');
            }
        }
        self.written += 1;
        Ok(())
    }

    /// At the start of a string value: captures it if it is one of the
    /// fields of [`Captured`].
    fn begin_capture(&mut self) {
        let Some(unit) = &mut self.unit else {
            return;
        };
        // The keys from the unit's own frame inward (three levels at most
        // hold a captured field).
        let inner = &self.stack[unit.base..];
        if inner.len() > 3 {
            return;
        }
        let mut keys = [Key::Other; 3];
        for (key, frame) in keys.iter_mut().zip(inner) {
            *key = frame.key;
        }
        let path = &keys[..inner.len()];
        use Key as K;
        let metadata = |rest: &[Key]| match rest {
            [K::Metadata, K::Name] => Some(Field::Name),
            [K::Metadata, K::Namespace] => Some(Field::Namespace),
            [K::Metadata, K::Uid] => Some(Field::Uid),
            [K::Metadata, K::ResourceVersion] => Some(Field::ResourceVersion),
            [K::Kind] => Some(Field::Kind),
            [K::ApiVersion] => Some(Field::ApiVersion),
            _ => None,
        };
        let field = match (self.shape, path) {
            (Shape::Watch, [K::Type]) => Some(Field::EventType),
            (Shape::Watch, [K::Object, rest @ ..]) => metadata(rest),
            (Shape::List, rest) => metadata(rest),
            _ => None,
        };
        unit.capture = field.map(|f| (f, b"\"".to_vec()));
    }

    /// At the end of a string value: keeps what was captured.
    fn end_capture(&mut self) {
        let Some(unit) = &mut self.unit else {
            return;
        };
        let Some((field, raw)) = unit.capture.take() else {
            return;
        };
        let Ok(text) = serde_json::from_slice::<String>(&raw) else {
            return;
        };
        let c = &mut unit.captured;
        let slot = match field {
            Field::EventType => &mut c.event_type,
            Field::Kind => &mut c.kind,
            Field::ApiVersion => &mut c.api_version,
            Field::Name => &mut c.name,
            Field::Namespace => &mut c.namespace,
            Field::Uid => &mut c.uid,
            Field::ResourceVersion => &mut c.resource_version,
        };
        *slot = Some(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans `body` fed in `chunks` (split after each of those offsets):
    /// the output and the units the judge saw, or the error.
    fn scan(
        shape: Shape,
        max_unit: usize,
        body: &[u8],
        splits: &[usize],
        judge: &mut impl Judge,
    ) -> Result<Vec<u8>, ScanError> {
        let mut scanner = Scanner::new(shape, max_unit);
        let mut out = Vec::new();
        let mut from = 0;
        for &at in splits.iter().chain(std::iter::once(&body.len())) {
            scanner.feed(&body[from..at], &mut out, judge)?;
            from = at;
        }
        scanner.finish(&mut out, judge)?;
        Ok(out)
    }

    /// Keeps the units whose text contains `keep`, recording every unit.
    fn keeping<'a>(keep: &'static str, seen: &'a mut Vec<Unit>) -> impl Judge + 'a {
        move |unit: Unit| {
            let kept = match &unit {
                Unit::Whole(raw) => String::from_utf8_lossy(raw).contains(keep),
                Unit::TooLarge(_) => false,
            }
            .then(|| match &unit {
                Unit::Whole(raw) => raw.clone(),
                Unit::TooLarge(_) => Vec::new(),
            });
            seen.push(unit);
            Ok(kept)
        }
    }

    const LIST: &str = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"c[1]"},
        "items": [
          {"metadata":{"name":"a","labels":{"k":"x\"]}[{,"}},"spec":{"c":[[1,2],[3,[4]]],"n":-1.5e+3},"keep":true},
          {"metadata":{"name":"b\\","annotations":{"q":"\\\"{[\u0041"}},"keep":false},
          {"metadata":{"name":"c"},"keep":true,"empty":{},"none":[],"lit":[true,false,null]}
        ], "tail": "after"}"#;

    fn value(json: &[u8]) -> serde_json::Value {
        serde_json::from_slice(json).expect("JSON")
    }

    #[test]
    fn a_list_split_anywhere_gives_the_same_items_and_body() {
        let body = LIST.as_bytes();
        let mut seen = Vec::new();
        let whole = scan(
            Shape::List,
            1 << 20,
            body,
            &[],
            &mut keeping("\"keep\":true", &mut seen),
        )
        .expect("scans");
        assert_eq!(seen.len(), 3);
        let out: serde_json::Value = serde_json::from_slice(&whole).expect("valid JSON out");
        let names: Vec<&str> = out["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["metadata"]["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(out["metadata"]["continue"], "c[1]");
        assert_eq!(out["tail"], "after");
        assert_eq!(out["items"][0]["metadata"]["labels"]["k"], "x\"]}[{,");
        // Every single split, and every pair of splits 7 bytes apart.
        for at in 0..=body.len() {
            for splits in [vec![at], vec![at, (at + 7).min(body.len())]] {
                let mut seen_here = Vec::new();
                let out = scan(
                    Shape::List,
                    1 << 20,
                    body,
                    &splits,
                    &mut keeping("\"keep\":true", &mut seen_here),
                )
                .unwrap_or_else(|err| panic!("split at {splits:?}: {err}"));
                assert_eq!(out, whole, "split at {splits:?}");
                assert_eq!(seen_here.len(), 3);
            }
        }
        // A unit is the item's JSON, from its `{` to its `}`.
        let Unit::Whole(second) = &seen[1] else {
            panic!("whole")
        };
        assert!(second.starts_with(b"{\"metadata\"") && second.ends_with(b"false}"));
        let decoded: serde_json::Value = serde_json::from_slice(second).expect("a unit is JSON");
        assert_eq!(decoded["metadata"]["annotations"]["q"], "\\\"{[A");
    }

    #[test]
    fn a_list_keeping_nothing_or_everything_is_still_a_list() {
        let mut seen = Vec::new();
        let none = scan(
            Shape::List,
            1 << 20,
            LIST.as_bytes(),
            &[],
            &mut keeping("nothing", &mut seen),
        )
        .expect("scans");
        let out: serde_json::Value = serde_json::from_slice(&none).expect("JSON");
        assert_eq!(out["items"], serde_json::json!([]));
        let all = scan(
            Shape::List,
            1 << 20,
            LIST.as_bytes(),
            &[],
            &mut keeping("metadata", &mut seen),
        )
        .expect("scans");
        assert_eq!(value(&all), value(LIST.as_bytes()));
        // No items at all, or an empty array.
        for body in [
            r#"{"kind":"PodList","items":[]}"#,
            r#"{"kind":"PodList","items":null}"#,
            r#"{"kind":"PodList"}"#,
        ] {
            let out = scan(
                Shape::List,
                100,
                body.as_bytes(),
                &[],
                &mut keeping("x", &mut seen),
            )
            .expect("scans");
            assert_eq!(value(&out), value(body.as_bytes()), "{body}");
        }
    }

    #[test]
    fn an_item_over_the_cap_is_read_past_and_handed_over_by_what_was_picked_up() {
        let fat = "x".repeat(10_000);
        let body = format!(
            r#"{{"kind":"PodList","items":[{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"thin","uid":"u1"}}}},
            {{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"fat","namespace":"ns","annotations":{{"a":"{fat}"}},"uid":"u2","resourceVersion":"9"}},"spec":{{"name":"not-this"}}}}]}}"#
        );
        let cap = 1000;
        for at in [0, 50, 120, 200, 5000, body.len() - 3] {
            let mut seen = Vec::new();
            let mut judge = |unit: Unit| {
                if let Unit::Whole(raw) = &unit {
                    assert!(raw.len() <= cap, "a unit over the cap was buffered");
                }
                seen.push(unit);
                Ok(None)
            };
            let out = scan(Shape::List, cap, body.as_bytes(), &[at], &mut judge).expect("scans");
            assert_eq!(out, br#"{"kind":"PodList","items":[]}"#);
            assert!(matches!(&seen[0], Unit::Whole(_)));
            let Unit::TooLarge(captured) = &seen[1] else {
                panic!("the fat item is over the cap: {:?}", seen[1])
            };
            assert_eq!(
                captured,
                &Captured {
                    bytes: captured.bytes,
                    event_type: None,
                    kind: Some("Pod".into()),
                    api_version: Some("v1".into()),
                    name: Some("fat".into()),
                    namespace: Some("ns".into()),
                    uid: Some("u2".into()),
                    resource_version: Some("9".into()),
                }
            );
            assert!(captured.bytes > 10_000);
        }
    }

    const WATCH: &str = concat!(
        r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"1"},"keep":true}}"#,
        "\n",
        r#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"b\"}","resourceVersion":"2"},"spec":{"x":[["}"]]}}}"#,
        "\n",
        r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"3"}},"keep":true}"#,
        "\n"
    );

    #[test]
    fn a_watch_split_anywhere_gives_the_same_events() {
        let body = WATCH.as_bytes();
        let mut seen = Vec::new();
        let whole = scan(
            Shape::Watch,
            1 << 20,
            body,
            &[],
            &mut keeping("\"keep\":true", &mut seen),
        )
        .expect("scans");
        let lines: Vec<&str> = std::str::from_utf8(&whole)
            .expect("utf-8")
            .lines()
            .collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains(r#""type":"ADDED""#) && lines[1].contains("BOOKMARK"));
        for at in 0..=body.len() {
            let mut seen = Vec::new();
            let out = scan(
                Shape::Watch,
                1 << 20,
                body,
                &[at],
                &mut keeping("\"keep\":true", &mut seen),
            )
            .unwrap_or_else(|err| panic!("split at {at}: {err}"));
            assert_eq!(out, whole, "split at {at}");
            assert_eq!(seen.len(), 3);
        }
        // An event over the cap: its type and object picked up.
        let mut seen = Vec::new();
        scan(Shape::Watch, 60, body, &[17], &mut keeping("x", &mut seen)).expect("scans");
        let Unit::TooLarge(captured) = &seen[1] else {
            panic!("over the cap: {:?}", seen[1])
        };
        assert_eq!(captured.event_type.as_deref(), Some("MODIFIED"));
        assert_eq!(captured.name.as_deref(), Some("b\"}"));
        assert_eq!(captured.resource_version.as_deref(), Some("2"));
        assert_eq!(captured.api_version, None);
        // A watch that ends between events is whole; one that ends inside
        // an event is not.
        let mut seen = Vec::new();
        assert!(scan(Shape::Watch, 100, b"", &[], &mut keeping("x", &mut seen)).is_ok());
        let cut = &body[..body.len() - 10];
        assert!(matches!(
            scan(
                Shape::Watch,
                1 << 20,
                cut,
                &[],
                &mut keeping("x", &mut seen)
            ),
            Err(ScanError::Truncated { .. })
        ));
    }

    #[test]
    fn malformed_input_fails_cleanly() {
        let cases: &[(Shape, &str)] = &[
            (Shape::List, r#"{"items":[{"a":1}]"#),
            (Shape::List, r#"{"items":[{"a":1}}}"#),
            (Shape::List, r#"{"items":[{"a":1]]}"#),
            (Shape::List, r#"{"items":[1,2]}"#),
            (Shape::List, r#"{"items":["a"]}"#),
            (Shape::List, r#"{"items":[{"a" 1}]}"#),
            (Shape::List, r#"{"items":[{"a":1,}]}"#),
            (Shape::List, r#"{"items":[{"a":1},]}"#),
            (Shape::List, r#"{"items":[{"a":"unterminated}]}"#),
            (Shape::List, r#"{"items":[{:1}]}"#),
            (Shape::List, r#"{"items":[{"a":1}]} {"#),
            (Shape::List, r#"{"items":[{"a":1}]}}"#),
            (Shape::List, r#"{"items":[{"a":@}]}"#),
            (Shape::List, ""),
            (Shape::List, "]"),
            (Shape::Watch, r#"{"type":"ADDED"},{"type":"ADDED"}"#),
            (Shape::Watch, r#"[1]"#),
            (Shape::Watch, r#""a""#),
            (Shape::Watch, r#"{"type":"ADDED","object":{"#),
        ];
        for (shape, body) in cases {
            let mut seen = Vec::new();
            let result = scan(
                *shape,
                1 << 20,
                body.as_bytes(),
                &[],
                &mut keeping("a", &mut seen),
            );
            assert!(
                result.is_err(),
                "{shape:?} {body:?} was accepted: {result:?}"
            );
        }
        let deep = format!(
            r#"{{"items":[{{"a":{}1{}}}]}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        let mut seen = Vec::new();
        assert!(matches!(
            scan(
                Shape::List,
                1 << 20,
                deep.as_bytes(),
                &[],
                &mut keeping("a", &mut seen)
            ),
            Err(ScanError::TooDeep { .. })
        ));
        // A judge's refusal fails the scan too.
        let mut refusing = |_: Unit| Err(ScanError::Judged("no".into()));
        assert!(scan(Shape::List, 100, br#"{"items":[{}]}"#, &[], &mut refusing).is_err());
    }

    #[test]
    fn mangled_bodies_never_panic() {
        // Every body made by changing one byte of a valid list or watch to
        // each of the bytes that matter to the scanner.
        let specials = b"{}[]:,\"\\ x1-";
        for (shape, body) in [(Shape::List, LIST), (Shape::Watch, WATCH)] {
            let body = body.as_bytes();
            for at in 0..body.len() {
                for &b in specials {
                    let mut mangled = body.to_vec();
                    mangled[at] = b;
                    let mut seen = Vec::new();
                    let _ = scan(shape, 64, &mangled, &[at / 2], &mut keeping("k", &mut seen));
                }
            }
        }
    }
}
