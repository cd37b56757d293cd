//! `wasm-operator record`: fixture cases from a live cluster. For each
//! chosen Jinghzhu it writes `<out>/<namespace>_<name>/` with `input.yaml`
//! (the Jinghzhu and the Pods it owns, as the host's cache holds them:
//! only Pods with the host's `managed-by` label, controlled by the
//! Jinghzhu's uid, in its namespace, `managedFields` stripped) and `now`
//! (the time of the recording). With `--plugin` it also writes
//! `expected.yaml` from that plugin, as `reconcile --fixtures --bless`
//! would, so the case is usable at once. (With `--controller`, a declared
//! controller's parents are recorded instead: `any_kind::record`, which
//! shares [`stage_case`] and [`connect`].)
//!
//! Jinghzhus are read one object at a time ([`Incoming`]): one the host
//! cannot read is skipped with a warning when recording a list, and is an
//! error when named.
//!
//! Nothing is written unless every chosen object was found, and no case
//! directory is replaced without `--overwrite`; each case is written to a
//! temporary directory and renamed into place.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};

use super::fixtures::{self, Mode};
use crate::crd::Jinghzhu;
use crate::crd::incoming::Incoming;
use crate::ownership::{MANAGED_BY_SELECTOR, owned_pods};
use crate::runtime::{Runtime, RuntimeArgs};

/// Options of `wasm-operator record`.
#[derive(Debug, Clone, clap::Args)]
#[command(group = clap::ArgGroup::new("which").required(true).multiple(false).args(["names", "all", "selector"]))]
pub struct RecordArgs {
    /// The Jinghzhus (with --controller: the parents) to record, by name (in --namespace).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Their namespace (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n', conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Record every Jinghzhu of the namespace.
    #[arg(long)]
    pub all: bool,
    /// Record the Jinghzhus matching this label selector (e.g. `tier=web`).
    #[arg(long, short = 'l', value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// With --all or --selector: look in every namespace.
    #[arg(long, short = 'A', conflicts_with = "names")]
    pub all_namespaces: bool,
    /// The fixtures directory to write the cases into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Also run this plugin on each case and write its proposal to expected.yaml
    /// (with the idempotence check of `reconcile --fixtures`).
    #[arg(long, value_name = "WASM")]
    pub plugin: Option<PathBuf>,
    /// Record the parents of this declared controller (a PluginController
    /// file) instead of Jinghzhus: each with its children and observed
    /// objects, for a contract 0.3 plugin (docs/writing-controllers.md).
    #[arg(long, value_name = "FILE")]
    pub controller: Option<PathBuf>,
    /// With --controller: a sensitive child kind the admin allows
    /// (`Kind.group`, or `Kind` for the core group), as `run` takes it.
    #[arg(long, value_name = "KIND", requires = "controller")]
    pub allow_child_kind: Vec<String>,
    /// Replace case directories that already exist.
    #[arg(long)]
    pub overwrite: bool,
    /// The kubeconfig to use (default: as `run` finds one: KUBECONFIG,
    /// ~/.kube/config, in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Plugin limits and the precompiled cache (with --plugin).
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// One object as the host would see it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The Jinghzhu, `managedFields` stripped.
    pub jinghzhu: Jinghzhu,
    /// Its owned Pods (see the module docs), sorted by name.
    pub pods: Vec<Pod>,
}

impl Snapshot {
    /// The case directory's name: `<namespace>_<name>` (`_` appears in
    /// neither, so names never collide).
    pub fn case_name(&self) -> String {
        format!(
            "{}_{}",
            self.jinghzhu.namespace().unwrap_or_default(),
            self.jinghzhu.name_any()
        )
    }

    /// The case's `input.yaml`: a comment, then the Jinghzhu and its Pods
    /// as YAML documents.
    pub fn input_yaml(&self, now: &str) -> Result<String> {
        let mut out = format!(
            "# Recorded by `wasm-operator record` at {now}: the Jinghzhu and the {} Pod(s)\n\
             # the host's cache holds for it (managedFields stripped).\n",
            self.pods.len()
        );
        out.push_str(&serde_yaml::to_string(&self.jinghzhu)?);
        for pod in &self.pods {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(pod)?);
        }
        Ok(out)
    }
}

/// Runs `wasm-operator record` for Jinghzhus (see [`super::record_command`]).
pub fn run(args: RecordArgs) -> Result<ExitCode> {
    // Load the plugin first: a broken plugin fails before anything is fetched.
    let plugin = match &args.plugin {
        Some(path) => {
            let runtime = Runtime::new(args.runtime.config())?;
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Some(runtime.load(&bytes, &path.display().to_string())?)
        }
        None => None,
    };
    let snapshots = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = connect(args.kubeconfig.as_deref()).await?;
            crate::run::check_crd(&client).await?;
            fetch(&client, &args).await
        })?;

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let existing: Vec<String> = snapshots
        .iter()
        .map(Snapshot::case_name)
        .filter(|name| args.out.join(name).exists())
        .collect();
    if !existing.is_empty() && !args.overwrite {
        bail!(
            "these cases already exist in {}: {} (pass --overwrite to replace them; nothing was written)",
            args.out.display(),
            existing.join(", ")
        );
    }

    let now = recording_time();
    let mut failed = 0;
    for snapshot in &snapshots {
        let case = snapshot.case_name();
        let target = args.out.join(&case);
        let check = write_case(&args.out, &target, snapshot, &now, plugin.as_deref())
            .with_context(|| format!("writing the case {}", target.display()))?;
        let pods = snapshot.pods.len();
        match check {
            None => println!("recorded {case} ({pods} pods)"),
            Some(Ok(())) => println!(
                "recorded {case} ({pods} pods); expected.yaml: {}",
                summary(&target.join("expected.yaml"))
            ),
            Some(Err(why)) => {
                failed += 1;
                println!("recorded {case} ({pods} pods); the plugin's check FAILED:\n{why}\n");
            }
        }
    }
    println!(
        "{} case(s) recorded in {}{}",
        snapshots.len(),
        args.out.display(),
        match &plugin {
            Some(p) => format!(" with expected.yaml from {}; {failed} failed", p.describe()),
            None => String::new(),
        }
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Now, to the second, as a case's `now` file holds it.
pub fn recording_time() -> String {
    Timestamp::try_from(SystemTime::now())
        .ok()
        .and_then(|t| Timestamp::from_second(t.as_second()).ok())
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// A client from `kubeconfig`, or found as `run` finds one; checked to
/// reach the API server.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<Client> {
    let Some(path) = kubeconfig else {
        return crate::run::connect().await;
    };
    let file = Kubeconfig::read_from(path)
        .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("the kubeconfig {} is not usable", path.display()))?;
    let server = config.cluster_url.to_string();
    let client = crate::kube_api::client::build(config)?;
    client
        .apiserver_version()
        .await
        .map_err(|err| anyhow!("cannot reach the API server at {server}: {err}"))?;
    Ok(client)
}

/// The chosen Jinghzhus and their Pods.
pub async fn fetch(client: &Client, args: &RecordArgs) -> Result<Vec<Snapshot>> {
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let all_namespaces = args.all_namespaces && args.names.is_empty();
    let (jinghzhus, pods): (Api<Incoming>, Api<Pod>) = if all_namespaces {
        (Api::all(client.clone()), Api::all(client.clone()))
    } else {
        (
            Api::namespaced(client.clone(), &namespace),
            Api::namespaced(client.clone(), &namespace),
        )
    };
    let mut chosen = Vec::new();
    if args.names.is_empty() {
        let mut params = ListParams::default();
        if let Some(selector) = &args.selector {
            params = params.labels(selector);
        }
        for item in jinghzhus
            .list(&params)
            .await
            .context("listing Jinghzhus")?
            .items
        {
            match item.into_result() {
                Ok(jz) => chosen.push(jz),
                Err(unreadable) => eprintln!(
                    "skipping {}/{}: {}",
                    unreadable.metadata.namespace.as_deref().unwrap_or_default(),
                    unreadable.metadata.name.as_deref().unwrap_or_default(),
                    unreadable.note()
                ),
            }
        }
        if chosen.is_empty() {
            bail!(
                "no Jinghzhu matched{} in {} (nothing was written)",
                args.selector
                    .as_deref()
                    .map(|s| format!(" the selector `{s}`"))
                    .unwrap_or_default(),
                if all_namespaces {
                    "any namespace".to_string()
                } else {
                    format!("namespace {namespace}")
                }
            );
        }
    } else {
        let mut missing = Vec::new();
        for name in &args.names {
            match jinghzhus
                .get_opt(name)
                .await
                .with_context(|| format!("reading Jinghzhu {namespace}/{name}"))?
            {
                Some(item) => chosen.push(item.into_result().map_err(|unreadable| {
                    anyhow!("Jinghzhu {namespace}/{name}: {}", unreadable.note())
                })?),
                None => missing.push(name.as_str()),
            }
        }
        if !missing.is_empty() {
            bail!(
                "no Jinghzhu named {} in namespace {namespace} (`kubectl get jinghzhus -n {namespace}` lists them; nothing was written)",
                missing.join(", ")
            );
        }
    }
    // The host watches only its own Pods (by label); the plugin is shown
    // those controlled by the Jinghzhu's uid.
    let mut ours = pods
        .list(&ListParams::default().labels(MANAGED_BY_SELECTOR))
        .await
        .context("listing Pods")?
        .items;
    for pod in &mut ours {
        pod.metadata.managed_fields = None;
    }
    chosen.sort_by_key(|jz| (jz.namespace(), jz.name_any()));
    Ok(chosen
        .into_iter()
        .map(|mut jinghzhu| {
            jinghzhu.metadata.managed_fields = None;
            let pods = owned_pods(&ours, &jinghzhu);
            Snapshot { jinghzhu, pods }
        })
        .collect())
}

/// Writes one case (via a temporary directory in `out`) and, with a
/// plugin, blesses it; returns the plugin's check, if one ran.
fn write_case(
    out: &Path,
    target: &Path,
    snapshot: &Snapshot,
    now: &str,
    plugin: Option<&crate::runtime::LoadedPlugin>,
) -> Result<Option<Result<(), String>>> {
    stage_case(out, target, &snapshot.input_yaml(now)?, now, |staged| {
        plugin.map(
            |plugin| match fixtures::run_case(plugin, staged, Mode::Bless).failure {
                None => Ok(()),
                Some(why) => Err(why),
            },
        )
    })
}

/// Writes a case's `input.yaml` and `now` into a temporary directory in
/// `out`, runs `check` on it (which may write `expected.yaml`), then moves
/// it to `target`, replacing what was there; returns what `check` said.
pub fn stage_case(
    out: &Path,
    target: &Path,
    input_yaml: &str,
    now: &str,
    check: impl FnOnce(&Path) -> Option<Result<(), String>>,
) -> Result<Option<Result<(), String>>> {
    let staging = tempfile::Builder::new()
        .prefix(".record-")
        .tempdir_in(out)
        .with_context(|| format!("creating a temporary directory in {}", out.display()))?;
    std::fs::write(staging.path().join("input.yaml"), input_yaml)?;
    std::fs::write(staging.path().join("now"), format!("{now}\n"))?;
    let check = check(staging.path());
    if target.exists() {
        std::fs::remove_dir_all(target)
            .with_context(|| format!("replacing {}", target.display()))?;
    }
    let staged = staging.keep();
    if let Err(err) = std::fs::rename(&staged, target) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(err).context("moving the case into place");
    }
    Ok(check)
}

/// "proposes nothing" or what the blessed proposal holds.
fn summary(expected: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(expected) else {
        return "missing".to_string();
    };
    match serde_yaml::from_str::<crate::actions::ProposedActions>(&text) {
        Ok(actions) if actions.is_empty() => "proposes nothing".to_string(),
        Ok(actions) => {
            let mut parts = Vec::new();
            if !actions.create_pods.is_empty() {
                parts.push(format!("{} create(s)", actions.create_pods.len()));
            }
            if !actions.delete_pods.is_empty() {
                parts.push(format!("{} delete(s)", actions.delete_pods.len()));
            }
            if actions.status.is_some() {
                parts.push("a status write".to_string());
            }
            if actions.requeue_after.is_some() {
                parts.push("a requeue".to_string());
            }
            if !actions.events.is_empty() {
                parts.push(format!("{} event(s)", actions.events.len()));
            }
            format!("proposes {}", parts.join(", "))
        }
        Err(err) => format!("unreadable ({err})"),
    }
}
