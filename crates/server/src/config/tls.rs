//! memcached's TLS options: `-Z` and the `-o ssl_*` suboptions, parsed with memcached's
//! checks and messages. Loading the certificates is `admin/tls.rs`'s work; this file
//! only reads the command line.

use anyhow::{bail, Result};

/// memcached's `SSL_FILETYPE_PEM` and `SSL_FILETYPE_ASN1` (its `ssl_keyformat`).
pub const KEYFORMAT_PEM: i32 = 1;
pub const KEYFORMAT_DER: i32 = 2;

/// The `-o` suboptions this file reads.
pub const TLS_OPTIONS: &[&str] = &[
    "ssl_chain_cert",
    "ssl_key",
    "ssl_keyformat",
    "ssl_verify_mode",
    "ssl_ciphers",
    "ssl_ca_cert",
    "ssl_wbuf_size",
    "ssl_session_cache",
    "ssl_kernel_tls",
    "ssl_min_version",
];

/// Client certificate checks, memcached's `ssl_verify_mode` 0 to 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// 0: no client certificate is asked for.
    None,
    /// 1: a client certificate is asked for and checked if sent, but not required.
    Peer,
    /// 2: a valid client certificate is required.
    Required,
    /// 3: as 2, checked once per session (memcached's `SSL_VERIFY_CLIENT_ONCE`; TLS
    /// 1.2 and 1.3 without renegotiation check once anyway).
    RequiredOnce,
}

impl VerifyMode {
    /// OpenSSL's flag word, which `stats settings` prints as memcached does.
    #[must_use]
    pub fn openssl_flags(self) -> u32 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Peer => 1,
            VerifyMode::Required => 1 | 2,
            VerifyMode::RequiredOnce => 1 | 2 | 4,
        }
    }

    /// Whether a client without a certificate is refused.
    #[must_use]
    pub fn requires_certificate(self) -> bool {
        matches!(self, VerifyMode::Required | VerifyMode::RequiredOnce)
    }
}

/// Everything `-Z` and `-o ssl_*` set, with memcached's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// `-Z`: TCP listeners speak TLS, except those given as `-l notls:ADDR`.
    pub enabled: bool,
    pub chain_cert: Option<String>,
    pub key: Option<String>,
    pub keyformat: i32,
    pub verify_mode: VerifyMode,
    /// OpenSSL cipher list (TLS 1.2 suites; TLS 1.3's are not restricted by it, as in
    /// OpenSSL).
    pub ciphers: Option<String>,
    pub ca_cert: Option<String>,
    /// Bytes of plaintext encrypted per write (memcached's per-connection buffer).
    pub wbuf_size: u32,
    pub session_cache: bool,
    pub kernel_tls: bool,
    /// 0 to 3: TLS 1.0, 1.1, 1.2, 1.3. rustls speaks 1.2 and 1.3 only, so 0 and 1
    /// serve 1.2 and up (`docs/protocol.md`).
    pub min_version: u8,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            enabled: false,
            chain_cert: None,
            key: None,
            keyformat: KEYFORMAT_PEM,
            verify_mode: VerifyMode::None,
            ciphers: None,
            ca_cert: None,
            wbuf_size: 16 * 1024,
            session_cache: false,
            kernel_tls: false,
            min_version: 2,
        }
    }
}

impl TlsOptions {
    /// Take one `-o KEY=VALUE` suboption; `false` when it is not a TLS one. Values are
    /// checked as memcached checks them, with its messages.
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool> {
        let needs = |v: Option<&str>| -> Result<String> {
            match v {
                Some(v) => Ok(v.to_string()),
                None => bail!("Missing {key} argument"),
            }
        };
        match key {
            "ssl_chain_cert" => self.chain_cert = Some(needs(value)?),
            "ssl_key" => self.key = Some(needs(value)?),
            "ssl_ciphers" => self.ciphers = Some(needs(value)?),
            "ssl_ca_cert" => self.ca_cert = Some(needs(value)?),
            "ssl_keyformat" => {
                self.keyformat = number(key, &needs(value)?)?;
            }
            "ssl_verify_mode" => {
                self.verify_mode = match number(key, &needs(value)?)? {
                    0 => VerifyMode::None,
                    1 => VerifyMode::Peer,
                    2 => VerifyMode::Required,
                    3 => VerifyMode::RequiredOnce,
                    _ => bail!("Invalid ssl_verify_mode. Use help to see valid options."),
                };
            }
            "ssl_wbuf_size" => {
                let kib: u32 = number(key, &needs(value)?)?;
                self.wbuf_size = kib.saturating_mul(1024);
            }
            "ssl_session_cache" => self.session_cache = true,
            "ssl_kernel_tls" => self.kernel_tls = true,
            "ssl_min_version" => {
                self.min_version = match number(key, &needs(value)?)? {
                    v @ 0..=3 => v,
                    _ => bail!("Invalid ssl_min_version. Use help to see valid options."),
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// memcached's name of the minimum version, for `stats settings`.
    #[must_use]
    pub fn min_version_name(&self) -> &'static str {
        match self.min_version {
            0 => "tlsv1.0",
            1 => "tlsv1.1",
            2 => "tlsv1.2",
            _ => "tlsv1.3",
        }
    }
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    match value.trim().parse() {
        Ok(n) => Ok(n),
        Err(_) => bail!("could not parse argument to {key}"),
    }
}

/// One `-l` entry: memcached's `notls:` prefix, and an address with or without a port
/// (`HOST`, `HOST:PORT`, `[V6]`, `[V6]:PORT`, or a bare IPv6 address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenSpec {
    pub host: String,
    pub port: Option<u16>,
    /// Plain TCP on this listener although `-Z` is on.
    pub notls: bool,
}

impl ListenSpec {
    /// Parse as memcached's `server_sockets` does; `notls:` needs `-Z`.
    pub fn parse(entry: &str, tls_enabled: bool) -> Result<ListenSpec> {
        let mut p = entry;
        let mut notls = false;
        if let Some(rest) = p.strip_prefix("notls") {
            if !tls_enabled {
                bail!("'notls' option is valid only when SSL is enabled");
            }
            notls = true;
            // memcached skips the prefix and the one character after it.
            p = rest.get(1..).unwrap_or("");
        }
        let (host, port) = if let Some(rest) = p.strip_prefix('[') {
            let Some(end) = rest.find(']') else {
                bail!("Invalid IPV6 address: \"{p}\"");
            };
            let port = rest[end + 1..].strip_prefix(':');
            (&rest[..end], port)
        } else {
            match p.split_once(':') {
                // One colon: HOST:PORT. More: an IPv6 address without a port.
                Some((h, port)) if !port.contains(':') => (h, Some(port)),
                _ => (p, None),
            }
        };
        let port = match port {
            Some(s) => match s.parse::<u16>() {
                Ok(n) => Some(n),
                Err(_) => bail!("Invalid port number: \"{s}\""),
            },
            None => None,
        };
        Ok(ListenSpec {
            host: host.to_string(),
            port,
            notls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_take_memcached_values() {
        let mut t = TlsOptions::default();
        assert!(t.set("ssl_verify_mode", Some("3")).unwrap());
        assert_eq!(t.verify_mode.openssl_flags(), 7);
        assert!(t.set("ssl_wbuf_size", Some("32")).unwrap());
        assert_eq!(t.wbuf_size, 32 * 1024);
        assert!(t.set("ssl_min_version", Some("3")).unwrap());
        assert_eq!(t.min_version_name(), "tlsv1.3");
        assert!(t.set("ssl_session_cache", None).unwrap());
        assert!(t.session_cache);
        assert!(!t.set("idle_timeout", Some("5")).unwrap());
        let err = t.set("ssl_verify_mode", Some("4")).unwrap_err().to_string();
        assert_eq!(err, "Invalid ssl_verify_mode. Use help to see valid options.");
        let err = t.set("ssl_key", None).unwrap_err().to_string();
        assert_eq!(err, "Missing ssl_key argument");
        let err = t.set("ssl_min_version", Some("x")).unwrap_err().to_string();
        assert_eq!(err, "could not parse argument to ssl_min_version");
    }

    #[test]
    fn listen_entries_as_memcached_reads_them() {
        let spec = ListenSpec::parse("notls:127.0.0.1:11212", true).unwrap();
        assert_eq!(
            spec,
            ListenSpec {
                host: "127.0.0.1".into(),
                port: Some(11212),
                notls: true
            }
        );
        let spec = ListenSpec::parse("[::1]:7000", true).unwrap();
        assert_eq!((spec.host.as_str(), spec.port, spec.notls), ("::1", Some(7000), false));
        let spec = ListenSpec::parse("::1", false).unwrap();
        assert_eq!((spec.host.as_str(), spec.port), ("::1", None));
        let spec = ListenSpec::parse("localhost", false).unwrap();
        assert_eq!((spec.host.as_str(), spec.port), ("localhost", None));
        assert_eq!(
            ListenSpec::parse("notls:127.0.0.1", false)
                .unwrap_err()
                .to_string(),
            "'notls' option is valid only when SSL is enabled"
        );
        assert_eq!(
            ListenSpec::parse("127.0.0.1:port", false)
                .unwrap_err()
                .to_string(),
            "Invalid port number: \"port\""
        );
    }
}
