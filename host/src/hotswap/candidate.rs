//! Vetting a candidate plugin before it may serve: digest pin, compile and
//! precompile, the world check (done by loading), and a smoke reconcile on a
//! synthetic object so a plugin that traps on every call is refused before
//! it touches the cluster. The compile runs on tokio's blocking pool
//! ([`Runtime::load_off_thread`]), never on an async worker.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::crd::{Jinghzhu, JinghzhuSpec};
use crate::runtime::{LoadedPlugin, Runtime, digest_of};

/// Why a candidate was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The bytes are not what `--plugin-sha256` pins.
    #[error("digest mismatch: the candidate is {actual}, but only {expected} may load")]
    DigestMismatch {
        /// The pinned digest.
        expected: String,
        /// The candidate's digest.
        actual: String,
    },
    /// Not a component of our world, or it does not compile.
    #[error("cannot load: {0}")]
    Load(String),
    /// It loaded, but failed the smoke reconcile.
    #[error("failed the smoke reconcile: {0}")]
    SmokeTest(String),
    /// An older version of the plugin that serves (same name, a lower
    /// version), and downgrades are not allowed.
    #[error(
        "downgrade (rule plugin/downgrade): {candidate} is an older version of {serving}, which \
         serves; a source moved back (a tag to an older signed artifact) is refused unless the \
         admin starts the host with --plugin-allow-downgrade"
    )]
    Downgrade {
        /// The plugin that serves (`name@version (sha256:…)`).
        serving: String,
        /// The candidate.
        candidate: String,
    },
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

/// Checks `bytes` and returns the loaded plugin if it may serve.
pub async fn vet(
    runtime: &Arc<Runtime>,
    bytes: &[u8],
    source: &str,
    pinned_sha256: Option<&str>,
) -> Result<Arc<LoadedPlugin>, Refusal> {
    if let Some(expected) = pinned_sha256 {
        let actual = digest_of(bytes);
        let expected_full = if expected.starts_with("sha256:") {
            expected.to_string()
        } else {
            format!("sha256:{expected}")
        };
        if actual != expected_full {
            return Err(Refusal::DigestMismatch {
                expected: expected_full,
                actual,
            });
        }
    }
    let plugin = runtime
        .load_off_thread(Arc::from(bytes), source.to_string())
        .await
        .map_err(|err| Refusal::Load(format!("{err:#}")))?;
    smoke_test(&plugin).await?;
    Ok(plugin)
}

/// One reconcile of a synthetic Jinghzhu with no pods: it must not trap.
/// (A plugin error value is acceptable: it may reject the synthetic input.)
async fn smoke_test(plugin: &Arc<LoadedPlugin>) -> Result<(), Refusal> {
    let mut jz = Jinghzhu::new(
        "wasm-operator-smoke-test",
        JinghzhuSpec {
            desired: 1,
            template: None,
        },
    );
    jz.metadata = ObjectMeta {
        name: Some("wasm-operator-smoke-test".into()),
        namespace: Some("default".into()),
        uid: Some("00000000-0000-0000-0000-000000000000".into()),
        generation: Some(1),
        ..ObjectMeta::default()
    };
    match plugin
        .reconcile(&jz, &[], "default/wasm-operator-smoke-test")
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if err.is_returned_error() => Ok(()),
        Err(err) => Err(Refusal::SmokeTest(err.to_string())),
    }
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
