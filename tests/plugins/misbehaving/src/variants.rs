//! The build variants that change every reconcile whatever the annotations,
//! for canary rollout tests and the rollout demo:
//!
//! - `fail-fifth`: a retryable error for every Jinghzhu whose name falls in
//!   a fifth of names by hash ([`fails_by_name`]: FNV-1a 64 of the name,
//!   modulo 5, is 0); every other object is reconciled normally. A canary
//!   that breaks a share of the fleet the failure-rate criterion must see;
//!   the share depends on the name only, so it is the same under every
//!   replica, restart and UID.
//! - `differ`: a valid proposal that converges exactly like the normal
//!   plugin, but every pod it creates carries one extra label,
//!   [`DIFFER_LABEL_KEY`] set to the Jinghzhu's name ([`mark_differ`]): a
//!   proposal that differs from the stable plugin's on every object that
//!   creates pods (the difference criterion with the stable shadow on).
//!   The key is under the host's default allowed prefix and the value
//!   scoped to the object, as the host's label rules require (a key like
//!   `test.jinghzhu.io/differ`, or a free value like `yes`, is refused).
//! - `idle`: the normal status, but no pod create or delete: a canary that
//!   does nothing, whose objects never reach a new `desired`.
//! - `slow`: about 10 ms of CPU ([`burn_cpu`]) before each reconcile.

use jinghzhu_plugin_sdk::prelude::*;

/// One object in this many fails under `fail-fifth`.
pub const FAIL_ONE_IN: u64 = 5;

/// The label `differ` adds to every pod it creates.
pub const DIFFER_LABEL_KEY: &str = "plugin.jinghzhu.io/differ";

/// Which of these variants a build is (see [`crate::reconcile_as`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Build {
    /// Built with `fail-fifth`.
    pub fail_fifth: bool,
    /// Built with `differ`.
    pub differ: bool,
    /// Built with `idle`.
    pub idle: bool,
    /// Built with `slow`.
    pub slow: bool,
}

impl Build {
    /// This build, by its cargo features.
    pub const THIS: Build = Build {
        fail_fifth: cfg!(feature = "fail-fifth"),
        differ: cfg!(feature = "differ"),
        idle: cfg!(feature = "idle"),
        slow: cfg!(feature = "slow"),
    };
}

/// Iterations of [`burn_cpu`]'s loop: about 10 ms of a compiled guest on
/// the machines the tests run on.
pub const SLOW_ITERATIONS: u64 = 10_000_000;

/// Burns CPU for `slow`: a loop the compiler cannot remove.
pub fn burn_cpu() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..SLOW_ITERATIONS {
        x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x0000_0100_0000_01b3);
    }
    std::hint::black_box(x);
}

/// FNV-1a 64 of `name`'s bytes.
pub fn name_hash(name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Whether `fail-fifth` fails the Jinghzhu named `name`.
pub fn fails_by_name(name: &str) -> bool {
    name_hash(name).is_multiple_of(FAIL_ONE_IN)
}

/// The error `fail-fifth` returns for the Jinghzhu named `name` when
/// [`fails_by_name`], else `None`.
pub fn fail_fifth(name: &str) -> Option<ReconcileError> {
    fails_by_name(name).then(|| {
        ReconcileError::retryable(format!(
            "misbehaving plugin built with fail-fifth: {name} is in the failing fifth of names"
        ))
    })
}

/// `differ`: labels every pod `out` creates with [`DIFFER_LABEL_KEY`] set
/// to `owner` (the Jinghzhu's name).
pub fn mark_differ(out: &mut ReconcileOutput, owner: &str) {
    for create in &mut out.create_pods {
        jinghzhu_plugin_sdk::kv::set(&mut create.labels, DIFFER_LABEL_KEY, owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_hash_is_fnv_1a_64() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(name_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(name_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(name_hash("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn about_a_fifth_of_names_fail_and_always_the_same() {
        let names: Vec<String> = (0..1000).map(|i| format!("web-{i}")).collect();
        let failing = names.iter().filter(|n| fails_by_name(n)).count();
        assert!((150..=250).contains(&failing), "{failing} of 1000 fail");
        for name in &names {
            assert_eq!(fail_fifth(name).is_some(), fails_by_name(name));
        }
        // FNV-1a 64 mod 5 computed apart (Python): web-2 and web-5 of web-0..9.
        let first_ten: Vec<&String> = names[..10].iter().filter(|n| fails_by_name(n)).collect();
        assert_eq!(first_ten, ["web-2", "web-5"]);
        let error = names
            .iter()
            .find_map(|n| fail_fifth(n))
            .expect("some name fails");
        assert!(error.retryable);
    }

    #[test]
    fn differ_labels_every_created_pod_with_a_scoped_value() {
        let input = jinghzhu_plugin_sdk::testing::jinghzhu("web", "default", 3)
            .input()
            .build();
        let normal = replicaset_logic::reconcile_with(&input, replicaset_logic::Variant::V1);
        let mut out = normal.clone();
        mark_differ(&mut out, "web");
        assert_eq!(out.create_pods.len(), 3);
        assert_ne!(out.create_pods, normal.create_pods);
        for (marked, plain) in out.create_pods.iter().zip(&normal.create_pods) {
            assert_eq!(
                jinghzhu_plugin_sdk::kv::get(&marked.labels, DIFFER_LABEL_KEY),
                Some("web")
            );
            assert_eq!(marked.labels.len(), plain.labels.len() + 1);
            assert_eq!(marked.spec_json, plain.spec_json);
        }
        assert_eq!(out.status, normal.status);
        assert_eq!(out.delete_pods, normal.delete_pods);
    }
}
