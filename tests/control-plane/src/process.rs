//! Supervised child processes that cannot outlive us.
//!
//! Each child gets its own process group (so a terminal's Ctrl-C reaches only
//! us, and we stop the children in order) and `PR_SET_PDEATHSIG = SIGKILL`, so
//! the kernel kills it if this process dies without cleaning up. The death
//! signal fires when the *thread* that forked the child exits, so every child
//! is forked from one spawner thread that lives as long as the process.

use std::fs::{self, File};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// A running child process with its output captured to a log file.
#[derive(Debug)]
pub struct Supervised {
    name: String,
    child: Child,
    log_path: PathBuf,
}

impl Supervised {
    /// Starts `command` with stdout and stderr appended to `log_path`.
    pub fn spawn(name: &str, mut command: Command, log_path: &Path) -> io::Result<Self> {
        let log = File::create(log_path)?;
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = spawn_on_long_lived_thread(command)?;
        Ok(Self {
            name: name.to_string(),
            child,
            log_path: log_path.to_path_buf(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name this process was started under (for messages).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `None` while running, else how it exited.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `n` lines of the process's output.
    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read(&self.log_path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default();
        crate::binaries::tail_lines(&text, n)
    }

    /// Sends SIGTERM to the process group, waits up to `grace`, then SIGKILLs.
    pub fn stop(&mut self, grace: Duration) {
        if self.exit_status().is_some() {
            return;
        }
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: signalling a process group we created.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exit_status().is_some() {
                return;
            }
            thread::sleep(Duration::from_millis(25));
        }
        // SAFETY: as above.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Supervised {
    /// SIGKILLs the process group and reaps it: no chance to finish anything.
    pub fn kill(&mut self) {
        if self.exit_status().is_some() {
            return;
        }
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: signalling a process group we created.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// True if a process with this pid exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn spawn_on_long_lived_thread(command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("child-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
                // The sender lives in a static, so this loop never ends while
                // the process runs: children die with the process, not earlier.
            })
            .map(|_| ())
            .unwrap_or_else(|err| eprintln!("cannot start the child-spawner thread: {err}"));
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    sender
        .lock()
        .map_err(|_| io::Error::other("child-spawner lock poisoned"))?
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("child-spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("child-spawner thread is gone"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_kills_and_reaps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new("sleep");
        cmd.arg("600");
        let mut child =
            Supervised::spawn("sleep", cmd, &dir.path().join("sleep.log")).expect("spawn");
        let pid = child.pid();
        assert!(is_alive(pid));
        child.stop(Duration::from_secs(2));
        assert!(!is_alive(pid));
    }

    #[test]
    fn child_outlives_the_thread_that_asked_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("sleep.log");
        let child = thread::spawn(move || {
            let mut cmd = Command::new("sleep");
            cmd.arg("600");
            Supervised::spawn("sleep", cmd, &log).expect("spawn")
        })
        .join()
        .expect("join");
        thread::sleep(Duration::from_millis(200));
        assert!(
            is_alive(child.pid()),
            "PDEATHSIG must not fire when a short-lived thread ends"
        );
        let pid = child.pid();
        drop(child);
        assert!(!is_alive(pid));
    }
}
