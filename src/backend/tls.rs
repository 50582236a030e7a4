//! TLS for HTTP tools (`https://` URLs).
//!
//! The client's TLS is built here, not by reqwest, so that trust is the same on every machine:
//!
//! - **rustls with the aws-lc-rs provider**: no OpenSSL to match at run time; TLS 1.2 and 1.3
//!   with rustls' safe defaults. Certificate and host-name checks are never turned off.
//! - **roots**: the Mozilla root program bundled in the binary (`webpki-roots`), so a minimal
//!   container without `ca-certificates`, or an offline host, trusts the same public CAs as a
//!   laptop. Private CAs are *added* with `ca_file`: server-wide (`[http_client] ca_file`) and
//!   per tool (`[tools.http] tls = { ca_file = … }`).
//! - **client certificates** (mTLS): `client_cert` + `client_key`, server-wide or per tool; a
//!   tool's own pair replaces the server-wide one for that tool.
//!
//! Every file is read and checked when it is loaded (server start for the global settings, tool
//! load and reload for a tool's), so an unreadable file, a file without certificates or keys, or
//! a key that does not belong to its certificate is a load error, never a failed call later.
//! Tools without their own TLS settings share one client; a tool with its own gets its own
//! client, built once (on its first call) with the same resolver, egress policy and limits.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore};

/// The crypto provider of every TLS client (and of the load-time checks).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Certificates and keys read from one level of settings (the server's or a tool's).
#[derive(Clone, Default)]
pub struct TlsMaterial {
    /// Extra trust anchors (`ca_file`), added to the bundled roots.
    pub roots: Vec<CertificateDer<'static>>,
    /// The client certificate chain and its key (`client_cert` + `client_key`).
    pub identity: Option<Identity>,
}

/// A client certificate chain and its private key.
pub struct Identity {
    pub certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            certs: self.certs.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl std::fmt::Debug for TlsMaterial {
    /// Counts only: key material never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("roots", &self.roots.len())
            .field("client_cert", &self.identity.as_ref().map(|i| i.certs.len()))
            .finish()
    }
}

/// Paths of one level of TLS settings, as written in the config (already resolved against the
/// directory they are relative to).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsPaths {
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// A TLS setting that cannot be used: which key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct TlsSettingError {
    /// The config key at fault (`ca_file`, `client_cert`, `client_key`), without its prefix.
    pub key: &'static str,
    pub message: String,
}

fn setting_error(key: &'static str, message: impl Into<String>) -> TlsSettingError {
    TlsSettingError {
        key,
        message: message.into(),
    }
}

impl TlsPaths {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.client_cert.is_none() && self.client_key.is_none()
    }

    /// Reads and checks every file. All problems are returned, each with its key.
    pub fn load(&self) -> Result<TlsMaterial, Vec<TlsSettingError>> {
        let mut errors = Vec::new();
        let mut material = TlsMaterial::default();
        if let Some(path) = &self.ca_file {
            match read_ca_file(path) {
                Ok(roots) => material.roots = roots,
                Err(message) => errors.push(setting_error("ca_file", message)),
            }
        }
        match (&self.client_cert, &self.client_key) {
            (None, None) => {}
            (Some(_), None) => errors.push(setting_error(
                "client_key",
                "`client_cert` is set but `client_key` is not; a client certificate needs its private key",
            )),
            (None, Some(_)) => errors.push(setting_error(
                "client_cert",
                "`client_key` is set but `client_cert` is not; a private key needs its certificate",
            )),
            (Some(cert), Some(key)) => match read_identity(cert, key) {
                Ok(identity) => material.identity = Some(identity),
                Err(e) => errors.push(e),
            },
        }
        if errors.is_empty() { Ok(material) } else { Err(errors) }
    }
}

fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))
}

/// The certificates of a PEM file; at least one, each a usable trust anchor.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("`{}` is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "`{}` holds no PEM certificate (a `-----BEGIN CERTIFICATE-----` block)",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = read_certs(path)?;
    let mut store = RootCertStore::empty();
    for (i, cert) in certs.iter().enumerate() {
        store.add(cert.clone()).map_err(|e| {
            format!(
                "certificate {} in `{}` cannot be used as a trust anchor: {e}",
                i + 1,
                path.display()
            )
        })?;
    }
    Ok(certs)
}

/// A client certificate chain and its key; the key must parse and belong to the certificate.
fn read_identity(cert: &Path, key: &Path) -> Result<Identity, TlsSettingError> {
    let certs = read_certs(cert).map_err(|m| setting_error("client_cert", m))?;
    let pem = read_pem(key).map_err(|m| setting_error("client_key", m))?;
    let key_der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        setting_error(
            "client_key",
            format!(
                "`{}` holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
                key.display()
            ),
        )
    })?;
    CertifiedKey::from_der(certs.clone(), key_der.clone_key(), &provider()).map_err(|e| {
        setting_error(
            "client_key",
            format!(
                "the key in `{}` cannot be used with the certificate in `{}`: {e}",
                key.display(),
                cert.display()
            ),
        )
    })?;
    Ok(Identity { certs, key: key_der })
}

/// The rustls client configuration for these levels of settings, most general first (server,
/// then tool): the bundled roots plus every level's `ca_file`, and the client certificate of
/// the most specific level that has one.
pub fn client_config(levels: &[&TlsMaterial]) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for level in levels {
        for cert in &level.roots {
            roots
                .add(cert.clone())
                .map_err(|e| format!("a `ca_file` certificate is unusable: {e}"))?;
        }
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the TLS protocol versions cannot be set: {e}"))?
        .with_root_certificates(roots);
    let identity = levels.iter().rev().find_map(|l| l.identity.as_ref());
    let mut config = match identity {
        Some(id) => builder
            .with_client_auth_cert(id.certs.clone(), id.key.clone_key())
            .map_err(|e| format!("the client certificate cannot be used: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    // The client speaks HTTP/1.1 only (no `http2` feature); say so, so a server that insists
    // on ALPN picks it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A tool's own TLS settings and the client built for them (once, on first use; dropped with
/// the tool set on reload).
pub struct ToolTls {
    pub material: TlsMaterial,
    pub client: OnceLock<reqwest::Client>,
}

impl ToolTls {
    pub fn new(material: TlsMaterial) -> Self {
        ToolTls {
            material,
            client: OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for ToolTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolTls")
            .field("material", &self.material)
            .field("client_built", &self.client.get().is_some())
            .finish()
    }
}

/// The TLS failure in an error's cause chain, if any. rustls errors travel inside
/// `std::io::Error`s (tokio-rustls wraps them, hyper-rustls wraps that again), and an
/// `io::Error`'s `source()` skips the error it wraps, so the walk steps into wrapped errors.
pub fn find_tls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    // Bounded: a cause chain is short; this only guards against a cycle.
    for _ in 0..32 {
        let e = cur?;
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        let wrapped = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        cur = wrapped.or_else(|| e.source());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_roots_build_a_config() {
        let cfg = client_config(&[&TlsMaterial::default()]).unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert!(!webpki_roots::TLS_SERVER_ROOTS.is_empty());
    }

    #[test]
    fn unreadable_and_empty_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = TlsPaths {
            ca_file: Some(dir.path().join("nope.pem")),
            ..TlsPaths::default()
        };
        let errs = missing.load().unwrap_err();
        assert_eq!(errs[0].key, "ca_file");
        assert!(errs[0].message.contains("cannot read"), "{errs:?}");

        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "hello, not a certificate\n").unwrap();
        let errs = TlsPaths {
            ca_file: Some(garbage.clone()),
            client_cert: Some(garbage),
            ..TlsPaths::default()
        }
        .load()
        .unwrap_err();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].message.contains("no PEM certificate"), "{errs:?}");
        assert_eq!(errs[1].key, "client_key");

        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let errs = TlsPaths {
            ca_file: Some(broken),
            ..TlsPaths::default()
        }
        .load()
        .unwrap_err();
        assert!(errs[0].message.contains("trust anchor"), "{errs:?}");
    }

    #[test]
    fn tls_errors_are_found_inside_nested_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls.clone());
        let outer = std::io::Error::other(inner);
        assert_eq!(find_tls_error(&outer), Some(&tls));
        let plain = std::io::Error::other("connection refused");
        assert_eq!(find_tls_error(&plain), None);
    }
}
