//! Leader election: which of several hosts may reconcile.
//!
//! What it may import: only the shared types (`cached_pod`). The controller
//! asks it whether to reconcile; it never calls back up.
//!
//! Every host watches and caches (standbys stay warm, as controller-runtime's
//! "warm-up" does) and queues objects, but a reconcile first awaits
//! [`Leadership::wait_leading`]; only the holder of a
//! `coordination.k8s.io/v1` Lease gets past it. The elector ([`lease`])
//! follows client-go's `leaderelection` package: optimistic concurrency on the
//! Lease's `resourceVersion`, expiry judged on the candidate's own clock from
//! when it last saw the record change, renewals every retry period, and a
//! release on shutdown (`holderIdentity: ""`, `leaseDurationSeconds: 1`) so the
//! next host takes over at once. Without `--leader-elect` the host always leads
//! ([`Leadership::always`]).
//!
//! # Why a leader that cannot renew never overlaps with the next one
//!
//! Let `t` be the moment the leader *sent* its last successful renewal. The
//! leader's term ends at `t + renew_deadline` (10 s by default) on its own
//! monotonic clock: from then on no reconcile starts, and every running one is
//! cancelled ([`Term::lost`]): the reconcile future is dropped, so no API
//! request it has not yet sent is ever sent, and a plugin call still running
//! on the blocking pool (bounded by the plugin deadline) has its output
//! discarded. A candidate may take the Lease only after it has seen the
//! record unchanged for `lease_duration` (15 s) on *its* clock, counted from
//! when it observed the renewal, which is after `t`. So the earliest takeover
//! is `t + lease_duration`, and the `lease_duration - renew_deadline` margin
//! (5 s) is left for the requests that were already on the wire when the old
//! leader stopped; the API server handles a create, delete or status patch
//! in milliseconds. Clock *rate* differences between nodes (not offsets:
//! nothing compares timestamps across machines) eat into that margin only
//! negligibly.
//!
//! The timer that cancels running reconciles is not enough on its own: a
//! process stopped past its term (SIGSTOP, a stall) and resumed may find an
//! API answer in its socket and the timer due at once, and tokio may poll
//! the reconcile first. So every write a reconcile sends also passes a
//! fence ([`crate::apply::fence`]) that reads the monotonic clock right
//! before the write and compares it with the term's `valid_until`
//! ([`TermHold::valid_until`]): once it has passed, nothing more is sent.
//!
//! On SIGTERM the leader keeps renewing while its running reconciles finish
//! (each bounded by the plugin deadline plus a few API calls), then releases
//! the Lease.
//!
//! - [`lease`]: the elector loop on the Lease API.
//! - [`catch_up`]: after taking over, wait until the pod cache shows every pod
//!   the API server has, so the first reconciles never act on a cache that
//!   lags behind the previous leader's last creates.

pub mod catch_up;
pub mod lease;

use std::time::Duration;

use futures::Stream;
use tokio::sync::watch;
use tokio::time::Instant;

pub use lease::{Elector, LeaderElectionConfig};

/// Whether this host leads, and since which term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// This host holds the Lease until `valid_until` (renewals extend it);
    /// `term` counts acquisitions (a new term after each takeover).
    Leading {
        /// Acquisitions so far, this one included (0: no election, always leading).
        term: u64,
        /// When the term ends unless renewed (`None`: never).
        valid_until: Option<Instant>,
    },
    /// Another host leads (or nobody does yet).
    Standby,
}

/// A shared view of this host's leadership; cheap to clone.
#[derive(Clone, Debug)]
pub struct Leadership {
    state: watch::Sender<State>,
    stopping: watch::Sender<bool>,
    elected: bool,
}

impl Default for Leadership {
    fn default() -> Self {
        Self::always()
    }
}

impl Leadership {
    /// No election: this host always leads (a single replica, local runs, tests).
    pub fn always() -> Self {
        Self {
            state: watch::Sender::new(State::Leading {
                term: 0,
                valid_until: None,
            }),
            stopping: watch::Sender::new(false),
            elected: false,
        }
    }

    /// A standby until the elector says otherwise.
    pub(crate) fn elected() -> Self {
        Self {
            state: watch::Sender::new(State::Standby),
            stopping: watch::Sender::new(false),
            elected: true,
        }
    }

    /// Whether leadership comes from an election (`--leader-elect`).
    pub fn is_elected(&self) -> bool {
        self.elected
    }

    /// The current state.
    pub fn state(&self) -> State {
        *self.state.borrow()
    }

    /// True while this host leads and its term has not run out.
    pub fn is_leading(&self) -> bool {
        leading_term(&self.state()).is_some()
    }

    /// Waits until this host leads. `None` once the host is shutting down
    /// (a reconcile still waiting then has nothing to do).
    pub async fn wait_leading(&self) -> Option<Term> {
        let mut state = self.state.subscribe();
        let mut stopping = self.stopping.subscribe();
        loop {
            if *stopping.borrow_and_update() {
                return None;
            }
            let current = *state.borrow_and_update();
            if let Some(term) = leading_term(&current) {
                return Some(Term {
                    term,
                    state: self.state.subscribe(),
                });
            }
            // Standby, or a term that ran out before the elector noticed.
            let expired_wait = async {
                match current {
                    State::Leading { .. } => tokio::time::sleep(Duration::from_millis(50)).await,
                    State::Standby => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = state.changed() => if changed.is_err() { return None; },
                changed = stopping.changed() => if changed.is_err() { return None; },
                () = expired_wait => {}
            }
        }
    }

    /// Yields once each time this host becomes the leader (the controller
    /// re-queues every object then).
    pub fn acquisitions(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut rx = self.state.subscribe();
        let current = *rx.borrow_and_update();
        let last = match current {
            State::Leading { term, .. } => Some(term),
            State::Standby => None,
        };
        futures::stream::unfold((rx, last), |(mut rx, mut last)| async move {
            loop {
                rx.changed().await.ok()?;
                let state = *rx.borrow_and_update();
                if let State::Leading { term, .. } = state
                    && last != Some(term)
                {
                    last = Some(term);
                    return Some(((), (rx, last)));
                }
            }
        })
    }

    /// Shutting down: reconciles that have not started stop waiting for
    /// leadership; running ones go on (the elector keeps renewing until it
    /// is told to release).
    pub fn stop_new_work(&self) {
        self.stopping.send_replace(true);
    }

    /// Whether [`Leadership::stop_new_work`] was called.
    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    pub(crate) fn set(&self, state: State) {
        self.state.send_replace(state);
    }
}

fn leading_term(state: &State) -> Option<u64> {
    match *state {
        State::Leading { term, valid_until } => {
            (valid_until.is_none_or(|until| Instant::now() < until)).then_some(term)
        }
        State::Standby => None,
    }
}

/// One term of leadership, held by a running reconcile.
#[derive(Debug)]
pub struct Term {
    term: u64,
    state: watch::Receiver<State>,
}

impl Term {
    /// Which term (0 without election).
    pub fn number(&self) -> u64 {
        self.term
    }

    /// A handle that says, whenever asked, until when this term is valid
    /// (for the write fence; cheap to clone).
    pub fn hold(&self) -> TermHold {
        TermHold {
            term: self.term,
            state: self.state.clone(),
        }
    }

    /// Resolves when this term is over: another host leads, or the renew
    /// deadline passed without a renewal. Never resolves without election.
    pub async fn lost(&mut self) {
        loop {
            let current = *self.state.borrow_and_update();
            let valid_until = match current {
                State::Leading { term, valid_until } if term == self.term => valid_until,
                _ => return,
            };
            let expiry = async {
                match valid_until {
                    Some(until) => tokio::time::sleep_until(until).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = self.state.changed() => if changed.is_err() { return; },
                () = expiry => {
                    if leading_term(&self.state.borrow()) != Some(self.term) {
                        return;
                    }
                }
            }
        }
    }
}

/// One term's validity, read at each write (see [`Term::hold`]).
#[derive(Debug, Clone)]
pub struct TermHold {
    term: u64,
    state: watch::Receiver<State>,
}

impl TermHold {
    /// `None` once the term is over (another term or standby);
    /// `Some(None)` for a term without expiry (no election); else when it
    /// runs out unless renewed, as the elector last set it (from when its
    /// last successful renewal was sent, see [`lease`]).
    pub fn valid_until(&self) -> Option<Option<Instant>> {
        match *self.state.borrow() {
            State::Leading { term, valid_until } if term == self.term => Some(valid_until),
            _ => None,
        }
    }
}

/// This host's identity in the Lease: `POD_NAME` when set (the Deployment
/// passes it through the downward API), else the hostname plus a random
/// suffix, so two processes on one machine never share an identity.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "wasm-operator".to_string());
    format!("{host}_{}", random_suffix())
}

fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn a_standby_waits_until_it_leads_and_its_term_ends_when_the_deadline_passes() {
        let leadership = Leadership::elected();
        let waiter = tokio::spawn({
            let leadership = leadership.clone();
            async move { leadership.wait_leading().await.map(|t| t.number()) }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "a standby must not reconcile");
        let until = Instant::now() + Duration::from_millis(200);
        leadership.set(State::Leading {
            term: 1,
            valid_until: Some(until),
        });
        assert_eq!(waiter.await.expect("waiter"), Some(1));

        let mut term = leadership.wait_leading().await.expect("leading");
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(2), term.lost())
            .await
            .expect("the term ends at its deadline even if nobody says so");
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(!leadership.is_leading());
    }

    #[tokio::test]
    async fn a_term_s_hold_follows_renewals_and_ends_with_the_term() {
        let leadership = Leadership::elected();
        let first = Instant::now() + Duration::from_secs(10);
        leadership.set(State::Leading {
            term: 1,
            valid_until: Some(first),
        });
        let hold = leadership.wait_leading().await.expect("leading").hold();
        assert_eq!(hold.valid_until(), Some(Some(first)));
        let renewed = first + Duration::from_secs(2);
        leadership.set(State::Leading {
            term: 1,
            valid_until: Some(renewed),
        });
        assert_eq!(
            hold.valid_until(),
            Some(Some(renewed)),
            "a renewal extends it"
        );
        leadership.set(State::Standby);
        assert_eq!(hold.valid_until(), None);
        leadership.set(State::Leading {
            term: 2,
            valid_until: Some(renewed),
        });
        assert_eq!(hold.valid_until(), None, "a later term is not this one");
        let always = Leadership::always();
        let hold = always.wait_leading().await.expect("always").hold();
        assert_eq!(hold.valid_until(), Some(None));
    }

    #[tokio::test]
    async fn shutting_down_releases_waiters_but_not_running_terms() {
        let leadership = Leadership::elected();
        let waiter = tokio::spawn({
            let leadership = leadership.clone();
            async move { leadership.wait_leading().await.is_none() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        leadership.stop_new_work();
        assert!(waiter.await.expect("waiter"), "a waiting standby gives up");

        let always = Leadership::always();
        let mut term = always.wait_leading().await.expect("always leads");
        always.stop_new_work();
        assert!(
            tokio::time::timeout(Duration::from_millis(100), term.lost())
                .await
                .is_err(),
            "a running reconcile keeps its term during shutdown"
        );
    }

    #[tokio::test]
    async fn acquisitions_yield_once_per_new_term() {
        let leadership = Leadership::elected();
        let mut acquisitions = Box::pin(leadership.acquisitions());
        let far = Some(Instant::now() + Duration::from_secs(60));
        leadership.set(State::Leading {
            term: 1,
            valid_until: far,
        });
        tokio::time::timeout(Duration::from_secs(1), acquisitions.next())
            .await
            .expect("first acquisition");
        // A renewal (same term) is not an acquisition.
        leadership.set(State::Leading {
            term: 1,
            valid_until: Some(Instant::now() + Duration::from_secs(61)),
        });
        leadership.set(State::Standby);
        leadership.set(State::Leading {
            term: 2,
            valid_until: far,
        });
        tokio::time::timeout(Duration::from_secs(1), acquisitions.next())
            .await
            .expect("second acquisition");
        assert!(
            tokio::time::timeout(Duration::from_millis(100), acquisitions.next())
                .await
                .is_err()
        );
    }

    #[test]
    fn identities_of_two_processes_on_one_host_differ() {
        // POD_NAME is not set in unit tests, so the hostname path is taken.
        if std::env::var("POD_NAME").is_err() {
            assert_ne!(default_identity(), default_identity());
        }
    }
}
