//! The stable plugin's verdict on a canary's failures: when a canary's
//! call fails (or its proposal is refused) on an object, the stable plugin
//! is run on the same input, off the reconcile's path, and the failure is
//! charged to the canary only if the stable plugin does not fail the same
//! way. An object whose input makes every build fail (its author's doing)
//! then counts against no canary.
//!
//! It owns a bounded queue worked by one task of its own, as the shadow's
//! ([`crate::slot::shadow`]): a reconcile only offers its input; a full queue
//! drops the offer (the failure stays unverified and is charged after
//! [`crate::judging::tally::CHECK_PATIENCE`], or verified on its next failure).
//! Nothing the stable plugin proposes here is applied or compared.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;

use crate::apply::policy::PolicyConfig;
use crate::apply::{Limits, validate};
use crate::crd::Jinghzhu;
use crate::runtime::LoadedPlugin;

/// Checks that may wait in the queue.
pub const CHECK_QUEUE: usize = 32;

/// Verdicts kept for the reader before more are dropped.
const VERDICTS_KEPT: usize = 1024;

/// One input the canary failed on (or had its proposal refused on).
struct Check {
    jz: Arc<Jinghzhu>,
    pods: Vec<Pod>,
    key: String,
    uid: String,
    refused: bool,
    limits: Limits,
    policy: PolicyConfig,
}

/// The stable plugin's verdict on one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The object (its UID).
    pub uid: String,
    /// Whether the canary's proposal was refused (else its call failed).
    pub refused: bool,
    /// Whether the stable plugin failed (or was refused) the same way.
    pub shared: bool,
}

/// The stable plugin and its bounded queue of checks.
pub struct StableCheck {
    calls: mpsc::Sender<Check>,
    worker: tokio::task::JoinHandle<()>,
}

impl Drop for StableCheck {
    fn drop(&mut self) {
        self.worker.abort();
    }
}

impl StableCheck {
    /// Starts the checks' worker for `stable`; verdicts arrive on the
    /// returned channel.
    pub fn start(stable: Arc<LoadedPlugin>) -> (Self, mpsc::Receiver<Verdict>) {
        let (calls, mut waiting) = mpsc::channel::<Check>(CHECK_QUEUE);
        let (verdicts, reader) = mpsc::channel(VERDICTS_KEPT);
        let worker = tokio::spawn(async move {
            while let Some(check) = waiting.recv().await {
                let verdict = run(&stable, check).await;
                // A full channel drops the verdict (its reader lags).
                let _ = verdicts.try_send(verdict);
            }
        });
        (Self { calls, worker }, reader)
    }

    /// Offers the input the canary failed on (`refused`: had its proposal
    /// refused on); never waits, dropped when the queue is full.
    pub fn offer(
        &self,
        (jz, pods): (&Arc<Jinghzhu>, &[Pod]),
        (key, uid): (&str, &str),
        refused: bool,
        (limits, policy): (&Limits, &PolicyConfig),
    ) {
        if let Ok(permit) = self.calls.try_reserve() {
            permit.send(Check {
                jz: jz.clone(),
                pods: pods.to_vec(),
                key: key.to_string(),
                uid: uid.to_string(),
                refused,
                limits: limits.clone(),
                policy: policy.clone(),
            });
        } else {
            tracing::debug!(
                object = key,
                "stable-check queue full; the canary's failure stays unverified"
            );
        }
    }
}

/// Runs the stable plugin on one check's input: shared when it fails too,
/// or, for a refused proposal, when its own proposal is refused as well.
async fn run(stable: &Arc<LoadedPlugin>, check: Check) -> Verdict {
    let Check {
        jz,
        pods,
        key,
        uid,
        refused,
        limits,
        policy,
    } = check;
    let shared = match stable.reconcile_raw(&jz, &pods, &key).await {
        Err(_) => true,
        Ok(_) if !refused => false,
        Ok(raw) => validate::check_bounds(&raw.output, &jz, &pods, &limits)
            .and_then(|()| validate::validate(&jz, &pods, &raw.into_actions(), &policy))
            .is_err(),
    };
    tracing::debug!(object = %key, refused, shared, stable = %stable.describe(), "stable plugin's verdict on a canary's failure");
    Verdict {
        uid,
        refused,
        shared,
    }
}
