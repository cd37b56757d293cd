//! Shared helpers of the host's integration tests: plugin artifacts,
//! objects to reconcile, and a `tracing` capture.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::Pod;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use wasm_artifacts::{Toolchain, build};
use wasm_operator::crd::Jinghzhu;
use wasm_operator_testkit as testkit;

/// The annotation that makes misbehaving-plugin misbehave.
pub const MISBEHAVE: &str = "test.jinghzhu.io/misbehave";

pub fn replicaset(toolchain: Toolchain) -> PathBuf {
    build("replicaset-plugin", &[], toolchain)
}

pub fn misbehaving() -> PathBuf {
    build("misbehaving-plugin", &[], Toolchain::Wasip2)
}

/// The misbehaving plugin whose `info()` is invalid.
pub fn misbehaving_bad_info() -> PathBuf {
    build("misbehaving-plugin", &["bad-info"], Toolchain::Wasip2)
}

pub fn other_world() -> PathBuf {
    build("other-world-plugin", &[], Toolchain::Wasip2)
}

/// The example plugin's golden fixtures.
pub fn fixtures_dir() -> PathBuf {
    wasm_artifacts::workspace_root().join("plugins/replicaset/fixtures")
}

/// A Jinghzhu `shop/<name>` with uid `uid-<name>`, generation 1, created
/// at the epoch.
pub fn jinghzhu(name: &str, desired: u32) -> Jinghzhu {
    testkit::jinghzhu(name)
        .namespace("shop")
        .uid(&format!("uid-{name}"))
        .desired(desired)
        .generation(1)
        .created_at(0)
        .build()
}

pub fn misbehaving_jinghzhu(mode: &str) -> Jinghzhu {
    let mut jz = jinghzhu("bad", 1);
    jz.metadata.annotations = Some(testkit::string_map(&[(MISBEHAVE, mode)]));
    jz
}

/// A pod controlled by `owner` (uid `uid-<name>`), created `created_secs`
/// after the epoch.
pub fn pod(owner: &Jinghzhu, name: &str, phase: &str, ready: bool, created_secs: i64) -> Pod {
    testkit::pod(name)
        .uid(&format!("uid-{name}"))
        .controlled_by(owner)
        .phase(phase)
        .ready(ready)
        .created_at(created_secs)
        .build()
}

/// One captured `tracing` event.
#[derive(Debug, Clone)]
pub struct Captured {
    pub level: tracing::Level,
    pub target: String,
    pub fields: BTreeMap<String, String>,
}

impl Captured {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// Collects every event into a shared list.
#[derive(Clone, Default)]
pub struct Capture(pub Arc<Mutex<Vec<Captured>>>);

impl Capture {
    pub fn events(&self) -> Vec<Captured> {
        self.0.lock().expect("capture lock").clone()
    }

    /// The process-wide capture, installed as the global subscriber on
    /// first use. (A thread-scoped subscriber misses events whose callsite
    /// another test thread registered first, while no subscriber wanted it.)
    pub fn global() -> &'static Capture {
        static GLOBAL: OnceLock<Capture> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let capture = Capture::default();
            let subscriber = tracing_subscriber::registry().with(capture.clone());
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
            capture
        })
    }
}

struct FieldVisitor<'a>(&'a mut BTreeMap<String, String>);

impl Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut FieldVisitor(&mut fields));
        self.0.lock().expect("capture lock").push(Captured {
            level: *event.metadata().level(),
            target: event.metadata().target().to_string(),
            fields,
        });
    }
}
