//! TLS material for HTTP tools, read at load: the trust anchors (`ca_file`) and client
//! certificates (`client_cert` + `client_key`) of one level of settings (the server's
//! `[http_client]` or a tool's `[tools.http] tls`). Every file is read and checked here, so an
//! unreadable file, a file without certificates or keys, or a key that does not belong to its
//! certificate is a load error, never a failed call later. The clients built from this
//! material live in `backend::tls`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

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

impl Identity {
    /// The private key (a copy; the key itself never leaves this type otherwise).
    pub fn key(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }
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
