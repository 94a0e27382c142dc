//! The read hook: every get-family path tells [`Exec::observe_read`] what each key's
//! lookup found, and the hook tells the observers that are on (`stats/observe.rs`).
//!
//! Off, it costs a load of the observers' word and one predictable branch
//! ([`Exec::observing_reads`]). The text gets, whose every instruction counts, make
//! that check once per request and run a copy of their path whose visitor notes nothing
//! for the hook ([`Note`] for `()`): a one-key get as one more of the refusals it
//! already makes (the step then runs its observed copy, out of line), a multi-get once
//! per command. The observed copies' visitor notes each hit's length and flags
//! ([`Seen`]) and calls the hook for each key. The other paths (meta `mg`, binary GET,
//! GAT and TOUCH) call it after each lookup.
//!
//! The dispatch ([`Exec::tell_observers`]) is the one list of observers: an observer
//! added there, with its bit, is told every read of every protocol.

use storage::Lookup;

use super::Exec;
use crate::admin::prefix::Event;
use crate::stats::observe::{Read, ReadObservers, ReadOutcome, Via};

/// What a get's visitor keeps of a hit for the read hook: nothing (`()`, the lookup
/// path when no observer is on), or [`Seen`].
pub trait Note: Copy {
    /// Whether the read hook is told: false only for `()`.
    const OBSERVED: bool;

    /// Made from a hit's value length and client flags, under the item's lock.
    fn note(value_len: usize, flags: u32) -> Self;

    /// Tell the read hook what the lookup of `key` found: nothing at all for `()`.
    fn observe(exec: &Exec<'_>, key: &[u8], lookup: &Lookup<Self>, via: Via);
}

impl Note for () {
    const OBSERVED: bool = false;

    #[inline(always)]
    fn note(_: usize, _: u32) {}

    #[inline(always)]
    fn observe(_: &Exec<'_>, _: &[u8], _: &Lookup<()>, _: Via) {}
}

/// A hit as its observers are told it: the value's length and its client flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub value_len: usize,
    pub flags: u32,
}

impl Note for Seen {
    const OBSERVED: bool = true;

    #[inline(always)]
    fn note(value_len: usize, flags: u32) -> Seen {
        Seen { value_len, flags }
    }

    #[inline(always)]
    fn observe(exec: &Exec<'_>, key: &[u8], lookup: &Lookup<Seen>, via: Via) {
        exec.observe_read(key, lookup, via);
    }
}

impl Exec<'_> {
    /// Whether any observer of reads is on: the one check a read makes when none is.
    #[inline(always)]
    pub fn observing_reads(&self) -> bool {
        self.shared.observers.on() != 0
    }

    /// The read hook: the lookup of `key`, over `via`, found `lookup`. Call it after
    /// each key's lookup of a get-family command (text, meta, binary), counted or not;
    /// a lookup that deferred a flash read is not a read yet, and is told when it is
    /// made again.
    #[inline(always)]
    pub fn observe_read(&self, key: &[u8], lookup: &Lookup<Seen>, via: Via) {
        if self.observing_reads() {
            let outcome = match *lookup {
                Lookup::Hit(seen) => ReadOutcome::Hit {
                    value_len: seen.value_len,
                    flags: seen.flags,
                },
                Lookup::Miss => ReadOutcome::Miss,
                Lookup::Expired => ReadOutcome::Expired,
                Lookup::Flushed => ReadOutcome::Flushed,
            };
            self.tell_observers(&Read { key, outcome, via });
        }
    }

    /// Tell each observer that is on about `read`.
    #[cold]
    #[inline(never)]
    fn tell_observers(&self, read: &Read<'_>) {
        let on = self.shared.observers.on();
        // memcached's `stats detail` counts text and binary gets, not `mg`.
        if on & ReadObservers::DETAIL != 0 && read.via != Via::Meta {
            let hit = read.outcome.is_hit();
            self.shared.prefixes.record(read.key, Event::Get { hit });
        }
        if on & ReadObservers::FETCHERS != 0 {
            self.log_read(read);
        }
    }
}

#[cfg(test)]
mod tests {
    use protocol::binary::{frame_packet, opcode, write_request};

    use super::*;
    use crate::admin::watch::{Event as LogEvent, GetStatus, Streams};
    use crate::session::{Ahead, Conn};
    use crate::state::Shared;

    fn shared() -> Shared {
        Shared::from_args(["ferrocache", "-t", "1"]).unwrap()
    }

    /// Feed `input` to a fresh connection in one read; its replies.
    fn run(shared: &Shared, input: &[u8]) -> Vec<u8> {
        let exec = Exec {
            shared,
            stats: shared.worker_stats(0),
            sink: crate::reply::Sink::COPY,
            latency: None,
        };
        let mut conn = Conn::new();
        let space = conn.read_space();
        space[..input.len()].copy_from_slice(input);
        conn.filled(input.len());
        conn.process(&exec, &mut Ahead::default());
        conn.output().to_vec()
    }

    fn detail(shared: &Shared) -> String {
        let mut out = Vec::new();
        shared.prefixes.dump(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_text_get_path_is_told_once_detail_is_on_in_the_same_batch() {
        let s = shared();
        run(&s, b"set a:1 0 0 1\r\nx\r\nset b:1 0 0 1\r\ny\r\n");
        assert_eq!(s.observers.on(), 0);
        // `stats detail on` and then, in the same read: a one-key get (taken ahead,
        // behind the first), a gets, a multi-get, a gat, and `mg`, which memcached's
        // `stats detail` does not count.
        let out = run(
            &s,
            b"stats detail on\r\nget a:1\r\ngets a:2\r\nget a:1 b:1 b:2\r\n\
              gat 0 b:1\r\nmg a:1 v\r\n",
        );
        assert!(out.starts_with(b"OK\r\nVALUE a:1 0 1\r\nx\r\nEND\r\nEND\r\n"));
        assert_eq!(s.observers.on(), ReadObservers::DETAIL);
        // (Dumped in memcached's bucket order.)
        let counted =
            "PREFIX b get 3 hit 2 set 0 del 0\r\nPREFIX a get 3 hit 2 set 0 del 0\r\nEND\r\n";
        assert_eq!(detail(&s), counted);
        // A lone get, which goes around the request loop.
        assert_eq!(run(&s, b"get zz:1\r\n"), b"END\r\n");
        assert!(detail(&s).contains("PREFIX zz get 1 hit 0 "));
        let counted = detail(&s);
        run(&s, b"stats detail off\r\nget a:1\r\n");
        assert_eq!(s.observers.on(), 0);
        assert_eq!(detail(&s), counted);
    }

    #[test]
    fn a_binary_get_is_told_with_its_outcome() {
        let s = shared();
        s.prefixes.set_enabled(true);
        let mut input = Vec::new();
        write_request(&mut input, opcode::GET, b"", b"p:miss", b"", 0, 0);
        write_request(&mut input, opcode::SET, &[0; 8], b"p:hit", b"v", 0, 0);
        write_request(&mut input, opcode::GETK, b"", b"p:hit", b"", 0, 0);
        let out = run(&s, &input);
        let mut rest = &out[..];
        let mut statuses = Vec::new();
        while let Some(p) = frame_packet(rest) {
            statuses.push(p.header.status);
            rest = &rest[p.header.packet_len()..];
        }
        assert_eq!(statuses, [1, 0, 0]);
        assert_eq!(detail(&s), "PREFIX p get 2 hit 1 set 1 del 0\r\nEND\r\n");
    }

    #[test]
    fn a_watcher_of_fetchers_logs_each_read_from_its_lookup() {
        let s = shared();
        run(&s, b"set k 5 0 3\r\nabc\r\n");
        let (socket, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(s.watch.reserve());
        s.watch.attach(socket.into(), Streams::FETCHERS);
        assert_eq!(s.observers.on(), ReadObservers::FETCHERS);
        run(&s, b"get k nope\r\nmg k\r\n");
        let queues = s.watch.queues.lock().unwrap();
        let gets: Vec<_> = queues
            .iter()
            .flat_map(|q| q.batch.lock().unwrap().records.clone())
            .map(|r| match r.event {
                LogEvent::Get { status, nbytes, .. } => (status, nbytes),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            gets,
            [
                (GetStatus::Found, 5),
                (GetStatus::NotFound, 0),
                (GetStatus::Found, 5)
            ]
        );
    }
}
