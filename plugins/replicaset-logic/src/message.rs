//! The texts the plugin writes: status messages, and the `v2` variant that
//! marks them (used to see a hot swap happen).

use std::fmt::Write as _;

/// Which build of the plugin is speaking. `V2` (the replicaset plugin's
/// cargo feature `v2`) prefixes status messages with `[v2] ` and its version
/// ends with `+v2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The ordinary build.
    V1,
    /// The build with the `v2` feature.
    V2,
}

impl Variant {
    /// What the status message starts with.
    pub fn message_prefix(self) -> &'static str {
        match self {
            Variant::V1 => "",
            Variant::V2 => "[v2] ",
        }
    }

    /// What `info().version` ends with.
    pub fn version_suffix(self) -> &'static str {
        match self {
            Variant::V1 => "",
            Variant::V2 => "+v2",
        }
    }
}

/// What a reconcile does about the Pods, as the status message tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Nothing to do: the live Pods match `desired`.
    Steady,
    /// Creating this many Pods.
    Creating(usize),
    /// Deleting this many Pods.
    Deleting(usize),
    /// The Jinghzhu is being deleted; Pods are left to garbage collection.
    OwnerDeleting,
}

/// The status message: `"<current>/<desired> pods, <ready>/<desired>
/// ready"`, then `; creating N`, `; deleting N` or `; Jinghzhu is being
/// deleted` when that applies, with the variant's prefix; e.g.
/// `"2/3 pods, 1/3 ready; creating 1"`.
pub fn status_message(
    current: usize,
    ready: usize,
    desired: u32,
    activity: Activity,
    variant: Variant,
) -> String {
    let mut text = format!(
        "{}{current}/{desired} pods, {ready}/{desired} ready",
        variant.message_prefix()
    );
    // Writing into a `String` cannot fail.
    let _ = match activity {
        Activity::Steady => Ok(()),
        Activity::Creating(n) => write!(text, "; creating {n}"),
        Activity::Deleting(n) => write!(text, "; deleting {n}"),
        Activity::OwnerDeleting => write!(text, "; Jinghzhu is being deleted"),
    };
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages() {
        let v1 = Variant::V1;
        assert_eq!(
            status_message(2, 1, 3, Activity::Creating(1), v1),
            "2/3 pods, 1/3 ready; creating 1"
        );
        assert_eq!(
            status_message(3, 3, 1, Activity::Deleting(2), v1),
            "3/1 pods, 3/1 ready; deleting 2"
        );
        assert_eq!(
            status_message(3, 3, 3, Activity::Steady, v1),
            "3/3 pods, 3/3 ready"
        );
        assert_eq!(
            status_message(1, 0, 3, Activity::OwnerDeleting, v1),
            "1/3 pods, 0/3 ready; Jinghzhu is being deleted"
        );
    }

    #[test]
    fn v2_prefixes_the_message_and_suffixes_the_version() {
        assert_eq!(
            status_message(0, 0, 1, Activity::Creating(1), Variant::V2),
            "[v2] 0/1 pods, 0/1 ready; creating 1"
        );
        assert_eq!(Variant::V2.version_suffix(), "+v2");
        assert_eq!(Variant::V1.version_suffix(), "");
    }
}
