//! The eviction policy: which segment a writer gets room from, which items an eviction
//! walk keeps, and what reads and writes do to an item's marks. The rest of the engine
//! carries out what it says (`evict.rs` takes segments and walks them, `store/*` set
//! and read the marks); none of it decides.
//!
//! A store is built with a [`Policy`] value; [`build`] turns it into the two parts the
//! engine holds: the [`PolicyState`] the store asks every question of (and where a
//! policy keeps what it needs at run time), and the [`SealedQueue`] the pool holds.
//!
//! ```text
//!   writer groups' open segments
//!        │ full (or idle, for the flash tier's age pass): seal
//!        ▼
//!   ┌──────────────────── SealedQueue (FIFO) ────────────────────┐
//!   │ newest  ·  ·  ·  ·  ·  ·  ·  ·  ·  ·  ·  ·  ·  ·  ·  oldest │── pop_victim ──┐
//!   └────────────────────────────────────────────────────────────┘                │
//!        ^  requeue: kept items and too little room, or a reader's pin            │
//!        └──────────────────────────────────────────── the walk (`evict.rs`) <────┘
//!                         each live item: PolicyState::fate -> keep, second chance,
//!                         flash, evict; the segment is reopened after the kept
//! ```
//!
//! A writer whose open segment is full tries the steps of [`PolicyState::room_order`] in
//! turn; the first that gives a segment with room wins:
//!
//! ```text
//!  FifoSecondChance                                 NoEviction (-M)
//!  1. RetireExcess   segments over the budget are
//!                    given back (no room itself)
//!  2. Dead           a sealed segment with nothing  1. Dead
//!                    live (oldest DEAD_SCAN_SEGMENTS)
//!  3. Compact { 4 }  the least live of those, if at 2. Compact { 4 }
//!                    most 1/4 live, compacted
//!  4. Fresh          a never-used segment           3. Fresh
//!  5. Compact { 2 }  the same, at most 1/2 live
//!  6. Evict          the victim, its read items     4. CompactRoomy: the oldest with
//!                    kept (up to EVICT_KEEP)           room for the item, all kept
//! ```
//!
//! The read mark ([`MARK_ACCESSED`], the CLOCK bit) means "read since it was written or
//! last given a second chance": a read, a touch and an overwrite in place set it
//! ([`Policy::read_marks`], [`Policy::overwrite_marks`]), the second chance and a move
//! to flash clear it ([`Policy::second_chance_clears`], [`Policy::stub_clears`]), and
//! [`PolicyState::fate`] and the counters judge it ([`PolicyState::read_recently`]). The bit's
//! place in the header is `item.rs`'s; its meaning is only here.
//!
//! | file       | what it holds                                                   |
//! |------------|-----------------------------------------------------------------|
//! | `mod.rs`   | [`Policy`], the writer's steps, the keep budgets, marks, fates   |
//! | `queue.rs` | [`SealedQueue`]: the sealed segments, oldest first              |

use crate::item::{MARK_ACCESSED, MARK_FETCHED, NARROW_CAS_SPAN};

mod queue;

pub(crate) use queue::SealedQueue;

/// How a store makes room when memory is full ([`crate::StoreBuilder::policy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// Full segments queue in the order they were written; the oldest is evicted, and
    /// its items read since their segment last came round are kept at its front for
    /// one more trip (CLOCK over a FIFO of segments).
    #[default]
    FifoSecondChance,
    /// Nothing live is ever evicted (memcached `-M`): only dead and expired space is
    /// reused, and a store that finds none fails with
    /// [`StoreOutcome::NoMemory`](crate::StoreOutcome::NoMemory).
    NoEviction,
}

/// One way for a writer to get a segment with room; [`PolicyState::room_order`] lists them
/// in the order they are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// No room of its own: while more segments hold items than the memory budget allows
    /// (a lowered `cache_memlimit`, a grown index), empty some and give them back, so
    /// that memory comes down as items are written. Kept items keep [`RETIRE_KEEP`].
    RetireExcess,
    /// A sealed segment with nothing live and no unfinished write, among the oldest
    /// [`DEAD_SCAN_SEGMENTS`]: written again from its start, with no walk.
    Dead,
    /// The sealed segment with the fewest live bytes among the oldest
    /// [`DEAD_SCAN_SEGMENTS`], if at most `1/live_divisor` of it is live: compacted,
    /// keeping every live item, and reused after them.
    Compact { live_divisor: usize },
    /// A never-used segment, while the memory budget allows one more.
    Fresh,
    /// Evict the queue's victim: walk it, keep what [`PolicyState::fate`] keeps (within
    /// [`Policy::evict_budget`]) and reuse it after them.
    Evict,
    /// The oldest sealed segment with room for the item among its dead bytes:
    /// compacted, keeping every live item.
    CompactRoomy,
}

/// A share of a segment: `size / den * num` bytes (divided first, as it always was).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Share {
    pub num: usize,
    pub den: usize,
}

impl Share {
    /// This share of `size` bytes.
    pub const fn of(self, size: usize) -> usize {
        size / self.den * self.num
    }
}

/// Most of a segment an eviction for a writer keeps: its read items and flash stubs.
/// Three quarters, so that every eviction frees at least a quarter. Half, before,
/// dropped the read items of a segment past its middle: hot keys written together lost
/// their last ones to a stream of large sets, however often they were read.
pub(crate) const EVICT_KEEP: Share = Share { num: 3, den: 4 };
/// Most of a segment a retirement keeps when the store is one segment over its budget
/// (the index grew by a step): the read items of the oldest segment get their second
/// chance and it goes back to the queue. Further over, nothing is kept.
pub(crate) const RETIRE_KEEP: Share = Share { num: 1, den: 2 };
/// A victim whose CAS base is more ids old than this keeps nothing, so that it starts
/// again from a fresh base: otherwise the items written after its kept ones would soon
/// all be wide (`item.rs`).
pub(crate) const AGED_BASE_IDS: u64 = NARROW_CAS_SPAN / 2;
/// Sealed segments, oldest first, that [`Room::Dead`] and [`Room::Compact`] look at: a
/// bound on the scan made once per segment filled, whatever the memory size.
pub(crate) const DEAD_SCAN_SEGMENTS: usize = 256;
/// [`Room::Compact`] before a never-used segment is taken: one at most a quarter live,
/// so that overwrites do not spread a small data set over all of `-m`.
pub(crate) const COMPACT_BEFORE_FRESH_LIVE_DIVISOR: usize = 4;
/// [`Room::Compact`] before the oldest segment is evicted: one at most half live, so
/// that dead versions are reclaimed without dropping the cold live items beside them.
pub(crate) const COMPACT_BEFORE_EVICT_LIVE_DIVISOR: usize = 2;

/// The marks a read sets: fetched (memcached's `ITEM_FETCHED`) and read recently.
const READ_MARKS: u8 = MARK_FETCHED | MARK_ACCESSED;

const FIFO_ORDER: [Room; 6] = [
    Room::RetireExcess,
    Room::Dead,
    Room::Compact {
        live_divisor: COMPACT_BEFORE_FRESH_LIVE_DIVISOR,
    },
    Room::Fresh,
    Room::Compact {
        live_divisor: COMPACT_BEFORE_EVICT_LIVE_DIVISOR,
    },
    Room::Evict,
];

const NO_EVICTION_ORDER: [Room; 4] = [
    Room::Dead,
    Room::Compact {
        live_divisor: COMPACT_BEFORE_FRESH_LIVE_DIVISOR,
    },
    Room::Fresh,
    Room::CompactRoomy,
];

/// How a walk of a sealed segment ([`Store::evict_segment`](crate::Store)) treats its
/// live items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WalkMode {
    /// Room is needed: items read since their last second chance, and flash stubs
    /// within their share of memory, are kept up to this many bytes; values the flash
    /// tier wants go to flash while their stubs fit in it; the rest are evicted.
    Evict(usize),
    /// Keep every live item (compaction, `-M`).
    KeepAll,
    /// The flash tier's age pass: values not read since their last second chance and
    /// stored at least this many seconds ago go to flash; everything else stays.
    ToFlash(u32),
}

/// What the walk does with one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Expired, flushed, or a stub whose flash page was reused: unlinked, counted as
    /// reclaimed.
    Unlink,
    /// Moved down to the segment's front as it is.
    Keep,
    /// Moved down to the segment's front, its read mark cleared
    /// ([`Policy::second_chance_clears`]).
    SecondChance,
    /// Its value goes to flash and it stays as a stub at the front; if the flash write
    /// fails it is evicted (`or_evict`) or kept.
    Flash { or_evict: bool },
    /// Unlinked, counted as an eviction.
    Evict,
}

/// What the walk knows of one indexed item when it asks for its fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Neither expired nor flushed, and, for a stub, its flash page still holds it.
    pub live: bool,
    /// Its mark bits.
    pub mark: u8,
    /// A flash stub: its value is on flash.
    pub stub: bool,
    /// Bytes of its record.
    pub len: usize,
}

/// What the flash tier says of the item whose fate is being decided. Each answer costs
/// a look at the tier or the time log, so [`PolicyState::fate`] asks only what it needs, in
/// the order it needs it.
pub(crate) trait Tier {
    /// Whether flash stubs take less than their share of memory.
    fn stubs_within_share(&self) -> bool;
    /// Whether the tier takes the item's value, its stub fitting in `budget` bytes after
    /// the `kept` bytes kept so far. False without a tier.
    fn takes(&self, kept: usize, budget: usize) -> bool;
    /// Seconds since the item was written.
    fn age(&self) -> u32;
}

impl Policy {
    /// The policy of `.evictions(enabled)`: the default, or `-M`.
    pub(crate) const fn evicting(enabled: bool) -> Policy {
        if enabled {
            Policy::FifoSecondChance
        } else {
            Policy::NoEviction
        }
    }
}

/// The policy a store was built with, as the store consults it, and what it keeps while
/// the store runs: nothing for today's two, where a policy that remembers recent
/// evictions (a ghost list) would keep it. Every question the engine asks of the policy
/// is one of its methods.
#[derive(Debug)]
pub(crate) struct PolicyState {
    policy: Policy,
}

/// A new store's policy parts, for `policy` and a memory limit of `segments` segments:
/// the state the store consults, and the queue of sealed segments the pool holds.
pub(crate) fn build(policy: Policy, segments: usize) -> (PolicyState, SealedQueue) {
    (PolicyState { policy }, SealedQueue::with_capacity(segments))
}

impl PolicyState {
    /// Whether live items are ever evicted. Without eviction an overwrite is not
    /// written in place either: memcached refuses any store once memory is full of live
    /// items, and only a new item reaches that check (`store/write.rs`).
    #[inline(always)]
    pub(crate) const fn evicts(&self) -> bool {
        !matches!(self.policy, Policy::NoEviction)
    }

    /// The steps a writer tries, in order, when its open segment is full.
    pub(crate) const fn room_order(&self) -> &'static [Room] {
        match self.policy {
            Policy::FifoSecondChance => &FIFO_ORDER,
            Policy::NoEviction => &NO_EVICTION_ORDER,
        }
    }

    /// Bytes an eviction for a writer that needs `len` bytes may keep of a segment of
    /// `size`: [`EVICT_KEEP`], never the room `len` needs (so that the first victim
    /// always has room), and nothing when the victim's CAS base is `ids_since_base`
    /// ids old, past [`AGED_BASE_IDS`].
    pub(crate) fn evict_budget(&self, size: usize, len: usize, ids_since_base: u64) -> usize {
        if ids_since_base > AGED_BASE_IDS {
            0
        } else {
            EVICT_KEEP.of(size).min(size - len)
        }
    }

    /// Bytes a retirement may keep of a segment of `size` when `excess` segments more
    /// than the budget hold items: [`RETIRE_KEEP`] when one, else nothing (memory comes
    /// down first).
    pub(crate) fn retire_budget(&self, size: usize, excess: usize) -> usize {
        if excess == 1 {
            RETIRE_KEEP.of(size)
        } else {
            0
        }
    }

    /// What the walk does with `item` in `mode`, `kept` bytes having been kept at the
    /// segment's front so far; `tier` is asked only when flash may take part.
    pub(crate) fn fate(&self, item: &Seen, mode: WalkMode, kept: usize, tier: &impl Tier) -> Fate {
        if !item.live {
            return Fate::Unlink;
        }
        let read = self.read_recently(item.mark);
        match mode {
            WalkMode::KeepAll => Fate::Keep,
            // Nothing live is evicted: a walk for room keeps every live item.
            WalkMode::Evict(_) if !self.evicts() => Fate::Keep,
            // Read items (stubs among them) get their second chance.
            WalkMode::Evict(budget) if read && kept + item.len <= budget => Fate::SecondChance,
            // Unread stubs are kept too: they are small (a header, the key and 16 bytes)
            // and stand for a value on flash, whose page evictions decide how long it
            // stays; past their share of memory they go as items do.
            WalkMode::Evict(budget)
                if item.stub && kept + item.len <= budget && tier.stubs_within_share() =>
            {
                Fate::Keep
            }
            // Read items past the second-chance budget go to flash as well: a value read
            // once is no less worth keeping than one never read.
            WalkMode::Evict(budget) if tier.stubs_within_share() && tier.takes(kept, budget) => {
                Fate::Flash { or_evict: true }
            }
            WalkMode::Evict(_) => Fate::Evict,
            // The age pass sends old, unread values, and gives the read ones a second
            // chance (memcached's writer takes an item read once, not one read again);
            // everything else stays as it is.
            WalkMode::ToFlash(age) if tier.age() >= age && tier.takes(0, usize::MAX) => {
                if read {
                    Fate::SecondChance
                } else {
                    Fate::Flash { or_evict: false }
                }
            }
            WalkMode::ToFlash(_) => Fate::Keep,
        }
    }

    /// The marks a read sets: a get, gat or touch, meta's bump, and a value copied back
    /// from flash because it was read.
    #[inline(always)]
    pub(crate) const fn read_marks(&self) -> u8 {
        READ_MARKS
    }

    /// Whether a read of an item marked `mark` must write its marks. In steady state an
    /// item read before is marked already, and a get writes nothing.
    #[inline(always)]
    pub(crate) const fn read_marks_due(&self, mark: u8) -> bool {
        mark & self.read_marks() != self.read_marks()
    }

    /// The marks a new item is stored with (key hash `_h`), besides the meta protocol's.
    #[inline(always)]
    pub(crate) const fn store_marks(&self, _h: u64) -> u8 {
        0
    }

    /// An eviction walk dropped a live item whose key hashes to `_h` (not an expired
    /// one, nor one sent to flash): a policy that remembers recent evictions notes it.
    #[inline(always)]
    pub(crate) fn evicted(&self, _h: u64) {}

    /// The marks the new version of an item overwritten in place gets (every other one
    /// is reset as for a new item, besides the meta protocol's): read recently. It keeps
    /// its place in the queue, where a new version would be the newest, so the CLOCK
    /// gives it the trip round a new item would get.
    #[inline(always)]
    pub(crate) const fn overwrite_marks(&self) -> u8 {
        MARK_ACCESSED
    }

    /// The marks a second chance clears.
    #[inline(always)]
    pub(crate) const fn second_chance_clears(&self) -> u8 {
        MARK_ACCESSED
    }

    /// The marks an item whose value goes to flash clears: a stub starts cold, so that
    /// reads since it went to flash are what make it hot (for recaching, and for its
    /// own second chance).
    #[inline(always)]
    pub(crate) const fn stub_clears(&self) -> u8 {
        MARK_ACCESSED
    }

    /// Whether an item marked `mark` was read since it was written or last given a
    /// second chance (`evicted_active`, and the flash tier's compaction drops stubs
    /// that were not).
    #[inline(always)]
    pub(crate) const fn read_recently(&self, mark: u8) -> bool {
        mark & MARK_ACCESSED != 0
    }

    /// Whether a stub marked `mark` (before this read) was read since its value went to
    /// flash: memcached's rule copies back a value read at least twice recently. A stub
    /// starts without the read mark ([`Policy::stub_clears`]).
    #[inline(always)]
    pub(crate) const fn read_since_stub(&self, mark: u8) -> bool {
        mark & READ_MARKS == READ_MARKS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICIES: [Policy; 2] = [Policy::FifoSecondChance, Policy::NoEviction];

    /// The state a store of `policy` consults.
    fn state(policy: Policy) -> PolicyState {
        build(policy, 4).0
    }

    /// A tier with fixed answers that counts the questions.
    struct FakeTier {
        within_share: bool,
        takes: bool,
        age: u32,
        asked: std::cell::Cell<u32>,
    }

    impl Tier for FakeTier {
        fn stubs_within_share(&self) -> bool {
            self.asked.set(self.asked.get() + 1);
            self.within_share
        }
        fn takes(&self, _kept: usize, _budget: usize) -> bool {
            self.asked.set(self.asked.get() + 1);
            self.takes
        }
        fn age(&self) -> u32 {
            self.asked.set(self.asked.get() + 1);
            self.age
        }
    }

    fn item(live: bool, read: bool, stub: bool) -> Seen {
        Seen {
            live,
            mark: if read {
                MARK_ACCESSED | MARK_FETCHED
            } else {
                MARK_FETCHED
            },
            stub,
            len: 100,
        }
    }

    fn tier(within_share: bool, takes: bool, age: u32) -> FakeTier {
        FakeTier {
            within_share,
            takes,
            age,
            asked: std::cell::Cell::new(0),
        }
    }

    #[test]
    fn a_writer_tries_dead_then_compacted_then_fresh_segments_before_evicting() {
        use Room::*;
        assert_eq!(
            state(Policy::FifoSecondChance).room_order(),
            [
                RetireExcess,
                Dead,
                Compact { live_divisor: 4 },
                Fresh,
                Compact { live_divisor: 2 },
                Evict
            ]
        );
        // -M gives nothing back (nothing may be evicted to do it) and never evicts.
        assert_eq!(
            state(Policy::NoEviction).room_order(),
            [Dead, Compact { live_divisor: 4 }, Fresh, CompactRoomy]
        );
        assert_eq!(Policy::default(), Policy::FifoSecondChance);
        assert_eq!(Policy::evicting(true), Policy::FifoSecondChance);
        assert_eq!(Policy::evicting(false), Policy::NoEviction);
        assert!(state(Policy::FifoSecondChance).evicts());
        assert!(!state(Policy::NoEviction).evicts());
    }

    #[test]
    fn the_keep_budgets() {
        let p = state(Policy::FifoSecondChance);
        let size = 1 << 20;
        assert_eq!(p.evict_budget(size, 100, 0), size / 4 * 3);
        // Never the room the writer needs.
        assert_eq!(p.evict_budget(size, size / 2, 0), size / 2);
        assert_eq!(p.evict_budget(size, 100, AGED_BASE_IDS), size / 4 * 3);
        assert_eq!(p.evict_budget(size, 100, AGED_BASE_IDS + 1), 0);
        assert_eq!(AGED_BASE_IDS, NARROW_CAS_SPAN / 2);
        assert_eq!(p.retire_budget(size, 1), size / 2);
        assert_eq!(p.retire_budget(size, 2), 0);
        // Divided first: a size that is no multiple of the denominator rounds down.
        assert_eq!(EVICT_KEEP.of(7), 3);
        assert_eq!(RETIRE_KEEP.of(7), 3);
    }

    #[test]
    fn expired_items_are_unlinked_in_every_mode_under_every_policy() {
        for p in POLICIES.map(state) {
            for mode in [
                WalkMode::Evict(1 << 20),
                WalkMode::KeepAll,
                WalkMode::ToFlash(0),
            ] {
                for (read, stub) in [(false, false), (true, false), (true, true)] {
                    let t = tier(true, true, 0);
                    assert_eq!(p.fate(&item(false, read, stub), mode, 0, &t), Fate::Unlink);
                    assert_eq!(t.asked.get(), 0, "the tier is not asked about dead items");
                }
            }
        }
    }

    /// An item as the walk sees it: (live, read recently, a stub).
    type Item = (bool, bool, bool);
    /// The tier's answers: (stubs within their share, takes the value, age in seconds).
    type Answers = (bool, bool, u32);

    /// Check each case's fate: the item, the walk's mode, the bytes kept before it and
    /// the tier's answers, then the fate expected.
    fn expect(policy: Policy, cases: &[(Item, WalkMode, usize, Answers, Fate)]) {
        let p = state(policy);
        for &((live, read, stub), mode, kept, (share, takes, age), want) in cases {
            let got = p.fate(
                &item(live, read, stub),
                mode,
                kept,
                &tier(share, takes, age),
            );
            assert_eq!(
                got, want,
                "{p:?}: live {live}, read {read}, stub {stub} in {mode:?} after {kept} \
                 kept, tier {share} {takes} {age}"
            );
        }
    }

    const NO_TIER: Answers = (false, false, 0);
    const ROOMY: Answers = (true, true, 0);

    #[test]
    fn compaction_keeps_every_live_item() {
        for p in POLICIES {
            let keep_all = WalkMode::KeepAll;
            expect(
                p,
                &[
                    ((true, false, false), keep_all, 1 << 30, ROOMY, Fate::Keep),
                    ((true, true, false), keep_all, 1 << 30, ROOMY, Fate::Keep),
                    ((true, false, true), keep_all, 1 << 30, ROOMY, Fate::Keep),
                ],
            );
        }
    }

    #[test]
    fn an_eviction_gives_read_items_a_second_chance_within_the_budget() {
        let evict = WalkMode::Evict(1000);
        expect(
            Policy::FifoSecondChance,
            &[
                ((true, true, false), evict, 900, NO_TIER, Fate::SecondChance),
                // Past the budget, or unread: evicted (no tier to take the value).
                ((true, true, false), evict, 901, NO_TIER, Fate::Evict),
                ((true, false, false), evict, 0, NO_TIER, Fate::Evict),
                // A read stub gets its second chance like any item.
                ((true, true, true), evict, 0, NO_TIER, Fate::SecondChance),
            ],
        );
    }

    #[test]
    fn an_eviction_keeps_unread_stubs_within_their_share_and_sends_values_to_flash() {
        let evict = WalkMode::Evict(1000);
        let flash = Fate::Flash { or_evict: true };
        let full = (false, true, 0);
        let picky = (true, false, 0);
        expect(
            Policy::FifoSecondChance,
            &[
                ((true, false, true), evict, 0, ROOMY, Fate::Keep),
                // An unread value, and a read one past the budget, go to flash.
                ((true, false, false), evict, 0, ROOMY, flash),
                ((true, true, false), evict, 950, ROOMY, flash),
                // Past their share, stubs go and no value goes to flash.
                ((true, false, true), evict, 0, full, Fate::Evict),
                ((true, false, false), evict, 0, full, Fate::Evict),
                // A tier that does not want the value: evicted.
                ((true, false, false), evict, 0, picky, Fate::Evict),
            ],
        );
    }

    #[test]
    fn without_eviction_no_live_item_is_evicted() {
        let evict = WalkMode::Evict(0);
        expect(
            Policy::NoEviction,
            &[
                ((true, false, false), evict, 0, ROOMY, Fate::Keep),
                ((true, true, false), evict, 0, ROOMY, Fate::Keep),
                ((true, false, true), evict, 0, ROOMY, Fate::Keep),
                ((true, true, true), evict, 0, ROOMY, Fate::Keep),
            ],
        );
    }

    #[test]
    fn the_age_pass_sends_old_unread_values_and_spares_read_ones() {
        let pass = WalkMode::ToFlash(60);
        let (old, young, refused) = ((false, true, 60), (false, true, 59), (false, false, 60));
        for p in POLICIES {
            expect(
                p,
                &[
                    (
                        (true, false, false),
                        pass,
                        0,
                        old,
                        Fate::Flash { or_evict: false },
                    ),
                    ((true, true, false), pass, 0, old, Fate::SecondChance),
                    // Too young, or not wanted by the tier (a stub never is): left alone.
                    ((true, false, false), pass, 0, young, Fate::Keep),
                    ((true, false, true), pass, 0, refused, Fate::Keep),
                ],
            );
        }
    }

    #[test]
    fn what_reads_writes_and_second_chances_do_to_the_marks() {
        use crate::item::{MARK_KEY_BINARY, MARK_STALE};
        for p in POLICIES.map(state) {
            assert_eq!(p.read_marks(), MARK_FETCHED | MARK_ACCESSED);
            assert!(p.read_marks_due(0));
            assert!(p.read_marks_due(MARK_FETCHED | MARK_STALE));
            assert!(p.read_marks_due(MARK_ACCESSED));
            assert!(!p.read_marks_due(MARK_FETCHED | MARK_ACCESSED | MARK_KEY_BINARY));
            assert_eq!(p.store_marks(0x1234), 0);
            assert_eq!(p.overwrite_marks(), MARK_ACCESSED);
            assert_eq!(p.second_chance_clears(), MARK_ACCESSED);
            assert_eq!(p.stub_clears(), MARK_ACCESSED);
            // After a second chance the item is no longer read recently, until read.
            let mark = p.read_marks() & !p.second_chance_clears();
            assert!(!p.read_recently(mark) && p.read_recently(mark | p.read_marks()));
            assert!(p.read_recently(p.overwrite_marks()));
            // A stub read since it went to flash, and one not.
            assert!(p.read_since_stub(p.read_marks()));
            assert!(!p.read_since_stub(p.read_marks() & !p.stub_clears()));
        }
    }
}
