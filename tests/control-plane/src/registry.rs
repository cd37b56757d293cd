//! A real OCI registry on loopback for tests and demos, and the tools that
//! talk to it the way plugin authors do.
//!
//! - `registry` — the reference implementation
//!   (`github.com/distribution/distribution/v3/cmd/registry`), served over
//!   TLS with a certificate from a throwaway CA ([`crate::pki`]), with
//!   optional htpasswd basic auth, storing on disk in its own directory;
//! - `oras` (`oras.land/oras/cmd/oras`) to push plain Wasm artifacts;
//! - `cosign` (`github.com/sigstore/cosign/v2/cmd/cosign`) to make key pairs
//!   and sign (`--tlog-upload=false`: no transparency log offline).
//!
//! They are built once with Helm by one `go build` of the control plane's Go
//! module ([`crate::binaries::TOOLS`]), where they share the libraries they
//! have in common with each other and with the Kubernetes binaries.

use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::binaries::{BinaryBuilder, TOOLS};

/// The registry release (required in the Go module).
pub const REGISTRY_VERSION: &str = "v3.1.2";
/// The oras release.
pub const ORAS_VERSION: &str = "v1.3.6";
/// The cosign release.
pub const COSIGN_VERSION: &str = "v2.6.5";

/// One of the Go tools of [`TOOLS`], by its binary's name.
#[derive(Debug, Clone, Copy)]
pub struct GoTool {
    /// The binary's name.
    pub name: &'static str,
}

/// The registry.
pub const REGISTRY: GoTool = GoTool { name: "registry" };
/// oras.
pub const ORAS: GoTool = GoTool { name: "oras" };
/// cosign.
pub const COSIGN: GoTool = GoTool { name: "cosign" };
/// Helm.
pub const HELM: GoTool = GoTool { name: "helm" };

impl GoTool {
    /// Where it is built to.
    pub fn path(&self) -> PathBuf {
        BinaryBuilder::default()
            .cache_dir_of(&TOOLS)
            .join(self.name)
    }

    /// Builds the tools unless cached; returns this one's path.
    pub fn ensure(&self) -> Result<PathBuf> {
        Ok(BinaryBuilder::default()
            .ensure_built(&TOOLS)?
            .join(self.name))
    }
}

/// Builds the registry, oras, cosign and Helm (for `tests/setup.sh`);
/// returns their paths.
pub fn ensure_tools() -> Result<Vec<PathBuf>> {
    let dir = BinaryBuilder::default().ensure_built(&TOOLS)?;
    Ok(TOOLS
        .commands
        .iter()
        .map(|(name, _)| dir.join(name))
        .collect())
}

/// How to start a [`LocalRegistry`].
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Require HTTP basic auth with this user and password.
    pub basic_auth: Option<(String, String)>,
    /// Serve plain HTTP instead of TLS (clients must name the registry as
    /// insecure; `ca_cert` is then unused).
    pub plain_http: bool,
}

/// A registry process on `127.0.0.1:<port>` over TLS (or plain HTTP with
/// [`RegistryOptions::plain_http`]).
#[derive(Debug)]
pub struct LocalRegistry {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// The CA certificate (PEM) that signed its serving certificate.
    pub ca_cert: PathBuf,
    /// Its directory (config, certificates, storage, logs).
    pub dir: tempfile::TempDir,
    /// A docker config directory (`config.json`) with its credentials, for
    /// oras, cosign and the host (`--oci-docker-config <dir>/config.json`).
    pub docker_config_dir: PathBuf,
    options: RegistryOptions,
    child: Option<Child>,
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl LocalRegistry {
    /// Installs (once) and starts a registry.
    pub fn start(options: RegistryOptions) -> Result<Self> {
        let binary = REGISTRY.ensure()?;
        let dir = tempfile::Builder::new().prefix("oci-registry-").tempdir()?;
        let pki = crate::pki::Pki::generate(&dir.path().join("pki"))?;
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let auth = match &options.basic_auth {
            Some((user, password)) => {
                let hash = bcrypt::hash(password, 4).context("hashing the password")?;
                let htpasswd = dir.path().join("htpasswd");
                fs::write(&htpasswd, format!("{user}:{hash}\n"))?;
                format!(
                    "auth:\n  htpasswd:\n    realm: wasm-operator-test\n    path: {}\n",
                    htpasswd.display()
                )
            }
            None => String::new(),
        };
        let tls = match options.plain_http {
            true => String::new(),
            false => format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                pki.serving_cert.display(),
                pki.serving_key.display()
            ),
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
             http:\n  addr: {addr}\n{tls}{auth}",
            storage = dir.path().join("storage").display(),
        );
        fs::write(dir.path().join("config.yml"), config)?;
        let docker_config_dir = dir.path().join("docker");
        fs::create_dir_all(&docker_config_dir)?;
        let auths = match &options.basic_auth {
            Some((user, password)) => serde_json::json!({
                "auths": {addr.clone(): {"username": user, "password": password}}
            }),
            None => serde_json::json!({"auths": {}}),
        };
        fs::write(docker_config_dir.join("config.json"), auths.to_string())?;
        let mut registry = Self {
            addr,
            ca_cert: pki.ca_cert,
            dir,
            docker_config_dir,
            options,
            child: None,
        };
        registry.spawn(&binary)?;
        Ok(registry)
    }

    fn spawn(&mut self, binary: &Path) -> Result<()> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("registry.log"))?;
        let child = Command::new(binary)
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&self.addr).is_err() {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                bail!(
                    "the registry exited ({status}): {}",
                    fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                bail!("the registry did not listen on {} within 20 s", self.addr);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops the registry (its storage stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same storage.
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        self.spawn(&REGISTRY.path())
    }

    /// `<addr>/<repository>`, as oras and cosign name it.
    pub fn name(&self, repository: &str) -> String {
        format!("{}/{repository}", self.addr)
    }

    /// The docker config file with the registry's credentials.
    pub fn docker_config_file(&self) -> PathBuf {
        self.docker_config_dir.join("config.json")
    }

    /// The on-disk data file of blob `digest` (`sha256:<hex>`), for tests
    /// that corrupt storage.
    pub fn blob_data_path(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2.min(hex.len())])
            .join(hex)
            .join("data")
    }

    fn tool(&self, tool: GoTool, dir: &Path) -> Result<Command> {
        let mut cmd = Command::new(tool.ensure()?);
        cmd.current_dir(dir)
            .env("DOCKER_CONFIG", &self.docker_config_dir)
            // Go reads extra roots from here: the registry's CA.
            .env("SSL_CERT_FILE", &self.ca_cert)
            .env("COSIGN_PASSWORD", "")
            .env("COSIGN_YES", "true")
            .stdin(Stdio::null());
        Ok(cmd)
    }

    fn run(mut cmd: Command, what: &str) -> Result<String> {
        let output = cmd.output().with_context(|| format!("running {what}"))?;
        if !output.status.success() {
            bail!(
                "{what} failed ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `oras push <addr>/<repo>:<tag> plugin.wasm:application/wasm` — with
    /// `cncf_config`, also `--config config.json:application/vnd.wasm.config.v0+json`.
    pub fn oras_push(&self, reference: &str, wasm: &Path, cncf_config: bool) -> Result<()> {
        let work = tempfile::tempdir()?;
        fs::copy(wasm, work.path().join("plugin.wasm"))?;
        let mut cmd = self.tool(ORAS, work.path())?;
        cmd.args(["push", "--ca-file"])
            .arg(&self.ca_cert)
            .arg("--registry-config")
            .arg(self.docker_config_file())
            .arg(self.name(reference));
        if cncf_config {
            fs::write(
                work.path().join("config.json"),
                br#"{"architecture":"wasm","os":"wasip2"}"#,
            )?;
            cmd.args([
                "--config",
                "config.json:application/vnd.wasm.config.v0+json",
            ]);
        }
        cmd.arg("plugin.wasm:application/wasm");
        Self::run(cmd, "oras push").map(drop)
    }

    /// `oras tag <addr>/<source> <tag>`: points another tag at the same manifest.
    pub fn oras_tag(&self, source: &str, tag: &str) -> Result<()> {
        let work = tempfile::tempdir()?;
        let mut cmd = self.tool(ORAS, work.path())?;
        cmd.args(["tag", "--ca-file"])
            .arg(&self.ca_cert)
            .arg("--registry-config")
            .arg(self.docker_config_file())
            .arg(self.name(source))
            .arg(tag);
        Self::run(cmd, "oras tag").map(drop)
    }

    /// `oras cp <addr>/<source> <addr>/<target>`: copies a manifest (by tag
    /// or digest) and its blobs within the registry, byte for byte (the
    /// same manifest digest), e.g. an artifact and its `.sig` into another
    /// repository.
    pub fn oras_copy(&self, source: &str, target: &str) -> Result<()> {
        let work = tempfile::tempdir()?;
        let mut cmd = self.tool(ORAS, work.path())?;
        cmd.args(["cp", "--from-ca-file"])
            .arg(&self.ca_cert)
            .arg("--to-ca-file")
            .arg(&self.ca_cert)
            .arg("--from-registry-config")
            .arg(self.docker_config_file())
            .arg("--to-registry-config")
            .arg(self.docker_config_file())
            .arg(self.name(source))
            .arg(self.name(target));
        Self::run(cmd, "oras cp").map(drop)
    }

    /// The registry's log so far (access lines name every request).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Makes a cosign key pair (empty password) in `dir`: `(cosign.key, cosign.pub)`.
    pub fn cosign_key_pair(&self, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        let mut cmd = self.tool(COSIGN, dir)?;
        cmd.arg("generate-key-pair");
        Self::run(cmd, "cosign generate-key-pair")?;
        Ok((dir.join("cosign.key"), dir.join("cosign.pub")))
    }

    /// `cosign sign --key KEY <addr>/<repo>@<digest>` (no transparency log).
    pub fn cosign_sign(&self, key: &Path, repository: &str, digest: &str) -> Result<()> {
        let dir = key.parent().unwrap_or(Path::new("."));
        let mut cmd = self.tool(COSIGN, dir)?;
        cmd.args(["sign", "--key"])
            .arg(key)
            .args(["--tlog-upload=false", "--yes"])
            .arg(format!("{}@{digest}", self.name(repository)));
        Self::run(cmd, "cosign sign").map(drop)
    }

    /// Appends a line to the registry's log (test markers).
    pub fn note(&self, line: &str) {
        if let Ok(mut log) = fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("registry.log"))
        {
            let _ = writeln!(log, "--- {line}");
        }
    }

    /// Whether basic auth is on.
    pub fn requires_auth(&self) -> bool {
        self.options.basic_auth.is_some()
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}
