//! Pipelined batches: the fast-path requests buffered behind the one being run are
//! parsed once, ahead, so that the cache misses of their lookups overlap.
//!
//! A pipelined `get` or `set` of a key that is not in the CPU's cache waits for two
//! misses in a row: the index bucket, then the item's record. The shard lock's full
//! barrier keeps the next request's misses from starting early, so sixteen pipelined
//! requests wait for thirty-two misses one after another. When a connection's input
//! holds more than the request just parsed, [`Ahead::fill`] parses up to
//! [`AHEAD_MAX`] fast-path requests (the ones [`parse_fast`] takes: a single-key
//! `get`/`gets`, a plain `set` whose data has arrived), hashes their keys and
//! prefetches their buckets, then, once those have arrived, finds each key's entry
//! without the lock and prefetches its record (the two stages of the multi-get, see
//! `Store::prefetch_index`). The requests then run one at a time, in order, as before;
//! each takes its parsed fields, hash and peek from the queue instead of parsing and
//! hashing again.
//!
//! Items hold offsets into the connection's input buffer, valid only while it is not
//! compacted: the queue lives for one `Conn::process` call, which reads
//! no socket bytes. So each worker owns one queue and lends it to every call, and a
//! connection holds none between them. A peek taken ahead may be stale by the time its request runs (an
//! earlier request of the batch stored the same key): the lookup checks it under the
//! lock and searches the bucket when it no longer holds, as for any peek.

use protocol::fast::parse_fast;
use protocol::text::{GetCommand, Request, StoreCommand, MAX_KEY_LEN};
use storage::{KeyHash, Peeked};

use crate::ops::{memcached_item_fits, Exec};

/// Requests parsed ahead at most: their misses overlap, and sixteen misses (bucket and
/// record of each) fit a core's queue of outstanding misses.
pub const AHEAD_MAX: usize = 8;

/// What a queued request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Get(GetCommand),
    Set { flags: u32, exptime: i32 },
}

/// One request parsed ahead, by offsets into the input buffer (64 bytes: offsets
/// within a request fit 32 bits, as a request is at most a line and one item).
#[derive(Clone, Copy, Debug)]
pub struct Item {
    /// Where the request starts in the input buffer.
    pub start: usize,
    /// Where the key starts, from `start`.
    pub key_at: u32,
    pub key_len: u32,
    /// Where a set's data block (value and its `\r\n`) starts, from `start`.
    pub data_at: u32,
    /// Bytes from `start` to the next request.
    pub total: u32,
    pub kind: Kind,
    pub hash: KeyHash,
    pub peeked: Peeked,
}

impl Item {
    /// `request`, parsed by [`parse_fast`] from the start of `input` with its next
    /// request at `next`, as a queue item, if the fast path can run it from the
    /// queue: a single-key `get`/`gets` of a key short enough to look up, or a `set`
    /// small enough to store whose data block has fully arrived.
    #[inline]
    pub fn of(
        input: &[u8],
        request: Request<'_>,
        next: usize,
        item_size_max: usize,
    ) -> Option<Item> {
        let (key, total, kind) = match request {
            Request::Get {
                command: command @ (GetCommand::Get | GetCommand::Gets),
                keys,
                ..
            } => {
                let key = keys.single_key()?;
                if key.len() > MAX_KEY_LEN {
                    return None;
                }
                (key, next, Kind::Get(command))
            }
            Request::Store {
                command: StoreCommand::Set,
                key,
                flags,
                exptime,
                len,
                cas: 0,
                noreply: false,
            } => {
                let total = next + len + 2;
                if input.len() < total || !memcached_item_fits(item_size_max, key.len(), flags, len)
                {
                    return None;
                }
                (key, total, Kind::Set { flags, exptime })
            }
            _ => return None,
        };
        Some(Item {
            start: 0,
            key_at: (key.as_ptr() as usize - input.as_ptr() as usize) as u32,
            key_len: key.len() as u32,
            data_at: next as u32,
            total: total as u32,
            kind,
            hash: KeyHash::NONE,
            peeked: Peeked::NONE,
        })
    }

    const EMPTY: Item = Item {
        start: usize::MAX,
        key_at: 0,
        key_len: 0,
        data_at: 0,
        total: 0,
        kind: Kind::Get(GetCommand::Get),
        hash: KeyHash::NONE,
        peeked: Peeked::NONE,
    };
}

/// The queue of requests parsed ahead, for one `process` call. Items are read in
/// place ([`Ahead::take`] gives an index), not moved: an item is eleven words.
pub struct Ahead {
    items: [Item; AHEAD_MAX],
    head: usize,
    len: usize,
}

impl Default for Ahead {
    fn default() -> Self {
        Ahead {
            items: [Item::EMPTY; AHEAD_MAX],
            head: 0,
            len: 0,
        }
    }
}

impl Ahead {
    /// Forget every queued request (at the start of each `process` call).
    #[inline]
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// The queued request that starts at `rpos`, taken off the queue: its index for
    /// [`Ahead::item`].
    #[inline]
    pub fn take(&mut self, rpos: usize) -> Option<usize> {
        if self.head == self.len {
            return None;
        }
        let i = self.head;
        if self.items[i].start != rpos {
            // The input moved on some other way: nothing queued is valid.
            self.clear();
            return None;
        }
        self.head += 1;
        Some(i)
    }

    /// The item at index `i` (from [`Ahead::take`]).
    #[inline]
    pub fn item(&self, i: usize) -> &Item {
        &self.items[i]
    }

    /// A request whose key is `first_key` was just parsed from the start of `input`
    /// (which starts at `base` in the input buffer), and more input follows its
    /// `first_len` bytes: parse the fast-path requests after it, up to [`AHEAD_MAX`]
    /// in all, and when there is at least one, run the two prefetch stages over them
    /// all (the first included) and queue them. Returns the hash and peek for the
    /// first request, which the caller runs now; `None` when nothing was queued.
    pub fn fill(
        &mut self,
        exec: &Exec<'_>,
        input: &[u8],
        base: usize,
        first_key: &[u8],
        first_len: usize,
        item_size_max: usize,
    ) -> Option<(KeyHash, Peeked)> {
        self.clear();
        // Stage 1 as each request is parsed: hash the key, prefetch lock word and bucket.
        let hash = exec.hash(first_key);
        exec.prefetch_index(hash);
        self.items[0] = Item {
            start: base,
            key_len: first_key.len() as u32,
            total: first_len as u32,
            hash,
            ..Item::EMPTY
        };
        let mut n = 1;
        let mut at = first_len;
        while n < AHEAD_MAX && at < input.len() {
            let rest = &input[at..];
            let Some((request, _, next)) = parse_fast(rest) else {
                break;
            };
            let Some(item) = Item::of(rest, request, next, item_size_max) else {
                break;
            };
            let key_at = item.key_at as usize;
            let hash = exec.hash(&rest[key_at..key_at + item.key_len as usize]);
            exec.prefetch_index(hash);
            self.items[n] = Item {
                start: base + at,
                hash,
                ..item
            };
            at += item.total as usize;
            n += 1;
        }
        if n < 2 {
            return None;
        }
        // Stage 2, once the first buckets have had time to arrive: find each key's
        // entry without the lock and prefetch its record.
        for item in &mut self.items[..n] {
            item.peeked = exec.prefetch_record(item.hash, item.key_len as usize);
        }
        // The first runs now; the rest wait in the queue.
        self.head = 1;
        self.len = n;
        Some((self.items[0].hash, self.items[0].peeked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(input: &[u8]) -> Option<Item> {
        let (request, _, next) = parse_fast(input)?;
        Item::of(input, request, next, 1 << 20)
    }

    #[test]
    fn items_of_the_fast_path_requests() {
        let get = parsed(b"get alpha\r\nrest").unwrap();
        assert_eq!(
            (get.key_at, get.key_len, get.total, get.kind),
            (4, 5, 11, Kind::Get(GetCommand::Get))
        );
        let gets = parsed(b"gets k\r\n").unwrap();
        assert_eq!(gets.kind, Kind::Get(GetCommand::Gets));
        let set = parsed(b"set key 5 10 3\r\nabc\r\nget").unwrap();
        assert_eq!(
            (set.key_at, set.key_len, set.data_at, set.total),
            (4, 3, 16, 21),
            "line, data and its CRLF"
        );
        assert_eq!(
            set.kind,
            Kind::Set {
                flags: 5,
                exptime: 10
            }
        );
    }

    #[test]
    fn requests_the_queue_does_not_take() {
        // Data not all here yet, a value too large to store, a key too long to look up.
        assert!(parsed(b"set key 0 0 3\r\nab").is_none());
        assert!(parsed(b"set key 0 0 2000000\r\n").is_none());
        let long = format!("get {}\r\n", "k".repeat(MAX_KEY_LEN + 1));
        assert!(parsed(long.as_bytes()).is_none());
    }

    #[test]
    fn fill_queues_what_follows_and_take_checks_the_position() {
        let shared = crate::state::Shared::from_args(["ferrocache", "-t", "1"]).unwrap();
        let exec = Exec {
            shared: &shared,
            stats: shared.worker_stats(0),
            sink: crate::reply::Sink::COPY,
            latency: None,
        };
        let store = &exec;
        let input = b"get a\r\nset b 0 0 1\r\nx\r\nget c\r\ndelete d\r\nget e\r\n";
        let (key, len) = (&input[4..5], 7);
        let mut ahead = Ahead::default();
        let (h, _) = ahead.fill(store, input, 100, key, len, 1 << 20).unwrap();
        assert_eq!(h, store.hash(b"a"));
        // `delete` is not a fast-path request: the batch stops before it.
        let i = ahead.take(107).unwrap();
        let b = *ahead.item(i);
        assert_eq!((b.hash, b.key_len, b.total), (store.hash(b"b"), 1, 16));
        let i = ahead.take(123).unwrap();
        let c = *ahead.item(i);
        assert_eq!((c.hash, c.total), (store.hash(b"c"), 7));
        assert!(ahead.take(130).is_none(), "queue empty");
        // A position the queue does not expect clears it.
        ahead.fill(store, input, 0, key, len, 1 << 20).unwrap();
        assert!(ahead.take(1).is_none());
        assert!(ahead.take(7).is_none(), "cleared");
        // One request alone is not queued.
        let alone = b"get a\r\nge";
        assert!(ahead
            .fill(store, alone, 0, &alone[4..5], 7, 1 << 20)
            .is_none());
        assert!(ahead.take(7).is_none());
    }
}
