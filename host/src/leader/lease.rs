//! The elector: competes for a `coordination.k8s.io/v1` Lease the way
//! client-go's `leaderelection` does, and publishes the outcome to a
//! [`Leadership`].
//!
//! One loop per host. Each attempt reads the Lease and
//! - creates it holding it, if there is none;
//! - leaves it alone if another identity holds it and this host has seen
//!   its record change within the record's `leaseDurationSeconds` (judged on
//!   this host's monotonic clock from when it *observed* the change, so clock
//!   offsets between nodes do not matter);
//! - otherwise writes itself in as holder (renewing, or taking over an
//!   expired or released Lease) with a `replace` carrying the
//!   `resourceVersion` it read: if anyone wrote in between, the API server
//!   answers 409 Conflict and this attempt fails, so two hosts can never both
//!   believe they took it.
//!
//! A leader renews every retry period; if no renewal succeeds within the
//! renew deadline (counted from when the last successful one was *sent*:
//! from the start of its attempt, before the read that precedes the
//! write) its term ends (see the argument in [`super`]). A standby retries every retry
//! period, sooner when the holder's Lease would expire, and at once when a
//! watch on the Lease reports a change (a release), so a handover after a
//! graceful shutdown takes well under a second. [`Elector::release`] gives
//! the Lease up the way client-go's `ReleaseOnCancel` does.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::{Leadership, State};

/// controller-runtime's defaults (and client-go's recommended values).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// See [`DEFAULT_LEASE_DURATION`].
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// See [`DEFAULT_LEASE_DURATION`].
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// How to compete for the Lease.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// Name of the Lease.
    pub lease_name: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// This host's identity (unique among the candidates).
    pub identity: String,
    /// How long a Lease stays valid after its last renewal (non-leaders wait this long).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before its term ends.
    pub renew_deadline: Duration,
    /// How often every candidate tries to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// Checks the durations the way client-go does: lease duration > renew
    /// deadline > 1.2 × retry period, and a lease duration of at least 1 s.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_duration < Duration::from_secs(1) {
            return Err(format!(
                "--leader-elect-lease-duration must be at least 1s, got {:?}",
                self.lease_duration
            ));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "--leader-elect-renew-deadline ({:?}) must be shorter than --leader-elect-lease-duration ({:?}): \
                 the gap is what keeps an old leader's last requests from overlapping the next leader",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period.mul_f64(1.2) >= self.renew_deadline {
            return Err(format!(
                "--leader-elect-retry-period ({:?}) must be above zero and below --leader-elect-renew-deadline / 1.2 ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        if self.lease_name.is_empty() || self.namespace.is_empty() || self.identity.is_empty() {
            return Err("the Lease name, namespace and identity must not be empty".into());
        }
        Ok(())
    }

    /// The lease duration in whole seconds, as the Lease records it.
    pub fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs_f64().ceil() as u64).unwrap_or(i32::MAX)
    }
}

/// The running elector; [`Elector::release`] it on shutdown.
pub struct Elector {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    watch_task: tokio::task::JoinHandle<()>,
}

impl Elector {
    /// Starts competing for the Lease; this host is a standby until it wins.
    /// `status` is set to 1 while leading (`leader_election_master_status`).
    pub fn start(
        client: Client,
        config: LeaderElectionConfig,
        status: Gauge,
    ) -> Result<(Leadership, Elector), String> {
        config.validate()?;
        let leadership = Leadership::elected();
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let wake = std::sync::Arc::new(Notify::new());
        let watch_task = tokio::spawn(watch_lease(
            api.clone(),
            config.lease_name.clone(),
            wake.clone(),
        ));
        let (stop, stop_rx) = watch::channel(false);
        tracing::info!(
            lease = %format!("{}/{}", config.namespace, config.lease_name),
            identity = %config.identity,
            lease_duration = ?config.lease_duration,
            renew_deadline = ?config.renew_deadline,
            retry_period = ?config.retry_period,
            "leader election: standing by until this host holds the Lease"
        );
        let candidate = Candidate {
            api,
            config,
            observed: None,
        };
        let task = tokio::spawn(run(candidate, leadership.clone(), status, stop_rx, wake));
        Ok((
            leadership,
            Elector {
                stop,
                task,
                watch_task,
            },
        ))
    }

    /// Stops competing; if this host holds the Lease, gives it up
    /// (`holderIdentity: ""`, `leaseDurationSeconds: 1`) so the next host
    /// takes over at once. Call after the running reconciles have finished.
    pub async fn release(self) {
        self.stop.send_replace(true);
        if tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .is_err()
        {
            tracing::warn!(
                "leader election: releasing the Lease took more than 10 s; exiting anyway"
            );
        }
        self.watch_task.abort();
    }
}

/// What one attempt found.
#[derive(Debug)]
enum Attempt {
    /// This host holds the Lease now.
    Holding,
    /// Another identity holds a valid Lease, expiring (as far as we know) at `expires`.
    HeldBy { holder: String, expires: Instant },
    /// The attempt failed (API error, conflict, timeout).
    Failed(String),
}

struct Candidate {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    /// The Lease record last seen, and when this host first saw it.
    observed: Option<(LeaseSpec, Instant)>,
}

impl Candidate {
    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let wall = MicroTime(Timestamp::now());
        let name = self.config.lease_name.clone();
        let current = match self.api.get_opt(&name).await {
            Ok(lease) => lease,
            Err(err) => return Attempt::Failed(format!("reading the Lease: {err}")),
        };
        // A change is observed when the answer showing it arrives (not when
        // the read was sent: the holder may have renewed in between), so
        // another holder's expiry is never counted from too early.
        let now = Instant::now();
        let Some(lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(self.config.lease_seconds()),
                    acquire_time: Some(wall.clone()),
                    renew_time: Some(wall),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observed = Some((created.spec.unwrap_or_default(), now));
                    Attempt::Holding
                }
                Err(err) => Attempt::Failed(format!("creating the Lease: {err}")),
            };
        };

        let spec = lease.spec.clone().unwrap_or_default();
        let observed_at = match &self.observed {
            Some((seen, at)) if *seen == spec => *at,
            _ => {
                self.observed = Some((spec.clone(), now));
                now
            }
        };
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.config.identity;
        if !holder.is_empty() && !mine {
            let seconds =
                u64::try_from(spec.lease_duration_seconds.unwrap_or(1).max(1)).unwrap_or(1);
            let expires = observed_at + Duration::from_secs(seconds);
            if now < expires {
                return Attempt::HeldBy { holder, expires };
            }
        }

        let mut next = spec.clone();
        next.holder_identity = Some(self.config.identity.clone());
        next.lease_duration_seconds = Some(self.config.lease_seconds());
        next.renew_time = Some(wall.clone());
        if !mine {
            next.acquire_time = Some(wall);
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        let mut updated = lease;
        updated.spec = Some(next);
        // `updated` keeps the resourceVersion we read: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(written) => {
                self.observed = Some((written.spec.unwrap_or_default(), now));
                Attempt::Holding
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Attempt::Failed("another host wrote the Lease first (409 Conflict)".into())
            }
            Err(err) => Attempt::Failed(format!("writing the Lease: {err}")),
        }
    }

    /// Gives the Lease up if this host holds it. Returns whether it did.
    async fn release(&mut self) -> Result<bool, String> {
        let name = self.config.lease_name.clone();
        let Some(mut lease) = self
            .api
            .get_opt(&name)
            .await
            .map_err(|err| format!("reading the Lease: {err}"))?
        else {
            return Ok(false);
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        let wall = MicroTime(Timestamp::now());
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(wall.clone());
        spec.renew_time = Some(wall);
        lease.spec = Some(spec);
        self.api
            .replace(&name, &PostParams::default(), &lease)
            .await
            .map_err(|err| format!("writing the released Lease: {err}"))?;
        Ok(true)
    }
}

async fn run(
    mut candidate: Candidate,
    leadership: Leadership,
    status: Gauge,
    mut stop: watch::Receiver<bool>,
    wake: std::sync::Arc<Notify>,
) {
    let config = candidate.config.clone();
    let lease = format!("{}/{}", config.namespace, config.lease_name);
    let mut term = 0u64;
    // While leading: when the last successful renewal was sent.
    let mut renewed_at: Option<Instant> = None;
    let mut last_holder: Option<String> = None;
    loop {
        if *stop.borrow_and_update() {
            break;
        }
        let started = Instant::now();
        // A leader's attempt may not outlive its term; a standby's is bounded too.
        let limit = renewed_at.map_or(started + config.renew_deadline, |at| {
            at + config.renew_deadline
        });
        let attempt = tokio::time::timeout_at(limit, candidate.try_acquire_or_renew())
            .await
            .unwrap_or_else(|_| Attempt::Failed("no answer from the API server in time".into()));
        let mut next = started + jittered(config.retry_period);
        match attempt {
            Attempt::Holding => {
                if renewed_at.is_none() {
                    term += 1;
                    status.set(1);
                    tracing::info!(%lease, identity = %config.identity, term, "leader election: this host is the leader now");
                }
                renewed_at = Some(started);
                last_holder = Some(config.identity.clone());
                leadership.set(State::Leading {
                    term,
                    valid_until: Some(started + config.renew_deadline),
                });
            }
            Attempt::HeldBy { holder, expires } => {
                if renewed_at.take().is_some() {
                    status.set(0);
                    leadership.set(State::Standby);
                    tracing::warn!(%lease, %holder, "leader election: lost the Lease to another host; reconciles stop");
                }
                if last_holder.as_deref() != Some(holder.as_str()) {
                    tracing::info!(%lease, leader = %holder, "leader election: standing by");
                    last_holder = Some(holder);
                }
                // Try again the moment the holder's Lease would expire.
                next = next.min(expires + Duration::from_millis(10));
            }
            Attempt::Failed(why) => match renewed_at {
                Some(at) if Instant::now() >= at + config.renew_deadline => {
                    renewed_at = None;
                    status.set(0);
                    leadership.set(State::Standby);
                    tracing::error!(%lease, error = %why, renew_deadline = ?config.renew_deadline,
                        "leader election: could not renew within the renew deadline; reconciles stop");
                }
                Some(_) => {
                    tracing::warn!(%lease, error = %why, "leader election: renewing failed; retrying")
                }
                None => tracing::debug!(%lease, error = %why, "leader election: could not acquire"),
            },
        }
        if let Some(at) = renewed_at {
            next = next.min(at + config.renew_deadline);
        }
        let standby = renewed_at.is_none();
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = wake.notified(), if standby => {}
            _ = stop.changed() => {}
        }
    }

    if renewed_at.is_some() {
        status.set(0);
        leadership.set(State::Standby);
        match tokio::time::timeout(config.renew_deadline, candidate.release()).await {
            Ok(Ok(true)) => {
                tracing::info!(%lease, "leader election: released the Lease for the next host")
            }
            Ok(Ok(false)) => {}
            Ok(Err(err)) => {
                tracing::warn!(%lease, error = %err, "leader election: could not release the Lease; it expires on its own")
            }
            Err(_) => {
                tracing::warn!(%lease, "leader election: releasing the Lease timed out; it expires on its own")
            }
        }
    }
}

/// Wakes the elector whenever the Lease changes (a release is then noticed
/// at once). Polling still works if this watch cannot run.
async fn watch_lease(api: Api<Lease>, name: String, wake: std::sync::Arc<Notify>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(_) => wake.notify_one(),
            Err(err) => {
                tracing::debug!(error = %err, "leader election: Lease watch error; polling meanwhile")
            }
        }
    }
}

/// `period` plus up to 10%, so standbys do not all ask at the same instant.
pub fn jittered(period: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    let fraction = (hasher.finish() % 1000) as f64 / 10_000.0;
    period.mul_f64(1.0 + fraction)
}

/// Parses a duration the way Go flags spell it: `15s`, `500ms`, `1m30s`, `2h`
/// (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err("empty duration; write e.g. 15s or 500ms".into());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?}: a number needs a unit (ms, s, m, h)"))?;
        let (number, tail) = rest.split_at(digits);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a duration; write e.g. 15s or 500ms"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => {
                return Err(format!(
                    "{text:?}: unknown unit {other:?} (use ms, s, m or h)"
                ));
            }
        };
        total +=
            Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{text:?}: {e}"))?;
        rest = next;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: "wasm-operator".into(),
            namespace: "default".into(),
            identity: "me".into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    #[test]
    fn durations_parse_like_go_flags() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("15").is_ok());
        assert!(parse_duration("15x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn defaults_are_valid_and_bad_orderings_say_which_flag() {
        assert_eq!(config().validate(), Ok(()));
        let mut bad = config();
        bad.renew_deadline = Duration::from_secs(15);
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("--leader-elect-renew-deadline")
        );
        let mut bad = config();
        bad.retry_period = Duration::from_secs(9);
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("--leader-elect-retry-period")
        );
        let mut bad = config();
        bad.lease_duration = Duration::from_millis(500);
        assert!(bad.validate().unwrap_err().contains("at least 1s"));
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for _ in 0..100 {
            let d = jittered(Duration::from_secs(2));
            assert!(
                d >= Duration::from_secs(2) && d <= Duration::from_millis(2200),
                "{d:?}"
            );
        }
    }
}
