//! Version control for a new plugin crate: `wasm-operator new` makes it a
//! git repository with every file staged, so `git diff` (e.g. `git diff
//! fixtures` after `reconcile --bless`) shows what changed since the
//! scaffold. Nothing happens when git is missing, when the crate lies inside
//! a repository already (e.g. `plugins/NAME` of this one), or with `--no-git`.

use std::path::Path;
use std::process::Command;

/// What `new` did about git.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitSetup {
    /// `git init`, then `git add -A`: the scaffold is staged.
    Initialised,
    /// The crate is inside an existing work tree: left to it.
    InsideRepository,
    /// No `git` to run.
    GitMissing,
    /// `--no-git`.
    Skipped,
    /// git ran and failed: why (the crate itself was written).
    Failed(String),
}

impl GitSetup {
    /// One line for `new`'s report.
    pub fn describe(&self) -> String {
        match self {
            GitSetup::Initialised => "initialised a git repository with the scaffold staged: \
                                      `git diff` shows your changes (e.g. `git diff fixtures` after --bless)"
                .to_string(),
            GitSetup::InsideRepository => {
                "inside an existing git repository: no new one created".to_string()
            }
            GitSetup::GitMissing => {
                "git not found: no repository created (--bless lists the cases it changed)"
                    .to_string()
            }
            GitSetup::Skipped => "--no-git: no repository created".to_string(),
            GitSetup::Failed(why) => format!("git init failed, no repository created: {why}"),
        }
    }
}

/// Makes `dir` (the crate just written) a git repository with its files
/// staged, unless it already is inside one or git is missing.
pub fn init(dir: &Path) -> GitSetup {
    let inside = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--is-inside-work-tree"])
        .output();
    match inside {
        Err(_) => return GitSetup::GitMissing,
        Ok(out) if out.status.success() => return GitSetup::InsideRepository,
        Ok(_) => {}
    }
    for args in [&["init", "--quiet"][..], &["add", "--all"][..]] {
        match Command::new("git").arg("-C").arg(dir).args(args).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return GitSetup::Failed(format!(
                    "git {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Err(err) => return GitSetup::Failed(format!("git {}: {err}", args.join(" "))),
        }
    }
    GitSetup::Initialised
}
