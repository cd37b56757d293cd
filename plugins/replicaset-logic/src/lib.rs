//! The ReplicaSet-like reconcile logic of wasm-operator's `replicaset`
//! plugin, as a plain library.
//!
//! Keeps `spec.desired` live Pods for a Jinghzhu, the way Kubernetes'
//! ReplicaSet controller keeps `spec.replicas`:
//!
//! * live Pods are the ones controlled by this Jinghzhu (by uid) that are
//!   neither terminating nor finished (`Succeeded`/`Failed`);
//! * too few: create the difference from the template (`generate-name`
//!   `<jinghzhu-name>-`), at most [`BURST_REPLICAS`] per reconcile;
//! * too many: delete the surplus in the order of [`deletion`] (not running
//!   before running, not ready before ready, newer before older);
//! * finished and terminating Pods are replaced right away and never
//!   deleted by the plugin;
//! * the status describes the observed live Pods: how many, their names,
//!   how many are running and ready (`"3/3 pods, 2/3 ready"`), and the
//!   state `Scaling` (count differs), `Pending` (count right, not all
//!   ready) or `Running` (all ready); it is returned only when it differs
//!   from the one the Jinghzhu has;
//! * no Events of its own: the host's `SuccessfulCreate`/`SuccessfulDelete`
//!   name the Pods of each scale, so one Event per action is written; the
//!   per-scale log line ("scaling up"/"scaling down") is at debug.
//!
//! The logic reads its input through the SDK's borrowed view
//! ([`jinghzhu_plugin_sdk::view::InputView`]): [`reconcile_view`] is what
//! the component runs on the wire input, [`reconcile_with`] the same on an
//! owned input.
//!
//! Modules: [`plan`] (the reconcile itself), [`deletion`] (which Pods go
//! first), [`message`] (status texts, and the `v2` variant).
//!
//! The component is `plugins/replicaset` (crate `replicaset-plugin`); other
//! plugins (e.g. `tests/plugins/misbehaving`) reuse this crate rather than
//! depending on that `cdylib` (see the SDK's `export!` documentation for
//! why). Its scenario and golden-fixture tests live in `replicaset-plugin`.

pub mod deletion;
pub mod message;
pub mod plan;

pub use message::Variant;
pub use plan::{BURST_REPLICAS, live_pods, observed_status, reconcile_view, reconcile_with, state};
