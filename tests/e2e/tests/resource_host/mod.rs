//! What the `JinghzhuPlugin` resource tests share: a host as `run
//! --plugin-resource` wires it (in-process, optionally electing a leader),
//! a resource with a ConfigMap source, and helpers that read its status.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use e2e_tests::{TestEnv, plugin, plugin_configmap, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use tokio::sync::oneshot;
use wasm_operator::apply::policy::{PodPolicy, PolicyConfig};
use wasm_operator::controller::{self, ControllerConfig};
use wasm_operator::crd::plugin::{JinghzhuPlugin, JinghzhuPluginStatus};
use wasm_operator::delivery::resource::{self, ResourceOptions};
use wasm_operator::leader::{Elector, LeaderElectionConfig};
use wasm_operator::registry::OciOptions;
use wasm_operator::runtime::{Runtime, RuntimeConfig};
use wasm_operator::slot::{ActivePlugin, RollbackPolicy};
use wasm_operator::telemetry::metrics::Metrics;
use wasm_operator_testkit::plugin_resource;

pub const CONVERGE: Duration = Duration::from_secs(90);
pub const V2_PREFIX: &str = "[v2] ";
pub const MISBEHAVE: &str = "test.jinghzhu.io/misbehave";

pub fn v1() -> Vec<u8> {
    std::fs::read(plugin("replicaset-plugin", &[])).expect("v1 plugin")
}

pub fn v2() -> Vec<u8> {
    std::fs::read(plugin("replicaset-plugin", &["v2"])).expect("v2 plugin")
}

/// Installs the JinghzhuPlugin CRD (once per process; idempotent across processes).
pub async fn install_plugin_crd(env: &TestEnv) -> anyhow::Result<()> {
    e2e_tests::install_plugin_crd(&env.client).await
}

/// A JinghzhuPlugin named after the test's namespace (the resource is
/// cluster-scoped; namespaces are unique) with a ConfigMap source.
pub fn resource(env: &TestEnv, configmap: &str) -> JinghzhuPlugin {
    plugin_resource(&env.namespace)
        .config_map(&env.namespace, configmap)
        .build()
}

pub async fn create_configmap(env: &TestEnv, name: &str, bytes: Vec<u8>) -> anyhow::Result<()> {
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &plugin_configmap(name, bytes))
        .await?;
    Ok(())
}

pub async fn replace_configmap(env: &TestEnv, name: &str, bytes: Vec<u8>) -> anyhow::Result<()> {
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .replace(name, &PostParams::default(), &{
            let mut cm = plugin_configmap(name, bytes);
            cm.metadata.resource_version = None;
            cm
        })
        .await?;
    Ok(())
}

/// How [`ResourceHost::start_with`] sets the host up.
#[derive(Default)]
pub struct Setup<'a> {
    /// Elect a leader on a Lease in the test's namespace.
    pub elect: bool,
    /// OCI options and poll interval.
    pub oci: Option<(OciOptions, Duration)>,
    /// `--shadow-plugin-resource`.
    pub shadow: Option<&'a str>,
    /// `--pod-policy`.
    pub pod_policy: PodPolicy,
    /// `--plugin-resource-allow-unsigned`.
    pub allow_unsigned: bool,
    /// `--min-swap-interval-secs` (`None`: the default).
    pub min_swap_interval: Option<Duration>,
}

/// A host serving the resource, as `run --plugin-resource` does (optionally
/// electing a leader on a Lease in the test's namespace).
pub struct ResourceHost {
    pub active: Arc<ActivePlugin>,
    pub metrics: Arc<Metrics>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    elector: Option<Elector>,
}

impl ResourceHost {
    pub async fn start(
        env: &TestEnv,
        name: &str,
        replica: &str,
        elect: bool,
    ) -> anyhow::Result<Self> {
        Self::start_with(
            env,
            name,
            replica,
            Setup {
                elect,
                ..Setup::default()
            },
        )
        .await
    }

    pub async fn start_with(
        env: &TestEnv,
        name: &str,
        replica: &str,
        setup: Setup<'_>,
    ) -> anyhow::Result<Self> {
        let Setup {
            elect,
            oci,
            shadow,
            pod_policy,
            allow_unsigned,
            min_swap_interval,
        } = setup;
        let metrics = Arc::new(Metrics::default());
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
        let plugins = resource::start(
            &env.client,
            runtime,
            ResourceOptions {
                name: name.to_string(),
                shadow: shadow.map(str::to_string),
                replica: replica.to_string(),
                shadow_queue: 8,
                rollback: RollbackPolicy::default(),
                pod_policy,
                oci,
                files: Default::default(),
                allow_unsigned,
                judge: Default::default(),
                router: Default::default(),
            },
            metrics.clone(),
        )
        .await?;
        if let Some(interval) = min_swap_interval {
            plugins.active.set_min_swap_interval(interval);
        }
        let mut config = ControllerConfig {
            namespace: Some(env.namespace.clone()),
            policy: PolicyConfig {
                policy: pod_policy,
                ..PolicyConfig::default()
            },
            ..ControllerConfig::default()
        };
        let elector = if elect {
            let election = LeaderElectionConfig {
                lease_name: "wasm-operator".into(),
                namespace: env.namespace.clone(),
                identity: replica.to_string(),
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            };
            let (leadership, elector) = Elector::start(
                env.client.clone(),
                election,
                metrics.leader_status_of("wasm-operator"),
            )
            .map_err(|e| anyhow::anyhow!(e))?;
            config.leadership = leadership;
            Some(elector)
        } else {
            None
        };
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(controller::run(
            env.client.clone(),
            plugins.active.clone(),
            config,
            metrics.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        Ok(Self {
            active: plugins.active,
            metrics,
            shutdown: Some(tx),
            task,
            elector,
        })
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), &mut self.task).await;
        if let Some(elector) = self.elector.take() {
            elector.release().await;
        }
    }
}

pub async fn status_of(env: &TestEnv, name: &str) -> anyhow::Result<JinghzhuPluginStatus> {
    Ok(Api::<JinghzhuPlugin>::all(env.client.clone())
        .get(name)
        .await?
        .status
        .unwrap_or_default())
}

pub fn condition<'a>(status: &'a JinghzhuPluginStatus, type_: &str) -> Option<(&'a str, &'a str)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

/// Waits until every replica in `replicas` has an entry serving `digest`.
pub async fn wait_replicas_on(
    env: &TestEnv,
    name: &str,
    replicas: &[&str],
    digest: &str,
) -> anyhow::Result<JinghzhuPluginStatus> {
    wait_for(
        &format!("every replica of {replicas:?} serving {digest}"),
        CONVERGE,
        || async {
            let status = status_of(env, name).await?;
            Ok(replicas.iter().all(|r| {
                status
                    .replicas
                    .iter()
                    .any(|e| e.name == *r && e.digest == digest && e.state == "Serving")
            }))
        },
    )
    .await
    .map_err(|err| anyhow::anyhow!("{err}"))?;
    status_of(env, name).await
}

pub async fn delete_resource(env: &TestEnv, name: &str) {
    let _ = Api::<JinghzhuPlugin>::all(env.client.clone())
        .delete(name, &Default::default())
        .await;
}
