//! Golden fixtures: `<dir>/<case>/input.yaml` + `expected.yaml` (+ an
//! optional `now`). Each case is reconciled and compared structurally with
//! its expected proposal, then checked for idempotence: applying the
//! proposal as the API server would and reconciling again proposes no pod
//! creates or deletes, and a third round proposes nothing at all.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::input::{self, OfflineInput};
use crate::actions::ProposedActions;
use crate::ownership::{controller_reference, operator_labels};
use crate::runtime::{LoadedPlugin, convert};

/// The default `now` of a fixture.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// Outcome of one case.
#[derive(Debug)]
pub struct CaseResult {
    /// Case directory name.
    pub name: String,
    /// `None` if it passed, else why not.
    pub failure: Option<String>,
}

/// Runs every case under `dir`. With `bless`, rewrites `expected.yaml`
/// instead of comparing (idempotence is still checked).
pub fn run_all(plugin: &Arc<LoadedPlugin>, dir: &Path, bless: bool) -> Result<Vec<CaseResult>> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the fixtures directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("input.yaml").is_file())
        .collect();
    cases.sort();
    if cases.is_empty() {
        return Err(anyhow!(
            "no fixtures in {} (expected <case>/input.yaml and <case>/expected.yaml)",
            dir.display()
        ));
    }
    Ok(cases
        .iter()
        .map(|case| CaseResult {
            name: case
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            failure: run_case(plugin, case, bless)
                .err()
                .map(|e| format!("{e:#}")),
        })
        .collect())
}

fn run_case(plugin: &Arc<LoadedPlugin>, case: &Path, bless: bool) -> Result<()> {
    let input = input::read(&[case.join("input.yaml")])?;
    let now = match std::fs::read_to_string(case.join("now")) {
        Ok(text) => text.trim().to_string(),
        Err(_) => DEFAULT_NOW.to_string(),
    };
    let now = parse_time(&now)?;
    let actual = reconcile(plugin, &input, now)?;
    let expected_path = case.join("expected.yaml");
    if bless {
        std::fs::write(&expected_path, serde_yaml::to_string(&actual)?)?;
    } else {
        let text = std::fs::read_to_string(&expected_path).with_context(|| {
            format!(
                "reading {} (create it with --bless)",
                expected_path.display()
            )
        })?;
        let expected: ProposedActions = serde_yaml::from_str(&text)
            .with_context(|| format!("{} is not a proposal", expected_path.display()))?;
        if expected != actual {
            return Err(anyhow!(
                "the proposal differs from expected.yaml\n--- expected\n{}--- actual\n{}",
                serde_yaml::to_string(&expected)?,
                serde_yaml::to_string(&actual)?
            ));
        }
    }
    check_idempotence(plugin, input, actual, now)
}

/// Runs the plugin once on an offline input.
pub fn reconcile(
    plugin: &Arc<LoadedPlugin>,
    input: &OfflineInput,
    now: SystemTime,
) -> Result<ProposedActions> {
    let key = format!(
        "{}/{}",
        input.jinghzhu.namespace().unwrap_or_default(),
        input.jinghzhu.name_any()
    );
    let wit_input = convert::input(&input.jinghzhu, &input.pods, now);
    let output = plugin
        .call_reconcile(&wit_input, &key)
        .map_err(|e| anyhow!("the plugin {e}"))?;
    Ok(convert::output(output))
}

fn check_idempotence(
    plugin: &Arc<LoadedPlugin>,
    input: OfflineInput,
    first: ProposedActions,
    now: SystemTime,
) -> Result<()> {
    let applied = apply_offline(input, &first, 1);
    let second = reconcile(plugin, &applied, now)?;
    if !second.create_pods.is_empty() || !second.delete_pods.is_empty() {
        return Err(anyhow!(
            "not idempotent: after applying the proposal, reconciling again proposes {} creates and deletes {:?}",
            second.create_pods.len(),
            second.delete_pods
        ));
    }
    let applied = apply_offline(applied, &second, 2);
    let third = reconcile(plugin, &applied, now)?;
    if !third.is_empty() {
        return Err(anyhow!(
            "not idempotent: the third reconcile still proposes something:\n{}",
            serde_yaml::to_string(&third)?
        ));
    }
    Ok(())
}

/// What the API server would make of `input` after `actions`: created pods
/// get a deterministic generated name, are Pending and not ready; deleted
/// pods vanish; the status is replaced.
pub fn apply_offline(
    mut input: OfflineInput,
    actions: &ProposedActions,
    round: usize,
) -> OfflineInput {
    let namespace = input.jinghzhu.namespace();
    let owner = controller_reference(&input.jinghzhu);
    input
        .pods
        .retain(|p| !actions.delete_pods.contains(&p.name_any()));
    for (i, create) in actions.create_pods.iter().enumerate() {
        let name = create.name.clone().unwrap_or_else(|| {
            format!(
                "{}{}",
                create.generate_name.clone().unwrap_or_default(),
                suffix(round, i)
            )
        });
        let mut labels = create.labels.clone();
        labels.extend(operator_labels(&input.jinghzhu));
        input.pods.push(Pod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: namespace.clone(),
                uid: Some(format!("offline-uid-{round}-{i}")),
                labels: Some(labels),
                annotations: Some(create.annotations.clone()),
                owner_references: owner.clone().map(|o| vec![o]),
                creation_timestamp: None,
                ..ObjectMeta::default()
            },
            spec: serde_json::from_value::<PodSpec>(create.spec.clone()).ok(),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..PodStatus::default()
            }),
        });
    }
    if let Some(status) = &actions.status {
        input.jinghzhu.status = Some(status.clone());
    }
    input
}

/// A 5-character suffix like the API server's, deterministic per round and index.
fn suffix(round: usize, index: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = round * 7919 + index * 104_729 + 12_345;
    (0..5)
        .map(|_| {
            let c = ALPHABET[n % ALPHABET.len()] as char;
            n /= ALPHABET.len();
            n += 31;
            c
        })
        .collect()
}

/// Parses an RFC 3339 time.
pub fn parse_time(text: &str) -> Result<SystemTime> {
    let ts: k8s_openapi::jiff::Timestamp = text
        .parse()
        .with_context(|| format!("{text:?} is not an RFC 3339 time"))?;
    let secs = u64::try_from(ts.as_second()).map_err(|_| anyhow!("{text:?} is before 1970"))?;
    Ok(SystemTime::UNIX_EPOCH
        + Duration::from_secs(secs)
        + Duration::from_nanos(ts.subsec_nanosecond().max(0) as u64))
}
