//! `--tls`: the workers' TLS transport, rustls driven sans-I/O from the
//! worker's own mio loop, so a TLS connection costs the same system calls as
//! a plain one: one `read` and one `writev` per connection per wake-up. The
//! configuration and the handshake are `crate::tls`.
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

use std::io::{self, Read, Write};

use protocol::client::ReplyBuffer;
use rustls::ClientConnection;

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
    use crate::tls::{TlsClient, TlsOptions};
    use rustls::crypto::ring;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use rustls::RootCertStore;
    use std::net::{TcpListener, TcpStream};
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::Duration;

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
