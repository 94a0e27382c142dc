//! The shard lock: a test-and-test-and-set lock whose unlock is a plain release store.
//!
//! A lookup holds its shard lock only while it finds the key and copies the item out,
//! and a multi-get takes one lock per key. parking_lot's mutex unlocks with a
//! compare-and-swap (it must see whether a waiter parked), and on x86 every locked
//! instruction waits for the store buffer to drain: the reply bytes the lookup just
//! wrote, so in a multi-get profile the unlock cost more than the lock itself
//! (docs/perf-notes.md, "This round: overwrites in place, pipelined batches parsed
//! ahead, release-store unlocks"). A release store is a plain `mov`, and waits for
//! nothing.
//!
//! Without a parked bit, a waiter cannot sleep until it is woken; it spins (a few
//! hundred `pause`s, doubling), then yields its core, then sleeps 50 µs at a time.
//! Shard locks are held for microseconds and rarely contended (there are many shards,
//! and each worker owns its connections); the long holders (a table growing, the expiry
//! sweep's batch) are rare, and a waiter past the spin phase gives its CPU back.
//!
//! The lock is a [`lock_api::RawMutex`], so the guard and the data it protects are
//! `lock_api`'s; the only `unsafe` here is the trait's contract.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The raw lock; `lock_api::Mutex<RawSpin, T>` is the mutex.
pub(crate) struct RawSpin {
    locked: AtomicBool,
}

/// Spins before the first yield: 2^0 + ... + 2^6 = 127 `pause`s, about 1–4 µs.
const SPIN_ROUNDS: u32 = 7;
/// Yields before sleeping.
const YIELD_ROUNDS: u32 = 16;
/// A waiter's sleep once spinning and yielding did not get the lock.
const SLEEP: Duration = Duration::from_micros(50);

// SAFETY: `lock` and `try_lock` return holding the lock only after a successful
// compare-and-swap from false to true, so at most one holder exists at a time; `unlock`
// (called only by the holder, per the trait's contract) clears it with a release store
// that the next acquiring compare-and-swap reads, so everything the holder did happens
// before the next holder's critical section.
unsafe impl lock_api::RawMutex for RawSpin {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: RawSpin = RawSpin {
        locked: AtomicBool::new(false),
    };

    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }
}

impl RawSpin {
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut round = 0u32;
        loop {
            // Test before test-and-set: wait with plain loads, which share the line,
            // rather than with compare-and-swaps, which take it from the holder.
            while self.locked.load(Ordering::Relaxed) {
                if round < SPIN_ROUNDS {
                    for _ in 0..1u32 << round {
                        std::hint::spin_loop();
                    }
                } else if round < SPIN_ROUNDS + YIELD_ROUNDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(SLEEP);
                }
                round = round.saturating_add(1);
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// A mutex on [`RawSpin`].
pub(crate) type SpinMutex<T> = lock_api::Mutex<RawSpin, T>;
/// Its guard.
pub(crate) type SpinGuard<'a, T> = lock_api::MutexGuard<'a, RawSpin, T>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn excludes_and_publishes_under_contention() {
        // Non-atomic read-modify-writes under the lock: a lost update shows a broken
        // exclusion, a stale read a missing release/acquire pairing.
        let threads = 4u64;
        let rounds = if cfg!(miri) { 50 } else { 20_000u64 };
        let m = SpinMutex::new((0u64, 0u64));
        let inside = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..rounds {
                        let mut g = m.lock();
                        assert_eq!(inside.fetch_add(1, Ordering::Relaxed), 0, "two holders");
                        let (a, b) = *g;
                        assert_eq!(a, b, "saw half of another holder's update");
                        *g = (a + 1, b + 1);
                        inside.fetch_sub(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(m.into_inner(), (threads * rounds, threads * rounds));
    }

    #[test]
    fn try_lock_fails_while_held_and_a_long_holder_is_waited_for() {
        let m = SpinMutex::new(0u32);
        let g = m.lock();
        assert!(m.try_lock().is_none());
        assert!(m.is_locked());
        drop(g);
        assert!(m.try_lock().is_some());
        // A holder that stays past the spin and yield phases: the waiter sleeps, then
        // gets the lock once it is released, and sees the holder's write.
        let held = m.lock();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| *m.lock());
            std::thread::sleep(Duration::from_millis(if cfg!(miri) { 1 } else { 20 }));
            let mut held = held;
            *held = 7;
            drop(held);
            assert_eq!(waiter.join().unwrap(), 7);
        });
    }
}
