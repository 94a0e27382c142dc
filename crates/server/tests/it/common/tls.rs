//! TLS for the tests that need it (`tls.rs`, `differential.rs`): the test certificates
//! (`tests/tls/`, made by its `make-fixtures.py`), client configurations that trust
//! them, and [`Client`]s over TLS.

use std::io;
use std::net::TcpStream;
use std::sync::Arc;

use crate::common::{Client, ServerProcess, Transport, READ_TIMEOUT};

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

impl Transport for TlsStream {
    fn tcp(&self) -> &TcpStream {
        &self.sock
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Connects to 127.0.0.1:`port` over TLS with `config` and completes the handshake, so a
/// refused handshake is an error here, not at the first request.
pub fn try_connect(port: u16, config: Arc<rustls::ClientConfig>) -> io::Result<Client> {
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_nodelay(true)?;
    tcp.set_write_timeout(Some(READ_TIMEOUT))?;
    tcp.set_read_timeout(Some(READ_TIMEOUT))?;
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let session = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
    let mut stream = rustls::StreamOwned::new(session, tcp);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(Client::over(Box::new(stream)))
}

/// [`try_connect`], or panics.
pub fn connect(port: u16, config: Arc<rustls::ClientConfig>) -> Client {
    try_connect(port, config).unwrap_or_else(|e| panic!("TLS connect to 127.0.0.1:{port}: {e}"))
}

/// A TLS connection to `server`, trusting the test CA.
pub fn connect_to(server: &ServerProcess) -> Client {
    connect(server.port, client_config(None))
}

/// The TLS session of a client made here.
pub fn session(c: &Client) -> Option<&rustls::ClientConnection> {
    c.transport()
        .as_any()
        .downcast_ref::<TlsStream>()
        .map(|s| &s.conn)
}

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The path of a file in `tests/tls/`.
pub fn fixture(name: &str) -> String {
    format!("{}/tests/tls/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `-Z -o ssl_chain_cert=…,ssl_key=…` with the test server certificate, and `extra`
/// suboptions (comma-separated, may be empty).
pub fn server_args(extra: &str) -> Vec<String> {
    let mut o = format!(
        "ssl_chain_cert={},ssl_key={}",
        fixture("server.pem"),
        fixture("server.key")
    );
    if !extra.is_empty() {
        o.push(',');
        o.push_str(extra);
    }
    vec!["-Z".into(), "-o".into(), o]
}

/// A client that trusts the test CA, presenting `client` (a fixture stem such as
/// `"client"`) as its certificate if given.
pub fn client_config(client: Option<&str>) -> Arc<rustls::ClientConfig> {
    client_config_with(Some("ca.pem"), client)
}

/// A client trusting `ca` (a fixture; `None`: trusting any server certificate, to reach
/// a server whose certificate is wrong on purpose).
pub fn client_config_with(ca: Option<&str>, client: Option<&str>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(fixture(ca)).expect("CA file") {
                roots.add(cert.expect("CA certificate")).expect("add CA");
            }
            builder.with_root_certificates(roots)
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider))),
    };
    let config = match client {
        Some(stem) => {
            let chain = CertificateDer::pem_file_iter(fixture(&format!("{stem}.pem")))
                .expect("client certificate")
                .collect::<Result<Vec<_>, _>>()
                .expect("client certificate");
            let key =
                PrivateKeyDer::from_pem_file(fixture(&format!("{stem}.key"))).expect("client key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client auth")
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Accepts any server certificate (signatures are still checked).
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
