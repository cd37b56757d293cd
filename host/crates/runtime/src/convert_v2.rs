//! Contract 0.2 records (`wit/0.2/operator.wit`): building the input from
//! Kubernetes objects (every string interned once into one table, labels
//! and owners in shared flat lists), and turning the output into the host's
//! own form of an output (the 0.1 records, which `apply::validate` checks),
//! refusing ids and spans that point outside their tables and bounding what
//! the expansion may cost. Also the 0.1 ⇄ 0.2 input conversions, so any
//! input can be given to a plugin of either version.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rustc_hash::FxHashMap;

use super::bindings::{self as wit, v2};
use super::convert;
use crate::crd::{Jinghzhu, JinghzhuStatus};

/// Interns strings into a [`v2::StringTable`] and collects the shared
/// `pairs` and `owners` lists while the records are built.
struct Builder<'a> {
    bytes: Vec<u8>,
    ends: Vec<u32>,
    seen: FxHashMap<&'a str, u32>,
    pairs: Vec<v2::KeyValue>,
    owners: Vec<v2::OwnerReference>,
}

/// An offset or count as the WIT's `u32` (inputs are far below 4 GiB: the
/// host builds them from its cache, and the guest's memory cap is smaller).
fn u32_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl<'a> Builder<'a> {
    fn new(pods: usize) -> Self {
        // About 12 strings, 3 pairs and one owner per pod.
        let mut ends = Vec::with_capacity(16 + pods * 12);
        ends.push(0); // id 0: the empty string
        Builder {
            bytes: Vec::with_capacity(256 + pods * 160),
            ends,
            seen: FxHashMap::with_capacity_and_hasher(16 + pods * 12, Default::default()),
            pairs: Vec::with_capacity(4 + pods * 3),
            owners: Vec::with_capacity(1 + pods),
        }
    }

    /// The id of `s`, stored once.
    fn id(&mut self, s: &'a str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        if let Some(&id) = self.seen.get(s) {
            return id;
        }
        let id = self.push(s);
        self.seen.insert(s, id);
        id
    }

    /// Appends `s` without looking for an earlier copy (for text built on
    /// the spot, such as the template's spec JSON).
    fn push(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        self.bytes.extend_from_slice(s.as_bytes());
        let id = u32_of(self.ends.len());
        self.ends.push(u32_of(self.bytes.len()));
        id
    }

    fn opt(&mut self, s: &'a Option<String>) -> u32 {
        s.as_deref().map_or(0, |s| self.id(s))
    }

    /// A string map's entries (sorted, as a `BTreeMap` iterates) as a span
    /// of `pairs`.
    fn map(&mut self, map: &'a Option<BTreeMap<String, String>>) -> v2::Span {
        let start = u32_of(self.pairs.len());
        for (key, value) in map.iter().flatten() {
            let pair = v2::KeyValue {
                key: self.id(key),
                value: self.id(value),
            };
            self.pairs.push(pair);
        }
        self.span_from(start, self.pairs.len())
    }

    fn kvs(&mut self, kvs: &'a [wit::KeyValue]) -> v2::Span {
        let start = u32_of(self.pairs.len());
        for kv in kvs {
            let pair = v2::KeyValue {
                key: self.id(&kv.key),
                value: self.id(&kv.value),
            };
            self.pairs.push(pair);
        }
        self.span_from(start, self.pairs.len())
    }

    fn span_from(&self, start: u32, end: usize) -> v2::Span {
        v2::Span {
            start,
            len: u32_of(end).saturating_sub(start),
        }
    }

    fn meta(&mut self, m: &'a ObjectMeta) -> v2::ObjectMeta {
        let name = self.opt(&m.name);
        let namespace = self.opt(&m.namespace);
        let uid = self.opt(&m.uid);
        let resource_version = self.opt(&m.resource_version);
        let labels = self.map(&m.labels);
        let annotations = self.map(&m.annotations);
        let start = u32_of(self.owners.len());
        for o in m.owner_references.iter().flatten() {
            let owner = v2::OwnerReference {
                api_version: self.id(&o.api_version),
                kind: self.id(&o.kind),
                name: self.id(&o.name),
                uid: self.id(&o.uid),
                controller: o.controller.unwrap_or(false),
            };
            self.owners.push(owner);
        }
        v2::ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation: m.generation.unwrap_or_default(),
            labels,
            annotations,
            creation_timestamp: m.creation_timestamp.as_ref().map(|t| ts(convert::time(t))),
            deletion_timestamp: m.deletion_timestamp.as_ref().map(|t| ts(convert::time(t))),
            owner_references: self.span_from(start, self.owners.len()),
        }
    }

    fn meta_v1(&mut self, m: &'a wit::ObjectMeta) -> v2::ObjectMeta {
        let name = self.id(&m.name);
        let namespace = self.id(&m.namespace);
        let uid = self.id(&m.uid);
        let resource_version = self.id(&m.resource_version);
        let labels = self.kvs(&m.labels);
        let annotations = self.kvs(&m.annotations);
        let start = u32_of(self.owners.len());
        for o in &m.owner_references {
            let owner = v2::OwnerReference {
                api_version: self.id(&o.api_version),
                kind: self.id(&o.kind),
                name: self.id(&o.name),
                uid: self.id(&o.uid),
                controller: o.controller,
            };
            self.owners.push(owner);
        }
        v2::ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation: m.generation,
            labels,
            annotations,
            creation_timestamp: m.creation_timestamp.map(ts),
            deletion_timestamp: m.deletion_timestamp.map(ts),
            owner_references: self.span_from(start, self.owners.len()),
        }
    }

    fn status(&mut self, s: &'a JinghzhuStatus) -> v2::JinghzhuStatus {
        v2::JinghzhuStatus {
            current: s.current,
            pod_list: s.pod_list.iter().map(|name| self.id(name)).collect(),
            state: self.id(&s.state),
            message: self.id(&s.message),
            observed_generation: s.observed_generation,
        }
    }

    fn status_v1(&mut self, s: &'a wit::JinghzhuStatus) -> v2::JinghzhuStatus {
        v2::JinghzhuStatus {
            current: s.current,
            pod_list: s.pod_list.iter().map(|name| self.id(name)).collect(),
            state: self.id(&s.state),
            message: self.id(&s.message),
            observed_generation: s.observed_generation,
        }
    }

    fn finish(
        self,
        jinghzhu: v2::Jinghzhu,
        pods: Vec<v2::Pod>,
        now: wit::Timestamp,
    ) -> v2::ReconcileInput {
        v2::ReconcileInput {
            strings: v2::StringTable {
                bytes: self.bytes,
                ends: self.ends,
            },
            pairs: self.pairs,
            owners: self.owners,
            jinghzhu,
            pods,
            now: ts(now),
        }
    }
}

fn ts(t: wit::Timestamp) -> v2::Timestamp {
    v2::Timestamp {
        seconds: t.seconds,
        nanoseconds: t.nanoseconds,
    }
}

fn ts_v1(t: v2::Timestamp) -> wit::Timestamp {
    wit::Timestamp {
        seconds: t.seconds,
        nanoseconds: t.nanoseconds,
    }
}

fn phase(p: wit::PodPhase) -> v2::PodPhase {
    match p {
        wit::PodPhase::Pending => v2::PodPhase::Pending,
        wit::PodPhase::Running => v2::PodPhase::Running,
        wit::PodPhase::Succeeded => v2::PodPhase::Succeeded,
        wit::PodPhase::Failed => v2::PodPhase::Failed,
        wit::PodPhase::Unknown => v2::PodPhase::Unknown,
    }
}

fn phase_v1(p: v2::PodPhase) -> wit::PodPhase {
    match p {
        v2::PodPhase::Pending => wit::PodPhase::Pending,
        v2::PodPhase::Running => wit::PodPhase::Running,
        v2::PodPhase::Succeeded => wit::PodPhase::Succeeded,
        v2::PodPhase::Failed => wit::PodPhase::Failed,
        v2::PodPhase::Unknown => wit::PodPhase::Unknown,
    }
}

/// The 0.2 input for `jz` and its owned `pods` at `now`: the same content
/// as [`convert::input`] (pods sorted by name, maps sorted by key), built
/// straight from the Kubernetes objects.
pub fn input(jz: &Jinghzhu, pods: &[Pod], now: std::time::SystemTime) -> v2::ReconcileInput {
    fn name<'p>(p: &&'p Pod) -> &'p str {
        p.metadata.name.as_deref().unwrap_or_default()
    }
    let mut sorted: Vec<&Pod> = pods.iter().collect();
    if !sorted.is_sorted_by(|a, b| name(a) <= name(b)) {
        sorted.sort_by(|a, b| name(a).cmp(name(b)));
    }
    let mut b = Builder::new(pods.len());
    let metadata = b.meta(&jz.metadata);
    let template = jz.spec.template.as_ref().map(|t| {
        let labels = b.map(t.metadata.as_ref().map_or(&None, |m| &m.labels));
        let annotations = b.map(t.metadata.as_ref().map_or(&None, |m| &m.annotations));
        let spec = t
            .spec
            .as_ref()
            .and_then(|s| serde_json::to_string(s).ok())
            .unwrap_or_default();
        v2::PodTemplate {
            labels,
            annotations,
            spec_json: b.push(&spec),
        }
    });
    let status = jz.status.as_ref().map(|s| b.status(s));
    let pods = sorted
        .into_iter()
        .map(|pod| {
            let (phase, ready) = convert::phase_and_ready(pod);
            v2::Pod {
                metadata: b.meta(&pod.metadata),
                phase: self::phase(phase),
                ready,
            }
        })
        .collect();
    let jinghzhu = v2::Jinghzhu {
        metadata,
        spec: v2::JinghzhuSpec {
            desired: jz.spec.desired,
            template,
        },
        status,
    };
    b.finish(jinghzhu, pods, convert::timestamp(now))
}

/// The 0.2 form of a 0.1 input (for tools and tests that hold 0.1 records).
pub fn input_from_v1(input: &wit::ReconcileInput) -> v2::ReconcileInput {
    let mut b = Builder::new(input.pods.len());
    let jz = &input.jinghzhu;
    let metadata = b.meta_v1(&jz.metadata);
    let template = jz.spec.template.as_ref().map(|t| v2::PodTemplate {
        labels: b.kvs(&t.labels),
        annotations: b.kvs(&t.annotations),
        spec_json: b.push(&t.spec_json),
    });
    let status = jz.status.as_ref().map(|s| b.status_v1(s));
    let pods = input
        .pods
        .iter()
        .map(|pod| v2::Pod {
            metadata: b.meta_v1(&pod.metadata),
            phase: phase(pod.phase),
            ready: pod.ready,
        })
        .collect();
    let jinghzhu = v2::Jinghzhu {
        metadata,
        spec: v2::JinghzhuSpec {
            desired: jz.spec.desired,
            template,
        },
        status,
    };
    b.finish(jinghzhu, pods, input.now)
}

/// A 0.2 output (or input) that breaks the contract's rules, or whose
/// expansion into the host's records would pass the output limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    /// An id, span or table that does not fit; the message says which.
    Broken(String),
    /// Expanded, the output would be larger than this many bytes.
    TooLarge(usize),
}

/// The strings of a table, checked: ends in order and within the bytes,
/// each string valid UTF-8.
pub struct Strings<'t> {
    strings: Vec<&'t str>,
}

impl<'t> Strings<'t> {
    /// Checks and splits `table`.
    pub fn new(table: &'t v2::StringTable) -> Result<Self, Malformed> {
        let mut strings = Vec::with_capacity(table.ends.len());
        let mut start = 0usize;
        for (i, &end) in table.ends.iter().enumerate() {
            let end = end as usize;
            let bytes = table.bytes.get(start..end).ok_or_else(|| {
                Malformed::Broken(format!(
                    "string table: string {i} ends at byte {end}, before its start {start} or past the {} bytes",
                    table.bytes.len()
                ))
            })?;
            let text = std::str::from_utf8(bytes).map_err(|err| {
                Malformed::Broken(format!("string table: string {i} is not UTF-8 ({err})"))
            })?;
            strings.push(text);
            start = end;
        }
        Ok(Strings { strings })
    }

    /// String `id`.
    pub fn get(&self, id: u32) -> Result<&'t str, Malformed> {
        self.strings.get(id as usize).copied().ok_or_else(|| {
            Malformed::Broken(format!(
                "string id {id} is past the end of the string table ({} strings)",
                self.strings.len()
            ))
        })
    }

    /// How many strings the table holds.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// The entries of `list` a span covers.
fn spanned<'l, T>(list: &'l [T], span: v2::Span, what: &str) -> Result<&'l [T], Malformed> {
    let start = span.start as usize;
    start
        .checked_add(span.len as usize)
        .and_then(|end| list.get(start..end))
        .ok_or_else(|| {
            Malformed::Broken(format!(
                "{what} span {}+{} is outside its list of {} entries",
                span.start,
                span.len,
                list.len()
            ))
        })
}

/// Copies strings out of a checked table while counting the bytes the
/// expansion costs, so ids repeated many times cannot turn a small output
/// into a huge one: the budget is the limit a 0.1 plugin's output has.
struct Expander<'t> {
    strings: Strings<'t>,
    used: usize,
    limit: usize,
}

/// What one record or list entry is charged, on top of its strings.
const ENTRY_BYTES: usize = 8;

impl Expander<'_> {
    fn charge(&mut self, bytes: usize) -> Result<(), Malformed> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            Err(Malformed::TooLarge(self.limit))
        } else {
            Ok(())
        }
    }

    fn string(&mut self, id: u32) -> Result<String, Malformed> {
        let text = self.strings.get(id)?;
        self.charge(text.len() + ENTRY_BYTES)?;
        Ok(text.to_string())
    }

    fn pairs(
        &mut self,
        pairs: &[v2::KeyValue],
        span: v2::Span,
    ) -> Result<Vec<wit::KeyValue>, Malformed> {
        spanned(pairs, span, "labels/annotations")?
            .iter()
            .map(|kv| {
                Ok(wit::KeyValue {
                    key: self.string(kv.key)?,
                    value: self.string(kv.value)?,
                })
            })
            .collect()
    }

    fn status(&mut self, s: &v2::JinghzhuStatus) -> Result<wit::JinghzhuStatus, Malformed> {
        Ok(wit::JinghzhuStatus {
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

/// The host's form of a 0.2 output: every id resolved in the output's own
/// table, every span checked, and at most `limit` bytes of expanded text.
pub fn output(out: &v2::ReconcileOutput, limit: usize) -> Result<wit::ReconcileOutput, Malformed> {
    let mut x = Expander {
        strings: Strings::new(&out.strings)?,
        used: 0,
        limit,
    };
    let mut create_pods = Vec::with_capacity(out.create_pods.len().min(limit / ENTRY_BYTES));
    for c in &out.create_pods {
        x.charge(ENTRY_BYTES)?;
        create_pods.push(wit::PodCreate {
            name: c.name.map(|id| x.string(id)).transpose()?,
            generate_name: c.generate_name.map(|id| x.string(id)).transpose()?,
            labels: x.pairs(&out.pairs, c.labels)?,
            annotations: x.pairs(&out.pairs, c.annotations)?,
            spec_json: x.string(c.spec_json)?,
        });
    }
    let delete_pods = out
        .delete_pods
        .iter()
        .map(|&id| x.string(id))
        .collect::<Result<_, _>>()?;
    let status = out.status.as_ref().map(|s| x.status(s)).transpose()?;
    let events = out
        .events
        .iter()
        .map(|e| {
            Ok(wit::Event {
                event_type: match e.event_type {
                    v2::EventType::Normal => wit::EventType::Normal,
                    v2::EventType::Warning => wit::EventType::Warning,
                },
                reason: x.string(e.reason)?,
                message: x.string(e.message)?,
            })
        })
        .collect::<Result<_, Malformed>>()?;
    Ok(wit::ReconcileOutput {
        create_pods,
        delete_pods,
        status,
        requeue_after_ms: out.requeue_after_ms,
        events,
    })
}

/// The 0.1 form of a 0.2 input (the reverse of [`input_from_v1`]).
pub fn input_to_v1(input: &v2::ReconcileInput) -> Result<wit::ReconcileInput, Malformed> {
    let mut x = Expander {
        strings: Strings::new(&input.strings)?,
        used: 0,
        limit: usize::MAX,
    };
    let mut meta = |m: &v2::ObjectMeta| -> Result<wit::ObjectMeta, Malformed> {
        Ok(wit::ObjectMeta {
            name: x.string(m.name)?,
            namespace: x.string(m.namespace)?,
            uid: x.string(m.uid)?,
            resource_version: x.string(m.resource_version)?,
            generation: m.generation,
            labels: x.pairs(&input.pairs, m.labels)?,
            annotations: x.pairs(&input.pairs, m.annotations)?,
            creation_timestamp: m.creation_timestamp.map(ts_v1),
            deletion_timestamp: m.deletion_timestamp.map(ts_v1),
            owner_references: spanned(&input.owners, m.owner_references, "owner references")?
                .iter()
                .map(|o| {
                    Ok(wit::OwnerReference {
                        api_version: x.string(o.api_version)?,
                        kind: x.string(o.kind)?,
                        name: x.string(o.name)?,
                        uid: x.string(o.uid)?,
                        controller: o.controller,
                    })
                })
                .collect::<Result<_, Malformed>>()?,
        })
    };
    let jz = &input.jinghzhu;
    let metadata = meta(&jz.metadata)?;
    let pods = input
        .pods
        .iter()
        .map(|p| {
            Ok(wit::Pod {
                metadata: meta(&p.metadata)?,
                phase: phase_v1(p.phase),
                ready: p.ready,
            })
        })
        .collect::<Result<_, Malformed>>()?;
    let template = jz
        .spec
        .template
        .as_ref()
        .map(|t| {
            Ok(wit::PodTemplate {
                labels: x.pairs(&input.pairs, t.labels)?,
                annotations: x.pairs(&input.pairs, t.annotations)?,
                spec_json: x.string(t.spec_json)?,
            })
        })
        .transpose()?;
    let status = jz.status.as_ref().map(|s| x.status(s)).transpose()?;
    Ok(wit::ReconcileInput {
        jinghzhu: wit::Jinghzhu {
            metadata,
            spec: wit::JinghzhuSpec {
                desired: jz.spec.desired,
                template,
            },
            status,
        },
        pods,
        now: ts_v1(input.now),
    })
}

/// The template's spec JSON of a 0.2 input (what an empty `spec-json` in
/// a create stands for), if the template has one.
pub fn template_spec(input: &v2::ReconcileInput) -> Option<&str> {
    let template = input.jinghzhu.spec.template.as_ref()?;
    let id = template.spec_json as usize;
    let end = *input.strings.ends.get(id)? as usize;
    let start = match id {
        0 => 0,
        _ => *input.strings.ends.get(id - 1)? as usize,
    };
    std::str::from_utf8(input.strings.bytes.get(start..end)?).ok()
}

/// The 0.1 plugin info of a 0.2 plugin.
pub fn info(info: v2::PluginInfo) -> wit::PluginInfo {
    wit::PluginInfo {
        name: info.name,
        version: info.version,
    }
}

/// The 0.2 form of a 0.1 output (for tests and tools that compare
/// plugins of both versions), strings interned in order of use.
pub fn output_from_v1(out: &wit::ReconcileOutput) -> v2::ReconcileOutput {
    let mut b = Builder::new(0);
    let create_pods = out
        .create_pods
        .iter()
        .map(|c| v2::PodCreate {
            name: c.name.as_deref().map(|s| b.id(s)),
            generate_name: c.generate_name.as_deref().map(|s| b.id(s)),
            labels: b.kvs(&c.labels),
            annotations: b.kvs(&c.annotations),
            spec_json: b.id(&c.spec_json),
        })
        .collect();
    let delete_pods = out.delete_pods.iter().map(|s| b.id(s)).collect();
    let status = out.status.as_ref().map(|s| b.status_v1(s));
    let events = out
        .events
        .iter()
        .map(|e| v2::Event {
            event_type: match e.event_type {
                wit::EventType::Normal => v2::EventType::Normal,
                wit::EventType::Warning => v2::EventType::Warning,
            },
            reason: b.id(&e.reason),
            message: b.id(&e.message),
        })
        .collect();
    v2::ReconcileOutput {
        strings: v2::StringTable {
            bytes: b.bytes,
            ends: b.ends,
        },
        pairs: b.pairs,
        create_pods,
        delete_pods,
        status,
        requeue_after_ms: out.requeue_after_ms,
        events,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use wasm_operator_testkit as testkit;

    use super::*;

    fn jinghzhu() -> Jinghzhu {
        testkit::jinghzhu("web")
            .desired(3)
            .template_json(serde_json::json!({
                "metadata": {"labels": {"app": "web", "tier": "front"}, "annotations": {"a": "ü"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }))
            .namespace("shop")
            .uid("uid-1")
            .generation(4)
            .labels(&[("b", "2"), ("a", "1")])
            .status(JinghzhuStatus {
                current: 2,
                pod_list: vec!["web-a".into(), "web-b".into()],
                state: "Scaling".into(),
                message: "2/3 pods".into(),
                observed_generation: Some(3),
                ..JinghzhuStatus::default()
            })
            .build()
    }

    fn pods() -> Vec<Pod> {
        let pod = |name: &str| {
            testkit::pod(name)
                .namespace("shop")
                .uid(&format!("uid-{name}"))
                .resource_version("17")
                .labels(&[("app", "web")])
                .controller("web", "uid-1")
        };
        vec![
            pod("web-c")
                .phase("Running")
                .ready(true)
                .deleted_at(1_767_225_000)
                .build(),
            pod("web-a").phase("Running").ready(true).build(),
            pod("web-b").ready(false).build(),
        ]
    }

    #[test]
    fn the_0_2_input_says_what_the_0_1_input_says() {
        let now = UNIX_EPOCH + Duration::new(1_767_225_600, 7);
        let (jz, pods) = (jinghzhu(), pods());
        let v1 = convert::input(&jz, &pods, now);
        let v2 = input(&jz, &pods, now);
        assert_eq!(input_to_v1(&v2).expect("well formed"), v1);
        assert_eq!(
            input_from_v1(&v1),
            v2,
            "both builders intern in the same order"
        );
        assert_eq!(
            template_spec(&v2),
            v1.jinghzhu
                .spec
                .template
                .as_ref()
                .map(|t| t.spec_json.as_str())
        );
    }

    #[test]
    fn strings_are_stored_once_and_id_0_is_empty() {
        let v2 = input(&jinghzhu(), &pods(), UNIX_EPOCH);
        let strings = Strings::new(&v2.strings).expect("table");
        assert_eq!(strings.get(0), Ok(""));
        let texts: Vec<&str> = (0..strings.len() as u32)
            .map(|i| strings.get(i).expect("id"))
            .collect();
        let mut unique = texts.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), texts.len(), "no string twice: {texts:?}");
        // The owner's four strings are shared by every pod.
        assert_eq!(v2.owners.len(), 3);
        assert!(v2.owners.windows(2).all(|w| w[0] == w[1]));
        // The whole input crosses in six lists, whatever the pod count.
        assert_eq!(v2.pods.len(), 3);
        assert_eq!(v2.pods[0].phase, v2::PodPhase::Running);
        assert!(v2.pods[2].metadata.deletion_timestamp.is_some());
    }

    #[test]
    fn outputs_round_trip_and_bad_ids_and_spans_are_refused() {
        let out = wit::ReconcileOutput {
            create_pods: vec![wit::PodCreate {
                name: Some("web-d".into()),
                generate_name: None,
                labels: vec![wit::KeyValue {
                    key: "app".into(),
                    value: "web".into(),
                }],
                annotations: vec![],
                spec_json: String::new(),
            }],
            delete_pods: vec!["web-c".into()],
            status: Some(wit::JinghzhuStatus {
                current: 2,
                pod_list: vec!["web-a".into(), "web-b".into()],
                state: "Scaling".into(),
                message: "ü".into(),
                observed_generation: Some(4),
            }),
            requeue_after_ms: Some(5),
            events: vec![wit::Event {
                event_type: wit::EventType::Warning,
                reason: "ScalingUp".into(),
                message: "web".into(),
            }],
        };
        let v2 = output_from_v1(&out);
        assert_eq!(output(&v2, 1 << 20), Ok(out));

        let mut bad = v2.clone();
        bad.delete_pods.push(999);
        assert!(
            matches!(output(&bad, 1 << 20), Err(Malformed::Broken(m)) if m.contains("string id 999"))
        );
        let mut bad = v2.clone();
        bad.create_pods[0].labels.len = 5;
        assert!(matches!(output(&bad, 1 << 20), Err(Malformed::Broken(m)) if m.contains("span")));
        let mut bad = v2.clone();
        bad.strings.ends.push(1 << 30);
        assert!(
            matches!(output(&bad, 1 << 20), Err(Malformed::Broken(m)) if m.contains("string table"))
        );
        let mut bad = v2.clone();
        bad.strings.bytes = vec![0xff; bad.strings.bytes.len()];
        assert!(matches!(output(&bad, 1 << 20), Err(Malformed::Broken(m)) if m.contains("UTF-8")));
    }

    #[test]
    fn repeated_ids_cannot_expand_past_the_output_limit() {
        let big = "x".repeat(64 * 1024);
        let mut v2 = output_from_v1(&wit::ReconcileOutput {
            create_pods: vec![],
            delete_pods: vec![big],
            status: None,
            requeue_after_ms: None,
            events: vec![],
        });
        // 10 000 references to one 64 KiB string: 640 MiB if expanded.
        v2.delete_pods = vec![1; 10_000];
        assert_eq!(output(&v2, 1 << 20), Err(Malformed::TooLarge(1 << 20)));
        v2.delete_pods.truncate(2);
        assert_eq!(output(&v2, 1 << 20).expect("small").delete_pods.len(), 2);
    }
}
