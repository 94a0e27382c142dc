//! The queue of sealed (full) segments: the order in which they come round to be
//! evicted, and the scans a writer makes of its oldest end.
//!
//! Its representation is its own: the pool holds one under its mutex
//! (`PoolState::sealed`), and every other module seals, takes and puts back segments
//! through these methods, the memory image included ([`SealedQueue::entries`],
//! [`SealedQueue::restore`]). Each entry is a segment id and the bytes written in it.

use std::collections::VecDeque;

/// Sealed segments, oldest first: a FIFO.
#[derive(Debug, Default)]
pub(crate) struct SealedQueue {
    /// (segment id, bytes used), the oldest at the front.
    segs: VecDeque<(u32, u32)>,
}

/// Where [`SealedQueue::take_first`] took a segment from, for
/// [`SealedQueue::put_back`] to return it to the same place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place(usize);

impl SealedQueue {
    /// An empty queue with room for `segments` entries.
    pub fn with_capacity(segments: usize) -> SealedQueue {
        SealedQueue {
            segs: VecDeque::with_capacity(segments),
        }
    }

    /// Put back the entries a memory image saved ([`SealedQueue::entries`], oldest
    /// first) in place of the queue's.
    pub fn restore(&mut self, entries: Vec<(u32, u32)>) {
        self.segs = entries.into();
    }

    /// Every entry, oldest first (what a memory image saves).
    pub fn entries(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.segs.iter().copied()
    }

    /// Segments in the queue.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// The oldest segment, the next to come round.
    pub fn oldest(&self) -> Option<u32> {
        self.segs.front().map(|&(seg, _)| seg)
    }

    /// A writer's open segment is full (or was left idle): it joins as the newest.
    pub fn seal(&mut self, seg: u32, used: u32) {
        self.segs.push_back((seg, used));
    }

    /// The next segment to evict, taken off the queue: the oldest.
    pub fn pop_victim(&mut self) -> Option<(u32, u32)> {
        self.segs.pop_front()
    }

    /// A segment taken off the queue goes back as the newest: a victim passed over for a
    /// reader's pin, one whose walk kept items and left too little room, a compacted one
    /// without room enough for the writer.
    pub fn requeue(&mut self, seg: u32, used: u32) {
        self.segs.push_back((seg, used));
    }

    /// Among the oldest `within` segments, the first for which `find` holds, taken off
    /// the queue if `take` then agrees (a look at the first found only: a refusal
    /// leaves it, and the queue, as they were).
    pub fn take_first(
        &mut self,
        within: usize,
        find: impl FnMut(u32) -> bool,
        take: impl FnOnce(u32) -> bool,
    ) -> Option<(Place, u32, u32)> {
        let mut find = find;
        let at = self
            .segs
            .iter()
            .take(within)
            .position(|&(seg, _)| find(seg))?;
        let (seg, used) = self.segs[at];
        if !take(seg) {
            return None;
        }
        self.segs.remove(at);
        Some((Place(at), seg, used))
    }

    /// Among the oldest `within` segments, the one for which `key` is least (the first
    /// of equals), taken off the queue if `take` agrees given its key.
    pub fn take_least(
        &mut self,
        within: usize,
        key: impl FnMut(u32) -> usize,
        take: impl FnOnce(u32, usize) -> bool,
    ) -> Option<(u32, u32)> {
        let mut key = key;
        let (at, least) = self
            .segs
            .iter()
            .take(within)
            .enumerate()
            .map(|(i, &(seg, _))| (i, key(seg)))
            .min_by_key(|&(_, k)| k)?;
        if !take(self.segs[at].0, least) {
            return None;
        }
        self.segs.remove(at)
    }

    /// Return a segment that [`SealedQueue::take_first`] took to where it was (or to
    /// the newest end, if the queue is shorter now).
    pub fn put_back(&mut self, place: Place, seg: u32, used: u32) {
        let at = place.0.min(self.segs.len());
        self.segs.insert(at, (seg, used));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(segs: &[u32]) -> SealedQueue {
        let mut q = SealedQueue::with_capacity(segs.len());
        for &s in segs {
            q.seal(s, s * 10);
        }
        q
    }

    fn ids(q: &SealedQueue) -> Vec<u32> {
        q.entries().map(|(s, _)| s).collect()
    }

    #[test]
    fn victims_come_oldest_first_and_requeued_ones_go_last() {
        let mut q = queue(&[1, 2, 3]);
        assert_eq!(q.oldest(), Some(1));
        assert_eq!(q.pop_victim(), Some((1, 10)));
        q.requeue(1, 4);
        assert_eq!(q.entries().collect::<Vec<_>>(), [(2, 20), (3, 30), (1, 4)]);
        assert_eq!(q.pop_victim(), Some((2, 20)));
        assert_eq!(q.pop_victim(), Some((3, 30)));
        assert_eq!(q.pop_victim(), Some((1, 4)));
        assert_eq!(q.pop_victim(), None);
        assert_eq!(q.oldest(), None);
    }

    #[test]
    fn take_first_looks_only_within_the_bound_and_at_the_first_found() {
        let mut q = queue(&[1, 2, 3, 4]);
        // 4 is past the bound of 3.
        assert_eq!(q.take_first(3, |s| s == 4, |_| true), None);
        // The first even one is 2; refused, so 4 is not looked at and nothing moves.
        assert_eq!(q.take_first(4, |s| s % 2 == 0, |s| s != 2), None);
        assert_eq!(ids(&q), [1, 2, 3, 4]);
        let (place, seg, used) = q.take_first(4, |s| s % 2 == 0, |_| true).unwrap();
        assert_eq!((seg, used), (2, 20));
        assert_eq!(ids(&q), [1, 3, 4]);
        q.put_back(place, seg, 7);
        assert_eq!(q.entries().nth(1), Some((2, 7)));
        // A place past the end (the queue shrank meanwhile) is the newest end.
        let (place, seg, used) = q.take_first(4, |s| s == 4, |_| true).unwrap();
        q.pop_victim();
        q.pop_victim();
        q.put_back(place, seg, used);
        assert_eq!(ids(&q), [3, 4]);
    }

    #[test]
    fn take_least_takes_the_first_of_the_least_within_the_bound() {
        let mut q = queue(&[5, 3, 4, 3, 1]);
        let mut seen = None;
        let got = q.take_least(
            4,
            |s| s as usize,
            |s, k| {
                seen = Some((s, k));
                true
            },
        );
        // 1 is past the bound; of the two 3s the older.
        assert_eq!(got, Some((3, 30)));
        assert_eq!(seen, Some((3, 3)));
        assert_eq!(ids(&q), [5, 4, 3, 1]);
        assert_eq!(q.take_least(4, |s| s as usize, |_, _| false), None);
        assert_eq!(q.len(), 4);
        assert_eq!(
            SealedQueue::default().take_least(4, |_| 0, |_, _| true),
            None
        );
    }

    #[test]
    fn entries_round_trip() {
        let q = queue(&[9, 2, 7]);
        let saved: Vec<_> = q.entries().collect();
        let mut back = queue(&[1]);
        back.restore(saved.clone());
        assert_eq!(back.entries().collect::<Vec<_>>(), saved);
        assert_eq!(back.oldest(), Some(9));
    }
}
