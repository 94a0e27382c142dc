//! `--tls`: the client's TLS configuration (the flags, the trust, the client
//! certificate) and the blocking connections of set-up: the preload's and
//! `compare`'s. The workers' non-blocking transport is `engine/tls.rs`.
//!
//! Without `--tls-ca`, any server certificate is accepted (the handshake's
//! signatures are still checked): a benchmark against a server with a
//! throwaway self-signed certificate needs no trust set up, and a benchmark
//! is not where an attacker sits. With `--tls-ca`, the certificate must chain
//! to that CA and name the host given in `--server`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// The TLS flags, as given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// Trust only certificates that chain to this CA (PEM); None: accept any.
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM), for servers that ask for one (mutual TLS).
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
}

/// A ready client configuration, shared by every connection of a run.
#[derive(Clone, Debug)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
    /// Whether server certificates are checked against a CA.
    pub verifies: bool,
}

impl TlsClient {
    /// Loads the files `opts` names and builds the configuration: TLS 1.3 and
    /// 1.2, the ring provider, no session resumption (each connection pays
    /// for a full handshake once, outside the measured window).
    pub fn new(opts: &TlsOptions) -> anyhow::Result<TlsClient> {
        let provider = Arc::new(ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let builder = match &opts.ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certs(ca)? {
                    roots.add(cert).with_context(|| {
                        format!("--tls-ca {}: not a CA certificate", ca.display())
                    })?;
                }
                builder.with_root_certificates(roots)
            }
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider))),
        };
        let mut config = match (&opts.cert, &opts.key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .with_context(|| format!("--tls-key {}: no PEM private key", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .context("--tls-cert and --tls-key do not make a usable client certificate")?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => bail!("--tls-cert and --tls-key go together"),
        };
        config.resumption = rustls::client::Resumption::disabled();
        Ok(TlsClient {
            config: Arc::new(config),
            verifies: opts.ca.is_some(),
        })
    }

    /// Handshakes on a connected blocking `stream` to `host` (the name the
    /// certificate must carry, when one is checked), within `timeout`.
    /// Leaves the stream's timeouts cleared.
    pub fn handshake(
        &self,
        host: &str,
        stream: &mut TcpStream,
        timeout: Duration,
    ) -> anyhow::Result<ClientConnection> {
        let name = ServerName::try_from(host.to_string())
            .with_context(|| format!("{host:?} is not a TLS server name"))?;
        let mut conn =
            ClientConnection::new(self.config.clone(), name).context("starting a TLS session")?;
        // The requests of a batch are encrypted at once; bounded by the pipeline depth.
        conn.set_buffer_limit(None);
        let timeout = timeout.max(Duration::from_millis(1));
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        while conn.is_handshaking() || conn.wants_write() {
            conn.complete_io(stream).map_err(|e| match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    anyhow::anyhow!("no TLS handshake within {timeout:?}")
                }
                io::ErrorKind::UnexpectedEof => anyhow::anyhow!(
                    "the server closed the connection during the TLS handshake (does it serve TLS?)"
                ),
                _ => anyhow::anyhow!("TLS handshake failed: {e}"),
            })?;
        }
        stream.set_read_timeout(None)?;
        stream.set_write_timeout(None)?;
        Ok(conn)
    }

    /// A blocking TLS stream on `stream` (preload, `stats`), handshaken.
    pub fn blocking(
        &self,
        host: &str,
        mut stream: TcpStream,
        timeout: Duration,
    ) -> anyhow::Result<rustls::StreamOwned<ClientConnection, TcpStream>> {
        let conn = self.handshake(host, &mut stream, timeout)?;
        Ok(rustls::StreamOwned::new(conn, stream))
    }
}

/// A blocking connection, plain or TLS: the preload's and `compare`'s
/// `stats` connections.
pub enum Blocking {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<ClientConnection, TcpStream>>),
}

impl Blocking {
    /// Connects to `addr` within `timeout`, handshaking with `tls` when given
    /// (`host` is the name its certificate must carry).
    pub fn connect(
        tls: Option<&TlsClient>,
        host: &str,
        addr: &std::net::SocketAddr,
        timeout: Duration,
    ) -> anyhow::Result<Blocking> {
        let stream = TcpStream::connect_timeout(addr, timeout)?;
        stream.set_nodelay(true)?;
        Ok(match tls {
            None => Blocking::Plain(stream),
            Some(t) => Blocking::Tls(Box::new(t.blocking(host, stream, timeout)?)),
        })
    }

    fn socket(&self) -> &TcpStream {
        match self {
            Blocking::Plain(s) => s,
            Blocking::Tls(t) => &t.sock,
        }
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(t)
    }

    /// What the handshake agreed, e.g. `TLSv1_3 TLS13_AES_256_GCM_SHA384` (None: plain).
    pub fn negotiated(&self) -> Option<String> {
        let Blocking::Tls(t) = self else {
            return None;
        };
        Some(format!(
            "{:?} {:?}",
            t.conn.protocol_version()?,
            t.conn.negotiated_cipher_suite()?.suite()
        ))
    }
}

impl Read for Blocking {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Blocking::Plain(s) => s.read(buf),
            Blocking::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Blocking {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Blocking::Plain(s) => s.write(buf),
            Blocking::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Blocking::Plain(s) => s.flush(),
            Blocking::Tls(t) => t.flush(),
        }
    }
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading certificates from {}", path.display()))?;
    if certs.is_empty() {
        bail!("{} holds no PEM certificate", path.display());
    }
    Ok(certs)
}

/// Accepts any server certificate, for `--tls` without `--tls-ca`; the
/// handshake signature is still verified against the certificate's key.
#[derive(Debug)]
struct AnyServerCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
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
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
