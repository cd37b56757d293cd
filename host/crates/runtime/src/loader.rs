//! Turning bytes into a [`LoadedPlugin`]: check that they are a component,
//! compile them (or take them precompiled from the cache), link them against
//! the host's imports, tell which contract version they were built for
//! (the `reconciler` they export: 0.1.0 or 0.2.0), check they implement
//! that version's `operator` world, and ask their `info()`.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Linker};

use super::bindings::{Operator, OperatorPre, v2, v3};
use super::cache::{LoadOutcome, PrecompiledCache};
use super::config::RuntimeConfig;
use super::contract::{self, ContractVersion, Detected};
use super::engine::new_engine;
use super::errors::LoadError;
use super::plugin::{LoadedPlugin, Pre};
use super::state::PluginState;

/// `sha256:<hex>` of some bytes: how plugins are identified everywhere.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The engine, linker and precompiled cache shared by every plugin. Create
/// one per process and share it (`Arc<Runtime>`); it is `Send + Sync`.
pub struct Runtime {
    engine: Engine,
    linker: Linker<PluginState>,
    cache: PrecompiledCache,
    config: RuntimeConfig,
}

impl Runtime {
    /// A runtime with its engine and epoch ticker.
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Self> {
        let engine = new_engine(&config)?;
        let mut linker = Linker::new(&engine);
        // Rust guests import wasi:cli, wasi:io, wasi:clocks... even when they
        // use none of it. Each store's WASI context grants nothing (see
        // `state`), so providing the interfaces gives no authority.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // Every contract version's imports (`log@0.1.0`, `log@0.2.0`, the
        // generic `log@0.3.0`): their names differ, so one linker serves
        // plugins of any.
        Operator::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        v2::Operator::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        v3::Controller::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        Ok(Self {
            engine,
            linker,
            cache: PrecompiledCache::with_key_file(
                config.cache_dir.clone(),
                config.cache_key_file.clone(),
            )
            .bounded(config.cache_max_bytes),
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

    /// The precompiled-artifact cache.
    pub fn cache(&self) -> &PrecompiledCache {
        &self.cache
    }

    /// Checks, compiles (or fetches precompiled), links and pre-instantiates
    /// `bytes`, then calls the plugin's `info()` once. `source` names the
    /// bytes in messages (a path, a ConfigMap key...). Blocking: compiling
    /// takes tens of milliseconds; from async code use `spawn_blocking`.
    pub fn load(&self, bytes: &[u8], source: &str) -> Result<Arc<LoadedPlugin>, LoadError> {
        check_header(bytes, source)?;
        let digest = digest_of(bytes);
        let digest_hex = digest.trim_start_matches("sha256:");
        let (component, outcome) = self
            .cache
            .load(&self.engine, bytes, digest_hex, |bytes| {
                self.config.compiler.precompile(&self.engine, bytes)
            })
            .map_err(|err| LoadError::Compile {
                from: source.to_string(),
                message: format!("{err:#}"),
            })?;
        let pre = self
            .pre_instantiate(&component)
            .map_err(|err| wrong_world(&self.engine, &component, source, &err))?;
        let plugin = LoadedPlugin::new(
            pre,
            self.engine.clone(),
            &self.config,
            digest,
            source,
            outcome,
        )?;
        Ok(Arc::new(plugin))
    }

    /// The plugin whose component's sha256 is `digest` (`sha256:<hex>`)
    /// from the precompiled cache alone, never compiled (there are no
    /// bytes): a plugin this host vetted and compiled before, taken up
    /// again after a restart. `None` when no trusted artifact of it is
    /// there or it no longer loads. Blocking, as [`Runtime::load`].
    pub fn load_precompiled(&self, digest: &str, source: &str) -> Option<Arc<LoadedPlugin>> {
        let digest_hex = digest.strip_prefix("sha256:")?;
        if digest_hex.len() != 64 || !digest_hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let component = self.cache.cached(&self.engine, digest_hex)?;
        let loaded = self
            .pre_instantiate(&component)
            .map_err(|err| format!("{err:#}"))
            .and_then(|pre| {
                LoadedPlugin::new(
                    pre,
                    self.engine.clone(),
                    &self.config,
                    digest.to_string(),
                    source,
                    LoadOutcome::FromCache,
                )
                .map_err(|err| format!("{err:#}"))
            });
        match loaded {
            Ok(plugin) => Some(Arc::new(plugin)),
            Err(why) => {
                tracing::warn!(plugin = digest, reason = %why, "a precompiled plugin in the cache no longer loads");
                None
            }
        }
    }

    /// [`Runtime::load_precompiled`] on tokio's blocking pool.
    pub async fn load_precompiled_off_thread(
        self: &Arc<Self>,
        digest: String,
        source: String,
    ) -> Option<Arc<LoadedPlugin>> {
        let runtime = self.clone();
        tokio::task::spawn_blocking(move || runtime.load_precompiled(&digest, &source))
            .await
            .ok()
            .flatten()
    }

    /// Links `component` and checks it against the world of the contract
    /// version its `reconciler` export names.
    fn pre_instantiate(&self, component: &Component) -> wasmtime::Result<Pre> {
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let version = match contract::detect(exports.iter().map(String::as_str)) {
            Detected::Served(version) => version,
            // Linked as 0.1 so the error explains what is wrong.
            Detected::Unserved(_) | Detected::NoReconciler => ContractVersion::V0_1,
        };
        let pre = self.linker.instantiate_pre(component)?;
        Ok(match version {
            ContractVersion::V0_1 => Pre::V0_1(OperatorPre::new(pre)?),
            ContractVersion::V0_2 => Pre::V0_2(v2::OperatorPre::new(pre)?),
            ContractVersion::V0_3 => Pre::V0_3(v3::ControllerPre::new(pre)?),
        })
    }

    /// [`Runtime::load`] from async code: the compile (and the wait for the
    /// child compiler), linking and `info()` run on tokio's blocking pool,
    /// never on an async worker, so reconciles, watches and probes keep
    /// running while a plugin compiles.
    pub async fn load_off_thread(
        self: &Arc<Self>,
        bytes: Arc<[u8]>,
        source: String,
    ) -> Result<Arc<LoadedPlugin>, LoadError> {
        let runtime = self.clone();
        let from = source.clone();
        tokio::task::spawn_blocking(move || runtime.load(&bytes, &source))
            .await
            .unwrap_or_else(|joined| {
                Err(LoadError::Compile {
                    from,
                    message: format!("the loading thread stopped: {joined}"),
                })
            })
    }
}

/// Tells a component from a core module from anything else by the header:
/// `\0asm`, then version 1 for core modules or `0d 00 01 00` (version 13,
/// layer 1) for components. What is not a component is diagnosed.
fn check_header(bytes: &[u8], source: &str) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        let what = if bytes.starts_with(b"!<arch>\n") {
            "it is an ar archive, the rlib or staticlib of a crate: a plugin crate needs \
             `crate-type = [\"cdylib\"]` (plus \"rlib\" for native tests) to produce a .wasm"
        } else {
            "it does not start with \\0asm"
        };
        return Err(LoadError::NotWasm {
            from: source.to_string(),
            what: what.to_string(),
        });
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule {
            from: source.to_string(),
            diagnosis: diagnose_core_module(bytes),
        });
    }
    Ok(())
}

/// What a core module is and why it is not a plugin: the target it was
/// built for (from its imports) and whether the plugin's exports are there.
fn diagnose_core_module(bytes: &[u8]) -> String {
    let mut wasi_preview1 = false;
    let mut reconciler_exports = false;
    let mut command = false;
    let mut world_type = false;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(wasmparser::Payload::ImportSection(reader)) => {
                wasi_preview1 |= reader
                    .into_imports()
                    .flatten()
                    .any(|import| import.module == "wasi_snapshot_preview1");
            }
            Ok(wasmparser::Payload::ExportSection(reader)) => {
                for export in reader.into_iter().flatten() {
                    reconciler_exports |= contract::is_contract_interface(export.name)
                        && export.name.contains("/reconciler@");
                    command |= export.name == "_start";
                }
            }
            Ok(wasmparser::Payload::CustomSection(reader)) => {
                world_type |= reader.name().starts_with("component-type");
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let target = if wasi_preview1 {
        "it was built for wasm32-wasip1 (it imports wasi_snapshot_preview1) and not componentized"
    } else {
        "it imports no WASI: built for wasm32-unknown-unknown (which cannot make a component), or for \
         wasm32-wasip1 with nothing in it that uses WASI, as when nothing is exported"
    };
    let cause = if reconciler_exports {
        "its reconciler exports are there, so only the componentizing step is missing".to_string()
    } else if command {
        "it is a command (it exports `_start`): the crate is a binary; a plugin is a library with \
         `[lib] crate-type = [\"cdylib\"]` and `jinghzhu_plugin_sdk::export!(YourPlugin);`"
            .to_string()
    } else {
        format!(
            "it does not export `{}` either{}: call \
             `jinghzhu_plugin_sdk::export!(YourPlugin);` at the crate root",
            contract::LATEST.export(),
            if world_type {
                " (the SDK's bindings are in it, but `export!` was never called)"
            } else {
                ""
            }
        )
    };
    format!("{target}; {cause}")
}

/// Explains why a component does not fit the world: which WIT package and
/// version it was built for, or which of its imports the host lacks.
fn wrong_world(
    engine: &Engine,
    component: &Component,
    source: &str,
    err: &wasmtime::Error,
) -> LoadError {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let ours = |name: &&String| contract::is_contract_interface(name);
    let served = contract::detect(exports.iter().map(String::as_str));
    let other_versions: Vec<&String> = exports
        .iter()
        .chain(&imports)
        .filter(ours)
        .filter(|name| ContractVersion::parse(version_of(name)).is_none())
        .collect();
    let found = if let Some(first) = other_versions.first() {
        let package = package_of(first);
        format!(
            "it targets WIT package {package} (it exports [{}]{}), a contract version this host does not serve (it serves {}); rebuild it against this host's wit/ (wit/0.2/operator.wit for the newest, {}), or run a host that supports {package}",
            exports.join(", "),
            list_if_any(", and imports ", &imports),
            contract::supported(),
            contract::LATEST.package(),
        )
    } else if let Detected::Served(version) = served {
        format!(
            "it exports `{}` (contract {version}) but does not match that version's world: {err:#}",
            version.export()
        )
    } else if exports.is_empty() {
        format!(
            "it exports nothing{}. Likely cause: the plugin crate never calls \
             `jinghzhu_plugin_sdk::export!(YourPlugin);` (or only under a cfg or feature that \
             was off), so the component has no reconciler. Add the call at the crate root, next to \
             `impl Guest for YourPlugin`, and rebuild",
            if imports.is_empty() {
                String::new()
            } else {
                format!(" (it imports [{}])", imports.join(", "))
            }
        )
    } else if exports.iter().all(|e| e.starts_with("wasi:cli/run@")) {
        format!(
            "it exports [{}]: it is a WASI command, built from a binary crate (`fn main`). A plugin \
             is a library: `[lib] crate-type = [\"cdylib\"]` and \
             `jinghzhu_plugin_sdk::export!(YourPlugin);` (`wasm-operator new` scaffolds one)",
            exports.join(", ")
        )
    } else if !exports
        .iter()
        .any(|e| contract::is_contract_interface(e) && e.contains("/reconciler@"))
    {
        format!(
            "it exports [{}]{}, not the reconciler; build it with the jinghzhu-plugin-sdk crate or bindings generated from wit/0.2/operator.wit",
            exports.join(", "),
            list_if_any(" and imports ", &imports)
        )
    } else {
        format!("linking it failed (does it import something the host does not provide?): {err:#}")
    };
    LoadError::WrongWorld {
        from: source.to_string(),
        found,
    }
}

fn list_if_any(prefix: &str, items: &[String]) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!("{prefix}[{}]", items.join(", "))
    }
}

/// `0.1.0` of `jinghzhu:operator/reconciler@0.1.0` (empty when unversioned).
fn version_of(name: &str) -> &str {
    name.rsplit_once('@').map(|(_, v)| v).unwrap_or("")
}

/// `jinghzhu:operator@0.2.0` of `jinghzhu:operator/reconciler@0.2.0`.
fn package_of(name: &str) -> String {
    let package = name.split('/').next().unwrap_or(name);
    match name.rsplit_once('@') {
        Some((_, version)) => format!("{package}@{version}"),
        None => package.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!(version_of("jinghzhu:operator/reconciler@0.2.0"), "0.2.0");
        assert_eq!(
            package_of("jinghzhu:operator/reconciler@0.2.0"),
            "jinghzhu:operator@0.2.0"
        );
        assert_eq!(
            package_of("jinghzhu:operator/reconciler"),
            "jinghzhu:operator"
        );
    }

    #[test]
    fn headers_are_told_apart() {
        assert!(matches!(
            check_header(b"hello world", "x"),
            Err(LoadError::NotWasm { .. })
        ));
        assert!(matches!(
            check_header(b"\0asm", "x"),
            Err(LoadError::NotWasm { .. })
        ));
        assert!(matches!(
            check_header(b"\0asm\x01\0\0\0", "x"),
            Err(LoadError::CoreModule { .. })
        ));
        assert!(check_header(b"\0asm\x0d\0\x01\0", "x").is_ok());
    }
}
