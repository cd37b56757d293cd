//! The lists of a view: the Pods, an object's owners, a label or
//! annotation map, and a status's pod names. Each is `Copy`, knows its
//! length, and yields views or `&'a str` without allocating.

use super::{OwnerView, PodView, Src, read};
use crate::bindings::jinghzhu::operator::types as raw;
use crate::types as m;

/// The Pods of an input, in the input's order (sorted by name).
#[derive(Clone, Copy, Debug)]
pub struct Pods<'a>(Src<'a, [raw::Pod], [m::Pod]>);

impl<'a> Pods<'a> {
    pub(super) fn new(src: Src<'a, [raw::Pod], [m::Pod]>) -> Self {
        Pods(src)
    }

    /// How many.
    pub fn len(&self) -> usize {
        read!(self.0, |_, r| r.len(), |o| o.len())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pod `i`.
    pub fn get(&self, i: usize) -> Option<PodView<'a>> {
        read!(self.0, |w, r| r.get(i).map(|p| Src::Wire(w, p)), |o| o
            .get(i)
            .map(Src::Owned))
        .map(PodView)
    }

    /// Each Pod in order.
    pub fn iter(&self) -> impl Iterator<Item = PodView<'a>> + 'a {
        let list = *self;
        (0..self.len()).filter_map(move |i| list.get(i))
    }
}

/// The owner references of an object.
#[derive(Clone, Copy, Debug)]
pub struct Owners<'a>(Src<'a, [raw::OwnerReference], [m::OwnerReference]>);

impl<'a> Owners<'a> {
    pub(super) fn new(src: Src<'a, [raw::OwnerReference], [m::OwnerReference]>) -> Self {
        Owners(src)
    }

    /// How many.
    pub fn len(&self) -> usize {
        read!(self.0, |_, r| r.len(), |o| o.len())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reference `i`.
    pub fn get(&self, i: usize) -> Option<OwnerView<'a>> {
        read!(self.0, |w, r| r.get(i).map(|x| Src::Wire(w, x)), |o| o
            .get(i)
            .map(Src::Owned))
        .map(OwnerView)
    }

    /// Each reference in order.
    pub fn iter(&self) -> impl Iterator<Item = OwnerView<'a>> + 'a {
        let list = *self;
        (0..self.len()).filter_map(move |i| list.get(i))
    }
}

/// A string map (labels or annotations): key-value pairs, sorted by key
/// when the host built them.
#[derive(Clone, Copy, Debug)]
pub struct Pairs<'a>(Src<'a, [raw::KeyValue], [m::KeyValue]>);

impl<'a> Pairs<'a> {
    pub(super) fn new(src: Src<'a, [raw::KeyValue], [m::KeyValue]>) -> Self {
        Pairs(src)
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        read!(self.0, |_, r| r.len(), |o| o.len())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i` as `(key, value)`.
    pub fn get(&self, i: usize) -> Option<(&'a str, &'a str)> {
        read!(
            self.0,
            |w, r| r.get(i).map(|kv| (w.str(kv.key), w.str(kv.value))),
            |o| o.get(i).map(|kv| (kv.key.as_str(), kv.value.as_str()))
        )
    }

    /// Each entry in order, as `(key, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let list = *self;
        (0..self.len()).filter_map(move |i| list.get(i))
    }

    /// The value of `key`; for a key present twice the last entry wins, as
    /// in [`crate::kv::get`].
    pub fn value(&self, key: &str) -> Option<&'a str> {
        let list = *self;
        (0..self.len())
            .rev()
            .filter_map(move |i| list.get(i))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// The owned entries.
    pub fn owned(&self) -> Vec<m::KeyValue> {
        self.iter().map(|(k, v)| m::KeyValue::new(k, v)).collect()
    }
}

/// A list of names (a status's `pod-list`).
#[derive(Clone, Copy, Debug)]
pub struct Names<'a>(Src<'a, [u32], [String]>);

impl<'a> Names<'a> {
    pub(super) fn new(src: Src<'a, [u32], [String]>) -> Self {
        Names(src)
    }

    /// How many.
    pub fn len(&self) -> usize {
        read!(self.0, |_, r| r.len(), |o| o.len())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Name `i`.
    pub fn get(&self, i: usize) -> Option<&'a str> {
        read!(self.0, |w, r| r.get(i).map(|&id| w.str(id)), |o| o
            .get(i)
            .map(String::as_str))
    }

    /// Each name in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + 'a {
        let list = *self;
        (0..self.len()).filter_map(move |i| list.get(i))
    }
}
