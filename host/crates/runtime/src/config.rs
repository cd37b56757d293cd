//! How the runtime runs plugins: the per-call limits, the instance
//! allocator and where precompiled artifacts go; plus the command-line flags
//! that set them (shared by every subcommand that runs plugins).

use std::path::PathBuf;
use std::time::Duration;

use super::cache::PrecompiledCache;

/// Default time a child may spend compiling one plugin. Python and
/// JavaScript components (12–18 MB: an interpreter and its pre-initialised
/// heap) take 10–15 CPU-seconds in Cranelift and measured 31–40 s of wall
/// time on a busy 2-core machine (`docs/performance.md`); 180 s leaves room
/// for a loaded node. (A Rust plugin compiles in under a second.)
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(180);
/// Default memory (`RLIMIT_DATA`: heap and other private writable
/// mappings), in MiB, of the child that compiles one plugin. A Python or
/// JavaScript component peaks at ~330 MiB resident (measured under this
/// limit), its artifact is ~35 MB.
pub const DEFAULT_COMPILE_MEMORY_MIB: u64 = 1024;

/// Whether this build has Cranelift (the runtime's `compile` feature).
pub const HAS_COMPILER: bool = cfg!(feature = "compile");

/// Default CPU deadline of one plugin call.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);
/// Default memory cap of one plugin instance.
pub const DEFAULT_MEMORY_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
/// Default cap on the bytes a plugin hands the host in one transfer (its
/// whole output, or one `log` call): 500 creates with 4 KiB specs fit.
pub const DEFAULT_OUTPUT_LIMIT_BYTES: usize = 4 * 1024 * 1024;

/// Default [`RuntimeConfig::keep_resident_bytes`].
pub const DEFAULT_KEEP_RESIDENT_BYTES: usize = 2 << 20;

/// Limits and locations for every plugin of a [`Runtime`](super::Runtime).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Time one call may run (measured in epoch ticks of wall-clock time
    /// while the guest runs; see [`engine`](super::engine)).
    pub deadline: Duration,
    /// Linear memory one instance may grow to, all its memories together.
    pub memory_limit_bytes: u64,
    /// Bytes the guest may hand the host in one transfer (wasmtime's
    /// hostcall fuel): checked while lifting, before the host allocates.
    pub output_limit_bytes: usize,
    /// Directory of precompiled artifacts (`None`: no cache).
    pub cache_dir: Option<PathBuf>,
    /// A file holding the key precompiled artifacts are signed with
    /// (`None`: a random key kept in the cache directory).
    pub cache_key_file: Option<PathBuf>,
    /// Bound of the precompiled cache's artifacts in bytes (least recently
    /// used go first; the pinned plugins' never).
    pub cache_max_bytes: u64,
    /// How instances get their memory.
    pub allocator: InstanceAllocator,
    /// Bytes of each pooled linear memory whose pages a call wrote are
    /// restored in place (copied back from the plugin's image) instead of
    /// unmapped, and so stay resident in a warm slot (with the pool only).
    pub keep_resident_bytes: usize,
    /// Whether the calls of a plugin with a big memory image take turns
    /// (see [`call_gate`](super::call_gate)).
    pub call_turns: bool,
    /// Where plugins are compiled (this process, or a child with limits).
    pub compiler: Compiler,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            deadline: DEFAULT_DEADLINE,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            output_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            cache_dir: PrecompiledCache::default_dir(),
            cache_key_file: None,
            cache_max_bytes: super::cache::DEFAULT_MAX_BYTES,
            allocator: InstanceAllocator::default(),
            keep_resident_bytes: DEFAULT_KEEP_RESIDENT_BYTES,
            call_turns: true,
            compiler: Compiler::default(),
        }
    }
}

/// How wasmtime allocates instances.
///
/// Measured with `cargo bench -p wasm-operator --bench reconcile` (example
/// plugin, 10 pods, 2-core machine): a fresh instance plus the call takes
/// ~20 µs from the pool and ~64 µs on demand (each instance mmaps its memory
/// and fiber stack, and unmaps them at the end). The default is the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceAllocator {
    /// mmap per instance, with copy-on-write memory images. No fixed limit
    /// on concurrent instances and no address space reserved up front.
    OnDemand,
    /// Slots reserved up front and reused; a slot's pages that a call
    /// touched are reset, not unmapped. A fixed number of instances can be
    /// alive at once (an instantiation beyond it fails that call with
    /// [`PluginError::Host`](super::PluginError::Host)), and each memory slot
    /// reserves address space (not resident memory).
    Pooling {
        /// Plugin instances alive at once (concurrent reconciles, plus a
        /// few for loading and vetting).
        max_instances: u32,
    },
}

impl Default for InstanceAllocator {
    fn default() -> Self {
        InstanceAllocator::Pooling {
            max_instances: DEFAULT_POOL_INSTANCES,
        }
    }
}

/// A pool size that covers the `run` command's maximum number of workers
/// (64) plus loads and shadow calls.
pub const DEFAULT_POOL_INSTANCES: u32 = 128;

impl InstanceAllocator {
    /// The pool size, if pooling.
    pub fn pool_size(self) -> Option<u32> {
        match self {
            InstanceAllocator::OnDemand => None,
            InstanceAllocator::Pooling { max_instances } => Some(max_instances.max(1)),
        }
    }
}

/// Command-line flags for the plugin runtime (`#[command(flatten)]` them).
#[derive(Debug, Clone, clap::Args)]
pub struct RuntimeArgs {
    /// CPU deadline of one plugin call, in milliseconds.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_TIMEOUT_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub plugin_timeout_ms: u64,
    /// Memory cap of one plugin instance, in MiB.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_MEMORY_MIB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub plugin_memory_mib: u64,
    /// Most bytes a plugin may hand the host at once (its whole output, or
    /// one log call), in KiB. Checked before the host copies anything.
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_OUTPUT_LIMIT_KIB", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(16..=262_144))]
    pub plugin_output_limit_kib: u64,
    /// Where precompiled plugins are cached
    /// (default: $XDG_CACHE_HOME/wasm-operator/precompiled or ~/.cache/...).
    #[arg(long, env = "WASM_OPERATOR_PRECOMPILED_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Sign precompiled plugins with a key read from this file (at least 32
    /// bytes, e.g. a mounted Secret) instead of one kept in the cache directory.
    #[arg(
        long,
        env = "WASM_OPERATOR_PRECOMPILED_CACHE_KEY_FILE",
        value_name = "FILE"
    )]
    pub precompiled_cache_key_file: Option<PathBuf>,
    /// Compile plugins every time; never read or write the precompiled cache.
    #[arg(
        long,
        env = "WASM_OPERATOR_NO_PRECOMPILED_CACHE",
        conflicts_with = "cache_dir"
    )]
    pub no_precompiled_cache: bool,
    /// Most MiB the precompiled cache keeps: past it, after each new
    /// artifact, the least recently used go (never the plugin serving, the
    /// previous one or the shadow).
    #[arg(long, env = "WASM_OPERATOR_PRECOMPILED_CACHE_MAX_MIB", default_value_t = super::cache::DEFAULT_MAX_BYTES >> 20, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub precompiled_cache_max_mib: u64,
    /// Plugin instances that may be alive at once, from a pool reserved at
    /// start (a fresh instance from the pool is ~3x cheaper). Must cover
    /// --workers (twice with --shadow-plugin) plus 4. 0 allocates every
    /// instance on demand instead (no fixed cap, no address space reserved
    /// up front).
    #[arg(long, env = "WASM_OPERATOR_PLUGIN_INSTANCE_POOL", default_value_t = DEFAULT_POOL_INSTANCES)]
    pub plugin_instance_pool: u32,
    /// Let every call of a plugin with a big memory image (Python,
    /// JavaScript) run beside the others instead of taking turns. Turns
    /// cost such calls less CPU on this project's 2-core machines; on many
    /// cores, measure before choosing (docs/performance.md).
    #[arg(long, env = "WASM_OPERATOR_NO_PLUGIN_CALL_TURNS")]
    pub no_plugin_call_turns: bool,
}

impl RuntimeArgs {
    /// The runtime configuration these flags describe.
    pub fn config(&self) -> RuntimeConfig {
        RuntimeConfig {
            deadline: Duration::from_millis(self.plugin_timeout_ms),
            memory_limit_bytes: self.plugin_memory_mib * 1024 * 1024,
            output_limit_bytes: usize::try_from(self.plugin_output_limit_kib * 1024)
                .unwrap_or(usize::MAX),
            cache_dir: if self.no_precompiled_cache {
                None
            } else {
                self.cache_dir
                    .clone()
                    .or_else(PrecompiledCache::default_dir)
            },
            cache_key_file: self.precompiled_cache_key_file.clone(),
            cache_max_bytes: self.precompiled_cache_max_mib << 20,
            allocator: match self.plugin_instance_pool {
                0 => InstanceAllocator::OnDemand,
                max_instances => InstanceAllocator::Pooling { max_instances },
            },
            keep_resident_bytes: DEFAULT_KEEP_RESIDENT_BYTES,
            call_turns: !self.no_plugin_call_turns,
            compiler: Compiler::default(),
        }
    }
}

/// How plugins are compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiler {
    /// With Cranelift in this process (builds with the `compile` feature:
    /// the compile helper, tests, benchmarks).
    InProcess,
    /// In a child process (what `run` does, and every tool of a build
    /// without a compiler).
    Child(ChildCompiler),
}

impl Default for Compiler {
    /// In process when this build has a compiler, else the compile helper
    /// with the default limits.
    fn default() -> Self {
        if HAS_COMPILER {
            Compiler::InProcess
        } else {
            Compiler::Child(ChildCompiler::helper(
                DEFAULT_COMPILE_TIMEOUT,
                DEFAULT_COMPILE_MEMORY_MIB << 20,
            ))
        }
    }
}

/// A child process that compiles one plugin: `program compile-plugin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildCompiler {
    /// The executable: the compile helper `wasm-operator-compile`, or a
    /// build with a compiler itself (`/proc/self/exe`, which stays the
    /// running binary even when the file on disk is replaced).
    pub program: PathBuf,
    /// Killed after this long.
    pub timeout: Duration,
    /// Its `RLIMIT_DATA`, bytes.
    pub memory_limit_bytes: u64,
}
