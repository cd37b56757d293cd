//! `wasm-operator push PLUGIN.wasm oci://REGISTRY/REPO:TAG`: uploads a
//! component as a CNCF Wasm OCI artifact (config
//! `application/vnd.wasm.config.v0+json`, one `application/wasm` layer),
//! the layout the host pulls. Prints the manifest digest, which is what
//! `cosign sign` signs and `--plugin oci://…@sha256:…` pins.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderValue;
use oci_client::RegistryOperation;

use super::oci::{OCI_MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
use super::reference::OciRef;
use super::{OciError, OciOptions, OciPuller, rules, sha256_digest};

/// Options of `wasm-operator push`.
#[derive(Debug, Clone, clap::Args)]
pub struct PushArgs {
    /// The component to push (.wasm).
    pub plugin: PathBuf,
    /// Where: oci://REGISTRY/REPOSITORY:TAG.
    pub reference: String,
    /// Registries (host:port) reached over plain HTTP.
    #[arg(long = "oci-insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure_registries: Vec<String>,
    /// Extra trusted CA certificates (PEM).
    #[arg(long = "oci-ca-file", value_name = "FILE")]
    pub ca_files: Vec<PathBuf>,
    /// Registry credentials: a dockerconfigjson file (default: none; anonymous).
    #[arg(
        long = "oci-docker-config",
        value_name = "FILE",
        env = "WASM_OPERATOR_OCI_DOCKER_CONFIG"
    )]
    pub docker_config: Option<PathBuf>,
}

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Now as RFC 3339 UTC (`2026-11-25T14:00:00Z`).
fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// The CNCF Wasm artifact config and manifest for `wasm`: (config, manifest).
pub fn artifact(wasm: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let layer_digest = sha256_digest(wasm);
    let config = serde_json::json!({
        "created": now_rfc3339(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    })
    .to_string()
    .into_bytes();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "artifactType": WASM_CONFIG_MEDIA_TYPE,
        "config": {
            "mediaType": WASM_CONFIG_MEDIA_TYPE,
            "digest": sha256_digest(&config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": WASM_LAYER_MEDIA_TYPE,
            "digest": layer_digest,
            "size": wasm.len(),
        }],
    })
    .to_string()
    .into_bytes();
    (config, manifest)
}

/// Pushes `wasm` to `reference` in the CNCF layout; returns the manifest digest.
pub async fn push(puller: &OciPuller, reference: &OciRef, wasm: &[u8]) -> Result<String, OciError> {
    let (client, auth) = puller.client_and_auth(reference);
    let target = reference.client_ref();
    let fail = |what: &str, err: oci_client::errors::OciDistributionError| {
        let text = err.to_string();
        let rule = if text.contains("authoriz")
            || text.contains("UNAUTHORIZED")
            || text.contains("DENIED")
        {
            rules::AUTH
        } else {
            rules::UNREACHABLE
        };
        OciError::new(rule, format!("pushing {what} to {reference}: {text}"))
    };
    client
        .auth(&target, &auth, RegistryOperation::Push)
        .await
        .map_err(|err| fail("(authenticating)", err))?;
    let (config, manifest) = artifact(wasm);
    client
        .push_blob(&target, wasm.to_vec(), &sha256_digest(wasm))
        .await
        .map_err(|err| fail("the layer", err))?;
    client
        .push_blob(&target, config.clone(), &sha256_digest(&config))
        .await
        .map_err(|err| fail("the config", err))?;
    let digest = sha256_digest(&manifest);
    client
        .push_manifest_raw(
            &target,
            manifest,
            HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE),
        )
        .await
        .map_err(|err| fail("the manifest", err))?;
    Ok(digest)
}

/// Runs `wasm-operator push`.
pub fn run(args: PushArgs) -> anyhow::Result<ExitCode> {
    let reference = OciRef::parse(&args.reference)?;
    let wasm = std::fs::read(&args.plugin)
        .map_err(|err| anyhow::anyhow!("reading {}: {err}", args.plugin.display()))?;
    let docker_config = args
        .docker_config
        .as_ref()
        .map(|path| {
            std::fs::read(path).map_err(|err| anyhow::anyhow!("reading {}: {err}", path.display()))
        })
        .transpose()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let digest = runtime.block_on(async {
        let puller = OciPuller::new(OciOptions {
            insecure_registries: args.insecure_registries.clone(),
            ca_files: args.ca_files.clone(),
            docker_config,
            ..OciOptions::default()
        })?;
        push(&puller, &reference, &wasm).await
    })?;
    eprintln!(
        "pushed {} ({} bytes) to {reference}; sign it with:\n  cosign sign --key cosign.key {}/{}@{digest}",
        args.plugin.display(),
        wasm.len(),
        reference.registry,
        reference.repository
    );
    println!("{digest}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_artifact_has_the_cncf_layout() {
        let (config, manifest) = artifact(b"\0asm");
        let m: serde_json::Value = serde_json::from_slice(&manifest).expect("json");
        assert_eq!(m["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE);
        assert_eq!(m["config"]["digest"], sha256_digest(&config));
        assert_eq!(m["layers"][0]["mediaType"], WASM_LAYER_MEDIA_TYPE);
        assert_eq!(m["layers"][0]["size"], 4);
        let c: serde_json::Value = serde_json::from_slice(&config).expect("json");
        assert_eq!(c["layerDigests"][0], sha256_digest(b"\0asm"));
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(20_417), (2025, 11, 25));
    }
}
