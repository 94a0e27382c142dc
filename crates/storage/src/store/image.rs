//! Memory images: the whole store written out at a graceful stop and read back at the
//! next start, so that a restart serves every item it held (memcached's `-e`, warm
//! restart). The server owns the file; this module owns the bytes.
//!
//! The image is the store's memory as it lies, not a list of items: index entries are
//! (segment id, offset) pairs, so the index's bucket arrays and the used segments' bytes
//! mean the same in a new process, and a restart copies them back into fresh memory
//! instead of re-inserting every item (17 M items at `-m 1024`). With them go the hash
//! seed (the buckets' places depend on it), the CAS counter, the flush state, the log of
//! CAS ids per second, and the pool: free list, FIFO of sealed segments, each writer
//! group's open segment, and each segment's live bytes and CAS base.
//!
//! ```text
//!  header (48 B)  magic "ferroimg" | fingerprint u64 | meta length u64 | meta crc u32 |
//!                 0 u32 | total length u64 | header crc u32 | 0 u32
//!  meta           geometry, seed, CAS, flush, pool, segment table, time log,
//!                 per shard: counters, bucket count, crc of its buckets;
//!                 per used segment: id, bytes used, crc; the caller's extra bytes
//!  index          per shard: its buckets, 8 little-endian words each (64 B)
//!  segments       per used segment: its bytes 0..used
//! ```
//!
//! Every part has a CRC-32, checked before anything is installed, and the fingerprint
//! (format version and the sizes and constants of the layouts involved) refuses an
//! image from a build whose layouts differ. A failed load leaves the store empty.
//!
//! Both directions first freeze the store ([`Frozen`]): every writer group's lock, the
//! pool's lock and every shard's lock, taken in the crate's lock order, once no
//! reservation is pending. Then nobody can write a byte of any segment or bucket: a
//! reservation needs a group lock, every write to a published item needs its shard's
//! lock, and eviction and compaction run under a group lock. Value pins only read.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::image_meta::{Geometry, Meta};
use super::Store;
use crate::index::{unpack, ShardGuard, ShardStats};
use crate::item;
use crate::pool::PoolState;
use crate::table::{IndexTable, BUCKET_WORDS};

/// The first bytes of an image.
pub const IMAGE_MAGIC: [u8; 8] = *b"ferroimg";
/// Bytes of an image's header.
pub const IMAGE_HEADER_BYTES: usize = 48;
/// Bumped whenever the image's layout, or a layout it copies, changes meaning.
const FORMAT_VERSION: u32 = 1;
/// Bytes of one bucket in the image.
const BUCKET_BYTES: usize = BUCKET_WORDS * 8;
/// The longest meta section a load accepts (a sanity bound before allocating it).
const MAX_META_BYTES: u64 = 1 << 30;

/// Why an image could not be read back. Every one leaves the store empty.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("read failed: {0}")]
    Io(#[from] io::Error),
    #[error("not a memory image (no ferroimg header)")]
    NotAnImage,
    #[error("shorter than its header says (truncated)")]
    Truncated,
    #[error("written by a build with another layout (fingerprint {found:#018x}, this build's is {want:#018x})")]
    OtherBuild { found: u64, want: u64 },
    #[error("checksum mismatch in {0}")]
    Checksum(String),
    #[error("the store's layout differs: {0}")]
    Geometry(String),
    #[error("inconsistent contents: {0}")]
    Corrupt(&'static str),
    #[error("the store already holds items")]
    NotEmpty,
}

fn truncated(e: io::Error) -> ImageError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        ImageError::Truncated
    } else {
        ImageError::Io(e)
    }
}

/// The build's layout fingerprint: the format version, the sizes and constants of
/// everything the image copies byte for byte (bucket, item header, CAS span), and what
/// those bytes mean: sample item headers as this build encodes them, the hash of a
/// sample key, and the table's placement rules. A build that changes any of them
/// refuses older images instead of misreading them.
pub fn image_fingerprint() -> u64 {
    let mut h = crc32fast::Hasher::new();
    for v in [
        BUCKET_BYTES,
        std::mem::size_of::<u64>(),
        item::MIN_HEADER_BYTES,
        item::MAX_HEADER_BYTES,
        item::PREFIX_MAX_BYTES,
        item::MAX_KEY_BYTES,
        item::MAX_VALUE_BYTES,
        item::NARROW_CAS_SPAN as usize,
        usize::from(cfg!(target_endian = "little")),
    ] {
        h.update(&(v as u64).to_le_bytes());
    }
    for (vlen, flags, wide) in [
        (5, 0, false),
        (100, 7, true),
        (70_000, 0, false),
        (item::MAX_VALUE_BYTES, u32::MAX, true),
    ] {
        let new = item::NewItem {
            klen: 3,
            vlen,
            flags,
            exptime: 0x0102_0304,
        };
        let mut header = [0u8; item::MAX_HEADER_BYTES];
        new.write_header(&mut header, wide, 1077, 1000);
        h.update(&header);
    }
    let sample = crate::index::hash_key(0x5EED_5EED_5EED_5EED, b"ferrocache image");
    h.update(&sample.to_le_bytes());
    for v in crate::table::placement_probe() {
        h.update(&v.to_le_bytes());
    }
    u64::from(FORMAT_VERSION) << 32 | u64::from(h.finalize())
}

/// What a saved image held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageSummary {
    /// Live items (as `curr_items` counted them).
    pub items: u64,
    /// Bytes of the whole image.
    pub bytes: u64,
}

/// The store with every lock that guards a byte of it held (see the module docs).
struct Frozen<'a> {
    groups: Vec<MutexGuard<'a, Option<(u32, u32)>>>,
    pool: MutexGuard<'a, PoolState>,
    shards: Vec<ShardGuard<'a>>,
}

impl Store {
    /// Take every group lock, the pool lock and every shard lock (the crate's lock
    /// order), once no reservation is pending: a writer that reserved before finishes
    /// under its shard lock, so the locks are dropped and taken again until none is.
    fn freeze(&self) -> Frozen<'_> {
        loop {
            let groups = self.groups.iter().map(|g| g.lock()).collect();
            let pool = self.pool_lock();
            let shards = (0..self.shards.len())
                .map(|i| self.shard_at(i).lock())
                .collect();
            let frozen = Frozen {
                groups,
                pool,
                shards,
            };
            if self
                .segments
                .iter()
                .all(|s| s.pending.load(Ordering::Acquire) == 0)
            {
                return frozen;
            }
            drop(frozen);
            std::thread::yield_now();
        }
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            segment_size: self.segment_size as u64,
            shards: self.shards.len() as u64,
            groups: self.groups.len() as u64,
            item_size_max: self.item_size_max as u64,
            item_overhead: self.item_overhead as u64,
        }
    }

    /// Write the whole store to `out` as a memory image (see the module docs), with
    /// `extra` (the caller's own state, returned by [`ImageHead::extra`]) inside it.
    /// The store is frozen meanwhile: every request waits. Meant for a graceful stop,
    /// once the workers are gone.
    pub fn save_image(&self, out: &mut impl Write, extra: &[u8]) -> io::Result<ImageSummary> {
        let frozen = self.freeze();
        let mut parts = Vec::new();
        parts.extend(frozen.pool.sealed.entries());
        for g in &frozen.groups {
            if let Some(open) = **g {
                parts.push(open);
            }
        }
        let mut shard_rows = Vec::with_capacity(frozen.shards.len());
        let mut items = 0;
        for shard in &frozen.shards {
            let mut crc = crc32fast::Hasher::new();
            let mut buf = Vec::with_capacity(BUCKET_BYTES * 1024);
            for b in 0..shard.table.bucket_count() {
                push_bucket(&mut buf, shard.table.bucket_words(b));
                if buf.len() >= BUCKET_BYTES * 1024 {
                    crc.update(&buf);
                    buf.clear();
                }
            }
            crc.update(&buf);
            items += shard.stats.curr_items;
            shard_rows.push((
                shard.stats.curr_items,
                shard.stats.bytes,
                shard.table.bucket_count() as u64,
                crc.finalize(),
            ));
        }
        let parts: Vec<(u32, u32, u32)> = parts
            .into_iter()
            .map(|(seg, used)| {
                (
                    seg,
                    used,
                    crc32fast::hash(self.frozen_bytes(&frozen, seg, used)),
                )
            })
            .collect();
        let log = self.time_log.export();
        let meta = Meta {
            geometry: self.geometry(),
            seed: self.seed(),
            cas: self.cas.0.load(Ordering::Relaxed),
            oldest_live: self.flush.0.oldest_live.load(Ordering::Acquire),
            oldest_cas: self.flush.0.oldest_cas.load(Ordering::Acquire),
            memory_limit: self.memory_limit() as u64,
            provisioned: frozen.pool.provisioned as u64,
            limit: frozen.pool.limit as u64,
            free: frozen.pool.free.clone(),
            sealed: frozen.pool.sealed.entries().collect(),
            open: frozen.groups.iter().map(|g| **g).collect(),
            segments: self
                .segments
                .iter()
                .map(|s| {
                    (
                        s.live_bytes.load(Ordering::Acquire),
                        s.cas_base.load(Ordering::Relaxed),
                    )
                })
                .collect(),
            time_log: log,
            shards: shard_rows,
            parts,
            extra: extra.to_vec(),
        };
        let meta_bytes = meta.encode();
        let index_bytes: u64 = meta.shards.iter().map(|s| s.2 * BUCKET_BYTES as u64).sum();
        let segment_bytes: u64 = meta.parts.iter().map(|p| u64::from(p.1)).sum();
        let total = (IMAGE_HEADER_BYTES + meta_bytes.len()) as u64 + index_bytes + segment_bytes;
        let mut header = Vec::with_capacity(IMAGE_HEADER_BYTES);
        header.extend_from_slice(&IMAGE_MAGIC);
        header.extend_from_slice(&image_fingerprint().to_le_bytes());
        header.extend_from_slice(&(meta_bytes.len() as u64).to_le_bytes());
        header.extend_from_slice(&crc32fast::hash(&meta_bytes).to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        header.extend_from_slice(&total.to_le_bytes());
        let crc = crc32fast::hash(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        debug_assert_eq!(header.len(), IMAGE_HEADER_BYTES);
        out.write_all(&header)?;
        out.write_all(&meta_bytes)?;
        let mut buf = Vec::with_capacity(BUCKET_BYTES * 1024);
        for shard in &frozen.shards {
            for b in 0..shard.table.bucket_count() {
                push_bucket(&mut buf, shard.table.bucket_words(b));
                if buf.len() >= BUCKET_BYTES * 1024 {
                    out.write_all(&buf)?;
                    buf.clear();
                }
            }
        }
        out.write_all(&buf)?;
        for &(seg, used, _) in &meta.parts {
            out.write_all(self.frozen_bytes(&frozen, seg, used))?;
        }
        out.flush()?;
        Ok(ImageSummary {
            items,
            bytes: total,
        })
    }

    /// The first `used` bytes of segment `seg`, read while the store is frozen.
    fn frozen_bytes<'f>(&'f self, _frozen: &'f Frozen<'_>, seg: u32, used: u32) -> &'f [u8] {
        if used == 0 {
            return &[];
        }
        // SAFETY: `seg` is sealed or open, so it has memory, and `used` is at most its
        // length (the pool never records more). While `_frozen` lives nobody writes a
        // byte of any segment (module docs: every group and shard lock is held and no
        // reservation is pending), and the borrow lives no longer than it.
        unsafe { self.mem(seg).bytes(0, used as usize) }
    }
}

fn push_bucket(buf: &mut Vec<u8>, words: [u64; BUCKET_WORDS]) {
    for w in words {
        buf.extend_from_slice(&w.to_le_bytes());
    }
}

/// Where an image is read from: positioned reads, so that several threads can read its
/// parts at once (a file, or bytes in memory).
pub trait ImageSource: Sync {
    /// Fill `buf` from byte `offset` on; `UnexpectedEof` when the source ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ImageSource for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

impl ImageSource for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        match self.get(from..).and_then(|rest| rest.get(..buf.len())) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

/// An image's header and meta section, read and checked: what the caller checks of its
/// own ([`ImageHead::extra`]) before [`ImageHead::load_into`] reads the rest.
#[derive(Debug)]
pub struct ImageHead {
    meta: Meta,
    total: u64,
    /// Where the index's buckets start: the meta section's end.
    parts_at: u64,
}

/// One part of an image to read back: a shard's buckets or a segment's bytes.
#[derive(Clone, Copy)]
enum Part {
    Index { shard: usize, buckets: usize },
    Segment { seg: u32, len: usize },
}

impl ImageHead {
    /// Read and check the header and meta section of an image.
    pub fn read(src: &(impl ImageSource + ?Sized)) -> Result<ImageHead, ImageError> {
        let mut magic = [0u8; IMAGE_MAGIC.len()];
        match src.read_exact_at(&mut magic, 0) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(ImageError::NotAnImage)
            }
            read => read?,
        }
        if magic != IMAGE_MAGIC {
            return Err(ImageError::NotAnImage);
        }
        let mut header = [0u8; IMAGE_HEADER_BYTES];
        src.read_exact_at(&mut header, 0).map_err(truncated)?;
        let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap());
        let half = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap());
        if half(40) != crc32fast::hash(&header[..40]) {
            return Err(ImageError::Checksum("the header".into()));
        }
        let (found, want) = (word(8), image_fingerprint());
        if found != want {
            return Err(ImageError::OtherBuild { found, want });
        }
        let meta_len = word(16);
        if meta_len > MAX_META_BYTES {
            return Err(ImageError::Corrupt("meta section too long"));
        }
        let mut meta = vec![0u8; meta_len as usize];
        src.read_exact_at(&mut meta, IMAGE_HEADER_BYTES as u64)
            .map_err(truncated)?;
        if crc32fast::hash(&meta) != half(24) {
            return Err(ImageError::Checksum("the meta section".into()));
        }
        let meta = Meta::decode(&meta).ok_or(ImageError::Corrupt("meta section"))?;
        Ok(ImageHead {
            meta,
            total: word(32),
            parts_at: IMAGE_HEADER_BYTES as u64 + meta_len,
        })
    }

    /// The caller's bytes given to [`Store::save_image`].
    pub fn extra(&self) -> &[u8] {
        &self.meta.extra
    }

    /// Bytes of the whole image, as its header says.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Live items the image holds.
    pub fn items(&self) -> u64 {
        self.meta.shards.iter().map(|s| s.0).sum()
    }

    /// Read the rest of the image from `src` into `store`, which must be new: built and
    /// never written. `threads` threads read the parts at once (the first touch of a
    /// gigabyte of fresh pages is most of a load's time, and it runs in parallel).
    /// Every part is checked before anything is installed; on an error the store is
    /// left empty, and the memory given to segments read so far goes back to the kernel.
    pub fn load_into(
        self,
        store: &Store,
        src: &(impl ImageSource + ?Sized),
        threads: usize,
    ) -> Result<(), ImageError> {
        let mut frozen = store.freeze();
        if !store.frozen_empty(&frozen) {
            return Err(ImageError::NotEmpty);
        }
        let mut meta = self.meta;
        let mine = store.geometry();
        if meta.geometry != mine {
            return Err(ImageError::Geometry(format!(
                "saved {:?}, this store {:?}",
                meta.geometry, mine
            )));
        }
        let used = check_pool(&meta, store.segments.len(), store.segment_size)?;
        let parts = part_list(&meta, self.parts_at, self.total)?;
        let (tables, filled, mut failed) = read_parts(store, src, &parts, &used, threads);
        if failed.is_none() && !store.time_log.restore(std::mem::take(&mut meta.time_log)) {
            failed = Some(ImageError::Corrupt("time log"));
        }
        if let Some(e) = failed {
            for &seg in &filled {
                // SAFETY: the store is frozen and new (see `read_segment`): nobody reads
                // or writes the segment, which the free list still holds, so its bytes
                // may turn to zero.
                unsafe { store.mem(seg).release() };
            }
            return Err(e);
        }
        // Everything checked: install.
        store.install(&mut frozen, meta, tables);
        // Dropping the guards publishes each new table to the lock-free peeks.
        drop(frozen);
        Ok(())
    }
}

impl Store {
    /// Whether the frozen store is new: nothing provisioned taken, no open segment, no
    /// item and no CAS id given.
    fn frozen_empty(&self, frozen: &Frozen<'_>) -> bool {
        frozen.pool.free.len() == frozen.pool.provisioned
            && frozen.groups.iter().all(|g| g.is_none())
            && frozen.shards.iter().all(|s| s.table.items() == 0)
            && self.cas.0.load(Ordering::Relaxed) == 0
    }

    /// Install a checked image's index `tables` (one per shard) and the state in `meta`
    /// into the frozen, new store: shards, segments' bookkeeping, pool, seed, CAS
    /// counter, flush state and memory limit.
    fn install(&self, frozen: &mut Frozen<'_>, meta: Meta, tables: Vec<Option<IndexTable>>) {
        for ((shard, table), &(items, bytes, _, _)) in
            frozen.shards.iter_mut().zip(tables).zip(&meta.shards)
        {
            shard.table = table.expect("every table was read");
            shard.stats = ShardStats {
                curr_items: items,
                bytes,
                // memcached counts every item it links back as stored.
                total_items: items,
                ..ShardStats::with_classes(self.classes.len())
            };
            // The per-class levels are not in the image: counted again from the items.
            for i in 0..shard.table.positions() {
                if let Some(e) = shard.table.get(i) {
                    let p = self.stored_prefix(&shard.held, e);
                    let ntotal = self.memcached_total(p.klen, p.vlen, p.has_flags);
                    let c = shard.stats.class_mut(self.classes.class_of(ntotal));
                    c.items += 1;
                    c.requested += ntotal as u64;
                }
            }
            shard.sweep_bucket = 0;
        }
        for (s, &(live, base)) in self.segments.iter().zip(&meta.segments) {
            s.live_bytes.store(live, Ordering::Release);
            s.cas_base.store(base, Ordering::Relaxed);
        }
        for (g, open) in frozen.groups.iter_mut().zip(&meta.open) {
            **g = *open;
        }
        frozen.pool.free = meta.free;
        frozen.pool.sealed.restore(meta.sealed);
        frozen.pool.provisioned = meta.provisioned as usize;
        frozen.pool.limit = meta.limit as usize;
        self.seed.store(meta.seed, Ordering::Relaxed);
        self.cas.0.store(meta.cas, Ordering::Relaxed);
        let flush = &self.flush.0;
        flush.oldest_cas.store(meta.oldest_cas, Ordering::Release);
        flush.oldest_live.store(meta.oldest_live, Ordering::Release);
        self.memory_limit
            .store(meta.memory_limit as usize, Ordering::Relaxed);
    }
}

/// Check the pool's bookkeeping in `meta` against a table of `capacity` segments of
/// `size` bytes: every segment below `provisioned` is free, sealed or open, exactly
/// once, with no more bytes used than it has. Returns the bytes used of each segment
/// (0 for free ones and those past `provisioned`), which bound the index entries.
fn check_pool(meta: &Meta, capacity: usize, size: usize) -> Result<Vec<u32>, ImageError> {
    let provisioned = meta.provisioned as usize;
    if provisioned > capacity
        || meta.limit as usize > capacity
        || meta.segments.len() > capacity
        || meta.segments.len() < provisioned
    {
        return Err(ImageError::Geometry(format!(
            "{provisioned} segments in use or free, {} in the saved table, {capacity} here",
            meta.segments.len()
        )));
    }
    let mut seen = vec![false; provisioned];
    let mut used = vec![0u32; capacity];
    let mut mark = |seg: u32, bytes: u32| -> Result<(), ImageError> {
        let at = seg as usize;
        if at >= provisioned || seen[at] || bytes as usize > size {
            return Err(ImageError::Corrupt("segment pool"));
        }
        seen[at] = true;
        used[at] = bytes;
        Ok(())
    };
    for &seg in &meta.free {
        mark(seg, 0)?;
    }
    for &(seg, bytes) in meta.sealed.iter().chain(meta.open.iter().flatten()) {
        mark(seg, bytes)?;
    }
    if seen.iter().any(|&s| !s) {
        return Err(ImageError::Corrupt("segment pool"));
    }
    let listed: Vec<(u32, u32)> = meta
        .sealed
        .iter()
        .chain(meta.open.iter().flatten())
        .copied()
        .collect();
    let parts: Vec<(u32, u32)> = meta.parts.iter().map(|p| (p.0, p.1)).collect();
    if listed != parts || meta.open.len() as u64 != meta.geometry.groups {
        return Err(ImageError::Corrupt("segment list"));
    }
    Ok(used)
}

/// Every part of the image with where it starts and its checksum, in file order (the
/// index's buckets from `parts_at`, then the segments), checked to end at `total`.
fn part_list(meta: &Meta, parts_at: u64, total: u64) -> Result<Vec<(Part, u64, u32)>, ImageError> {
    let mut parts = Vec::with_capacity(meta.shards.len() + meta.parts.len());
    let mut at = parts_at;
    for (shard, &(_, _, buckets, crc)) in meta.shards.iter().enumerate() {
        let buckets = usize::try_from(buckets)
            .ok()
            .filter(|b| b.checked_mul(BUCKET_BYTES).is_some())
            .ok_or(ImageError::Corrupt("bucket count"))?;
        parts.push((Part::Index { shard, buckets }, at, crc));
        at += (buckets * BUCKET_BYTES) as u64;
    }
    for &(seg, len, crc) in &meta.parts {
        parts.push((
            Part::Segment {
                seg,
                len: len as usize,
            },
            at,
            crc,
        ));
        at += u64::from(len);
    }
    if at != total {
        return Err(ImageError::Corrupt("part lengths"));
    }
    Ok(parts)
}

/// Read and check every part on `threads` threads: the index tables, one per shard, and
/// the segments given memory meanwhile (which a failed load gives back), with the first
/// error met, if any (some tables are then missing).
fn read_parts(
    store: &Store,
    src: &(impl ImageSource + ?Sized),
    parts: &[(Part, u64, u32)],
    used: &[u32],
    threads: usize,
) -> (Vec<Option<IndexTable>>, Vec<u32>, Option<ImageError>) {
    let shards = parts
        .iter()
        .filter(|p| matches!(p.0, Part::Index { .. }))
        .count();
    let tables: Vec<std::sync::Mutex<Option<IndexTable>>> =
        (0..shards).map(|_| Default::default()).collect();
    let filled = std::sync::Mutex::new(Vec::new());
    let failed = std::sync::Mutex::new(None);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let read_parts = || {
        let mut buf = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(part, at, crc)) = parts.get(i) else {
                return;
            };
            if failed.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                return;
            }
            let done = match part {
                Part::Index { shard, buckets } => read_table(src, at, buckets, crc, used, &mut buf)
                    .map(|table| {
                        *tables[shard].lock().unwrap_or_else(|e| e.into_inner()) = Some(table);
                    }),
                Part::Segment { seg, len } => {
                    if len > 0 {
                        store.allocate_segment(seg);
                        filled.lock().unwrap_or_else(|e| e.into_inner()).push(seg);
                    }
                    read_segment(store, src, seg, at, len, crc)
                }
            };
            if let Err(e) = done {
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                return;
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads.max(1) {
            scope.spawn(read_parts);
        }
        read_parts();
    });
    let filled = filled.into_inner().unwrap_or_else(|e| e.into_inner());
    let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    let tables = tables
        .into_iter()
        .map(|t| t.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    (tables, filled, failed)
}

/// Read and check one shard's buckets at `at`, and build its table: every used slot
/// must point inside the bytes its segment has in use (`used`).
fn read_table(
    src: &(impl ImageSource + ?Sized),
    at: u64,
    buckets: usize,
    crc: u32,
    used: &[u32],
    buf: &mut Vec<u8>,
) -> Result<IndexTable, ImageError> {
    buf.resize(buckets * BUCKET_BYTES, 0);
    src.read_exact_at(buf, at).map_err(truncated)?;
    if crc32fast::hash(buf) != crc {
        return Err(ImageError::Checksum(format!("index bytes at {at}")));
    }
    let word = |at: usize| u64::from_le_bytes(buf[at..at + 8].try_into().unwrap());
    IndexTable::from_buckets(
        buckets,
        |b| std::array::from_fn(|w| word((b * BUCKET_WORDS + w) * 8)),
        |e| {
            let (seg, off) = unpack(e);
            used.get(seg as usize).is_some_and(|&u| off < u)
        },
    )
    .ok_or(ImageError::Corrupt("index table"))
}

/// Read and check segment `seg`'s first `len` bytes from `at`, straight into its memory
/// (which the caller has given it).
fn read_segment(
    store: &Store,
    src: &(impl ImageSource + ?Sized),
    seg: u32,
    at: u64,
    len: usize,
    crc: u32,
) -> Result<(), ImageError> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: `seg` has memory and `len` is at most its length (`check_pool`). The
    // store is frozen by the loader's thread for as long as this runs, and new: no item
    // is indexed in it, no reservation is pending and none can be made, and each part
    // is read by one thread, so nobody else reads or writes these bytes; the borrow
    // ends with this call.
    let bytes = unsafe { store.mem(seg).bytes_mut(0, len) };
    src.read_exact_at(bytes, at).map_err(truncated)?;
    if crc32fast::hash(bytes) != crc {
        return Err(ImageError::Checksum(format!("segment {seg}")));
    }
    Ok(())
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;
