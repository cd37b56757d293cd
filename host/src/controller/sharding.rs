//! The controller's side of sharding: which shard an object's queue
//! entries count under, the labeller and the task that turns a newly taken
//! shard active, and a reconcile's way into its shard (the object's shard
//! label checked, and fixed instead of reconciled when wrong).

use super::Context;
use super::{
    ControllerConfig, PerObject, SHARD_LAPSE_RETRY, fencing, measured, page_out_start_up_code,
    reconcile, watch,
};
use crate::apply::fence::WriteFence;
use crate::crd::Jinghzhu;
use crate::ownership::SHARD_LABEL;
use crate::shards::Shards;
use crate::shards::labeller::Labeller;
use crate::tasks::AbortOnDrop;
use crate::telemetry::metrics;
use kube::runtime::controller::Action;
use kube::{Api, Client};
use std::sync::Arc;
use std::time::Duration;

/// The shard of an object, for the per-shard queue depth (`None` unsharded).
pub(super) fn shard_of_objects(
    shards: Option<Shards>,
    queue: &metrics::QueueTracker,
) -> impl Fn(&Jinghzhu) -> Option<u32> + Clone + Send + Sync + 'static {
    if let Some(shards) = &shards {
        queue.set_shard_count(shards.count());
    }
    move |jz: &Jinghzhu| -> Option<u32> {
        let shards = shards.as_ref()?;
        jz.metadata.uid.as_deref().map(|uid| shards.shard_of(uid))
    }
}

/// Sharded: the labeller and the task that syncs taken shards (both stop
/// when the returned value is dropped); `None` without shards.
pub(super) fn start_shard_tasks(
    client: &Client,
    config: &ControllerConfig,
    selection: Option<tokio::sync::watch::Sender<watch::ShardSelection>>,
    watches: &watch::Watches,
    objects: &Arc<PerObject>,
) -> Option<(Labeller, AbortOnDrop)> {
    let (Some(shards), Some(selection), Some(synced)) =
        (&config.shards, selection, &watches.synced)
    else {
        return None;
    };
    let labeller = Labeller::start(client, config.namespace.as_deref(), shards);
    let sync = tokio::spawn(tracing::Instrument::in_current_span(shard_sync(
        shards.clone(),
        selection,
        synced.clone(),
        labeller.ready(),
        watches.jinghzhu_cache.clone(),
        objects.clone(),
        config.page_out_start_up_code,
    )));
    Some((labeller, AbortOnDrop::from(sync)))
}

/// What a sharded reconcile does with an object, by its shard label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LabelCheck {
    /// The label names the object's shard: reconcile it (if held here).
    Right,
    /// It names `labelled`, another shard of this count (the one whose
    /// watch shows the object here): rewrite it, as a write for that
    /// shard, fenced on its hold.
    Wrong { labelled: u32 },
    /// No label of this shard count: the labeller's (its watch selects
    /// exactly those objects); nothing is written here.
    Labeller,
}

/// The check of the label `labelled` of an object of `shard` of `count`.
pub(super) fn label_check(labelled: Option<&str>, shard: u32, count: u32) -> LabelCheck {
    match labelled.and_then(|l| crate::shards::hash::parse_label(l, count)) {
        Some(s) if s == shard => LabelCheck::Right,
        Some(s) => LabelCheck::Wrong { labelled: s },
        None => LabelCheck::Labeller,
    }
}

/// Sharded: reconciles the object when this replica holds its shard and
/// its label, as cached now, names that shard; fixes a wrong label
/// instead (see [`fix_shard_label`]).
pub(super) async fn reconcile_in_shard(
    dispatched: Arc<Jinghzhu>,
    ctx: Arc<Context>,
    shards: &Shards,
) -> Result<Action, reconcile::ReconcileError> {
    let key = watch::object_key(dispatched.as_ref());
    let Some(uid) = dispatched.metadata.uid.clone() else {
        return Ok(Action::await_change());
    };
    // The label as cached now: the copy the reconcile was queued with may
    // predate a relabel (and the reconcile reads the cached copy anyway).
    let Some(jz) = reconcile::current(&ctx.jinghzhus, dispatched) else {
        return Ok(Action::await_change());
    };
    let shard = shards.shard_of(&uid);
    let labelled = jz.metadata.labels.as_ref().and_then(|l| l.get(SHARD_LABEL));
    match label_check(labelled.map(String::as_str), shard, shards.count()) {
        LabelCheck::Right => {}
        LabelCheck::Wrong { labelled } => {
            let label = crate::shards::hash::label_value(shard, shards.count());
            let fence = fencing::for_shard_hold(shards.hold_of(labelled));
            fix_shard_label(&ctx, &jz, &label, &fence).await;
            shards.metrics().skipped.inc();
            return Ok(Action::await_change());
        }
        LabelCheck::Labeller => {
            tracing::debug!(object = %key, "not reconciled: no shard label of this count yet (the labeller writes it)");
            shards.metrics().skipped.inc();
            return Ok(Action::await_change());
        }
    }
    // Refused or cancelled while the shard is still active here (a
    // renewal came back late): retry shortly. Otherwise its next
    // holder, or this replica on taking it again, re-queues it.
    let retry = |shards: &Shards| {
        if shards.is_active_here(shard) {
            Action::requeue(SHARD_LAPSE_RETRY)
        } else {
            Action::await_change()
        }
    };
    let Some(guard) = shards.enter(shard) else {
        shards.metrics().skipped.inc();
        tracing::debug!(object = %key, shard, "not reconciled here: this replica does not hold the object's shard (or not yet)");
        return Ok(retry(shards));
    };
    let fence = fencing::for_shard(&guard);
    let lost = async {
        guard.lost().await;
        retry(shards)
    };
    measured(
        jz,
        ctx,
        fence,
        lost,
        "shard lost mid-reconcile; cancelled (its holder reconciles it)",
    )
    .await
}

/// Writes the shard label the object's UID gives (a user copied another
/// object's labels): its holder reconciles it once its watch sees it. A
/// write for the shard the object is labelled with now (the one whose
/// watch shows it to this replica, which need not hold the object's own
/// shard: fenced on that one, nobody would ever fix it), so not sent when
/// `fence`, that shard's hold, has lapsed.
pub(super) async fn fix_shard_label(ctx: &Context, jz: &Jinghzhu, label: &str, fence: &WriteFence) {
    let key = watch::object_key(jz);
    if let Err(lapsed) = fence.check() {
        ctx.metrics.write_fenced("label", lapsed.kind);
        tracing::info!(object = %key, error = %lapsed, "write fenced: shard label fix not sent");
        return;
    }
    let api: Api<Jinghzhu> = Api::namespaced(
        ctx.client.clone(),
        jz.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let patch = serde_json::json!({
        "metadata": { "labels": { SHARD_LABEL: label }, "uid": jz.metadata.uid }
    });
    let name = jz.metadata.name.clone().unwrap_or_default();
    match api
        .patch_metadata(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            tracing::info!(object = %key, shard = label, "sharding: the object's shard label was wrong; rewritten (its holder reconciles it)")
        }
        Err(err) => {
            tracing::warn!(object = %key, error = %err, "sharding: rewriting a wrong shard label failed; retried on the next event")
        }
    }
}

/// Sharded: restarts the watches when the held shards change, and turns a
/// taken shard active once both caches show a list taken after the take
/// (and, the first time, once the labeller has labelled what an unsharded
/// host left unlabelled). Forgets what was kept for objects of shards
/// handed over, and keeps the per-shard object gauge. With `page_out`, the
/// first shard turned active gives the start-up pages back.
pub(super) async fn shard_sync(
    shards: Shards,
    selection: tokio::sync::watch::Sender<watch::ShardSelection>,
    synced: watch::Synced,
    mut labelled: tokio::sync::watch::Receiver<bool>,
    cache: kube::runtime::reflector::Store<Jinghzhu>,
    objects: Arc<PerObject>,
    page_out: bool,
) {
    use std::collections::BTreeSet;
    if labelled.wait_for(|ready| *ready).await.is_err() {
        tracing::warn!(
            "sharding: the labeller stopped before its first pass; syncing shards anyway"
        );
    }
    let mut changes = shards.subscribe();
    let watch::Synced {
        jinghzhus: mut jz_synced,
        pods: mut pod_synced,
    } = synced;
    let mut generation = 0u64;
    let mut current: BTreeSet<u32> = BTreeSet::new();
    let mut restarted_at = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        let held = shards.held();
        let want: BTreeSet<u32> = held.keys().copied().collect();
        let stale = held.values().any(|(phase, _, acquired)| {
            *phase == crate::shards::Phase::Syncing && *acquired > restarted_at
        });
        if want != current || stale {
            // Gather the shards taken in the same round into one restart.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let held = shards.held();
            let want: BTreeSet<u32> = held.keys().copied().collect();
            for jz in cache.state() {
                if let Some(uid) = jz.metadata.uid.as_deref()
                    && !want.contains(&shards.shard_of(uid))
                {
                    objects.forget(uid);
                }
            }
            generation += 1;
            restarted_at = tokio::time::Instant::now();
            current = want.clone();
            selection.send_replace(watch::ShardSelection {
                generation,
                shards: want,
                count: shards.count(),
            });
            continue;
        }
        if *jz_synced.borrow_and_update() >= generation
            && *pod_synced.borrow_and_update() >= generation
        {
            for (shard, (phase, term, acquired)) in &held {
                if *phase == crate::shards::Phase::Syncing
                    && *acquired <= restarted_at
                    && shards.mark_active(*shard, *term)
                    && page_out
                {
                    // Ready with no shard held, a replica has yet to take its
                    // shards and start the labeller: its start-up pages go
                    // back once that is done, not at its first ready.
                    page_out_start_up_code();
                }
            }
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return; },
            changed = jz_synced.changed() => if changed.is_err() { return; },
            changed = pod_synced.changed() => if changed.is_err() { return; },
            _ = tick.tick() => {
                let mut counts: std::collections::BTreeMap<u32, i64> =
                    current.iter().map(|s| (*s, 0)).collect();
                for jz in cache.state() {
                    if let Some(uid) = jz.metadata.uid.as_deref()
                        && let Some(n) = counts.get_mut(&shards.shard_of(uid))
                    {
                        *n += 1;
                    }
                }
                for (shard, n) in counts {
                    shards
                        .metrics()
                        .objects
                        .get_or_create(&crate::shards::metrics::ShardLabels { shard: shard.to_string() })
                        .set(n);
                }
            }
        }
    }
}
