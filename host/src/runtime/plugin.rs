//! Loading a plugin (check, compile or fetch from the cache, link,
//! pre-instantiate, ask its `info()`) and calling its `reconcile` in a fresh
//! sandboxed instance with a CPU deadline and a memory cap.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store, Trap};

use super::bindings::{self as wit, EXPECTED_EXPORT, Operator, OperatorPre};
use super::cache::{LoadOutcome, PrecompiledCache};
use super::convert;
use super::engine::{deadline_ticks, new_engine};
use super::state::PluginState;
use crate::actions::ProposedActions;
use crate::crd::Jinghzhu;

/// Limits and locations for every plugin of a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// CPU time one call may take.
    pub deadline: Duration,
    /// Linear memory one instance may grow to.
    pub memory_limit_bytes: u64,
    /// Directory of precompiled artifacts (`None`: no cache).
    pub cache_dir: Option<std::path::PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(1),
            memory_limit_bytes: 64 * 1024 * 1024,
            cache_dir: PrecompiledCache::default_dir(),
        }
    }
}

/// Why bytes could not become a plugin. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not Wasm at all.
    #[error(
        "{from} is not a WebAssembly file (it does not start with \\0asm): build the plugin with `cargo component build --release` or `cargo build --release --target wasm32-wasip2`"
    )]
    NotWasm {
        /// Where the bytes came from.
        from: String,
    },
    /// A core module, not a component.
    #[error(
        "{from} is a core WebAssembly module, not a component: build with `cargo component build --release` or `cargo build --release --target wasm32-wasip2` (wasm32-wasip1 and wasm32-unknown-unknown produce core modules)"
    )]
    CoreModule {
        /// Where the bytes came from.
        from: String,
    },
    /// Cranelift or the validator refused it.
    #[error("{from} does not compile: {message}")]
    Compile {
        /// Where the bytes came from.
        from: String,
        /// The compiler's message.
        message: String,
    },
    /// A component, but not of our world.
    #[error(
        "{from} does not implement the world this host runs: it must export `{expected}` (WIT package jinghzhu:operator@0.1.0, see wit/operator.wit), but it exports [{exports}] and imports [{imports}]. {hint}"
    )]
    WrongWorld {
        /// Where the bytes came from.
        from: String,
        /// What we need.
        expected: &'static str,
        /// What it exports.
        exports: String,
        /// What it imports.
        imports: String,
        /// A version-specific hint.
        hint: String,
    },
    /// Its `info()` trapped.
    #[error("{from}: calling info() failed: {message}")]
    Info {
        /// Where the bytes came from.
        from: String,
        /// What happened.
        message: String,
    },
}

/// Why one reconcile call failed. The host keeps running in every case.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The CPU deadline hit.
    #[error("exceeded its CPU deadline of {0:?}")]
    Deadline(Duration),
    /// The memory cap hit.
    #[error("exceeded its memory cap of {0} MiB")]
    MemoryCap(u64),
    /// The plugin trapped (a Rust panic becomes `unreachable`).
    #[error("trapped: {message}")]
    Trap {
        /// The trap, with the panic message when one was printed.
        message: String,
    },
    /// The plugin returned an error value.
    #[error("returned an error: {message}")]
    Returned {
        /// Its message.
        message: String,
        /// Whether it says retrying makes sense.
        retryable: bool,
    },
    /// The host could not set up the call.
    #[error("could not run: {0}")]
    Setup(String),
}

impl PluginError {
    /// Whether trying again (with backoff) can help.
    pub fn retryable(&self) -> bool {
        match self {
            PluginError::Returned { retryable, .. } => *retryable,
            // Traps and limits may depend on the input; a new input or a new
            // plugin may fix them, and backoff keeps retries cheap.
            _ => true,
        }
    }

    /// True when the plugin itself returned the error (it ran fine).
    pub fn is_returned_error(&self) -> bool {
        matches!(self, PluginError::Returned { .. })
    }
}

/// `sha256:<hex>` of some bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The engine, linker and cache shared by every plugin.
pub struct Runtime {
    engine: Engine,
    linker: Linker<PluginState>,
    cache: PrecompiledCache,
    config: RuntimeConfig,
}

impl Runtime {
    /// A runtime with its engine and epoch ticker.
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Self> {
        let engine = new_engine()?;
        let mut linker = Linker::new(&engine);
        // Rust guests import wasi:cli/io even when they use none of it; the
        // context grants nothing (no preopens, env, args or network).
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        Operator::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        Ok(Self {
            engine,
            linker,
            cache: PrecompiledCache::new(config.cache_dir.clone()),
            config,
        })
    }

    /// The engine (for benchmarks and tools).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Checks, compiles (or fetches precompiled) and pre-instantiates `bytes`.
    pub fn load(&self, bytes: &[u8], source: &str) -> Result<Arc<LoadedPlugin>, LoadError> {
        check_header(bytes, source)?;
        let digest = digest_of(bytes);
        let digest_hex = digest.trim_start_matches("sha256:").to_string();
        let (component, outcome) =
            self.cache
                .load(&self.engine, bytes, &digest_hex)
                .map_err(|err| LoadError::Compile {
                    from: source.to_string(),
                    message: format!("{err:#}"),
                })?;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|err| self.wrong_world(&component, source, err))?;
        let pre = OperatorPre::new(instance_pre)
            .map_err(|err| self.wrong_world(&component, source, err))?;
        let mut plugin = LoadedPlugin {
            pre,
            engine: self.engine.clone(),
            info: wit::PluginInfo {
                name: String::new(),
                version: String::new(),
            },
            digest,
            source: source.to_string(),
            loaded_at_unix: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default(),
            outcome,
            deadline: self.config.deadline,
            memory_limit: self.config.memory_limit_bytes,
        };
        plugin.info = plugin.call_info().map_err(|err| LoadError::Info {
            from: source.to_string(),
            message: err.to_string(),
        })?;
        Ok(Arc::new(plugin))
    }

    fn wrong_world(&self, component: &Component, source: &str, err: wasmtime::Error) -> LoadError {
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let imports: Vec<String> = ty
            .imports(&self.engine)
            .map(|(name, _)| name.to_string())
            .filter(|name| !name.starts_with("wasi:"))
            .collect();
        let other_version = exports
            .iter()
            .chain(imports.iter())
            .find(|name| name.starts_with("jinghzhu:operator/") && !name.ends_with("@0.1.0"))
            .cloned();
        let hint = match other_version {
            Some(found) => format!(
                "It was built against `{found}`; this host supports jinghzhu:operator@0.1.0 only. Rebuild the plugin against this host's wit/ (or run a host that supports that version)."
            ),
            None => format!(
                "Rebuild the plugin with the jinghzhu-plugin-sdk crate or against wit/operator.wit ({err:#})."
            ),
        };
        LoadError::WrongWorld {
            from: source.to_string(),
            expected: EXPECTED_EXPORT,
            exports: exports.join(", "),
            imports: imports.join(", "),
            hint,
        }
    }
}

fn check_header(bytes: &[u8], source: &str) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm {
            from: source.to_string(),
        });
    }
    // Core modules are version 1 (01 00 00 00); components carry layer 1.
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule {
            from: source.to_string(),
        });
    }
    Ok(())
}

/// A compiled, linked, pre-instantiated plugin. Cheap to share; each call
/// gets its own instance.
pub struct LoadedPlugin {
    pre: OperatorPre<PluginState>,
    engine: Engine,
    info: wit::PluginInfo,
    digest: String,
    source: String,
    loaded_at_unix: u64,
    outcome: LoadOutcome,
    deadline: Duration,
    memory_limit: u64,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl LoadedPlugin {
    /// `sha256:<hex>` of the component's bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Name and version the plugin reports.
    pub fn info(&self) -> &wit::PluginInfo {
        &self.info
    }

    /// Where it was loaded from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Unix time it was loaded.
    pub fn loaded_at_unix(&self) -> u64 {
        self.loaded_at_unix
    }

    /// Whether it was compiled or came from the precompiled cache.
    pub fn load_outcome(&self) -> LoadOutcome {
        self.outcome
    }

    /// `name@version (sha256:0123456789ab)`, for logs and annotations.
    pub fn describe(&self) -> String {
        let short = self.digest.get(..19).unwrap_or(&self.digest);
        format!("{}@{} ({short})", self.info.name, self.info.version)
    }

    fn new_store(&self, object: &str) -> Store<PluginState> {
        let limit = usize::try_from(self.memory_limit).unwrap_or(usize::MAX);
        let mut store = Store::new(
            &self.engine,
            PluginState::new(&self.info.name, object, limit),
        );
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(deadline_ticks(self.deadline));
        store.epoch_deadline_trap();
        store
    }

    fn classify(&self, store: &Store<PluginState>, err: wasmtime::Error) -> PluginError {
        let stderr = store.data().flush_output();
        if store.data().limiter.hit {
            return PluginError::MemoryCap(self.memory_limit / (1024 * 1024));
        }
        if err.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            return PluginError::Deadline(self.deadline);
        }
        let panic = stderr
            .lines()
            .skip_while(|l| !l.contains("panicked at"))
            .collect::<Vec<_>>()
            .join(" ");
        let message = if panic.is_empty() {
            format!("{err:#}")
        } else {
            format!("{panic} ({err})")
        };
        PluginError::Trap { message }
    }

    fn call_info(&self) -> Result<wit::PluginInfo, PluginError> {
        let mut store = self.new_store("-");
        let operator = self
            .pre
            .instantiate(&mut store)
            .map_err(|err| self.classify(&store, err))?;
        let info = operator
            .jinghzhu_operator_reconciler()
            .call_info(&mut store)
            .map_err(|err| self.classify(&store, err))?;
        store.data().flush_output();
        Ok(info)
    }

    /// Runs `reconcile` on a WIT input in a fresh instance (blocking; use
    /// [`LoadedPlugin::reconcile`] from async code).
    pub fn call_reconcile(
        &self,
        input: &wit::ReconcileInput,
        object: &str,
    ) -> Result<wit::ReconcileOutput, PluginError> {
        let mut store = self.new_store(object);
        let operator = self
            .pre
            .instantiate(&mut store)
            .map_err(|err| self.classify(&store, err))?;
        let result = operator
            .jinghzhu_operator_reconciler()
            .call_reconcile(&mut store, input)
            .map_err(|err| self.classify(&store, err))?;
        store.data().flush_output();
        result.map_err(|e| PluginError::Returned {
            message: e.message,
            retryable: e.retryable,
        })
    }

    /// Reconciles `jz` with its owned `pods`, now: the call runs on tokio's
    /// blocking pool, so a plugin spending its whole deadline never stalls
    /// the async workers (watches, other reconciles).
    pub async fn reconcile(
        self: &Arc<Self>,
        jz: &Jinghzhu,
        pods: &[Pod],
        object: &str,
    ) -> Result<ProposedActions, PluginError> {
        let input = convert::input(jz, pods, SystemTime::now());
        let plugin = Arc::clone(self);
        let object = object.to_string();
        tokio::task::spawn_blocking(move || plugin.call_reconcile(&input, &object))
            .await
            .map_err(|err| {
                PluginError::Setup(format!("the plugin call panicked in the host: {err}"))
            })?
            .map(convert::output)
    }

    /// An instance kept for repeated calls (benchmarks). Production calls use
    /// a fresh instance each time so no state leaks between objects.
    #[doc(hidden)]
    pub fn reusable_instance(&self) -> Result<ReusableInstance, PluginError> {
        let mut store = self.new_store("bench");
        let operator = self
            .pre
            .instantiate(&mut store)
            .map_err(|err| self.classify(&store, err))?;
        Ok(ReusableInstance { store, operator })
    }
}

/// A store and instance reused across calls (benchmark only).
#[doc(hidden)]
pub struct ReusableInstance {
    store: Store<PluginState>,
    operator: Operator,
}

impl ReusableInstance {
    /// One reconcile on the kept instance.
    pub fn call_reconcile(
        &mut self,
        input: &wit::ReconcileInput,
    ) -> anyhow::Result<wit::ReconcileOutput> {
        self.store.set_epoch_deadline(1_000_000);
        let out = self
            .operator
            .jinghzhu_operator_reconciler()
            .call_reconcile(&mut self.store, input)
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        out.map_err(|e| anyhow::anyhow!(e.message))
    }
}
