//! `-o`: memcached 1.6.18's suboptions (its `getsubopt` switch in `main()` and extstore's
//! `storage_read_config`), with its checks, messages and `return 1`.
//!
//! Every suboption memcached's Debian build accepts is accepted here. Those ferrocache acts
//! on: `idle_timeout`, the `ssl_*` ones (`tls.rs`), the crawler and LRU tunables
//! (`admin/crawler.rs`), and the slab sizing ones, which shape the slab classes that
//! `stats slabs` and `stats items` report (`storage::classes`). The rest tune memcached
//! internals that ferrocache does not have; they are kept for `stats settings` and change
//! nothing. The `ext_*` ones configure the flash tier (`storage::flash`), as extstore's
//! parser reads them: see [`Extended::flash_config`].

use super::refusal::{atof, atoi, safe_strtod, safe_strtol, safe_strtoul, Refusal};
use super::TlsOptions;

/// memcached's `slab_page_size`: 1 MiB.
pub const SLAB_PAGE_SIZE: i64 = 1024 * 1024;

/// What the `-o` options decided, for the checks after the option loop.
#[derive(Debug, Clone)]
pub struct Extended {
    /// Every option as given, for `stats settings` (values normalised to what memcached
    /// reads, so that `slab_automove` alone is `1`).
    pub list: Vec<(String, String)>,
    pub idle_timeout: u32,
    /// `slab_sizes`, still unparsed (memcached parses it after the loop).
    pub slab_sizes: Option<String>,
    /// `slab_chunk_size_max`: half a page unless set.
    pub chunk_max: i64,
    pub chunk_max_changed: bool,
    pub hot_lru_pct: i64,
    pub warm_lru_pct: i64,
    pub temp_lru: bool,
    pub lru_maintainer: bool,
    /// Each `ext_path`: the file and its size in bytes.
    pub ext_paths: Vec<(std::path::PathBuf, u64)>,
}

impl Default for Extended {
    fn default() -> Extended {
        Extended {
            list: Vec::new(),
            idle_timeout: 0,
            slab_sizes: None,
            chunk_max: SLAB_PAGE_SIZE / 2,
            chunk_max_changed: false,
            hot_lru_pct: 20,
            warm_lru_pct: 40,
            temp_lru: false,
            lru_maintainer: true,
            ext_paths: Vec::new(),
        }
    }
}

/// The `ext_*` options that take a 32-bit number, and `slab_automove_freeratio` and
/// `ext_max_frag`, which take a float: accepted as extstore's parser accepts them.
const EXT_NUMBERS: &[&str] = &[
    "ext_page_size",
    "ext_wbuf_size",
    "ext_threads",
    "ext_io_depth",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
];

/// Options that take no value and are inert here.
const INERT_FLAGS: &[&str] = &[
    "maxconns_fast",
    "no_maxconns_fast",
    "no_hashexpand",
    "track_sizes",
    "no_inline_ascii_resp",
    "inline_ascii_resp",
    "modern",
    "no_drop_privileges",
    "drop_privileges",
    "ext_drop_unread",
    // memcached-debug's: its tests pass it always; ferrocache has no sandbox to relax.
    "relaxed_privileges",
];

impl Extended {
    /// Apply one `-o` argument (comma-separated suboptions), in order.
    pub fn apply(&mut self, arg: &str, tls: &mut TlsOptions) -> Result<(), Refusal> {
        for token in arg.split(',').filter(|t| !t.is_empty()) {
            self.apply_one(token, tls)?;
        }
        Ok(())
    }

    fn apply_one(&mut self, token: &str, tls: &mut TlsOptions) -> Result<(), Refusal> {
        let (key, value) = match token.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (token, None),
        };
        let fail = |m: String| Err(Refusal::failure(m));
        if tls
            .set(key, value)
            .map_err(|e| Refusal::failure(format!("{e}")))?
        {
            return Ok(());
        }
        // `Missing <what>` when there is no `=value`.
        let need = |what: &str| value.ok_or_else(|| Refusal::failure(format!("Missing {what}")));
        let shown: String = match key {
            "hashpower" => {
                let n = atoi(need("numeric argument for hashpower")?);
                if n < 12 {
                    return fail(format!("Initial hashtable multiplier of {n} is too low"));
                }
                if n > 32 {
                    return fail(format!(
                        "Initial hashtable multiplier of {n} is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance"
                    ));
                }
                n.to_string()
            }
            "slab_reassign" | "no_slab_reassign" | "lru_crawler" | "no_lru_crawler" => {
                String::new()
            }
            "slab_automove" => {
                let n = value.map_or(1, atoi);
                if !(0..=2).contains(&n) {
                    return fail("slab_automove must be between 0 and 2".into());
                }
                n.to_string()
            }
            "no_slab_automove" => {
                self.list.push(("slab_automove".into(), "0".into()));
                String::new()
            }
            "slab_automove_ratio" => {
                let r = atof(need("slab_automove_ratio argument")?);
                if r <= 0.0 || r > 1.0 {
                    return fail("slab_automove_ratio must be > 0 and < 1".into());
                }
                // memcached's check lets 1 through (its message says < 1); the crawler's
                // tunables (`admin/crawler.rs`) hold it to < 1. The ratio is inert here,
                // so 1 is kept as just under it, which `stats settings` shows as 1.00.
                r.min(0.999_999).to_string()
            }
            "slab_automove_window" => {
                let n = atoi(need("slab_automove_window argument")?);
                if n < 3 {
                    return fail("slab_automove_window must be > 2".into());
                }
                n.to_string()
            }
            "tail_repair_time" => {
                let n = atoi(need("numeric argument for tail_repair_time")?);
                if n < 10 {
                    return fail("Cannot set tail_repair_time to less than 10 seconds".into());
                }
                n.to_string()
            }
            "hash_algorithm" => {
                let v = need("hash_algorithm argument")?;
                if !["jenkins", "murmur3", "xxh3"].contains(&v) {
                    return fail("Unknown hash_algorithm option (jenkins, murmur3, xxh3)".into());
                }
                v.to_string()
            }
            "lru_crawler_sleep" => {
                let n = atoi(need("lru_crawler_sleep value")?);
                if !(0..=1_000_000).contains(&n) {
                    return fail("LRU crawler sleep must be between 0 and 1 second".into());
                }
                n.to_string()
            }
            "lru_crawler_tocrawl" => match safe_strtoul(need("lru_crawler_tocrawl value")?) {
                Some(n) => n.to_string(),
                None => return fail("lru_crawler_tocrawl takes a numeric 32bit value".into()),
            },
            "lru_maintainer" => {
                self.lru_maintainer = true;
                String::new()
            }
            "no_lru_maintainer" => {
                self.lru_maintainer = false;
                String::new()
            }
            "hot_lru_pct" | "warm_lru_pct" => {
                let n = atoi(need(&format!("{key} argument"))?);
                if !(1..80).contains(&n) {
                    return fail(format!("{key} must be > 1 and < 80"));
                }
                if key == "hot_lru_pct" {
                    self.hot_lru_pct = n;
                } else {
                    self.warm_lru_pct = n;
                }
                n.to_string()
            }
            "hot_max_factor" | "warm_max_factor" => {
                let f = atof(need(&format!("{key} argument"))?);
                if f <= 0.0 {
                    return fail(format!("{key} must be > 0"));
                }
                f.to_string()
            }
            "temporary_ttl" => {
                self.temp_lru = true;
                atoi(need("temporary_ttl argument")?).max(0).to_string()
            }
            "idle_timeout" => {
                let n = atoi(need("numeric argument for idle_timeout")?);
                self.idle_timeout = u32::try_from(n).unwrap_or(0);
                n.to_string()
            }
            "watcher_logbuf_size" | "worker_logbuf_size" | "read_buf_mem_limit" => {
                let v = need(&format!("{key} argument"))?;
                if safe_strtoul(v).is_none() {
                    return fail(format!("could not parse argument to {key}"));
                }
                // memcached 1.6.18 falls through from worker_logbuf_size into slab_sizes.
                if key == "worker_logbuf_size" {
                    self.slab_sizes = Some(v.to_string());
                }
                v.to_string()
            }
            "slab_sizes" => {
                // memcached crashes on a missing value (strdup(NULL)); refuse instead.
                let v = need("slab_sizes argument")?;
                self.slab_sizes = Some(v.to_string());
                v.to_string()
            }
            "slab_chunk_max" => {
                // memcached prints these and goes on (then crashes on a zero divisor);
                // ferrocache refuses.
                let v = need("slab_chunk_max argument")?;
                match safe_strtol(v) {
                    Some(n) => self.chunk_max = i64::from(n),
                    None => return fail("could not parse argument to slab_chunk_max".into()),
                }
                self.chunk_max_changed = true;
                v.to_string()
            }
            "no_chunked_items" => {
                self.chunk_max = SLAB_PAGE_SIZE;
                String::new()
            }
            "no_modern" => {
                if !self.chunk_max_changed {
                    self.chunk_max = SLAB_PAGE_SIZE;
                }
                self.lru_maintainer = false;
                for k in ["no_slab_reassign", "no_lru_crawler", "no_lru_maintainer"] {
                    self.list.push((k.into(), String::new()));
                }
                self.list.push(("slab_automove".into(), "0".into()));
                String::new()
            }
            "resp_obj_mem_limit" => {
                eprintln!("DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,");
                value.unwrap_or("").to_string()
            }
            "sock_cookie_id" => safe_strtoul(value.unwrap_or("")).unwrap_or(0).to_string(),
            "ext_path" => {
                let Some(v) = value.filter(|v| !v.is_empty()) else {
                    return fail("missing argument to ext_path, ie: ext_path=/d/file:5G".into());
                };
                match parse_ext_path(v) {
                    Ok(file) => self.ext_paths.push(file),
                    Err(why) => return fail(format!("{why}\nfailed to parse ext_path argument")),
                }
                v.to_string()
            }
            "ext_max_frag" | "slab_automove_freeratio" => {
                let v = need(&format!("{key} argument"))?;
                if safe_strtod(v).is_none() {
                    return fail(format!("could not parse argument to {key}"));
                }
                v.to_string()
            }
            k if EXT_NUMBERS.contains(&k) => {
                let v = need(&format!("{key} argument"))?;
                if safe_strtoul(v).is_none() {
                    return fail(format!("could not parse argument to {key}"));
                }
                v.to_string()
            }
            k if INERT_FLAGS.contains(&k) => value.unwrap_or("").to_string(),
            // glibc's getsubopt hands back the whole token when no name matches.
            _ => return fail(format!("Illegal suboption \"{token}\"")),
        };
        self.list.push((key.to_string(), shown));
        Ok(())
    }
}

/// extstore's `storage_conf_parse`: `path:SIZE[:bucket]`, the size a number with a unit
/// letter M, G, T or P (case-insensitive). The bucket (`compact`, `lowttl`) is accepted
/// and has no effect: pages here are not split into buckets.
fn parse_ext_path(arg: &str) -> Result<(std::path::PathBuf, u64), String> {
    let mut parts = arg.splitn(3, ':');
    let path = parts
        .next()
        .filter(|p| !p.is_empty())
        .ok_or("missing ext_path file")?;
    let size = parts
        .next()
        .filter(|s| !s.is_empty())
        .ok_or("must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)")?;
    let (number, unit) = size.split_at(size.len() - 1);
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        "p" => 1 << 50,
        _ => 0,
    };
    let base = u64::try_from(atoi(number)).unwrap_or(0);
    let bytes = base.saturating_mul(multiplier);
    if bytes == 0 {
        return Err(format!("ext_path {path}: size {size} holds no page"));
    }
    Ok((std::path::PathBuf::from(path), bytes))
}

impl Extended {
    /// The flash tier the `ext_*` options describe, or `None` without `ext_path`.
    /// Sizes are in megabytes as memcached reads them; the other tunables default as
    /// memcached's do. `ext_threads`, `ext_io_depth` and `ext_max_sleep` are accepted
    /// and shown but change nothing: reads run on the worker that asked (see
    /// docs/operations.md, "A flash tier"), and compaction runs on the maintenance
    /// thread once a second.
    pub fn flash_config(&self) -> Option<storage::FlashConfig> {
        if self.ext_paths.is_empty() {
            return None;
        }
        let mut cfg = storage::FlashConfig::new(self.ext_paths.clone());
        cfg.page_size = self.ext_number("ext_page_size", 64) << 20;
        cfg.wbuf_size = (self.ext_number("ext_wbuf_size", 4) << 20) as usize;
        cfg.tunables = self.flash_tunables();
        Some(cfg)
    }

    /// `ext_threads`: the flash tier's I/O threads (memcached's default, 1).
    pub fn ext_threads(&self) -> usize {
        self.ext_number("ext_threads", 1).max(1) as usize
    }

    /// An `ext_*` option's value as given, the last one winning.
    fn ext_value(&self, k: &str) -> Option<&str> {
        self.list
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    /// An `ext_*` number as given, or its default.
    fn ext_number(&self, k: &str, default: u64) -> u64 {
        self.ext_value(k)
            .and_then(safe_strtoul)
            .map_or(default, u64::from)
    }

    /// The run-time `ext_*` settings as given (with or without `ext_path`: memcached
    /// shows and changes them either way).
    pub fn flash_tunables(&self) -> storage::FlashTunables {
        let num = |k: &str, d: u64| self.ext_number(k, d) as u32;
        storage::FlashTunables {
            item_size: num("ext_item_size", 512),
            item_age: num("ext_item_age", u64::from(u32::MAX)),
            low_ttl: num("ext_low_ttl", 0),
            recache_rate: num("ext_recache_rate", 2000),
            compact_under: num("ext_compact_under", 0),
            drop_under: num("ext_drop_under", 0),
            max_frag: self
                .ext_value("ext_max_frag")
                .and_then(safe_strtod)
                .unwrap_or(0.8),
            drop_unread: self.ext_value("ext_drop_unread").is_some(),
        }
    }
}

/// memcached's `_parse_slab_sizes`: `-`-separated chunk sizes, each in range and growing
/// by more than the 8-byte alignment.
pub fn parse_slab_sizes(list: &str, chunk_size: u32, chunk_max: u32) -> Result<Vec<u32>, String> {
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
