//! The flash tier (memcached's extstore): values of items leaving RAM are appended to
//! files on flash, page by page, while their keys and headers stay in RAM as stubs.
//!
//! ```text
//!  file 0: | page 0 | page 1 | ... |   file 1: | page k | ... |      (ext_path, one or more)
//!  a page: | record | record | ... (appended in order, through the write buffer) ...   |
//!  record: | crc32 u32 | page version u32 | vlen u32 | klen u8 | 0 0 0 | key | value |
//! ```
//!
//! * **Pages.** Files are cut into pages of `ext_page_size`. One page at a time is open
//!   for writing; it fills through a write buffer of `ext_wbuf_size` bytes, written with
//!   one `pwrite` when full (so the disk sees large sequential writes). A page gets a
//!   fresh *version*, from one counter that only grows, each time it is opened: lower is
//!   older, and a stub whose version is not its page's points at a page reused since.
//! * **Records** carry a CRC-32 of everything after it, the page version and the key: a
//!   read checks all three, so a torn write, flipped bits, a reused page or a page read
//!   from the wrong place are a miss counted in `badcrc_from_extstore`, never wrong
//!   bytes. The check is per record, not per page: a hit reads its record alone.
//! * **Space** is counted per page: bytes and objects still referenced by a stub. When a
//!   stub is unlinked (delete, overwrite, expiry, flush, eviction of the stub itself) its
//!   record's bytes are released. Pages come back by compaction (`store/flash.rs`: live
//!   records moved to the open page, stubs updated in place) or, when no page is free,
//!   by eviction of the oldest page (`extstore_page_evictions`).
//! * **Unflushed bytes** of the open page are read from the write buffer, under its lock.

mod file;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::item::StubLoc;
use file::FlashFile;

/// Bytes of a record's header on flash.
pub(crate) const RECORD_HEADER_BYTES: usize = 16;

/// The flash tier's settings, with memcached's names and defaults (`-o ext_*`).
#[derive(Clone, Debug, PartialEq)]
pub struct FlashConfig {
    /// `ext_path`: each file and its size in bytes.
    pub files: Vec<(PathBuf, u64)>,
    /// `ext_page_size`, bytes (memcached's default: 64 MiB).
    pub page_size: u64,
    /// `ext_wbuf_size`, bytes (default 4 MiB).
    pub wbuf_size: usize,
    /// The settings `extstore` and `-o` may change while running.
    pub tunables: FlashTunables,
}

/// Settings of the tier that the `extstore` command changes at run time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashTunables {
    /// `ext_item_size`: only values at least this long go to flash (default 512).
    pub item_size: u32,
    /// `ext_item_age`: only items stored at least this many seconds ago (default
    /// `u32::MAX`, which means no age limit: items go when RAM needs their room).
    pub item_age: u32,
    /// `ext_low_ttl`: items expiring sooner than this many seconds stay in RAM (they
    /// would die on flash and fragment its pages); 0 turns it off.
    pub low_ttl: u32,
    /// `ext_recache_rate`: one flash hit in this many is copied back to RAM.
    pub recache_rate: u32,
    /// `ext_compact_under`: compact when fewer pages than this are free (0: a quarter
    /// of the pages, as memcached computes it at start-up).
    pub compact_under: u32,
    /// `ext_drop_under`: when fewer pages than this are free and no page is fragmented
    /// enough, compact the oldest page dropping items not read since they went to flash
    /// (with `drop_unread`).
    pub drop_under: u32,
    /// `ext_max_frag`: a page is compacted when its live bytes are under this share of
    /// it, scaled by how few pages are free.
    pub max_frag: f64,
    /// `ext_drop_unread`: compaction drops items not read since written to flash.
    pub drop_unread: bool,
}

impl Default for FlashTunables {
    fn default() -> Self {
        FlashTunables {
            item_size: 512,
            item_age: u32::MAX,
            low_ttl: 0,
            recache_rate: 2000,
            compact_under: 0,
            drop_under: 0,
            max_frag: 0.8,
            drop_unread: false,
        }
    }
}

impl FlashConfig {
    /// memcached's defaults for `files`.
    pub fn new(files: Vec<(PathBuf, u64)>) -> FlashConfig {
        FlashConfig {
            files,
            page_size: 64 << 20,
            wbuf_size: 4 << 20,
            tunables: FlashTunables::default(),
        }
    }
}

/// Counters of the tier, with memcached's `stats` names (`extstore_*` and the
/// `*_extstore` fetch counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    pub page_allocs: u64,
    pub page_evictions: u64,
    pub page_reclaims: u64,
    pub pages_free: u64,
    pub pages_used: u64,
    pub page_count: u64,
    pub page_size: u64,
    pub objects_evicted: u64,
    pub objects_read: u64,
    pub objects_written: u64,
    pub objects_used: u64,
    pub bytes_evicted: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub bytes_used: u64,
    pub bytes_fragmented: u64,
    pub compact_lost: u64,
    pub compact_rescues: u64,
    pub compact_skipped: u64,
    /// Flash hits looked up (`get_extstore`).
    pub get_extstore: u64,
    /// Flash hits whose page had been reused or whose record could not be read
    /// (`miss_from_extstore`).
    pub miss_from_extstore: u64,
    /// Records whose checksum, version or key did not match (`badcrc_from_extstore`).
    pub badcrc_from_extstore: u64,
    /// Flash hits copied back to RAM (`recache_from_extstore`).
    pub recache_from_extstore: u64,
    /// Reads dropped before they were made (`get_aborted_extstore`).
    pub get_aborted_extstore: u64,
    /// Write buffers the file refused (ferrocache's own): their items were lost and
    /// are counted here and in `miss_from_extstore` when read.
    pub write_errors: u64,
    /// Read errors from the file (ferrocache's own).
    pub read_errors: u64,
}

/// One page's state: `version` 0 is a free page.
#[derive(Debug, Default)]
pub(crate) struct PageState {
    pub version: u32,
    pub live_bytes: u64,
    pub live_objects: u64,
    /// Bytes written into it (records, from offset 0).
    pub written: u64,
}

#[derive(Debug)]
struct Page {
    file: usize,
    base: u64,
    state: Mutex<PageState>,
}

/// The writer's side: the open page and its buffer.
#[derive(Debug)]
struct Writer {
    open: Option<u32>,
    /// Page offset of `buf[0]`.
    buf_at: u64,
    buf: Vec<u8>,
    /// Full pages, oldest first (the order they were opened in).
    full: std::collections::VecDeque<u32>,
    free: Vec<u32>,
    next_version: u32,
}

/// Why a flash read gave no value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The page was reused, or the file could not be read: `miss_from_extstore`.
    Gone,
    /// The record's checksum, version or key did not match: `badcrc_from_extstore`.
    BadCrc,
}

/// The flash tier: files, pages, the write buffer and the counters.
#[derive(Debug)]
pub struct Flash {
    files: Vec<FlashFile>,
    pages: Box<[Page]>,
    page_size: u64,
    wbuf_size: usize,
    writer: Mutex<Writer>,
    /// The open page (`u32::MAX`: none) and how far it is on the file: a reader that
    /// finds its record below `flushed` of a page that is not open reads the file
    /// without the writer's lock. Both are stored after the write they announce.
    open_page: AtomicU32,
    flushed: AtomicU64,
    tun: Tunables,
    counters: Counters,
}

/// [`FlashTunables`] as atomics, read on every eviction and changed by `extstore`.
#[derive(Debug)]
struct Tunables {
    item_size: AtomicU32,
    item_age: AtomicU32,
    low_ttl: AtomicU32,
    recache_rate: AtomicU32,
    compact_under: AtomicU32,
    drop_under: AtomicU32,
    /// `max_frag` × 2^20, as an integer.
    max_frag: AtomicU32,
    drop_unread: AtomicBool,
}

#[derive(Debug, Default)]
struct Counters {
    page_allocs: AtomicU64,
    page_evictions: AtomicU64,
    page_reclaims: AtomicU64,
    objects_evicted: AtomicU64,
    objects_read: AtomicU64,
    objects_written: AtomicU64,
    bytes_evicted: AtomicU64,
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
    compact_lost: AtomicU64,
    compact_rescues: AtomicU64,
    compact_skipped: AtomicU64,
    get_extstore: AtomicU64,
    miss_from_extstore: AtomicU64,
    badcrc_from_extstore: AtomicU64,
    recache_from_extstore: AtomicU64,
    write_errors: AtomicU64,
    read_errors: AtomicU64,
    /// Hot flash hits seen, for `recache_rate` (memcached's per-connection
    /// `recache_counter`, here one for the tier).
    recache_tries: AtomicU64,
    aborted: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

const FRAG_ONE: f64 = (1 << 20) as f64;

impl Flash {
    /// Open the files and cut them into pages. Errors are the operator's start-up
    /// message: a file that cannot be opened, locked or allocated, or that holds no page.
    pub fn open(cfg: &FlashConfig) -> Result<Flash, String> {
        if cfg.files.is_empty() {
            return Err("extstore needs at least one ext_path".into());
        }
        if cfg.page_size < 1 << 20 || cfg.page_size > 1 << 31 {
            return Err("ext_page_size must be between 1 and 2048 megabytes".into());
        }
        if cfg.wbuf_size as u64 > cfg.page_size || cfg.wbuf_size < 64 << 10 {
            return Err("ext_wbuf_size must be at least 64 KiB and at most ext_page_size".into());
        }
        let mut files = Vec::new();
        let mut pages = Vec::new();
        for (i, (path, size)) in cfg.files.iter().enumerate() {
            let count = size / cfg.page_size;
            if count == 0 {
                return Err(format!(
                    "extstore file {} is smaller than one page ({} bytes)",
                    path.display(),
                    cfg.page_size
                ));
            }
            files.push(FlashFile::open(path, count * cfg.page_size)?);
            for p in 0..count {
                pages.push(Page {
                    file: i,
                    base: p * cfg.page_size,
                    state: Mutex::new(PageState::default()),
                });
            }
        }
        let n = pages.len() as u32;
        let t = cfg.tunables;
        // memcached: compact_under 0 means a quarter of the pages, and then drop_under
        // is a quarter too.
        let (compact_under, drop_under) = if t.compact_under == 0 {
            (n / 4, n / 4)
        } else {
            (t.compact_under, t.drop_under)
        };
        Ok(Flash {
            files,
            page_size: cfg.page_size,
            wbuf_size: cfg.wbuf_size,
            writer: Mutex::new(Writer {
                open: None,
                buf_at: 0,
                buf: Vec::with_capacity(cfg.wbuf_size),
                full: Default::default(),
                free: (0..n).rev().collect(),
                next_version: 1,
            }),
            pages: pages.into_boxed_slice(),
            open_page: AtomicU32::new(u32::MAX),
            flushed: AtomicU64::new(0),
            tun: Tunables {
                item_size: AtomicU32::new(t.item_size),
                item_age: AtomicU32::new(t.item_age),
                low_ttl: AtomicU32::new(t.low_ttl),
                recache_rate: AtomicU32::new(t.recache_rate),
                compact_under: AtomicU32::new(compact_under),
                drop_under: AtomicU32::new(drop_under),
                max_frag: AtomicU32::new((t.max_frag.clamp(0.0, 1.0) * FRAG_ONE) as u32),
                drop_unread: AtomicBool::new(t.drop_unread),
            },
            counters: Counters::default(),
        })
    }

    /// The settings in force now.
    pub fn tunables(&self) -> FlashTunables {
        let t = &self.tun;
        FlashTunables {
            item_size: t.item_size.load(Ordering::Relaxed),
            item_age: t.item_age.load(Ordering::Relaxed),
            low_ttl: t.low_ttl.load(Ordering::Relaxed),
            recache_rate: t.recache_rate.load(Ordering::Relaxed),
            compact_under: t.compact_under.load(Ordering::Relaxed),
            drop_under: t.drop_under.load(Ordering::Relaxed),
            max_frag: f64::from(t.max_frag.load(Ordering::Relaxed)) / FRAG_ONE,
            drop_unread: t.drop_unread.load(Ordering::Relaxed),
        }
    }

    /// Change the run-time settings (`extstore item_size 1024`, ...).
    pub fn set_tunables(&self, t: FlashTunables) {
        let s = &self.tun;
        s.item_size.store(t.item_size, Ordering::Relaxed);
        s.item_age.store(t.item_age, Ordering::Relaxed);
        s.low_ttl.store(t.low_ttl, Ordering::Relaxed);
        s.recache_rate.store(t.recache_rate, Ordering::Relaxed);
        s.compact_under.store(t.compact_under, Ordering::Relaxed);
        s.drop_under.store(t.drop_under, Ordering::Relaxed);
        s.max_frag.store(
            (t.max_frag.clamp(0.0, 1.0) * FRAG_ONE) as u32,
            Ordering::Relaxed,
        );
        s.drop_unread.store(t.drop_unread, Ordering::Relaxed);
    }

    /// Whether an item of this value length expiring at `exptime` (0: never) goes to
    /// flash when RAM needs its room at `now`. Age does not matter then: memcached
    /// also writes items of any age when its memory runs low; `item_age` is for the
    /// background pass ([`Flash::item_age`]).
    pub(crate) fn wants(&self, vlen: usize, exptime: u32, now: u32) -> bool {
        let t = &self.tun;
        if vlen < t.item_size.load(Ordering::Relaxed) as usize {
            return false;
        }
        let low_ttl = t.low_ttl.load(Ordering::Relaxed);
        !(low_ttl != 0 && exptime != 0 && exptime.saturating_sub(now) < low_ttl)
    }

    /// Whether items stored at least `item_age` seconds ago should go to flash before
    /// RAM needs their room (memcached's background writer); `None` when the age is
    /// unlimited.
    pub fn item_age(&self) -> Option<u32> {
        let age = self.tun.item_age.load(Ordering::Relaxed);
        (age != u32::MAX).then_some(age)
    }

    /// Bytes a record of this key and value takes on flash.
    pub(crate) fn record_len(klen: usize, vlen: usize) -> usize {
        RECORD_HEADER_BYTES + klen + vlen
    }

    /// Append a record of `key` and `value` and say where it is. `None` when it cannot
    /// be written (larger than a page, or the file refused the page before it).
    pub(crate) fn append(&self, key: &[u8], value: &[u8]) -> Option<StubLoc> {
        let len = Self::record_len(key.len(), value.len()) as u64;
        if len > self.page_size || value.len() > u32::MAX as usize {
            return None;
        }
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let page = match w.open {
            Some(p) if w.buf_at + w.buf.len() as u64 + len <= self.page_size => p,
            _ => self.open_next_page(&mut w)?,
        };
        if w.buf.len() as u64 + len > self.wbuf_size as u64 && !w.buf.is_empty() {
            self.flush(&mut w, page);
        }
        let offset = w.buf_at + w.buf.len() as u64;
        let version = {
            let mut st = self.pages[page as usize]
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            st.live_bytes += len;
            st.live_objects += 1;
            st.written = offset + len;
            st.version
        };
        let at = w.buf.len();
        w.buf.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
        w.buf.extend_from_slice(key);
        w.buf.extend_from_slice(value);
        let rec = &mut w.buf[at..];
        rec[4..8].copy_from_slice(&version.to_le_bytes());
        rec[8..12].copy_from_slice(&(value.len() as u32).to_le_bytes());
        rec[12] = key.len() as u8;
        let crc = crc32fast::hash(&rec[4..]);
        rec[0..4].copy_from_slice(&crc.to_le_bytes());
        add(&self.counters.objects_written, 1);
        add(&self.counters.bytes_written, len);
        Some(StubLoc {
            page,
            version,
            offset: offset as u32,
            vlen: value.len() as u32,
        })
    }

    /// Write out what the buffer holds of `page` and empty it.
    fn flush(&self, w: &mut Writer, page: u32) {
        if w.buf.is_empty() {
            return;
        }
        let p = &self.pages[page as usize];
        let end = w.buf_at + w.buf.len() as u64;
        if let Err(_e) = self.files[p.file].write_at(&w.buf, p.base + w.buf_at) {
            // The records in the buffer are lost: the page gets a new version so that
            // their stubs miss (counted) instead of reading what the disk holds.
            add(&self.counters.write_errors, 1);
            let mut st = p.state.lock().unwrap_or_else(|p| p.into_inner());
            st.version = w.next_version;
            w.next_version = w.next_version.wrapping_add(1).max(1);
            st.live_bytes = 0;
            st.live_objects = 0;
        }
        w.buf_at = end;
        w.buf.clear();
        // Release: a reader that sees this offset sees the bytes on the file.
        self.flushed.store(end, Ordering::Release);
    }

    /// Close the open page (written out) and open another: a free one, else the
    /// oldest full one, evicted with what it holds.
    fn open_next_page(&self, w: &mut Writer) -> Option<u32> {
        if let Some(old) = w.open.take() {
            self.flush(w, old);
            w.full.push_back(old);
        }
        self.open_page.store(u32::MAX, Ordering::Release);
        let page = match w.free.pop() {
            Some(p) => p,
            None => {
                let p = w.full.pop_front()?;
                let st = self.pages[p as usize]
                    .state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                add(&self.counters.page_evictions, 1);
                add(&self.counters.objects_evicted, st.live_objects);
                add(&self.counters.bytes_evicted, st.live_bytes);
                p
            }
        };
        {
            let mut st = self.pages[page as usize]
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            *st = PageState {
                version: w.next_version,
                ..PageState::default()
            };
        }
        w.next_version = w.next_version.wrapping_add(1).max(1);
        add(&self.counters.page_allocs, 1);
        w.open = Some(page);
        w.buf_at = 0;
        w.buf.clear();
        self.flushed.store(0, Ordering::Release);
        self.open_page.store(page, Ordering::Release);
        Some(page)
    }

    /// Write out the open page's buffer now, for tests that change the file's bytes.
    #[cfg(test)]
    pub(crate) fn sync(&self) {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = w.open {
            self.flush(&mut w, p);
        }
    }

    /// The record of `key` at `loc`, checked, into `out` (cleared first): returns the
    /// value's range in `out`. Counted in the tier's fetch counters. Any thread may
    /// call it (a connection's worker, or an I/O thread on its behalf).
    pub fn read(
        &self,
        loc: StubLoc,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<std::ops::Range<usize>, ReadError> {
        add(&self.counters.get_extstore, 1);
        let result = self.read_record(loc, key, out);
        match result {
            Ok(_) => {
                add(&self.counters.objects_read, 1);
                add(&self.counters.bytes_read, out.len() as u64);
            }
            Err(ReadError::Gone) => add(&self.counters.miss_from_extstore, 1),
            Err(ReadError::BadCrc) => {
                add(&self.counters.miss_from_extstore, 1);
                add(&self.counters.badcrc_from_extstore, 1);
            }
        }
        result
    }

    fn read_record(
        &self,
        loc: StubLoc,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<std::ops::Range<usize>, ReadError> {
        let Some(page) = self.pages.get(loc.page as usize) else {
            return Err(ReadError::BadCrc);
        };
        let len = Self::record_len(key.len(), loc.vlen as usize);
        if page.state.lock().unwrap_or_else(|p| p.into_inner()).version != loc.version {
            return Err(ReadError::Gone);
        }
        out.clear();
        out.resize(len, 0);
        let end = u64::from(loc.offset) + len as u64;
        let mut from_buffer = false;
        if self.open_page.load(Ordering::Acquire) == loc.page
            && end > self.flushed.load(Ordering::Acquire)
        {
            let w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
            if w.open == Some(loc.page) && u64::from(loc.offset) >= w.buf_at {
                let at = (u64::from(loc.offset) - w.buf_at) as usize;
                let Some(bytes) = w.buf.get(at..at + len) else {
                    return Err(ReadError::BadCrc);
                };
                out.copy_from_slice(bytes);
                from_buffer = true;
            }
        }
        if !from_buffer
            && self.files[page.file]
                .read_at(out, page.base + u64::from(loc.offset))
                .is_err()
        {
            add(&self.counters.read_errors, 1);
            return Err(ReadError::Gone);
        }
        let rec = &out[..];
        let crc = u32::from_le_bytes(rec[0..4].try_into().unwrap());
        let ok = crc32fast::hash(&rec[4..]) == crc
            && rec[4..8] == loc.version.to_le_bytes()
            && rec[8..12] == loc.vlen.to_le_bytes()
            && rec[12] as usize == key.len()
            && &rec[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + key.len()] == key;
        if !ok {
            return Err(ReadError::BadCrc);
        }
        Ok(RECORD_HEADER_BYTES + key.len()..len)
    }

    /// A stub pointing at `loc` for a key of `klen` bytes was unlinked: its record's
    /// bytes are dead. Nothing when the page was reused since.
    pub(crate) fn release(&self, loc: StubLoc, klen: usize) {
        let Some(page) = self.pages.get(loc.page as usize) else {
            return;
        };
        let mut st = page.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.version == loc.version {
            let len = Self::record_len(klen, loc.vlen as usize) as u64;
            st.live_bytes = st.live_bytes.saturating_sub(len);
            st.live_objects = st.live_objects.saturating_sub(1);
        }
    }

    /// Whether `loc`'s page still has its version: the record was not evicted with it.
    pub(crate) fn holds(&self, loc: StubLoc) -> bool {
        self.pages.get(loc.page as usize).is_some_and(|p| {
            p.state.lock().unwrap_or_else(|p| p.into_inner()).version == loc.version
        })
    }

    /// Whether this flash hit of a hot item is the one in `recache_rate` to copy back
    /// to RAM (0 turns recaching off, as in memcached).
    pub(crate) fn recache_due(&self) -> bool {
        let rate = u64::from(self.tun.recache_rate.load(Ordering::Relaxed));
        rate != 0 && self.counters.recache_tries.fetch_add(1, Ordering::Relaxed) % rate == 0
    }

    pub(crate) fn count_recache(&self) {
        add(&self.counters.recache_from_extstore, 1);
    }

    /// `n` reads a failed command dropped before making them (`get_aborted_extstore`).
    pub fn count_aborted(&self, n: u64) {
        add(&self.counters.aborted, n);
    }

    /// The page compaction should empty now, by memcached's rule
    /// (`storage_compact_check`): when at most `compact_under` pages are free, the
    /// oldest full page whose live bytes are under `page_size × max_frag × (1 − free
    /// share)`; failing that, with `drop_unread` and at most `drop_under` free, the oldest
    /// full page, whose unread items are then dropped. Returns (page, version, drop
    /// unread).
    pub(crate) fn compaction_candidate(&self) -> Option<(u32, u32, bool)> {
        let w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let free = w.free.len() as u64;
        let count = self.pages.len() as u64;
        if w.full.is_empty() || free > u64::from(self.tun.compact_under.load(Ordering::Relaxed)) {
            return None;
        }
        let frag = f64::from(self.tun.max_frag.load(Ordering::Relaxed)) / FRAG_ONE;
        let rate = (1.0 - free as f64 / count as f64) * frag;
        let limit = (self.page_size as f64 * rate) as u64;
        for &p in &w.full {
            let st = self.pages[p as usize]
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if st.live_bytes < limit {
                return Some((p, st.version, false));
            }
        }
        let drop = self.tun.drop_unread.load(Ordering::Relaxed)
            && free <= u64::from(self.tun.drop_under.load(Ordering::Relaxed));
        if drop {
            let p = *w.full.front()?;
            let v = self.pages[p as usize]
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .version;
            return Some((p, v, true));
        }
        None
    }

    /// Free every full page that holds no live record (all its items deleted,
    /// overwritten or expired): memcached's maintenance frees those whatever
    /// `compact_under` says, as they cost nothing to reclaim. Returns how many.
    pub(crate) fn reclaim_empty(&self) -> usize {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut freed = 0;
        let mut i = 0;
        while i < w.full.len() {
            let p = w.full[i];
            let mut st = self.pages[p as usize]
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if st.live_objects == 0 {
                *st = PageState::default();
                drop(st);
                w.full.remove(i);
                w.free.push(p);
                freed += 1;
            } else {
                i += 1;
            }
        }
        add(&self.counters.page_reclaims, freed as u64);
        freed
    }

    /// The written bytes of full page `page` at `version`, read whole for compaction;
    /// `None` if it changed or cannot be read.
    pub(crate) fn read_page(&self, page: u32, version: u32) -> Option<Vec<u8>> {
        let p = self.pages.get(page as usize)?;
        let written = {
            let st = p.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.version != version {
                return None;
            }
            st.written
        };
        let mut buf = vec![0u8; written as usize];
        self.files[p.file].read_at(&mut buf, p.base).ok()?;
        Some(buf)
    }

    /// The next record in a page read by [`Flash::read_page`], from `at`: (key, value,
    /// its length on flash), or `None` at the end or at a record that does not check.
    pub(crate) fn page_record(page: &[u8], at: usize) -> Option<(&[u8], &[u8], usize)> {
        let head = page.get(at..at + RECORD_HEADER_BYTES)?;
        let vlen = u32::from_le_bytes(head[8..12].try_into().unwrap()) as usize;
        let klen = head[12] as usize;
        let len = Self::record_len(klen, vlen);
        let rec = page.get(at..at + len)?;
        let crc = u32::from_le_bytes(rec[0..4].try_into().unwrap());
        if klen == 0 || crc32fast::hash(&rec[4..]) != crc {
            return None;
        }
        let key = &rec[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + klen];
        Some((key, &rec[RECORD_HEADER_BYTES + klen..], len))
    }

    /// Free page `page` if it still has `version`: compaction moved what it kept.
    pub(crate) fn reclaim(&self, page: u32, version: u32, rescued: u64, lost: u64, skipped: u64) {
        add(&self.counters.compact_rescues, rescued);
        add(&self.counters.compact_lost, lost);
        add(&self.counters.compact_skipped, skipped);
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(at) = w.full.iter().position(|&p| p == page) else {
            return;
        };
        let mut st = self.pages[page as usize]
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if st.version != version {
            return;
        }
        add(&self.counters.objects_evicted, st.live_objects);
        add(&self.counters.bytes_evicted, st.live_bytes);
        *st = PageState::default();
        drop(st);
        w.full.remove(at);
        w.free.push(page);
        add(&self.counters.page_reclaims, 1);
    }

    /// The tier's counters and page totals.
    pub fn stats(&self) -> FlashStats {
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (mut objects_used, mut bytes_used, mut fragmented, mut used) = (0, 0, 0, 0);
        for p in self.pages.iter() {
            let st = p.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.version != 0 {
                used += 1;
                objects_used += st.live_objects;
                bytes_used += st.live_bytes;
                fragmented += st.written.saturating_sub(st.live_bytes);
            }
        }
        let free = self
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .free
            .len() as u64;
        FlashStats {
            page_allocs: r(&c.page_allocs),
            page_evictions: r(&c.page_evictions),
            page_reclaims: r(&c.page_reclaims),
            pages_free: free,
            pages_used: used,
            page_count: self.pages.len() as u64,
            page_size: self.page_size,
            objects_evicted: r(&c.objects_evicted),
            objects_read: r(&c.objects_read),
            objects_written: r(&c.objects_written),
            objects_used,
            bytes_evicted: r(&c.bytes_evicted),
            bytes_written: r(&c.bytes_written),
            bytes_read: r(&c.bytes_read),
            bytes_used,
            bytes_fragmented: fragmented,
            compact_lost: r(&c.compact_lost),
            compact_rescues: r(&c.compact_rescues),
            compact_skipped: r(&c.compact_skipped),
            get_extstore: r(&c.get_extstore),
            miss_from_extstore: r(&c.miss_from_extstore),
            badcrc_from_extstore: r(&c.badcrc_from_extstore),
            recache_from_extstore: r(&c.recache_from_extstore),
            get_aborted_extstore: r(&c.aborted),
            write_errors: r(&c.write_errors),
            read_errors: r(&c.read_errors),
        }
    }

    /// Each page's version (0: free), live bytes, and bucket: `stats extstore`.
    pub fn page_data(&self) -> Vec<(u32, u64)> {
        self.pages
            .iter()
            .map(|p| {
                let st = p.state.lock().unwrap_or_else(|p| p.into_inner());
                (st.version, st.live_bytes)
            })
            .collect()
    }

    /// Bytes of RAM the tier holds outside the store's budget: its write buffer.
    pub fn buffer_bytes(&self) -> usize {
        self.wbuf_size
    }
}
