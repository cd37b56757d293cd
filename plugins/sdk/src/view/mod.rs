//! A borrowed view of a reconcile input: the same records as [`crate::types`],
//! read in place. Every accessor returns a `&'a str`, a number or another
//! view; nothing is copied or allocated per string.
//!
//! A view reads one of two backings, and plugin code cannot tell which:
//!
//! * the wire input of contract 0.2 ([`InputView::from_wire`]): names are
//!   slices of the input's one string table, labels and owners entries of
//!   its shared lists. This is what [`crate::Guest::reconcile_view`]
//!   receives inside a component: the whole input is checked once (every
//!   string id and span in range, every string on UTF-8 boundaries) before
//!   the plugin sees it, so the accessors cannot fail;
//! * the SDK's owned records ([`InputView::of`], or `From<&ReconcileInput>`):
//!   for native tests built with [`crate::testing`], for contract 0.1
//!   (cargo feature `contract-0-1`, whose records already own their
//!   strings), and for code that has an owned input at hand.
//!
//! So logic written once against the view runs in the component without
//! decoding and natively on owned inputs. [`InputView::owned`] (and the
//! `owned()` of each view) makes the owned records when they are needed.
//!
//! ```
//! use jinghzhu_plugin_sdk::testing::{input, jinghzhu, pod};
//! use jinghzhu_plugin_sdk::types::PodPhase;
//! use jinghzhu_plugin_sdk::view::InputView;
//!
//! let owned = input(jinghzhu("web", "shop", 2))
//!     .pod(pod("web-a", PodPhase::Running))
//!     .pod(pod("web-b", PodPhase::Pending))
//!     .build();
//! let view = InputView::of(&owned);
//! let jz = view.jinghzhu();
//! assert_eq!(jz.metadata().name(), "web");
//! let live: Vec<&str> = view
//!     .pods()
//!     .iter()
//!     .filter(|p| p.is_live() && p.is_controlled_by(jz.metadata().uid()))
//!     .map(|p| p.metadata().name())
//!     .collect();
//! assert_eq!(live, ["web-a", "web-b"]);
//! assert_eq!(view.owned(), owned);
//! ```
//!
//! A plugin reading the view: it overrides [`crate::Guest::reconcile_view`]
//! (the default decodes into owned records and calls `reconcile`), and its
//! `reconcile` runs the same logic on a view of the owned input.
//!
//! ```
//! use jinghzhu_plugin_sdk::prelude::*;
//!
//! pub fn reconcile(input: &InputView<'_>) -> ReconcileOutput {
//!     let jz = input.jinghzhu();
//!     let uid = jz.metadata().uid();
//!     let live: Vec<PodView<'_>> = input
//!         .pods()
//!         .iter()
//!         .filter(|p| p.is_controlled_by(uid) && p.is_live())
//!         .collect();
//!     let mut out = ReconcileOutput::empty();
//!     let have = u32::try_from(live.len()).unwrap_or(u32::MAX);
//!     if have < jz.desired() {
//!         out.create_pods = vec![jz.pod_from_template(); (jz.desired() - have) as usize];
//!     }
//!     out
//! }
//!
//! pub struct Plugin;
//!
//! impl Guest for Plugin {
//!     fn info() -> PluginInfo {
//!         PluginInfo::new("in-place", env!("CARGO_PKG_VERSION"))
//!     }
//!
//!     fn reconcile(input: ReconcileInput) -> Result<ReconcileOutput, ReconcileError> {
//!         Ok(reconcile(&InputView::of(&input)))
//!     }
//!
//!     fn reconcile_view(input: &InputView<'_>) -> Result<ReconcileOutput, ReconcileError> {
//!         Ok(reconcile(input))
//!     }
//! }
//!
//! jinghzhu_plugin_sdk::export!(Plugin);
//! # fn main() {
//! #     let owned = jinghzhu_plugin_sdk::testing::jinghzhu("web", "shop", 2).input().build();
//! #     let out = <Plugin as Guest>::reconcile(owned).expect("reconciles");
//! #     assert_eq!(out.create_pods.len(), 2);
//! # }
//! ```

use crate::bindings::jinghzhu::operator::types as raw;
use crate::types as m;
use crate::types::{PodPhase, Timestamp};

#[cfg(not(feature = "contract-0-1"))]
mod wire;

#[cfg(not(feature = "contract-0-1"))]
use wire::{Wire, check};
#[cfg(not(feature = "contract-0-1"))]
pub(crate) use wire::{spanned, string_at};

mod compare;
mod lists;
#[cfg(test)]
mod tests;

pub(crate) use compare::compare;

pub use lists::{Names, Owners, Pairs, Pods};

/// Why a wire input cannot be viewed: a string id or span out of range, or
/// a string that is not UTF-8 (the host never sends such an input).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewError(String);

impl ViewError {
    #[cfg(not(feature = "contract-0-1"))]
    pub(crate) fn new(message: String) -> Self {
        ViewError(message)
    }

    /// What is wrong with the input.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ViewError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ViewError {}

/// Where a view reads from: a wire record with its input's table and
/// shared lists, or an owned record. (`W` is unused with `contract-0-1`.)
#[derive(Debug)]
enum Src<'a, W: ?Sized, O: ?Sized> {
    #[cfg(not(feature = "contract-0-1"))]
    Wire(Wire<'a>, &'a W),
    Owned(&'a O),
    #[cfg(feature = "contract-0-1")]
    #[allow(dead_code)]
    Never(std::convert::Infallible, std::marker::PhantomData<&'a W>),
}

impl<W: ?Sized, O: ?Sized> Clone for Src<'_, W, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W: ?Sized, O: ?Sized> Copy for Src<'_, W, O> {}

/// Reads a [`Src`]: `|w, r| expr` for a wire record `r` of the input `w`,
/// `|o| expr` for an owned record `o`.
macro_rules! read {
    ($src:expr, |$w:pat_param, $r:pat_param| $wire:expr, |$o:pat_param| $owned:expr) => {
        match $src {
            #[cfg(not(feature = "contract-0-1"))]
            Src::Wire($w, $r) => $wire,
            Src::Owned($o) => $owned,
            #[cfg(feature = "contract-0-1")]
            Src::Never(never, _) => match never {},
        }
    };
}
pub(crate) use read;

/// The whole input of a reconcile, read in place.
#[derive(Clone, Copy, Debug)]
pub struct InputView<'a>(Src<'a, raw::ReconcileInput, m::ReconcileInput>);

impl<'a> InputView<'a> {
    /// A view of a contract 0.2 wire input, checked whole first: every
    /// string id, span and string boundary the records use is in range, so
    /// no accessor can fail afterwards. A broken input is an error, never a
    /// panic.
    #[cfg(not(feature = "contract-0-1"))]
    pub fn from_wire(input: &'a raw::ReconcileInput) -> Result<Self, ViewError> {
        let wire = check(input)?;
        Ok(InputView(Src::Wire(wire, input)))
    }

    /// A view of the SDK's owned records.
    pub fn of(input: &'a m::ReconcileInput) -> Self {
        InputView(Src::Owned(input))
    }

    /// The Jinghzhu to reconcile.
    pub fn jinghzhu(&self) -> JinghzhuView<'a> {
        JinghzhuView(read!(self.0, |w, r| Src::Wire(w, &r.jinghzhu), |o| {
            Src::Owned(&o.jinghzhu)
        }))
    }

    /// The Pods it controls, terminating ones included, sorted by name.
    pub fn pods(&self) -> Pods<'a> {
        Pods::new(read!(self.0, |w, r| Src::Wire(w, &r.pods[..]), |o| {
            Src::Owned(&o.pods[..])
        }))
    }

    /// The host's clock at the start of this reconcile.
    pub fn now(&self) -> Timestamp {
        read!(self.0, |_, r| crate::wire::ts_in(r.now), |o| o.now)
    }

    /// The input as the SDK's owned records.
    pub fn owned(&self) -> m::ReconcileInput {
        m::ReconcileInput {
            jinghzhu: self.jinghzhu().owned(),
            pods: self.pods().iter().map(|p| p.owned()).collect(),
            now: self.now(),
        }
    }
}

impl<'a> From<&'a m::ReconcileInput> for InputView<'a> {
    fn from(input: &'a m::ReconcileInput) -> Self {
        InputView::of(input)
    }
}

/// The custom resource being reconciled.
#[derive(Clone, Copy, Debug)]
pub struct JinghzhuView<'a>(Src<'a, raw::Jinghzhu, m::Jinghzhu>);

impl<'a> JinghzhuView<'a> {
    /// A view of an owned record.
    pub fn of(jinghzhu: &'a m::Jinghzhu) -> Self {
        JinghzhuView(Src::Owned(jinghzhu))
    }

    /// Its metadata.
    pub fn metadata(&self) -> MetaView<'a> {
        MetaView(read!(self.0, |w, r| Src::Wire(w, &r.metadata), |o| {
            Src::Owned(&o.metadata)
        }))
    }

    /// `spec.desired`: how many Pods should be running.
    pub fn desired(&self) -> u32 {
        read!(self.0, |_, r| r.spec.desired, |o| o.spec.desired)
    }

    /// `spec.template`, when the Jinghzhu has one.
    pub fn template(&self) -> Option<TemplateView<'a>> {
        read!(
            self.0,
            |w, r| r.spec.template.as_ref().map(|t| Src::Wire(w, t)),
            |o| o.spec.template.as_ref().map(Src::Owned)
        )
        .map(TemplateView)
    }

    /// The status, absent before the operator first wrote one.
    pub fn status(&self) -> Option<StatusView<'a>> {
        read!(
            self.0,
            |w, r| r.status.as_ref().map(|s| Src::Wire(w, s)),
            |o| o.status.as_ref().map(Src::Owned)
        )
        .map(StatusView)
    }

    /// A [`m::PodCreate`] for one new Pod of this Jinghzhu, the same as
    /// [`crate::pod::from_template`] makes from the owned record.
    pub fn pod_from_template(&self) -> m::PodCreate {
        let template = self.template();
        let spec_json = match template.map(|t| t.spec_json()) {
            Some(spec) if !spec.trim().is_empty() => spec.to_owned(),
            _ => String::new(),
        };
        m::PodCreate {
            name: None,
            generate_name: Some(format!("{}-", self.metadata().name())),
            labels: template.map(|t| t.labels().owned()).unwrap_or_default(),
            annotations: template
                .map(|t| t.annotations().owned())
                .unwrap_or_default(),
            spec_json,
        }
    }

    /// The owned record.
    pub fn owned(&self) -> m::Jinghzhu {
        m::Jinghzhu {
            metadata: self.metadata().owned(),
            spec: m::JinghzhuSpec {
                desired: self.desired(),
                template: self.template().map(|t| t.owned()),
            },
            status: self.status().map(|s| s.owned()),
        }
    }
}

/// Object metadata.
#[derive(Clone, Copy, Debug)]
pub struct MetaView<'a>(Src<'a, raw::ObjectMeta, m::ObjectMeta>);

impl<'a> MetaView<'a> {
    /// Object name.
    pub fn name(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.name), |o| &o.name)
    }

    /// Namespace.
    pub fn namespace(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.namespace), |o| &o.namespace)
    }

    /// Unique id the API server assigned at creation.
    pub fn uid(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.uid), |o| &o.uid)
    }

    /// Opaque version of this state of the object.
    pub fn resource_version(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.resource_version), |o| {
            &o.resource_version
        })
    }

    /// Increases each time the spec changes (0 when not tracked).
    pub fn generation(&self) -> i64 {
        read!(self.0, |_, r| r.generation, |o| o.generation)
    }

    /// Labels, sorted by key.
    pub fn labels(&self) -> Pairs<'a> {
        Pairs::new(read!(self.0, |w, r| Src::Wire(w, w.pairs(r.labels)), |o| {
            Src::Owned(&o.labels[..])
        }))
    }

    /// Annotations, sorted by key.
    pub fn annotations(&self) -> Pairs<'a> {
        Pairs::new(read!(
            self.0,
            |w, r| Src::Wire(w, w.pairs(r.annotations)),
            |o| Src::Owned(&o.annotations[..])
        ))
    }

    /// When the object was created.
    pub fn creation_timestamp(&self) -> Option<Timestamp> {
        read!(
            self.0,
            |_, r| r.creation_timestamp.map(crate::wire::ts_in),
            |o| { o.creation_timestamp }
        )
    }

    /// Set when deletion was requested.
    pub fn deletion_timestamp(&self) -> Option<Timestamp> {
        read!(
            self.0,
            |_, r| r.deletion_timestamp.map(crate::wire::ts_in),
            |o| { o.deletion_timestamp }
        )
    }

    /// Owners of the object.
    pub fn owner_references(&self) -> Owners<'a> {
        Owners::new(read!(
            self.0,
            |w, r| Src::Wire(w, w.owners(r.owner_references)),
            |o| Src::Owned(&o.owner_references[..])
        ))
    }

    /// The owned record.
    pub fn owned(&self) -> m::ObjectMeta {
        m::ObjectMeta {
            name: self.name().to_owned(),
            namespace: self.namespace().to_owned(),
            uid: self.uid().to_owned(),
            resource_version: self.resource_version().to_owned(),
            generation: self.generation(),
            labels: self.labels().owned(),
            annotations: self.annotations().owned(),
            creation_timestamp: self.creation_timestamp(),
            deletion_timestamp: self.deletion_timestamp(),
            owner_references: self.owner_references().iter().map(|r| r.owned()).collect(),
        }
    }
}

/// A reference from an object to its owner.
#[derive(Clone, Copy, Debug)]
pub struct OwnerView<'a>(Src<'a, raw::OwnerReference, m::OwnerReference>);

impl<'a> OwnerView<'a> {
    /// API group and version of the owner.
    pub fn api_version(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.api_version), |o| &o.api_version)
    }

    /// Kind of the owner.
    pub fn kind(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.kind), |o| &o.kind)
    }

    /// Name of the owner.
    pub fn name(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.name), |o| &o.name)
    }

    /// UID of the owner.
    pub fn uid(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.uid), |o| &o.uid)
    }

    /// True when the owner is the managing controller.
    pub fn controller(&self) -> bool {
        read!(self.0, |_, r| r.controller, |o| o.controller)
    }

    /// The owned record.
    pub fn owned(&self) -> m::OwnerReference {
        m::OwnerReference {
            api_version: self.api_version().to_owned(),
            kind: self.kind().to_owned(),
            name: self.name().to_owned(),
            uid: self.uid().to_owned(),
            controller: self.controller(),
        }
    }
}

/// The template for the Jinghzhu's Pods.
#[derive(Clone, Copy, Debug)]
pub struct TemplateView<'a>(Src<'a, raw::PodTemplate, m::PodTemplate>);

impl<'a> TemplateView<'a> {
    /// Labels to put on each Pod.
    pub fn labels(&self) -> Pairs<'a> {
        Pairs::new(read!(self.0, |w, r| Src::Wire(w, w.pairs(r.labels)), |o| {
            Src::Owned(&o.labels[..])
        }))
    }

    /// Annotations to put on each Pod.
    pub fn annotations(&self) -> Pairs<'a> {
        Pairs::new(read!(
            self.0,
            |w, r| Src::Wire(w, w.pairs(r.annotations)),
            |o| Src::Owned(&o.annotations[..])
        ))
    }

    /// The Pod spec as JSON (empty when the template has none).
    pub fn spec_json(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.spec_json), |o| &o.spec_json)
    }

    /// The owned record.
    pub fn owned(&self) -> m::PodTemplate {
        m::PodTemplate {
            labels: self.labels().owned(),
            annotations: self.annotations().owned(),
            spec_json: self.spec_json().to_owned(),
        }
    }
}

/// The status the Jinghzhu has.
#[derive(Clone, Copy, Debug)]
pub struct StatusView<'a>(Src<'a, raw::JinghzhuStatus, m::JinghzhuStatus>);

impl<'a> StatusView<'a> {
    /// A view of an owned record.
    pub fn of(status: &'a m::JinghzhuStatus) -> Self {
        StatusView(Src::Owned(status))
    }

    /// Number of live Pods.
    pub fn current(&self) -> u32 {
        read!(self.0, |_, r| r.current, |o| o.current)
    }

    /// Names of those Pods, as stored (sorted when the operator wrote them).
    pub fn pod_list(&self) -> Names<'a> {
        Names::new(read!(self.0, |w, r| Src::Wire(w, &r.pod_list[..]), |o| {
            Src::Owned(&o.pod_list[..])
        }))
    }

    /// One word summary.
    pub fn state(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.state), |o| &o.state)
    }

    /// A sentence for humans.
    pub fn message(&self) -> &'a str {
        read!(self.0, |w, r| w.str(r.message), |o| &o.message)
    }

    /// The `metadata.generation` this status describes.
    pub fn observed_generation(&self) -> Option<i64> {
        read!(self.0, |_, r| r.observed_generation, |o| {
            o.observed_generation
        })
    }

    /// True when this status says the same as `other`, as
    /// [`crate::status::status_equal`] decides (the order of `pod-list`
    /// does not matter). Allocates only when both lists hold the same
    /// names in a different order.
    pub fn same_as(&self, other: &m::JinghzhuStatus) -> bool {
        let names = self.pod_list();
        if self.current() != other.current
            || self.state() != other.state
            || self.message() != other.message
            || self.observed_generation() != other.observed_generation
            || names.len() != other.pod_list.len()
        {
            return false;
        }
        if names.iter().eq(other.pod_list.iter().map(String::as_str)) {
            return true;
        }
        let mut x: Vec<&str> = names.iter().collect();
        let mut y: Vec<&str> = other.pod_list.iter().map(String::as_str).collect();
        x.sort_unstable();
        y.sort_unstable();
        x == y
    }

    /// The owned record.
    pub fn owned(&self) -> m::JinghzhuStatus {
        m::JinghzhuStatus {
            current: self.current(),
            pod_list: self.pod_list().iter().map(str::to_owned).collect(),
            state: self.state().to_owned(),
            message: self.message().to_owned(),
            observed_generation: self.observed_generation(),
        }
    }
}

/// A Pod controlled by the Jinghzhu.
#[derive(Clone, Copy, Debug)]
pub struct PodView<'a>(Src<'a, raw::Pod, m::Pod>);

impl<'a> PodView<'a> {
    /// A view of an owned record.
    pub fn of(pod: &'a m::Pod) -> Self {
        PodView(Src::Owned(pod))
    }

    /// Its metadata.
    pub fn metadata(&self) -> MetaView<'a> {
        MetaView(read!(self.0, |w, r| Src::Wire(w, &r.metadata), |o| {
            Src::Owned(&o.metadata)
        }))
    }

    /// Phase reported by the Pod's status.
    pub fn phase(&self) -> PodPhase {
        read!(self.0, |_, r| crate::wire::phase_in(r.phase), |o| o.phase)
    }

    /// True when the Pod's `Ready` condition is `True`.
    pub fn ready(&self) -> bool {
        read!(self.0, |_, r| r.ready, |o| o.ready)
    }

    /// Deletion was requested (see [`crate::pod::is_terminating`]).
    pub fn is_terminating(&self) -> bool {
        self.metadata().deletion_timestamp().is_some()
    }

    /// It ran to completion (see [`crate::pod::is_finished`]).
    pub fn is_finished(&self) -> bool {
        matches!(self.phase(), PodPhase::Succeeded | PodPhase::Failed)
    }

    /// Neither terminating nor finished (see [`crate::pod::is_live`]).
    pub fn is_live(&self) -> bool {
        !self.is_terminating() && !self.is_finished()
    }

    /// Running and ready (see [`crate::pod::is_running_and_ready`]).
    pub fn is_running_and_ready(&self) -> bool {
        self.phase() == PodPhase::Running && self.ready()
    }

    /// Its controller owner reference has uid `owner_uid` (see
    /// [`crate::pod::is_controlled_by`]).
    pub fn is_controlled_by(&self, owner_uid: &str) -> bool {
        self.metadata()
            .owner_references()
            .iter()
            .any(|r| r.controller() && r.uid() == owner_uid)
    }

    /// The owned record.
    pub fn owned(&self) -> m::Pod {
        m::Pod {
            metadata: self.metadata().owned(),
            phase: self.phase(),
            ready: self.ready(),
        }
    }
}
