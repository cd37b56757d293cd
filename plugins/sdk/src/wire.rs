//! Between the contract's wire records (the generated [`crate::bindings`])
//! and the SDK's owned records ([`crate::types`]): what [`crate::export!`]
//! runs around a plugin's [`Guest`] methods.
//!
//! Contract 0.2 (the default): the input's strings arrive as one UTF-8
//! table (`bytes` + `ends`), checked once, and each record's `str-id`s and
//! `span`s are resolved against it; the output is encoded the same way,
//! each distinct string stored once. With the cargo feature `contract-0-1`
//! the records are the 0.1 ones, moved field by field.
//!
//! Public for the macro and for tests that want to see the wire form
//! ([`encode_input`], [`decode_output`]); plugins never call it.

use crate::Guest;
use crate::bindings::jinghzhu::operator::types as raw;
use crate::types as m;

/// `info()` of `G`, as the wire record.
pub fn info<G: Guest>() -> raw::PluginInfo {
    let info = G::info();
    raw::PluginInfo {
        name: info.name,
        version: info.version,
    }
}

/// `reconcile()` of `G` on a wire input, as a wire result: contract 0.2
/// checks the input whole and hands `G` a view of it
/// ([`Guest::reconcile_view`], which decodes into owned records unless the
/// plugin reads the view itself); 0.1 moves the records into owned ones and
/// calls [`Guest::reconcile`]. An input the SDK cannot read (which the host
/// never sends) is a non-retryable error.
pub fn reconcile<G: Guest>(
    input: raw::ReconcileInput,
) -> Result<raw::ReconcileOutput, raw::ReconcileError> {
    let unreadable = |problem: String| raw::ReconcileError {
        message: format!("the plugin SDK could not read the host's input: {problem}"),
        retryable: false,
    };
    #[cfg(not(feature = "contract-0-1"))]
    let result = {
        let view =
            crate::view::InputView::from_wire(&input).map_err(|err| unreadable(err.to_string()))?;
        G::reconcile_view(&view)
    };
    #[cfg(feature = "contract-0-1")]
    let result = G::reconcile(decode_input(input).map_err(unreadable)?);
    match result {
        Ok(output) => Ok(encode_output(&output)),
        Err(err) => Err(raw::ReconcileError {
            message: err.message,
            retryable: err.retryable,
        }),
    }
}

pub(crate) fn phase_in(p: raw::PodPhase) -> m::PodPhase {
    match p {
        raw::PodPhase::Pending => m::PodPhase::Pending,
        raw::PodPhase::Running => m::PodPhase::Running,
        raw::PodPhase::Succeeded => m::PodPhase::Succeeded,
        raw::PodPhase::Failed => m::PodPhase::Failed,
        raw::PodPhase::Unknown => m::PodPhase::Unknown,
    }
}

fn phase_out(p: m::PodPhase) -> raw::PodPhase {
    match p {
        m::PodPhase::Pending => raw::PodPhase::Pending,
        m::PodPhase::Running => raw::PodPhase::Running,
        m::PodPhase::Succeeded => raw::PodPhase::Succeeded,
        m::PodPhase::Failed => raw::PodPhase::Failed,
        m::PodPhase::Unknown => raw::PodPhase::Unknown,
    }
}

fn event_type_in(t: raw::EventType) -> m::EventType {
    match t {
        raw::EventType::Normal => m::EventType::Normal,
        raw::EventType::Warning => m::EventType::Warning,
    }
}

fn event_type_out(t: m::EventType) -> raw::EventType {
    match t {
        m::EventType::Normal => raw::EventType::Normal,
        m::EventType::Warning => raw::EventType::Warning,
    }
}

pub(crate) fn ts_in(t: raw::Timestamp) -> m::Timestamp {
    m::Timestamp {
        seconds: t.seconds,
        nanoseconds: t.nanoseconds,
    }
}

fn ts_out(t: m::Timestamp) -> raw::Timestamp {
    raw::Timestamp {
        seconds: t.seconds,
        nanoseconds: t.nanoseconds,
    }
}

#[cfg(not(feature = "contract-0-1"))]
pub use v0_2::*;

#[cfg(feature = "contract-0-1")]
pub use v0_1::*;

#[cfg(not(feature = "contract-0-1"))]
mod v0_2 {
    use std::collections::HashMap;
    use std::hash::{BuildHasherDefault, Hasher};

    use super::{event_type_in, event_type_out, m, phase_in, phase_out, raw, ts_in, ts_out};
    use crate::view::{spanned, string_at};

    /// The strings of a wire table: one UTF-8 check for all of them.
    struct Table<'t> {
        text: &'t str,
        ends: &'t [u32],
    }

    impl<'t> Table<'t> {
        fn new(table: &'t raw::StringTable) -> Result<Self, String> {
            let text = std::str::from_utf8(&table.bytes)
                .map_err(|err| format!("the string table is not UTF-8: {err}"))?;
            Ok(Table {
                text,
                ends: &table.ends,
            })
        }

        fn str(&self, id: u32) -> Result<&'t str, String> {
            string_at(self.text, self.ends, id)
        }

        fn string(&self, id: u32) -> Result<String, String> {
            self.str(id).map(str::to_owned)
        }

        fn pairs(
            &self,
            pairs: &[raw::KeyValue],
            span: raw::Span,
        ) -> Result<Vec<m::KeyValue>, String> {
            spanned(pairs, span)?
                .iter()
                .map(|kv| {
                    Ok(m::KeyValue {
                        key: self.string(kv.key)?,
                        value: self.string(kv.value)?,
                    })
                })
                .collect()
        }

        fn status(&self, s: &raw::JinghzhuStatus) -> Result<m::JinghzhuStatus, String> {
            Ok(m::JinghzhuStatus {
                current: s.current,
                pod_list: s
                    .pod_list
                    .iter()
                    .map(|&id| self.string(id))
                    .collect::<Result<_, _>>()?,
                state: self.string(s.state)?,
                message: self.string(s.message)?,
                observed_generation: s.observed_generation,
            })
        }
    }

    fn meta(
        t: &Table<'_>,
        input: &raw::ReconcileInput,
        meta: &raw::ObjectMeta,
    ) -> Result<m::ObjectMeta, String> {
        Ok(m::ObjectMeta {
            name: t.string(meta.name)?,
            namespace: t.string(meta.namespace)?,
            uid: t.string(meta.uid)?,
            resource_version: t.string(meta.resource_version)?,
            generation: meta.generation,
            labels: t.pairs(&input.pairs, meta.labels)?,
            annotations: t.pairs(&input.pairs, meta.annotations)?,
            creation_timestamp: meta.creation_timestamp.map(ts_in),
            deletion_timestamp: meta.deletion_timestamp.map(ts_in),
            owner_references: spanned(&input.owners, meta.owner_references)?
                .iter()
                .map(|o| {
                    Ok(m::OwnerReference {
                        api_version: t.string(o.api_version)?,
                        kind: t.string(o.kind)?,
                        name: t.string(o.name)?,
                        uid: t.string(o.uid)?,
                        controller: o.controller,
                    })
                })
                .collect::<Result<_, String>>()?,
        })
    }

    /// The SDK's records of a wire input.
    pub fn decode_input(input: raw::ReconcileInput) -> Result<m::ReconcileInput, String> {
        let t = Table::new(&input.strings)?;
        let jz = &input.jinghzhu;
        let template = match &jz.spec.template {
            Some(tpl) => Some(m::PodTemplate {
                labels: t.pairs(&input.pairs, tpl.labels)?,
                annotations: t.pairs(&input.pairs, tpl.annotations)?,
                spec_json: t.string(tpl.spec_json)?,
            }),
            None => None,
        };
        let jinghzhu = m::Jinghzhu {
            metadata: meta(&t, &input, &jz.metadata)?,
            spec: m::JinghzhuSpec {
                desired: jz.spec.desired,
                template,
            },
            status: jz.status.as_ref().map(|s| t.status(s)).transpose()?,
        };
        let pods = input
            .pods
            .iter()
            .map(|p| {
                Ok(m::Pod {
                    metadata: meta(&t, &input, &p.metadata)?,
                    phase: phase_in(p.phase),
                    ready: p.ready,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(m::ReconcileInput {
            jinghzhu,
            pods,
            now: ts_in(input.now),
        })
    }

    /// FNV-1a: std's default hasher would ask WASI for random keys in
    /// every fresh instance.
    #[derive(Default)]
    struct Fnv(u64);

    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }

        fn write(&mut self, bytes: &[u8]) {
            let mut h = if self.0 == 0 {
                0xcbf2_9ce4_8422_2325
            } else {
                self.0
            };
            for &b in bytes {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            self.0 = h;
        }
    }

    /// Builds a wire string table, each distinct string stored once, the
    /// empty string as id 0; and the shared `pairs` and `owners` lists.
    struct Encoder<'a> {
        bytes: Vec<u8>,
        ends: Vec<u32>,
        seen: HashMap<&'a str, u32, BuildHasherDefault<Fnv>>,
        pairs: Vec<raw::KeyValue>,
        owners: Vec<raw::OwnerReference>,
    }

    fn u32_of(n: usize) -> u32 {
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    impl<'a> Encoder<'a> {
        fn new() -> Self {
            Encoder {
                bytes: Vec::new(),
                ends: vec![0],
                seen: HashMap::default(),
                pairs: Vec::new(),
                owners: Vec::new(),
            }
        }

        fn id(&mut self, s: &'a str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            if let Some(&id) = self.seen.get(s) {
                return id;
            }
            self.bytes.extend_from_slice(s.as_bytes());
            let id = u32_of(self.ends.len());
            self.ends.push(u32_of(self.bytes.len()));
            self.seen.insert(s, id);
            id
        }

        fn pairs(&mut self, kvs: &'a [m::KeyValue]) -> raw::Span {
            let start = u32_of(self.pairs.len());
            for kv in kvs {
                let pair = raw::KeyValue {
                    key: self.id(&kv.key),
                    value: self.id(&kv.value),
                };
                self.pairs.push(pair);
            }
            raw::Span {
                start,
                len: u32_of(kvs.len()),
            }
        }

        fn meta(&mut self, meta: &'a m::ObjectMeta) -> raw::ObjectMeta {
            let name = self.id(&meta.name);
            let namespace = self.id(&meta.namespace);
            let uid = self.id(&meta.uid);
            let resource_version = self.id(&meta.resource_version);
            let labels = self.pairs(&meta.labels);
            let annotations = self.pairs(&meta.annotations);
            let start = u32_of(self.owners.len());
            for o in &meta.owner_references {
                let owner = raw::OwnerReference {
                    api_version: self.id(&o.api_version),
                    kind: self.id(&o.kind),
                    name: self.id(&o.name),
                    uid: self.id(&o.uid),
                    controller: o.controller,
                };
                self.owners.push(owner);
            }
            raw::ObjectMeta {
                name,
                namespace,
                uid,
                resource_version,
                generation: meta.generation,
                labels,
                annotations,
                creation_timestamp: meta.creation_timestamp.map(ts_out),
                deletion_timestamp: meta.deletion_timestamp.map(ts_out),
                owner_references: raw::Span {
                    start,
                    len: u32_of(meta.owner_references.len()),
                },
            }
        }

        fn status(&mut self, s: &'a m::JinghzhuStatus) -> raw::JinghzhuStatus {
            raw::JinghzhuStatus {
                current: s.current,
                pod_list: s.pod_list.iter().map(|n| self.id(n)).collect(),
                state: self.id(&s.state),
                message: self.id(&s.message),
                observed_generation: s.observed_generation,
            }
        }

        fn table(&mut self) -> raw::StringTable {
            raw::StringTable {
                bytes: std::mem::take(&mut self.bytes),
                ends: std::mem::take(&mut self.ends),
            }
        }
    }

    /// The wire form of an output.
    pub fn encode_output(out: &m::ReconcileOutput) -> raw::ReconcileOutput {
        let mut e = Encoder::new();
        let create_pods = out
            .create_pods
            .iter()
            .map(|c| raw::PodCreate {
                name: c.name.as_deref().map(|s| e.id(s)),
                generate_name: c.generate_name.as_deref().map(|s| e.id(s)),
                labels: e.pairs(&c.labels),
                annotations: e.pairs(&c.annotations),
                spec_json: e.id(&c.spec_json),
            })
            .collect();
        let delete_pods = out.delete_pods.iter().map(|n| e.id(n)).collect();
        let status = out.status.as_ref().map(|s| e.status(s));
        let events = out
            .events
            .iter()
            .map(|ev| raw::Event {
                event_type: event_type_out(ev.event_type),
                reason: e.id(&ev.reason),
                message: e.id(&ev.message),
            })
            .collect();
        raw::ReconcileOutput {
            strings: e.table(),
            pairs: std::mem::take(&mut e.pairs),
            create_pods,
            delete_pods,
            status,
            requeue_after_ms: out.requeue_after_ms,
            events,
        }
    }

    /// The wire form of an input, as the host builds it (for tests).
    pub fn encode_input(input: &m::ReconcileInput) -> raw::ReconcileInput {
        let mut e = Encoder::new();
        let jz = &input.jinghzhu;
        let metadata = e.meta(&jz.metadata);
        let template = jz.spec.template.as_ref().map(|t| raw::PodTemplate {
            labels: e.pairs(&t.labels),
            annotations: e.pairs(&t.annotations),
            spec_json: e.id(&t.spec_json),
        });
        let status = jz.status.as_ref().map(|s| e.status(s));
        let pods = input
            .pods
            .iter()
            .map(|p| raw::Pod {
                metadata: e.meta(&p.metadata),
                phase: phase_out(p.phase),
                ready: p.ready,
            })
            .collect();
        raw::ReconcileInput {
            strings: e.table(),
            pairs: std::mem::take(&mut e.pairs),
            owners: std::mem::take(&mut e.owners),
            jinghzhu: raw::Jinghzhu {
                metadata,
                spec: raw::JinghzhuSpec {
                    desired: jz.spec.desired,
                    template,
                },
                status,
            },
            pods,
            now: ts_out(input.now),
        }
    }

    /// The SDK's records of a wire output (for tests).
    pub fn decode_output(out: &raw::ReconcileOutput) -> Result<m::ReconcileOutput, String> {
        let t = Table::new(&out.strings)?;
        Ok(m::ReconcileOutput {
            create_pods: out
                .create_pods
                .iter()
                .map(|c| {
                    Ok(m::PodCreate {
                        name: c.name.map(|id| t.string(id)).transpose()?,
                        generate_name: c.generate_name.map(|id| t.string(id)).transpose()?,
                        labels: t.pairs(&out.pairs, c.labels)?,
                        annotations: t.pairs(&out.pairs, c.annotations)?,
                        spec_json: t.string(c.spec_json)?,
                    })
                })
                .collect::<Result<_, String>>()?,
            delete_pods: out
                .delete_pods
                .iter()
                .map(|&id| t.string(id))
                .collect::<Result<_, _>>()?,
            status: out.status.as_ref().map(|s| t.status(s)).transpose()?,
            requeue_after_ms: out.requeue_after_ms,
            events: out
                .events
                .iter()
                .map(|ev| {
                    Ok(m::Event {
                        event_type: event_type_in(ev.event_type),
                        reason: t.string(ev.reason)?,
                        message: t.string(ev.message)?,
                    })
                })
                .collect::<Result<_, String>>()?,
        })
    }
}

#[cfg(feature = "contract-0-1")]
mod v0_1 {
    use super::{event_type_in, event_type_out, m, phase_in, phase_out, raw, ts_in, ts_out};

    fn kvs_in(kvs: Vec<raw::KeyValue>) -> Vec<m::KeyValue> {
        kvs.into_iter()
            .map(|kv| m::KeyValue {
                key: kv.key,
                value: kv.value,
            })
            .collect()
    }

    fn kvs_out(kvs: &[m::KeyValue]) -> Vec<raw::KeyValue> {
        kvs.iter()
            .map(|kv| raw::KeyValue {
                key: kv.key.clone(),
                value: kv.value.clone(),
            })
            .collect()
    }

    fn meta_in(meta: raw::ObjectMeta) -> m::ObjectMeta {
        m::ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            generation: meta.generation,
            labels: kvs_in(meta.labels),
            annotations: kvs_in(meta.annotations),
            creation_timestamp: meta.creation_timestamp.map(ts_in),
            deletion_timestamp: meta.deletion_timestamp.map(ts_in),
            owner_references: meta
                .owner_references
                .into_iter()
                .map(|o| m::OwnerReference {
                    api_version: o.api_version,
                    kind: o.kind,
                    name: o.name,
                    uid: o.uid,
                    controller: o.controller,
                })
                .collect(),
        }
    }

    fn meta_out(meta: &m::ObjectMeta) -> raw::ObjectMeta {
        raw::ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            generation: meta.generation,
            labels: kvs_out(&meta.labels),
            annotations: kvs_out(&meta.annotations),
            creation_timestamp: meta.creation_timestamp.map(ts_out),
            deletion_timestamp: meta.deletion_timestamp.map(ts_out),
            owner_references: meta
                .owner_references
                .iter()
                .map(|o| raw::OwnerReference {
                    api_version: o.api_version.clone(),
                    kind: o.kind.clone(),
                    name: o.name.clone(),
                    uid: o.uid.clone(),
                    controller: o.controller,
                })
                .collect(),
        }
    }

    fn status_in(s: raw::JinghzhuStatus) -> m::JinghzhuStatus {
        m::JinghzhuStatus {
            current: s.current,
            pod_list: s.pod_list,
            state: s.state,
            message: s.message,
            observed_generation: s.observed_generation,
        }
    }

    fn status_out(s: &m::JinghzhuStatus) -> raw::JinghzhuStatus {
        raw::JinghzhuStatus {
            current: s.current,
            pod_list: s.pod_list.clone(),
            state: s.state.clone(),
            message: s.message.clone(),
            observed_generation: s.observed_generation,
        }
    }

    /// The SDK's records of a wire input.
    pub fn decode_input(input: raw::ReconcileInput) -> Result<m::ReconcileInput, String> {
        let jz = input.jinghzhu;
        Ok(m::ReconcileInput {
            jinghzhu: m::Jinghzhu {
                metadata: meta_in(jz.metadata),
                spec: m::JinghzhuSpec {
                    desired: jz.spec.desired,
                    template: jz.spec.template.map(|t| m::PodTemplate {
                        labels: kvs_in(t.labels),
                        annotations: kvs_in(t.annotations),
                        spec_json: t.spec_json,
                    }),
                },
                status: jz.status.map(status_in),
            },
            pods: input
                .pods
                .into_iter()
                .map(|p| m::Pod {
                    metadata: meta_in(p.metadata),
                    phase: phase_in(p.phase),
                    ready: p.ready,
                })
                .collect(),
            now: ts_in(input.now),
        })
    }

    /// The wire form of an output.
    pub fn encode_output(out: &m::ReconcileOutput) -> raw::ReconcileOutput {
        raw::ReconcileOutput {
            create_pods: out
                .create_pods
                .iter()
                .map(|c| raw::PodCreate {
                    name: c.name.clone(),
                    generate_name: c.generate_name.clone(),
                    labels: kvs_out(&c.labels),
                    annotations: kvs_out(&c.annotations),
                    spec_json: c.spec_json.clone(),
                })
                .collect(),
            delete_pods: out.delete_pods.clone(),
            status: out.status.as_ref().map(status_out),
            requeue_after_ms: out.requeue_after_ms,
            events: out
                .events
                .iter()
                .map(|e| raw::Event {
                    event_type: event_type_out(e.event_type),
                    reason: e.reason.clone(),
                    message: e.message.clone(),
                })
                .collect(),
        }
    }

    /// The wire form of an input (for tests).
    pub fn encode_input(input: &m::ReconcileInput) -> raw::ReconcileInput {
        let jz = &input.jinghzhu;
        raw::ReconcileInput {
            jinghzhu: raw::Jinghzhu {
                metadata: meta_out(&jz.metadata),
                spec: raw::JinghzhuSpec {
                    desired: jz.spec.desired,
                    template: jz.spec.template.as_ref().map(|t| raw::PodTemplate {
                        labels: kvs_out(&t.labels),
                        annotations: kvs_out(&t.annotations),
                        spec_json: t.spec_json.clone(),
                    }),
                },
                status: jz.status.as_ref().map(status_out),
            },
            pods: input
                .pods
                .iter()
                .map(|p| raw::Pod {
                    metadata: meta_out(&p.metadata),
                    phase: phase_out(p.phase),
                    ready: p.ready,
                })
                .collect(),
            now: ts_out(input.now),
        }
    }

    /// The SDK's records of a wire output (for tests).
    pub fn decode_output(out: &raw::ReconcileOutput) -> Result<m::ReconcileOutput, String> {
        let out = out.clone();
        Ok(m::ReconcileOutput {
            create_pods: out
                .create_pods
                .into_iter()
                .map(|c| m::PodCreate {
                    name: c.name,
                    generate_name: c.generate_name,
                    labels: kvs_in(c.labels),
                    annotations: kvs_in(c.annotations),
                    spec_json: c.spec_json,
                })
                .collect(),
            delete_pods: out.delete_pods,
            status: out.status.map(status_in),
            requeue_after_ms: out.requeue_after_ms,
            events: out
                .events
                .into_iter()
                .map(|e| m::Event {
                    event_type: event_type_in(e.event_type),
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{input, jinghzhu, pod};
    use crate::types::{KeyValue, PodCreate, PodPhase};

    #[test]
    fn inputs_and_outputs_survive_the_wire() {
        let model = input(
            jinghzhu("web", "shop", 3)
                .label("app", "web")
                .annotation("note", "ü and 日本"),
        )
        .pod(pod("web-b", PodPhase::Running).created_at(1_000))
        .pod(pod("web-a", PodPhase::Pending).ready(false))
        .pod(pod("web-c", PodPhase::Running).terminating())
        .build();
        let wire = encode_input(&model);
        assert_eq!(decode_input(wire).expect("decodes"), model);

        let out = m::ReconcileOutput {
            create_pods: vec![
                PodCreate {
                    generate_name: Some("web-".into()),
                    labels: vec![KeyValue::new("app", "web")],
                    ..PodCreate::default()
                };
                3
            ],
            delete_pods: vec!["web-c".into()],
            status: Some(m::JinghzhuStatus {
                current: 2,
                pod_list: vec!["web-a".into(), "web-b".into()],
                state: "Scaling".into(),
                message: "2/3".into(),
                observed_generation: Some(1),
            }),
            requeue_after_ms: Some(10),
            events: vec![m::Event::normal("ScalingUp", "Creating 1 pod(s)")],
        };
        assert_eq!(decode_output(&encode_output(&out)).expect("decodes"), out);
    }

    #[cfg(not(feature = "contract-0-1"))]
    #[test]
    fn each_string_crosses_once() {
        let model = input(jinghzhu("web", "shop", 3))
            .pods((0..10).map(|i| pod(&format!("web-{i}"), PodPhase::Running)))
            .build();
        let wire = encode_input(&model);
        // Namespace, owner api-version/kind/name/uid... are shared.
        let distinct = wire.strings.ends.len();
        assert!(distinct < 10 * 4, "{distinct} strings");
        let out = m::ReconcileOutput {
            create_pods: vec![PodCreate::with_generate_name("web-"); 100],
            ..m::ReconcileOutput::default()
        };
        assert_eq!(
            encode_output(&out).strings.ends.len(),
            2,
            "\"\" and \"web-\""
        );
    }

    #[cfg(not(feature = "contract-0-1"))]
    #[test]
    fn a_broken_input_is_a_fatal_error_not_a_panic() {
        let model = input(jinghzhu("web", "shop", 1)).build();
        let mut wire = encode_input(&model);
        wire.jinghzhu.metadata.name = 999;
        assert!(decode_input(wire.clone()).is_err());
        wire.jinghzhu.metadata.name = 0;
        wire.jinghzhu.metadata.labels.len = 50;
        assert!(decode_input(wire).is_err());
    }
}
