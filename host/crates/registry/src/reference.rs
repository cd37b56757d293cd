//! `oci://REGISTRY/REPOSITORY:TAG`, `…@sha256:HEX` (or both): parsing and
//! printing the references `--plugin` and `push` take.

use std::fmt;

use super::{OciError, rules};

/// The scheme that marks a plugin source as an OCI reference.
pub const SCHEME: &str = "oci://";

/// Whether `text` is an `oci://` reference (rather than a file path).
pub fn is_oci(text: &str) -> bool {
    text.starts_with(SCHEME)
}

/// A parsed `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OciRef {
    /// `host[:port]`.
    pub registry: String,
    /// The repository path (`team/plugin`).
    pub repository: String,
    /// The tag (polled for moves), if any.
    pub tag: Option<String>,
    /// The pinned manifest digest (`sha256:<hex>`), if any.
    pub digest: Option<String>,
}

impl OciRef {
    /// Parses `oci://REGISTRY/REPO:TAG`, `oci://REGISTRY/REPO@sha256:HEX`
    /// or `oci://REGISTRY/REPO:TAG@sha256:HEX`.
    pub fn parse(text: &str) -> Result<Self, OciError> {
        let bad = |why: &str| {
            OciError::new(
                rules::REFERENCE,
                format!(
                    "{text:?} is not an OCI reference ({why}); write \
                     oci://REGISTRY/REPOSITORY:TAG or oci://REGISTRY/REPOSITORY@sha256:<64 hex>"
                ),
            )
        };
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("it must start with oci://"))?;
        let (rest, digest) = match rest.split_once('@') {
            Some((name, digest)) => {
                let hex = digest
                    .strip_prefix("sha256:")
                    .ok_or_else(|| bad("the digest must be sha256:<hex>"))?;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad("the digest must be sha256: and 64 hex digits"));
                }
                (name, Some(format!("sha256:{}", hex.to_ascii_lowercase())))
            }
            None => (rest, None),
        };
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("no repository after the registry"))?;
        if registry.is_empty()
            || !registry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        {
            return Err(bad("the registry must be host or host:port"));
        }
        // A tag is after the last ':' of the last path segment.
        let last_slash = path.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match path[last_slash..].rfind(':') {
            Some(i) => (
                &path[..last_slash + i],
                Some(path[last_slash + i + 1..].to_string()),
            ),
            None => (path, None),
        };
        let repository_ok = !repository.is_empty()
            && repository.split('/').all(|segment| {
                !segment.is_empty()
                    && segment.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)
                    })
            });
        if !repository_ok {
            return Err(bad(
                "the repository must be lowercase letters, digits, '.', '_', '-' and '/'",
            ));
        }
        if let Some(tag) = &tag {
            let ok = !tag.is_empty()
                && tag.len() <= 128
                && !tag.starts_with(['.', '-'])
                && tag
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !ok {
                return Err(bad(
                    "a tag is 1-128 letters, digits, '.', '_', '-' (not starting with . or -)",
                ));
            }
        }
        if tag.is_none() && digest.is_none() {
            return Err(bad("name a tag (:v1) or a digest (@sha256:…)"));
        }
        Ok(Self {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }

    /// The same repository at `digest` (no tag).
    pub fn at_digest(&self, digest: &str) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_string()),
        }
    }

    /// The same repository at `tag` (no digest).
    pub fn at_tag(&self, tag: &str) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: Some(tag.to_string()),
            digest: None,
        }
    }

    /// The reference as the OCI client takes it.
    pub(crate) fn client_ref(&self) -> oci_client::Reference {
        match (&self.tag, &self.digest) {
            (_, Some(digest)) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                digest.clone(),
            ),
            (Some(tag), None) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                tag.clone(),
            ),
            (None, None) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                "latest".into(),
            ),
        }
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_tags_digests_and_ports() {
        let r = OciRef::parse("oci://127.0.0.1:5000/team/plugin:v1").expect("parses");
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "team/plugin");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest, None);
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/team/plugin:v1");

        let text = format!("oci://ghcr.io/a/b@sha256:{HEX}");
        let r = OciRef::parse(&text).expect("parses");
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.as_deref(), Some(&*format!("sha256:{HEX}")));
        assert_eq!(r.to_string(), text);

        let r = OciRef::parse(&format!("oci://reg:443/p:v2@sha256:{HEX}")).expect("parses");
        assert_eq!((r.tag.as_deref(), r.repository.as_str()), (Some("v2"), "p"));
    }

    #[test]
    fn refuses_what_is_not_a_reference_with_the_rule() {
        for bad in [
            "registry/repo:tag",
            "oci://registry",
            "oci://registry/repo",
            "oci://registry/Repo:tag",
            "oci://registry/repo:",
            "oci://registry/repo@sha256:abc",
            "oci://registry/repo@md5:abc",
            "oci:///repo:v1",
            "oci://reg/repo:-x",
        ] {
            let err = OciRef::parse(bad).expect_err(bad);
            assert_eq!(err.rule, rules::REFERENCE, "{bad}");
            assert!(err.to_string().contains("oci://REGISTRY/REPOSITORY:TAG"));
        }
        assert!(is_oci("oci://x/y:z"));
        assert!(!is_oci("/tmp/plugin.wasm"));
    }
}
