//! The `JinghzhuPlugin` custom resource (`jinghzhu.io/v1`, cluster-scoped):
//! which plugin a host serves, from where, pinned and verified how, within
//! which limits; and, in its status, what every replica made of it.
//!
//! Its CRD is generated from these types (`wasm-operator crd`, after the
//! Jinghzhu's) and kept identical to `examples/crd.yaml` and
//! `examples/deploy/crd.yaml` by a test. The host that reads it lives in
//! `delivery/resource/`; this module only says what the object looks like.
//!
//! The status is written by every replica with server-side apply under a
//! field manager of its own (`wasm-operator/<replica>`): each owns its entry
//! of `status.replicas` (a map list keyed by `name`), so replicas never
//! overwrite each other's entries; the shared fields (conditions, digest,
//! state) are the last writer's view.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which plugin to serve and how to take it.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "jinghzhu.io",
    version = "v1",
    kind = "JinghzhuPlugin",
    plural = "jinghzhuplugins",
    shortname = "jzp",
    status = "JinghzhuPluginStatus",
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Digest","type":"string","jsonPath":".status.digest"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Rollout","type":"string","jsonPath":".status.rollout.phase"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".status.rollout.weight"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.rollout.step"}"#,
    printcolumn = r#"{"name":"Stable","type":"string","priority":1,"jsonPath":".status.rollout.stable"}"#,
    printcolumn = r#"{"name":"Canary","type":"string","priority":1,"jsonPath":".status.rollout.canary"}"#,
    printcolumn = r#"{"name":"Plugin","type":"string","priority":1,"jsonPath":".status.plugin"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct JinghzhuPluginSpec {
    /// Where the component's bytes come from: exactly one of `oci`,
    /// `configMap` or `file`.
    pub source: PluginSourceSpec,
    /// Only bytes with this digest may load (`sha256:` and 64 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "digest_schema")]
    pub digest: Option<String>,
    /// Signatures the bytes must carry (OCI sources only: a ConfigMap or a
    /// file carries none, so a resource with both is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationSpec>,
    /// `active`: the plugin that reconciles. `shadow`: a candidate run
    /// beside it on the same inputs, nothing of it applied. Must match how
    /// the host names it (`--plugin-resource` or `--shadow-plugin-resource`).
    #[serde(default)]
    pub mode: PluginMode,
    /// Sandbox limits for this plugin; the host's flags are the upper bound
    /// (a larger value is clamped and the status says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PluginLimitsSpec>,
    /// The pod policy this plugin needs, within what the host allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_policy: Option<PodPolicySpec>,
    /// A tenant plugin: the Jinghzhus it serves, beside the host's default
    /// plugin (hosts started with `--tenant-plugins`). Where two resources
    /// select one object, one naming namespaces beats one selecting by
    /// labels alone, then the oldest, then the first by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ObjectSelectorSpec>,
    /// Roll a new artifact out as a canary: it serves a growing cohort of
    /// the objects, step by step, each step judged against the stable
    /// plugin; without it a new artifact serves every object at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
}

/// A canary rollout's steps and the criterion that aborts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// The cohort at each step, in percent of the objects (a stable hash of
    /// each object's UID picks them); 100 is added as the last step.
    #[serde(default = "default_steps")]
    #[schemars(length(min = 1, max = 20))]
    #[schemars(extend("items" = {"type": "integer", "format": "int64", "minimum": 0}))]
    pub steps: Vec<u32>,
    /// How long each step is held before it is judged.
    #[serde(default = "default_step_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    #[schemars(extend("format" = "int64"))]
    pub step_seconds: u32,
    /// Fewest canary reconciles in a step before it is judged; a cohort of
    /// fewer objects needs each of its objects reconciled once.
    #[serde(default = "default_min_reconciles")]
    #[schemars(range(min = 1, max = 1000000))]
    #[schemars(extend("format" = "int64"))]
    pub min_reconciles: u32,
    /// Abort when the share of canary objects failing exceeds the stable
    /// plugin's share over the other objects by more than this many
    /// percentage points.
    #[serde(default = "default_max_failure_increase")]
    #[schemars(range(min = 0, max = 100))]
    #[schemars(extend("format" = "int64"))]
    pub max_failure_increase_percent: u32,
    /// Abort when the share of canary reconciles whose proposal the host
    /// refused exceeds the stable plugin's share by more than this many
    /// percentage points.
    #[serde(default = "default_max_failure_increase")]
    #[schemars(range(min = 0, max = 100))]
    #[schemars(extend("format" = "int64"))]
    pub max_rejected_increase_percent: u32,
    /// Abort when the canary's writes per reconcile exceed the stable
    /// plugin's by more than this many percent (and by more than half a
    /// write).
    #[serde(default = "default_max_writes_increase")]
    #[schemars(range(min = 0, max = 10000))]
    #[schemars(extend("format" = "int64"))]
    pub max_writes_increase_percent: u32,
    /// Abort when the canary's p99 call latency exceeds the stable
    /// plugin's by more than this many percent (and by more than 1 ms).
    #[serde(default = "default_max_latency_increase")]
    #[schemars(range(min = 0, max = 10000))]
    #[schemars(extend("format" = "int64"))]
    pub max_latency_increase_percent: u32,
    /// An object stops converging when its reconciles have left it short
    /// of converged for this long (at most half a step: a step cannot pass
    /// with its cohort stuck).
    #[serde(default = "default_stall_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    #[schemars(extend("format" = "int64"))]
    pub stall_seconds: u32,
    /// Abort when the share of canary objects that stopped converging
    /// exceeds the stable plugin's share by more than this many
    /// percentage points.
    #[serde(default = "default_max_failure_increase")]
    #[schemars(range(min = 0, max = 100))]
    #[schemars(extend("format" = "int64"))]
    pub max_stalled_increase_percent: u32,
    /// Run the stable plugin as a shadow on the canary's cohort (nothing
    /// it proposes is applied) and judge the share of differing proposals.
    #[serde(default)]
    pub shadow_stable: bool,
    /// With `shadowStable`: abort when more than this percentage of the
    /// compared proposals differ.
    #[serde(default = "default_max_failure_increase")]
    #[schemars(range(min = 0, max = 100))]
    #[schemars(extend("format" = "int64"))]
    pub max_difference_percent: u32,
    /// Hold the rollout at its step.
    #[serde(default)]
    pub paused: bool,
}

fn default_steps() -> Vec<u32> {
    vec![1, 5, 25, 100]
}

fn default_step_seconds() -> u32 {
    60
}

fn default_min_reconciles() -> u32 {
    5
}

fn default_max_failure_increase() -> u32 {
    10
}

fn default_max_writes_increase() -> u32 {
    100
}

fn default_max_latency_increase() -> u32 {
    200
}

fn default_stall_seconds() -> u32 {
    120
}

impl Default for RolloutSpec {
    fn default() -> Self {
        Self {
            steps: default_steps(),
            step_seconds: default_step_seconds(),
            min_reconciles: default_min_reconciles(),
            max_failure_increase_percent: default_max_failure_increase(),
            max_rejected_increase_percent: default_max_failure_increase(),
            max_writes_increase_percent: default_max_writes_increase(),
            max_latency_increase_percent: default_max_latency_increase(),
            stall_seconds: default_stall_seconds(),
            max_stalled_increase_percent: default_max_failure_increase(),
            shadow_stable: false,
            max_difference_percent: default_max_failure_increase(),
            paused: false,
        }
    }
}

/// A canary rollout as the last writer sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// `Progressing`, `Paused`, `Promoted` or `Aborted`.
    pub phase: String,
    /// The stable plugin's digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<String>,
    /// The canary's digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<String>,
    /// The canary's cohort now, in percent.
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub weight: u32,
    /// `step/steps`, e.g. `2/4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// What happened last, with its figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The rule that aborted it (e.g. `rollout/failure-rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The resource's generation the judge decided on (an abort holds
    /// until `spec.rollout` is edited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the step now began (RFC 3339), on the judge's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started: Option<String>,
    /// The replica that judges the steps (the holder of shard 0, else the
    /// only or leading replica); every other replica follows this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
    /// Each step judged so far, oldest first (the last 32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub history: Vec<RolloutStepRecord>,
    /// The `jinghzhu.io/rollout-action` annotation last acted on, or
    /// present when this rollout began: never acted on (again) for it, by
    /// any replica, after a restart either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,
}

/// One judged step of a rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStepRecord {
    /// `step/steps`.
    pub step: String,
    /// The cohort in percent.
    #[schemars(extend("format" = "int64"))]
    pub weight: u32,
    /// `Passed`, `Empty` (its cohort held no object), `Promoted` or `Aborted`.
    pub verdict: String,
    /// When it was judged (RFC 3339).
    pub time: String,
    /// The figures the verdict was made on, for both plugins.
    pub message: String,
}

/// What one plugin did over a step on one replica (or the fleet, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutFigures {
    /// Reconciles.
    #[schemars(schema_with = "count_schema")]
    pub reconciles: u64,
    /// Objects reconciled (each once, by its latest outcome).
    #[schemars(schema_with = "count_schema")]
    pub objects: u64,
    /// Of those, the ones whose latest call failed.
    #[schemars(schema_with = "count_schema")]
    pub failed: u64,
    /// Reconciles whose proposal the host refused.
    #[schemars(schema_with = "count_schema")]
    pub rejected: u64,
    /// Reconciles whose proposal the host accepted, after each object's
    /// first in the step (a new plugin commonly rewrites each status once).
    #[schemars(schema_with = "count_schema")]
    pub accepted: u64,
    /// Writes proposed by those reconciles (creates, deletes, status).
    #[schemars(schema_with = "count_schema")]
    pub writes: u64,
    /// Objects that stopped converging (see `stallSeconds`).
    #[schemars(schema_with = "count_schema")]
    pub stalled: u64,
    /// The 99th percentile of the call latency, in microseconds (summed
    /// over replicas: the largest).
    #[schemars(schema_with = "count_schema")]
    pub p99_micros: u64,
    /// The median call latency, in microseconds (summed over replicas: the
    /// largest); judged where too few calls were made for a p99.
    #[serde(default)]
    #[schemars(schema_with = "count_schema")]
    pub p50_micros: u64,
    /// Canary proposals the stable shadow was compared with.
    #[schemars(schema_with = "count_schema")]
    pub compared: u64,
    /// Of those, the ones that differed.
    #[schemars(schema_with = "count_schema")]
    pub differed: u64,
}

impl RolloutFigures {
    /// The fleet's figures: counts added, the slowest p99 kept.
    pub fn add(&mut self, other: &RolloutFigures) {
        self.reconciles = self.reconciles.saturating_add(other.reconciles);
        self.objects = self.objects.saturating_add(other.objects);
        self.failed = self.failed.saturating_add(other.failed);
        self.rejected = self.rejected.saturating_add(other.rejected);
        self.accepted = self.accepted.saturating_add(other.accepted);
        self.writes = self.writes.saturating_add(other.writes);
        self.stalled = self.stalled.saturating_add(other.stalled);
        self.p99_micros = self.p99_micros.max(other.p99_micros);
        self.p50_micros = self.p50_micros.max(other.p50_micros);
        self.compared = self.compared.saturating_add(other.compared);
        self.differed = self.differed.saturating_add(other.differed);
    }
}

/// One replica's figures for the step of a rollout going on, which the
/// judge adds to its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRollout {
    /// The canary's digest.
    pub canary: String,
    /// The step (from 1) these figures are of.
    #[schemars(extend("format" = "int64"))]
    pub step: u32,
    /// The canary on its cohort.
    pub canary_figures: RolloutFigures,
    /// The stable plugin on the other objects.
    pub stable_figures: RolloutFigures,
}

/// The Jinghzhus a tenant plugin serves: those of `namespaces` (any when
/// empty) whose labels match `labels` (any when unset); at least one of
/// the two.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSelectorSpec {
    /// Only Jinghzhus of these namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub namespaces: Vec<String>,
    /// Only Jinghzhus with these labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
}

/// Exactly one place the bytes come from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.oci), has(self.configMap), has(self.file)].filter(x, x).size() == 1",
    "message": "set exactly one of oci, configMap or file"
}]))]
pub struct PluginSourceSpec {
    /// An OCI artifact (the CNCF Wasm layout, or a single `application/wasm`
    /// layer), by tag or digest; a tag is polled and followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSourceSpec>,
    /// A key of a ConfigMap's `binaryData` (at most 1 MiB), watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSourceSpec>,
    /// A file on the host's own filesystem (for development), watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileSourceSpec>,
}

/// An OCI reference.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciSourceSpec {
    /// `REGISTRY/REPOSITORY:TAG` or `REGISTRY/REPOSITORY@sha256:…` (an
    /// `oci://` prefix is accepted).
    #[schemars(length(min = 1, max = 1024))]
    pub reference: String,
}

/// A ConfigMap key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSourceSpec {
    /// Its namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in `binaryData` (or `data`); default `plugin.wasm`.
    #[serde(default = "default_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

fn default_key() -> String {
    "plugin.wasm".into()
}

/// A file path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSourceSpec {
    /// An absolute path on the host.
    #[schemars(length(min = 1, max = 4096))]
    pub path: String,
}

/// Trusted keys and how many of them must have signed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationSpec {
    /// The trusted public keys, each from a Secret.
    #[schemars(length(min = 1, max = 32))]
    pub keys: Vec<VerificationKeySpec>,
    /// Which of them must have signed (default: any one of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<VerificationPolicySpec>,
}

/// One trusted key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationKeySpec {
    /// Its name in the policy.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The Secret holding the PEM public key (cosign's `cosign.pub`).
    pub secret_ref: SecretKeyRef,
}

/// A key of a Secret.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Its namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in `data`; default `cosign.pub`.
    #[serde(default = "default_public_key")]
    pub key: String,
}

fn default_public_key() -> String {
    "cosign.pub".into()
}

/// Kubewarden's policy shape: every key of `allOf`, and at least
/// `minimumMatches` (default 1) of `anyOf`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationPolicySpec {
    /// Keys (by name) that must all have signed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub all_of: Vec<String>,
    /// Keys (by name) of which at least `minimumMatches` must have signed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub any_of: Vec<String>,
    /// How many of `anyOf` must match (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "minimum_matches_schema")]
    pub minimum_matches: Option<u32>,
}

/// How the host runs the plugin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PluginMode {
    /// It reconciles.
    #[default]
    Active,
    /// It runs beside the active plugin; nothing of it is applied.
    Shadow,
}

impl std::fmt::Display for PluginMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Active => "active",
            Self::Shadow => "shadow",
        })
    }
}

/// Sandbox limits asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginLimitsSpec {
    /// Most milliseconds one reconcile call may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "timeout_ms_schema")]
    pub timeout_ms: Option<u64>,
    /// Most MiB of memory one instance may grow to.
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "memory_mib_schema")]
    pub memory_mib: Option<u64>,
}

/// The pod policy a plugin needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodPolicySpec {
    /// `template` (pods are the template), `restricted` or `baseline`
    /// (plugin-written specs within that Pod Security profile), from the
    /// strictest to the loosest. One looser than the host's
    /// `--pod-policy` is clamped to it.
    #[schemars(schema_with = "pod_policy_schema")]
    pub policy: String,
}

/// What the host made of the resource.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JinghzhuPluginStatus {
    /// The `metadata.generation` the last writer acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Resolved`, `Verified`, `Compiled`, `Serving`, `Refused`, `Rollout`;
    /// a tenant's also `Namespaces`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<PluginCondition>,
    /// The digest the last writer serves (`sha256:…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `name@version` of that plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// One word: `Serving`, `Refused` (the newest bytes were refused; see
    /// `lastRefusal`; an older plugin may still serve), `Pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The limits in force after clamping to the host's flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_limits: Option<EffectiveLimits>,
    /// The last bytes refused, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refusal: Option<PluginRefusal>,
    /// What each replica serves: a rollout is visible here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "replicas_schema")]
    pub replicas: Vec<ReplicaStatus>,
    /// The canary rollout, while one goes on and after it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// The newest version of the plugin this resource has served: an older
    /// one is refused as a downgrade (unless the host allows downgrades),
    /// by every replica and after restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_served: Option<ServedVersion>,
}

/// A plugin version served.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServedVersion {
    /// The plugin's name (its `info().name`).
    pub name: String,
    /// Its version (`info().version`).
    pub version: String,
    /// The digest that served it.
    pub digest: String,
}

/// One condition (the shape of `metav1.Condition`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginCondition {
    /// `Resolved`, `Verified`, `Compiled`, `Serving` or `Refused`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase word.
    pub reason: String,
    /// A sentence for humans.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// The generation it describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Limits after clamping.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveLimits {
    /// Milliseconds per call.
    #[schemars(schema_with = "count_schema")]
    pub timeout_ms: u64,
    /// MiB per instance.
    #[serde(rename = "memoryMiB")]
    #[schemars(schema_with = "count_schema")]
    pub memory_mib: u64,
    /// The pod policy in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_policy: Option<String>,
    /// What was clamped, if anything (empty: the spec was within bounds).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub clamped: String,
}

/// A refused candidate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginRefusal {
    /// Its digest (empty when no bytes were read).
    #[serde(default)]
    pub digest: String,
    /// The rule that refused it (e.g. `plugin/digest-pin`).
    pub rule: String,
    /// Why.
    pub message: String,
    /// When (RFC 3339).
    pub time: String,
    /// The replica that refused it.
    pub replica: String,
}

/// What one replica serves.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The replica (its pod name, or its leader-election identity).
    pub name: String,
    /// The digest it serves (empty: nothing serves).
    #[serde(default)]
    pub digest: String,
    /// `name@version` of that plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// Since when (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// `Serving`, `Refused` (keeps serving `digest`), `Pending`.
    #[serde(default)]
    pub state: String,
    /// The generation it last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A tenant plugin (`spec.selector`): the Jinghzhus of this replica's
    /// cache its selector matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_selected: Option<i64>,
    /// Of those, the ones it serves (the rest go to a resource that takes
    /// precedence); for the host's default resource, the objects no tenant
    /// serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_served: Option<i64>,
    /// This replica's figures for the step of a rollout going on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<ReplicaRollout>,
}

fn digest_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "nullable": true,
        "pattern": "^sha256:[0-9a-f]{64}$",
        "description": "Only bytes with this digest may load (sha256: and 64 lower-case hex digits)."
    })
}

/// An optional integer in `min..=max`; Kubernetes knows the integer
/// formats `int32` and `int64` only, so no `uint64`.
fn bounded(min: u64, max: u64, description: &str) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "format": "int64",
        "nullable": true,
        "minimum": min,
        "maximum": max,
        "description": description
    })
}

fn timeout_ms_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    bounded(1, 600_000, "Most milliseconds one reconcile call may run.")
}

fn memory_mib_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    bounded(1, 65_536, "Most MiB of memory one instance may grow to.")
}

fn minimum_matches_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    bounded(
        1,
        32,
        "How many keys of anyOf must have signed (default 1).",
    )
}

fn count_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer", "format": "int64", "minimum": 0 })
}

fn pod_policy_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["template", "restricted", "baseline"],
        "description": "template, restricted or baseline (strictest first)."
    })
}

fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut items = generator.subschema_for::<PluginCondition>();
    inline(generator, &mut items);
    schemars::json_schema!({
        "type": "array",
        "maxItems": 16,
        "items": items,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"]
    })
}

/// `status.replicas`: a map list keyed by `name` (each replica applies its
/// own entry), at most 256 entries.
pub(crate) fn replicas_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut items = generator.subschema_for::<ReplicaStatus>();
    inline(generator, &mut items);
    schemars::json_schema!({
        "type": "array",
        "maxItems": 256,
        "items": items,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"]
    })
}

/// Replaces a `$ref` by the definition it names (a CRD schema has no refs).
fn inline(generator: &schemars::SchemaGenerator, schema: &mut schemars::Schema) {
    let Some(reference) = schema.get("$ref").and_then(|r| r.as_str()) else {
        return;
    };
    let name = reference.rsplit('/').next().unwrap_or_default().to_string();
    if let Some(definition) = generator.definitions().get(&name) {
        *schema = schemars::Schema::try_from(definition.clone()).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configmap_resource_reads_with_defaults() {
        let spec: JinghzhuPluginSpec = serde_json::from_value(serde_json::json!({
            "source": {"configMap": {"namespace": "ops", "name": "plugin"}}
        }))
        .expect("spec");
        let cm = spec.source.config_map.expect("configMap");
        assert_eq!(cm.key, "plugin.wasm");
        assert_eq!(spec.mode, PluginMode::Active);
        assert!(spec.digest.is_none());
    }

    #[test]
    fn status_lists_are_map_lists_for_server_side_apply() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(JinghzhuPlugin::crd()).expect("crd");
        let status =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        let replicas = &status["properties"]["replicas"];
        assert_eq!(replicas["x-kubernetes-list-type"], "map");
        assert_eq!(replicas["x-kubernetes-list-map-keys"][0], "name");
        assert_eq!(replicas["items"]["properties"]["name"]["type"], "string");
        let conditions = &status["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-map-keys"][0], "type");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let source = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["source"];
        assert!(
            source["x-kubernetes-validations"][0]["rule"]
                .as_str()
                .is_some_and(|r| r.contains("size() == 1")),
            "{source}"
        );
    }
}
