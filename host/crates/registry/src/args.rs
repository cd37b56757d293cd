//! The `run` flags of OCI plugin sources (`--plugin oci://…`): registry
//! access, the size cap, the deadlines, the redirect hosts, the poll
//! interval, the local store and the signature policy; and those of file
//! sources (where a `JinghzhuPlugin`'s file may be, how big).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::bounded::{DEFAULT_MAX_FILE_MIB, FileRules};
use super::oci::DEFAULT_MAX_ARTIFACT_BYTES;
use super::signature::{Threshold, VerificationPolicy};
use super::store::StoreKey;
use super::{OciError, OciOptions, rules};

/// OCI source flags of `wasm-operator run`.
#[derive(Debug, Clone, clap::Args)]
pub struct OciArgs {
    /// Largest plugin artifact pulled from a registry, in MiB (checked
    /// against the manifest before any byte of it is read).
    #[arg(long, env = "WASM_OPERATOR_OCI_MAX_ARTIFACT_MIB", default_value_t = DEFAULT_MAX_ARTIFACT_BYTES >> 20, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub oci_max_artifact_mib: u64,
    /// How often an `oci://…:TAG` plugin's tag is checked for a new digest
    /// (e.g. 30s, 1s, 2m).
    #[arg(long, env = "WASM_OPERATOR_OCI_POLL_INTERVAL", default_value = "30s", value_parser = parse_interval)]
    pub oci_poll_interval: Duration,
    /// Most time one registry request may take, its answer's body included
    /// (a token request counts in the request that needed it); a request
    /// still running then is cut (`oci/deadline`) and tried again at the
    /// next poll.
    #[arg(long, env = "WASM_OPERATOR_OCI_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_interval)]
    pub oci_request_timeout: Duration,
    /// Most time one pull may take (manifest, signatures and the blob,
    /// whose download only this bounds); at start the local copy serves
    /// when the pull does not finish in time.
    #[arg(long, env = "WASM_OPERATOR_OCI_PULL_TIMEOUT", default_value = "120s", value_parser = parse_interval)]
    pub oci_pull_timeout: Duration,
    /// A host (host[:port]) a registry may redirect downloads to (a CDN or
    /// object store); repeat for more. Other redirects are followed only
    /// within the registry's own origin.
    #[arg(
        long = "oci-blob-host",
        env = "WASM_OPERATOR_OCI_BLOB_HOST",
        value_delimiter = ',',
        value_name = "HOST[:PORT]"
    )]
    pub oci_blob_hosts: Vec<String>,
    /// A registry (host:port) reached over plain HTTP; repeat for more.
    /// Every other registry is HTTPS only.
    #[arg(
        long = "oci-insecure-registry",
        env = "WASM_OPERATOR_OCI_INSECURE_REGISTRY",
        value_delimiter = ',',
        value_name = "HOST[:PORT]"
    )]
    pub oci_insecure_registries: Vec<String>,
    /// Extra CA certificates (PEM) trusted for registries; repeat for more.
    #[arg(
        long = "oci-ca-file",
        env = "WASM_OPERATOR_OCI_CA_FILE",
        value_delimiter = ',',
        value_name = "FILE"
    )]
    pub oci_ca_files: Vec<PathBuf>,
    /// Registry credentials: a dockerconfigjson file (a mounted
    /// `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`).
    #[arg(long, env = "WASM_OPERATOR_OCI_DOCKER_CONFIG", value_name = "FILE")]
    pub oci_docker_config: Option<PathBuf>,
    /// Where pulled artifacts are kept by digest, so a restart serves while
    /// the registry is down (default: `oci/` in the precompiled cache directory).
    #[arg(long, env = "WASM_OPERATOR_OCI_STORE_DIR", value_name = "DIR")]
    pub oci_store_dir: Option<PathBuf>,
    /// Most MiB the OCI store keeps: past it, after each pull, the least
    /// recently used artifacts go (never the plugin serving, the previous
    /// one, the shadow or a canary, one being vetted, nor the last known
    /// good of a reference a live source follows).
    #[arg(long, env = "WASM_OPERATOR_OCI_STORE_MAX_MIB", default_value_t = super::store::DEFAULT_MAX_BYTES >> 20, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub oci_store_max_mib: u64,
    /// A trusted cosign public key (PEM, ECDSA P-256); repeat for more. With
    /// any key, an OCI plugin must carry signatures that satisfy
    /// --plugin-verify-policy before it is compiled.
    #[arg(
        long = "plugin-verify-key",
        env = "WASM_OPERATOR_PLUGIN_VERIFY_KEY",
        value_delimiter = ',',
        value_name = "FILE"
    )]
    pub plugin_verify_keys: Vec<PathBuf>,
    /// How many of the keys must have signed: all, any, or at-least=N.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_VERIFY_POLICY", default_value = "all", value_parser = clap::value_parser!(Threshold))]
    pub plugin_verify_policy: Threshold,
    /// With --plugin-verify-key, let a JinghzhuPlugin serve from a source
    /// that carries no signature (a ConfigMap or a file). Unset (the
    /// default), such a resource is refused (`verification/unsigned-source`):
    /// a resource editor cannot loosen the signatures the admin requires.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_RESOURCE_ALLOW_UNSIGNED")]
    pub plugin_resource_allow_unsigned: bool,
}

/// File source flags of `wasm-operator run`.
#[derive(Debug, Clone, clap::Args)]
pub struct FileSourceArgs {
    /// The directory a JinghzhuPlugin's `spec.source.file` must be under
    /// (symlinks followed, e.g. where a plugin ConfigMap is mounted); a file
    /// elsewhere is refused (`file/outside-root`). Unset: file sources of
    /// resources are refused.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_FILE_ROOT", value_name = "DIR")]
    pub plugin_file_root: Option<PathBuf>,
    /// Development only: let a JinghzhuPlugin's file source name any path
    /// the host can read (it must still be a regular file within the cap).
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_FILE_ANY_PATH")]
    pub plugin_file_any_path: bool,
    /// Largest plugin file read, in MiB (`--plugin`, `--shadow-plugin` and
    /// file sources of resources; checked from the file's metadata before
    /// reading).
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_FILE_MAX_MIB", default_value_t = DEFAULT_MAX_FILE_MIB, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub plugin_file_max_mib: u64,
}

impl FileSourceArgs {
    /// The rules the flags ask for.
    pub fn rules(&self) -> FileRules {
        FileRules {
            root: self.plugin_file_root.clone(),
            any_path: self.plugin_file_any_path,
            max_bytes: self.plugin_file_max_mib << 20,
        }
    }
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((text, "s"), |i| (&text[..i], &text[i..]));
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: write e.g. 30s, 500ms or 2m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("{text:?}: the unit is ms, s, m or h")),
    };
    if !(0.1..=86_400.0).contains(&seconds) {
        return Err(format!("{text:?}: between 100ms and 24h"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

impl clap::builder::ValueParserFactory for Threshold {
    type Parser = fn(&str) -> Result<Threshold, String>;
    fn value_parser() -> Self::Parser {
        |text| text.parse()
    }
}

impl OciArgs {
    /// The signature policy the flags ask for (`None` without keys).
    pub fn verification(&self) -> Result<Option<Arc<VerificationPolicy>>, OciError> {
        if self.plugin_verify_keys.is_empty() {
            return Ok(None);
        }
        VerificationPolicy::from_key_files(&self.plugin_verify_keys, self.plugin_verify_policy)
            .map(|policy| Some(Arc::new(policy)))
    }

    /// The puller options the flags ask for. `precompiled` is the
    /// precompiled cache (its directory, `None` when the cache is off, and
    /// its key file): the store defaults to `oci/` under that directory
    /// (none when the cache is off and no --oci-store-dir is given) and is
    /// signed with the cache's key.
    pub fn options(&self, precompiled: &StoreKey) -> Result<OciOptions, OciError> {
        let docker_config = self
            .oci_docker_config
            .as_ref()
            .map(|path| {
                std::fs::read(path).map_err(|err| {
                    OciError::new(
                        rules::CONFIG,
                        format!("reading --oci-docker-config {}: {err}", path.display()),
                    )
                })
            })
            .transpose()?;
        Ok(OciOptions {
            max_artifact_bytes: self.oci_max_artifact_mib << 20,
            blob_hosts: self.oci_blob_hosts.clone(),
            request_timeout: self.oci_request_timeout,
            pull_timeout: self.oci_pull_timeout,
            insecure_registries: self.oci_insecure_registries.clone(),
            ca_files: self.oci_ca_files.clone(),
            docker_config,
            store_dir: self
                .oci_store_dir
                .clone()
                .or_else(|| precompiled.dir.as_ref().map(|dir| dir.join("oci"))),
            store_key: precompiled.clone(),
            store_max_bytes: self.oci_store_max_mib << 20,
            verification: self.verification()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The flags as `wasm-operator run` takes them (flattened).
    #[derive(Debug, clap::Parser)]
    struct Run {
        #[command(flatten)]
        oci: OciArgs,
        #[command(flatten)]
        files: FileSourceArgs,
    }

    #[test]
    fn the_oci_flags_parse_with_their_documented_defaults() {
        let run = Run::try_parse_from([
            "run",
            "--oci-poll-interval",
            "1s",
            "--oci-max-artifact-mib",
            "2",
            "--plugin-verify-key",
            "a.pub",
            "--plugin-verify-key",
            "b.pub",
            "--plugin-verify-policy",
            "at-least=2",
            "--oci-insecure-registry",
            "127.0.0.1:5000",
        ])
        .expect("parses");
        assert_eq!(run.oci.oci_poll_interval, Duration::from_secs(1));
        // The flags' defaults are the documented constants.
        use crate::http::{DEFAULT_PULL_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};
        assert_eq!(run.oci.oci_request_timeout, DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(run.oci.oci_pull_timeout, DEFAULT_PULL_TIMEOUT);
        assert_eq!(run.files.plugin_file_max_mib, DEFAULT_MAX_FILE_MIB);
        assert_eq!(
            run.oci.oci_store_max_mib,
            crate::store::DEFAULT_MAX_BYTES >> 20
        );
        assert_eq!(run.oci.oci_max_artifact_mib, 2);
        assert_eq!(run.oci.oci_insecure_registries, ["127.0.0.1:5000"]);
        assert_eq!(run.oci.plugin_verify_keys.len(), 2);
        assert_eq!(run.oci.plugin_verify_policy, Threshold::AtLeast(2));
        // Key files that do not exist are a config error naming the file.
        let err = run
            .oci
            .options(&StoreKey::default())
            .expect_err("no such key");
        assert_eq!(err.rule, rules::CONFIG);
        assert!(err.message.contains("a.pub"), "{err}");
        assert!(Run::try_parse_from(["run", "--plugin-verify-policy", "most"]).is_err());
    }

    #[test]
    fn the_store_defaults_to_the_precompiled_cache_s_directory_and_key() {
        let run = Run::try_parse_from(["run"]).expect("parses");
        let precompiled = StoreKey {
            file: Some(PathBuf::from("/keys/cache.key")),
            dir: Some(PathBuf::from("/cache")),
        };
        let options = run.oci.options(&precompiled).expect("options");
        assert_eq!(options.store_dir, Some(PathBuf::from("/cache/oci")));
        assert_eq!(options.store_key.file, precompiled.file);
        assert_eq!(options.store_key.dir, precompiled.dir);
        assert!(options.verification.is_none(), "no keys, no policy");
        // The cache off and no --oci-store-dir: no store.
        let options = run.oci.options(&StoreKey::default()).expect("options");
        assert_eq!(options.store_dir, None);
        let run = Run::try_parse_from(["run", "--oci-store-dir", "/store"]).expect("parses");
        let options = run.oci.options(&StoreKey::default()).expect("options");
        assert_eq!(options.store_dir, Some(PathBuf::from("/store")));
    }

    #[test]
    fn intervals_have_units_and_bounds() {
        assert_eq!(parse_interval("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_interval("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("5x").is_err());
    }
}
