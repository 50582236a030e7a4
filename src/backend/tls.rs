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

use rustls::{ClientConfig, RootCertStore};

use crate::config::tls::{TlsMaterial, provider};

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
            .with_client_auth_cert(id.certs.clone(), id.key())
            .map_err(|e| format!("the client certificate cannot be used: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    // The client speaks HTTP/1.1 only (no `http2` feature); say so, so a server that insists
    // on ALPN picks it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
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
    use crate::config::tls::TlsPaths;

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
