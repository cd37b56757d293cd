//! The `PluginController` custom resource (`wasm-operator.io/v1alpha1`,
//! cluster-scoped): one controller of any kind, declared. It names the
//! parent kind the plugin reconciles, the child kinds it may own, where
//! the plugin's bytes come from, and the limits it runs in; its status says
//! what the host made of it. The host that reads it lives in `declared/`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::plugin::{
    PluginCondition, PluginLimitsSpec, PluginRefusal, PluginSourceSpec, PodPolicySpec,
    ReplicaStatus, RolloutSpec, RolloutStatus, VerificationSpec,
};

/// The annotation by which a person promotes or aborts a controller's
/// canary: `promote sha256:…` or `abort sha256:…` (the canary's digest, so
/// a decision never applies to a later canary).
pub const ROLLOUT_ACTION_ANNOTATION: &str = "wasm-operator.io/rollout-action";

/// Most child kinds one controller declares.
pub const MAX_CHILD_KINDS: usize = 16;
/// Default most children of one kind a parent may have.
pub const DEFAULT_MAX_CHILDREN: u32 = 16;
/// Default most bytes of one child's body as the plugin gives it.
pub const DEFAULT_MAX_CHILD_BYTES: u32 = 64 * 1024;

/// A controller whose reconcile logic is a contract 0.3 plugin.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "wasm-operator.io",
    version = "v1alpha1",
    kind = "PluginController",
    plural = "plugincontrollers",
    shortname = "pctl",
    status = "PluginControllerStatus",
    printcolumn = r#"{"name":"Parent","type":"string","jsonPath":".spec.parent.kind"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Plugin","type":"string","jsonPath":".status.plugin"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PluginControllerSpec {
    /// The kind reconciled: a namespaced kind, usually a custom resource.
    pub parent: KindRef,
    /// The kinds the plugin may create, update and delete as children of a
    /// parent (in the parent's namespace, controlled by it). Cluster-scoped
    /// kinds are never allowed; RBAC, admission webhooks, CRDs and Secrets
    /// only when the host's `--allow-child-kind` names them.
    #[schemars(length(max = 16))]
    #[serde(default)]
    pub children: Vec<ChildKindSpec>,
    /// Kinds the plugin reads but never writes: objects controlled by one of
    /// the parent's children through the chain `through` names (the Pods
    /// of a child Deployment, through their ReplicaSets). Listed in the
    /// input after the children, metadata only.
    #[schemars(length(max = 4))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observe: Vec<ObservedKindSpec>,
    /// Where the component's bytes come from: exactly one of `oci`,
    /// `configMap` or `file`.
    pub source: PluginSourceSpec,
    /// Only bytes with this digest may load (`sha256:` and 64 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Signatures the bytes must carry (OCI sources only), as a
    /// `JinghzhuPlugin`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationSpec>,
    /// Sandbox limits; the host's flags are the upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PluginLimitsSpec>,
    /// The pod policy every pod template in a child is held to, within
    /// what the host allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_policy: Option<PodPolicySpec>,
    /// How a new plugin reaches the parents: as a canary on a growing
    /// cohort, each step judged against the stable plugin (absent: each
    /// new plugin serves every parent at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
    /// Serve the parents of some namespaces in place of another
    /// controller of the same parent kind (its *base*): only namespaces an
    /// admin labelled [`TENANT_LABEL_PREFIX`]`<base>=<this name>`, within
    /// the base's child kinds, bounds, limits and pod policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantSpec>,
    /// The writes all its reconciles together may make (absent: 200 per
    /// second, bursts of 5000); each namespace gets a fair share of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_budget: Option<WriteBudgetSpec>,
    /// A plugin run beside the serving one on the same input, after it and
    /// off the write path: its output is checked by the same rules and
    /// compared with the serving plugin's, never applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowSpec>,
    /// Fields of the parent's status the host checks against what it
    /// observed before it writes a status: the names or the number of the
    /// objects of a child or observed kind the plugin was given. A status
    /// that says otherwise is refused whole (`status/observed-fields`).
    /// `status.observedGeneration` is always checked.
    #[schemars(length(max = 16))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checked_status: Vec<CheckedStatusSpec>,
}

/// The prefix of the Namespace label by which an admin opts a namespace in
/// to a tenant controller: `tenant.wasm-operator.io/<base>=<tenant>`.
pub const TENANT_LABEL_PREFIX: &str = "tenant.wasm-operator.io/";

/// A controller serving some namespaces in place of its base.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// The `PluginController` it specialises (same parent kind).
    #[schemars(length(min = 1, max = 63))]
    pub of: String,
    /// The namespaces it asks to serve; it serves those labelled for it.
    #[schemars(length(min = 1, max = 64))]
    pub namespaces: Vec<String>,
}

/// A write budget: a token bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteBudgetSpec {
    /// Writes per second once the burst is spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100_000))]
    pub per_second: Option<u32>,
    /// Writes at once (the bucket's size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub burst: Option<u32>,
}

/// Which of its namespaces a tenant serves.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// Asked for and labelled for it: served by this controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serving: Vec<String>,
    /// Asked for but not labelled for it: left to the base.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// The rule the refused namespaces break.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What to do about them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Most shadow calls that may wait for the shadow plugin by default.
pub const DEFAULT_SHADOW_QUEUE: u32 = 8;

/// A shadow plugin: where its bytes come from and how they are trusted, as
/// `spec.source`, `spec.digest` and `spec.verification` say for the
/// serving plugin. The limits and pod policy are the resource's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowSpec {
    /// Exactly one of `oci`, `configMap` or `file`.
    pub source: PluginSourceSpec,
    /// Only bytes with this digest may load (`sha256:` and 64 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Signatures the bytes must carry (OCI sources only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationSpec>,
    /// Shadow calls that may wait (default 8); more are dropped and counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub queue: Option<u32>,
}

impl ShadowSpec {
    /// Shadow calls that may wait.
    pub fn queue(&self) -> usize {
        self.queue.unwrap_or(DEFAULT_SHADOW_QUEUE).clamp(1, 1024) as usize
    }
}

/// One status field the host checks: exactly one of `namesOf`, `countOf`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckedStatusSpec {
    /// Its path under `status`, keys joined by dots (`nodes`,
    /// `children.deployments`).
    #[schemars(length(min = 1, max = 253))]
    pub field: String,
    /// The field is a list of the names of the objects of this kind (a
    /// declared child or observed kind) the parent's reconcile was given,
    /// each once, in any order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names_of: Option<KindRef>,
    /// The field is the number of those objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_of: Option<KindRef>,
    /// Count terminating objects too (default: those with a
    /// `deletionTimestamp` are left out).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_terminating: bool,
}

/// A kind by its API version and name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `GROUP/VERSION`, or `v1` for the core group.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    /// The kind, e.g. `Memcached`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

impl KindRef {
    /// `(group, version)`: the group is empty for the core group.
    pub fn group_version(&self) -> (&str, &str) {
        match self.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", self.api_version.as_str()),
        }
    }
}

impl std::fmt::Display for KindRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// One child kind and its bounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildKindSpec {
    /// `GROUP/VERSION`, or `v1` for the core group.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    /// The kind, e.g. `Deployment`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Most children of this kind one parent may have (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub max_count: Option<u32>,
    /// Most bytes of one child's body (default 64 KiB, at most 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_048_576))]
    pub max_bytes: Option<u32>,
}

impl ChildKindSpec {
    /// The kind alone.
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
        }
    }

    /// Most children of this kind per parent.
    pub fn max_count(&self) -> u32 {
        self.max_count.unwrap_or(DEFAULT_MAX_CHILDREN)
    }

    /// Most bytes of one child's body.
    pub fn max_bytes(&self) -> u32 {
        self.max_bytes
            .unwrap_or(DEFAULT_MAX_CHILD_BYTES)
            .min(1_048_576)
    }
}

/// A kind the plugin reads, reached from a child through a chain of
/// controllers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedKindSpec {
    /// `GROUP/VERSION`, or `v1` for the core group.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    /// The kind, e.g. `Pod`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// The kinds between a child and these objects, from the child down
    /// (`[apps/v1 ReplicaSet]` for a Deployment's Pods); empty: objects a
    /// child controls directly.
    #[schemars(length(max = 3))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub through: Vec<KindRef>,
}

impl ObservedKindSpec {
    /// The kind alone.
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
        }
    }
}

/// What the host made of the resource.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginControllerStatus {
    /// The `metadata.generation` acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Resolving`, `Serving` or `Refused`.
    #[serde(default)]
    pub state: String,
    /// The plugin serving, `name@version (sha256:…)`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plugin: String,
    /// Its digest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// The resources watched: the parent's first, then each child kind's
    /// (`plural.group/version`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// `Serving` and `Refused`, as `metav1.Condition`s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PluginCondition>,
    /// The last candidate or declaration refused, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refusal: Option<PluginRefusal>,
    /// The canary rollout going on or last decided (with `spec.rollout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// A tenant's namespaces (with `spec.tenant`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantStatus>,
    /// The shadow plugin and how its outputs compared (with `spec.shadow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStatus>,
    /// Sharded (`--shards`) with `spec.rollout`: each replica's entry, the
    /// plugin it serves and its figures for the canary's step, written by
    /// that replica alone (its own field manager); the holder of shard 0
    /// judges the canary on their sum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::plugin::replicas_schema")]
    pub replicas: Vec<ReplicaStatus>,
}

/// A shadow plugin's figures: counted by the replica that runs the
/// controller since the shadow started there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// The shadow, `name@version (sha256:…)` (empty while none runs).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plugin: String,
    /// Its digest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// When it started (RFC 3339): the counts are since then.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub since: String,
    /// Calls made (agreed + differed + refused + failed).
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub calls: u64,
    /// Outputs equal to the serving plugin's.
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub agreed: u64,
    /// Outputs that differ from the serving plugin's.
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub differed: u64,
    /// Outputs a host rule refused (not compared).
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub refused: u64,
    /// Calls that failed (trap, deadline, error returned).
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub failed: u64,
    /// Calls not made: the shadow's queue was full.
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub dropped: u64,
    /// The last difference, in short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_difference: Option<ShadowFinding>,
    /// The last output refused, with its rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refused: Option<ShadowFinding>,
    /// The last shadow artifact refused (digest pin, signature, contract…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refusal: Option<PluginRefusal>,
}

/// One call of the shadow worth showing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowFinding {
    /// The parent, `namespace/name`.
    pub object: String,
    /// The rule that refused the output (refusals only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What differed, or why it was refused (escaped, bounded).
    pub message: String,
    /// When (RFC 3339).
    pub time: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn a_declaration_reads_with_defaults() {
        let spec: PluginControllerSpec = serde_json::from_value(serde_json::json!({
            "parent": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached"},
            "children": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "source": {"file": {"path": "/plugins/memcached.wasm"}}
        }))
        .expect("spec");
        assert_eq!(
            spec.parent.group_version(),
            ("cache.example.com", "v1alpha1")
        );
        assert_eq!(spec.children[0].max_count(), DEFAULT_MAX_CHILDREN);
        assert_eq!(spec.children[0].max_bytes(), DEFAULT_MAX_CHILD_BYTES);
        let core = KindRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        assert_eq!(core.group_version(), ("", "v1"));
        assert_eq!(core.to_string(), "v1/ConfigMap");
    }

    #[test]
    fn the_crd_is_cluster_scoped_with_a_status() {
        let crd = serde_json::to_value(PluginController::crd()).expect("crd");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(
            crd["metadata"]["name"],
            "plugincontrollers.wasm-operator.io"
        );
        let version = &crd["spec"]["versions"][0];
        assert!(version["subresources"]["status"].is_object());
        assert_eq!(
            version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["children"]["maxItems"],
            16
        );
        // Each replica applies its own entry: a map list keyed by name, bounded.
        let replicas =
            &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["replicas"];
        assert_eq!(replicas["x-kubernetes-list-type"], "map");
        assert_eq!(replicas["x-kubernetes-list-map-keys"][0], "name");
        assert_eq!(replicas["maxItems"], 256);
    }
}
