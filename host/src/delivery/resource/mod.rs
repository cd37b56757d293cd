//! The `JinghzhuPlugin` resource as the host's plugin source: the host
//! named with `--plugin-resource NAME` watches that one cluster-scoped
//! object, takes the plugin bytes from the source its spec names, and
//! reports what it made of them in the object's status and Events.
//!
//! What it may import: the rest of `delivery/` (vetting, the swap history), `slot/`,
//! `shards/` (the live members, for pruning `status.replicas`),
//! `telemetry/`, `runtime/`, `apply/` (the pod-policy order) and `crd`.
//! `run.rs` starts it; nothing below imports it.
//!
//! How a spec becomes a served plugin ([`Driver`], one per resource):
//! 1. **Resolve**: read the bytes from `spec.source` (a ConfigMap key or a
//!    file, both watched, or an OCI reference); a new source replaces the
//!    old one, a change of the bytes is a new candidate. `Resolved`. A file
//!    must be a regular file under `--plugin-file-root` within the cap
//!    (`file/*` rules). An OCI source is pulled and polled in a task of its
//!    own: the driver never waits for a registry, so a spec change is seen
//!    at once, and replacing the source aborts that task, a pull in flight
//!    with it.
//! 2. **Verify**: the `spec.digest` pin; signatures for OCI sources
//!    (`spec.verification`, its keys read from Secrets again every poll
//!    interval: [`keys`]; a ConfigMap or file carries none, so asking for
//!    verification of one is refused). `Verified`.
//! 3. **Compile** and smoke-reconcile ([`crate::delivery::vetting::vet`]),
//!    then narrow the limits to `spec.limits` clamped by the host's flags.
//!    `Compiled`.
//! 4. **Serve**: swap it into the active slot (the existing vet → switch →
//!    rollback path: a plugin failing after the swap is rolled back and the
//!    replica's entry shows the digest served again), or make it the shadow
//!    for a resource named by `--shadow-plugin-resource`. `Serving`. The
//!    active resource's source is damped ([`crate::delivery::damper`]): a
//!    source that keeps moving within `--min-swap-interval-secs` is held
//!    (`Flapping`, rule `swap/flapping`); a spec edit is not held. With
//!    `spec.rollout` a new plugin is a canary instead ([`rollout`]).
//!
//! Before anything serves, the fleet's decisions are read from the status:
//! the rollout going on or aborted, and the newest version served (an
//! older one is a downgrade); a replica that restarts restores what the
//! fleet serves from its precompiled cache.
//!
//! Any refusal leaves what serves serving, sets `Refused` (reason: the
//! rule), `lastRefusal`, a `PluginRefused` Warning Event on the resource
//! naming the rule, and the usual log line, counter and `/status` entry.

/// Every replica writes the resource's status as this field manager
/// followed by its name.
pub const FIELD_MANAGER_PREFIX: &str = "wasm-operator/";

pub mod fleet;
pub mod keys;
pub mod opener;
pub mod prune;
pub mod rollout;
pub mod rollout_cli;
pub mod status;
pub mod tenants;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc;

use crate::apply::policy::PodPolicy;
use crate::crd::plugin::{
    EffectiveLimits, JinghzhuPlugin, JinghzhuPluginSpec, PluginMode, PluginSourceSpec,
};
use crate::delivery::damper;
use crate::delivery::setup::Plugins;
use crate::delivery::sources::Candidate;
use crate::delivery::swapper::{self, Refused, SwapHistory};
use crate::delivery::vetting::{vet, vet_for_slot};
use crate::refusal::Refusal;
use crate::registry::OciOptions;
use crate::registry::bounded::FileRules;
use crate::runtime::{LoadedPlugin, Runtime, digest_of};
use crate::slot::router::{OBJECT_COUNT_INTERVAL, PluginRouter};
use crate::slot::served::Served;
use crate::slot::{ActivePlugin, RollbackPolicy};
use crate::tasks::AbortOnDrop;
use crate::telemetry::metrics::Metrics;
use opener::{Opened, SourceOpener};
use status::{ResourceReport, StatusOut, StatusWriter};

/// How the host picks its resources.
#[derive(Debug, Clone)]
pub struct ResourceOptions {
    /// The active plugin's resource (`--plugin-resource`).
    pub name: String,
    /// A shadow candidate's resource (`--shadow-plugin-resource`).
    pub shadow: Option<String>,
    /// This replica's name in the status (its pod name or Lease identity).
    pub replica: String,
    /// Shadow calls that may wait in the shadow's queue.
    pub shadow_queue: usize,
    /// When to roll back after a swap.
    pub rollback: RollbackPolicy,
    /// The host's `--pod-policy`: a resource may ask for a stricter one only.
    pub pod_policy: PodPolicy,
    /// How OCI sources are reached (the `--oci-*` flags; their
    /// `--plugin-verify-*` policy applies to resources without
    /// `spec.verification`), and how often a tag is polled.
    pub oci: Option<(OciOptions, Duration)>,
    /// Where a file source may be and how big (`--plugin-file-*`).
    pub files: FileRules,
    /// With host keys, whether a source that carries no signature (a
    /// ConfigMap, a file) may serve (`--plugin-resource-allow-unsigned`).
    pub allow_unsigned: bool,
    /// Whether this replica judges canary rollouts ([`fleet`]).
    pub judge: fleet::RolloutJudge,
    /// With `--tenant-plugins`, the router once it exists: the active
    /// resource's entry then counts the objects no tenant serves.
    pub router: Arc<OnceLock<Arc<PluginRouter>>>,
}

/// The pod policy `spec.podPolicy` asks for, if any (the CRD's schema
/// admits only the three names).
fn asked_pod_policy(spec: &JinghzhuPluginSpec) -> Option<PodPolicy> {
    spec.pod_policy.as_ref().map(pod_policy_of)
}

/// The pod policy a resource's `spec.podPolicy` names (the CRDs' schemas
/// admit only the three names).
pub fn pod_policy_of(asked: &crate::crd::plugin::PodPolicySpec) -> PodPolicy {
    match asked.policy.as_str() {
        "template" => PodPolicy::Template,
        "restricted" => PodPolicy::Restricted,
        _ => PodPolicy::Baseline,
    }
}

/// `spec.limits` and `spec.podPolicy` clamped to the host's flags (a
/// stricter pod policy is kept: the plugin is held to it).
pub fn effective_limits(
    spec: &JinghzhuPluginSpec,
    host_deadline: Duration,
    host_memory: u64,
    host_policy: PodPolicy,
) -> EffectiveLimits {
    let host_ms = u64::try_from(host_deadline.as_millis()).unwrap_or(u64::MAX);
    let host_mib = host_memory / (1024 * 1024);
    let mut clamped = Vec::new();
    let limits = spec.limits.clone().unwrap_or_default();
    let timeout_ms = match limits.timeout_ms {
        Some(asked) if asked > host_ms => {
            clamped.push(format!(
                "timeoutMs {asked} > the host's --plugin-timeout-ms {host_ms}"
            ));
            host_ms
        }
        Some(asked) => asked,
        None => host_ms,
    };
    let memory_mib = match limits.memory_mib {
        Some(asked) if asked > host_mib => {
            clamped.push(format!(
                "memoryMiB {asked} > the host's --plugin-memory-mib {host_mib}"
            ));
            host_mib
        }
        Some(asked) => asked,
        None => host_mib,
    };
    let pod_policy = asked_pod_policy(spec).map(|wanted| {
        if wanted.is_looser_than(host_policy) {
            clamped.push(format!(
                "podPolicy {wanted} is looser than the host's --pod-policy {host_policy}"
            ));
        }
        wanted.stricter_of(host_policy).to_string()
    });
    EffectiveLimits {
        timeout_ms,
        memory_mib,
        pod_policy,
        clamped: clamped.join("; "),
    }
}

/// Checks the JinghzhuPlugin API is served and readable; errors say what to do.
pub async fn check_access(client: &Client, name: &str) -> Result<()> {
    let api: Api<JinghzhuPlugin> = Api::all(client.clone());
    match api.get_opt(name).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => bail!(
            "the JinghzhuPlugin CRD is not installed: run `wasm-operator crd | kubectl apply -f -` \
             (or `kubectl apply -f examples/crd.yaml`)"
        ),
        Err(kube::Error::Api(status)) if status.code == 403 => bail!(
            "this host's account may not read JinghzhuPlugins ({}): bind it to the ClusterRole in \
             examples/deploy/rbac.yaml",
            status.message
        ),
        Err(err) => bail!("reading the JinghzhuPlugin {name}: {err}"),
    }
}

/// Checks JinghzhuPlugins can be listed (`--tenant-plugins` follows them
/// all); errors say what to do.
pub async fn check_tenant_access(client: &Client) -> Result<()> {
    let api: Api<JinghzhuPlugin> = Api::all(client.clone());
    match api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => bail!(
            "--tenant-plugins needs the JinghzhuPlugin CRD: run `wasm-operator crd | kubectl apply -f -` \
             (or `kubectl apply -f examples/crd.yaml`)"
        ),
        Err(kube::Error::Api(status)) if status.code == 403 => bail!(
            "--tenant-plugins: this host's account may not list JinghzhuPlugins ({}): bind it to the \
             ClusterRole in examples/deploy/rbac.yaml",
            status.message
        ),
        Err(err) => bail!("listing JinghzhuPlugins for --tenant-plugins: {err}"),
    }
}

/// Starts the drivers of the active resource (and the shadow's): the slot
/// starts empty and the first good plugin the resource names serves.
pub async fn start(
    client: &Client,
    runtime: Arc<Runtime>,
    options: ResourceOptions,
    metrics: Arc<Metrics>,
) -> Result<Plugins> {
    check_access(client, &options.name).await?;
    if let Some(shadow) = &options.shadow {
        check_access(client, shadow).await?;
    }
    let history = Arc::new(Mutex::new(SwapHistory::default()));
    swapper::lock(&history).not_serving = Some(format!(
        "waiting for a plugin from the JinghzhuPlugin {}",
        options.name
    ));
    let active = Arc::new(ActivePlugin::empty(
        options.rollback.clone(),
        metrics.clone(),
    ));
    let roles = std::iter::once((options.name.clone(), PluginMode::Active)).chain(
        options
            .shadow
            .clone()
            .map(|name| (name, PluginMode::Shadow)),
    );
    for (name, role) in roles {
        let mut driver = Driver::new(
            client,
            &runtime,
            &options,
            (active.clone(), history.clone()),
            &metrics,
            (name, role),
        );
        if role == PluginMode::Active {
            driver.default_counting = Some(options.router.clone());
        }
        tokio::spawn(driver.run());
    }
    Ok(Plugins { active, history })
}

/// The bytes source a spec names, for telling a new source from an edit.
pub fn source_label(source: &PluginSourceSpec) -> String {
    if let Some(oci) = &source.oci {
        return oci.reference.clone();
    }
    if let Some(cm) = &source.config_map {
        return format!("configmap:{}/{}#{}", cm.namespace, cm.name, cm.key);
    }
    if let Some(file) = &source.file {
        return format!("file:{}", file.path);
    }
    String::new()
}

/// Follows one resource: its spec, its source's bytes, and the slot.
pub struct Driver {
    client: Client,
    runtime: Arc<Runtime>,
    active: Arc<ActivePlugin>,
    history: Arc<Mutex<SwapHistory>>,
    metrics: Arc<Metrics>,
    role: PluginMode,
    name: String,
    writer: StatusWriter,
    shadow_queue: usize,
    pod_policy: PodPolicy,
    /// Reads and watches the resource's source.
    opener: SourceOpener,
    /// The keys that verified the newest OCI artifact.
    verified_by: Vec<String>,
    /// A tenant's driver: the router counting its objects, for its entry.
    counting: Option<Arc<PluginRouter>>,
    /// The active resource's driver: the router (once there is one)
    /// counting the objects no tenant serves.
    default_counting: Option<Arc<OnceLock<Arc<PluginRouter>>>>,
    /// The last `jinghzhu.io/rollout-action` acted on.
    last_rollout_action: Option<String>,
    /// Whether this replica judges rollouts.
    judge: fleet::RolloutJudge,
    /// The resource as last seen (status included): the judge's decisions
    /// and the other replicas' figures.
    last_seen: Option<Arc<JinghzhuPlugin>>,
    /// The judged steps of the rollout (the judge's).
    rollout_history: Vec<crate::crd::plugin::RolloutStepRecord>,
    /// When this replica's figures were last written.
    figures_written: Option<Instant>,
    /// When this replica last tried again to write an entry left out.
    entry_retried: Option<Instant>,
    /// The cluster's Jinghzhus as last counted, and when (the judge's).
    fleet_objects: Option<(u64, Instant)>,
    /// Entries whose figures the judge left out, reported already.
    ignored_reported: std::collections::HashSet<(String, fleet::Ignored)>,
    /// When the judge last looked for entries no replica wrote.
    planted_checked: Option<Instant>,
    /// The plugin the damper held when the `Flapping` condition was last
    /// written (`None`: not flapping).
    flap_reported: Option<String>,
}

/// The spec being served and the newest bytes of its source.
struct Current {
    resource: Arc<JinghzhuPlugin>,
    source: String,
    bytes: Option<(Vec<u8>, String)>,
    content: Option<mpsc::Receiver<Candidate>>,
    /// The source's own task (an OCI source's pulls), stopped with it.
    _task: Option<AbortOnDrop>,
}

impl Driver {
    /// A driver for the resource `name` in `role`, swapping into `slot`
    /// (with its swap history).
    pub fn new(
        client: &Client,
        runtime: &Arc<Runtime>,
        options: &ResourceOptions,
        (active, history): (Arc<ActivePlugin>, Arc<Mutex<SwapHistory>>),
        metrics: &Arc<Metrics>,
        (name, role): (String, PluginMode),
    ) -> Self {
        let mut writer = StatusWriter::new(client.clone(), &name, &options.replica);
        writer.set_judge(options.judge.clone());
        Self {
            client: client.clone(),
            runtime: runtime.clone(),
            active,
            history,
            metrics: metrics.clone(),
            role,
            writer,
            name,
            shadow_queue: options.shadow_queue,
            pod_policy: options.pod_policy,
            opener: SourceOpener::new(client, options.oci.clone(), options.files.clone())
                .allowing_unsigned(options.allow_unsigned),
            verified_by: Vec::new(),
            counting: None,
            default_counting: None,
            last_rollout_action: None,
            judge: options.judge.clone(),
            last_seen: None,
            rollout_history: Vec::new(),
            figures_written: None,
            entry_retried: None,
            fleet_objects: None,
            ignored_reported: std::collections::HashSet::new(),
            planted_checked: None,
            flap_reported: None,
        }
    }

    /// Limits the Secrets this (tenant's) resource's verification keys may
    /// name.
    pub fn limit_key_secrets(&mut self, allowed: keys::AllowedKeySecrets) {
        self.opener.limit_key_secrets(allowed);
    }

    /// The same driver writing its status and Events to `out` (a record,
    /// for a test without a cluster) instead of the cluster.
    pub fn writing_to(mut self, out: Arc<dyn StatusOut>) -> Self {
        let mut writer = StatusWriter::with_out(out, &self.name, self.writer.replica());
        writer.set_judge(self.judge.clone());
        self.writer = writer;
        self
    }

    /// New bytes from `resource`'s source, labelled `from`: verified,
    /// vetted, then served or refused (what [`Driver::run`] does with each
    /// the source delivers).
    pub async fn offer_bytes(&mut self, resource: &JinghzhuPlugin, bytes: Vec<u8>, from: &str) {
        self.writer.observe(resource.metadata.generation);
        self.on_bytes(resource, bytes, from, Instant::now()).await;
    }

    /// Runs until the host stops.
    pub async fn run(mut self) {
        let api: Api<JinghzhuPlugin> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let mut resources = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        let mut swaps = self.active.swaps().boxed();
        let mut current: Option<Current> = None;
        let mut count_ticks = tokio::time::interval(OBJECT_COUNT_INTERVAL);
        let mut rollout_ticks = tokio::time::interval(rollout::ROLLOUT_TICK);
        loop {
            let content = async {
                match current.as_mut().and_then(|c| c.content.as_mut()) {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                item = resources.next() => {
                    let Some(item) = item else { break };
                    let resource = match item {
                        Ok(resource) => Arc::new(resource),
                        Err(err) => {
                            tracing::warn!(resource = %self.name, error = %err, "JinghzhuPlugin watch error; retrying");
                            continue;
                        }
                    };
                    // A rollout action is an annotation: no new generation;
                    // the judge's decisions are in the status.
                    self.note_fleet_newest(&resource);
                    self.rollout().on_action(&resource).await;
                    self.rollout().follow_judge(&resource).await;
                    // A status write or a relist: the same object at the same generation.
                    let seen = |r: &JinghzhuPlugin| (r.metadata.uid.clone(), r.metadata.generation);
                    if current.as_ref().is_some_and(|c| seen(&c.resource) == seen(&resource)) {
                        continue;
                    }
                    self.on_spec(resource, &mut current).await;
                }
                candidate = content => {
                    match candidate {
                        Some(candidate) if candidate.refusal.is_some() => {
                            if let (Some(c), Some(refusal)) = (current.as_ref(), candidate.refusal) {
                                let resource = c.resource.clone();
                                self.refuse(&resource, &refusal.digest, refusal.refusal.clone(), candidate.seen_at).await;
                            }
                        }
                        Some(candidate) => {
                            if let Some(c) = current.as_mut() {
                                if !candidate.verified_by.is_empty() {
                                    self.verified_by = candidate.verified_by.clone();
                                }
                                c.bytes = Some((candidate.bytes.clone(), candidate.source.clone()));
                                let resource = c.resource.clone();
                                self.on_bytes(&resource, candidate.bytes, &candidate.source, candidate.seen_at).await;
                            }
                        }
                        None => if let Some(c) = current.as_mut() { c.content = None },
                    }
                }
                _ = count_ticks.tick(), if self.counts_objects() => self.report_objects().await,
                _ = rollout_ticks.tick(), if self.role == PluginMode::Active => {
                    self.rollout().on_tick(current.as_ref().map(|c| c.resource.clone())).await;
                }
                Some(()) = swaps.next(), if self.role == PluginMode::Active => {
                    // A swap, or a rollback: the entry shows what serves now.
                    self.report_serving();
                    self.writer.write().await;
                }
            }
        }
    }

    /// This driver's side of its resource's rollout.
    fn rollout(&mut self) -> rollout::RolloutSide<'_> {
        rollout::RolloutSide { driver: self }
    }

    /// Whether this driver's entry counts objects: a tenant's, or the
    /// active resource's with tenants.
    fn counts_objects(&self) -> bool {
        self.counting.is_some() || self.default_counting.is_some()
    }

    /// A tenant's entry shows the objects it selects and serves on this
    /// replica, the active resource's (with tenants) the objects no tenant
    /// serves; written when the count changed.
    async fn report_objects(&mut self) {
        let counted = match (&self.counting, &self.default_counting) {
            (Some(router), _) => router.counts(Some(&self.name)),
            (None, Some(router)) => router.get().and_then(|router| router.counts(None)),
            (None, None) => None,
        };
        if let Some(objects) = counted
            && self.writer.set_objects(objects)
        {
            self.writer.write().await;
        }
    }

    /// A new generation of the spec.
    async fn on_spec(&mut self, resource: Arc<JinghzhuPlugin>, current: &mut Option<Current>) {
        self.writer.observe(resource.metadata.generation);
        self.writer.forget_written();
        // The resource's pod policy holds every plugin it serves (stable,
        // canary, shadow), from this spec on, whatever becomes of its bytes.
        self.active.narrow_pod_policy(
            self.role,
            asked_pod_policy(&resource.spec).map(|asked| asked.stricter_of(self.pod_policy)),
        );
        // An edit of spec.rollout is the explicit retry of an aborted canary.
        if current
            .as_ref()
            .is_some_and(|c| c.resource.spec.rollout != resource.spec.rollout)
        {
            self.active.canary().retry_aborted();
        }
        let spec = &resource.spec;
        let label = source_label(&spec.source);
        // An OCI puller carries its signature policy: new keys, new source.
        let key = match &spec.source.oci {
            Some(_) => format!(
                "{label} {}",
                serde_json::to_string(&spec.verification).unwrap_or_default()
            ),
            None => label.clone(),
        };
        let seen_at = Instant::now();
        if spec.mode != self.role {
            let flag = match self.role {
                PluginMode::Active => "--plugin-resource",
                PluginMode::Shadow => "--shadow-plugin-resource",
            };
            let refusal = Refusal::new(
                "resource/mode",
                format!(
                    "spec.mode is {}, but this host runs it as its {} plugin ({flag}); \
                     set spec.mode: {} or name it with the other flag",
                    spec.mode, self.role, self.role
                ),
            );
            *current = Some(Current {
                resource: resource.clone(),
                source: key,
                bytes: None,
                content: None,
                _task: None,
            });
            self.refuse(&resource, "", refusal, seen_at).await;
            return;
        }
        let same_source = current
            .as_ref()
            .is_some_and(|c| c.source == key && c.content.is_some());
        if same_source && let Some(c) = current.as_mut() {
            // Same bytes source, another pin, limits or mode: vet again.
            c.resource = resource.clone();
            if let Some((bytes, from)) = c.bytes.clone() {
                self.on_bytes(&resource, bytes, &from, seen_at).await;
            } else {
                self.writer.write().await;
            }
            return;
        }
        let (tx, rx) = mpsc::channel(4);
        let first = self
            .opener
            .open(&spec.source, spec.verification.as_ref(), tx)
            .await;
        let rx = self.damped(rx, &first);
        let mut next = Current {
            resource: resource.clone(),
            source: key,
            bytes: None,
            content: None,
            _task: None,
        };
        // The one being replaced stops now (its task, a pull in flight with it).
        *current = None;
        match first {
            Ok(Opened::Pulling(task)) => {
                next.content = Some(rx);
                next._task = Some(AbortOnDrop::new(task));
                *current = Some(next);
                self.writer.set(
                    "Resolved",
                    false,
                    "Pulling",
                    &format!("{label}: pulling (each request within --oci-request-timeout, the pull within --oci-pull-timeout)"),
                );
                self.writer.set_state(self.state_now());
                self.writer.write().await;
            }
            Ok(Opened::Bytes(bytes)) => {
                next.content = Some(rx);
                next.bytes = Some((bytes.clone(), label.clone()));
                *current = Some(next);
                self.on_bytes(&resource, bytes, &label, seen_at).await;
            }
            Ok(Opened::Missing(why)) => {
                next.content = Some(rx);
                *current = Some(next);
                self.writer
                    .set("Resolved", false, "NotFound", &format!("{label}: {why}"));
                self.writer.set_state(self.state_now());
                tracing::warn!(resource = %self.name, source = %label, reason = %why, "no plugin bytes at the source yet; watching it");
                self.writer.write().await;
            }
            Err(refusal) => {
                // An OCI source keeps polling after refusing what its tag
                // names now (a signed push may follow); other sources
                // started no watch, and their channel ends at once.
                next.content = Some(rx);
                *current = Some(next);
                self.refuse(&resource, "", refusal, seen_at).await;
            }
        }
    }

    /// The source's later candidates, damped where the source flaps when
    /// this driver serves the active plugin (see
    /// [`crate::delivery::damper`]); a shadow's swaps re-queue nothing.
    fn damped(
        &self,
        rx: mpsc::Receiver<Candidate>,
        first: &Result<Opened, Refusal>,
    ) -> mpsc::Receiver<Candidate> {
        if self.role != PluginMode::Active {
            return rx;
        }
        let last = match first {
            Ok(Opened::Bytes(bytes)) => Some(digest_of(bytes)),
            _ => None,
        };
        damper::damped(
            rx,
            damper::Damping {
                active: self.active.clone(),
                history: self.history.clone(),
                metrics: self.metrics.clone(),
                client: Some(self.client.clone()),
                // The flapping Warning goes on the resource, as refusals do.
                events_on: self
                    .last_seen
                    .as_ref()
                    .map(|resource| kube::Resource::object_ref(resource.as_ref(), &())),
            },
            last,
        )
    }

    /// New bytes for `resource`: verify, compile, serve or refuse.
    async fn on_bytes(
        &mut self,
        resource: &JinghzhuPlugin,
        bytes: Vec<u8>,
        from: &str,
        seen_at: Instant,
    ) {
        let spec = &resource.spec;
        let digest = digest_of(&bytes);
        self.writer.set(
            "Resolved",
            true,
            "Resolved",
            &format!("{from}: {digest} ({} bytes)", bytes.len()),
        );
        if !self.check_trust(resource, &digest, seen_at).await {
            return;
        }
        let pinned = spec.digest.as_deref();
        let config = self.runtime.config();
        let effective = effective_limits(
            spec,
            config.deadline,
            config.memory_limit_bytes,
            self.pod_policy,
        );
        let vetted = match self.role {
            PluginMode::Active => {
                vet_for_slot(&self.runtime, &self.active, &bytes, from, pinned).await
            }
            PluginMode::Shadow => vet(&self.runtime, &bytes, from, pinned).await,
        };
        let mut plugin = match vetted {
            Ok(plugin) => plugin,
            Err(refusal) => {
                self.refuse(resource, &digest, refusal, seen_at).await;
                self.serve_what_the_fleet_serves(resource, seen_at).await;
                return;
            }
        };
        // Fresh from the loader: this is its only holder.
        if let Some(loaded) = Arc::get_mut(&mut plugin) {
            loaded.narrow_limits(
                Duration::from_millis(effective.timeout_ms),
                effective.memory_mib.saturating_mul(1024 * 1024),
            );
        }
        let effective = EffectiveLimits {
            timeout_ms: u64::try_from(plugin.deadline().as_millis()).unwrap_or(u64::MAX),
            memory_mib: plugin.memory_limit() / (1024 * 1024),
            ..effective
        };
        if !effective.clamped.is_empty() {
            tracing::warn!(resource = %self.name, clamped = %effective.clamped, "spec.limits clamped to the host's flags");
        }
        self.writer.set(
            "Compiled",
            true,
            "Compiled",
            &format!(
                "{} compiled and passed the smoke reconcile",
                plugin.describe()
            ),
        );
        self.writer.set_effective(Some(effective));
        match self
            .rollout()
            .offer_canary(resource, &plugin, seen_at)
            .await
        {
            rollout::Offer::Serve => {
                self.writer
                    .set("Refused", false, "Accepted", &format!("{digest} accepted"));
                self.serve(plugin, from, resource, seen_at).await;
            }
            rollout::Offer::Canary => {
                self.writer
                    .set("Refused", false, "Accepted", &format!("{digest} accepted"));
                self.report_serving();
                self.writer.write().await;
            }
            rollout::Offer::Refused => self.serve_what_the_fleet_serves(resource, seen_at).await,
        }
    }

    /// The trust checks of new bytes for `resource` before they are
    /// compiled: signatures asked of a source that carries none, unsigned
    /// sources while the host requires signatures; then the `Verified`
    /// condition says what vouches for the bytes. False: refused.
    async fn check_trust(
        &mut self,
        resource: &JinghzhuPlugin,
        digest: &str,
        seen_at: Instant,
    ) -> bool {
        let spec = &resource.spec;
        if let Err(refusal) = self
            .opener
            .check_trust(&spec.source, spec.verification.as_ref())
        {
            self.refuse(resource, digest, refusal, seen_at).await;
            return false;
        }
        let host_keys = self.opener.host_keys();
        let pinned = spec.digest.as_deref();
        let signed = spec.source.oci.is_some() && (spec.verification.is_some() || host_keys);
        if signed {
            // The puller refuses what the policy does not accept: these
            // bytes passed it.
            let by = if self.verified_by.is_empty() {
                "the policy".to_string()
            } else {
                self.verified_by.join(", ")
            };
            self.writer.set(
                "Verified",
                true,
                "Signed",
                &format!(
                    "cosign signatures verified by {by}{}",
                    match pinned {
                        Some(pin) => format!("; the bytes are {pin}, as spec.digest pins"),
                        None => String::new(),
                    }
                ),
            );
        } else {
            match pinned {
                Some(pin) => self.writer.set(
                    "Verified",
                    true,
                    "DigestPinned",
                    &format!("the bytes are {pin}, as spec.digest pins"),
                ),
                None => self.writer.set(
                    "Verified",
                    false,
                    "NotRequired",
                    "neither spec.digest nor spec.verification is set: the bytes are not checked",
                ),
            }
        }
        true
    }

    /// Notes the newest version the fleet served, from the resource's
    /// status: an older one stays a downgrade on this replica too, after a
    /// restart.
    fn note_fleet_newest(&self, resource: &JinghzhuPlugin) {
        let newest = resource
            .status
            .as_ref()
            .and_then(|s| s.newest_served.as_ref());
        if let Some(newest) = newest {
            self.active.note_served(Served {
                name: newest.name.clone(),
                version: newest.version.clone(),
                digest: newest.digest.clone(),
            });
        }
    }

    /// The plugin `digest` from the precompiled cache (vetted and compiled
    /// by this host before), within `resource`'s limits; `None` when this
    /// replica has no trusted copy of it.
    async fn restore(&self, resource: &JinghzhuPlugin, digest: &str) -> Option<Arc<LoadedPlugin>> {
        let source = format!("jinghzhuplugin:{} (precompiled cache)", self.name);
        let Some(mut plugin) = self
            .runtime
            .load_precompiled_off_thread(digest.to_string(), source)
            .await
        else {
            tracing::warn!(resource = %self.name, plugin = digest, "the plugin the fleet serves is not in this replica's precompiled cache; it cannot serve here");
            return None;
        };
        let config = self.runtime.config();
        let limits = effective_limits(
            &resource.spec,
            config.deadline,
            config.memory_limit_bytes,
            self.pod_policy,
        );
        if let Some(loaded) = Arc::get_mut(&mut plugin) {
            loaded.narrow_limits(
                Duration::from_millis(limits.timeout_ms),
                limits.memory_mib.saturating_mul(1024 * 1024),
            );
        }
        tracing::info!(resource = %self.name, plugin = %plugin.describe(), "restored the plugin the fleet serves from the precompiled cache");
        Some(plugin)
    }

    /// After a refusal with nothing serving here (a restart, a new
    /// replica), what the fleet serves serves here too, if this replica
    /// has a trusted copy: the stable plugin of the rollout at this
    /// generation, else the newest version served.
    async fn serve_what_the_fleet_serves(&mut self, resource: &JinghzhuPlugin, seen_at: Instant) {
        if self.role != PluginMode::Active || self.active.serving().is_some() {
            return;
        }
        let from_rollout = resource
            .status
            .as_ref()
            .and_then(|s| s.rollout.as_ref())
            .filter(|r| r.observed_generation == resource.metadata.generation)
            .and_then(|r| {
                if r.phase == "Promoted" {
                    r.canary.clone()
                } else {
                    r.stable.clone()
                }
            });
        let newest = self.active.newest_served().map(|n| n.digest);
        let Some(digest) = from_rollout.or(newest) else {
            return;
        };
        let Some(plugin) = self.restore(resource, &digest).await else {
            return;
        };
        self.serve(plugin, "the precompiled cache", resource, seen_at)
            .await;
    }

    /// Serves `plugin` (from `from`) in this driver's role, and shows it.
    async fn serve(
        &mut self,
        plugin: Arc<LoadedPlugin>,
        from: &str,
        resource: &JinghzhuPlugin,
        seen_at: Instant,
    ) {
        let how = match self.role {
            PluginMode::Active => swapper::ServeAs::Swap,
            PluginMode::Shadow => swapper::ServeAs::Shadow {
                queue: self.shadow_queue,
            },
        };
        let source = format!("jinghzhuplugin:{} ({from})", self.name);
        let mut report = ResourceReport {
            writer: &mut self.writer,
            slot: (&self.active, self.role),
            resource,
        };
        swapper::serve(
            &self.active,
            (plugin, how),
            (&source, seen_at),
            &self.history,
            &mut report,
        )
        .await;
    }

    /// The plugin this driver's role serves now.
    fn served(&self) -> Option<Arc<LoadedPlugin>> {
        match self.role {
            PluginMode::Active => self.active.serving(),
            PluginMode::Shadow => self.active.shadow(),
        }
    }

    /// The one-word state of a driver whose role serves a plugin or not.
    fn state_now(&self) -> &'static str {
        if self.served().is_some() {
            "Serving"
        } else {
            "Pending"
        }
    }

    /// Sets `Serving` and this replica's entry from the slot.
    fn report_serving(&mut self) {
        self.writer.show_serving(&self.active, self.role);
    }

    /// Refuses a candidate: what serves keeps serving.
    async fn refuse(
        &mut self,
        resource: &JinghzhuPlugin,
        digest: &str,
        refusal: Refusal,
        seen_at: Instant,
    ) {
        let source = format!("jinghzhuplugin:{}", self.name);
        let refused = Refused {
            source: &source,
            digest,
            refusal: &refusal,
            seen_at,
            keeping: self.served().map(|plugin| plugin.describe()),
            shadow: self.role == PluginMode::Shadow,
        };
        let mut report = ResourceReport {
            writer: &mut self.writer,
            slot: (&self.active, self.role),
            resource,
        };
        swapper::refuse(refused, &self.metrics, &self.history, &mut report).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::plugin::{PluginLimitsSpec, PodPolicySpec};

    #[test]
    fn limits_above_the_flags_are_clamped_and_said_so() {
        let spec = JinghzhuPluginSpec {
            limits: Some(PluginLimitsSpec {
                timeout_ms: Some(60_000),
                memory_mib: Some(16),
            }),
            pod_policy: Some(PodPolicySpec {
                policy: "baseline".into(),
            }),
            ..JinghzhuPluginSpec::default()
        };
        let effective = effective_limits(
            &spec,
            Duration::from_millis(500),
            64 * 1024 * 1024,
            PodPolicy::Restricted,
        );
        assert_eq!(effective.timeout_ms, 500);
        assert_eq!(effective.memory_mib, 16);
        assert_eq!(effective.pod_policy.as_deref(), Some("restricted"));
        assert!(
            effective.clamped.contains("timeoutMs 60000"),
            "{}",
            effective.clamped
        );
        assert!(
            effective.clamped.contains("looser"),
            "{}",
            effective.clamped
        );
        assert!(
            !effective.clamped.contains("memoryMiB"),
            "{}",
            effective.clamped
        );
        let stricter = effective_limits(
            &JinghzhuPluginSpec {
                pod_policy: Some(PodPolicySpec {
                    policy: "template".into(),
                }),
                ..JinghzhuPluginSpec::default()
            },
            Duration::from_millis(500),
            64 * 1024 * 1024,
            PodPolicy::Restricted,
        );
        assert_eq!(stricter.pod_policy.as_deref(), Some("template"));
        assert!(stricter.clamped.is_empty(), "{}", stricter.clamped);
        let within = effective_limits(
            &JinghzhuPluginSpec::default(),
            Duration::from_millis(500),
            64 * 1024 * 1024,
            PodPolicy::Template,
        );
        assert_eq!((within.timeout_ms, within.memory_mib), (500, 64));
        assert!(within.clamped.is_empty());
    }
}
