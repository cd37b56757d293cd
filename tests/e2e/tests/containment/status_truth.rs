//! Containment, round three (issue 40), hazard 10: the status a plugin
//! proposes is checked against what the host observed. An object whose
//! plugin creates nothing and reports `current: 3`, someone else's pods,
//! `Running` and `observedGeneration: 2^63-1`, and objects whose otherwise
//! normal proposals lie about one field each, are refused whole by
//! `status/observed-fields` (a `RejectedOutput` Warning naming it): no pod
//! made, nothing of the lie stored. A good neighbour converges meanwhile.

use super::*;

use wasm_operator::apply::status_rules::RULE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_that_lies_about_what_the_host_observes_is_refused() -> anyhow::Result<()> {
    let env = TestEnv::new("status-truth").await?;
    let host = host_with(&env, ControllerConfig::default()).await?;
    let liars = [
        ("liar", "lie-status"),
        ("liar-current", "lie-status:current"),
        ("liar-pods", "lie-status:pod-list"),
        ("liar-generation", "lie-status:generation"),
    ];
    let started = Instant::now();
    with_good_neighbour(&env, &liars).await?;
    eprintln!(
        "status truth: the good neighbour converged in {:?}",
        started.elapsed()
    );
    // A few rounds of retries, then what is stored and made (printed
    // before the checks, so a run with the rule turned off shows the lie).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut stored = Vec::new();
    for (name, _) in liars {
        let status = env.jinghzhus().get(name).await?.status.unwrap_or_default();
        let pods = env.owned_pods(name).await?.len();
        eprintln!(
            "status truth: {name}: {pods} pod(s); stored current {}, podList {:?}, state {:?}, \
             observedGeneration {:?}",
            status.current, status.pod_list, status.state, status.observed_generation
        );
        stored.push((name, status, pods));
    }
    for (name, _) in liars {
        env.wait_event(name, "RejectedOutput", RULE, CONVERGE)
            .await?;
    }
    for (name, status, pods) in stored {
        assert_eq!(
            (status.current, status.pod_list.len(), status.state.as_str()),
            (0, 0, ""),
            "{name}: nothing of the lie is stored"
        );
        assert_eq!(status.observed_generation, None, "{name}");
        assert_eq!(
            pods, 0,
            "{name}: nothing of the proposal applied (its creates neither)"
        );
    }
    // No pod beyond what the objects ask for: the good one's two.
    let pods = env.pods().list(&Default::default()).await?.items;
    assert_eq!(pods.len(), 2, "only the good object's pods exist");
    assert!(host.metrics.rejected_outputs.get() >= liars.len() as u64);
    // The host keeps reconciling: a new object converges.
    env.create("later", 1, &[]).await?;
    env.wait_converged("later", 1, CONVERGE).await?;
    env.wait_converged("good", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}
