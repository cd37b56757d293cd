//! The records a plugin reads and writes, as plain owned Rust values: the
//! meaning of the contract's records (`wit/0.2/operator.wit`) with each
//! string a `String`, each map a sorted `Vec<KeyValue>` and each object's
//! labels and owners in the object itself.
//!
//! On the wire, contract 0.2 stores every string once in a table and the
//! labels and owners of all objects in shared lists (so the host hands the
//! whole input over in a handful of values); the SDK's export glue
//! ([`crate::wire`]) decodes that into these records before calling
//! [`crate::Guest::reconcile`] and encodes the returned output back. With
//! the cargo feature `contract-0-1` the same records travel as the 0.1
//! records they mirror field by field.
//!
//! All records derive `Clone`, `Debug`, `PartialEq` and `Eq`; the plain
//! ones (everything but those holding a [`PodPhase`] or [`EventType`])
//! also derive `Default`. [`Timestamp`] and [`KeyValue`] are ordered.

/// One entry of a string map such as labels or annotations. Lists of
/// key-values are sorted by key when the host builds them.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

/// A point in time, UTC, as seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Whole seconds.
    pub seconds: i64,
    /// Nanoseconds within the second.
    pub nanoseconds: u32,
}

/// A reference from an object to the object that owns it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerReference {
    /// API group and version of the owner, e.g. `jinghzhu.io/v1`.
    pub api_version: String,
    /// Kind of the owner, e.g. `Jinghzhu`.
    pub kind: String,
    /// Name of the owner (same namespace as the owned object).
    pub name: String,
    /// UID of the owner.
    pub uid: String,
    /// True when the owner is the managing controller of the object.
    pub controller: bool,
}

/// The parts of Kubernetes object metadata a plugin may reason about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Object name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Unique id the API server assigned at creation.
    pub uid: String,
    /// Opaque version of this state of the object.
    pub resource_version: String,
    /// Increases each time the object's spec changes (0 when not tracked).
    pub generation: i64,
    /// Labels, sorted by key.
    pub labels: Vec<KeyValue>,
    /// Annotations, sorted by key.
    pub annotations: Vec<KeyValue>,
    /// When the object was created.
    pub creation_timestamp: Option<Timestamp>,
    /// Set when deletion was requested; the object is terminating.
    pub deletion_timestamp: Option<Timestamp>,
    /// Owners of the object.
    pub owner_references: Vec<OwnerReference>,
}

/// The template for the Pods a Jinghzhu runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodTemplate {
    /// Labels to put on each Pod.
    pub labels: Vec<KeyValue>,
    /// Annotations to put on each Pod.
    pub annotations: Vec<KeyValue>,
    /// The Pod spec as a JSON object (empty when the template has none).
    pub spec_json: String,
}

/// What the user asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JinghzhuSpec {
    /// Number of Pods that should be running.
    pub desired: u32,
    /// Pod template; when absent the host's default template applies.
    pub template: Option<PodTemplate>,
}

/// What the operator observed and reports back; also the shape of a
/// status patch (the host replaces the whole status with it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JinghzhuStatus {
    /// Number of live Pods.
    pub current: u32,
    /// Names of those Pods, sorted.
    pub pod_list: Vec<String>,
    /// One word summary.
    pub state: String,
    /// A sentence for humans.
    pub message: String,
    /// The `metadata.generation` this status describes.
    pub observed_generation: Option<i64>,
}

/// The custom resource being reconciled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Jinghzhu {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: JinghzhuSpec,
    /// Absent before the operator first wrote a status.
    pub status: Option<JinghzhuStatus>,
}

/// Lifecycle phase of a Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodPhase {
    /// Accepted, not all containers running yet.
    Pending,
    /// Bound to a node, at least one container running.
    Running,
    /// All containers terminated successfully.
    Succeeded,
    /// All containers terminated, at least one in failure.
    Failed,
    /// The state could not be obtained.
    Unknown,
}

/// A Pod controlled by the Jinghzhu.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    /// Metadata; `deletion_timestamp` is set while the Pod terminates.
    pub metadata: ObjectMeta,
    /// Phase reported by the Pod's status.
    pub phase: PodPhase,
    /// True when the Pod's `Ready` condition is `True`.
    pub ready: bool,
}

/// Everything a reconcile may know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileInput {
    /// The Jinghzhu to reconcile.
    pub jinghzhu: Jinghzhu,
    /// Pods it controls, terminating ones included, sorted by name.
    pub pods: Vec<Pod>,
    /// The host's clock at the start of this reconcile.
    pub now: Timestamp,
}

/// A Pod the plugin wants created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodCreate {
    /// Exact name; `None` to use `generate_name`.
    pub name: Option<String>,
    /// Name prefix; the API server appends a random suffix.
    pub generate_name: Option<String>,
    /// Labels for the Pod (merged under the host's labels).
    pub labels: Vec<KeyValue>,
    /// Annotations for the Pod.
    pub annotations: Vec<KeyValue>,
    /// The Pod spec as JSON; empty means the template's spec (or the
    /// host's default template).
    pub spec_json: String,
}

/// Severity of an Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventType {
    /// Routine.
    Normal,
    /// Something to look at.
    Warning,
}

/// A Kubernetes Event to record on the Jinghzhu.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub event_type: EventType,
    /// Short UpperCamelCase reason, e.g. `ScaledUp`.
    pub reason: String,
    /// A sentence for humans.
    pub message: String,
}

/// What the plugin proposes; the host applies it all or nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileOutput {
    /// Pods to create.
    pub create_pods: Vec<PodCreate>,
    /// Names of owned Pods to delete.
    pub delete_pods: Vec<String>,
    /// New status; `None` when nothing changed (no write is made).
    pub status: Option<JinghzhuStatus>,
    /// Reconcile again after this many milliseconds.
    pub requeue_after_ms: Option<u64>,
    /// Events to record on the Jinghzhu.
    pub events: Vec<Event>,
}

/// Why a reconcile failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileError {
    /// What went wrong, for logs and a Warning Event.
    pub message: String,
    /// True when trying again later may succeed.
    pub retryable: bool,
}

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ReconcileError {}

/// What a plugin says about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginInfo {
    /// Plugin name, e.g. `replicaset`.
    pub name: String,
    /// Plugin version, e.g. `0.2.0`.
    pub version: String,
}

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed.
    Trace,
    /// For debugging.
    Debug,
    /// Routine.
    Info,
    /// Something odd.
    Warn,
    /// Something failed.
    Error,
}
