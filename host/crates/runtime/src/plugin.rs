//! A loaded plugin and its calls. Every call runs in a fresh instance (from
//! the pre-instantiated component) in its own `Store` with a deadline, a
//! memory cap and a cap on the bytes the guest may hand to the host, so no
//! state leaks between objects or calls and a trapped instance is simply
//! dropped.
//!
//! A plugin of contract 0.1 or 0.2 (see [`super::contract`]) is called with
//! the records of its version; its output always comes back as the 0.1
//! records, the host's own form (a 0.2 output is converted and checked by
//! [`convert_v2::output`]).
//!
//! Calls are asynchronous (the guest runs on a fiber) and wrapped in a
//! timeout: at every epoch tick a running guest yields, so the timeout is
//! checked at least every [`TICK`]; a guest blocked in a host function (a
//! WASI sleep or poll) is abandoned when the timeout fires. No guest can hold
//! a thread past its deadline by much more than one tick.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use super::bindings::{self as wit, Operator, OperatorPre, v2, v3};
use super::cache::LoadOutcome;
use super::call_gate::CallGate;
use super::config::RuntimeConfig;
use super::contract::ContractVersion;
use super::convert;
use super::convert_v2::{self, Malformed};
use super::engine::TICK;
use super::errors::{LoadError, PluginError};
use super::state::PluginState;
use super::tags::{CallTags, short_digest};
use crate::actions::ProposedActions;
use crate::crd::Jinghzhu;

/// The text of wasmtime's error when a guest hands the host more bytes than
/// the store's hostcall fuel allows (the error type itself is private).
const HOSTCALL_FUEL_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";

/// A compiled, linked, pre-instantiated plugin. Share it as
/// `Arc<LoadedPlugin>`; each call gets its own instance.
pub struct LoadedPlugin {
    pre: Pre,
    engine: Engine,
    info: wit::PluginInfo,
    digest: String,
    source: String,
    loaded_at_unix: u64,
    outcome: LoadOutcome,
    deadline: Duration,
    memory_limit: u64,
    output_limit: usize,
    gate: CallGate,
}

/// The pre-instantiated component, with the bindings of its version.
pub(crate) enum Pre {
    /// A `jinghzhu:operator@0.1.0` plugin.
    V0_1(OperatorPre<PluginState>),
    /// A `jinghzhu:operator@0.2.0` plugin.
    V0_2(v2::OperatorPre<PluginState>),
    /// A `wasm-operator:controller@0.3.0` plugin (any kind).
    V0_3(v3::ControllerPre<PluginState>),
}

impl Pre {
    /// The initial size of the component's largest linear memory, in bytes
    /// (`None` if wasmtime cannot tell).
    fn initial_memory_bytes(&self) -> Option<u64> {
        let component = match self {
            Pre::V0_1(pre) => pre.instance_pre().component(),
            Pre::V0_2(pre) => pre.instance_pre().component(),
            Pre::V0_3(pre) => pre.instance_pre().component(),
        };
        let pages = component.resources_required()?.max_initial_memory_size?;
        Some(pages.saturating_mul(WASM_PAGE_BYTES))
    }
}

/// Bytes of a Wasm page.
const WASM_PAGE_BYTES: u64 = 64 << 10;

/// A reconcile input in the records of one contract version.
#[derive(Debug, Clone, PartialEq)]
pub enum PluginInput {
    /// Contract 0.1 records.
    V0_1(wit::ReconcileInput),
    /// Contract 0.2 records.
    V0_2(v2::ReconcileInput),
}

impl PluginInput {
    /// The version of the records.
    pub fn version(&self) -> ContractVersion {
        match self {
            PluginInput::V0_1(_) => ContractVersion::V0_1,
            PluginInput::V0_2(_) => ContractVersion::V0_2,
        }
    }

    /// The template's spec JSON, if the Jinghzhu has a template: what an
    /// empty `spec-json` in a create stands for.
    pub fn template_spec(&self) -> Option<&str> {
        match self {
            PluginInput::V0_1(input) => input
                .jinghzhu
                .spec
                .template
                .as_ref()
                .map(|t| t.spec_json.as_str()),
            PluginInput::V0_2(input) => convert_v2::template_spec(input),
        }
    }
}

/// What one reconcile call produced, before the host converts it: the input
/// the plugin saw and its output as the 0.1 WIT records (whatever the
/// plugin's version). The controller checks the output's bounds on these
/// before doing any per-create work.
pub struct RawProposal {
    /// What the plugin was given.
    pub input: PluginInput,
    /// What it returned.
    pub output: wit::ReconcileOutput,
}

impl RawProposal {
    /// The host's view of the output (see [`convert::output`]).
    pub fn into_actions(self) -> ProposedActions {
        let RawProposal { input, output } = self;
        convert::output_with_template(output, input.template_spec())
    }
}

/// What a `Jinghzhu` call of a generic (0.3) plugin fails with.
fn generic_only() -> PluginError {
    PluginError::Host(
        "this is a contract 0.3 plugin (any kind): it serves a PluginController, not the \
         Jinghzhu kind (--plugin or a JinghzhuPlugin take contract 0.1 or 0.2)"
            .into(),
    )
}

/// A 0.2 output the host cannot use, as a call error.
fn malformed(problem: Malformed) -> PluginError {
    match problem {
        Malformed::TooLarge(limit) => PluginError::OutputTooLarge(limit),
        Malformed::Broken(message) => PluginError::BadOutput(message),
    }
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl LoadedPlugin {
    /// Wraps a pre-instantiated component, asks its `info()` and checks it.
    pub(crate) fn new(
        pre: Pre,
        engine: Engine,
        config: &RuntimeConfig,
        digest: String,
        source: &str,
        outcome: LoadOutcome,
    ) -> Result<Self, LoadError> {
        let gate = if config.call_turns {
            CallGate::for_initial_memory(pre.initial_memory_bytes())
        } else {
            CallGate::open()
        };
        let mut plugin = LoadedPlugin {
            pre,
            engine,
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
            deadline: config.deadline,
            memory_limit: config.memory_limit_bytes,
            output_limit: config.output_limit_bytes,
            gate,
        };
        let info = block_on(plugin.call_info())
            .and_then(|r| r)
            .map_err(|source_error| LoadError::Info {
                from: source.to_string(),
                source: source_error,
            })?;
        check_info(&info).map_err(|problem| LoadError::BadInfo {
            from: source.to_string(),
            problem,
        })?;
        plugin.info = info;
        Ok(plugin)
    }

    /// Whether this plugin's calls take turns (its instances start from a
    /// big memory image; see [`super::call_gate`]).
    pub fn calls_take_turns(&self) -> bool {
        self.gate.takes_turns()
    }

    /// The initial size of the plugin's largest linear memory, in bytes.
    pub fn initial_memory_bytes(&self) -> Option<u64> {
        self.pre.initial_memory_bytes()
    }

    /// `sha256:<hex>` of the component's bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Name and version the plugin reports.
    pub fn info(&self) -> &wit::PluginInfo {
        &self.info
    }

    /// The contract version the plugin was built for.
    pub fn contract(&self) -> ContractVersion {
        match self.pre {
            Pre::V0_1(_) => ContractVersion::V0_1,
            Pre::V0_2(_) => ContractVersion::V0_2,
            Pre::V0_3(_) => ContractVersion::V0_3,
        }
    }

    /// The input for `jz` and its owned `pods` at `now`, in the records of
    /// the plugin's contract version, built straight from the objects (0.2
    /// records for a generic 0.3 plugin, which a `Jinghzhu` call refuses).
    pub fn input(&self, jz: &Jinghzhu, pods: &[Pod], now: SystemTime) -> PluginInput {
        match self.pre {
            Pre::V0_1(_) => PluginInput::V0_1(convert::input(jz, pods, now)),
            Pre::V0_2(_) | Pre::V0_3(_) => PluginInput::V0_2(convert_v2::input(jz, pods, now)),
        }
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

    /// The deadline of one call.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The memory cap of one instance, in bytes.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit
    }

    /// Narrows this plugin's call deadline and memory cap, never widening
    /// them (a `JinghzhuPlugin`'s `spec.limits`, already clamped to the
    /// host's flags). Takes effect for calls that start afterwards.
    pub fn narrow_limits(&mut self, deadline: Duration, memory_limit: u64) {
        self.deadline = self.deadline.min(deadline);
        self.memory_limit = self.memory_limit.min(memory_limit);
    }

    /// `name@version (sha256:0123456789ab)`, for logs and annotations.
    pub fn describe(&self) -> String {
        format!(
            "{}@{} ({})",
            self.info.name,
            self.info.version,
            short_digest(&self.digest)
        )
    }

    /// Reconciles `jz` with its owned `pods` at the current time. `object`
    /// (`namespace/name`) tags the call's log lines.
    pub async fn reconcile(
        self: &Arc<Self>,
        jz: &Jinghzhu,
        pods: &[Pod],
        object: &str,
    ) -> Result<ProposedActions, PluginError> {
        self.reconcile_raw(jz, pods, object)
            .await
            .map(RawProposal::into_actions)
    }

    /// Like [`LoadedPlugin::reconcile`], but returns the output as the plugin
    /// gave it, so the caller can check its bounds before converting it.
    ///
    /// The call runs on tokio's blocking pool: a guest is CPU-bound, so it
    /// never occupies the async workers (watches, API calls, other
    /// reconciles); the deadline bounds how long it holds its thread.
    pub async fn reconcile_raw(
        self: &Arc<Self>,
        jz: &Jinghzhu,
        pods: &[Pod],
        object: &str,
    ) -> Result<RawProposal, PluginError> {
        let input = self.input(jz, pods, SystemTime::now());
        self.run_on_blocking_pool(input, object.to_string()).await
    }

    /// Reconciles `jz` with its owned `pods`, telling the plugin it is `now`.
    pub async fn reconcile_at(
        self: &Arc<Self>,
        jz: &Jinghzhu,
        pods: &[Pod],
        now: SystemTime,
    ) -> Result<ProposedActions, PluginError> {
        let input = self.input(jz, pods, now);
        self.run_on_blocking_pool(input, object_key(jz))
            .await
            .map(RawProposal::into_actions)
    }

    async fn run_on_blocking_pool(
        self: &Arc<Self>,
        input: PluginInput,
        object: String,
    ) -> Result<RawProposal, PluginError> {
        let plugin = Arc::clone(self);
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let output = handle.block_on(plugin.call(&input, &object))?;
            Ok(RawProposal { input, output })
        })
        .await
        .map_err(|err| PluginError::Host(format!("the plugin call's thread failed: {err}")))?
    }

    /// Reconciles on the calling thread (for tools and tests without an
    /// async runtime).
    pub fn reconcile_blocking(
        &self,
        jz: &Jinghzhu,
        pods: &[Pod],
        now: SystemTime,
    ) -> Result<ProposedActions, PluginError> {
        let input = self.input(jz, pods, now);
        let output = block_on(self.call(&input, &object_key(jz)))??;
        Ok(RawProposal { input, output }.into_actions())
    }

    /// Runs `reconcile` on an input of either version in a fresh instance
    /// (an input of the other version than the plugin's is converted
    /// first). The output comes back as 0.1 records.
    pub async fn call(
        &self,
        input: &PluginInput,
        object: &str,
    ) -> Result<wit::ReconcileOutput, PluginError> {
        match input {
            PluginInput::V0_1(input) => self.call_reconcile(input, object).await,
            PluginInput::V0_2(input) => self.call_reconcile_v2(input, object).await,
        }
    }

    /// Runs `reconcile` on a 0.1 input in a fresh instance.
    pub async fn call_reconcile(
        &self,
        input: &wit::ReconcileInput,
        object: &str,
    ) -> Result<wit::ReconcileOutput, PluginError> {
        match &self.pre {
            Pre::V0_1(pre) => self.reconcile_v0_1(pre, input, object).await,
            Pre::V0_2(pre) => {
                let input = convert_v2::input_from_v1(input);
                self.reconcile_v0_2(pre, &input, object).await
            }
            Pre::V0_3(_) => Err(generic_only()),
        }
    }

    /// Runs `reconcile` on a 0.2 input in a fresh instance.
    pub async fn call_reconcile_v2(
        &self,
        input: &v2::ReconcileInput,
        object: &str,
    ) -> Result<wit::ReconcileOutput, PluginError> {
        match &self.pre {
            Pre::V0_2(pre) => self.reconcile_v0_2(pre, input, object).await,
            Pre::V0_1(pre) => {
                let input = convert_v2::input_to_v1(input).map_err(|problem| {
                    PluginError::Host(format!("the 0.2 input does not convert: {problem:?}"))
                })?;
                self.reconcile_v0_1(pre, &input, object).await
            }
            Pre::V0_3(_) => Err(generic_only()),
        }
    }

    async fn reconcile_v0_1(
        &self,
        pre: &OperatorPre<PluginState>,
        input: &wit::ReconcileInput,
        object: &str,
    ) -> Result<wit::ReconcileOutput, PluginError> {
        // Held until the store (and the slot's reset) is gone.
        let _turn = self.gate.enter().await;
        let mut store = self.new_store(object);
        let call = async {
            let operator = pre.instantiate_async(&mut store).await?;
            operator
                .jinghzhu_operator_reconciler()
                .call_reconcile(&mut store, input)
                .await
        };
        let outcome = tokio::time::timeout(self.time_limit(), call).await.ok();
        self.finish(&store, outcome)?
            .map_err(|e| PluginError::Returned {
                message: e.message,
                retryable: e.retryable,
            })
    }

    async fn reconcile_v0_2(
        &self,
        pre: &v2::OperatorPre<PluginState>,
        input: &v2::ReconcileInput,
        object: &str,
    ) -> Result<wit::ReconcileOutput, PluginError> {
        let turn = self.gate.enter().await;
        let mut store = self.new_store(object);
        let call = async {
            let operator = pre.instantiate_async(&mut store).await?;
            operator
                .jinghzhu_operator_reconciler()
                .call_reconcile(&mut store, input)
                .await
        };
        let outcome = tokio::time::timeout(self.time_limit(), call).await.ok();
        let output = self
            .finish(&store, outcome)?
            .map_err(|e| PluginError::Returned {
                message: e.message,
                retryable: e.retryable,
            })?;
        drop(store);
        drop(turn);
        convert_v2::output(&output, self.output_limit).map_err(malformed)
    }

    /// Reconciles a parent of any kind (a contract 0.3 input) in a fresh
    /// instance on tokio's blocking pool, as
    /// [`LoadedPlugin::reconcile_raw`] does for a `Jinghzhu`. The output
    /// comes back as the plugin gave it; its bytes were bounded by the
    /// output limit before the host lifted them. A plugin of another
    /// version is refused.
    pub async fn reconcile_generic(
        self: &Arc<Self>,
        input: v3::ReconcileInput,
        object: String,
    ) -> Result<v3::ReconcileOutput, PluginError> {
        self.reconcile_generic_lent(input, object).await.0
    }

    /// [`LoadedPlugin::reconcile_generic`], handing the input back beside
    /// the output (`None` if the call's thread failed), so its records can
    /// serve the next call ([`crate::convert_v3::Records::put_back`]).
    pub async fn reconcile_generic_lent(
        self: &Arc<Self>,
        input: v3::ReconcileInput,
        object: String,
    ) -> (
        Result<v3::ReconcileOutput, PluginError>,
        Option<v3::ReconcileInput>,
    ) {
        let plugin = Arc::clone(self);
        let handle = tokio::runtime::Handle::current();
        let call = tokio::task::spawn_blocking(move || {
            let output = handle.block_on(plugin.call_generic(&input, &object));
            (output, input)
        });
        match call.await {
            Ok((output, input)) => (output, Some(input)),
            Err(err) => (
                Err(PluginError::Host(format!(
                    "the plugin call's thread failed: {err}"
                ))),
                None,
            ),
        }
    }

    /// Runs `reconcile` on a contract 0.3 input in a fresh instance.
    pub async fn call_generic(
        &self,
        input: &v3::ReconcileInput,
        object: &str,
    ) -> Result<v3::ReconcileOutput, PluginError> {
        let Pre::V0_3(pre) = &self.pre else {
            return Err(PluginError::Host(format!(
                "{} is a contract {} plugin for the Jinghzhu kind; a PluginController needs a \
                 contract 0.3 plugin (wit/0.3/controller.wit)",
                self.describe(),
                self.contract()
            )));
        };
        let _turn = self.gate.enter().await;
        let mut store = self.new_store(object);
        let call = async {
            let controller = pre.instantiate_async(&mut store).await?;
            controller
                .wasm_operator_controller_reconciler()
                .call_reconcile(&mut store, input)
                .await
        };
        let outcome = tokio::time::timeout(self.time_limit(), call).await.ok();
        self.finish(&store, outcome)?
            .map_err(|e| PluginError::Returned {
                message: e.message,
                retryable: e.retryable,
            })
    }

    async fn call_info(&self) -> Result<wit::PluginInfo, PluginError> {
        let _turn = self.gate.enter().await;
        let mut store = self.new_store("-");
        let outcome = match &self.pre {
            Pre::V0_1(pre) => {
                let call = async {
                    let operator = pre.instantiate_async(&mut store).await?;
                    operator
                        .jinghzhu_operator_reconciler()
                        .call_info(&mut store)
                        .await
                };
                tokio::time::timeout(self.time_limit(), call).await.ok()
            }
            Pre::V0_2(pre) => {
                let call = async {
                    let operator = pre.instantiate_async(&mut store).await?;
                    operator
                        .jinghzhu_operator_reconciler()
                        .call_info(&mut store)
                        .await
                        .map(convert_v2::info)
                };
                tokio::time::timeout(self.time_limit(), call).await.ok()
            }
            Pre::V0_3(pre) => {
                let call = async {
                    let controller = pre.instantiate_async(&mut store).await?;
                    controller
                        .wasm_operator_controller_reconciler()
                        .call_info(&mut store)
                        .await
                        .map(|info| wit::PluginInfo {
                            name: info.name,
                            version: info.version,
                        })
                };
                tokio::time::timeout(self.time_limit(), call).await.ok()
            }
        };
        self.finish(&store, outcome)
    }

    fn new_store(&self, object: &str) -> Store<PluginState> {
        let limit = usize::try_from(self.memory_limit).unwrap_or(usize::MAX);
        let tags = CallTags::new(&self.info.name, &self.digest, object);
        let mut store = Store::new(&self.engine, PluginState::new(tags, limit));
        store.limiter(|state| &mut state.limiter);
        // Caps what the guest can make the host allocate in one transfer:
        // the whole output of `reconcile`, or one `log` call's arguments.
        store.set_hostcall_fuel(self.output_limit);
        // Caps the host work a guest can cause through WASI imports.
        super::state::cap_store(&mut store);
        arm_deadline(&mut store, self.deadline);
        store
    }

    /// The outer timeout of a call: the deadline plus one tick of slack, so
    /// a running guest usually reports the deadline as its own trap first.
    fn time_limit(&self) -> Duration {
        self.deadline + TICK
    }

    /// Ends a call: flushes its output and turns what happened into a
    /// result (`None` = the outer timeout fired).
    fn finish<T>(
        &self,
        store: &Store<PluginState>,
        outcome: Option<wasmtime::Result<T>>,
    ) -> Result<T, PluginError> {
        let stderr_tail = store.data().finish_output();
        match outcome {
            None => Err(PluginError::Deadline(self.deadline)),
            Some(Ok(value)) => Ok(value),
            Some(Err(err)) => Err(self.classify(store, &err, &stderr_tail)),
        }
    }

    fn classify(
        &self,
        store: &Store<PluginState>,
        err: &wasmtime::Error,
        stderr_tail: &[String],
    ) -> PluginError {
        if store.data().limiter.hit {
            return PluginError::MemoryCap(self.memory_limit);
        }
        if let Some(limit) = super::state::WasiLimit::of(err) {
            return PluginError::WasiLimit {
                rule: limit.rule(),
                message: limit.describe(),
            };
        }
        match err.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => PluginError::Deadline(self.deadline),
            Some(Trap::StackOverflow) => PluginError::Trap {
                message: format!(
                    "the plugin's call stack was exhausted (deep or infinite recursion; {trap})",
                    trap = Trap::StackOverflow
                ),
            },
            Some(trap) => PluginError::Trap {
                message: match panic_message(stderr_tail) {
                    Some(panic) => format!("{panic} ({trap})"),
                    None => format!("{err:#}"),
                },
            },
            None if format!("{err:#}").contains(HOSTCALL_FUEL_EXHAUSTED) => {
                PluginError::OutputTooLarge(self.output_limit)
            }
            None => match err.downcast_ref::<wasmtime_wasi::I32Exit>() {
                // The plugin ended its own instance (`wasi:cli/exit`: Go's
                // `os.Exit`, Rust's `std::process::exit`): its failure, not
                // the host's.
                Some(exit) => PluginError::Trap {
                    message: format!("the plugin exited with status {} during the call", exit.0),
                },
                // Not a trap: the host could not instantiate (e.g. every
                // pool slot in use) or a host function failed.
                None => PluginError::Host(format!("{err:#}")),
            },
        }
    }

    /// An instance kept for repeated calls, for the benchmark that measures
    /// what a fresh instance per call costs. Production calls never reuse
    /// instances: state would leak between objects, and a trap would poison
    /// the instance.
    #[doc(hidden)]
    pub async fn reusable_instance(&self) -> Result<ReusableInstance, PluginError> {
        let mut store = self.new_store("bench");
        let instantiated = match &self.pre {
            Pre::V0_1(pre) => pre.instantiate_async(&mut store).await.map(Bound::V0_1),
            Pre::V0_2(pre) => pre.instantiate_async(&mut store).await.map(Bound::V0_2),
            Pre::V0_3(_) => return Err(generic_only()),
        };
        let operator = match instantiated {
            Ok(operator) => operator,
            Err(err) => {
                let tail = store.data().finish_output();
                return Err(self.classify(&store, &err, &tail));
            }
        };
        Ok(ReusableInstance {
            store,
            operator,
            deadline: self.deadline,
        })
    }
}

/// Runs a plugin call to completion on the calling thread, for callers
/// outside async code (tools, tests, loading), on a single-threaded runtime
/// kept per thread. Inside a tokio runtime it runs on a scoped helper thread,
/// since a runtime cannot be blocked on from within another.
pub fn block_on<F>(future: F) -> Result<F::Output, PluginError>
where
    F: Future + Send,
    F::Output: Send,
{
    thread_local! {
        static RUNTIME: std::io::Result<tokio::runtime::Runtime> =
            tokio::runtime::Builder::new_current_thread().enable_time().build();
    }
    let run = move || {
        RUNTIME.with(|runtime| match runtime {
            Ok(runtime) => Ok(runtime.block_on(future)),
            Err(err) => Err(PluginError::Host(format!(
                "cannot start a runtime for the call: {err}"
            ))),
        })
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|scope| {
            scope.spawn(run).join().unwrap_or_else(|_| {
                Err(PluginError::Host(
                    "the plugin call's thread panicked".into(),
                ))
            })
        })
    } else {
        run()
    }
}

/// Longest plugin name and version accepted (they end up in an annotation
/// on every object, in logs and in metric labels).
pub const MAX_INFO_LEN: usize = 63;

/// Checks what a plugin says about itself: a name of lowercase letters,
/// digits and `-`/`_`/`.`, and a version of letters, digits and `.+-_`, each
/// 1 to [`MAX_INFO_LEN`] characters.
pub fn check_info(info: &wit::PluginInfo) -> Result<(), String> {
    let name_ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c);
    let version_ok = |c: char| c.is_ascii_alphanumeric() || ".+-_".contains(c);
    let field = |what: &str, value: &str, ok: &dyn Fn(char) -> bool, allowed: &str| {
        if value.is_empty() || value.len() > MAX_INFO_LEN || !value.chars().all(ok) {
            Err(format!(
                "info().{what} must be 1 to {MAX_INFO_LEN} characters of {allowed}, got {:?}",
                crate::plugin_text::escape(value, 80)
            ))
        } else {
            Ok(())
        }
    };
    field(
        "name",
        &info.name,
        &name_ok,
        "lowercase letters, digits, '-', '_' and '.'",
    )?;
    field(
        "version",
        &info.version,
        &version_ok,
        "letters, digits, '.', '+', '-' and '_'",
    )
}

/// `namespace/name` of an object.
pub fn object_key(jz: &Jinghzhu) -> String {
    format!("{}/{}", jz.namespace().unwrap_or_default(), jz.name_any())
}

/// The message of a Rust panic from the last lines of stderr:
/// `thread '…' panicked at src/lib.rs:1:2:` followed by the message lines.
fn panic_message(stderr_tail: &[String]) -> Option<String> {
    let start = stderr_tail
        .iter()
        .rposition(|line| line.contains("panicked at"))?;
    let location = stderr_tail[start]
        .split_once("panicked at ")
        .map(|(_, at)| at.trim_end_matches(':'))
        .unwrap_or_default();
    let message: Vec<&str> = stderr_tail[start + 1..]
        .iter()
        .map(String::as_str)
        .take_while(|line| !line.starts_with("note: "))
        .collect();
    Some(if message.is_empty() {
        format!("panicked at {location}")
    } else {
        format!("panicked at {location}: {}", message.join(" "))
    })
}

/// Starts the clock of a call on `store`: at every epoch tick the guest
/// yields to the executor, so the outer timeout is seen, and once `deadline`
/// has passed it traps in any case.
fn arm_deadline(store: &mut Store<PluginState>, deadline: Duration) {
    let started = Instant::now();
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if started.elapsed() >= deadline {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
}

/// A store and instance reused across calls (benchmarks only).
#[doc(hidden)]
pub struct ReusableInstance {
    store: Store<PluginState>,
    operator: Bound,
    deadline: Duration,
}

/// An instance with the bindings of its version.
enum Bound {
    V0_1(Operator),
    V0_2(v2::Operator),
}

impl ReusableInstance {
    /// One reconcile on the kept instance, from a 0.1 input (converted for
    /// a 0.2 plugin).
    pub async fn call_reconcile(
        &mut self,
        input: &wit::ReconcileInput,
    ) -> anyhow::Result<wit::ReconcileOutput> {
        match &self.operator {
            Bound::V0_1(_) => self.call_v0_1(input).await,
            Bound::V0_2(_) => self.call_v0_2(&convert_v2::input_from_v1(input)).await,
        }
    }

    /// One reconcile on the kept instance, from a 0.2 input (converted for
    /// a 0.1 plugin).
    pub async fn call_reconcile_v2(
        &mut self,
        input: &v2::ReconcileInput,
    ) -> anyhow::Result<wit::ReconcileOutput> {
        match &self.operator {
            Bound::V0_2(_) => self.call_v0_2(input).await,
            Bound::V0_1(_) => {
                let input = convert_v2::input_to_v1(input)
                    .map_err(|problem| anyhow::anyhow!("{problem:?}"))?;
                self.call_v0_1(&input).await
            }
        }
    }

    async fn call_v0_1(
        &mut self,
        input: &wit::ReconcileInput,
    ) -> anyhow::Result<wit::ReconcileOutput> {
        let Bound::V0_1(operator) = &self.operator else {
            anyhow::bail!("not a 0.1 instance");
        };
        // Each call gets the whole deadline, as a fresh instance would.
        arm_deadline(&mut self.store, self.deadline);
        let out = operator
            .jinghzhu_operator_reconciler()
            .call_reconcile(&mut self.store, input)
            .await?;
        out.map_err(|e| anyhow::anyhow!(e.message))
    }

    async fn call_v0_2(
        &mut self,
        input: &v2::ReconcileInput,
    ) -> anyhow::Result<wit::ReconcileOutput> {
        let Bound::V0_2(operator) = &self.operator else {
            anyhow::bail!("not a 0.2 instance");
        };
        arm_deadline(&mut self.store, self.deadline);
        let out = operator
            .jinghzhu_operator_reconciler()
            .call_reconcile(&mut self.store, input)
            .await?
            .map_err(|e| anyhow::anyhow!(e.message))?;
        convert_v2::output(&out, usize::MAX).map_err(|problem| anyhow::anyhow!("{problem:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_info_is_checked() {
        let info = |name: &str, version: &str| wit::PluginInfo {
            name: name.into(),
            version: version.into(),
        };
        assert!(check_info(&info("replicaset", "0.1.0+v2")).is_ok());
        assert!(check_info(&info("", "1")).is_err());
        assert!(check_info(&info("Bad Name", "1")).is_err());
        assert!(check_info(&info("x", "1\nFAKE host line")).is_err());
        assert!(check_info(&info(&"a".repeat(64), "1")).is_err());
        assert!(check_info(&info("a", &"1".repeat(64))).is_err());
    }

    #[test]
    fn panic_message_is_found_in_stderr() {
        let tail: Vec<String> = [
            "earlier output",
            "thread '<unnamed>' panicked at src/lib.rs:70:23:",
            "misbehaving plugin: asked to panic",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            panic_message(&tail).as_deref(),
            Some("panicked at src/lib.rs:70:23: misbehaving plugin: asked to panic")
        );
        assert_eq!(panic_message(&tail[..1]), None);
    }
}
