//! The short chaos soak CI runs (issue 43): three replicas with shards,
//! N = 60 objects, 75 s of churn, hot swaps and faults (one about every
//! 4 s from a shuffled deck, so every kind of the catalogue is injected at
//! least once), fixed seed, then the final convergence; about 2 minutes
//! with the set-up on this machine. It asserts no invariant was violated
//! and prints the report. That the checker can fail is shown by its unit
//! tests (synthetic timelines, `scale_bench::soak::invariants`) and by
//! `chaos-soak --sabotage`, a run whose harness adds pods itself.
//!
//! The 30-minute benchmark: `cargo run --release -p scale-bench --bin chaos-soak`
//! (docs/development.md, "Faults and guarantees").

use std::time::{Duration, Instant};

use scale_bench::artifacts::Profile;
use scale_bench::soak::catalogue::FaultKind;
use scale_bench::soak::replicas::LEASE;
use scale_bench::soak::{self, SoakOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_breaks_no_invariant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = SoakOptions {
        objects: 60,
        duration: Duration::from_secs(75),
        seed: 43,
        replicas: 3,
        shards: 12,
        workers: 2,
        fault_interval: Duration::from_secs(4),
        only_faults: Vec::new(),
        churn_per_sec: 1.0,
        swap_interval: Duration::from_secs(20),
        lease: LEASE,
        bounds: soak::default_bounds(&LEASE),
        results_dir: dir.path().to_path_buf(),
        profile: Profile::of_this_build(),
        sabotage: false,
        command: "the scale-bench soak test (tests/scale-bench/tests/soak.rs)".to_owned(),
    };
    let started = Instant::now();
    let report = match soak::run(&options).await {
        Ok(report) => report,
        Err(err) => {
            // Kept: the replicas' logs say why a phase did not finish.
            let kept = dir.keep();
            panic!(
                "the soak did not run to its end (logs in {}): {err:#}",
                kept.join("logs").display()
            );
        }
    };
    eprintln!(
        "the short soak took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for kind in FaultKind::ALL {
        assert!(
            report
                .faults_by_kind
                .get(&kind.name())
                .copied()
                .unwrap_or(0)
                > 0,
            "{} was never injected: {:?}",
            kind.name(),
            report.faults_by_kind
        );
    }
    assert!(
        report.churn.scales > 0 && report.churn.swaps > 0,
        "{:?}",
        report.churn
    );
    assert!(report.writes.total > 0);
    for file in ["soak.json", "soak.md", "soak.svg", "logs/writes.jsonl"] {
        assert!(dir.path().join(file).is_file(), "{file}");
    }
    if !report.passed {
        // Kept: the replicas' logs, writes.jsonl and leases.jsonl are the evidence.
        let kept = dir.keep();
        panic!(
            "{} violation(s) (logs in {}):\n{}",
            report.violations.len(),
            kept.join("logs").display(),
            soak::report::text(&report)
        );
    }
}
