//! A local HTTPS backend on 127.0.0.1 with certificates from a throw-away CA, for the TLS tests.
//!
//! [`Pki`] makes a CA and signs server and client certificates (rcgen). [`TlsBackend`] serves
//! HTTP/1.1 over rustls: every request is answered `200` with JSON `{path, client_cn}`, where
//! `client_cn` is the common name of the client certificate the peer presented (or `null`).
//! It counts TCP connections, so tests can prove that a failed handshake was not retried, and
//! records every request that got through. It stops when dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A certificate authority for one test.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    /// A fresh CA called `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki { ca }
    }

    /// The CA certificate, PEM (what a `ca_file` holds).
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A server certificate for these names (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> CertPair {
        self.leaf(names, "toolwire test server", ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate with common name `cn`.
    pub fn client(&self, cn: &str) -> CertPair {
        self.leaf(&[], cn, ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, names: &[&str], cn: &str, usage: ExtendedKeyUsagePurpose) -> CertPair {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// One request that completed a handshake.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub client_cn: Option<String>,
}

/// A running HTTPS backend.
pub struct TlsBackend {
    pub addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl TlsBackend {
    /// Serves with `server` as its certificate; with `client_ca`, a client certificate signed
    /// by that CA is required.
    pub async fn start(server: &CertPair, client_ca: Option<&Pki>) -> Self {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(server.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap();
        let config = match client_ca {
            None => builder.with_no_client_auth().with_single_cert(certs, key).unwrap(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(ca.ca_pem().as_bytes()) {
                    roots.add(c.unwrap()).unwrap();
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                    .build()
                    .unwrap();
                builder
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(certs, key)
                    .unwrap()
            }
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (conns, seen2) = (Arc::clone(&connections), Arc::clone(&seen));
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                conns.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                let seen = Arc::clone(&seen2);
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let client_cn = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| common_name(c.as_ref()));
                    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let seen = Arc::clone(&seen);
                        let client_cn = client_cn.clone();
                        async move {
                            let path = req.uri().path().to_owned();
                            seen.lock().unwrap().push(Seen {
                                path: path.clone(),
                                client_cn: client_cn.clone(),
                            });
                            let body = json!({"path": path, "client_cn": client_cn}).to_string();
                            let mut resp = hyper::Response::new(axum::body::Body::from(body));
                            resp.headers_mut()
                                .insert("content-type", "application/json".parse().unwrap());
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsBackend {
            addr,
            connections,
            seen,
            task,
        }
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// TCP connections accepted so far (handshakes tried).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests that got through the handshake.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The subject common name of a DER certificate, found by its OID (2.5.4.3) followed by a
/// short string: enough for certificates this module made.
fn common_name(der: &[u8]) -> String {
    const CN_OID: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x03];
    // The last CN in the certificate is the subject's (the issuer's comes first).
    let Some(pos) = der.windows(CN_OID.len()).rposition(|w| w == CN_OID) else {
        return String::new();
    };
    let rest = &der[pos + CN_OID.len()..];
    let (Some(&len), Some(body)) = (rest.get(1), rest.get(2..)) else {
        return String::new();
    };
    String::from_utf8_lossy(&body[..usize::from(len).min(body.len())]).into_owned()
}

/// The JSON a [`TlsBackend`] answered, from a result's `output`.
pub fn answered_path(output: &Value) -> &str {
    output["path"].as_str().unwrap_or_default()
}
