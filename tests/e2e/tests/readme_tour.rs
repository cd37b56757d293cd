//! The README's five-minute tour, run as written: every fenced `sh` block of
//! its "A five-minute tour" section is read from `README.md` at test time
//! and run with bash against the real local control plane, so a command
//! that stops working (a renamed flag, a moved path) fails this test.
//!
//! What the test changes, and nothing else: `/tmp/` in the commands becomes
//! a private directory, a line marked `# in another shell` runs in the
//! background (it is the host), and `kubectl` talks to a test namespace of
//! its own. After each block the test checks what the tour promises: three
//! pods Running after the scale, and every object reconciled by v2 after
//! the swap.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e_tests::{TestEnv, wait_for};

const SECTION: &str = "## A five-minute tour";
const BACKGROUND_MARK: &str = "# in another shell";

/// The fenced `sh` blocks of the README's tour section, in order.
fn tour_blocks(readme: &str) -> Result<Vec<Vec<String>>> {
    let start = readme
        .find(SECTION)
        .with_context(|| format!("README.md has no {SECTION:?} section"))?;
    let rest = &readme[start + SECTION.len()..];
    let section = rest.find("\n## ").map_or(rest, |end| &rest[..end]);
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in section.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(lines), text) if !text.trim().is_empty() => lines.push(text.to_string()),
            _ => {}
        }
    }
    ensure!(current.is_none(), "an unclosed ```sh block in the tour");
    Ok(blocks)
}

/// A tour line as the test runs it: `/tmp/` moved to `dir`, the host's
/// line sent to the background with its output in `dir/host.log`.
fn runnable(line: &str, dir: &Path) -> String {
    let line = line.replace("/tmp/", &format!("{}/", dir.display()));
    if line.contains(BACKGROUND_MARK) {
        let command = line
            .split(BACKGROUND_MARK)
            .next()
            .unwrap_or_default()
            .trim_end();
        let log = dir.join("host.log");
        format!("{command} >{} 2>&1 &", log.display())
    } else {
        line
    }
}

/// Runs one block with bash (stop at the first failing command), in the
/// repository root, in its own process group so the background host can
/// be stopped with everything it started.
struct Tour {
    repo: PathBuf,
    dir: PathBuf,
    kubeconfig: PathBuf,
    kube_bin: PathBuf,
    /// Process groups of the blocks run so far (the host lives in one).
    groups: Vec<u32>,
}

impl Tour {
    fn run_block(&mut self, lines: &[String]) -> Result<()> {
        let mut script = String::from("set -euo pipefail\n");
        for line in lines {
            let command = runnable(line, &self.dir);
            script.push_str(&format!("echo '+ {}'\n", command.replace('\'', "'\\''")));
            script.push_str(&command);
            script.push('\n');
        }
        // Background commands keep running after bash exits; wait only for
        // the foreground ones and leave the host to `Drop`.
        script.push_str("echo tour-block-done\n");
        let search_path = format!(
            "{}:{}",
            self.kube_bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // As from a reader's shell: no variables of the test's own cargo.
        let mut command = Command::new("bash");
        wasm_artifacts::as_from_a_shell(&mut command)
            .arg("-c")
            .arg(&script)
            .current_dir(&self.repo)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", search_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().context("starting bash")?;
        self.groups.push(child.id());
        let output = child.wait_with_output().context("running a tour block")?;
        if !output.status.success() {
            bail!(
                "a tour block failed ({}):\n{script}\nits output:\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    fn host_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("host.log")).unwrap_or_default()
    }
}

impl Drop for Tour {
    fn drop(&mut self) {
        // The host was started by a block's bash, in that bash's process
        // group: stop whatever of each group still runs.
        for group in &self.groups {
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{group}")])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_runs_as_written() -> Result<()> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(repo.join("README.md"))?;
    let blocks = tour_blocks(&readme)?;
    ensure!(
        blocks.len() == 2,
        "the tour has {} sh blocks; this test checks two (set-up and scale, then the swap): \
         update it with the tour",
        blocks.len()
    );
    ensure!(
        blocks[0]
            .iter()
            .filter(|l| l.contains(BACKGROUND_MARK))
            .count()
            == 1,
        "the tour's first block should start the host `# in another shell`"
    );

    let env = TestEnv::new("tour").await?;
    let dir = tempfile::Builder::new()
        .prefix("wasm-operator-tour")
        .tempdir()?
        .keep();
    // kubectl in the tour uses the current context's namespace: this test's.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::copy(env.control_plane.kubeconfig_path(), &kubeconfig)?;
    let kubectl = &env.control_plane.binaries().kubectl;
    let status = Command::new(kubectl)
        .args([
            "config",
            "set-context",
            "--current",
            "--namespace",
            &env.namespace,
        ])
        .env("KUBECONFIG", &kubeconfig)
        .status()?;
    ensure!(status.success(), "kubectl config set-context failed");
    let kube_bin = kubectl
        .parent()
        .context("kubectl has no directory")?
        .to_path_buf();
    let mut tour = Tour {
        repo,
        dir,
        kubeconfig,
        kube_bin,
        groups: Vec::new(),
    };

    // Block one: build, CRD, host, one object, scale to three. The host
    // starts with `cargo run`, which may compile it first.
    let block = blocks[0].clone();
    tokio::task::block_in_place(|| tour.run_block(&block))?;
    if let Err(error) = env.wait_converged("web", 3, Duration::from_secs(600)).await {
        bail!("{error:#}\nhost log:\n{}", tour.host_log());
    }

    // Block two: build v2 and move it over the running host's plugin.
    let block = blocks[1].clone();
    tokio::task::block_in_place(|| tour.run_block(&block))?;
    let jinghzhus = env.jinghzhus();
    let waited = wait_for(
        "web reconciled by the v2 plugin",
        Duration::from_secs(120),
        || async {
            let jz = jinghzhus.get("web").await?;
            Ok(jz
                .status
                .and_then(|s| s.reconciled_by)
                .is_some_and(|by| by.contains("+v2")))
        },
    )
    .await;
    if let Err(error) = waited {
        bail!("{error:#}\nhost log:\n{}", tour.host_log());
    }
    env.wait_converged("web", 3, Duration::from_secs(60))
        .await?;
    Ok(())
}

#[test]
fn tour_lines_become_runnable_commands() {
    let dir = Path::new("/private");
    assert_eq!(
        runnable("cp a /tmp/plugin.wasm", dir),
        "cp a /private/plugin.wasm"
    );
    assert_eq!(
        runnable(
            "run --plugin /tmp/plugin.wasm           # in another shell",
            dir
        ),
        "run --plugin /private/plugin.wasm >/private/host.log 2>&1 &"
    );
    let readme = "x\n## A five-minute tour\n```sh\na\n\nb # c\n```\ntext\n```sh\nd\n```\n## Next\n```sh\ne\n```\n";
    assert_eq!(
        tour_blocks(readme).ok(),
        Some(vec![
            vec!["a".to_string(), "b # c".to_string()],
            vec!["d".to_string()]
        ])
    );
}
