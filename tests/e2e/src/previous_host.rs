//! The host binary of an earlier commit, for the rolling-update test that
//! runs old and new replicas side by side: the commit is named in
//! [`PREVIOUS_HOST_RECORD`], its tree is taken from this clone's history
//! (`git archive`), built with that tree's own Dockerfile line and the
//! cheaper `dist` overrides, and the binary is kept in
//! `~/.cache/wasm-operator/previous-host/<commit>/wasm-operator` (a commit's
//! sources never change, so the commit is the whole key; those of other
//! commits unused for a week are removed).
//!
//! The build runs in the cheaper `dist` target directory of that tree's
//! `Cargo.lock` and toolchain ([`crate::deploy::dist_target_dir`]): with the
//! same lock file as this checkout it shares every compiled registry crate
//! with this checkout's `dist` build and compiles only the workspace's own
//! crates again (about 200 s of CPU here, once per commit).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use crate::deploy::{
    BuiltOnce, DistBuildKey, build_checkout_as_its_dockerfile_does, built_once, dist_target_dir,
    keep_in_use,
};

/// The file naming the earlier commit: one 40-digit commit hash, `#`
/// comments and blank lines aside. Move it on deliberately (the commit an
/// upgrade starts from: the last release, or the last main that passed CI).
pub const PREVIOUS_HOST_RECORD: &str = "tests/e2e/previous-host";

/// The commit [`PREVIOUS_HOST_RECORD`] names.
pub fn previous_commit() -> Result<String> {
    let path = wasm_artifacts::workspace_root().join(PREVIOUS_HOST_RECORD);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    commit_in(&text).with_context(|| format!("in {}", path.display()))
}

fn commit_in(text: &str) -> Result<String> {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let Some(commit) = lines.next() else {
        bail!("no commit: write the 40-digit hash of the commit to upgrade from");
    };
    if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{commit:?} is not a 40-digit commit hash");
    }
    if let Some(extra) = lines.next() {
        bail!("one commit only, found {extra:?} too");
    }
    Ok(commit.to_ascii_lowercase())
}

/// The previous commit's host binary, built once per machine (see the
/// module's doc). Panics with the reason if it cannot be built.
pub fn previous_host_binary() -> PathBuf {
    static BUILT: BuiltOnce = BuiltOnce::new();
    built_once(&BUILT, build_previous_host)
}

/// Builds the previous commit's host unless its binary is cached; returns
/// the binary's path.
pub fn build_previous_host() -> Result<PathBuf> {
    let commit = previous_commit()?;
    let dir = local_control_plane::binaries::default_cache_root()
        .join("previous-host")
        .join(&commit);
    let binary = dir.join("wasm-operator");
    // Binaries of earlier records unused for a week are removed.
    keep_in_use(&dir)?;
    if binary.is_file() {
        return Ok(binary);
    }
    // One build per commit at a time (`dist-build` and a test binary may
    // both get here); whoever waited finds the binary built.
    let lock_path = dir.join("build.lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    if binary.is_file() {
        return Ok(binary);
    }
    let started = Instant::now();
    let source = dir.join("src");
    export_tree(&commit, &source)?;
    let key = DistBuildKey::of_checkout(&source)?;
    let target_dir = dist_target_dir(&key, false)?;
    build_checkout_as_its_dockerfile_does(&source, &target_dir, false, &binary)
        .with_context(|| format!("building the host of commit {commit}"))?;
    // The binary is what is kept; the tree is only its recipe.
    let _ = std::fs::remove_dir_all(&source);
    eprintln!(
        "built the host of commit {commit} ({PREVIOUS_HOST_RECORD}) in {:?}: {}",
        started.elapsed(),
        binary.display()
    );
    Ok(binary)
}

/// Writes the tree of `commit` (from this clone's history) to `into`,
/// replacing what was there.
fn export_tree(commit: &str, into: &Path) -> Result<()> {
    let root = wasm_artifacts::workspace_root();
    let present = Command::new("git")
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .current_dir(&root)
        .status()
        .context("running git (the previous host is built from this clone's history)")?;
    if !present.success() {
        bail!(
            "this clone does not have commit {commit}, which {PREVIOUS_HOST_RECORD} names as \
             the host to upgrade from (a shallow clone? `git fetch --unshallow`, or move the \
             record to a commit this clone has)"
        );
    }
    if into.exists() {
        std::fs::remove_dir_all(into).with_context(|| format!("removing {}", into.display()))?;
    }
    std::fs::create_dir_all(into)?;
    let archive = into.with_extension("tar");
    let out = Command::new("git")
        .args(["archive", "--format=tar", "-o"])
        .arg(&archive)
        .arg(commit)
        .current_dir(&root)
        .output()
        .context("running git archive")?;
    if !out.status.success() {
        bail!(
            "git archive {commit} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(into)
        .output()
        .context("running tar")?;
    let _ = std::fs::remove_file(&archive);
    if !out.status.success() {
        bail!(
            "unpacking the tree of {commit} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::commit_in;

    #[test]
    fn the_record_holds_one_full_commit_hash() {
        let hash = "9b32aa310882b141809618479797068852734d68";
        assert_eq!(
            commit_in(&format!("# upgrade from\n\n{hash}\n")).unwrap(),
            hash
        );
        assert_eq!(commit_in(&hash.to_uppercase()).unwrap(), hash);
        assert!(commit_in("# nothing\n").is_err());
        assert!(
            commit_in("9b32aa3\n").is_err(),
            "short hashes are ambiguous"
        );
        assert!(commit_in(&format!("{hash}\n{hash}\n")).is_err());
        assert!(commit_in("main\n").is_err(), "a branch moves");
    }
}
