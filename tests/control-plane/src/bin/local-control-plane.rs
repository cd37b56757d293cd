//! `local-control-plane`: run a real local Kubernetes control plane in the
//! foreground (Ctrl-C stops it), or just build its binaries.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use local_control_plane::{ControlPlane, ControlPlaneOptions, binaries};

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
    /// kwok with simulated nodes on loopback and print the KUBECONFIG to
    /// export. Runs until Ctrl-C or SIGTERM. (Default.)
    Up {
        /// Also copy the admin kubeconfig here (for scripts).
        #[arg(long)]
        kubeconfig_out: Option<PathBuf>,
        /// Do not start kube-controller-manager (no garbage collection).
        #[arg(long)]
        no_controller_manager: bool,
        /// Also run kube-controller-manager's Deployment and ReplicaSet
        /// controllers (for operators whose children are Deployments).
        #[arg(long, conflicts_with = "no_controller_manager")]
        workload_controllers: bool,
        /// How many simulated nodes (kwok) to run pods on.
        #[arg(long, default_value_t = local_control_plane::DEFAULT_NODES, value_name = "N")]
        nodes: usize,
        /// No nodes, no kube-scheduler, no kwok: pods stay Pending (same as --nodes 0).
        #[arg(long, conflicts_with = "nodes")]
        no_nodes: bool,
        /// Keep the directory with certificates, data and logs after stopping.
        #[arg(long)]
        keep_dir: bool,
        /// One more kube-apiserver flag, e.g.
        /// `--apiserver-arg=--feature-gates=ShardedListAndWatch=true`
        /// (repeatable; appended after the harness's own flags).
        #[arg(
            long = "apiserver-arg",
            value_name = "FLAG",
            allow_hyphen_values = true
        )]
        apiserver_args: Vec<String>,
    },
    /// Build (or find in the cache) the binaries and print their versions.
    Build,
    /// Build (or find in the cache) the Go tools only the tests use: the OCI
    /// registry, oras and cosign (OCI tests) and Helm (chart tests); prints
    /// their paths.
    #[command(alias = "oci-tools")]
    Tools,
    /// Build (or find in the cache) the tools; print Helm's path.
    Helm,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Cmd::Up {
        kubeconfig_out: None,
        no_controller_manager: false,
        workload_controllers: false,
        nodes: local_control_plane::DEFAULT_NODES,
        no_nodes: false,
        keep_dir: false,
        apiserver_args: Vec::new(),
    }) {
        Cmd::Helm => {
            println!("{}", binaries::ensure_helm()?.display());
            Ok(())
        }
        Cmd::Tools => {
            for path in local_control_plane::registry::ensure_tools()? {
                println!("{}", path.display());
            }
            Ok(())
        }
        Cmd::Build => {
            let bins = binaries::ensure_binaries()?;
            print_versions(&bins);
            Ok(())
        }
        Cmd::Up {
            kubeconfig_out,
            no_controller_manager,
            workload_controllers,
            nodes,
            no_nodes,
            keep_dir,
            apiserver_args,
        } => up(
            kubeconfig_out,
            ControlPlaneOptions {
                controller_manager: !no_controller_manager,
                controllers: local_control_plane::DEFAULT_CONTROLLERS
                    .iter()
                    .chain(if workload_controllers {
                        &local_control_plane::WORKLOAD_CONTROLLERS[..]
                    } else {
                        &[][..]
                    })
                    .map(|c| c.to_string())
                    .collect(),
                nodes: if no_nodes { 0 } else { nodes },
                keep_dir,
                apiserver_args,
                ..Default::default()
            },
        ),
    }
}

fn print_versions(bins: &binaries::Binaries) {
    for (name, version) in binaries::versions(bins) {
        println!("{name:<24} {version}");
    }
}

fn up(kubeconfig_out: Option<PathBuf>, options: ControlPlaneOptions) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Install signal handlers before starting, so an early Ctrl-C still tears down.
    let signals = runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        Ok::<_, std::io::Error>((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    });
    let (mut sigint, mut sigterm) = signals.context("installing signal handlers")?;

    eprintln!("starting the local control plane...");
    let started = std::time::Instant::now();
    let cp = ControlPlane::start_with(options)?;
    let elapsed = started.elapsed();
    print_versions(cp.binaries());
    for (name, pid) in cp.pids() {
        println!("pid {name}={pid}");
    }
    if !cp.node_names().is_empty() {
        println!("nodes: {} (simulated by kwok)", cp.node_names().join(" "));
    }
    println!("started in {:.1} s", elapsed.as_secs_f64());
    if let Some(out) = &kubeconfig_out {
        std::fs::copy(cp.kubeconfig_path(), out)
            .with_context(|| format!("copying the kubeconfig to {}", out.display()))?;
    }
    println!("API server: {}", cp.server());
    println!("export KUBECONFIG={}", cp.kubeconfig_path().display());
    println!(
        "export PATH={}:$PATH   # kubectl {}",
        cp.binaries()
            .kubectl
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        local_control_plane::KUBERNETES_VERSION
    );
    println!("ready; press Ctrl-C to stop");

    runtime.block_on(async {
        tokio::select! {
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
        }
    });
    eprintln!("stopping the local control plane...");
    cp.shutdown();
    if let Some(out) = &kubeconfig_out {
        let _ = std::fs::remove_file(out);
    }
    eprintln!("stopped");
    Ok(())
}
