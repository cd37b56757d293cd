//! Opening a resource's plugin source (a `JinghzhuPlugin`'s or a
//! `PluginController`'s `spec.source`): the first read of a file or a
//! ConfigMap, or the task that pulls and verifies an OCI artifact under
//! the resource's signature policy, and the watch that sends every later
//! change as a [`Candidate`].

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::mpsc;

use crate::crd::plugin::{PluginSourceSpec, VerificationSpec};
use crate::delivery::sources::{self, Candidate, FirstRead};
use crate::refusal::Refusal;
use crate::registry::bounded::{FileRefusal, FileRules};
use crate::registry::signature::{Threshold, VerificationPolicy, Verifier};
use crate::registry::{OciOptions, OciPuller, OciRef};
use crate::runtime::digest_of;

use super::keys::{self, SecretKey};

/// What opening a source gave.
pub enum Opened {
    /// Its bytes (to be vetted).
    Bytes(Vec<u8>),
    /// An OCI source: its task pulls, and sends what it got.
    Pulling(tokio::task::AbortHandle),
    /// Nothing there yet: why.
    Missing(String),
}

/// Opens sources with the host's rules for them.
#[derive(Clone)]
pub struct SourceOpener {
    client: Client,
    /// How OCI sources are reached (`None`: the host takes none), and how
    /// often a tag is polled.
    oci: Option<(OciOptions, Duration)>,
    /// Where a file source may be and how big.
    files: FileRules,
    /// The Secrets verification keys may name (`None`: any, for the
    /// resources the admin names).
    key_secrets: Option<keys::AllowedKeySecrets>,
    /// With host keys, whether sources without signatures may serve.
    allow_unsigned: bool,
}

impl SourceOpener {
    /// An opener with the host's OCI options and file rules.
    pub fn new(client: &Client, oci: Option<(OciOptions, Duration)>, files: FileRules) -> Self {
        Self {
            client: client.clone(),
            oci,
            files,
            key_secrets: None,
            allow_unsigned: false,
        }
    }

    /// The same, letting sources without signatures (a ConfigMap, a file)
    /// serve while the host has keys (`--plugin-resource-allow-unsigned`).
    pub fn allowing_unsigned(mut self, allow: bool) -> Self {
        self.allow_unsigned = allow;
        self
    }

    /// Whether the host requires signatures (`--plugin-verify-key`).
    pub fn host_keys(&self) -> bool {
        self.oci
            .as_ref()
            .is_some_and(|(options, _)| options.verification.is_some())
    }

    /// The trust rules of a source before anything of it is compiled:
    /// signatures asked of a source that carries none; an unsigned source
    /// while the host requires signatures.
    pub fn check_trust(
        &self,
        source: &PluginSourceSpec,
        verification: Option<&VerificationSpec>,
    ) -> Result<(), Refusal> {
        if verification.is_some() && source.oci.is_none() {
            return Err(Refusal::new(
                "verification/source",
                "spec.verification asks for signatures, but a ConfigMap or a file carries none: \
                 ship the plugin as an OCI artifact (spec.source.oci) or drop spec.verification",
            ));
        }
        if self.host_keys() && source.oci.is_none() && !self.allow_unsigned {
            return Err(Refusal::new(
                "verification/unsigned-source",
                "the host requires signed plugins (--plugin-verify-key), and a ConfigMap or a \
                 file carries no signature: ship the plugin as an OCI artifact \
                 (spec.source.oci), or the admin starts the host with \
                 --plugin-resource-allow-unsigned",
            ));
        }
        Ok(())
    }

    /// Limits the Secrets verification keys may name (a tenant's).
    pub fn limit_key_secrets(&mut self, allowed: keys::AllowedKeySecrets) {
        self.key_secrets = Some(allowed);
    }

    /// Reads the source once and starts watching it (changes arrive on `tx`).
    pub async fn open(
        &self,
        source: &PluginSourceSpec,
        verification: Option<&VerificationSpec>,
        tx: mpsc::Sender<Candidate>,
    ) -> Result<Opened, Refusal> {
        if let Some(oci) = &source.oci {
            return self.open_oci(&oci.reference, verification, tx).await;
        }
        if let Some(cm) = &source.config_map {
            let first = sources::read_configmap(&self.client, &cm.namespace, &cm.name, &cm.key)
                .await
                .map_err(|err| Refusal::new("resource/source", format!("{err:#}")))?;
            let (opened, initial) = match first {
                FirstRead::Bytes(bytes) => {
                    let digest = digest_of(&bytes);
                    (Opened::Bytes(bytes), digest)
                }
                FirstRead::Missing(why) => (Opened::Missing(why), String::new()),
            };
            sources::watch_configmap(
                self.client.clone(),
                cm.namespace.clone(),
                cm.name.clone(),
                cm.key.clone(),
                initial,
                tx,
            );
            return Ok(opened);
        }
        if let Some(file) = &source.file {
            let path = std::path::PathBuf::from(&file.path);
            // A regular file under the root, within the cap, opened
            // without blocking: never /dev/zero, a FIFO or /etc/hostname.
            let (opened, initial) = match self.files.read(&path).await {
                Ok(bytes) => {
                    let digest = digest_of(&bytes);
                    (Opened::Bytes(bytes), digest)
                }
                Err(FileRefusal::Missing(why)) => (Opened::Missing(why), String::new()),
                Err(refusal) => {
                    return Err(Refusal::from(&refusal));
                }
            };
            sources::watch_file(path, initial, self.files.clone(), tx).map_err(|err| {
                Refusal::new("resource/source", format!("watching {}: {err}", file.path))
            })?;
            return Ok(opened);
        }
        Err(Refusal::new(
            "resource/source",
            "spec.source names no source: set one of oci, configMap or file",
        ))
    }

    /// Starts the task that pulls (and verifies) the artifact `reference`
    /// names and polls its tag; what it pulls or refuses arrives on `tx`.
    async fn open_oci(
        &self,
        reference: &str,
        verification: Option<&VerificationSpec>,
        tx: mpsc::Sender<Candidate>,
    ) -> Result<Opened, Refusal> {
        let Some((options, poll_interval)) = self.oci.clone() else {
            return Err(Refusal::new(
                "resource/source",
                "this host takes no OCI sources (started without the OCI options)",
            ));
        };
        let text = if crate::registry::is_oci(reference) {
            reference.to_string()
        } else {
            format!("oci://{reference}")
        };
        let reference = OciRef::parse(&text).map_err(Refusal::from)?;
        let mut options = options;
        if let Some(spec) = verification {
            options.verification = Some(Arc::new(self.policy_of(spec, poll_interval).await?));
        }
        let puller = OciPuller::new(options).map_err(Refusal::from)?;
        let source = sources::OciSource {
            reference,
            puller,
            poll_interval,
            // Refusals are recorded on the resource by this driver.
            events_on: None,
        };
        // The first read (the verified local copy, else a pull) happens in
        // the source's own task, like the polls.
        Ok(Opened::Pulling(sources::watch_oci(
            source,
            sources::OciStart::Read,
            tx,
        )))
    }

    /// The signature policy `spec` asks for, with the keys read from their
    /// Secrets and re-read every `refresh` ([`keys`]).
    async fn policy_of(
        &self,
        spec: &VerificationSpec,
        refresh: Duration,
    ) -> Result<VerificationPolicy, Refusal> {
        // Every name is checked before any Secret is read.
        if let Some(allowed) = &self.key_secrets {
            for key in &spec.keys {
                allowed
                    .check(key)
                    .map_err(|why| Refusal::new("verification/secret-not-allowed", why))?;
            }
        }
        let mut keys: Vec<(String, Arc<dyn Verifier>)> = Vec::new();
        for key in &spec.keys {
            let verifier = SecretKey::open(&self.client, key, refresh)
                .await
                .map_err(|why| Refusal::new("verification/keys", why))?;
            keys.push((key.name.clone(), Arc::new(verifier)));
        }
        let pick = |names: &[String]| -> Result<Vec<Arc<dyn Verifier>>, Refusal> {
            names
                .iter()
                .map(|name| {
                    keys.iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                        .ok_or_else(|| {
                            Refusal::new("verification/policy", format!("the policy names key {name:?}, which spec.verification.keys does not list"))
                        })
                })
                .collect()
        };
        let policy = spec.policy.clone().unwrap_or_default();
        let (verifiers, threshold) = match (policy.all_of.is_empty(), policy.any_of.is_empty()) {
            (true, true) => (
                keys.iter().map(|(_, v)| v.clone()).collect(),
                Threshold::AtLeast(policy.minimum_matches.unwrap_or(1) as usize),
            ),
            (false, true) => (pick(&policy.all_of)?, Threshold::All),
            (true, false) => (
                pick(&policy.any_of)?,
                Threshold::AtLeast(policy.minimum_matches.unwrap_or(1) as usize),
            ),
            (false, false) => {
                // Every key of allOf, and minimumMatches of anyOf.
                let all = VerificationPolicy::new(pick(&policy.all_of)?, Threshold::All)
                    .map_err(|e| Refusal::new("verification/policy", e.message))?;
                let any = VerificationPolicy::new(
                    pick(&policy.any_of)?,
                    Threshold::AtLeast(policy.minimum_matches.unwrap_or(1) as usize),
                )
                .map_err(|e| Refusal::new("verification/policy", e.message))?;
                return Ok(all.and(any));
            }
        };
        VerificationPolicy::new(verifiers, threshold)
            .map_err(|e| Refusal::new("verification/policy", e.message))
    }
}
