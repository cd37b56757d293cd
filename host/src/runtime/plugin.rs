//! A loaded plugin and its calls. Every call runs in a fresh instance (from
//! the pre-instantiated component) in its own `Store` with a deadline and a
//! memory cap, so no state leaks between objects or calls and a trapped
//! instance is simply dropped.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use wasmtime::{Engine, Store, Trap};

use super::bindings::{self as wit, Operator, OperatorPre};
use super::cache::LoadOutcome;
use super::config::RuntimeConfig;
use super::convert;
use super::engine::deadline_ticks;
use super::errors::{LoadError, PluginError};
use super::state::PluginState;
use super::tags::{CallTags, short_digest};
use crate::actions::ProposedActions;
use crate::crd::Jinghzhu;

/// A compiled, linked, pre-instantiated plugin. Share it as
/// `Arc<LoadedPlugin>`; each call gets its own instance.
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
    /// Wraps a pre-instantiated component and asks its `info()`.
    pub(crate) fn new(
        pre: OperatorPre<PluginState>,
        engine: Engine,
        config: &RuntimeConfig,
        digest: String,
        source: &str,
        outcome: LoadOutcome,
    ) -> Result<Self, LoadError> {
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
        };
        plugin.info = plugin
            .call("-", |store, operator| {
                operator.jinghzhu_operator_reconciler().call_info(store)
            })
            .map_err(|source_error| LoadError::Info {
                from: source.to_string(),
                source: source_error,
            })?;
        Ok(plugin)
    }

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
        format!(
            "{}@{} ({})",
            self.info.name,
            self.info.version,
            short_digest(&self.digest)
        )
    }

    /// Reconciles `jz` with its owned `pods` at the current time. `object`
    /// (`namespace/name`) tags the call's log lines.
    ///
    /// The call runs on tokio's blocking pool: a guest is CPU-bound and has
    /// no I/O to await, so wasmtime's async mode (which would need
    /// `async_support` and epoch yields to share a worker thread) buys
    /// nothing here, while a plugin that spends its whole deadline on a
    /// blocking thread never stalls the async workers (watches, API calls,
    /// other reconciles). The deadline bounds how long a thread is held.
    pub async fn reconcile(
        self: &Arc<Self>,
        jz: &Jinghzhu,
        pods: &[Pod],
        object: &str,
    ) -> Result<ProposedActions, PluginError> {
        let input = convert::input(jz, pods, SystemTime::now());
        self.reconcile_input(input, object.to_string()).await
    }

    /// Reconciles `jz` with its owned `pods`, telling the plugin it is `now`.
    pub async fn reconcile_at(
        self: &Arc<Self>,
        jz: &Jinghzhu,
        pods: &[Pod],
        now: SystemTime,
    ) -> Result<ProposedActions, PluginError> {
        let input = convert::input(jz, pods, now);
        self.reconcile_input(input, object_key(jz)).await
    }

    async fn reconcile_input(
        self: &Arc<Self>,
        input: wit::ReconcileInput,
        object: String,
    ) -> Result<ProposedActions, PluginError> {
        let plugin = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            plugin
                .call_reconcile(&input, &object)
                .map(|out| convert::output(out, &input))
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
        let input = convert::input(jz, pods, now);
        self.call_reconcile(&input, &object_key(jz))
            .map(|out| convert::output(out, &input))
    }

    /// Runs `reconcile` on a WIT input in a fresh instance, on this thread.
    pub fn call_reconcile(
        &self,
        input: &wit::ReconcileInput,
        object: &str,
    ) -> Result<wit::ReconcileOutput, PluginError> {
        self.call(object, |store, operator| {
            operator
                .jinghzhu_operator_reconciler()
                .call_reconcile(store, input)
        })?
        .map_err(|e| PluginError::Returned {
            message: e.message,
            retryable: e.retryable,
        })
    }

    fn new_store(&self, object: &str) -> Store<PluginState> {
        let limit = usize::try_from(self.memory_limit).unwrap_or(usize::MAX);
        let tags = CallTags::new(&self.info.name, &self.digest, object);
        let mut store = Store::new(&self.engine, PluginState::new(tags, limit));
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(deadline_ticks(self.deadline));
        store.epoch_deadline_trap();
        store
    }

    /// One call in a fresh store and instance; the store (and with it the
    /// instance, trapped or not) is dropped at the end.
    fn call<T>(
        &self,
        object: &str,
        body: impl FnOnce(&mut Store<PluginState>, &Operator) -> wasmtime::Result<T>,
    ) -> Result<T, PluginError> {
        let mut store = self.new_store(object);
        let outcome = self
            .pre
            .instantiate(&mut store)
            .and_then(|operator| body(&mut store, &operator));
        let stderr_tail = store.data().finish_output();
        outcome.map_err(|err| self.classify(&store, &err, &stderr_tail))
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
        match err.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => PluginError::Deadline(self.deadline),
            Some(trap) => PluginError::Trap {
                message: match panic_message(stderr_tail) {
                    Some(panic) => format!("{panic} ({trap})"),
                    None => format!("{err:#}"),
                },
            },
            // Not a trap: the host could not instantiate (e.g. every pool
            // slot in use) or a host function failed.
            None => PluginError::Host(format!("{err:#}")),
        }
    }

    /// An instance kept for repeated calls, for the benchmark that measures
    /// what a fresh instance per call costs. Production calls never reuse
    /// instances: state would leak between objects, and a trap would poison
    /// the instance.
    #[doc(hidden)]
    pub fn reusable_instance(&self) -> Result<ReusableInstance, PluginError> {
        let mut store = self.new_store("bench");
        let operator = match self.pre.instantiate(&mut store) {
            Ok(operator) => operator,
            Err(err) => {
                let tail = store.data().finish_output();
                return Err(self.classify(&store, &err, &tail));
            }
        };
        Ok(ReusableInstance {
            store,
            operator,
            deadline_ticks: deadline_ticks(self.deadline),
        })
    }
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

/// A store and instance reused across calls (benchmarks only).
#[doc(hidden)]
pub struct ReusableInstance {
    store: Store<PluginState>,
    operator: Operator,
    deadline_ticks: u64,
}

impl ReusableInstance {
    /// One reconcile on the kept instance.
    pub fn call_reconcile(
        &mut self,
        input: &wit::ReconcileInput,
    ) -> anyhow::Result<wit::ReconcileOutput> {
        self.store.set_epoch_deadline(self.deadline_ticks);
        let out = self
            .operator
            .jinghzhu_operator_reconciler()
            .call_reconcile(&mut self.store, input)?;
        out.map_err(|e| anyhow::anyhow!(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
