//! The harness against the real thing: etcd + kube-apiserver +
//! kube-controller-manager + kube-scheduler built from source, and kwok with
//! simulated nodes, on loopback.
//!
//! Tests share one control plane (started on first use) and isolate
//! themselves with their own namespaces. The teardown tests start private
//! control planes, since they have to kill them.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Node, Pod, PodSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::{Client, ResourceExt};
use local_control_plane::nodes::{FAIL_ANNOTATION, READY_AFTER_ANNOTATION, is_node_schedulable};
use local_control_plane::process::is_alive;
use local_control_plane::{ControlPlane, ControlPlaneOptions, DEFAULT_NODES};

/// Creates a namespace unique to this test and returns its name.
async fn test_namespace(client: &Client, prefix: &str) -> String {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace")
        .name_any()
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A pause pod, optionally annotated and with a grace period.
fn pause_pod(name: &str, annotations: &[(&str, &str)], grace_seconds: Option<i64>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            termination_grace_period_seconds: grace_seconds,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Creates the pod and waits until it is Running and Ready.
async fn running_pod(pods: &Api<Pod>, pod: &Pod) -> Pod {
    let name = pod.metadata.name.clone().expect("named pod");
    pods.create(&PostParams::default(), pod)
        .await
        .expect("create pod");
    eventually(
        &format!("pod {name} Running and Ready"),
        Duration::from_secs(30),
        || async {
            let pod = pods.get(&name).await.expect("get pod");
            phase(&pod) == "Running" && is_ready(&pod)
        },
    )
    .await;
    pods.get(&name).await.expect("get pod")
}

#[tokio::test]
async fn nodes_are_ready_and_a_pod_is_scheduled_runs_and_gets_an_ip() {
    let cp = ControlPlane::shared().expect("control plane");
    let client = cp.client().await.expect("client");
    assert_eq!(cp.node_names().len(), DEFAULT_NODES);
    let nodes: Api<Node> = Api::all(client.clone());
    // kwok renews each Node's Lease, as a kubelet does; without it the node
    // lifecycle controller would mark the Nodes NotReady after 50 s.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    for name in cp.node_names() {
        let node = nodes.get(name).await.expect("get node");
        assert!(is_node_schedulable(&node), "node {name}: {:?}", node.status);
        eventually(
            &format!("a renewed Lease for {name}"),
            Duration::from_secs(30),
            || async {
                leases
                    .get_opt(name)
                    .await
                    .expect("get lease")
                    .and_then(|l| l.spec)
                    .and_then(|s| s.renew_time)
                    .is_some()
            },
        )
        .await;
    }

    let ns = test_namespace(&client, "run").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = running_pod(&pods, &pause_pod("web", &[], None)).await;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    assert!(
        cp.node_names().contains(&node),
        "scheduled onto a simulated node, not {node:?}"
    );
    let status = pod.status.expect("status");
    let ip = status.pod_ip.unwrap_or_default();
    assert!(
        ip.starts_with("10.244."),
        "pod IP from the node's podCIDR: {ip:?}"
    );
    let containers = status.container_statuses.unwrap_or_default();
    assert_eq!(containers.len(), 1);
    assert!(containers[0].ready);
    assert!(
        containers[0]
            .state
            .as_ref()
            .is_some_and(|s| s.running.is_some()),
        "{containers:?}"
    );

    // Held back by its annotation: scheduled, but neither Running nor Ready.
    pods.create(
        &PostParams::default(),
        &pause_pod("slow", &[(READY_AFTER_ANNOTATION, "1h")], None),
    )
    .await
    .expect("create slow pod");
    eventually(
        "the slow pod is scheduled",
        Duration::from_secs(30),
        || async {
            let pod = pods.get("slow").await.expect("get");
            pod.spec.and_then(|s| s.node_name).is_some()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let slow = pods.get("slow").await.expect("get");
    assert_eq!(phase(&slow), "Pending");
    assert!(!is_ready(&slow));
}

#[tokio::test]
async fn a_deleted_pod_goes_away_when_its_grace_period_ends() {
    let cp = ControlPlane::shared().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = test_namespace(&client, "grace").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    running_pod(&pods, &pause_pod("graceful", &[], Some(4))).await;

    let deleted_at = Instant::now();
    pods.delete("graceful", &DeleteParams::default())
        .await
        .expect("delete");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let terminating = pods
        .get_opt("graceful")
        .await
        .expect("get")
        .expect("still there halfway through its grace period");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    eventually(
        "the pod is gone after its grace period",
        Duration::from_secs(20),
        || async { pods.get_opt("graceful").await.expect("get").is_none() },
    )
    .await;
    // deletionTimestamp has whole seconds: the deadline may be up to 1 s early.
    let took = deleted_at.elapsed();
    assert!(
        took >= Duration::from_millis(2900),
        "gone after {took:?}, before its 4 s grace period ended"
    );
    println!("a pod with a 4 s grace period went away {took:?} after its deletion");
}

#[tokio::test]
async fn the_fail_annotation_makes_a_pod_fail() {
    let cp = ControlPlane::shared().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = test_namespace(&client, "fail").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    running_pod(&pods, &pause_pod("doomed", &[], None)).await;
    let patch = serde_json::json!({"metadata": {"annotations": {FAIL_ANNOTATION: "true"}}});
    pods.patch("doomed", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
    eventually("the pod fails", Duration::from_secs(30), || async {
        phase(&pods.get("doomed").await.expect("get")) == "Failed"
    })
    .await;
    let failed = pods.get("doomed").await.expect("get");
    assert!(!is_ready(&failed));
    let terminated = failed
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| c.state.and_then(|s| s.terminated))
        .map(|t| t.exit_code)
        .collect::<Vec<_>>();
    assert_eq!(terminated, [1]);

    // A pod that never started fails too, and is never made Ready on the way.
    pods.create(
        &PostParams::default(),
        &pause_pod("born-failing", &[(FAIL_ANNOTATION, "true")], None),
    )
    .await
    .expect("create");
    eventually(
        "the annotated new pod fails",
        Duration::from_secs(30),
        || async { phase(&pods.get("born-failing").await.expect("get")) == "Failed" },
    )
    .await;
}

#[test]
fn nodes_need_the_node_lifecycle_controller() {
    let err = ControlPlane::start_with(ControlPlaneOptions {
        controller_manager: false,
        ..Default::default()
    })
    .expect_err("nodes without kube-controller-manager");
    let msg = format!("{err:#}");
    assert!(msg.contains("node-lifecycle-controller"), "{msg}");
    assert!(msg.contains("--no-nodes"), "{msg}");
}

#[tokio::test]
async fn readyz_ok_and_configmaps_can_be_created_listed_and_watched() {
    let cp = ControlPlane::shared().expect("control plane");
    let client = cp.client().await.expect("client");

    let readyz = client
        .request_text(
            http::Request::get("/readyz")
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .expect("GET /readyz");
    assert_eq!(readyz, "ok");

    let ns = test_namespace(&client, "crud").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    maps.create(&PostParams::default(), &config_map("first", &[("a", "1")]))
        .await
        .expect("create first");

    let listed = maps.list(&ListParams::default()).await.expect("list");
    let names: Vec<_> = listed.items.iter().map(|cm| cm.name_any()).collect();
    assert!(names.contains(&"first".to_string()), "listed {names:?}");

    // Watch from the list's resourceVersion: the next create must arrive.
    let version = listed
        .metadata
        .resource_version
        .expect("list resourceVersion");
    let mut stream = maps
        .watch(&WatchParams::default().timeout(60), &version)
        .await
        .expect("watch")
        .boxed();
    maps.create(&PostParams::default(), &config_map("second", &[("b", "2")]))
        .await
        .expect("create second");
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = stream.try_next().await.expect("watch stream") {
            if let WatchEvent::Added(cm) = event
                && cm.name_any() == "second"
            {
                return cm;
            }
        }
        panic!("watch ended before `second` was seen");
    })
    .await
    .expect("watch event for `second` within 30 s");
    assert_eq!(
        seen.data.and_then(|d| d.get("b").cloned()).as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn garbage_collector_deletes_dependents_of_a_deleted_owner() {
    let cp = ControlPlane::shared().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = test_namespace(&client, "gc").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    let owner = maps
        .create(&PostParams::default(), &config_map("owner", &[]))
        .await
        .expect("create owner");
    let mut dependent = config_map("dependent", &[]);
    dependent.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().expect("owner uid"),
        ..Default::default()
    }]);
    maps.create(&PostParams::default(), &dependent)
        .await
        .expect("create dependent");

    maps.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    eventually(
        "the garbage collector deletes the dependent ConfigMap",
        Duration::from_secs(60),
        || async { maps.get_opt("dependent").await.expect("get").is_none() },
    )
    .await;
}

#[tokio::test]
async fn service_account_kubeconfig_is_subject_to_rbac() {
    let cp = ControlPlane::shared().expect("control plane");
    let admin = cp.client().await.expect("client");
    let ns = test_namespace(&admin, "rbac").await;

    let path = cp
        .kubeconfig_for_service_account(&ns, "operator")
        .await
        .expect("service account kubeconfig");
    let config = local_control_plane::kubeconfig::load(&path)
        .await
        .expect("load kubeconfig");
    let as_operator = Client::try_from(config).expect("client");
    let pods: Api<Pod> = Api::namespaced(as_operator.clone(), &ns);

    let denied = pods.list(&ListParams::default()).await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(status)) if status.code == 403),
        "a ServiceAccount without RBAC must be forbidden, got {denied:?}"
    );

    let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
    roles
        .create(
            &PostParams::default(),
            &Role {
                metadata: ObjectMeta {
                    name: Some("pod-reader".into()),
                    ..Default::default()
                },
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["pods".into()]),
                    verbs: vec!["list".into()],
                    ..Default::default()
                }]),
            },
        )
        .await
        .expect("create role");
    let bindings: Api<RoleBinding> = Api::namespaced(admin, &ns);
    bindings
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: ObjectMeta {
                    name: Some("operator-reads-pods".into()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: "pod-reader".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "operator".into(),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .expect("create role binding");
    eventually(
        "the RoleBinding takes effect",
        Duration::from_secs(30),
        || async { pods.list(&ListParams::default()).await.is_ok() },
    )
    .await;

    // Impersonation: the same rules apply to an impersonated user.
    let path = cp
        .kubeconfig_impersonating("jane", &["developers"])
        .expect("impersonating kubeconfig");
    let config = local_control_plane::kubeconfig::load(&path)
        .await
        .expect("load kubeconfig");
    let as_jane: Api<Pod> = Api::namespaced(Client::try_from(config).expect("client"), &ns);
    let denied = as_jane.list(&ListParams::default()).await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(status)) if status.code == 403),
        "impersonated user without RBAC must be forbidden, got {denied:?}"
    );
}

/// Waits (up to 15 s) until none of `pids` is alive.
fn assert_processes_gone(pids: &[(String, u32)], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let alive: Vec<_> = pids.iter().filter(|(_, pid)| is_alive(*pid)).collect();
        if alive.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {alive:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_all_gone(pids: &[(String, u32)], dir: &std::path::Path) {
    assert_processes_gone(pids, "processes left behind");
    assert!(
        !dir.exists(),
        "temporary directory left behind: {}",
        dir.display()
    );
}

#[test]
fn a_panicking_test_leaves_no_process_behind() {
    let mut seen = None;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let cp = ControlPlane::start_with(ControlPlaneOptions::default()).expect("start");
        let pids = cp.pids();
        let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "etcd",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kwok"
            ]
        );
        assert!(pids.iter().all(|(_, pid)| is_alive(*pid)));
        seen = Some((pids, cp.dir().to_path_buf()));
        panic!("a test failing while it holds a control plane");
    }));
    assert!(outcome.is_err(), "the closure panics");
    let (pids, dir) = seen.expect("the control plane started");
    assert_all_gone(&pids, &dir);
}

#[test]
fn without_nodes_there_is_no_scheduler_kwok_or_node_and_teardown_is_complete() {
    let cp = ControlPlane::start_with(ControlPlaneOptions {
        nodes: 0,
        ..Default::default()
    })
    .expect("start");
    let pids = cp.pids();
    let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["etcd", "kube-apiserver", "kube-controller-manager"]);
    assert!(cp.node_names().is_empty());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = cp.client().await.expect("client");
        let nodes: Api<Node> = Api::all(client.clone());
        assert!(
            nodes
                .list(&ListParams::default())
                .await
                .expect("list nodes")
                .items
                .is_empty()
        );
        let ns = test_namespace(&client, "nonodes").await;
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &ns);
        eventually(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || async { accounts.get_opt("default").await.expect("get").is_some() },
        )
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.create(&PostParams::default(), &pause_pod("idle", &[], None))
            .await
            .expect("create");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let pod = pods.get("idle").await.expect("get");
        assert_eq!(phase(&pod), "Pending");
        assert!(
            pod.spec.and_then(|s| s.node_name).is_none(),
            "never scheduled"
        );
    });
    let dir = cp.dir().to_path_buf();
    drop(cp);
    assert_all_gone(&pids, &dir);
}

/// Starts the `local-control-plane` command with `args` after `up` and reads
/// its output up to "ready": the pids it prints and the KUBECONFIG it exports.
/// With `tmpdir`, the command keeps its directory there (`TMPDIR`), out of
/// reach of the stale-directory sweep of control planes other tests start.
fn start_cli(
    args: &[&str],
    tmpdir: Option<&Path>,
) -> (std::process::Child, Vec<(String, u32)>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_local-control-plane"));
    if let Some(tmpdir) = tmpdir {
        command.env("TMPDIR", tmpdir);
    }
    let mut child = command
        .arg("up")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn local-control-plane");
    let stdout = child.stdout.take().expect("stdout");
    let mut pids = Vec::new();
    let mut kubeconfig = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read stdout");
        if let Some(rest) = line.strip_prefix("pid ")
            && let Some((name, pid)) = rest.split_once('=')
        {
            pids.push((name.to_string(), pid.parse().expect("pid")));
        }
        if let Some(path) = line.strip_prefix("export KUBECONFIG=") {
            kubeconfig = path.to_string();
        }
        if line.starts_with("ready") {
            break;
        }
    }
    assert!(!kubeconfig.is_empty(), "KUBECONFIG printed");
    (child, pids, kubeconfig)
}

#[test]
fn the_command_serves_kubectl_and_stops_cleanly_on_ctrl_c() {
    let (mut child, pids, kubeconfig) = start_cli(&["--nodes", "1"], None);
    assert_eq!(pids.len(), 5, "pids printed: {pids:?}");
    let dir = std::path::Path::new(&kubeconfig)
        .parent()
        .expect("kubeconfig dir")
        .to_path_buf();

    let kubectl = local_control_plane::binaries::ensure_binaries()
        .expect("binaries")
        .kubectl;
    let out = Command::new(&kubectl)
        .args(["get", "ns", "-o", "name"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("namespace/default"),
        "kubectl get ns: {stdout}"
    );
    let out = Command::new(&kubectl)
        .args(["get", "nodes", "-o", "name"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("run kubectl");
    let nodes = String::from_utf8_lossy(&out.stdout);
    assert_eq!(nodes.trim(), "node/kwok-node-0", "--nodes 1");

    // SAFETY: sending SIGINT to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().expect("wait");
    assert!(status.success(), "exit after Ctrl-C: {status}");
    assert_all_gone(&pids, &dir);
}

#[test]
fn killing_the_command_outright_still_stops_its_processes() {
    // A private TMPDIR: a control plane another test starts meanwhile sweeps
    // stale directories of the shared one, this one's included once killed.
    let tmpdir = tempfile::tempdir().expect("tempdir");
    let (mut child, pids, kubeconfig) = start_cli(&[], Some(tmpdir.path()));
    assert_eq!(pids.len(), 5, "pids printed: {pids:?}");
    let dir = std::path::Path::new(&kubeconfig)
        .parent()
        .expect("kubeconfig dir")
        .to_path_buf();
    // SIGKILL runs no cleanup at all: the kernel's parent-death signal must
    // take the children down.
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    assert_processes_gone(&pids, "orphans after SIGKILL");
    // Nothing ran to remove the directory; the next start sweeps it away.
    assert!(
        dir.exists(),
        "{} was expected to survive SIGKILL",
        dir.display()
    );
    local_control_plane::cluster::remove_stale_dirs_in(tmpdir.path());
    assert!(
        !dir.exists(),
        "stale directory not swept: {}",
        dir.display()
    );
}

/// What the scheduler and kwok add to start-up, side by side in one run
/// (alternating, so a noisy machine hurts both alike). Prints its figures;
/// run with `cargo test -p local-control-plane --test control_plane -- --ignored --nocapture measure`.
#[test]
#[ignore = "a measurement, not a check: run it on purpose"]
fn measure_start_up_with_and_without_nodes() {
    let mut without = Vec::new();
    let mut with = Vec::new();
    for _ in 0..5 {
        for (nodes, times) in [(0, &mut without), (DEFAULT_NODES, &mut with)] {
            let started = Instant::now();
            let cp = ControlPlane::start_with(ControlPlaneOptions {
                nodes,
                ..Default::default()
            })
            .expect("start");
            times.push(started.elapsed());
            drop(cp);
        }
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (a, b) = (median(&mut without), median(&mut with));
    println!(
        "MEASURED start-up (median of 5): without nodes {a:.2?}, with {DEFAULT_NODES} nodes \
         (kube-scheduler + kwok) {b:.2?}, difference {:.2?}",
        b.saturating_sub(a)
    );
    println!("without: {without:.2?}\nwith:    {with:.2?}");
}
