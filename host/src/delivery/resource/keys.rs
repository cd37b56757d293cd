//! Verification keys a `JinghzhuPlugin` names in Secrets
//! (`spec.verification.keys[].secretRef`), kept current: each key is read
//! when its source opens (a missing or bad key refuses the spec at once,
//! `verification/keys`) and then read again every refresh interval (the
//! OCI poll interval) by a task of its own, so a Secret rotated to revoke a
//! key counts from the next artifact verified, as a rewritten
//! `--plugin-verify-key` file does.
//!
//! A key whose Secret is deleted, whose data key is gone or whose PEM is
//! no longer a key verifies nothing from then on (each verification says
//! why); a read that fails for another reason (the API server unreachable,
//! a timeout) keeps the key last read. Reads are `get`s of the named
//! Secrets, the only Secret verb the shipped RBAC grants.
//!
//! The refresh task holds the key weakly and stops once the policy holding
//! the key is dropped (the source replaced or the resource gone).
//!
//! A tenant resource's keys may name only the Secrets the admin allows
//! ([`AllowedKeySecrets`], `--tenant-key-secret`; none by default), checked
//! before any read (rule `verification/secret-not-allowed`), so the refusal
//! says nothing of whether a Secret exists or what it holds. The resources
//! the admin names with `--plugin-resource` may name any.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use crate::crd::plugin::VerificationKeySpec;
use crate::locks::RwLockExt;
use crate::registry::signature::{CosignSignature, PublicKeyVerifier, Subject, Verifier};

/// The flag that allows a Secret for tenants' keys.
pub const TENANT_KEY_SECRET_FLAG: &str = "--tenant-key-secret";

/// The Secrets a tenant resource's `spec.verification.keys` may name
/// (`--tenant-key-secret NAMESPACE/NAME`, repeatable); empty: none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedKeySecrets {
    /// `(namespace, name)` pairs.
    secrets: BTreeSet<(String, String)>,
}

impl AllowedKeySecrets {
    /// Parses `NAMESPACE/NAME` items; an error names the one that is not.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, String> {
        let secrets = items
            .iter()
            .map(|item| {
                let item = item.as_ref().trim();
                item.split_once('/')
                    .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
                    .map(|(ns, name)| (ns.to_string(), name.to_string()))
                    .ok_or_else(|| {
                        format!("{TENANT_KEY_SECRET_FLAG} {item:?}: expected NAMESPACE/NAME")
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { secrets })
    }

    /// Whether the key `spec` names an allowed Secret; the refusal reads
    /// the same whether that Secret exists or not (nothing is read here).
    pub fn check(&self, spec: &VerificationKeySpec) -> Result<(), String> {
        let at = &spec.secret_ref;
        if self
            .secrets
            .contains(&(at.namespace.clone(), at.name.clone()))
        {
            return Ok(());
        }
        Err(format!(
            "key {:?} names Secret {}/{}, which a tenant plugin may not use: its keys may name \
             only Secrets the admin allows ({TENANT_KEY_SECRET_FLAG} {}/{})",
            spec.name, at.namespace, at.name, at.namespace, at.name
        ))
    }
}

/// What a key read from its Secret is now.
type KeyState = Result<PublicKeyVerifier, String>;

/// A verification key read from a Secret and kept current.
pub struct SecretKey {
    name: String,
    state: Arc<RwLock<KeyState>>,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretKey")
            .field("name", &self.name)
            .finish()
    }
}

/// Why a key read failed: its Secret says it is gone or bad (the key
/// stops counting), or the read itself failed (the key last read stays).
#[derive(Debug, PartialEq)]
enum ReadError {
    Revoked(String),
    Unreachable(String),
}

impl ReadError {
    fn message(&self) -> &str {
        match self {
            Self::Revoked(why) | Self::Unreachable(why) => why,
        }
    }
}

/// Where a key is, for messages: `Secret ns/name key "cosign.pub"`.
fn location(spec: &VerificationKeySpec) -> String {
    let at = &spec.secret_ref;
    format!("Secret {}/{} key {:?}", at.namespace, at.name, at.key)
}

/// The key `spec` names, from a Secret as read.
fn key_of(spec: &VerificationKeySpec, secret: &Secret) -> Result<PublicKeyVerifier, ReadError> {
    let where_ = location(spec);
    let pem = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&spec.secret_ref.key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .ok_or_else(|| {
            ReadError::Revoked(format!("the {where_} of key {:?} is not there", spec.name))
        })?;
    PublicKeyVerifier::from_pem(&spec.name, &pem)
        .map_err(|e| ReadError::Revoked(format!("key {:?} ({where_}): {}", spec.name, e.message)))
}

async fn read(client: &Client, spec: &VerificationKeySpec) -> Result<PublicKeyVerifier, ReadError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &spec.secret_ref.namespace);
    let gone = |why: String| {
        ReadError::Revoked(format!(
            "the {} of key {:?} {why}",
            location(spec),
            spec.name
        ))
    };
    match api.get(&spec.secret_ref.name).await {
        Ok(secret) => key_of(spec, &secret),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(gone("is gone".into())),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Err(gone(format!("may not be read: {}", status.message)))
        }
        Err(err) => Err(ReadError::Unreachable(format!(
            "reading the {} of key {:?}: {err}",
            location(spec),
            spec.name
        ))),
    }
}

impl SecretKey {
    /// Reads the key `spec` names now (any failure refuses: the caller
    /// reports it as `verification/keys`) and starts re-reading it every
    /// `refresh`.
    pub async fn open(
        client: &Client,
        spec: &VerificationKeySpec,
        refresh: Duration,
    ) -> Result<Self, String> {
        let first = read(client, spec)
            .await
            .map_err(|err| err.message().to_string())?;
        let state = Arc::new(RwLock::new(Ok(first)));
        tokio::spawn(keep_current(
            client.clone(),
            spec.clone(),
            Arc::downgrade(&state),
            refresh,
        ));
        Ok(Self {
            name: spec.name.clone(),
            state,
        })
    }
}

/// Re-reads the key every `refresh` while its holder lives.
async fn keep_current(
    client: Client,
    spec: VerificationKeySpec,
    state: Weak<RwLock<KeyState>>,
    refresh: Duration,
) {
    loop {
        tokio::time::sleep(refresh).await;
        if state.strong_count() == 0 {
            return;
        }
        let now = read(&client, &spec).await;
        let Some(state) = state.upgrade() else { return };
        let mut current = state.write_unpoisoned();
        match now {
            Ok(key) => {
                if current.is_err() {
                    tracing::info!(key = %spec.name, secret = %location(&spec), "verification key readable again");
                }
                *current = Ok(key);
            }
            Err(ReadError::Revoked(why)) => {
                if current.is_ok() {
                    tracing::warn!(key = %spec.name, reason = %why, "verification key no longer usable: it verifies nothing from now on");
                }
                *current = Err(why);
            }
            Err(ReadError::Unreachable(why)) => {
                tracing::debug!(key = %spec.name, reason = %why, "verification key not re-read; the key last read stays");
            }
        }
    }
}

impl Verifier for SecretKey {
    fn name(&self) -> &str {
        &self.name
    }

    fn verify(&self, subject: &Subject<'_>, signature: &CosignSignature) -> Result<(), String> {
        let state = self.state.read_unpoisoned();
        match &*state {
            Ok(key) => key.verify(subject, signature),
            Err(why) => Err(format!("the key is not usable now: {why}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::plugin::SecretKeyRef;
    use k8s_openapi::ByteString;

    fn spec() -> VerificationKeySpec {
        VerificationKeySpec {
            name: "release".into(),
            secret_ref: SecretKeyRef {
                namespace: "ns".into(),
                name: "release-key".into(),
                key: "cosign.pub".into(),
            },
        }
    }

    fn secret_with(key: &str, value: &[u8]) -> Secret {
        Secret {
            data: Some([(key.to_string(), ByteString(value.to_vec()))].into()),
            ..Secret::default()
        }
    }

    #[test]
    fn only_allowed_secrets_pass_and_the_refusal_names_the_flag() {
        let none = AllowedKeySecrets::default();
        let refused = none.check(&spec()).expect_err("none allowed by default");
        assert!(
            refused.contains("--tenant-key-secret ns/release-key"),
            "{refused}"
        );
        let allowed = AllowedKeySecrets::parse(&["ns/release-key", " other/key "]).expect("parsed");
        assert_eq!(allowed.check(&spec()), Ok(()));
        let mut elsewhere = spec();
        elsewhere.secret_ref.namespace = "other-ns".into();
        // The same words whatever the Secret holds: only its name is read.
        assert_eq!(
            allowed.check(&elsewhere).expect_err("another namespace"),
            none.check(&elsewhere).expect_err("none allowed")
        );
        for bad in ["release-key", "/x", "ns/", "a/b/c"] {
            assert!(AllowedKeySecrets::parse(&[bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_secret_without_the_key_or_with_a_bad_pem_revokes() {
        let missing = key_of(&spec(), &secret_with("other", b"x")).expect_err("no key");
        assert!(
            matches!(&missing, ReadError::Revoked(why) if why.contains("is not there")),
            "{missing:?}"
        );
        let bad = key_of(&spec(), &secret_with("cosign.pub", b"not a key")).expect_err("bad");
        assert!(matches!(bad, ReadError::Revoked(_)), "{bad:?}");
    }
}
