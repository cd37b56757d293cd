//! A real, local Kubernetes control plane for tests and demos.
//!
//! This crate is our answer to controller-runtime's `envtest`: it builds
//! `kube-apiserver`, `kube-controller-manager`, `kube-scheduler` and `kubectl`
//! from the `k8s.io/kubernetes` Go module and installs `kwok` (all cached
//! outside the repository, keyed by version), takes `etcd` from the
//! `etcd-bin-vendored-linux-amd64` crate, and starts them on free loopback
//! ports in a temporary directory with freshly generated certificates and an
//! admin kubeconfig. kwok simulates a few Nodes (3 by default), so pods are
//! scheduled, run, become Ready, fail when told to and go away after their
//! grace period, as on a real cluster.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use local_control_plane::ControlPlane;
//! // One control plane per test binary; tests isolate themselves by namespace.
//! let cp = ControlPlane::shared()?;
//! let client = cp.client().await?;
//! # Ok(()) }
//! ```
//!
//! Every process is torn down when the [`ControlPlane`] is dropped, when the
//! process exits (the shared instance), and by the kernel if this process dies
//! without running any cleanup (`PR_SET_PDEATHSIG`).
//!
//! Modules:
//! - [`binaries`]: finding or building the Kubernetes and etcd binaries.
//! - [`pki`]: certificates and keys for a throwaway cluster.
//! - [`kubeconfig`]: kubeconfig files for the admin, a ServiceAccount or an impersonated user.
//! - [`process`]: supervised child processes that cannot outlive us.
//! - [`cluster`]: starting, waiting for and stopping the control plane.
//! - [`nodes`]: the simulated nodes (kwok's Stages, fake Nodes, pod annotations).

pub mod binaries;
pub mod cluster;
pub mod kubeconfig;
pub mod nodes;
pub mod pki;
pub mod process;
pub mod registry;

pub use binaries::{Binaries, BinaryBuildError, KUBERNETES_VERSION, KWOK_VERSION};
pub use cluster::{
    ControlPlane, ControlPlaneOptions, DEFAULT_CONTROLLERS, DEFAULT_NODES, WORKLOAD_CONTROLLERS,
};
