//! The meta section of a memory image (`image.rs`): the store's state besides its
//! index and segment bytes, as little-endian fields. What a load checks of it before it
//! trusts any of it is `image.rs`'s.

use crate::time_log::TimeLogState;

/// The store's shape: what must be the same for an image to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Geometry {
    pub segment_size: u64,
    pub shards: u64,
    pub groups: u64,
    pub item_size_max: u64,
    pub item_overhead: u64,
}

/// Everything in the meta section.
#[derive(Debug)]
pub(super) struct Meta {
    pub geometry: Geometry,
    pub seed: u64,
    pub cas: u64,
    pub oldest_live: u32,
    pub oldest_cas: u64,
    pub memory_limit: u64,
    pub provisioned: u64,
    pub limit: u64,
    pub free: Vec<u32>,
    pub sealed: Vec<(u32, u32)>,
    pub open: Vec<Option<(u32, u32)>>,
    /// Per segment of the table: (live bytes, CAS base).
    pub segments: Vec<(u64, u64)>,
    pub time_log: TimeLogState,
    /// Per shard: (curr_items, bytes, buckets, crc of the buckets).
    pub shards: Vec<(u64, u64, u64, u32)>,
    /// Per used segment, in file order: (id, bytes used, crc).
    pub parts: Vec<(u32, u32, u32)>,
    pub extra: Vec<u8>,
}

impl Meta {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        let g = &self.geometry;
        for v in [
            g.segment_size,
            g.shards,
            g.groups,
            g.item_size_max,
            g.item_overhead,
        ] {
            w.u64(v);
        }
        w.u64(self.seed);
        w.u64(self.cas);
        w.u32(self.oldest_live);
        w.u64(self.oldest_cas);
        w.u64(self.memory_limit);
        w.u64(self.provisioned);
        w.u64(self.limit);
        w.u64(self.free.len() as u64);
        self.free.iter().for_each(|&s| w.u32(s));
        w.u64(self.sealed.len() as u64);
        for &(s, u) in &self.sealed {
            w.u32(s);
            w.u32(u);
        }
        w.u64(self.open.len() as u64);
        for open in &self.open {
            let (present, (s, u)) = (open.is_some(), open.unwrap_or((0, 0)));
            w.0.push(u8::from(present));
            w.u32(s);
            w.u32(u);
        }
        w.u64(self.segments.len() as u64);
        for &(live, base) in &self.segments {
            w.u64(live);
            w.u64(base);
        }
        let t = &self.time_log;
        w.u32(t.last);
        w.u64(t.flush_cas);
        w.u32(t.flush_after);
        w.u64(t.thin_at as u64);
        w.u64(t.marks.len() as u64);
        for &(second, first) in &t.marks {
            w.u32(second);
            w.u64(first);
        }
        w.u64(self.shards.len() as u64);
        for &(items, bytes, buckets, crc) in &self.shards {
            w.u64(items);
            w.u64(bytes);
            w.u64(buckets);
            w.u32(crc);
        }
        w.u64(self.parts.len() as u64);
        for &(seg, used, crc) in &self.parts {
            w.u32(seg);
            w.u32(used);
            w.u32(crc);
        }
        w.u64(self.extra.len() as u64);
        w.0.extend_from_slice(&self.extra);
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Option<Meta> {
        let mut r = Reader(bytes);
        let geometry = Geometry {
            segment_size: r.u64()?,
            shards: r.u64()?,
            groups: r.u64()?,
            item_size_max: r.u64()?,
            item_overhead: r.u64()?,
        };
        let seed = r.u64()?;
        let cas = r.u64()?;
        let oldest_live = r.u32()?;
        let oldest_cas = r.u64()?;
        let memory_limit = r.u64()?;
        let provisioned = r.u64()?;
        let limit = r.u64()?;
        let n = r.len(4)?;
        let free = (0..n).map(|_| r.u32()).collect::<Option<_>>()?;
        let n = r.len(8)?;
        let sealed = (0..n)
            .map(|_| Some((r.u32()?, r.u32()?)))
            .collect::<Option<_>>()?;
        let n = r.len(9)?;
        let open = (0..n)
            .map(|_| {
                let present = r.u8()?;
                let pair = (r.u32()?, r.u32()?);
                match present {
                    0 => Some(None),
                    1 => Some(Some(pair)),
                    _ => None,
                }
            })
            .collect::<Option<_>>()?;
        let n = r.len(16)?;
        let segments = (0..n)
            .map(|_| Some((r.u64()?, r.u64()?)))
            .collect::<Option<_>>()?;
        let last = r.u32()?;
        let flush_cas = r.u64()?;
        let flush_after = r.u32()?;
        let thin_at = usize::try_from(r.u64()?).ok()?;
        let n = r.len(12)?;
        let marks = (0..n)
            .map(|_| Some((r.u32()?, r.u64()?)))
            .collect::<Option<_>>()?;
        let n = r.len(28)?;
        let shards: Vec<_> = (0..n)
            .map(|_| Some((r.u64()?, r.u64()?, r.u64()?, r.u32()?)))
            .collect::<Option<_>>()?;
        let n = r.len(12)?;
        let parts = (0..n)
            .map(|_| Some((r.u32()?, r.u32()?, r.u32()?)))
            .collect::<Option<_>>()?;
        let n = r.len(1)?;
        let extra = r.take(n)?.to_vec();
        if !r.0.is_empty() || shards.len() as u64 != geometry.shards {
            return None;
        }
        Some(Meta {
            geometry,
            seed,
            cas,
            oldest_live,
            oldest_cas,
            memory_limit,
            provisioned,
            limit,
            free,
            sealed,
            open,
            segments,
            time_log: TimeLogState {
                last,
                flush_cas,
                marks,
                flush_after,
                thin_at,
            },
            shards,
            parts,
            extra,
        })
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    /// A count of records of `size` bytes each that the rest can hold.
    fn len(&mut self, size: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n.checked_mul(size)? <= self.0.len()).then_some(n)
    }
}
