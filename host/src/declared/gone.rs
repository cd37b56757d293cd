//! Forgetting parents that are gone. A declared controller keeps a little
//! per parent between reconciles (what it applied to each child, the
//! parent's input record, the expectations of its writes, its failure
//! count); a parent seen terminating has its reconcile drop them, but a
//! parent deleted outright (no finalizer: the watch's `Delete` is the
//! first and last the host hears of its end) gets no reconcile at all.
//!
//! So the parent watch's events are looked at too ([`on_event`]): a
//! `Delete` forgets that parent at once, and after the first full list the
//! memories are swept against the parent cache every [`SWEEP_EVERY`]
//! ([`forget_gone`]). The sweep catches what the `Delete` cannot: a
//! reconcile in flight when the parent went that wrote its memory back
//! afterwards, and parents deleted while the watch was down (a relist has
//! no `Delete` for them).

use std::collections::HashSet;
use std::time::Duration;

use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::mpsc;

/// How often the memories are swept against the parent cache.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// How often the entries kept are counted (besides after each change).
pub const COUNT_EVERY: Duration = Duration::from_secs(5);

/// What the parent watch said about parents going.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A parent left the cache: its uid and `namespace/name`.
    Deleted {
        /// Its uid.
        uid: String,
        /// `namespace/name`.
        key: String,
    },
    /// A full list is in the cache: sweeping may start.
    Listed,
}

/// The parents present in the cache, by uid and by `namespace/name`.
#[derive(Debug, Default)]
pub struct Present {
    /// Their uids.
    pub uids: HashSet<String>,
    /// Their `namespace/name`s.
    pub keys: HashSet<String>,
}

impl Present {
    /// The parents in `store`.
    pub fn of(store: &Store<DynamicObject>) -> Self {
        let mut present = Self::default();
        for parent in store.state() {
            if let Some(uid) = parent.uid() {
                present.uids.insert(uid);
            }
            present.keys.insert(key_of(&parent));
        }
        present
    }
}

/// What a controller keeps per parent.
pub trait ParentMemory {
    /// Forgets the parent `uid` (`namespace/name` `key`).
    fn forget(&self, uid: &str, key: &str);
    /// Forgets every parent not in `present`.
    fn keep_only(&self, present: &Present);
    /// How many entries are kept, all memories together (for the metric).
    fn entries(&self) -> usize;
}

/// The parent watch's observer: sends a [`Seen`] for each `Delete` and
/// for the end of each full list. Never blocks (the channel is unbounded:
/// the watch's own rate bounds it, and [`forget_gone`] drains it at once).
pub fn on_event(to: mpsc::UnboundedSender<Seen>) -> impl Fn(&watcher::Event<DynamicObject>) {
    move |event| {
        let seen = match event {
            watcher::Event::Delete(parent) => Seen::Deleted {
                uid: parent.uid().unwrap_or_default(),
                key: key_of(parent),
            },
            watcher::Event::InitDone => Seen::Listed,
            _ => return,
        };
        // The receiver is gone only when the controller stopped.
        let _ = to.send(seen);
    }
}

/// Forgets parents as the watch says they go, and sweeps the memories
/// against `store` every `every` once a full list is in; `counted` gets
/// the entries kept after each change and every [`COUNT_EVERY`]. Ends when
/// the watch is dropped.
pub async fn forget_gone<M: ParentMemory>(
    mut seen: mpsc::UnboundedReceiver<Seen>,
    store: Store<DynamicObject>,
    memory: &M,
    every: Duration,
    counted: impl Fn(usize),
) {
    let mut listed = false;
    let mut sweeps = tokio::time::interval(every);
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut counts = tokio::time::interval(COUNT_EVERY.min(every));
    counts.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            next = seen.recv() => match next {
                Some(Seen::Deleted { uid, key }) => memory.forget(&uid, &key),
                Some(Seen::Listed) => {
                    listed = true;
                    memory.keep_only(&Present::of(&store));
                }
                None => return,
            },
            _ = sweeps.tick() => {
                if listed {
                    memory.keep_only(&Present::of(&store));
                }
            }
            _ = counts.tick() => {}
        }
        counted(memory.entries());
    }
}

/// `namespace/name`, as the controller keys its failure counts.
pub fn key_of(obj: &DynamicObject) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    use kube::core::{ApiResource, GroupVersionKind};
    use kube::runtime::reflector::store::Writer;

    /// Entries by uid, with their keys.
    #[derive(Default)]
    struct Kept(Mutex<HashMap<String, String>>);

    impl ParentMemory for Kept {
        fn forget(&self, uid: &str, _key: &str) {
            self.0.lock().expect("lock").remove(uid);
        }
        fn keep_only(&self, present: &Present) {
            self.0
                .lock()
                .expect("lock")
                .retain(|uid, key| present.uids.contains(uid) && present.keys.contains(key));
        }
        fn entries(&self) -> usize {
            self.0.lock().expect("lock").len()
        }
    }

    fn kind() -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cache.example.com", "v1alpha1", "Memcached"),
            "memcacheds",
        )
    }

    fn parent(name: &str) -> DynamicObject {
        let mut obj = DynamicObject::new(name, &kind()).within("shop");
        obj.metadata.uid = Some(format!("uid-{name}"));
        obj
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_forgets_at_once_and_the_sweep_catches_the_rest() {
        let mut writer = Writer::new(kind());
        let store = writer.as_reader();
        let memory = Kept::default();
        for name in ["a", "b", "c", "d"] {
            memory
                .0
                .lock()
                .expect("lock")
                .insert(format!("uid-{name}"), format!("shop/{name}"));
        }
        let (to, seen) = mpsc::unbounded_channel();
        let observe = on_event(to.clone());
        let counts = Mutex::new(Vec::new());
        let forgetting = forget_gone(seen, store, &memory, Duration::from_secs(60), |n| {
            counts.lock().expect("lock").push(n);
        });
        let driving = async {
            // The first list holds a, b and c: d went while the host was
            // away, and is swept as soon as the list is in.
            for event in [
                watcher::Event::Init,
                watcher::Event::InitApply(parent("a")),
                watcher::Event::InitApply(parent("b")),
                watcher::Event::InitApply(parent("c")),
                watcher::Event::InitDone,
            ] {
                writer.apply_watcher_event(&event);
                observe(&event);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert_eq!(memory.entries(), 3, "d swept by the first list");
            // a is deleted outright: forgotten on its Delete, no reconcile.
            let deleted = watcher::Event::Delete(parent("a"));
            writer.apply_watcher_event(&deleted);
            observe(&deleted);
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert_eq!(memory.entries(), 2, "a forgotten on its Delete");
            // An in-flight reconcile of a writes its memory back after the
            // Delete: the next sweep drops it.
            memory
                .0
                .lock()
                .expect("lock")
                .insert("uid-a".into(), "shop/a".into());
            tokio::time::sleep(Duration::from_secs(61)).await;
            assert_eq!(memory.entries(), 2, "a swept");
            drop(observe);
            drop(to);
        };
        tokio::join!(forgetting, driving);
        assert_eq!(memory.entries(), 2, "b and c kept: they are in the cache");
        assert!(counts.lock().expect("lock").contains(&2));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_swept_before_the_first_list() {
        let writer = Writer::new(kind());
        let memory = Kept::default();
        memory
            .0
            .lock()
            .expect("lock")
            .insert("uid-a".into(), "shop/a".into());
        let (to, seen) = mpsc::unbounded_channel::<Seen>();
        let forgetting = forget_gone(
            seen,
            writer.as_reader(),
            &memory,
            Duration::from_secs(60),
            |_| {},
        );
        let waiting = async {
            tokio::time::sleep(Duration::from_secs(200)).await;
            assert_eq!(
                memory.entries(),
                1,
                "an empty cache before its list is no proof"
            );
            drop(to);
        };
        tokio::join!(forgetting, waiting);
    }
}
