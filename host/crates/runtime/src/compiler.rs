//! Where a plugin is compiled to native code: in this process (a build with
//! the `compile` feature: the compile helper, tools' and tests' builds), or
//! in a child process with a time and a memory limit.
//!
//! The serving `wasm-operator` is built without Cranelift: it has the
//! compile helper `wasm-operator-compile` (`host/crates/compile`) compile
//! each plugin in a child ([`ChildCompiler::helper`] finds it), so the
//! compiler's code pages, its worker threads and the heap it leaves behind
//! stay out of the operator's memory, and a plugin that makes the compiler
//! run too long or allocate too much costs a killed child (rule
//! `limits/compile-time` or `limits/compile-memory`), not the host. The
//! child builds its engine from the same settings and checks that its
//! [`engine_key`] matches the host's before compiling; the host loads what
//! it returns as it loads a precompiled artifact from its cache, and
//! `Component::deserialize` refuses one made for another engine.
//!
//! The child gets less than the host, so a plugin that subverts the
//! compiler gains little: an empty environment, an empty temporary working
//! directory, no file descriptors but its stdin, stdout and stderr (every
//! other one is marked close-on-exec before the exec), `PR_SET_NO_NEW_PRIVS`,
//! and — first thing in the child, while it is still single-threaded — a
//! Landlock sandbox that denies every filesystem access (it reads the
//! component from stdin and writes the artifact to stdout, both already
//! open), TCP binds and connects, abstract Unix sockets and signals to
//! processes outside it ([`sandbox_self`]). Landlock is best-effort: on a
//! kernel without it the child logs that it is unavailable and compiles
//! unconfined. What it returns is checked before it is signed (see
//! [`cache`](super::cache): rule `limits/compile-output`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wasmtime::Engine;

pub use super::config::{ChildCompiler, Compiler};
use super::config::{InstanceAllocator, RuntimeConfig};
use super::engine::engine_key;

pub use super::config::{DEFAULT_COMPILE_MEMORY_MIB, DEFAULT_COMPILE_TIMEOUT, HAS_COMPILER};

/// The subcommand a child compiler runs.
pub const SUBCOMMAND: &str = "compile-plugin";

/// The compile helper's executable name.
pub const HELPER_NAME: &str = "wasm-operator-compile";

/// An environment variable naming the compile helper to run (else it is
/// looked for beside this executable, then on `PATH`).
pub const HELPER_ENV: &str = "WASM_OPERATOR_COMPILE_HELPER";

/// How to get the compile helper, for messages.
pub const HOW_TO_INSTALL_THE_HELPER: &str = "install it beside `wasm-operator` (`cargo install --path \
     host/crates/compile`, or the `wasm-operator-compile` of the same release) or name it in \
     WASM_OPERATOR_COMPILE_HELPER";

impl Compiler {
    /// Compiles the component `bytes` for `engine` and returns what
    /// `Engine::precompile_component` returns.
    pub fn precompile(&self, engine: &Engine, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
        match self {
            Compiler::InProcess => precompile_here(engine, bytes),
            Compiler::Child(child) => child.precompile(engine, bytes),
        }
    }
}

/// Compiles `bytes` with Cranelift in this process.
#[cfg(feature = "compile")]
fn precompile_here(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    Ok(engine.precompile_component(bytes)?)
}

/// This build has no compiler.
#[cfg(not(feature = "compile"))]
fn precompile_here(_engine: &Engine, _bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    bail!(
        "this executable has no compiler (built without the runtime's `compile` feature): \
         plugins are compiled by the compile helper `{HELPER_NAME}`"
    )
}

/// The compile helper to run: [`HELPER_ENV`] when set; this executable
/// itself when it has a compiler (test and tool builds: `compile-plugin` is
/// one of its subcommands); else `wasm-operator-compile` beside this
/// executable, then on `PATH`. `None` when there is none.
pub fn helper_program() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os(HELPER_ENV).filter(|named| !named.is_empty()) {
        return Some(PathBuf::from(named));
    }
    if HAS_COMPILER {
        // Stays the running binary even when the file on disk is replaced.
        return Some(PathBuf::from("/proc/self/exe"));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(HELPER_NAME)));
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(HELPER_NAME));
    beside
        .into_iter()
        .chain(on_path)
        .find(|path| path.is_file())
}

/// The arguments of the child: the key its engine must have.
fn child_args(key: &str) -> Vec<String> {
    vec![
        SUBCOMMAND.to_owned(),
        "--engine-key".to_owned(),
        key.to_owned(),
    ]
}

impl ChildCompiler {
    /// The compile helper [`helper_program`]
    /// finds (when there is none, compiling fails saying how to install it).
    pub fn helper(timeout: Duration, memory_limit_bytes: u64) -> Self {
        Self {
            program: helper_program().unwrap_or_else(|| PathBuf::from(HELPER_NAME)),
            timeout,
            memory_limit_bytes,
        }
    }

    fn precompile(&self, engine: &Engine, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
        // An empty directory of its own, removed when the compile ends.
        let workdir = tempfile::Builder::new()
            .prefix("wasm-operator-compile-")
            .tempdir()
            .context("creating the compiler's empty working directory")?;
        let mut command = Command::new(&self.program);
        command
            .args(child_args(&engine_key(engine)))
            .env_clear()
            .current_dir(workdir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        limit_child(&mut command, self.memory_limit_bytes);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => bail!(
                "the compile helper {} was not found: {HOW_TO_INSTALL_THE_HELPER}",
                self.program.display()
            ),
            Err(err) => {
                return Err(err).with_context(|| {
                    format!("starting the compiler ({})", self.program.display())
                });
            }
        };

        // Feed and drain the pipes on their own threads, so neither side
        // blocks on a full pipe while the other waits.
        let mut stdin = child.stdin.take().context("the compiler's stdin")?;
        let mut stdout = child.stdout.take().context("the compiler's stdout")?;
        let mut stderr = child.stderr.take().context("the compiler's stderr")?;
        let output_limit = self.memory_limit_bytes;
        let (status, artifact, message) = std::thread::scope(|scope| {
            scope.spawn(move || {
                // A child that dies early closes its stdin: its exit
                // status says why, not this write.
                let _ = stdin.write_all(bytes);
            });
            let artifact = scope.spawn(move || {
                let mut out = Vec::new();
                (&mut stdout)
                    .take(output_limit)
                    .read_to_end(&mut out)
                    .map(|_| out)
            });
            let message = scope.spawn(move || {
                let mut err = Vec::new();
                let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut err);
                String::from_utf8_lossy(&err).trim().to_owned()
            });
            let status = wait_or_kill(&mut child, self.timeout);
            (status, artifact.join(), message.join().unwrap_or_default())
        });
        match status? {
            Exit::TimedOut => bail!(
                "compiling took longer than {}s and was stopped (rule limits/compile-time; \
                 `--plugin-compile-timeout-secs` raises it)",
                self.timeout.as_secs_f64()
            ),
            Exit::Done(status) if status.success() => {
                let artifact = artifact
                    .map_err(|_| anyhow::anyhow!("the compiler's output reader failed"))?
                    .context("reading the compiled plugin from the compiler")?;
                if !message.is_empty() {
                    // E.g. that Landlock is unavailable on this kernel.
                    tracing::warn!(
                        compiler = %self.program.display(),
                        said = %crate::plugin_text::escape(&message, 4096),
                        "the plugin compiler reported a problem but compiled"
                    );
                }
                if artifact.len() as u64 >= output_limit {
                    bail!(
                        "the compiler wrote {} MiB or more, more than a compiled plugin may be \
                         (rule limits/compile-output); nothing was kept",
                        output_limit / (1024 * 1024)
                    );
                }
                Ok(artifact)
            }
            Exit::Done(status) => Err(self.failure(status, &message)),
        }
    }

    /// Why a child that exited unsuccessfully did.
    fn failure(&self, status: ExitStatus, message: &str) -> anyhow::Error {
        use std::os::unix::process::ExitStatusExt;
        let out_of_memory = message.contains("memory allocation of")
            || message.contains("out of memory")
            || status.signal() == Some(libc::SIGABRT) && message.is_empty();
        if out_of_memory {
            anyhow::anyhow!(
                "compiling needed more than {} MiB and was stopped (rule limits/compile-memory; \
                 `--plugin-compile-memory-mib` raises it)",
                self.memory_limit_bytes / (1024 * 1024)
            )
        } else if message.is_empty() {
            anyhow::anyhow!("the compiler exited with {status} and said nothing")
        } else {
            anyhow::anyhow!("{}", message.trim_start_matches("error: "))
        }
    }
}

/// How a child ended.
enum Exit {
    /// It exited (or was killed by a signal) on its own.
    Done(ExitStatus),
    /// It ran past its time and was killed.
    TimedOut,
}

/// Waits for `child` until `timeout`, then kills it.
fn wait_or_kill(child: &mut std::process::Child, timeout: Duration) -> anyhow::Result<Exit> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait().context("waiting for the compiler")? {
            return Ok(Exit::Done(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Exit::TimedOut);
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Sets the child's limits between fork and exec: its memory
/// (`RLIMIT_DATA`), no core file, death with the host, no new privileges,
/// and every file descriptor but 0, 1 and 2 closed at exec.
fn limit_child(command: &mut Command, memory_limit_bytes: u64) {
    use std::os::unix::process::CommandExt;
    let data = libc::rlimit {
        rlim_cur: memory_limit_bytes,
        rlim_max: memory_limit_bytes,
    };
    let core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: between fork and exec only async-signal-safe calls are made
    // (setrlimit, prctl), on values prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_DATA, &data) != 0
                || libc::setrlimit(libc::RLIMIT_CORE, &core) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // std opens its own descriptors close-on-exec; this also
                // covers any a library opened without the flag. Marked,
                // not closed: std's exec-error pipe must stay open until
                // the exec. (Linux 5.11+; older kernels rely on std.)
                libc::syscall(
                    libc::SYS_close_range,
                    3_u32,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                );
            }
            Ok(())
        });
    }
}

/// The child's side: the command-line arguments of `compile-plugin`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompilePluginArgs {
    /// The host engine's compatibility key; the child refuses to compile
    /// for any other.
    #[arg(long)]
    pub engine_key: String,
    /// Diagnostics for tests: after sandboxing, report what the child can
    /// reach (its environment, open descriptors, working directory, and
    /// whether each PATH can be opened) on stderr and exit unsuccessfully
    /// instead of compiling.
    #[arg(long = "probe", value_name = "PATH", hide = true)]
    pub probe: Vec<PathBuf>,
}

/// Reads a component from stdin, compiles it for the host's engine and
/// writes the artifact to stdout.
///
/// The child's engine is the host's with instances allocated on demand:
/// the instance pool and the per-instance memory cap do not change the
/// generated code (the engine key is the same, checked below), and a pool
/// would reserve and map memory the compiler never uses.
pub fn compile_plugin(args: CompilePluginArgs) -> anyhow::Result<()> {
    // Before anything else, while this is the only thread: a Landlock
    // domain covers the threads created after it, not those before.
    let threads = if args.probe.is_empty() {
        None
    } else {
        Some(thread_count())
    };
    let sandbox = sandbox_self();
    if let Sandbox::Unavailable(why) = &sandbox {
        eprintln!(
            "warning: Landlock is unavailable ({why}); the plugin compiler runs without its \
             filesystem sandbox"
        );
    }
    if !args.probe.is_empty() {
        bail!(
            "{} threads_before_sandbox={}",
            probe(&sandbox, &args.probe),
            threads.flatten().unwrap_or(0)
        );
    }
    let config = RuntimeConfig {
        allocator: InstanceAllocator::OnDemand,
        ..RuntimeConfig::default()
    };
    let engine = super::engine::new_engine(&config)?;
    let key = engine_key(&engine);
    if key != args.engine_key {
        bail!(
            "the compiler's engine ({key}: wasm-operator-runtime {}, wasmtime {}) differs from \
             the host's ({}); the host and its compile helper must come from the same release",
            env!("CARGO_PKG_VERSION"),
            super::engine::WASMTIME_VERSION,
            args.engine_key
        );
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .context("reading the component from stdin")?;
    let artifact = precompile_here(&engine, &bytes)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&artifact)?;
    stdout.flush()?;
    Ok(())
}

/// The key of the engine [`compile_plugin`] compiles for (the compile
/// helper's `engine-key`).
pub fn helper_engine_key() -> anyhow::Result<String> {
    let engine = super::engine::new_engine(&RuntimeConfig {
        allocator: InstanceAllocator::OnDemand,
        ..RuntimeConfig::default()
    })?;
    Ok(engine_key(&engine))
}

/// What [`sandbox_self`] achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    /// Every access Landlock knows on this kernel is denied.
    Enforced,
    /// Some accesses are denied; this kernel's Landlock lacks the others.
    Partial,
    /// No Landlock sandbox (why).
    Unavailable(String),
}

/// Confines the calling process with Landlock: no filesystem access at all
/// (files already open, such as stdin and stdout, stay usable), no TCP
/// bind or connect, no abstract Unix sockets or signals outside the
/// sandbox; and `PR_SET_NO_NEW_PRIVS`. Irreversible, and it covers only
/// threads created after the call: call it while single-threaded.
///
/// Best-effort: on a kernel without Landlock (or an older one) it does what
/// the kernel supports and says so.
pub fn sandbox_self() -> Sandbox {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    };
    let abi = ABI::V6;
    let status = landlock::Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|ruleset| ruleset.handle_access(AccessNet::from_all(abi)))
        .and_then(|ruleset| ruleset.scope(Scope::from_all(abi)))
        .and_then(|ruleset| ruleset.create())
        .and_then(|ruleset| ruleset.no_new_privs(true).restrict_self());
    match status {
        Ok(status) => match status.ruleset {
            RulesetStatus::FullyEnforced => Sandbox::Enforced,
            RulesetStatus::PartiallyEnforced => Sandbox::Partial,
            RulesetStatus::NotEnforced => Sandbox::Unavailable(format!(
                "not enforced by this kernel: {:?}",
                status.landlock
            )),
        },
        Err(err) => Sandbox::Unavailable(err.to_string()),
    }
}

/// Threads of this process, from `/proc/self/status`.
fn thread_count() -> Option<usize> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

/// The `--probe` report: one line.
fn probe(sandbox: &Sandbox, paths: &[PathBuf]) -> String {
    let env: Vec<String> = std::env::vars_os()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .collect();
    // Open descriptors, found without reading /proc (the sandbox denies it).
    let fds: Vec<String> = (0..1024)
        // SAFETY: F_GETFD only reads the descriptor's flags.
        .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } != -1)
        .map(|fd| fd.to_string())
        .collect();
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|e| format!("unknown({e})"));
    let reads: Vec<String> = paths
        .iter()
        .map(|path| {
            let outcome = match std::fs::File::open(path) {
                Ok(_) => "allowed".to_owned(),
                Err(err) => format!("denied({:?})", err.kind()),
            };
            format!("read({})={outcome}", path.display())
        })
        .collect();
    format!(
        "sandbox probe: sandbox={sandbox:?} env=[{}] fds={} cwd={cwd} {}",
        env.join(","),
        fds.join(","),
        reads.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_is_given_the_engine_key() {
        assert_eq!(child_args("abc"), ["compile-plugin", "--engine-key", "abc"]);
    }

    #[test]
    #[cfg(feature = "compile")]
    fn the_instance_allocator_and_memory_cap_leave_the_generated_code_alone() {
        // What lets the child compile with an on-demand engine for a host
        // with a pool, and the engine key leave them out: Cranelift's own
        // compatibility hash is the same for both.
        use std::hash::{Hash, Hasher};
        let hash = |allocator, memory_limit_bytes| {
            let config = RuntimeConfig {
                allocator,
                memory_limit_bytes,
                ..RuntimeConfig::default()
            };
            let engine = super::super::engine::new_engine(&config).expect("engine");
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut hasher);
            (hasher.finish(), engine_key(&engine))
        };
        let on_demand = hash(InstanceAllocator::OnDemand, 64 << 20);
        assert_eq!(
            hash(InstanceAllocator::Pooling { max_instances: 8 }, 32 << 20),
            on_demand
        );
    }

    #[test]
    fn a_build_without_a_compiler_says_so_and_never_runs_itself_as_one() {
        let engine = super::super::engine::new_engine(&RuntimeConfig::default()).expect("engine");
        let here = Compiler::InProcess.precompile(&engine, b"\0asm\x0d\0\x01\0");
        if HAS_COMPILER {
            assert_eq!(helper_program(), Some(PathBuf::from("/proc/self/exe")));
        } else {
            let message = format!("{:#}", here.expect_err("no compiler here"));
            assert!(message.contains("has no compiler"), "{message}");
            assert!(message.contains(HELPER_NAME), "{message}");
            assert_ne!(helper_program(), Some(PathBuf::from("/proc/self/exe")));
        }
    }

    #[test]
    fn a_missing_helper_is_named_with_how_to_install_it() {
        let engine = super::super::engine::new_engine(&RuntimeConfig::default()).expect("engine");
        let missing = ChildCompiler {
            program: PathBuf::from("/nonexistent/wasm-operator-compile"),
            timeout: Duration::from_secs(5),
            memory_limit_bytes: 1 << 30,
        };
        let message = format!(
            "{:#}",
            missing
                .precompile(&engine, b"\0asm\x0d\0\x01\0")
                .expect_err("no helper there")
        );
        assert!(message.contains("was not found"), "{message}");
        assert!(
            message.contains("cargo install --path host/crates/compile"),
            "{message}"
        );
    }
}
