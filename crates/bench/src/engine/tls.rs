//! `--tls`: the client side of TLS, with rustls driven sans-I/O from the
//! worker's own mio loop, so a TLS connection costs the same system calls as
//! a plain one: one `read` and one `writev` per connection per wake-up.
//!
//! ```text
//!   setup (main thread, before the measured window, inside the connect budget):
//!     connect -> blocking handshake (read/write timeouts = the time left) -> non-blocking
//!   a wake-up:
//!     read(socket, 64 KiB scratch) -> read_tls(&scratch[..n]) -> process_new_packets
//!       -> reader() -> the connection's ReplyBuffer (repeat while the read filled it)
//!     requests: writer() encrypts the batch -> write_tls -> one writev of its records
//! ```
//!
//! The ciphertext goes through a scratch buffer rather than
//! `read_tls(&mut socket)` because rustls reads at most 4 KiB per call: a
//! large batch of replies would take several `read`s.
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
use protocol::client::ReplyBuffer;
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

/// A non-blocking TLS connection for a worker: the socket and its session.
#[derive(Debug)]
pub struct TlsStream {
    pub socket: mio::net::TcpStream,
    conn: ClientConnection,
}

impl TlsStream {
    /// `socket` (non-blocking now) after `conn`'s handshake on it.
    pub fn new(socket: mio::net::TcpStream, conn: ClientConnection) -> TlsStream {
        TlsStream { socket, conn }
    }

    /// Reads what the socket holds into `scratch` (again only while a read
    /// fills it) and decrypts it into `rx`. Returns false when the server
    /// closed the connection.
    pub fn read_into(&mut self, scratch: &mut [u8], rx: &mut ReplyBuffer) -> io::Result<bool> {
        loop {
            let n = match self.socket.read(scratch) {
                Ok(0) => return Ok(false),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if !self.decrypt(&scratch[..n], rx)? {
                return Ok(false);
            }
            // A short read drained the socket (edge-triggered: the next
            // arrival wakes us again).
            if n < scratch.len() {
                return Ok(true);
            }
        }
    }

    /// Feeds ciphertext to the session and moves the plaintext into `rx`;
    /// false once the server has sent its close_notify.
    fn decrypt(&mut self, mut ciphertext: &[u8], rx: &mut ReplyBuffer) -> io::Result<bool> {
        while !ciphertext.is_empty() {
            // Takes up to 4 KiB of the slice per call; none once the
            // server's close_notify is in.
            if self.conn.read_tls(&mut ciphertext)? == 0 {
                return Ok(false);
            }
            let state = self
                .conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let mut plain = state.plaintext_bytes_to_read();
            while plain > 0 {
                let n = self.conn.reader().read(rx.spare(plain))?;
                rx.commit(n);
                plain -= n;
            }
            if state.peer_has_closed() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Encrypts `out` (then empties it) and writes every pending record
    /// with one `writev`, more only after a partial write. What the socket
    /// does not take stays queued in the session for the next writable event.
    pub fn write_from(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        if !out.is_empty() {
            // No buffer limit (see `handshake`): the session takes it all.
            self.conn.writer().write_all(out)?;
            out.clear();
        }
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.socket) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Records wait for the socket (requests, or the session's own replies
    /// such as a key update).
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }
}

#[cfg(test)]
mod tests {
    //! Against an in-process rustls server on 127.0.0.1 with a fresh
    //! self-signed certificate: bytes in, bytes out, nothing timed.

    use super::*;
    use std::net::TcpListener;
    use std::thread::JoinHandle;

    /// A throwaway certificate for 127.0.0.1 and localhost, and the files
    /// it is written to (removed on drop).
    struct Pki {
        dir: PathBuf,
        cert_pem: String,
        key_pem: String,
    }

    impl Pki {
        fn new(tag: &str) -> Pki {
            let ck =
                rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
                    .unwrap();
            let dir =
                std::env::temp_dir().join(format!("ferrobench-tls-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let pki = Pki {
                dir,
                cert_pem: ck.cert.pem(),
                key_pem: ck.signing_key.serialize_pem(),
            };
            std::fs::write(pki.cert(), &pki.cert_pem).unwrap();
            std::fs::write(pki.key(), &pki.key_pem).unwrap();
            pki
        }
        fn cert(&self) -> PathBuf {
            self.dir.join("cert.pem")
        }
        fn key(&self) -> PathBuf {
            self.dir.join("key.pem")
        }
        fn server_config(&self, client_ca: Option<&Pki>) -> Arc<rustls::ServerConfig> {
            let provider = Arc::new(ring::default_provider());
            let b = rustls::ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap();
            let b = match client_ca {
                Some(ca) => {
                    let mut roots = RootCertStore::empty();
                    roots
                        .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap())
                        .unwrap();
                    let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                        Arc::new(roots),
                        provider,
                    )
                    .build()
                    .unwrap();
                    b.with_client_cert_verifier(v)
                }
                None => b.with_no_client_auth(),
            };
            let chain = vec![CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).unwrap()];
            let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap();
            Arc::new(b.with_single_cert(chain, key).unwrap())
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Serves one connection: answers each `get` line with a `VALUE` of
    /// `value_len` bytes and `END`, until the client closes. Returns the
    /// request bytes it saw, or the handshake's error.
    fn serve_one(
        config: Arc<rustls::ServerConfig>,
        value_len: usize,
    ) -> (String, JoinHandle<Result<Vec<u8>, String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = std::thread::spawn(move || {
            let (sock, _) = listener.accept().map_err(|e| e.to_string())?;
            sock.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let conn = rustls::ServerConnection::new(config).map_err(|e| e.to_string())?;
            let mut s = rustls::StreamOwned::new(conn, sock);
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            let value = vec![b'v'; value_len];
            loop {
                let n = match s.read(&mut buf) {
                    Ok(0) => return Ok(seen),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && !seen.is_empty() => {
                        return Ok(seen)
                    }
                    Err(e) => return Err(e.to_string()),
                };
                let before = seen.iter().filter(|&&b| b == b'\n').count();
                seen.extend_from_slice(&buf[..n]);
                let after = seen.iter().filter(|&&b| b == b'\n').count();
                let mut reply = Vec::new();
                for _ in before..after {
                    reply.extend_from_slice(format!("VALUE k 0 {value_len}\r\n").as_bytes());
                    reply.extend_from_slice(&value);
                    reply.extend_from_slice(b"\r\nEND\r\n");
                }
                s.write_all(&reply).map_err(|e| e.to_string())?;
            }
        });
        (addr, handle)
    }

    fn connect(client: &TlsClient, addr: &str, host: &str) -> anyhow::Result<TlsStream> {
        let mut sock = TcpStream::connect(addr)?;
        let conn = client.handshake(host, &mut sock, Duration::from_secs(10))?;
        sock.set_nonblocking(true)?;
        Ok(TlsStream::new(mio::net::TcpStream::from_std(sock), conn))
    }

    /// Sends `requests` get lines in one batch and reads until `replies`
    /// complete replies are in `rx`, polling the socket (bounded).
    fn exchange(s: &mut TlsStream, requests: usize, value_len: usize) -> ReplyBuffer {
        let mut out: Vec<u8> = b"get k\r\n".repeat(requests);
        let mut poll = mio::Poll::new().unwrap();
        poll.registry()
            .register(
                &mut s.socket,
                mio::Token(0),
                mio::Interest::READABLE | mio::Interest::WRITABLE,
            )
            .unwrap();
        let mut events = mio::Events::with_capacity(8);
        let mut rx = ReplyBuffer::with_capacity(1024);
        let mut scratch = vec![0u8; 64 * 1024];
        let mut ends = 0;
        for _ in 0..10_000 {
            s.write_from(&mut out).unwrap();
            assert!(out.is_empty(), "the batch is taken whole");
            assert!(
                s.read_into(&mut scratch, &mut rx).unwrap(),
                "server still open"
            );
            while let Some(r) = rx.next_reply().unwrap() {
                match r {
                    protocol::client::Reply::Value { data, .. } => {
                        assert_eq!(data.len(), value_len)
                    }
                    protocol::client::Reply::End => ends += 1,
                    other => panic!("unexpected reply {other:?}"),
                }
            }
            if ends == requests {
                poll.registry().deregister(&mut s.socket).unwrap();
                return rx;
            }
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
        }
        panic!("only {ends} of {requests} replies");
    }

    #[test]
    fn requests_and_replies_cross_tls_without_a_ca() {
        let pki = Pki::new("any");
        let (addr, server) = serve_one(pki.server_config(None), 1024);
        let client = TlsClient::new(&TlsOptions::default()).unwrap();
        assert!(!client.verifies);
        let mut s = connect(&client, &addr, "127.0.0.1").unwrap();
        exchange(&mut s, 1, 1024);
        // A batch whose replies (500 x 1 KiB) span many records and reads.
        exchange(&mut s, 500, 1024);
        drop(s);
        let seen = server.join().unwrap().unwrap();
        assert_eq!(
            seen,
            b"get k\r\n".repeat(501),
            "the server saw every request, in order"
        );
    }

    #[test]
    fn a_ca_accepts_its_own_certificate_and_names_must_match() {
        let pki = Pki::new("ca");
        let opts = TlsOptions {
            ca: Some(pki.cert()),
            ..TlsOptions::default()
        };
        let client = TlsClient::new(&opts).unwrap();
        assert!(client.verifies);
        let (addr, server) = serve_one(pki.server_config(None), 5);
        let mut s = connect(&client, &addr, "localhost").unwrap();
        exchange(&mut s, 3, 5);
        drop(s);
        assert_eq!(server.join().unwrap().unwrap().len(), 3 * 7);

        // The certificate does not name example.com.
        let (addr, server) = serve_one(pki.server_config(None), 5);
        let e = connect(&client, &addr, "example.com")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TLS handshake failed") && e.contains("not valid for name \"example.com\""),
            "{e}"
        );
        let _ = server.join();

        // Another CA: the same server is not trusted.
        let other = Pki::new("other");
        let strict = TlsClient::new(&TlsOptions {
            ca: Some(other.cert()),
            ..TlsOptions::default()
        })
        .unwrap();
        let (addr, server) = serve_one(pki.server_config(None), 5);
        let e = connect(&strict, &addr, "127.0.0.1")
            .unwrap_err()
            .to_string();
        // (rcgen gives both the same subject name, so this is a bad signature.)
        assert!(e.contains("invalid peer certificate"), "{e}");
        let _ = server.join();
    }

    #[test]
    fn mutual_tls_presents_the_client_certificate() {
        let server_pki = Pki::new("mtls-server");
        let client_pki = Pki::new("mtls-client");
        // The server trusts the client's self-signed certificate as its CA.
        let config = server_pki.server_config(Some(&client_pki));
        let with_cert = TlsClient::new(&TlsOptions {
            ca: None,
            cert: Some(client_pki.cert()),
            key: Some(client_pki.key()),
        })
        .unwrap();
        let (addr, server) = serve_one(config.clone(), 8);
        let mut s = connect(&with_cert, &addr, "127.0.0.1").unwrap();
        exchange(&mut s, 2, 8);
        drop(s);
        assert!(server.join().unwrap().is_ok());

        // Without one, the server refuses (TLS 1.3: after the client's
        // handshake, at its first read).
        let (addr, server) = serve_one(config, 8);
        let bare = TlsClient::new(&TlsOptions::default()).unwrap();
        let refused = connect(&bare, &addr, "127.0.0.1").map(|mut s| {
            let mut out = b"get k\r\n".to_vec();
            s.write_from(&mut out).unwrap();
        });
        let served = server.join().unwrap();
        assert!(
            refused.is_err() || served.is_err(),
            "{refused:?} {served:?}"
        );
        assert!(served.unwrap_err().contains("certificate"));
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let pki = Pki::new("bad");
        let missing = pki.dir.join("missing.pem");
        let e = TlsClient::new(&TlsOptions {
            ca: Some(missing.clone()),
            ..TlsOptions::default()
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("missing.pem"), "{e:#}");
        // A key is not a certificate.
        let e = TlsClient::new(&TlsOptions {
            ca: Some(pki.key()),
            ..TlsOptions::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e:#}");
        let e = TlsClient::new(&TlsOptions {
            cert: Some(pki.cert()),
            ..TlsOptions::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
    }

    #[test]
    fn the_servers_close_notify_reads_as_closed() {
        let pki = Pki::new("close");
        let config = pki.server_config(None);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (sock, _) = listener.accept().unwrap();
            let conn = rustls::ServerConnection::new(config).unwrap();
            let mut s = rustls::StreamOwned::new(conn, sock);
            s.write_all(b"END\r\n").unwrap();
            s.conn.send_close_notify();
            s.flush().unwrap();
            s.sock
        });
        let client = TlsClient::new(&TlsOptions::default()).unwrap();
        let mut s = connect(&client, &addr, "127.0.0.1").unwrap();
        let _held = server.join().unwrap();
        let (mut rx, mut scratch) = (ReplyBuffer::with_capacity(64), vec![0u8; 1024]);
        let mut open = true;
        for _ in 0..1000 {
            open = s.read_into(&mut scratch, &mut rx).unwrap();
            if !open {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!open, "close_notify reads as closed");
        assert_eq!(rx.bytes(), b"END\r\n", "what came before it is kept");
    }

    #[test]
    fn a_plain_server_fails_the_handshake_in_bounded_time() {
        // Accepts and says nothing: the handshake times out.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let client = TlsClient::new(&TlsOptions::default()).unwrap();
        let mut sock = TcpStream::connect(addr).unwrap();
        let e = client
            .handshake("127.0.0.1", &mut sock, Duration::from_millis(200))
            .unwrap_err();
        assert!(e.to_string().contains("no TLS handshake within"), "{e}");
        drop(held.join().unwrap());
    }
}
