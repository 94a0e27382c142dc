//! The settings memcached's run-time tuning commands change (`lru_crawler`, `slabs
//! automove`, `lru tune|mode|temp_ttl`, `extstore`): their start values come from the
//! `-o` rows (`extended.rs`, `extstore.rs`), and the crawler (`admin/crawler.rs`) keeps
//! them afterwards. The checks both share are here, written once.

/// The tunable settings, with memcached 1.6.18's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Tunables {
    /// `lru_crawler`: the expired-item sweep and `lru_crawler crawl` (acted on).
    pub lru_crawler: bool,
    /// `lru_crawler_sleep`: a requested crawl's pause per 1 000 items, microseconds.
    pub crawler_sleep_us: u32,
    /// `lru_crawler_tocrawl`: the most items a requested crawl checks (0: all).
    pub crawler_tocrawl: u32,
    /// `slab_reassign`, `slab_automove`, `slab_automove_ratio`, `lru_maintainer`,
    /// `lru_segmented`, the LRU percentages and factors, `temporary_ttl`: shown, and
    /// checked by the tuning commands as memcached checks them; there is no slab class
    /// to move pages between and no hot/warm/cold LRU here.
    pub slab_reassign: bool,
    pub slab_automove: u32,
    pub slab_automove_ratio: f64,
    pub lru_maintainer: bool,
    pub lru_segmented: bool,
    pub hot_lru_pct: u32,
    pub warm_lru_pct: u32,
    pub hot_max_factor: f64,
    pub warm_max_factor: f64,
    pub temp_lru: bool,
    pub temporary_ttl: i32,
    /// The flash tier's run-time settings (`-o ext_*`, `extstore <setting>`), kept with
    /// or without a tier, as memcached keeps them; pushed to the tier when it changes.
    pub ext: storage::FlashTunables,
    /// `ext_max_sleep`: the flash tier's background thread's pause when idle, in
    /// microseconds (`io/launch.rs` holds it between 10 and 100 ms).
    pub ext_max_sleep: u32,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            lru_crawler: true,
            crawler_sleep_us: 100,
            crawler_tocrawl: 0,
            slab_reassign: true,
            slab_automove: 1,
            slab_automove_ratio: 0.8,
            lru_maintainer: true,
            lru_segmented: true,
            hot_lru_pct: 20,
            warm_lru_pct: 40,
            hot_max_factor: 0.2,
            warm_max_factor: 2.0,
            temp_lru: false,
            temporary_ttl: 61,
            ext: storage::FlashTunables::default(),
            ext_max_sleep: 1_000_000,
        }
    }
}

impl Tunables {
    /// Whether the hot and warm LRU percentages leave the cold LRU its 20 %: checked
    /// after `-o hot_lru_pct`/`warm_lru_pct` and by `lru tune`. memcached adds the two
    /// as `uint32_t`.
    #[must_use]
    pub fn lru_pcts_fit(hot_pct: u32, warm_pct: u32) -> bool {
        hot_pct.wrapping_add(warm_pct) <= 80
    }

    /// Whether `factor` is a hot or warm age factor memcached takes (`-o
    /// hot_max_factor`, `warm_max_factor`, `lru tune`): its check is `<= 0`, which NaN
    /// passes.
    #[must_use]
    pub fn age_factor_ok(factor: f64) -> bool {
        factor > 0.0 || factor.is_nan()
    }
}
