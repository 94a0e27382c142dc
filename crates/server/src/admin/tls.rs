//! TLS (`-Z`): the server's rustls configuration, built from memcached's `ssl_*`
//! options, swapped whole by `refresh_certs`, and the counters `stats` shows.
//!
//! Connections take the configuration current when they are accepted; a refresh
//! changes what later connections get, and open ones keep theirs, as with memcached's
//! shared `SSL_CTX`. The per-connection work (handshake, records) is the I/O layer's
//! (`io/tls.rs`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{
    NoServerSessionStorage, ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier,
};
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};

use crate::config::tls::{KEYFORMAT_DER, KEYFORMAT_PEM};
use crate::config::{TlsOptions, VerifyMode};

/// Memory an open TLS connection's session holds, as counted in `conn_state_bytes`
/// (and so in what connections charge to `-m`): rustls' state with its buffers as an
/// idle connection keeps them, measured as RSS per idle TLS connection less a plain
/// one's (docs/perf-notes.md, "TLS: memory per idle connection").
pub const SESSION_BYTES: u64 = 8 * 1024;

/// Sessions the server-side cache keeps with `ssl_session_cache`: OpenSSL's default
/// `SSL_SESSION_CACHE_MAX_SIZE_DEFAULT`.
const SESSION_CACHE_ENTRIES: usize = 20 * 1024;

/// The TLS state every worker shares.
pub struct Tls {
    options: TlsOptions,
    config: RwLock<Arc<ServerConfig>>,
    /// Server time of the last successful load (`time_since_server_cert_refresh`).
    last_refresh: AtomicU32,
    /// Handshakes that failed: bad input, a refused or missing client certificate,
    /// a timeout (memcached's `ssl_handshake_errors`).
    pub handshake_errors: AtomicU64,
    /// Connections closed for a TLS error after their handshake (ferrocache's own
    /// `ssl_proto_errors`).
    pub proto_errors: AtomicU64,
    /// Sessions stored by the server-side cache (`ssl_new_sessions`).
    new_sessions: Arc<AtomicU64>,
    /// TLS connections open now (each holds a [`Sessions`] guard).
    open: Arc<AtomicU64>,
}

/// Counts one open TLS connection while it lives.
pub struct Sessions(Arc<AtomicU64>);

impl Drop for Sessions {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Tls {
    /// The TLS state for `options`, or `None` without `-Z`. The error is memcached's
    /// start-up message for the same fault.
    pub fn new(options: &TlsOptions, now: u32) -> Result<Option<Tls>, String> {
        if !options.enabled {
            return Ok(None);
        }
        if options.kernel_tls {
            return Err("Kernel TLS offload is not available".to_string());
        }
        let new_sessions = Arc::new(AtomicU64::new(0));
        let config = build(options, &new_sessions)?;
        Ok(Some(Tls {
            options: options.clone(),
            config: RwLock::new(Arc::new(config)),
            last_refresh: AtomicU32::new(now),
            handshake_errors: AtomicU64::new(0),
            proto_errors: AtomicU64::new(0),
            new_sessions,
            open: Arc::new(AtomicU64::new(0)),
        }))
    }

    /// The configuration a new connection takes.
    #[must_use]
    pub fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reload the certificate chain, key and CA file (`refresh_certs`); on failure the
    /// old configuration stays and the error is memcached's message.
    pub fn refresh(&self, now: u32) -> Result<(), String> {
        let config = build(&self.options, &self.new_sessions)?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        self.last_refresh.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// Count a TLS connection as open until the guard drops.
    #[must_use]
    pub fn opened(&self) -> Sessions {
        self.open.fetch_add(1, Ordering::Relaxed);
        Sessions(Arc::clone(&self.open))
    }

    /// Bytes the open TLS sessions hold, estimated ([`SESSION_BYTES`] each).
    #[must_use]
    pub fn session_bytes(&self) -> u64 {
        self.open.load(Ordering::Relaxed) * SESSION_BYTES
    }

    #[must_use]
    pub fn options(&self) -> &TlsOptions {
        &self.options
    }

    #[must_use]
    pub fn seconds_since_refresh(&self, now: u32) -> u32 {
        now.saturating_sub(self.last_refresh.load(Ordering::Relaxed))
    }

    #[must_use]
    pub fn new_sessions(&self) -> u64 {
        self.new_sessions.load(Ordering::Relaxed)
    }
}

/// A rustls server configuration from memcached's options, checked in memcached's
/// order: chain, key, the pair, then the CA file.
fn build(o: &TlsOptions, new_sessions: &Arc<AtomicU64>) -> Result<ServerConfig, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(list) = &o.ciphers {
        provider.cipher_suites = select_suites(&provider.cipher_suites, list)
            .ok_or_else(|| format!("Error setting the provided cipher(s): {list}"))?;
    }
    let provider = Arc::new(provider);
    let versions: &[&rustls::SupportedProtocolVersion] = if o.min_version >= 3 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let chain_path = o.chain_cert.as_deref().unwrap_or("(null)");
    let chain = load_chain(o.chain_cert.as_deref())
        .map_err(|e| format!("Error loading the certificate chain: {chain_path} : {e}"))?;
    let key_path = o.key.as_deref().unwrap_or("(null)");
    let key = load_key(o.key.as_deref(), o.keyformat)
        .map_err(|e| format!("Error loading the key: {key_path} : {e}"))?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(|e| format!("Error setting the minimum TLS version: {e}"))?;
    let builder = if o.verify_mode == VerifyMode::None {
        builder.with_no_client_auth()
    } else {
        let ca = o.ca_cert.as_deref().ok_or_else(|| {
            format!(
                "ssl_verify_mode {} needs ssl_ca_cert: the client certificates' CA file",
                o.verify_mode.openssl_flags().min(3)
            )
        })?;
        let mut roots = RootCertStore::empty();
        let certs = load_chain(Some(ca))
            .map_err(|e| format!("Error loading the CA certificate: {ca} : {e}"))?;
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("Error loading the CA certificate: {ca} : {e}"))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if o.verify_mode.requires_certificate() {
            verifier
        } else {
            verifier.allow_unauthenticated()
        };
        let verifier = verifier
            .build()
            .map_err(|e| format!("Error loading the CA certificate: {ca} : {e}"))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("Error validating the certificate: {e}"))?;
    if o.session_cache {
        config.session_storage = Arc::new(CountingCache {
            inner: ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES),
            stored: Arc::clone(new_sessions),
        });
    } else {
        // memcached's default: no resumption, so nothing is kept per session.
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    Ok(config)
}

fn load_chain(path: Option<&str>) -> Result<Vec<CertificateDer<'static>>, String> {
    let path = path.ok_or("no file given")?;
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no certificate in the file".to_string());
    }
    Ok(certs)
}

fn load_key(path: Option<&str>, format: i32) -> Result<PrivateKeyDer<'static>, String> {
    let path = path.ok_or("no file given")?;
    match format {
        KEYFORMAT_PEM => PrivateKeyDer::from_pem_file(path).map_err(|e| e.to_string()),
        KEYFORMAT_DER => {
            let der = std::fs::read(path).map_err(|e| e.to_string())?;
            PrivateKeyDer::try_from(der).map_err(str::to_string)
        }
        other => Err(format!(
            "key format {other} is not served (1: PEM, 2: DER; engines are not)"
        )),
    }
}

/// The TLS 1.2 suites an OpenSSL cipher list names, with every TLS 1.3 suite, which
/// OpenSSL's cipher list does not restrict either; `None` when no TLS 1.2 suite is
/// named, where OpenSSL's `SSL_CTX_set_cipher_list` fails. Understood: OpenSSL and
/// IANA suite names, `ALL`, `DEFAULT`, `HIGH`, `ECDHE`/`EECDH`/`kEECDH`, `AESGCM`,
/// `CHACHA20`, `AES128`, `AES256`; `!`, `-` and `+` entries are skipped.
fn select_suites(all: &[SupportedCipherSuite], list: &str) -> Option<Vec<SupportedCipherSuite>> {
    let tokens: Vec<&str> = list
        .split([':', ',', ' '])
        .filter(|t| !t.is_empty() && !t.starts_with(['!', '-', '+']))
        .collect();
    let names = |s: &SupportedCipherSuite| {
        let iana = format!("{:?}", s.suite());
        (openssl_name(&iana), iana)
    };
    let wanted = |s: &SupportedCipherSuite| {
        let (openssl, iana) = names(s);
        tokens.iter().any(|t| match *t {
            "ALL" | "DEFAULT" | "HIGH" | "ECDHE" | "EECDH" | "kEECDH" => true,
            "AESGCM" => iana.contains("_GCM_"),
            "CHACHA20" => iana.contains("CHACHA20"),
            "AES128" => iana.contains("AES_128"),
            "AES256" => iana.contains("AES_256"),
            t => t == iana || t == openssl,
        })
    };
    let tls12: Vec<SupportedCipherSuite> = all
        .iter()
        .filter(|s| s.tls13().is_none() && wanted(s))
        .copied()
        .collect();
    if tls12.is_empty() {
        return None;
    }
    let mut out: Vec<SupportedCipherSuite> = all
        .iter()
        .filter(|s| s.tls13().is_some())
        .copied()
        .collect();
    out.extend(tls12);
    Some(out)
}

/// OpenSSL's name of a TLS 1.2 ECDHE suite from its IANA name
/// (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256` is `ECDHE-RSA-AES128-GCM-SHA256`).
fn openssl_name(iana: &str) -> String {
    let Some(rest) = iana.strip_prefix("TLS_ECDHE_") else {
        return iana.to_string();
    };
    let Some((auth, cipher)) = rest.split_once("_WITH_") else {
        return iana.to_string();
    };
    let cipher = cipher
        .replace("AES_128_GCM", "AES128-GCM")
        .replace("AES_256_GCM", "AES256-GCM")
        .replace("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305")
        .replace('_', "-");
    format!("ECDHE-{auth}-{cipher}")
}

/// The server-side session cache, counting what it stores for `ssl_new_sessions`
/// (memcached counts in OpenSSL's new-session callback).
#[derive(Debug)]
struct CountingCache {
    inner: Arc<ServerSessionMemoryCache>,
    stored: Arc<AtomicU64>,
}

impl StoresServerSessions for CountingCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.stored.fetch_add(1, Ordering::Relaxed);
        self.inner.put(key, value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.take(key)
    }

    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_names_map_to_rustls_suites() {
        assert_eq!(
            openssl_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            "ECDHE-RSA-AES128-GCM-SHA256"
        );
        assert_eq!(
            openssl_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"),
            "ECDHE-ECDSA-CHACHA20-POLY1305"
        );
        let all = rustls::crypto::ring::default_provider().cipher_suites;
        let picked = select_suites(&all, "ECDHE-RSA-AES256-GCM-SHA384").unwrap();
        let tls12: Vec<String> = picked
            .iter()
            .filter(|s| s.tls13().is_none())
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert_eq!(tls12, ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]);
        // TLS 1.3 suites stay, as OpenSSL's cipher list leaves them.
        assert!(picked.iter().any(|s| s.tls13().is_some()));
        assert!(select_suites(&all, "RC4-MD5:!aNULL").is_none());
        assert_eq!(select_suites(&all, "HIGH:!aNULL").unwrap().len(), all.len());
    }

    #[test]
    fn missing_files_give_memcached_messages() {
        let mut o = TlsOptions {
            enabled: true,
            ..TlsOptions::default()
        };
        let err = Tls::new(&o, 1).err().unwrap();
        assert!(
            err.starts_with("Error loading the certificate chain: (null) : "),
            "{err}"
        );
        o.chain_cert = Some("/nonexistent/chain.pem".into());
        let err = Tls::new(&o, 1).err().unwrap();
        assert!(
            err.starts_with("Error loading the certificate chain: /nonexistent/chain.pem : "),
            "{err}"
        );
        o.kernel_tls = true;
        assert_eq!(
            Tls::new(&o, 1).err().unwrap(),
            "Kernel TLS offload is not available"
        );
        o.enabled = false;
        assert!(Tls::new(&o, 1).unwrap().is_none());
    }
}
