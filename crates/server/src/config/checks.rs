//! The checks after memcached's option loop, in its order (`exit(EX_USAGE)` unless said
//! otherwise): what no single row can check, because it takes two options or a default.

use super::extended::SLAB_PAGE_SIZE;
use super::refusal::{safe_strtoul, Refusal, EX_OSERR};
use super::{Binding, Draft, ListenSpec, Settings, Tunables};

fn usage<T>(message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::usage(message))
}

impl Draft {
    /// The checks, then the settings they leave.
    pub(super) fn finish(mut self) -> Result<Settings, Refusal> {
        self.check_sizes()?;
        self.check_lru()?;
        self.check_auth()?;
        self.check_ports()?;
        self.listen()?;
        let d = self;
        let mut s = d.s;
        s.verbose = s.verbose.min(super::MAX_VERBOSITY_LEVEL);
        s.napi_ids = d.napi_ids as u32;
        s.null_store = d.null_store.then(|| vec![b'x'; d.null_value_bytes]);
        Ok(s)
    }

    /// `-N` against `-t`; `-I` against `-m` and `slab_chunk_max`; `slab_sizes`.
    fn check_sizes(&mut self) -> Result<(), Refusal> {
        let (napi_ids, threads) = (self.napi_ids, self.s.threads);
        if napi_ids > threads as i64 {
            return usage(format!(
                "Number of napi_ids({napi_ids}) cannot be greater than number of threads({threads})"
            ));
        }
        let item_size_max = self.item_size_max;
        if item_size_max < 1024 {
            return usage("Item max size cannot be less than 1024 bytes.");
        }
        if item_size_max as u64 > self.s.memory_limit_bytes as u64 / 2 {
            return usage("Cannot set item size limit higher than 1/2 of memory max.");
        }
        if item_size_max > 1024 * 1024 * 1024 {
            return usage("Cannot set item size limit higher than a gigabyte.");
        }
        if item_size_max > 1024 * 1024 && !self.chunk_max_changed {
            self.chunk_max = SLAB_PAGE_SIZE / 2;
        }
        let chunk_max = self.chunk_max;
        if chunk_max > item_size_max {
            return usage(format!(
                "slab_chunk_max (bytes: {chunk_max}) cannot be larger than -I (item_size_max {item_size_max})"
            ));
        }
        // memcached divides by it; a zero or negative one crashes it.
        if chunk_max <= 0 {
            return usage(format!(
                "slab_chunk_max (bytes: {chunk_max}) must be positive"
            ));
        }
        if item_size_max % chunk_max != 0 {
            return usage(format!(
                "-I (item_size_max: {item_size_max}) must be evenly divisible by slab_chunk_max (bytes: {chunk_max})"
            ));
        }
        if SLAB_PAGE_SIZE % chunk_max != 0 {
            return usage(format!(
                "slab_chunk_max (bytes: {chunk_max}) must divide evenly into {SLAB_PAGE_SIZE} (slab_page_size)"
            ));
        }
        let classes = &mut self.s.classes;
        classes.chunk_max = chunk_max as u32;
        if let Some(list) = &self.slab_sizes {
            let sizes = parse_slab_sizes(list, classes.chunk_size, classes.chunk_max);
            classes.sizes = Some(sizes.map_err(Refusal::usage)?);
        }
        self.s.item_size_max_bytes = item_size_max as usize;
        Ok(())
    }

    /// The LRU percentages together, and `temporary_ttl` against `no_lru_maintainer`.
    fn check_lru(&self) -> Result<(), Refusal> {
        let t = &self.s.tunables;
        if !Tunables::lru_pcts_fit(t.hot_lru_pct, t.warm_lru_pct) {
            return usage("hot_lru_pct + warm_lru_pct cannot be more than 80% combined");
        }
        if t.temp_lru && !t.lru_maintainer {
            return usage("temporary_ttl requires lru_maintainer to be enabled");
        }
        Ok(())
    }

    /// `-S` and `-Y` against `-B` (each implies its protocol) and `-U`.
    fn check_auth(&mut self) -> Result<(), Refusal> {
        let s = &mut self.s;
        if self.sasl {
            if !self.protocol_specified {
                s.binding = Binding::Binary;
            } else if s.binding != Binding::Binary {
                return usage("ERROR: You cannot allow the ASCII protocol while using SASL.");
            }
            if s.udp_port != 0 {
                return usage("ERROR: Cannot enable UDP while using binary SASL authentication.");
            }
            s.sasl_pwdb = Some(std::env::var("MEMCACHED_SASL_PWDB").map_err(|_| {
                Refusal::new(
                    EX_OSERR,
                    "-S needs MEMCACHED_SASL_PWDB naming a file of user:password lines",
                )
            })?);
        }
        if s.auth_file.is_some() {
            if !self.protocol_specified {
                s.binding = Binding::Ascii;
            } else if s.binding != Binding::Ascii {
                return usage(
                    "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.",
                );
            }
        }
        Ok(())
    }

    /// The ports: `-U` alone sets the TCP port too; range; TLS and `-Y` against them.
    fn check_ports(&mut self) -> Result<(), Refusal> {
        let s = &mut self.s;
        if self.udp_specified && s.udp_port != 0 && !self.tcp_specified {
            s.port = s.udp_port;
        }
        let port = s.port;
        if port > 65535 {
            return usage(format!("ERROR: Invalid port number {port}."));
        }
        if port < -1 {
            return Err(Refusal::new(
                EX_OSERR,
                format!("failed to listen on TCP port {port}"),
            ));
        }
        if s.tls.enabled && port == 0 {
            return usage("ERROR: You cannot enable SSL without a TCP port.");
        }
        // memcached checks this after dropping privileges; same words and status.
        if s.auth_file.is_some() && s.udp_port != 0 {
            return usage("Cannot use UDP with ascii authentication enabled (-U 0 to disable)");
        }
        Ok(())
    }

    /// `-l`'s addresses (loopback when none is given), each checked as memcached's
    /// `server_sockets` reads it.
    fn listen(&mut self) -> Result<(), Refusal> {
        let listen: Vec<String> = self
            .inter
            .as_deref()
            .unwrap_or("127.0.0.1")
            .split([',', ';'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        for entry in &listen {
            ListenSpec::parse(entry, self.s.tls.enabled)
                .map_err(|e| Refusal::new(EX_OSERR, format!("{e:#}")))?;
        }
        self.s.listen = listen;
        Ok(())
    }
}

/// memcached's `_parse_slab_sizes`: `-`-separated chunk sizes, each in range and growing
/// by more than the 8-byte alignment.
fn parse_slab_sizes(list: &str, chunk_size: u32, chunk_max: u32) -> Result<Vec<u32>, String> {
    const CHUNK_ALIGN_BYTES: u32 = 8;
    const MAX_NUMBER_OF_SLAB_CLASSES: usize = 64;
    let mut sizes = Vec::new();
    let mut last = 0u32;
    for part in list.split('-').filter(|p| !p.is_empty()) {
        let size = safe_strtoul(part);
        let size = match size {
            Some(s) if s >= chunk_size && s <= chunk_max => s,
            _ => {
                return Err(format!(
                    "slab size {} is out of valid range",
                    size.unwrap_or(0)
                ))
            }
        };
        if last >= size {
            return Err(format!(
                "slab size {size} cannot be lower than or equal to a previous class size"
            ));
        }
        if size <= last + CHUNK_ALIGN_BYTES {
            return Err(format!(
                "slab size {size} must be at least {CHUNK_ALIGN_BYTES} bytes larger than previous class"
            ));
        }
        sizes.push(size);
        last = size;
        if sizes.len() >= MAX_NUMBER_OF_SLAB_CLASSES - 1 {
            return Err("too many slab classes specified".into());
        }
    }
    if sizes.is_empty() {
        return Err("slab_sizes: no sizes given".into());
    }
    Ok(sizes)
}
