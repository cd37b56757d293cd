//! What a slot has served, by plugin name and version: an older version
//! of the same plugin is a downgrade, refused unless the admin allows it.

use crate::refusal::Refusal;
use crate::runtime::LoadedPlugin;

/// The rule that refuses an older version of a plugin that served.
pub const DOWNGRADE: &str = "plugin/downgrade";

/// The downgrade refusal of `candidate`, older than `serving` (both
/// `name@version (sha256:…)`).
pub fn downgrade(serving: &str, candidate: &str) -> Refusal {
    Refusal::new(
        DOWNGRADE,
        format!(
            "{candidate} is an older version of {serving}, which serves; a source moved back \
             (a tag to an older signed artifact) is refused unless the admin starts the host \
             with --plugin-allow-downgrade"
        ),
    )
}

/// `major.minor.patch` of a semantic version, and whether it is a
/// pre-release (`-…`, before the release of the same numbers); build
/// metadata (`+…`) does not count. `None`: not such a version.
fn version_key(version: &str) -> Option<((u64, u64, u64), bool)> {
    let version = version.split('+').next().unwrap_or(version).trim();
    let (numbers, pre) = match version.split_once('-') {
        Some((numbers, _)) => (numbers, true),
        None => (version, false),
    };
    let mut parts = numbers.split('.').map(|part| part.parse::<u64>().ok());
    let key = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some((key, pre))
}

/// Whether version `new` is older than `old` (both semantic; pre-releases
/// before their release); versions that do not parse are not judged.
fn is_older(new: &str, old: &str) -> bool {
    match (version_key(old), version_key(new)) {
        (Some((old, old_pre)), Some((new, new_pre))) => {
            new < old || (new == old && new_pre && !old_pre)
        }
        _ => false,
    }
}

/// A plugin version that served: its name, version and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// `info().name`.
    pub name: String,
    /// `info().version`.
    pub version: String,
    /// The digest that served it.
    pub digest: String,
}

impl Served {
    /// What `plugin` is.
    pub fn of(plugin: &LoadedPlugin) -> Self {
        Self {
            name: plugin.info().name.clone(),
            version: plugin.info().version.clone(),
            digest: plugin.digest().to_string(),
        }
    }

    /// Whether this is an older version of `other`'s plugin.
    pub fn is_older_than(&self, other: &Served) -> bool {
        self.name == other.name && is_older(&self.version, &other.version)
    }

    /// `name@version (sha256:…)`, as plugins describe themselves.
    pub fn describe(&self) -> String {
        format!(
            "{}@{} ({})",
            self.name,
            self.version,
            crate::runtime::short_digest(&self.digest)
        )
    }
}

/// Whether `candidate` is an older version of the plugin that `served`
/// (same name, both versions semantic, the candidate's lower). Other names
/// or versions that do not parse are not judged.
pub fn is_downgrade(served: &Served, candidate: &LoadedPlugin) -> bool {
    let new = candidate.info();
    served.name == new.name && is_older(&new.version, &served.version)
}

#[cfg(test)]
mod version_tests {
    use super::version_key;

    #[test]
    fn versions_compare_as_semver_without_build_metadata() {
        assert_eq!(version_key("0.1.0"), Some(((0, 1, 0), false)));
        assert_eq!(version_key("0.1.0+v2"), Some(((0, 1, 0), false)));
        assert_eq!(version_key("1.2.3-rc.1"), Some(((1, 2, 3), true)));
        assert_eq!(version_key("1.2"), None);
        assert_eq!(version_key("1.2.3.4"), None);
        assert_eq!(version_key("v1.2.3"), None);
        assert!(version_key("0.0.9").map(|k| k.0) < version_key("0.1.0").map(|k| k.0));
    }
}
