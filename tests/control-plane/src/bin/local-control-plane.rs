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
    /// Start etcd, kube-apiserver and kube-controller-manager on loopback and
    /// print the KUBECONFIG to export. Runs until Ctrl-C or SIGTERM. (Default.)
    Up {
        /// Also copy the admin kubeconfig here (for scripts).
        #[arg(long)]
        kubeconfig_out: Option<PathBuf>,
        /// Do not start kube-controller-manager (no garbage collection).
        #[arg(long)]
        no_controller_manager: bool,
        /// Keep the directory with certificates, data and logs after stopping.
        #[arg(long)]
        keep_dir: bool,
    },
    /// Build (or find in the cache) the binaries and print their versions.
    Build,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Cmd::Up {
        kubeconfig_out: None,
        no_controller_manager: false,
        keep_dir: false,
    }) {
        Cmd::Build => {
            let bins = binaries::ensure_binaries()?;
            print_versions(&bins);
            Ok(())
        }
        Cmd::Up {
            kubeconfig_out,
            no_controller_manager,
            keep_dir,
        } => up(kubeconfig_out, !no_controller_manager, keep_dir),
    }
}

fn print_versions(bins: &binaries::Binaries) {
    for (name, version) in binaries::versions(bins) {
        println!("{name:<24} {version}");
    }
}

fn up(kubeconfig_out: Option<PathBuf>, controller_manager: bool, keep_dir: bool) -> Result<()> {
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
    let cp = ControlPlane::start_with(ControlPlaneOptions {
        controller_manager,
        keep_dir,
        ..Default::default()
    })?;
    print_versions(cp.binaries());
    for (name, pid) in cp.pids() {
        println!("pid {name}={pid}");
    }
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
