//! memcached's run-time tuning commands: `lru_crawler enable|disable|sleep|tocrawl|crawl`,
//! `slabs reassign|automove` and `lru tune|mode|temp_ttl`, with memcached 1.6.18's
//! replies, and the crawler thread that `lru_crawler crawl` wakes.
//!
//! ferrocache's LRU crawler is its expired-item sweep. The maintenance thread runs
//! a bounded slice of it every second while the crawler is enabled (`-o
//! no_lru_crawler` and `lru_crawler disable` stop it, as they stop memcached's
//! crawler). `lru_crawler crawl` starts a full pass over the index on the crawler
//! thread, at most `tocrawl` items (0: no limit), sleeping `sleep` microseconds after
//! every 1 000 items, as memcached's crawler does. There are no slab classes here, so
//! a crawl of some classes walks every item.
//!
//! The slab and LRU settings (`slabs automove`, `lru tune`, ...) are kept and shown
//! in `stats settings`, and replies follow memcached's checks exactly, but they do not
//! change how ferrocache's segments are evicted: there is no slab class to move pages
//! between and no hot/warm/cold LRU to tune. `slabs reassign` therefore answers as
//! memcached does for a class with no spare page.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use protocol::text::{CrawlTarget, CrawlerCommand, TuneCommand};
use storage::{DumpCursor, Store};

use crate::clock::Clock;

/// Items a requested crawl checks between two of its `lru_crawler sleep` pauses
/// (memcached's `crawls_persleep`).
const ITEMS_PER_SLEEP: usize = 1000;

/// Index positions a crawl step walks: a shard lock is held for at most 512 of them.
const CRAWL_STEP_POSITIONS: usize = 2048;

/// The largest slab class id memcached 1.6.18 has with its default `-n 48 -f 1.25` and
/// 1 MiB pages: the highest that `slabs reassign` takes.
pub const MEMCACHED_LARGEST_CLASS: i32 = 39;

/// The tunable settings, as `stats settings` shows them; their start values are the
/// `-o` options' (`config/tunables.rs`).
pub use crate::config::Tunables;

/// Crawler state shared by the workers, the maintenance thread and the crawler thread.
#[derive(Default)]
pub struct Crawler {
    state: Mutex<State>,
    /// Signalled when a crawl is asked for, and at shutdown.
    wake: Condvar,
    /// Counters for `stats`.
    reclaimed: AtomicU64,
    checked: AtomicU64,
}

#[derive(Default)]
struct State {
    tunables: Tunables,
    /// A crawl was asked for and the crawler thread has not finished it yet
    /// (`lru_crawler_running`).
    busy: bool,
    /// Crawls asked for (`lru_crawler_starts`).
    starts: u64,
}

impl Crawler {
    #[must_use]
    pub fn new(tunables: Tunables) -> Crawler {
        Crawler {
            state: Mutex::new(State {
                tunables,
                ..State::default()
            }),
            ..Crawler::default()
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock still holds valid settings.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the current settings.
    #[must_use]
    pub fn tunables(&self) -> Tunables {
        self.state().tunables.clone()
    }

    /// Whether the crawler (and with it the background expiry sweep) is enabled.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.state().tunables.lru_crawler
    }

    /// `lru_crawler_running`, `lru_crawler_starts`, `crawler_reclaimed` and
    /// `crawler_items_checked` for `stats`.
    /// A crawl counts as running from the moment it is accepted, so that once
    /// `lru_crawler_running` reads 0 after an `OK`, that crawl has ended.
    #[must_use]
    pub fn counters(&self) -> (bool, u64, u64, u64) {
        let (busy, starts) = {
            let s = self.state();
            (s.busy, s.starts)
        };
        (
            busy,
            starts,
            self.reclaimed.load(Ordering::Relaxed),
            self.checked.load(Ordering::Relaxed),
        )
    }

    /// Count what a sweep or crawl step did.
    pub fn record(&self, swept: storage::Swept) {
        self.reclaimed
            .fetch_add(swept.unlinked as u64, Ordering::Relaxed);
        self.checked
            .fetch_add(swept.checked as u64, Ordering::Relaxed);
    }

    /// Run an `lru_crawler` command (not `metadump`); returns the reply line.
    pub fn command(&self, command: CrawlerCommand) -> &'static [u8] {
        let mut s = self.state();
        match command {
            CrawlerCommand::Enable => {
                if s.tunables.lru_crawler {
                    return b"ERROR failed to start lru crawler thread\r\n";
                }
                s.tunables.lru_crawler = true;
            }
            // memcached answers OK to a second `disable` too.
            CrawlerCommand::Disable => s.tunables.lru_crawler = false,
            CrawlerCommand::Sleep(us) => s.tunables.crawler_sleep_us = us,
            CrawlerCommand::Tocrawl(n) => s.tunables.crawler_tocrawl = n,
            CrawlerCommand::Crawl(target) => {
                if !s.tunables.lru_crawler {
                    return b"CLIENT_ERROR lru crawler disabled\r\n";
                }
                match target {
                    CrawlTarget::BadClass => return b"BADCLASS invalid class id\r\n",
                    CrawlTarget::Hash => return b"ERROR an unknown error happened\r\n",
                    CrawlTarget::Classes(_) => {}
                }
                if s.busy {
                    return b"BUSY currently processing crawler request\r\n";
                }
                s.busy = true;
                s.starts += 1;
                self.wake.notify_all();
            }
        }
        b"OK\r\n"
    }

    /// Run a `slabs` or `lru` tuning command; returns the reply line.
    pub fn tune(&self, command: TuneCommand) -> &'static [u8] {
        let mut s = self.state();
        let t = &mut s.tunables;
        match command {
            TuneCommand::SlabsReassign(pair) => {
                if !t.slab_reassign {
                    return b"CLIENT_ERROR slab reassignment disabled\r\n";
                }
                let Some((src, dst)) = pair else {
                    return b"CLIENT_ERROR bad command line format\r\n";
                };
                if src == dst {
                    return b"SAME src and dst class are identical\r\n";
                }
                // -1 asks memcached to pick a class with a spare page; with none, it is
                // left at -1 and refused as a bad class.
                let valid = 0..=MEMCACHED_LARGEST_CLASS;
                if !valid.contains(&src) || !valid.contains(&dst) {
                    return b"BADCLASS invalid src or dst class id\r\n";
                }
                return b"NOSPARE source class has no spare pages\r\n";
            }
            TuneCommand::SlabsAutomove(level) => t.slab_automove = level,
            TuneCommand::SlabsAutomoveRatio(ratio) => t.slab_automove_ratio = ratio,
            TuneCommand::LruTune {
                hot_pct,
                warm_pct,
                hot_factor,
                warm_factor,
            } => {
                if !Tunables::lru_pcts_fit(hot_pct, warm_pct) {
                    return b"ERROR hot and warm pcts must not exceed 80\r\n";
                }
                if !Tunables::age_factor_ok(warm_factor) || !Tunables::age_factor_ok(hot_factor) {
                    return b"ERROR hot/warm age factors must be greater than 0\r\n";
                }
                t.hot_lru_pct = hot_pct;
                t.warm_lru_pct = warm_pct;
                t.hot_max_factor = hot_factor;
                t.warm_max_factor = warm_factor;
            }
            // Without the LRU maintainer memcached does not know these two.
            TuneCommand::LruMode(_) | TuneCommand::LruTempTtl(_) if !t.lru_maintainer => {
                return b"ERROR\r\n";
            }
            TuneCommand::LruMode(mode) => match mode {
                Some(segmented) => t.lru_segmented = segmented,
                None => return b"ERROR\r\n",
            },
            TuneCommand::LruTempTtl(ttl) => match ttl {
                Some(ttl) if ttl < 0 => t.temp_lru = false,
                Some(ttl) => {
                    t.temp_lru = true;
                    t.temporary_ttl = ttl;
                }
                None => return b"ERROR\r\n",
            },
            TuneCommand::Extstore(setting) => {
                use protocol::text::ExtstoreSetting as E;
                let e = &mut t.ext;
                match setting {
                    None => return b"ERROR\r\n",
                    Some(E::ItemSize(n)) => e.item_size = n,
                    Some(E::ItemAge(n)) => e.item_age = n,
                    Some(E::LowTtl(n)) => e.low_ttl = n,
                    Some(E::RecacheRate(n)) => e.recache_rate = n,
                    Some(E::CompactUnder(n)) => e.compact_under = n,
                    Some(E::DropUnder(n)) => e.drop_under = n,
                    Some(E::MaxSleep(n)) => t.ext_max_sleep = n,
                    Some(E::MaxFrag(f)) => e.max_frag = f,
                    Some(E::DropUnread(on)) => e.drop_unread = on,
                    Some(E::FreeMemchunks) => {}
                }
            }
        }
        b"OK\r\n"
    }

    /// Wake the crawler thread so it sees shutdown.
    pub fn wake_for_shutdown(&self) {
        let _s = self.state();
        self.wake.notify_all();
    }
}

/// The crawler thread: wait for `lru_crawler crawl`, then walk the whole index once,
/// unlinking expired and flushed items, until shutdown. Both are signalled through
/// `wake`; the timeout only bounds a wait should a signal ever be missed.
pub fn crawler_loop(crawler: &Crawler, store: &Store, clock: &Clock, stop: &AtomicBool) {
    loop {
        {
            let mut s = crawler.state();
            while !s.busy && !stop.load(Ordering::Relaxed) {
                s = crawler
                    .wake
                    .wait_timeout(s, Duration::from_secs(1))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
        crawl_once(crawler, store, clock, stop);
        crawler.state().busy = false;
    }
}

/// One requested crawl: the whole index, or `tocrawl` items, pausing as `sleep` says.
/// Stops early when the crawler is disabled or the server shuts down.
fn crawl_once(crawler: &Crawler, store: &Store, clock: &Clock, stop: &AtomicBool) {
    let mut cursor = DumpCursor::default();
    let mut since_sleep = 0;
    let mut checked = 0usize;
    loop {
        let Tunables {
            lru_crawler,
            crawler_sleep_us,
            crawler_tocrawl,
            ..
        } = crawler.tunables();
        if !lru_crawler || stop.load(Ordering::Relaxed) {
            return;
        }
        let step = store.crawl(&mut cursor, clock.now(), CRAWL_STEP_POSITIONS);
        crawler.record(step.swept);
        checked += step.swept.checked;
        since_sleep += step.swept.checked;
        if !step.more || (crawler_tocrawl != 0 && checked >= crawler_tocrawl as usize) {
            return;
        }
        if since_sleep >= ITEMS_PER_SLEEP && crawler_sleep_us > 0 {
            since_sleep = 0;
            std::thread::sleep(Duration::from_micros(u64::from(crawler_sleep_us)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::text::DumpClasses;

    #[test]
    fn enable_disable_and_crawl_follow_memcached() {
        let c = Crawler::new(Tunables::default());
        assert_eq!(
            c.command(CrawlerCommand::Enable),
            b"ERROR failed to start lru crawler thread\r\n"
        );
        assert_eq!(c.command(CrawlerCommand::Disable), b"OK\r\n");
        assert_eq!(c.command(CrawlerCommand::Disable), b"OK\r\n");
        let all = CrawlerCommand::Crawl(CrawlTarget::Classes(DumpClasses::ALL));
        assert_eq!(c.command(all), b"CLIENT_ERROR lru crawler disabled\r\n");
        assert_eq!(c.command(CrawlerCommand::Enable), b"OK\r\n");
        assert_eq!(c.command(all), b"OK\r\n");
        // No crawler thread runs here, so the first crawl is still pending.
        assert_eq!(
            c.command(all),
            b"BUSY currently processing crawler request\r\n"
        );
        assert_eq!(
            c.command(CrawlerCommand::Crawl(CrawlTarget::BadClass)),
            b"BADCLASS invalid class id\r\n"
        );
    }

    #[test]
    fn tuning_replies_follow_memcached() {
        let c = Crawler::new(Tunables::default());
        let reassign = |p| c.tune(TuneCommand::SlabsReassign(p));
        assert_eq!(
            reassign(Some((1, 1))),
            b"SAME src and dst class are identical\r\n"
        );
        assert_eq!(
            reassign(Some((-1, 2))),
            b"BADCLASS invalid src or dst class id\r\n"
        );
        assert_eq!(
            reassign(Some((1, 40))),
            b"BADCLASS invalid src or dst class id\r\n"
        );
        assert_eq!(
            reassign(Some((0, 39))),
            b"NOSPARE source class has no spare pages\r\n"
        );
        assert_eq!(reassign(None), b"CLIENT_ERROR bad command line format\r\n");
        let tune = |hot_pct, warm_pct, hot_factor, warm_factor| {
            c.tune(TuneCommand::LruTune {
                hot_pct,
                warm_pct,
                hot_factor,
                warm_factor,
            })
        };
        assert_eq!(
            tune(50, 40, 1.0, 1.0),
            b"ERROR hot and warm pcts must not exceed 80\r\n"
        );
        assert_eq!(
            tune(10, 20, 0.0, 1.0),
            b"ERROR hot/warm age factors must be greater than 0\r\n"
        );
        assert_eq!(tune(10, 20, 0.5, 1.5), b"OK\r\n");
        let t = c.tunables();
        assert_eq!((t.hot_lru_pct, t.warm_lru_pct), (10, 20));
        assert_eq!(c.tune(TuneCommand::LruTempTtl(Some(-1))), b"OK\r\n");
        assert!(!c.tunables().temp_lru);
        let c = Crawler::new(Tunables {
            lru_maintainer: false,
            ..Tunables::default()
        });
        assert_eq!(c.tune(TuneCommand::LruMode(Some(false))), b"ERROR\r\n");
    }
}
