//! Registry credentials from a dockerconfigjson document (a
//! `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`, or
//! `~/.docker/config.json`): `auths.<registry>.auth` (base64 `user:pass`),
//! or `username`/`password`, or an `identitytoken`.

use std::collections::BTreeMap;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use super::{OciError, rules};

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

/// Credentials per registry host (`host[:port]`).
#[derive(Default, Clone)]
pub(crate) struct Credentials(BTreeMap<String, RegistryAuth>);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// `https://host:port/v1/` → `host:port` (docker config keys come in both forms).
fn registry_key(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key).to_ascii_lowercase()
}

impl Credentials {
    /// Parses a dockerconfigjson document.
    pub(crate) fn parse(json: &[u8]) -> Result<Self, OciError> {
        let bad = |why: String| {
            OciError::new(
                rules::CONFIG,
                format!(
                    "the registry credentials are not a dockerconfigjson document ({why}); \
                     create them with `kubectl create secret docker-registry` or `docker login`"
                ),
            )
        };
        let config: DockerConfig =
            serde_json::from_slice(json).map_err(|err| bad(err.to_string()))?;
        let mut out = BTreeMap::new();
        for (key, entry) in config.auths {
            let auth = if let (Some(user), Some(pass)) = (&entry.username, &entry.password) {
                RegistryAuth::Basic(user.clone(), pass.clone())
            } else if let Some(encoded) = &entry.auth {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .map_err(|err| bad(format!("auths.{key}.auth is not base64: {err}")))?;
                let text = String::from_utf8(decoded)
                    .map_err(|_| bad(format!("auths.{key}.auth is not UTF-8")))?;
                let (user, pass) = text
                    .split_once(':')
                    .ok_or_else(|| bad(format!("auths.{key}.auth is not user:password")))?;
                RegistryAuth::Basic(user.to_string(), pass.to_string())
            } else if let Some(token) = &entry.identitytoken {
                RegistryAuth::Bearer(token.clone())
            } else {
                continue;
            };
            out.insert(registry_key(&key), auth);
        }
        Ok(Self(out))
    }

    /// What to present to `registry` (anonymous when nothing is configured for it).
    pub(crate) fn for_registry(&self, registry: &str) -> RegistryAuth {
        self.0
            .get(&registry.to_ascii_lowercase())
            .cloned()
            .unwrap_or(RegistryAuth::Anonymous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_form_of_credentials() {
        let json = br#"{"auths":{
            "https://reg.example:5000/v1/":{"auth":"dXNlcjpwYXNz"},
            "other.example":{"username":"u","password":"p:w"},
            "tok.example":{"identitytoken":"t"},
            "empty.example":{}
        }}"#;
        let creds = Credentials::parse(json).expect("parses");
        assert!(
            matches!(creds.for_registry("reg.example:5000"), RegistryAuth::Basic(u, p) if u == "user" && p == "pass")
        );
        assert!(
            matches!(creds.for_registry("other.example"), RegistryAuth::Basic(u, p) if u == "u" && p == "p:w")
        );
        assert!(matches!(creds.for_registry("tok.example"), RegistryAuth::Bearer(t) if t == "t"));
        assert!(matches!(
            creds.for_registry("empty.example"),
            RegistryAuth::Anonymous
        ));
        assert!(!format!("{creds:?}").contains("pass"));
    }

    #[test]
    fn a_broken_document_is_a_config_error() {
        for bad in [&b"not json"[..], br#"{"auths":{"r":{"auth":"!!"}}}"#] {
            let err = Credentials::parse(bad).expect_err("refused");
            assert_eq!(err.rule, rules::CONFIG);
        }
    }
}
