//! Certificates and keys for a throwaway cluster.
//!
//! One self-signed CA signs the API server's serving certificate (with IP SANs
//! for 127.0.0.1 so clients verify it) and the admin client certificate
//! (group `system:masters`). A separate key pair signs ServiceAccount tokens.
//! Everything is written as PEM into the cluster's directory.

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Paths of the PEM files a cluster needs.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub service_account_key: PathBuf,
}

impl Pki {
    /// Generates every certificate and key into `dir`.
    pub fn generate(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let write = |name: &str, pem: String| -> Result<PathBuf> {
            let path = dir.join(name);
            fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        };

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name = name("wasm-operator-local-ca", None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
        ])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        serving
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
        serving.distinguished_name = name("kube-apiserver", None);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::new(Vec::<String>::new())?;
        admin.distinguished_name = name("admin", Some("system:masters"));
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        admin.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let admin_cert = admin.signed_by(&admin_key, &ca)?;

        let sa_key = KeyPair::generate()?;

        Ok(Self {
            ca_cert: write("ca.crt", ca_cert.pem())?,
            serving_cert: write("apiserver.crt", serving_cert.pem())?,
            serving_key: write("apiserver.key", serving_key.serialize_pem())?,
            admin_cert: write("admin.crt", admin_cert.pem())?,
            admin_key: write("admin.key", admin_key.serialize_pem())?,
            service_account_key: write("service-account.key", sa_key.serialize_pem())?,
        })
    }
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_pem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = Pki::generate(dir.path()).expect("generate");
        for path in [
            &pki.ca_cert,
            &pki.serving_cert,
            &pki.serving_key,
            &pki.admin_cert,
            &pki.admin_key,
            &pki.service_account_key,
        ] {
            let text = fs::read_to_string(path).expect("read");
            assert!(text.starts_with("-----BEGIN "), "{}", path.display());
        }
    }
}
