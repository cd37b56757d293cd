//! What the tenant and rollout tests share: a host as `run --plugin FILE
//! --tenant-plugins --shards 4` wires it, a tenant resource, and the
//! namespace label that lets a tenant serve a namespace.

use std::sync::Arc;
use std::time::Duration;

use e2e_tests::{TestEnv, plugin_configmap};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::oneshot;
use wasm_operator::controller::{self, ControllerConfig};
use wasm_operator::crd::plugin::JinghzhuPlugin;
use wasm_operator::delivery::resource::ResourceOptions;
use wasm_operator::delivery::resource::fleet::{JudgeBy, RolloutJudge};
use wasm_operator::delivery::resource::keys::AllowedKeySecrets;
use wasm_operator::delivery::resource::tenants::{self, SlotSettings};
use wasm_operator::delivery::setup::{self, PluginOptions, PluginSource};
use wasm_operator::leader::LeaderElectionConfig;
use wasm_operator::registry::OciOptions;
use wasm_operator::runtime::{Runtime, RuntimeConfig};
use wasm_operator::shards::{Coordinator, ShardConfig};
use wasm_operator::slot::RollbackPolicy;
use wasm_operator::slot::router::{PluginRouter, TENANT_LABEL};
use wasm_operator::telemetry::metrics::Metrics;
use wasm_operator_testkit::plugin_resource;

/// A tenant resource serving the ConfigMap `plugin` of `env`'s namespace to
/// the objects of that namespace.
pub fn tenant(env: &TestEnv, name: &str) -> JinghzhuPlugin {
    plugin_resource(name)
        .config_map(&env.namespace, "plugin")
        .serving_namespaces(&[&env.namespace])
        .build()
}

/// Creates the ConfigMap `plugin` of `env`'s namespace, and opts the
/// namespace in to the tenant named after it (as the tests name a
/// namespace's tenant: `tenant(env, &env.namespace)`).
pub async fn create_configmap(env: &TestEnv, bytes: Vec<u8>) -> anyhow::Result<()> {
    create_configmap_only(env, bytes).await?;
    opt_in(env, Some(&env.namespace)).await
}

/// Creates the ConfigMap `plugin` of `env`'s namespace (no opt-in).
pub async fn create_configmap_only(env: &TestEnv, bytes: Vec<u8>) -> anyhow::Result<()> {
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &plugin_configmap("plugin", bytes))
        .await?;
    Ok(())
}

/// Labels `env`'s namespace so the tenant `tenant` may serve it (as a
/// cluster admin does), or with `None` removes the label.
pub async fn opt_in(env: &TestEnv, tenant: Option<&str>) -> anyhow::Result<()> {
    let patch = serde_json::json!({"metadata": {"labels": {TENANT_LABEL: tenant}}});
    Api::<Namespace>::all(env.client.clone())
        .patch(
            &env.namespace,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// A host as `run --plugin FILE --tenant-plugins --shards 4` wires it,
/// watching every namespace, its shard Leases in `env`'s namespace.
pub struct TenantHost {
    pub router: Arc<PluginRouter>,
    pub metrics: Arc<Metrics>,
    coordinator: Coordinator,
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// What a [`TenantHost`] takes beyond the defaults of [`TenantHost::start`].
#[derive(Default)]
pub struct HostOptions {
    /// The `--oci-*` options and the poll interval (none: no OCI sources).
    pub oci: Option<(OciOptions, Duration)>,
    /// `--tenant-key-secret`.
    pub key_secrets: AllowedKeySecrets,
}

impl TenantHost {
    pub async fn start(
        env: &TestEnv,
        default_plugin: &std::path::Path,
        replica: &str,
    ) -> anyhow::Result<Self> {
        Self::start_with(env, default_plugin, replica, HostOptions::default()).await
    }

    pub async fn start_with(
        env: &TestEnv,
        default_plugin: &std::path::Path,
        replica: &str,
        options: HostOptions,
    ) -> anyhow::Result<Self> {
        let (shards, coordinator) = Coordinator::start(
            env.client.clone(),
            ShardConfig {
                count: 4,
                lease: LeaderElectionConfig {
                    lease_name: "wasm-operator".into(),
                    namespace: env.namespace.clone(),
                    identity: replica.to_string(),
                    lease_duration: Duration::from_secs(4),
                    renew_deadline: Duration::from_secs(3),
                    retry_period: Duration::from_secs(1),
                },
            },
        )
        .map_err(anyhow::Error::msg)?;
        // The holder of shard 0 judges canary rollouts, as `run` wires it.
        let judge = RolloutJudge::later();
        judge.decide(JudgeBy::Shard(shards.clone()));
        let metrics = Arc::new(Metrics::default());
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
        let plugins = setup::start(
            &env.client,
            runtime.clone(),
            PluginOptions {
                source: PluginSource::File(default_plugin.to_path_buf()),
                pinned_sha256: None,
                shadow: None,
                shadow_pinned_sha256: None,
                shadow_queue: 8,
                rollback: RollbackPolicy::default(),
                max_file_bytes: wasm_operator::registry::bounded::FileRules::default().max_bytes,
            },
            metrics.clone(),
        )
        .await?;
        let router = Arc::new(PluginRouter::new(plugins.active.clone()));
        tenants::start(
            &env.client,
            runtime,
            ResourceOptions {
                name: String::new(),
                shadow: None,
                replica: replica.to_string(),
                shadow_queue: 8,
                rollback: RollbackPolicy::default(),
                pod_policy: Default::default(),
                oci: options.oci,
                files: Default::default(),
                allow_unsigned: false,
                judge: judge.clone(),
                router: Default::default(),
            },
            SlotSettings {
                allow_downgrade: false,
                min_swap_interval: Duration::ZERO,
                key_secrets: options.key_secrets,
            },
            metrics.clone(),
            router.clone(),
        );
        let (shutdown, stopped) = oneshot::channel();
        let task = tokio::spawn(controller::run_routed(
            env.client.clone(),
            router.clone(),
            ControllerConfig {
                namespace: None,
                shards: Some(shards),
                ..ControllerConfig::default()
            },
            metrics.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            router,
            metrics: metrics.clone(),
            coordinator,
            shutdown,
            task,
        })
    }

    pub async fn stop(mut self) {
        let _ = self.shutdown.send(());
        let _ = tokio::time::timeout(Duration::from_secs(30), &mut self.task).await;
        self.coordinator.release().await;
    }
}

/// Replaces the bytes of the ConfigMap `plugin` in `env`'s namespace.
pub async fn replace_configmap(env: &TestEnv, bytes: Vec<u8>) -> anyhow::Result<()> {
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .replace("plugin", &PostParams::default(), &{
            let mut cm = plugin_configmap("plugin", bytes);
            cm.metadata.resource_version = None;
            cm
        })
        .await?;
    Ok(())
}
