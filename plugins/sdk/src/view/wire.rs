//! The contract 0.2 backing of the views: the input's string table and
//! shared lists, and the one pass that checks a wire input whole before any
//! view reads it (so reads after it cannot fail).
//!
//! The check visits exactly the string ids and spans that the owned
//! decoding ([`crate::wire::decode_input`]) resolves, with the same rules
//! (an id within `ends`, its bytes on UTF-8 boundaries of the table, a span
//! within its list), so both accept and refuse the same inputs.

use super::ViewError;
use crate::bindings::jinghzhu::operator::types as raw;

/// String `id` of a table (`text` its UTF-8 bytes, `ends` where each string
/// ends): the rule of `wit/0.2/operator.wit`.
pub(crate) fn string_at<'t>(text: &'t str, ends: &[u32], id: u32) -> Result<&'t str, String> {
    let i = id as usize;
    let end = *ends
        .get(i)
        .ok_or_else(|| format!("string id {id} is past the table's {} strings", ends.len()))?;
    let start = match i.checked_sub(1) {
        None => 0,
        Some(before) => ends.get(before).copied().unwrap_or(0),
    };
    text.get(start as usize..end as usize)
        .ok_or_else(|| format!("string {id} ({start}..{end}) is not a string of the table"))
}

/// The entries `span` covers in `list`.
pub(crate) fn spanned<T>(list: &[T], span: raw::Span) -> Result<&[T], String> {
    let start = span.start as usize;
    start
        .checked_add(span.len as usize)
        .and_then(|end| list.get(start..end))
        .ok_or_else(|| {
            format!(
                "span {}+{} is outside its list of {}",
                span.start,
                span.len,
                list.len()
            )
        })
}

/// A checked wire input: its table as text, and the input for its lists.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wire<'a> {
    text: &'a str,
    input: &'a raw::ReconcileInput,
}

impl<'a> Wire<'a> {
    /// String `id`. Every id a view reads was checked by [`check`]; an
    /// unchecked one reads as the empty string rather than panicking.
    pub(super) fn str(self, id: u32) -> &'a str {
        string_at(self.text, &self.input.strings.ends, id).unwrap_or_default()
    }

    /// The `pairs` entries of `span` (checked like [`Wire::str`]).
    pub(super) fn pairs(self, span: raw::Span) -> &'a [raw::KeyValue] {
        spanned(&self.input.pairs, span).unwrap_or_default()
    }

    /// The `owners` entries of `span` (checked like [`Wire::str`]).
    pub(super) fn owners(self, span: raw::Span) -> &'a [raw::OwnerReference] {
        spanned(&self.input.owners, span).unwrap_or_default()
    }
}

/// Checks every string id and span `input`'s records use; the [`Wire`] to
/// read it through when all are valid.
pub(super) fn check(input: &raw::ReconcileInput) -> Result<Wire<'_>, ViewError> {
    let text = std::str::from_utf8(&input.strings.bytes)
        .map_err(|err| ViewError::new(format!("the string table is not UTF-8: {err}")))?;
    let c = Checker { text, input };
    c.all().map_err(ViewError::new)?;
    Ok(Wire { text, input })
}

struct Checker<'a> {
    text: &'a str,
    input: &'a raw::ReconcileInput,
}

impl Checker<'_> {
    fn all(&self) -> Result<(), String> {
        let jz = &self.input.jinghzhu;
        if let Some(t) = &jz.spec.template {
            self.pairs(t.labels)?;
            self.pairs(t.annotations)?;
            self.id(t.spec_json)?;
        }
        self.meta(&jz.metadata)?;
        if let Some(s) = &jz.status {
            for &id in &s.pod_list {
                self.id(id)?;
            }
            self.id(s.state)?;
            self.id(s.message)?;
        }
        for pod in &self.input.pods {
            self.meta(&pod.metadata)?;
        }
        Ok(())
    }

    fn id(&self, id: u32) -> Result<(), String> {
        string_at(self.text, &self.input.strings.ends, id).map(|_| ())
    }

    fn pairs(&self, span: raw::Span) -> Result<(), String> {
        for kv in spanned(&self.input.pairs, span)? {
            self.id(kv.key)?;
            self.id(kv.value)?;
        }
        Ok(())
    }

    fn meta(&self, meta: &raw::ObjectMeta) -> Result<(), String> {
        for id in [meta.name, meta.namespace, meta.uid, meta.resource_version] {
            self.id(id)?;
        }
        self.pairs(meta.labels)?;
        self.pairs(meta.annotations)?;
        for o in spanned(&self.input.owners, meta.owner_references)? {
            for id in [o.api_version, o.kind, o.name, o.uid] {
                self.id(id)?;
            }
        }
        Ok(())
    }
}
