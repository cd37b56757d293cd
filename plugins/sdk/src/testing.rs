//! Builders for reconcile inputs, for native unit tests of plugin logic.
//!
//! They build the records the host would send, with realistic defaults:
//! uids derived from names, generation 1, creation an hour before
//! [`DEFAULT_NOW`], Pods in the Jinghzhu's namespace with a controller owner
//! reference to it, and Pods sorted by name.
//!
//! ```
//! use jinghzhu_plugin_sdk::testing::{input, jinghzhu, pod};
//! use jinghzhu_plugin_sdk::types::PodPhase;
//!
//! let input = input(jinghzhu("demo", "default", 3))
//!     .pod(pod("demo-b", PodPhase::Running).created_at(1_000))
//!     .pod(pod("demo-a", PodPhase::Pending).ready(false))
//!     .pod(pod("demo-c", PodPhase::Running).terminating())
//!     .build();
//! assert_eq!(input.pods[0].metadata.name, "demo-a");
//! assert_eq!(input.pods[0].metadata.owner_references[0].kind, "Jinghzhu");
//! ```
//!
//! This module has no effect on a plugin's component: it is plain Rust that
//! the linker drops when nothing calls it.

use crate::kv;
use crate::types::{
    Jinghzhu, JinghzhuSpec, JinghzhuStatus, ObjectMeta, OwnerReference, Pod, PodPhase, PodTemplate,
    ReconcileInput, Timestamp,
};

/// `apiVersion` of the Jinghzhu custom resource.
pub const API_VERSION: &str = "jinghzhu.io/v1";
/// `kind` of the Jinghzhu custom resource.
pub const KIND: &str = "Jinghzhu";
/// The `now` of inputs built here unless [`InputBuilder::now`] says otherwise
/// (2023-11-14T22:13:20Z).
pub const DEFAULT_NOW: i64 = 1_700_000_000;
/// Default creation time of built objects: an hour before [`DEFAULT_NOW`].
pub const DEFAULT_CREATED: i64 = DEFAULT_NOW - 3_600;

fn meta(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        uid: format!("uid-{name}"),
        resource_version: "1".to_owned(),
        generation: 1,
        creation_timestamp: Some(Timestamp::from_secs(DEFAULT_CREATED)),
        ..ObjectMeta::default()
    }
}

/// Starts a Jinghzhu named `name` in `namespace` asking for `desired` Pods,
/// with no template and no status.
pub fn jinghzhu(name: &str, namespace: &str, desired: u32) -> JinghzhuBuilder {
    JinghzhuBuilder {
        inner: Jinghzhu {
            metadata: meta(name, namespace),
            spec: JinghzhuSpec {
                desired,
                template: None,
            },
            status: None,
        },
    }
}

/// Builds a [`Jinghzhu`]; see [`jinghzhu`].
#[derive(Clone, Debug)]
#[must_use]
pub struct JinghzhuBuilder {
    inner: Jinghzhu,
}

impl JinghzhuBuilder {
    /// Sets `metadata.uid` (default `uid-<name>`).
    pub fn uid(mut self, uid: &str) -> Self {
        uid.clone_into(&mut self.inner.metadata.uid);
        self
    }

    /// Sets `metadata.generation` (default 1).
    pub fn generation(mut self, generation: i64) -> Self {
        self.inner.metadata.generation = generation;
        self
    }

    /// Sets `metadata.resource-version` (default `1`).
    pub fn resource_version(mut self, version: &str) -> Self {
        version.clone_into(&mut self.inner.metadata.resource_version);
        self
    }

    /// Adds or replaces a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        kv::set(&mut self.inner.metadata.labels, key, value);
        self
    }

    /// Adds or replaces an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        kv::set(&mut self.inner.metadata.annotations, key, value);
        self
    }

    /// Sets `metadata.creation-timestamp` in whole seconds.
    pub fn created_at(mut self, seconds: i64) -> Self {
        self.inner.metadata.creation_timestamp = Some(Timestamp::from_secs(seconds));
        self
    }

    /// Marks the Jinghzhu as being deleted since `seconds`.
    pub fn deleting_at(mut self, seconds: i64) -> Self {
        self.inner.metadata.deletion_timestamp = Some(Timestamp::from_secs(seconds));
        self
    }

    /// Sets `spec.desired`.
    pub fn desired(mut self, desired: u32) -> Self {
        self.inner.spec.desired = desired;
        self
    }

    /// Sets `spec.template`.
    pub fn template(mut self, template: PodTemplate) -> Self {
        self.inner.spec.template = Some(template);
        self
    }

    /// Sets the current `status`.
    pub fn status(mut self, status: JinghzhuStatus) -> Self {
        self.inner.status = Some(status);
        self
    }

    /// The Jinghzhu.
    pub fn build(self) -> Jinghzhu {
        self.inner
    }

    /// Starts an input reconciling this Jinghzhu; same as [`input`]`(self)`.
    pub fn input(self) -> InputBuilder {
        input(self)
    }
}

impl From<JinghzhuBuilder> for Jinghzhu {
    fn from(b: JinghzhuBuilder) -> Self {
        b.build()
    }
}

/// Starts a Pod named `name` in phase `phase`. It is ready when the phase is
/// `running`, created at [`DEFAULT_CREATED`], and (once added to an
/// [`InputBuilder`]) in the Jinghzhu's namespace and controlled by it.
pub fn pod(name: &str, phase: PodPhase) -> PodBuilder {
    PodBuilder {
        inner: Pod {
            metadata: meta(name, ""),
            phase,
            ready: phase == PodPhase::Running,
        },
        auto_owner: true,
    }
}

/// Builds a [`Pod`]; see [`pod`].
#[derive(Clone, Debug)]
#[must_use]
pub struct PodBuilder {
    inner: Pod,
    auto_owner: bool,
}

impl PodBuilder {
    /// Sets the phase (readiness is left as it is).
    pub fn phase(mut self, phase: PodPhase) -> Self {
        self.inner.phase = phase;
        self
    }

    /// Sets whether the `Ready` condition is true.
    pub fn ready(mut self, ready: bool) -> Self {
        self.inner.ready = ready;
        self
    }

    /// Sets `metadata.creation-timestamp` in whole seconds.
    pub fn created_at(mut self, seconds: i64) -> Self {
        self.inner.metadata.creation_timestamp = Some(Timestamp::from_secs(seconds));
        self
    }

    /// Removes `metadata.creation-timestamp`.
    pub fn no_creation_timestamp(mut self) -> Self {
        self.inner.metadata.creation_timestamp = None;
        self
    }

    /// Marks the Pod as terminating (deletion requested at [`DEFAULT_NOW`]).
    pub fn terminating(self) -> Self {
        self.deleting_at(DEFAULT_NOW)
    }

    /// Marks the Pod as terminating since `seconds`.
    pub fn deleting_at(mut self, seconds: i64) -> Self {
        self.inner.metadata.deletion_timestamp = Some(Timestamp::from_secs(seconds));
        self
    }

    /// Sets the namespace (default: the Jinghzhu's, when added to an input).
    pub fn namespace(mut self, namespace: &str) -> Self {
        namespace.clone_into(&mut self.inner.metadata.namespace);
        self
    }

    /// Sets `metadata.uid` (default `uid-<name>`).
    pub fn uid(mut self, uid: &str) -> Self {
        uid.clone_into(&mut self.inner.metadata.uid);
        self
    }

    /// Adds or replaces a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        kv::set(&mut self.inner.metadata.labels, key, value);
        self
    }

    /// Adds or replaces an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        kv::set(&mut self.inner.metadata.annotations, key, value);
        self
    }

    /// Adds a controller owner reference to `owner` now, instead of the one
    /// an [`InputBuilder`] would add.
    pub fn owned_by(mut self, owner: &Jinghzhu) -> Self {
        self.inner
            .metadata
            .owner_references
            .push(controller_reference(owner));
        self
    }

    /// Leaves the Pod without owner references (an [`InputBuilder`] then
    /// adds none).
    pub fn unowned(mut self) -> Self {
        self.inner.metadata.owner_references.clear();
        self.auto_owner = false;
        self
    }

    /// The Pod, as given (no namespace or owner added).
    pub fn build(self) -> Pod {
        self.inner
    }
}

impl From<PodBuilder> for Pod {
    fn from(b: PodBuilder) -> Self {
        b.build()
    }
}

/// The controller owner reference a Pod of `owner` carries.
pub fn controller_reference(owner: &Jinghzhu) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        name: owner.metadata.name.clone(),
        uid: owner.metadata.uid.clone(),
        controller: true,
    }
}

/// Starts a [`ReconcileInput`] for `jinghzhu` with no Pods, at [`DEFAULT_NOW`].
pub fn input(jinghzhu: impl Into<Jinghzhu>) -> InputBuilder {
    InputBuilder {
        jinghzhu: jinghzhu.into(),
        pods: Vec::new(),
        now: Timestamp::from_secs(DEFAULT_NOW),
    }
}

/// Builds a [`ReconcileInput`]; see [`input`].
#[derive(Clone, Debug)]
#[must_use]
pub struct InputBuilder {
    jinghzhu: Jinghzhu,
    pods: Vec<PodBuilder>,
    now: Timestamp,
}

impl InputBuilder {
    /// Adds a Pod (a [`PodBuilder`] or a [`Pod`]).
    pub fn pod(mut self, pod: impl Into<PodBuilder>) -> Self {
        self.pods.push(pod.into());
        self
    }

    /// Adds several Pods.
    pub fn pods<P: Into<PodBuilder>>(mut self, pods: impl IntoIterator<Item = P>) -> Self {
        self.pods.extend(pods.into_iter().map(Into::into));
        self
    }

    /// Sets `now` in whole seconds.
    pub fn now(mut self, seconds: i64) -> Self {
        self.now = Timestamp::from_secs(seconds);
        self
    }

    /// The input, as the host sends it: every Pod in the Jinghzhu's
    /// namespace unless set, controlled by it unless [`PodBuilder::unowned`]
    /// or already owned, and sorted by name.
    pub fn build(self) -> ReconcileInput {
        let jz = self.jinghzhu;
        let mut pods: Vec<Pod> = self
            .pods
            .into_iter()
            .map(|b| {
                let mut p = b.inner;
                if p.metadata.namespace.is_empty() {
                    p.metadata.namespace.clone_from(&jz.metadata.namespace);
                }
                if b.auto_owner && p.metadata.owner_references.is_empty() {
                    p.metadata.owner_references.push(controller_reference(&jz));
                }
                p
            })
            .collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        ReconcileInput {
            jinghzhu: jz,
            pods,
            now: self.now,
        }
    }
}

impl From<Pod> for PodBuilder {
    fn from(pod: Pod) -> Self {
        PodBuilder {
            inner: pod,
            auto_owner: true,
        }
    }
}

impl From<InputBuilder> for ReconcileInput {
    fn from(b: InputBuilder) -> Self {
        b.build()
    }
}

/// `Ok` when every field a [`crate::view::InputView`] reads, accessor by
/// accessor, equals the same field of `owned`; else the first field that
/// differs. For tests of the view (or of a plugin's own wrapper around it)
/// against the owned records of the same input.
pub fn compare_view(
    view: &crate::view::InputView<'_>,
    owned: &ReconcileInput,
) -> Result<(), String> {
    crate::view::compare(view, owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_realistic() {
        let jz = jinghzhu("demo", "ns", 2).build();
        assert_eq!(jz.metadata.uid, "uid-demo");
        assert_eq!(jz.metadata.generation, 1);
        assert_eq!(jz.spec.desired, 2);
        assert!(jz.status.is_none() && jz.spec.template.is_none());

        let input = input(jz.clone())
            .pod(pod("demo-b", PodPhase::Running))
            .pod(pod("demo-a", PodPhase::Pending))
            .pod(pod("stray", PodPhase::Running).unowned().namespace("other"))
            .now(42)
            .build();
        assert_eq!(input.now, Timestamp::from_secs(42));
        let names: Vec<&str> = input
            .pods
            .iter()
            .map(|p| p.metadata.name.as_str())
            .collect();
        assert_eq!(names, ["demo-a", "demo-b", "stray"]);
        assert!(input.pods[1].ready && !input.pods[0].ready);
        assert_eq!(input.pods[0].metadata.namespace, "ns");
        assert_eq!(
            input.pods[0].metadata.owner_references,
            [controller_reference(&jz)]
        );
        assert!(input.pods[2].metadata.owner_references.is_empty());
        assert_eq!(input.pods[2].metadata.namespace, "other");
    }

    #[test]
    fn pod_modifiers() {
        let p: Pod = pod("p", PodPhase::Running)
            .ready(false)
            .created_at(5)
            .terminating()
            .label("a", "1")
            .annotation("b", "2")
            .uid("u")
            .into();
        assert!(!p.ready);
        assert_eq!(p.metadata.creation_timestamp, Some(Timestamp::from_secs(5)));
        assert_eq!(
            p.metadata.deletion_timestamp,
            Some(Timestamp::from_secs(DEFAULT_NOW))
        );
        assert_eq!(kv::label(&p.metadata.labels, "a"), Some("1"));
        assert_eq!(kv::annotation(&p.metadata.annotations, "b"), Some("2"));
        assert_eq!(p.metadata.uid, "u");
        assert!(
            pod("q", PodPhase::Unknown)
                .no_creation_timestamp()
                .build()
                .metadata
                .creation_timestamp
                .is_none()
        );
    }
}
