//! What every line a plugin call produces (its `log` calls, its stdout and
//! stderr) is tagged with in `tracing`: the plugin's name, its digest and
//! the object being reconciled.

/// The tags of one plugin call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallTags {
    /// The plugin's name, from its `info()`.
    pub plugin: String,
    /// A short form of the plugin's digest (`sha256:` and 12 hex digits).
    pub digest: String,
    /// `namespace/name` of the object, or `-` outside a reconcile.
    pub object: String,
}

impl CallTags {
    /// Tags for a call of `plugin` (digest `sha256:<hex>`) on `object`.
    pub fn new(plugin: &str, digest: &str, object: &str) -> Self {
        Self {
            plugin: plugin.to_string(),
            digest: short_digest(digest).to_string(),
            object: object.to_string(),
        }
    }
}

/// `sha256:` and the first 12 hex digits, enough to tell plugins apart.
pub fn short_digest(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}
