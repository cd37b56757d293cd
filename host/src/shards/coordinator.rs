//! The loop on the shard Leases, one per replica.
//!
//! Every retry period it lists the Leases labelled `jinghzhu.io/lease-kind`
//! in the Lease namespace (one request), renews its own membership Lease
//! (`<prefix>-member-<hash of identity>`, holder = identity), counts the
//! live replicas (membership Leases whose record changed within their lease
//! duration, judged on this replica's clock as [`crate::leader::lease`]
//! does), leaves out the ghosts among them (members that never take the
//! free shards they are given, see [`super::ghosts`]), computes the
//! assignment ([`super::assign`]) and, shard by shard:
//! - renews the shard Leases it holds (`<prefix>-shard-07`, holder =
//!   identity, so `kubectl get leases` shows who owns what), each once
//!   [`shard_renew_interval`] has passed since its last renewal (every
//!   other round by default: a third of the renew deadline), so a replica
//!   holding a dozen shards does not write a dozen Leases every round;
//! - drains the held shards the assignment gives to someone else, and
//!   releases each Lease (`holderIdentity: ""`) once no reconcile of the
//!   shard runs any more (cutting the stragglers after [`DRAIN_TIMEOUT`]);
//! - takes the shards assigned to it whose Lease is free, released or
//!   expired (unchanged for its lease duration), with a `replace` carrying
//!   the `resourceVersion` it read, so two replicas never both win.
//!
//! A Lease's duration counts as at most the fleet's own, and a shard
//! Lease's holder that is not a live member extends nothing by renewing it:
//! it expires a lease duration after this replica first saw that holder
//! (see `Loop::fresh`). The steps of a round are named: `list`, `observe`,
//! `member_write`, `members` (the ghost rule), `plan` per shard, `send`,
//! `record`.
//!
//! A shard whose renewal has not succeeded within the renew deadline
//! (counted from when the last successful one was sent) is dropped at once
//! and its running reconciles cancelled, as a leader's term ends in
//! [`crate::leader`]. A watch on the Leases wakes the loop when a holder
//! changes (a release, a new replica), so a graceful handover takes about
//! one round trip; a crashed replica's shards are taken over within the
//! lease duration plus a retry period of its last renewal.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::ghosts::{Ghosts, ShardView, ghost_grace};
use super::hash::{label_value, member_lease_name, shard_lease_name};
use super::{Phase, Shards, assign};
use crate::leader::lease::{LeaderElectionConfig, jittered};

/// Label on every Lease of the sharding protocol: `shard` or `member`.
pub const LEASE_KIND_LABEL: &str = "jinghzhu.io/lease-kind";
/// Annotation on a shard Lease: its shard as in the object label (`7-of-32`).
pub const SHARD_ANNOTATION: &str = "jinghzhu.io/shard";
/// How long a draining shard waits for its running reconciles before they
/// are cancelled and the Lease released anyway.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);
/// How long after a successful renewal a held shard's Lease is renewed
/// again: a third of the renew deadline, and never less than the retry
/// period (with the defaults, 10 s / 3: every other 2 s round). A failed
/// renewal is retried every round, so two or three tries fit before the
/// deadline; the takeover bound after a crash does not depend on it (the
/// others count the lease duration from the last change they saw).
pub fn shard_renew_interval(lease: &LeaderElectionConfig) -> Duration {
    (lease.renew_deadline / 3).max(lease.retry_period)
}

/// The most shards `--shards` accepts.
pub const MAX_SHARDS: u32 = 1024;

/// How to shard.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Number of virtual shards (the same on every replica).
    pub count: u32,
    /// Lease timing, namespace and identity (the `--leader-elect-*` flags);
    /// `lease_name` is the prefix of the shard and membership Lease names.
    pub lease: LeaderElectionConfig,
}

impl ShardConfig {
    /// Checks the shard count and the Lease timing.
    pub fn validate(&self) -> Result<(), String> {
        if self.count == 0 || self.count > MAX_SHARDS {
            return Err(format!(
                "--shards must be between 1 and {MAX_SHARDS} (0 turns sharding off), got {}",
                self.count
            ));
        }
        self.lease.validate()
    }
}

/// The running loop; [`Coordinator::release`] it on shutdown.
pub struct Coordinator {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    watch_task: tokio::task::JoinHandle<()>,
}

impl Coordinator {
    /// Starts taking part; this replica holds no shard until the loop takes some.
    pub fn start(client: Client, config: ShardConfig) -> Result<(Shards, Coordinator), String> {
        config.validate()?;
        let lease = &config.lease;
        let shards = Shards::new(
            config.count,
            &lease.identity,
            &lease.namespace,
            &lease.lease_name,
        );
        let api: Api<Lease> = Api::namespaced(client, &lease.namespace);
        let wake = Arc::new(Notify::new());
        let watch_task = tokio::spawn(watch_holders(api.clone(), wake.clone()));
        let (stop, stop_rx) = watch::channel(false);
        tracing::info!(
            shards = config.count,
            namespace = %lease.namespace,
            prefix = %lease.lease_name,
            identity = %lease.identity,
            lease_duration = ?lease.lease_duration,
            renew_deadline = ?lease.renew_deadline,
            retry_period = ?lease.retry_period,
            "sharding: joining; shards are taken as their Leases come free"
        );
        let state = Loop {
            api,
            config,
            shards: shards.clone(),
            observed: HashMap::new(),
            renewed_at: HashMap::new(),
            holder_seen: HashMap::new(),
            ghosts: Ghosts::default(),
            rejoin: false,
            last_ghosts: BTreeSet::new(),
            member_renewed_at: None,
        };
        let task = tokio::spawn(state.run(stop_rx, wake));
        Ok((
            shards,
            Coordinator {
                stop,
                task,
                watch_task,
            },
        ))
    }

    /// Stops taking part: drains every held shard (running reconciles
    /// finish), releases its Lease and the membership Lease, so the others
    /// take over at once. Call after the controller has stopped.
    pub async fn release(self) {
        self.stop.send_replace(true);
        let limit = DRAIN_TIMEOUT + Duration::from_secs(10);
        if tokio::time::timeout(limit, self.task).await.is_err() {
            tracing::warn!(
                "sharding: releasing the shards took too long; exiting anyway (their Leases expire on their own)"
            );
        }
        self.watch_task.abort();
    }

    /// Stops at once without releasing anything, as a crash does (tests).
    pub fn abort(self) {
        self.task.abort();
        self.watch_task.abort();
    }
}

/// A write's kind and shard, its outcome, and when it was sent.
type Written = (Op, Result<Lease, String>, Instant);

enum Op {
    Renew(u32),
    Take(u32),
    Release(u32),
}

struct Loop {
    api: Api<Lease>,
    config: ShardConfig,
    shards: Shards,
    /// Per Lease name: the resourceVersion last seen and when this replica first saw it.
    observed: HashMap<String, (String, Instant)>,
    /// Per held shard: when its last successful renewal was sent.
    renewed_at: HashMap<u32, Instant>,
    /// Per Lease name: its holder and when this replica first saw it hold it.
    holder_seen: HashMap<String, (String, Instant)>,
    /// The ghost rule's state ([`super::ghosts`]).
    ghosts: Ghosts,
    /// Re-acquire the membership Lease at the next renewal.
    rejoin: bool,
    /// The ghosts of the last round (logged when they change).
    last_ghosts: BTreeSet<String>,
    /// When the last successful renewal of the membership Lease was sent.
    member_renewed_at: Option<Instant>,
}

/// The members of one round.
struct MemberView {
    /// Live membership Leases' holders (and this replica unless stopping).
    live: BTreeSet<String>,
    /// Of those, the ones not judged ghosts: the assignment's members.
    admitted: BTreeSet<String>,
    /// When the Leases of the round were listed.
    listed_at: Instant,
}

/// A Lease's kind label (`shard`, `member`).
fn kind_of(lease: &Lease) -> &str {
    lease
        .labels()
        .get(LEASE_KIND_LABEL)
        .map(String::as_str)
        .unwrap_or_default()
}

fn holder(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default()
}

impl Loop {
    fn cfg(&self) -> &LeaderElectionConfig {
        &self.config.lease
    }

    /// Whether another holder's Lease is still valid (its record changed
    /// within its lease duration, as this replica saw it). The duration is
    /// never taken as longer than this fleet's own (`--leader-elect-lease-
    /// duration`): anyone who can write a Lease could otherwise write
    /// `leaseDurationSeconds: 2147483647` and hold a shard, or count as a
    /// member, for good. With `members` (a shard Lease), a holder that is
    /// not among them (no live membership Lease) extends nothing by
    /// renewing: its hold counts from when this replica first saw it hold
    /// the Lease. A working replica is always a member while it holds a
    /// shard: it renews its membership Lease every round (while stopping
    /// too, until its shards are released), and it drops every shard when
    /// that renewal has not succeeded within the renew deadline, and no
    /// hold of its lasts past the membership's (`record`,
    /// `expire_unrenewed`): by the time the others stop counting it as a
    /// member (a lease duration after its last renewal they saw), it holds
    /// nothing.
    fn fresh(&self, lease: &Lease, now: Instant, members: Option<&BTreeSet<String>>) -> bool {
        let held_by = holder(lease);
        if held_by.is_empty() {
            return false;
        }
        let seconds = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .unwrap_or(1)
            .clamp(1, self.cfg().lease_seconds().max(1));
        let name = lease.name_any();
        let stranger = members.is_some_and(|m| !m.contains(held_by));
        let seen = if stranger {
            self.holder_seen.get(&name).map_or(now, |(_, at)| *at)
        } else {
            self.observed.get(&name).map_or(now, |(_, at)| *at)
        };
        now < seen + Duration::from_secs(u64::try_from(seconds).unwrap_or(1))
    }

    fn lease_spec(&self, previous: Option<&LeaseSpec>, holder: &str, seconds: i32) -> LeaseSpec {
        let wall = MicroTime(Timestamp::now());
        let mut spec = previous.cloned().unwrap_or_default();
        let taking = spec.holder_identity.as_deref() != Some(holder);
        spec.holder_identity = Some(holder.to_string());
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(wall.clone());
        if taking {
            spec.acquire_time = Some(wall);
            spec.lease_transitions = Some(
                previous
                    .and_then(|p| p.lease_transitions)
                    .unwrap_or(0)
                    .saturating_add(i32::from(previous.is_some())),
            );
        }
        spec
    }

    fn new_lease(&self, name: String, kind: &str, shard: Option<u32>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(self.cfg().namespace.clone()),
                labels: Some([(LEASE_KIND_LABEL.to_string(), kind.to_string())].into()),
                annotations: shard.map(|s| {
                    [(
                        SHARD_ANNOTATION.to_string(),
                        label_value(s, self.config.count),
                    )]
                    .into()
                }),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    /// Writes `lease` with this replica as holder (create when `None`).
    async fn write(api: Api<Lease>, lease: Lease, create: bool) -> Result<Lease, String> {
        let name = lease.name_any();
        let result = if create {
            api.create(&PostParams::default(), &lease).await
        } else {
            api.replace(&name, &PostParams::default(), &lease).await
        };
        result.map_err(|err| match err {
            kube::Error::Api(status) if status.code == 409 => {
                format!("{name}: another replica wrote it first (409 Conflict)")
            }
            err => format!("{name}: {err}"),
        })
    }

    /// One round; `renew` on the timer (not on a wake-up). Returns whether
    /// nothing is held any more.
    async fn round(&mut self, renew: bool, stopping: bool) -> bool {
        let started = Instant::now();
        let Some(leases) = self.list().await else {
            self.expire_unrenewed();
            return self.shards.held().is_empty();
        };
        // A change is observed when the list showing it arrives, not when it
        // was sent (a holder may have renewed in between): another holder's
        // expiry is never counted from too early.
        let listed_at = Instant::now();
        self.observe(&leases, listed_at);
        // Renewed while stopping too, until every shard is released: a
        // replica's shards never outlive its membership (see `fresh`).
        let member_write = renew.then(|| self.member_write(&leases));
        let view = self.members(&leases, listed_at, stopping);
        let desired = assign::assign(self.config.count, &view.admitted)
            .remove(&self.cfg().identity)
            .unwrap_or_default();
        let mut ops: Vec<BoxFuture<'static, Written>> = Vec::new();
        for shard in 0..self.config.count {
            let assigned = desired.contains(&shard) && !stopping;
            ops.extend(self.plan(shard, &leases, &view, assigned, renew, started));
        }
        let (member_renewed, results) = self.send(member_write, ops).await;
        if member_renewed.is_some() {
            self.member_renewed_at = member_renewed;
        }
        self.record(results);
        self.expire_unrenewed();
        tracing::debug!(
            renew,
            stopping,
            members = view.admitted.len(),
            ghosts = view.live.len() - view.admitted.len(),
            desired = desired.len(),
            held = self.shards.held().len(),
            took_ms = started.elapsed().as_millis() as u64,
            "sharding: round done"
        );
        self.shards.held().is_empty()
    }

    /// Lists the Leases of the protocol (`None`: failed or timed out).
    async fn list(&self) -> Option<HashMap<String, Lease>> {
        let listed = tokio::time::timeout(
            self.cfg().renew_deadline,
            self.api
                .list(&ListParams::default().labels(LEASE_KIND_LABEL)),
        )
        .await;
        match listed {
            Ok(Ok(list)) => Some(list.items.into_iter().map(|l| (l.name_any(), l)).collect()),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "sharding: listing the Leases failed; retrying");
                None
            }
            Err(_) => {
                tracing::warn!("sharding: listing the Leases timed out; retrying");
                None
            }
        }
    }

    /// Records when each Lease's record, and each holder, was first seen.
    fn observe(&mut self, leases: &HashMap<String, Lease>, listed_at: Instant) {
        for (name, lease) in leases {
            let rv = lease.resource_version().unwrap_or_default();
            match self.observed.get(name) {
                Some((seen, _)) if *seen == rv => {}
                _ => {
                    self.observed.insert(name.clone(), (rv, listed_at));
                }
            }
            let now_held_by = holder(lease);
            match self.holder_seen.get(name) {
                Some((seen, _)) if seen == now_held_by => {}
                _ => {
                    self.holder_seen
                        .insert(name.clone(), (now_held_by.to_string(), listed_at));
                }
            }
        }
        self.observed.retain(|name, _| leases.contains_key(name));
        self.holder_seen.retain(|name, _| leases.contains_key(name));
    }

    /// The renewal of this replica's membership Lease (re-acquired, with a
    /// new `acquireTime`, when [`super::ghosts`] says the others judge it a
    /// ghost).
    fn member_write(
        &mut self,
        leases: &HashMap<String, Lease>,
    ) -> BoxFuture<'static, (Result<Lease, String>, Instant)> {
        let cfg = self.cfg().clone();
        let name = member_lease_name(&cfg.lease_name, &cfg.identity);
        let existing = leases.get(&name);
        let mut lease = existing
            .cloned()
            .unwrap_or_else(|| self.new_lease(name.clone(), "member", None));
        let mut previous = existing.and_then(|l| l.spec.clone());
        if std::mem::take(&mut self.rejoin)
            && let Some(spec) = previous.as_mut()
        {
            tracing::warn!(
                "sharding: this replica took none of its free shards for the ghost grace; re-acquiring its membership Lease so the others count it again"
            );
            spec.holder_identity = None; // a new acquisition
        }
        lease.spec = Some(self.lease_spec(previous.as_ref(), &cfg.identity, cfg.lease_seconds()));
        let write = Self::write(self.api.clone(), lease, existing.is_none());
        Box::pin(async move {
            let sent = Instant::now();
            (write.await, sent)
        })
    }

    /// The live members (membership Leases still valid, and this replica
    /// unless it stops) and, of those, the ones not judged ghosts
    /// ([`super::ghosts`]): the assignment is computed over those.
    fn members(
        &mut self,
        leases: &HashMap<String, Lease>,
        listed_at: Instant,
        stopping: bool,
    ) -> MemberView {
        let cfg = self.cfg().clone();
        let mut live: BTreeMap<String, String> = BTreeMap::new();
        for lease in leases.values() {
            if kind_of(lease) == "member" && self.fresh(lease, listed_at, None) {
                let record = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.acquire_time.as_ref())
                    .map(|t| t.0.to_string())
                    .unwrap_or_default();
                live.insert(holder(lease).to_string(), record);
            }
        }
        if !stopping {
            live.entry(cfg.identity.clone()).or_default();
        }
        let names: BTreeSet<String> = live.keys().cloned().collect();
        let views: Vec<ShardView> = (0..self.config.count)
            .map(|shard| {
                let lease = leases.get(&shard_lease_name(&cfg.lease_name, shard));
                ShardView {
                    holder: lease.map(holder).unwrap_or_default().to_string(),
                    free: lease.is_none_or(|l| !self.fresh(l, listed_at, Some(&names))),
                }
            })
            .collect();
        let grace = ghost_grace(cfg.lease_duration);
        let verdict = self
            .ghosts
            .judge(listed_at, &cfg.identity, &live, &views, grace);
        self.rejoin |= verdict.rejoin;
        if verdict.ghosts != self.last_ghosts {
            tracing::warn!(
                ghosts = ?verdict.ghosts,
                grace = ?grace,
                rule = super::ghosts::RULE,
                "sharding: members that took none of their free shards for the ghost grace are left out of the assignment"
            );
            self.last_ghosts = verdict.ghosts.clone();
        }
        let admitted: BTreeSet<String> = names.difference(&verdict.ghosts).cloned().collect();
        self.shards.set_members(admitted.iter().cloned().collect());
        self.shards
            .metrics()
            .ghosts
            .set(verdict.ghosts.len() as i64);
        MemberView {
            live: names,
            admitted,
            listed_at,
        }
    }

    /// What to write for one shard: renew, release or take its Lease (or
    /// nothing); drops a shard whose Lease is not ours any more.
    fn plan(
        &mut self,
        shard: u32,
        leases: &HashMap<String, Lease>,
        view: &MemberView,
        assigned: bool,
        renew: bool,
        started: Instant,
    ) -> Option<BoxFuture<'static, Written>> {
        let cfg = self.cfg().clone();
        let name = shard_lease_name(&cfg.lease_name, shard);
        let lease = leases.get(&name);
        let held_by = lease.map(holder).unwrap_or_default();
        match self.shards.phase(shard) {
            Some(_) if held_by != cfg.identity => {
                tracing::error!(shard, lease = %name, holder = held_by, "sharding: the shard's Lease is not ours any more; reconciles of it stop");
                self.shards.cut(shard);
                self.shards.remove(shard, "lost");
                self.renewed_at.remove(&shard);
                None
            }
            Some(phase) => self.plan_held(shard, lease?, phase, assigned, renew, started),
            None if assigned => {
                let (next, create) = match lease {
                    None => (self.new_lease(name, "shard", Some(shard)), true),
                    Some(l) if !self.fresh(l, view.listed_at, Some(&view.live)) => {
                        (l.clone(), false)
                    }
                    Some(_) => return None, // held by a live replica; it hands over
                };
                Some(self.send_op(Op::Take(shard), next, create))
            }
            None => None,
        }
    }

    /// A held shard: released once drained when it is not ours to hold
    /// any more, else renewed when due.
    fn plan_held(
        &mut self,
        shard: u32,
        lease: &Lease,
        phase: Phase,
        assigned: bool,
        renew: bool,
        started: Instant,
    ) -> Option<BoxFuture<'static, Written>> {
        let cfg = self.cfg().clone();
        if !assigned {
            let (since, inflight) = self.shards.drain(shard).unwrap_or_default();
            if inflight == 0 {
                let mut released = lease.clone();
                let mut spec = released.spec.clone().unwrap_or_default();
                spec.holder_identity = Some(String::new());
                spec.lease_duration_seconds = Some(1);
                spec.renew_time = Some(MicroTime(Timestamp::now()));
                released.spec = Some(spec);
                let api = self.api.clone();
                return Some(Box::pin(async move {
                    let sent = Instant::now();
                    let result = Self::write(api, released, false).await;
                    (Op::Release(shard), result, sent)
                }));
            }
            if since > DRAIN_TIMEOUT && phase == Phase::Draining {
                tracing::warn!(shard, inflight, timeout = ?DRAIN_TIMEOUT, "sharding: reconciles of a draining shard still run; cancelling them");
                self.shards.cut(shard);
            }
        }
        let due = self
            .renewed_at
            .get(&shard)
            .is_none_or(|at| started >= *at + shard_renew_interval(&cfg));
        (renew && due).then(|| self.send_op(Op::Renew(shard), lease.clone(), false))
    }

    /// A take or renewal of `lease` with this replica as holder.
    fn send_op(&self, op: Op, mut lease: Lease, create: bool) -> BoxFuture<'static, Written> {
        let cfg = self.cfg();
        lease.spec = Some(self.lease_spec(lease.spec.as_ref(), &cfg.identity, cfg.lease_seconds()));
        let api = self.api.clone();
        Box::pin(async move {
            let sent = Instant::now();
            let result = Self::write(api, lease, create).await;
            (op, result, sent)
        })
    }

    /// Sends the round's writes together, each within the renew deadline;
    /// returns when the membership renewal that succeeded was sent.
    async fn send(
        &self,
        member_write: Option<BoxFuture<'static, (Result<Lease, String>, Instant)>>,
        ops: Vec<BoxFuture<'static, Written>>,
    ) -> (
        Option<Instant>,
        Vec<Result<Written, tokio::time::error::Elapsed>>,
    ) {
        let limit = self.cfg().renew_deadline;
        let member = async {
            match member_write {
                Some(write) => Some(tokio::time::timeout(limit, write).await),
                None => None,
            }
        };
        let writes = futures::future::join_all(
            ops.into_iter()
                .map(|op| async move { tokio::time::timeout(limit, op).await }),
        );
        let (member, results) = tokio::join!(member, writes);
        let renewed = match member {
            Some(Ok((Ok(_), sent))) => Some(sent),
            Some(Ok((Err(err), _))) => {
                tracing::warn!(error = %err, "sharding: renewing the membership Lease failed; retrying");
                None
            }
            Some(Err(_)) => {
                tracing::warn!("sharding: renewing the membership Lease timed out; retrying");
                None
            }
            None => None,
        };
        (renewed, results)
    }

    /// Takes in the outcome of the round's shard writes.
    fn record(&mut self, results: Vec<Result<Written, tokio::time::error::Elapsed>>) {
        let cfg = self.cfg().clone();
        // A hold is never valid for longer than the membership: the others
        // stop counting a holder's renewals once it is no member.
        let member = self.member_renewed_at;
        let valid_from = |sent: Instant| member.map_or(sent, |m| m.min(sent));
        for result in results {
            // A hold counts from when its renewal was sent (not from the
            // round's start): a slow list does not shorten it.
            let Ok((op, result, sent)) = result else {
                continue; // timed out: the deadline check decides
            };
            match (op, result) {
                (Op::Renew(shard), Ok(_)) => {
                    self.renewed_at.insert(shard, sent);
                    self.shards
                        .renewed(shard, valid_from(sent) + cfg.renew_deadline);
                }
                (Op::Renew(shard), Err(err)) => {
                    tracing::warn!(shard, error = %err, "sharding: renewing a shard Lease failed; retrying");
                }
                (Op::Take(shard), Ok(_)) => {
                    self.renewed_at.insert(shard, sent);
                    self.shards
                        .acquired(shard, valid_from(sent) + cfg.renew_deadline);
                    tracing::info!(shard, lease = %shard_lease_name(&cfg.lease_name, shard), "sharding: took the shard; syncing its objects");
                }
                (Op::Take(shard), Err(err)) => {
                    tracing::debug!(shard, error = %err, "sharding: could not take the shard");
                }
                (Op::Release(shard), result) => {
                    if let Err(err) = result {
                        tracing::warn!(shard, error = %err, "sharding: could not release the shard's Lease; it expires on its own");
                    } else {
                        tracing::info!(shard, "sharding: handed the shard over (Lease released)");
                    }
                    self.shards.remove(shard, "released");
                    self.renewed_at.remove(&shard);
                }
            }
        }
    }

    /// Drops every held shard whose last successful renewal is older than
    /// the renew deadline.
    fn expire_unrenewed(&mut self) {
        let deadline = self.cfg().renew_deadline;
        let now = Instant::now();
        let member_lapsed = self.member_renewed_at.is_none_or(|at| now >= at + deadline);
        for shard in self.shards.held().into_keys() {
            let expired = self
                .renewed_at
                .get(&shard)
                .is_none_or(|at| now >= *at + deadline);
            if member_lapsed {
                tracing::error!(shard, renew_deadline = ?deadline, "sharding: could not renew the membership Lease within the renew deadline; reconciles of the shard stop (the others no longer count its renewals)");
                self.shards.cut(shard);
                self.shards.remove(shard, "lost");
                self.renewed_at.remove(&shard);
                continue;
            }
            if expired {
                tracing::error!(shard, renew_deadline = ?deadline, "sharding: could not renew the shard's Lease within the renew deadline; reconciles of it stop");
                self.shards.cut(shard);
                self.shards.remove(shard, "lost");
                self.renewed_at.remove(&shard);
            }
        }
    }

    async fn run(mut self, mut stop: watch::Receiver<bool>, wake: Arc<Notify>) {
        let mut changes = self.shards.subscribe();
        let mut next_renewal = Instant::now();
        loop {
            let stopping = *stop.borrow_and_update();
            let renew = Instant::now() >= next_renewal;
            if renew {
                next_renewal = Instant::now() + jittered(self.cfg().retry_period);
            }
            let empty = self.round(renew, stopping).await;
            if stopping && empty {
                break;
            }
            let draining = self
                .shards
                .held()
                .values()
                .any(|(phase, _, _)| *phase == Phase::Draining);
            changes.borrow_and_update();
            let mut wait_until = next_renewal;
            // Held shards must be renewed before their deadline even if a round ran late.
            if let Some(at) = self.renewed_at.values().min() {
                wait_until = wait_until.min(*at + self.cfg().renew_deadline);
            }
            tokio::select! {
                () = tokio::time::sleep_until(wait_until) => {}
                () = wake.notified() => {}
                _ = stop.changed(), if !stopping => {}
                _ = changes.changed(), if draining => {
                    // A reconcile of a draining shard finished: release soon.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        // Leave the membership: the others rebalance at once.
        let name = member_lease_name(&self.cfg().lease_name, &self.cfg().identity);
        if let Ok(Some(mut lease)) = self.api.get_opt(&name).await
            && holder(&lease) == self.cfg().identity
        {
            let mut spec = lease.spec.clone().unwrap_or_default();
            spec.holder_identity = Some(String::new());
            spec.lease_duration_seconds = Some(1);
            lease.spec = Some(spec);
            if let Err(err) = Self::write(self.api.clone(), lease, false).await {
                tracing::warn!(error = %err, "sharding: could not release the membership Lease; it expires on its own");
            }
        }
        tracing::info!("sharding: left; every shard handed over");
    }
}

/// Wakes the loop when a Lease's holder changes (a release, a takeover, a
/// new replica), not on mere renewals.
async fn watch_holders(api: Api<Lease>, wake: Arc<Notify>) {
    let config = watcher::Config::default().labels(LEASE_KIND_LABEL);
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut holders: HashMap<String, String> = HashMap::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(lease)) => {
                let now = holder(&lease).to_string();
                if holders.insert(lease.name_any(), now.clone()).as_ref() != Some(&now) {
                    wake.notify_one();
                }
            }
            Ok(watcher::Event::InitApply(lease)) => {
                holders.insert(lease.name_any(), holder(&lease).to_string());
            }
            Ok(watcher::Event::Delete(lease)) => {
                holders.remove(&lease.name_any());
                wake.notify_one();
            }
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(error = %err, "sharding: Lease watch error; polling meanwhile")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::lease::{
        DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD,
    };

    fn lease(renew_deadline: Duration, retry_period: Duration) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: "wasm-operator".into(),
            namespace: "default".into(),
            identity: "me".into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline,
            retry_period,
        }
    }

    #[test]
    fn shard_leases_are_renewed_every_other_round_and_retried_before_the_deadline() {
        let defaults = lease(DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD);
        let interval = shard_renew_interval(&defaults);
        assert!(interval > DEFAULT_RETRY_PERIOD && interval < DEFAULT_RETRY_PERIOD * 2);
        // The renewal goes out in the first round after the interval (at
        // most a jittered retry period later); if it fails, another round
        // still comes before the deadline.
        let latest_try = interval + DEFAULT_RETRY_PERIOD.mul_f64(1.2);
        assert!(latest_try + DEFAULT_RETRY_PERIOD.mul_f64(1.2) < DEFAULT_RENEW_DEADLINE);
        // A tight configuration renews every round, as before.
        let tight = lease(Duration::from_secs(3), Duration::from_secs(2));
        assert_eq!(shard_renew_interval(&tight), Duration::from_secs(2));
    }
}
