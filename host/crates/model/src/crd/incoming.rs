//! Reading Jinghzhus as the API server sends them, one object at a time.
//!
//! The API server stores any JSON the CRD's schema lets through, and the
//! schema keeps `spec.template` open: an object may nest thousands of levels
//! deep, or hold a field of the wrong type. serde_json parses with a
//! recursion limit (128), so a list or a watch line parsed whole into typed
//! objects (or into `serde_json::Value`, as `DynamicObject` is) fails as a
//! whole on one such object, and with it every other object of the list.
//!
//! [`Incoming`] is what the host lists and watches instead of `Jinghzhu`. Its
//! `Deserialize` captures the object's text as a
//! [`RawValue`](serde_json::value::RawValue) (serde_json steps over a value
//! with an explicit stack: no recursion and no depth limit), measures its
//! nesting depth (one pass over the bytes), and only an object within
//! [`MAX_DEPTH`] is decoded, with serde_json's bounded parser. The text is
//! dropped at once: callers keep only the typed Jinghzhu. An object that
//! cannot be read becomes an [`Unreadable`]: its identity (read without
//! descending into anything else), the rule it breaks and why.
//!
//! This relies on the list envelope and the watch event handing each object
//! to its own deserializer rather than buffering it: kube's `ObjectList`
//! (`items` is a plain field) and `WatchEvent` (adjacently tagged; the API
//! server writes `type` before `object`) both do; the tests below hold them
//! to it.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::Jinghzhu;

/// The deepest nesting (objects and arrays, the object itself counting one)
/// the host reads. A real Jinghzhu needs under 20 levels, including its
/// `managedFields`; serde_json's own limit (128) is never reached.
pub const MAX_DEPTH: usize = 64;

/// Rule id: nested deeper than [`MAX_DEPTH`].
pub const RULE_TOO_DEEP: &str = "objects/too-deep";
/// Rule id: valid JSON that is not a Jinghzhu the host can read (a field of
/// the wrong type, a number out of range, a duplicate key, …).
pub const RULE_WRONG_SHAPE: &str = "objects/wrong-shape";

/// Most bytes of the decoder's message quoted in a reason (escaped, before
/// the cut marker): the whole note stays well within an Event's 1 KiB.
const REASON_BYTES: usize = 512;

/// A Jinghzhu from the API server: read, or skipped with the reason.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// Read (without `managedFields`): what the caches keep.
    Read(Box<Jinghzhu>),
    /// Cannot be read: reported and skipped.
    Unreadable(Box<Unreadable>),
}

/// A Jinghzhu the host cannot read.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    /// Its identity: name, namespace, uid, resourceVersion, generation (when
    /// those can be read).
    pub metadata: ObjectMeta,
    /// The rule id ([`RULE_TOO_DEEP`], [`RULE_WRONG_SHAPE`]).
    pub rule: &'static str,
    /// Why, for humans (escaped and bounded by [`crate::plugin_text`]: it
    /// may quote what the object's author wrote).
    pub reason: String,
}

impl Unreadable {
    /// The sentence for the Event and the log.
    pub fn note(&self) -> String {
        format!(
            "this Jinghzhu cannot be read and is skipped until it is fixed ({}): {}",
            self.rule, self.reason
        )
    }

    /// An empty Jinghzhu with this one's identity: what stands for it where
    /// the cache must drop it.
    pub fn placeholder(&self) -> Jinghzhu {
        let mut jz = Jinghzhu::new(
            self.metadata.name.as_deref().unwrap_or_default(),
            Default::default(),
        );
        jz.metadata = self.metadata.clone();
        jz
    }
}

impl Incoming {
    /// Decodes one object's JSON text (valid JSON: serde_json has already
    /// stepped over it); never fails, never recurses beyond [`MAX_DEPTH`].
    pub fn decode(json: &str) -> Self {
        let depth = nesting_depth(json);
        if depth > MAX_DEPTH {
            return Self::unreadable(
                json,
                RULE_TOO_DEEP,
                format!(
                    "it nests {depth} levels deep; the host reads at most {MAX_DEPTH} \
                     (a pod template needs under 20)"
                ),
            );
        }
        match serde_json::from_str::<Jinghzhu>(json) {
            Ok(mut jz) => {
                jz.metadata.managed_fields = None;
                Self::Read(Box::new(jz))
            }
            Err(err) => Self::unreadable(
                json,
                RULE_WRONG_SHAPE,
                format!(
                    "{}. Check spec.template against the PodTemplateSpec schema",
                    crate::plugin_text::escape(&err.to_string(), REASON_BYTES)
                ),
            ),
        }
    }

    /// The object, or why it cannot be read.
    pub fn into_result(self) -> Result<Jinghzhu, Box<Unreadable>> {
        match self {
            Self::Read(jz) => Ok(*jz),
            Self::Unreadable(why) => Err(why),
        }
    }

    fn unreadable(json: &str, rule: &'static str, reason: String) -> Self {
        Self::Unreadable(Box::new(Unreadable {
            metadata: identity(json),
            rule,
            reason,
        }))
    }
}

impl<'de> Deserialize<'de> for Incoming {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Ok(Self::decode(raw.get()))
    }
}

impl Resource for Incoming {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Jinghzhu::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Jinghzhu::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Jinghzhu::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Jinghzhu::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Read(jz) => &jz.metadata,
            Self::Unreadable(why) => &why.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Read(jz) => &mut jz.metadata,
            Self::Unreadable(why) => &mut why.metadata,
        }
    }
}

/// Nesting depth of a valid JSON text: 0 for a scalar, 1 for `{}`. One pass
/// over the bytes, no recursion.
pub fn nesting_depth(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in json.as_bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Just the metadata fields that identify an object. Every other field,
/// however deep, is stepped over without recursion.
#[derive(Deserialize)]
struct Identity {
    #[serde(default)]
    metadata: IdentityMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct IdentityMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
}

/// The identity of an object that cannot be read (empty when even that
/// cannot be read).
fn identity(json: &str) -> ObjectMeta {
    let meta = serde_json::from_str::<Identity>(json)
        .map(|identity| identity.metadata)
        .unwrap_or_default();
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use kube::core::ObjectList;
    use kube::core::WatchEvent;

    use super::*;

    /// `{"a":{"a":…{}…}}` nested `levels` deep, built as text (a
    /// `serde_json::Value` that deep would overflow the stack when dropped).
    fn nested(levels: usize) -> String {
        let mut text = "{\"a\":".repeat(levels.saturating_sub(1));
        text.push_str("{}");
        text.push_str(&"}".repeat(levels.saturating_sub(1)));
        text
    }

    fn object(name: &str, template: &str) -> String {
        format!(
            r#"{{"apiVersion":"jinghzhu.io/v1","kind":"Jinghzhu","metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"7","managedFields":[{{"manager":"kubectl","fieldsV1":{{"f:spec":{{}}}}}}]}},"spec":{{"desired":1,"template":{template}}}}}"#
        )
    }

    fn good(name: &str) -> String {
        object(
            name,
            r#"{"spec":{"containers":[{"name":"app","image":"pause"}]}}"#,
        )
    }

    fn deep(name: &str, levels: usize) -> String {
        object(
            name,
            &format!(
                r#"{{"spec":{{"containers":[{{"name":"app","image":"pause"}}],"x":{}}}}}"#,
                nested(levels)
            ),
        )
    }

    fn names(items: &[Incoming]) -> Vec<(String, Option<&'static str>)> {
        items
            .iter()
            .map(|item| {
                let rule = match item {
                    Incoming::Read(_) => None,
                    Incoming::Unreadable(why) => Some(why.rule),
                };
                (item.meta().name.clone().unwrap_or_default(), rule)
            })
            .collect()
    }

    #[test]
    fn nesting_depth_counts_brackets_outside_strings() {
        assert_eq!(nesting_depth("1"), 0);
        assert_eq!(nesting_depth("{}"), 1);
        assert_eq!(nesting_depth(r#"{"a":[1,{"b":"[[[{{\"}"}]}"#), 3);
        assert_eq!(nesting_depth(&nested(10_000)), 10_000);
    }

    #[test]
    fn a_list_with_an_object_10_000_levels_deep_reads_the_others() {
        let body = format!(
            r#"{{"apiVersion":"jinghzhu.io/v1","kind":"JinghzhuList","metadata":{{"resourceVersion":"9"}},"items":[{},{},{}]}}"#,
            good("a"),
            deep("deep", 10_000),
            good("b")
        );
        let list: ObjectList<Incoming> = serde_json::from_str(&body).expect("the list parses");
        assert_eq!(
            names(&list.items),
            [
                ("a".to_string(), None),
                ("deep".to_string(), Some(RULE_TOO_DEEP)),
                ("b".to_string(), None)
            ]
        );
        let Incoming::Unreadable(why) = &list.items[1] else {
            unreachable!()
        };
        assert_eq!(why.metadata.uid.as_deref(), Some("u-deep"));
        assert_eq!(why.metadata.resource_version.as_deref(), Some("7"));
        assert!(why.note().contains("objects/too-deep"), "{}", why.note());
        let Incoming::Read(jz) = &list.items[0] else {
            unreachable!()
        };
        assert!(
            jz.metadata.managed_fields.is_none(),
            "managedFields dropped"
        );
    }

    #[test]
    fn a_watch_line_with_an_object_10_000_levels_deep_is_one_unreadable_event() {
        let line = format!(r#"{{"type":"ADDED","object":{}}}"#, deep("deep", 10_000));
        let event: WatchEvent<Incoming> = serde_json::from_str(&line).expect("the line parses");
        let WatchEvent::Added(Incoming::Unreadable(why)) = event else {
            panic!("expected an unreadable ADDED event, got {event:?}")
        };
        assert_eq!(why.rule, RULE_TOO_DEEP);
        assert_eq!(why.metadata.name.as_deref(), Some("deep"));
    }

    #[test]
    fn just_within_the_depth_limit_is_read_and_just_beyond_is_not() {
        // The object, spec, template, spec are 4 levels; `x` adds the rest.
        let within = Incoming::decode(&deep("ok", MAX_DEPTH - 4));
        assert!(matches!(within, Incoming::Read(_)), "{within:?}");
        let beyond = Incoming::decode(&deep("no", MAX_DEPTH - 3));
        assert!(
            matches!(&beyond, Incoming::Unreadable(why) if why.rule == RULE_TOO_DEEP),
            "{beyond:?}"
        );
    }

    #[test]
    fn a_wrong_shape_is_reported_with_its_rule_and_a_bounded_reason() {
        let bad = object(
            "bad",
            r#"{"spec":{"containers":[{"name":"app","image":"pause","ports":"oops\n\u001b[31mERROR"}]}}"#,
        );
        let Incoming::Unreadable(why) = Incoming::decode(&bad) else {
            panic!("must not read")
        };
        assert_eq!(why.rule, RULE_WRONG_SHAPE);
        assert_eq!(why.metadata.name.as_deref(), Some("bad"));
        assert!(!why.note().contains('\n') && !why.note().contains('\u{1b}'));
        assert!(why.note().contains("cannot be read"), "{}", why.note());

        let long = object(
            "long",
            &format!(
                r#"{{"spec":{{"containers":[{{"name":"app","image":"pause","ports":"{}"}}]}}}}"#,
                "x".repeat(100_000)
            ),
        );
        let Incoming::Unreadable(why) = Incoming::decode(&long) else {
            panic!("must not read")
        };
        assert!(why.note().len() < 800, "{}", why.note().len());
    }
}
