//! memcached's TLS options: `-Z` and the `-o ssl_*` suboptions, one row each, parsed
//! with memcached's checks and messages. Loading the certificates is `admin/tls.rs`'s
//! work; this file only reads the command line.

use super::refusal::Refusal;
use super::table::{fail, num, set, sub, text, yes_no, Acts, Arg, Row};
use super::Draft;
use anyhow::{bail, Result};

use Acts::{Inert, On};

/// memcached's `SSL_FILETYPE_PEM` and `SSL_FILETYPE_ASN1` (its `ssl_keyformat`).
pub const KEYFORMAT_PEM: i32 = 1;
pub const KEYFORMAT_DER: i32 = 2;

/// docs/operations.md's words for the TLS options ferrocache acts on.
const TLS: &str = "\"TLS\" below";

/// The TLS options, as the rows write them.
fn tls(d: &mut Draft) -> &mut TlsOptions {
    &mut d.s.tls
}

/// A TLS option's number, as memcached's parser for these reads it.
fn number<T: std::str::FromStr>(a: Arg<'_>) -> Result<T, Refusal> {
    a.value()?.trim().parse().map_err(|_| a.unparsed())
}

/// The `ssl_*` rows, in `-h`'s order.
pub const ROWS: &[Row] = &[
    sub(
        "ssl_chain_cert",
        |d, a| set(&mut tls(d).chain_cert, Some(a.value()?.into())),
        On("tls.chain_cert: the server's certificate chain (admin/tls.rs)"),
        &[text("ssl_chain_cert", |v| {
            v.s.tls.chain_cert.as_deref().unwrap_or("(null)").into()
        })],
        &["certificate chain file in PEM format"],
        TLS,
    ),
    sub(
        "ssl_key",
        |d, a| set(&mut tls(d).key, Some(a.value()?.into())),
        On("tls.key: its private key"),
        &[text("ssl_key", |v| {
            v.s.tls.key.as_deref().unwrap_or("(null)").into()
        })],
        &["private key, if not part of the -ssl_chain_cert"],
        TLS,
    ),
    sub(
        "ssl_keyformat",
        |d, a| set(&mut tls(d).keyformat, number(a)?),
        On("tls.keyformat: how the key is read"),
        &[num("ssl_keyformat", |v| v.s.tls.keyformat.into())],
        &["private key format (PEM, DER or ENGINE) (default: PEM)"],
        TLS,
    ),
    sub(
        "ssl_verify_mode",
        |d, a| {
            let mode = match number(a)? {
                0 => VerifyMode::None,
                1 => VerifyMode::Peer,
                2 => VerifyMode::Required,
                3 => VerifyMode::RequiredOnce,
                _ => return fail("Invalid ssl_verify_mode. Use help to see valid options."),
            };
            set(&mut tls(d).verify_mode, mode)
        },
        On("tls.verify_mode: client certificates asked for or required"),
        &[num("ssl_verify_mode", |v| {
            v.s.tls.verify_mode.openssl_flags().into()
        })],
        &[
            "peer certificate verification mode, default is 0(None).",
            "valid values are 0(None), 1(Request), 2(Require)",
            "or 3(Once)",
        ],
        TLS,
    ),
    sub(
        "ssl_ciphers",
        |d, a| set(&mut tls(d).ciphers, Some(a.value()?.into())),
        On("tls.ciphers: the TLS 1.2 suites offered"),
        &[text("ssl_ciphers", |v| {
            v.s.tls.ciphers.as_deref().unwrap_or("NULL").into()
        })],
        &["specify cipher list to be used"],
        TLS,
    ),
    sub(
        "ssl_ca_cert",
        |d, a| set(&mut tls(d).ca_cert, Some(a.value()?.into())),
        On("tls.ca_cert: the client CAs"),
        &[text("ssl_ca_cert", |v| {
            v.s.tls.ca_cert.as_deref().unwrap_or("NULL").into()
        })],
        &["PEM format file of acceptable client CA's"],
        TLS,
    ),
    sub(
        "ssl_wbuf_size",
        |d, a| {
            let kib: u32 = number(a)?;
            set(&mut tls(d).wbuf_size, kib.saturating_mul(1024))
        },
        // Records are sized by the replies, up to 16 KiB each (docs/protocol.md).
        Inert,
        &[num("ssl_wbuf_size", |v| v.s.tls.wbuf_size.into())],
        &[
            "size in kilobytes of per-connection SSL output buffer",
            "(default: 16)",
        ],
        "checked and shown: TLS records are sized by the replies (docs/protocol.md, \"TLS\")",
    ),
    sub(
        "ssl_session_cache",
        |d, _| set(&mut tls(d).session_cache, true),
        On("tls.session_cache: session resumption"),
        &[yes_no("ssl_session_cache", |v| v.s.tls.session_cache)],
        &[
            "enable server-side SSL session cache, to support session",
            "resumption",
        ],
        TLS,
    ),
    sub(
        "ssl_kernel_tls",
        |d, _| set(&mut tls(d).kernel_tls, true),
        On("tls.kernel_tls: refused at start, as a build without it refuses"),
        &[yes_no("ssl_kernel_tls", |v| v.s.tls.kernel_tls)],
        &["enable kernel TLS offload"],
        TLS,
    ),
    sub(
        "ssl_min_version",
        |d, a| {
            let version = match number(a)? {
                v @ 0..=3 => v,
                _ => return fail("Invalid ssl_min_version. Use help to see valid options."),
            };
            set(&mut tls(d).min_version, version)
        },
        On("tls.min_version: the oldest TLS version served"),
        &[text("ssl_min_version", |v| {
            v.s.tls.min_version_name().into()
        })],
        &[
            "minimum protocol version to accept (default: tlsv1.2)",
            "valid values are 0(tlsv1.0), 1(tlsv1.1), 2(tlsv1.2), or 3(tlsv1.3).",
        ],
        TLS,
    ),
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
    /// memcached's per-connection output buffer, bytes: shown only (records are sized by
    /// the replies here).
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

    /// The TLS options `-o LIST` gives, or the refusal's message.
    fn tls(list: &str) -> Result<TlsOptions, String> {
        let args = ["-o".to_string(), list.to_string()];
        match crate::config::Settings::parse("ferrocache", &args) {
            Ok(crate::config::Parsed::Run(s)) => Ok(s.tls),
            Ok(crate::config::Parsed::Print(text)) => panic!("printed {text}"),
            Err(r) => Err(r.message),
        }
    }

    #[test]
    fn options_take_memcached_values() {
        let t =
            tls("ssl_verify_mode=3,ssl_wbuf_size=32,ssl_min_version=3,ssl_session_cache").unwrap();
        assert_eq!(t.verify_mode.openssl_flags(), 7);
        assert_eq!(t.wbuf_size, 32 * 1024);
        assert_eq!(t.min_version_name(), "tlsv1.3");
        assert!(t.session_cache);
        assert_eq!(
            tls("ssl_verify_mode=4").unwrap_err(),
            "Invalid ssl_verify_mode. Use help to see valid options."
        );
        assert_eq!(tls("ssl_key").unwrap_err(), "Missing ssl_key argument");
        assert_eq!(
            tls("ssl_min_version=x").unwrap_err(),
            "could not parse argument to ssl_min_version"
        );
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
        assert_eq!(
            (spec.host.as_str(), spec.port, spec.notls),
            ("::1", Some(7000), false)
        );
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
