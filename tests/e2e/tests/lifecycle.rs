//! The pod lifecycle end to end, on the shared control plane with its
//! simulated nodes: pods are scheduled, run and become Ready (and the
//! Jinghzhu's status follows), fail when told to, go away only when their
//! grace period ends, and disappear with their Node. The host must replace
//! what stops counting, exactly once, and never go below or above
//! `desired` live pods, across a restart too.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e_tests::{RunningHost, TestEnv, is_running_and_ready, phase, plugin, wait_for};
use k8s_openapi::api::core::v1::{
    Container, Node, Pod, PodSpec, PodTemplateSpec, Taint, Toleration,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use local_control_plane::nodes::{FAIL_ANNOTATION, READY_AFTER_ANNOTATION, fake_node};

const CONVERGE: Duration = Duration::from_secs(60);

fn replicaset() -> std::path::PathBuf {
    plugin("replicaset-plugin", &[])
}

/// A pause-pod template with these annotations and grace period; with a
/// `pool` label, its pods run only on (and tolerate the taint of) the Nodes
/// of that pool.
fn template(
    annotations: &[(&str, &str)],
    grace_seconds: Option<i64>,
    pool: Option<(&str, &str)>,
) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            termination_grace_period_seconds: grace_seconds,
            node_selector: pool.map(|(k, v)| BTreeMap::from([(k.into(), v.into())])),
            tolerations: pool.map(|(k, v)| {
                vec![Toleration {
                    key: Some(k.into()),
                    operator: Some("Equal".into()),
                    value: Some(v.into()),
                    effect: Some("NoSchedule".into()),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_become_running_and_ready_and_the_status_follows() -> anyhow::Result<()> {
    let env = TestEnv::new("ready").await?;
    let host = RunningHost::start(&env, &replicaset()).await?;
    // Pods that take 4 s to become ready, so the in-between is visible.
    env.create_with_template(
        "web",
        3,
        template(&[(READY_AFTER_ANNOTATION, "4s")], None, None),
    )
    .await?;

    wait_for(
        "three pods that are not ready yet, and a status that says so",
        CONVERGE,
        || async {
            let jz = env.jinghzhus().get("web").await?;
            Ok(jz.status.is_some_and(|s| {
                s.current == 3
                    && s.ready_replicas == Some(0)
                    && s.state == "Pending"
                    && s.message == "3/3 pods, 0/3 ready"
            }))
        },
    )
    .await?;
    let (jz, pods) = env.wait_converged("web", 3, CONVERGE).await?;
    let status = jz.status.expect("status");
    assert_eq!(status.message, "3/3 pods, 3/3 ready");
    for pod in &pods {
        let spec = pod.spec.as_ref().expect("spec");
        let pod_status = pod.status.as_ref().expect("status");
        assert!(
            spec.node_name.as_deref().is_some_and(|n| env
                .control_plane
                .node_names()
                .iter()
                .any(|m| m == n)),
            "scheduled onto a simulated node: {:?}",
            spec.node_name
        );
        assert!(
            pod_status.pod_ip.is_some(),
            "{} has a pod IP",
            pod.name_any()
        );
    }
    assert_eq!(host.metrics.pods_created.get(), 3);

    // Scaling up goes through Scaling, then Pending, then Running again.
    env.scale("web", 4).await?;
    let (jz, _) = env.wait_converged("web", 4, CONVERGE).await?;
    assert_eq!(jz.status.expect("status").ready_replicas, Some(4));
    assert_eq!(host.metrics.pods_created.get(), 4);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pod_is_replaced_once_and_the_count_stays_exact() -> anyhow::Result<()> {
    let env = TestEnv::new("failed").await?;
    let host = RunningHost::start(&env, &replicaset()).await?;
    env.create("web", 3, &[]).await?;
    let (_, pods) = env.wait_converged("web", 3, CONVERGE).await?;

    let victim = pods[1].name_any();
    env.annotate_pod(&victim, FAIL_ANNOTATION, "true").await?;
    wait_for("the pod to fail", CONVERGE, || async {
        Ok(phase(&env.pods().get(&victim).await?) == "Failed")
    })
    .await?;
    let (jz, live) = env.wait_converged("web", 3, CONVERGE).await?;
    assert!(
        live.iter().all(|p| p.name_any() != victim),
        "the failed pod does not count"
    );
    assert!(
        !jz.status.expect("status").pod_list.contains(&victim),
        "nor is it listed"
    );

    // Give a double create every chance to happen, then count.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let owned = env.owned_pods("web").await?;
    let failed: Vec<&Pod> = owned.iter().filter(|p| phase(p) == "Failed").collect();
    assert_eq!(
        failed.len(),
        1,
        "the failed pod is kept, as a ReplicaSet keeps it"
    );
    assert_eq!(owned.len(), 4, "3 live + 1 failed, nothing else");
    assert_eq!(env.live_pods("web").await?.len(), 3);
    assert_eq!(host.metrics.pods_created.get(), 4, "one replacement, once");
    assert_eq!(host.metrics.pods_deleted.get(), 0);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pods_of_a_deleted_node_are_replaced() -> anyhow::Result<()> {
    let env = TestEnv::new("node-gone").await?;
    // Two Nodes of this test's own, tainted so that no other test's pods
    // land there: deleting one touches no other test.
    let label = ("e2e.jinghzhu.io/pool", env.namespace.as_str());
    let nodes: Api<Node> = Api::all(env.client.clone());
    let mut names = Vec::new();
    for index in [200, 201] {
        let mut node = fake_node(index);
        let name = format!("{}-{index}", env.namespace);
        node.metadata.name = Some(name.clone());
        let labels = node.metadata.labels.get_or_insert_with(Default::default);
        labels.insert("kubernetes.io/hostname".into(), name.clone());
        labels.insert(label.0.into(), label.1.into());
        if let Some(spec) = node.spec.as_mut() {
            spec.taints = Some(vec![Taint {
                key: label.0.into(),
                value: Some(label.1.into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]);
        }
        nodes.create(&PostParams::default(), &node).await?;
        names.push(name);
    }

    let host = RunningHost::start(&env, &replicaset()).await?;
    env.create_with_template("web", 4, template(&[], None, Some(label)))
        .await?;
    let (_, pods) = env.wait_converged("web", 4, CONVERGE).await?;
    let doomed_node = pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("scheduled");
    let doomed: BTreeSet<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == Some(&doomed_node))
        .map(|p| p.name_any())
        .collect();
    println!("deleting Node {doomed_node} with pods {doomed:?}");
    let deleted_at = Instant::now();
    nodes.delete(&doomed_node, &DeleteParams::default()).await?;

    // The pod garbage collector removes them after a 40 s quarantine.
    wait_for(
        "the pods of the deleted Node to be gone and replaced",
        Duration::from_secs(180),
        || async {
            let live = env.live_pods("web").await?;
            Ok(live.len() == 4 && live.iter().all(|p| !doomed.contains(&p.name_any())))
        },
    )
    .await?;
    let (_, pods) = env.wait_converged("web", 4, CONVERGE).await?;
    println!(
        "replaced {} pods {:?} after the Node was deleted",
        doomed.len(),
        deleted_at.elapsed()
    );
    assert!(
        pods.iter().all(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(doomed_node.as_str())
        }),
        "replacements run on the remaining Node"
    );
    assert_eq!(
        host.metrics.pods_created.get() as usize,
        4 + doomed.len(),
        "each lost pod replaced once"
    );
    host.stop().await;
    for name in names.iter().filter(|n| **n != doomed_node) {
        nodes.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// Samples the live pods of `name` until `done` says stop, failing if their
/// number ever leaves `low..=high`.
async fn live_count_stays_within(
    env: &TestEnv,
    name: &str,
    low: usize,
    high: usize,
    mut done: impl AsyncFnMut(usize) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let live = env.live_pods(name).await?.len();
        anyhow::ensure!(
            (low..=high).contains(&live),
            "{live} live pods, outside {low}..={high}"
        );
        if done(live).await? {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "not done within {CONVERGE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_during_graceful_deletion_neither_drops_below_desired_nor_creates_extras()
-> anyhow::Result<()> {
    let env = TestEnv::new("graceful").await?;
    let host = RunningHost::start(&env, &replicaset()).await?;
    // Pods that take 20 s to go away once deleted.
    env.create_with_template("web", 4, template(&[], Some(20), None))
        .await?;
    env.wait_converged("web", 4, CONVERGE).await?;

    // 4 -> 2: two pods terminate for 20 s; the two others are all that count.
    env.scale("web", 2).await?;
    live_count_stays_within(&env, "web", 2, 4, async |live| Ok(live == 2)).await?;
    let terminating = |pods: &[Pod]| {
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count()
    };
    assert_eq!(terminating(&env.owned_pods("web").await?), 2);
    env.wait_converged("web", 2, CONVERGE).await?;

    // 2 -> 3 while they linger: exactly one new pod, not three.
    env.scale("web", 3).await?;
    live_count_stays_within(&env, "web", 2, 3, async |live| Ok(live == 3)).await?;
    env.wait_converged("web", 3, CONVERGE).await?;
    let owned = env.owned_pods("web").await?;
    assert_eq!(
        terminating(&owned),
        2,
        "the old pods are still in their grace period"
    );
    assert_eq!(owned.len(), 5);

    // 3 -> 1, and hold still for a while: never fewer than 1, never a create.
    env.scale("web", 1).await?;
    let settle = Instant::now() + Duration::from_secs(5);
    live_count_stays_within(&env, "web", 1, 3, async |live| {
        Ok(live == 1 && Instant::now() > settle)
    })
    .await?;
    env.wait_converged("web", 1, CONVERGE).await?;
    assert_eq!(host.metrics.pods_created.get(), 5, "4, then 1");
    assert_eq!(host.metrics.pods_deleted.get(), 4, "2, then 2");

    // When the grace periods end, exactly the one pod is left.
    wait_for("the terminating pods to go", CONVERGE, || async {
        Ok(env.owned_pods("web").await?.len() == 1)
    })
    .await?;
    env.wait_converged("web", 1, CONVERGE).await?;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restart_amid_failures_and_graceful_deletions_does_not_over_create()
-> anyhow::Result<()> {
    let env = TestEnv::new("lifecycle-restart").await?;
    let host = RunningHost::start(&env, &replicaset()).await?;
    env.create_with_template("web", 5, template(&[], Some(15), None))
        .await?;
    let (_, pods) = env.wait_converged("web", 5, CONVERGE).await?;
    let original: BTreeSet<String> = pods.iter().map(|p| p.name_any()).collect();

    // The host dies; meanwhile one pod fails, one is deleted (and stays
    // terminating for its 15 s grace period) and desired goes to 4. The new
    // host starts in the middle of that.
    let first_deleted = host.metrics.pods_deleted.get();
    host.crash().await;
    env.annotate_pod(&pods[0].name_any(), FAIL_ANNOTATION, "true")
        .await?;
    env.pods()
        .delete(&pods[1].name_any(), &DeleteParams::default())
        .await?;
    env.scale("web", 4).await?;

    let second = RunningHost::start(&env, &replicaset()).await?;
    env.wait_converged("web", 4, CONVERGE).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, live) = env.wait_converged("web", 4, CONVERGE).await?;
    let owned = env.owned_pods("web").await?;
    let new: Vec<String> = owned
        .iter()
        .map(|p| p.name_any())
        .filter(|n| !original.contains(n))
        .collect();
    // 5 - 1 failed - 1 deleted = 3 live for desired 4: exactly one new pod.
    assert_eq!(new.len(), 1, "new pods: {new:?}");
    assert_eq!(live.len(), 4);
    assert_eq!(first_deleted, 0, "nothing was surplus");
    assert_eq!(second.metrics.pods_deleted.get(), 0, "nothing was surplus");
    let failed = owned.iter().filter(|p| phase(p) == "Failed").count();
    assert_eq!(failed, 1);
    assert!(owned.iter().filter(|p| is_running_and_ready(p)).count() >= 4);
    second.stop().await;
    Ok(())
}

/// Times from creating the objects to every pod Running and Ready with the
/// status saying so. Prints its figures; run with
/// `cargo test -p e2e-tests --test lifecycle -- --ignored --nocapture measure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check: run it on purpose"]
async fn measure_apply_to_all_pods_running_and_ready() -> anyhow::Result<()> {
    // The demo's objects: web (1 pod, default template) and nginx (3 pods).
    let env = TestEnv::new("measure-demo").await?;
    let host = RunningHost::start(&env, &replicaset()).await?;
    let nginx: wasm_operator::crd::Jinghzhu =
        serde_yaml::from_str(&std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/jinghzhu-nginx.yaml"
        ))?)?;
    let started = Instant::now();
    env.create("web", 1, &[]).await?;
    env.jinghzhus()
        .create(&PostParams::default(), &nginx)
        .await?;
    env.wait_converged("web", 1, CONVERGE).await?;
    env.wait_converged("nginx", 3, CONVERGE).await?;
    println!(
        "MEASURED demo objects (web x1, nginx x3): {:.2} s from create to all pods Running and Ready",
        started.elapsed().as_secs_f64()
    );
    host.stop().await;

    let env = TestEnv::new("measure-hundred").await?;
    let host = RunningHost::start(&env, &replicaset()).await?;
    let started = Instant::now();
    for chunk in (0..100).collect::<Vec<u32>>().chunks(20) {
        let creates = chunk
            .iter()
            .map(|i| env.create_owned(format!("jz-{i:03}"), 3, &[]));
        for result in futures::future::join_all(creates).await {
            result?;
        }
    }
    let created = started.elapsed();
    for i in 0..100u32 {
        env.wait_converged(&format!("jz-{i:03}"), 3, Duration::from_secs(300))
            .await?;
    }
    println!(
        "MEASURED 100 Jinghzhus x 3 pods: {:.2} s from the first create to all 300 pods Running \
         and Ready (creating the objects took {:.2} s)",
        started.elapsed().as_secs_f64(),
        created.as_secs_f64()
    );
    host.stop().await;
    Ok(())
}
