//! memcached's slab classes, as a lens for statistics only.
//!
//! ferrocache stores items of every size side by side in segments, so it has no slab
//! classes. memcached's tools (`memcached-tool display`, `memcdump`, the Prometheus
//! exporter's `memcached_slab_*` series) read everything per class, though, so the store
//! counts its items per memcached class: the class memcached would have put the item in,
//! from the sizes its `-f`, `-n`, `slab_chunk_max` and `slab_sizes` settings give
//! (`slabs_init` in memcached's slabs.c). Nothing here decides where an item lives.

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`: ids run from 1 to 63.
pub const MAX_CLASSES: usize = 63;

/// memcached's `sizeof(item)` on 64-bit, the first class's floor with `-n`.
const ITEM_HEADER_BYTES: u32 = 48;

/// memcached's `CHUNK_ALIGN_BYTES`.
const CHUNK_ALIGN_BYTES: u32 = 8;

/// memcached's `slab_page_size`: classes split 1 MiB pages into chunks.
pub const SLAB_PAGE_BYTES: u32 = 1024 * 1024;

/// The chunk sizes of memcached's classes under one configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlabClasses {
    /// Chunk size of class `i + 1`, ascending; the last is `slab_chunk_max`.
    sizes: Vec<u32>,
}

/// What [`SlabClasses::memcached`] is given: memcached's settings that shape classes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassConfig {
    /// `-f`, the growth factor.
    pub factor: f64,
    /// `-n`, the minimum key + value + flags space of the first class.
    pub chunk_size: u32,
    /// `-o slab_chunk_max`, the largest chunk (and the last class's size).
    pub chunk_max: u32,
    /// `-o slab_sizes`, explicit chunk sizes that replace the factor's.
    pub sizes: Option<Vec<u32>>,
}

impl Default for ClassConfig {
    fn default() -> Self {
        ClassConfig {
            factor: 1.25,
            chunk_size: 48,
            chunk_max: SLAB_PAGE_BYTES / 2,
            sizes: None,
        }
    }
}

impl SlabClasses {
    /// The classes memcached 1.6's `slabs_init` builds for `cfg`.
    #[must_use]
    pub fn memcached(cfg: &ClassConfig) -> SlabClasses {
        let mut sizes = Vec::new();
        let mut size = ITEM_HEADER_BYTES + cfg.chunk_size;
        // memcached fills ids 1..=62 and gives the last id to `slab_chunk_max`.
        for i in 0..MAX_CLASSES - 1 {
            match &cfg.sizes {
                Some(explicit) => match explicit.get(i) {
                    Some(&s) if s != 0 => size = s,
                    _ => break,
                },
                None => {
                    if f64::from(size) >= f64::from(cfg.chunk_max) / cfg.factor {
                        break;
                    }
                }
            }
            if size % CHUNK_ALIGN_BYTES != 0 {
                size += CHUNK_ALIGN_BYTES - size % CHUNK_ALIGN_BYTES;
            }
            sizes.push(size);
            if cfg.sizes.is_none() {
                // C's `size *= factor` on an unsigned int: the product truncated.
                size = (f64::from(size) * cfg.factor) as u32;
            }
        }
        sizes.push(cfg.chunk_max);
        SlabClasses { sizes }
    }

    /// How many classes there are (ids `1..=len()`).
    #[must_use]
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Never true: there is always the `slab_chunk_max` class.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// The chunk size of class `id` (1-based).
    #[must_use]
    pub fn chunk_size(&self, id: usize) -> u32 {
        self.sizes[id - 1]
    }

    /// Chunks per 1 MiB page in class `id`.
    #[must_use]
    pub fn per_page(&self, id: usize) -> u32 {
        SLAB_PAGE_BYTES / self.chunk_size(id)
    }

    /// The class memcached's `slabs_clsid` gives an item of `ntotal` bytes (its
    /// `ITEM_ntotal`): the smallest class whose chunk holds it, or the last class for a
    /// larger (chunked) item, as memcached links those into its largest class's LRU.
    #[inline]
    #[must_use]
    pub fn class_of(&self, ntotal: usize) -> usize {
        let n = u32::try_from(ntotal).unwrap_or(u32::MAX);
        self.sizes
            .partition_point(|&s| s < n)
            .min(self.sizes.len() - 1)
            + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_classes_are_memcacheds() {
        // `memcached -vv` 1.6.18 with the defaults prints 39 classes: 96, 120, 152, ...
        // 394840, then 524288 for the last.
        let c = SlabClasses::memcached(&ClassConfig::default());
        assert_eq!(c.len(), 39);
        assert_eq!(
            (c.chunk_size(1), c.chunk_size(2), c.chunk_size(3)),
            (96, 120, 152)
        );
        assert_eq!(c.chunk_size(38), 394_840);
        assert_eq!(c.chunk_size(39), 524_288);
        assert_eq!((c.per_page(1), c.per_page(39)), (10_922, 2));
    }

    #[test]
    fn an_item_goes_to_the_smallest_class_that_holds_it() {
        let c = SlabClasses::memcached(&ClassConfig::default());
        assert_eq!(c.class_of(1), 1);
        assert_eq!(c.class_of(96), 1);
        assert_eq!(c.class_of(97), 2);
        assert_eq!(c.class_of(524_288), 39);
        // A chunked item is counted in the largest class.
        assert_eq!(c.class_of(1 << 20), 39);
    }

    #[test]
    fn explicit_sizes_and_a_small_chunk_max() {
        let c = SlabClasses::memcached(&ClassConfig {
            sizes: Some(vec![100, 200, 300]),
            ..ClassConfig::default()
        });
        assert_eq!(
            (0..c.len())
                .map(|i| c.chunk_size(i + 1))
                .collect::<Vec<_>>(),
            vec![104, 200, 304, 524_288]
        );
        // memcached's t/stats.t setting: `-I 1024 -o slab_chunk_max=1024`.
        let c = SlabClasses::memcached(&ClassConfig {
            chunk_max: 1024,
            ..ClassConfig::default()
        });
        assert_eq!(c.chunk_size(c.len()), 1024);
        assert!(c.len() < 20);
    }
}
