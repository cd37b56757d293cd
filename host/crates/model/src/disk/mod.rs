//! Files the host keeps on disk and trusts later: the precompiled cache
//! (`runtime::cache`) and the store of pulled OCI artifacts
//! (`sources::store`). Both are checked the same way and bounded the same
//! way, by the code here:
//!
//! - [`private`]: the directory is private to the host's user (not a
//!   symlink), every file is opened without following symlinks, must be a
//!   regular file of the host's user that nobody else can write, and
//!   carries an HMAC-SHA256 over its name and content under one key (kept in
//!   the precompiled cache directory, or `--precompiled-cache-key-file`);
//! - [`prune`]: which entries go when a directory is over its bound in
//!   bytes (least recently used first, never a pinned one);
//! - [`pins`]: what is pinned: the plugins each hot-swap slot serves, had
//!   before (its rollback target) and shadows, as the slot last said.
//!
//! What it may import: nothing of the crate (it is below `runtime` and
//! `registry`, which use it, and `slot`, which sets the pins).

pub mod pins;
pub mod private;
pub mod prune;
