//! `wasm-operator record --controller controller.yaml`: cases for a
//! contract 0.3 plugin from a live cluster. For each chosen parent of the
//! declared kind it writes `<out>/<namespace>_<name>/` with `input.yaml`
//! (the parent; the children of each declared kind carrying the host's
//! label `wasm-operator.io/controller=<name>` that the parent controls, as
//! the host's caches hold them; for each observed kind, metadata only, the
//! objects below those children through the declared chain, with the
//! chain's objects; `managedFields` stripped) and `now`. With `--plugin`
//! it also writes `expected.yaml`, as `reconcile --fixtures --bless`
//! would. Kinds are resolved through discovery, as `run` resolves them.
//!
//! The rules of `record` for Jinghzhus hold: nothing is written unless
//! every named parent was found, no case directory is replaced without
//! `--overwrite`, each case is staged and renamed into place.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use kube::api::{Api, ListParams};
use kube::core::{DynamicObject, TypeMeta};
use kube::{Client, ResourceExt};

use super::OfflineDeclaration;
use super::input::{self, State};
use crate::declared::checks::CONTROLLER_LABEL;
use crate::declared::kinds::{self, ResolvedKind};
use crate::offline::fixtures::Mode;
use crate::offline::record::{RecordArgs, connect, recording_time, stage_case};
use crate::runtime::{ContractVersion, Runtime};

/// Runs `wasm-operator record --controller FILE`.
pub fn run(args: &RecordArgs, controller: &Path) -> Result<ExitCode> {
    let declaration = super::read(controller, &args.allow_child_kind)?;
    let plugin = match &args.plugin {
        Some(path) => {
            let runtime = Runtime::new(args.runtime.config())?;
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let plugin = runtime.load(&bytes, &path.display().to_string())?;
            if plugin.contract() != ContractVersion::V0_3 {
                bail!(
                    "{} is a contract {} plugin; --controller records cases for a contract 0.3 plugin",
                    plugin.describe(),
                    plugin.contract()
                );
            }
            Some(plugin)
        }
        None => None,
    };
    let states = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = connect(args.kubeconfig.as_deref()).await?;
            fetch(&client, args, &declaration).await
        })?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let existing: Vec<String> = states
        .iter()
        .map(case_name)
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
    for state in &states {
        let case = case_name(state);
        let target = args.out.join(&case);
        let objects = state.read_objects(&declaration).len() - 1;
        let check = stage_case(
            &args.out,
            &target,
            &input_yaml(state, &declaration, &now)?,
            &now,
            |staged| {
                plugin.as_deref().map(|plugin| {
                    match super::cases::run_case(plugin, &declaration, staged, Mode::Bless).failure
                    {
                        None => Ok(()),
                        Some(why) => Err(why),
                    }
                })
            },
        )
        .with_context(|| format!("writing the case {}", target.display()))?;
        match check {
            None | Some(Ok(())) => println!("recorded {case} ({objects} objects)"),
            Some(Err(why)) => {
                failed += 1;
                println!(
                    "recorded {case} ({objects} objects); the plugin's check FAILED:\n{why}\n"
                );
            }
        }
    }
    println!(
        "{} case(s) recorded in {} for {}{}",
        states.len(),
        args.out.display(),
        declaration.describe(),
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

/// `<namespace>_<name>` of the parent.
fn case_name(state: &State) -> String {
    format!("{}_{}", state.namespace(), state.parent.name_any())
}

/// A comment, then every object the reconcile reads, as YAML documents.
fn input_yaml(state: &State, declaration: &OfflineDeclaration, now: &str) -> Result<String> {
    let objects = state.read_objects(declaration);
    let mut out = format!(
        "# Recorded by `wasm-operator record` at {now} for {}: the {} and the {} object(s)\n\
         # the host's caches hold for it (managedFields stripped; observed kinds metadata only).\n",
        declaration.describe(),
        declaration.parent.declared,
        objects.len() - 1
    );
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml::to_string(object)?);
    }
    Ok(out)
}

/// The chosen parents, each with the objects of its namespace that a
/// reconcile of it may read.
async fn fetch(
    client: &Client,
    args: &RecordArgs,
    declaration: &OfflineDeclaration,
) -> Result<Vec<State>> {
    let resolve = |kind: &ResolvedKind| {
        let kind = kind.declared.clone();
        async move {
            kinds::resolve(client, &kind)
                .await
                .map_err(|refusal| anyhow!("{refusal}"))
        }
    };
    let parent = resolve(&declaration.parent).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let all_namespaces = args.all_namespaces && args.names.is_empty();
    let parents = if all_namespaces {
        Api::<DynamicObject>::all_with(client.clone(), &parent.resource)
    } else {
        Api::namespaced_with(client.clone(), &namespace, &parent.resource)
    };
    let chosen = choose(&parents, args, &parent, &namespace).await?;
    let mut children = Vec::new();
    for (kind, ..) in &declaration.children {
        children.push(resolve(kind).await?);
    }
    let mut observed = Vec::new();
    for (kind, through) in &declaration.observed {
        for step in through.iter().chain([kind]) {
            observed.push(resolve(step).await?);
        }
    }
    let selector = format!("{CONTROLLER_LABEL}={}", declaration.name);
    let mut states = Vec::new();
    for parent_object in chosen {
        let namespace = parent_object.namespace().unwrap_or_default();
        let mut objects = vec![typed(parent_object, &parent)?];
        for kind in &children {
            let api =
                Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &kind.resource);
            for child in api
                .list(&ListParams::default().labels(&selector))
                .await
                .with_context(|| format!("listing {}", kind.resource_name()))?
            {
                objects.push(typed(child, kind)?);
            }
        }
        for kind in &observed {
            let api =
                Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &kind.resource);
            for meta in api
                .list_metadata(&ListParams::default())
                .await
                .with_context(|| format!("listing {}", kind.resource_name()))?
            {
                let object = DynamicObject {
                    types: None,
                    metadata: meta.metadata,
                    data: serde_json::Value::Object(serde_json::Map::new()),
                };
                objects.push(typed(object, kind)?);
            }
        }
        states.push(input::from_objects(objects, declaration)?);
    }
    Ok(states)
}

/// The parents named, or matching the selector.
async fn choose(
    api: &Api<DynamicObject>,
    args: &RecordArgs,
    kind: &ResolvedKind,
    namespace: &str,
) -> Result<Vec<DynamicObject>> {
    let what = &kind.declared;
    if args.names.is_empty() {
        let mut params = ListParams::default();
        if let Some(selector) = &args.selector {
            params = params.labels(selector);
        }
        let mut found = api
            .list(&params)
            .await
            .with_context(|| format!("listing {what}"))?
            .items;
        if found.is_empty() {
            bail!(
                "no {what} matched{} (nothing was written)",
                args.selector
                    .as_deref()
                    .map(|s| format!(" the selector `{s}`"))
                    .unwrap_or_default()
            );
        }
        found.sort_by_key(|p| (p.namespace(), p.name_any()));
        return Ok(found);
    }
    let mut chosen = Vec::new();
    let mut missing = Vec::new();
    for name in &args.names {
        match api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {what} {namespace}/{name}"))?
        {
            Some(object) => chosen.push(object),
            None => missing.push(name.as_str()),
        }
    }
    if !missing.is_empty() {
        bail!(
            "no {what} named {} in namespace {namespace} (nothing was written)",
            missing.join(", ")
        );
    }
    Ok(chosen)
}

/// `object` as JSON with its kind's `apiVersion` and `kind` (list items
/// may come without them) and without `managedFields`.
fn typed(mut object: DynamicObject, kind: &ResolvedKind) -> Result<serde_json::Value> {
    object.types = Some(TypeMeta {
        api_version: kind.declared.api_version.clone(),
        kind: kind.declared.kind.clone(),
    });
    object.metadata.managed_fields = None;
    Ok(serde_json::to_value(object)?)
}
