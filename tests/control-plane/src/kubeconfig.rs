//! Kubeconfig files for the local cluster.
//!
//! The admin kubeconfig authenticates with a client certificate in group
//! `system:masters`. For least-privilege tests there are two more shapes: one
//! that impersonates a user (and groups) on top of the admin identity, and one
//! that authenticates as a ServiceAccount with a bound token, so RBAC applies
//! exactly as it would to an operator running in a cluster.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// How a kubeconfig authenticates.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A client certificate and key (PEM files).
    ClientCertificate { cert: PathBuf, key: PathBuf },
    /// A client certificate that impersonates another user and groups.
    Impersonate {
        cert: PathBuf,
        key: PathBuf,
        user: String,
        groups: Vec<String>,
    },
    /// A bearer token, e.g. a ServiceAccount token.
    Token(String),
}

/// Writes a kubeconfig with a single cluster, user and context to `path`.
pub fn write(
    path: &Path,
    server: &str,
    ca_cert: &Path,
    context_name: &str,
    credentials: &Credentials,
) -> Result<()> {
    let user = match credentials {
        Credentials::ClientCertificate { cert, key } => json!({
            "client-certificate": cert,
            "client-key": key,
        }),
        Credentials::Impersonate {
            cert,
            key,
            user,
            groups,
        } => {
            let mut value = json!({
                "client-certificate": cert,
                "client-key": key,
                "as": user,
            });
            if !groups.is_empty() {
                value["as-groups"] = Value::from(groups.clone());
            }
            value
        }
        Credentials::Token(token) => json!({ "token": token }),
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "local",
            "cluster": { "server": server, "certificate-authority": ca_cert },
        }],
        "users": [{ "name": context_name, "user": user }],
        "contexts": [{
            "name": context_name,
            "context": { "cluster": "local", "user": context_name, "namespace": "default" },
        }],
        "current-context": context_name,
        "preferences": {},
    });
    let text = serde_yaml::to_string(&config)?;
    fs::write(path, text).with_context(|| format!("writing kubeconfig {}", path.display()))?;
    Ok(())
}

/// Loads a kubeconfig file into a kube-rs client configuration.
pub async fn load(path: &Path) -> Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    Ok(config)
}
