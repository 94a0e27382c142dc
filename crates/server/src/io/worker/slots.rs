//! A worker's connections, from the socket the kernel hands over to the close, in one
//! table of slots that both backends keep.
//!
//! ```text
//!   socket accepted ─> Slots::open: admitted against -c, or refused with memcached's
//!                      line ─> socket options ─> a slot ─> its TLS session, if any
//!                      ─> the backend registers it ─> stats conns, conn_new ─> Link
//!   close           ─> Slots::close: conn_close with its reason ─> the backend
//!                      detaches it ─> Slots::release ─> socket, buffers, TLS session go
//!   watch           ─> Slots::hand_to_logger: detached ─> released ─> the socket
//!                      goes to the logger thread
//! ```
//!
//! A connection counts in `curr_connections` from its admission to its release and no
//! longer: the [`Admitted`] token of its admission lives in its slot beside it, and
//! giving the token back, which consumes it, is the one place the count goes down. Only
//! [`Slots::release`] takes a connection out of its slot, and only [`Slots::open`] holds
//! a token outside one, for a socket it fails to open.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use socket2::SockRef;

use super::log::{conn_closing, conn_opened};
use super::Engine;
use crate::admin::conns::Entry;
use crate::admin::watch::CloseReason;
use crate::config::Settings;
use crate::io::flash_io::{ConnReads, WorkerReads};
use crate::io::tls::TlsConn;
use crate::session::conn::Conn;
use crate::state::Shared;
use crate::stats::{bump, WorkerStats};

/// memcached's answer to a connection past `-c`, which is then closed.
pub(crate) const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// A connection counted in `curr_connections` against `-c`. Only [`Admitted::admit`]
/// makes one, and only [`Admitted::release`] gives it back, consuming it: a connection
/// is released at most once.
#[must_use = "an admitted connection is counted until Admitted::release"]
struct Admitted(());

impl Admitted {
    /// Count a new connection against `-c` (`total_connections`); over the limit it is
    /// not counted and `rejected_connections` is.
    fn admit(shared: &Shared, stats: &WorkerStats) -> Option<Admitted> {
        let prev = shared.curr_connections.fetch_add(1, Ordering::Relaxed);
        let admitted = Admitted(());
        if prev >= shared.settings.max_connections {
            admitted.release(shared);
            bump(&stats.rejected_connections, 1);
            return None;
        }
        bump(&stats.total_connections, 1);
        Some(admitted)
    }

    fn release(self, shared: &Shared) {
        shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What every connection holds, whichever backend serves it, over its socket `S`.
pub(crate) struct Link<S> {
    /// Its socket (epoll: mio's, registered with the worker's poller; io_uring: the
    /// descriptor the ring reads and writes).
    pub socket: S,
    /// The sans-I/O connection: its buffers, framing and requests.
    pub conn: Conn,
    /// Its `stats conns` entry, which also holds the server time of the last byte
    /// received, for `-o idle_timeout` and the buffer scan.
    pub entry: Arc<Entry>,
    /// The TLS session of a connection accepted on a TLS listener (`-Z`).
    pub tls: Option<Box<TlsConn>>,
    /// Its flash reads in flight and done (`flash_io.rs`).
    pub reads: ConnReads,
}

impl<S> Link<S> {
    /// `process` accepted a `watch`: whether the connection may now go to the logger
    /// thread. The logger writes plain sockets only: a TLS connection is refused, and
    /// stays an ordinary connection.
    pub fn may_watch(&mut self, shared: &Shared) -> bool {
        if self.tls.is_none() {
            return true;
        }
        shared.watch.release();
        self.conn
            .refuse_watch(b"ERROR watch is not supported over TLS\r\n");
        false
    }

    /// Before the connection's turn: lend it the flash reads finished for it
    /// (`flash_io.rs`).
    #[inline(always)]
    pub fn lend_reads(&mut self, flash: Option<&WorkerReads>) {
        if let Some(f) = flash {
            f.begin(&mut self.reads);
        }
    }

    /// After the connection's turn (it is in `slot`): start the flash reads it deferred.
    #[inline(always)]
    pub fn start_reads(&mut self, flash: Option<&WorkerReads>, slot: usize) {
        if let Some(f) = flash {
            f.end(slot, &mut self.reads, &mut self.conn);
        }
    }
}

/// A backend's connection, as [`Slots`] holds it.
pub(crate) trait Slot {
    type Socket: AsFd;

    /// What a slot keeps from one connection to the next, changed at every release
    /// (io_uring: a generation, so that a completion for a closed connection never
    /// reaches the next one in its slot); `()` where nothing is kept.
    type Tag: Copy + Default + PartialEq;

    /// The tag a slot gets when its connection is released.
    fn next_tag(tag: Self::Tag) -> Self::Tag;

    fn link_mut(&mut self) -> &mut Link<Self::Socket>;

    /// The buffer scan found the connection idle (see [`Conn::release_idle`]): give
    /// its buffers back, with the backend's own where none is in flight.
    fn release_idle(&mut self);
}

/// A connection in its slot, with the token of its admission.
struct Held<C> {
    admitted: Admitted,
    client: C,
}

/// A worker's table of connection slots. A slot's index is its connection's token in
/// the backend's poller or ring; slots are reused and never freed.
pub(crate) struct Slots<C: Slot> {
    held: Vec<Option<Held<C>>>,
    /// Each slot's tag, kept while the slot is free.
    tags: Vec<C::Tag>,
    free: Vec<usize>,
}

impl<C: Slot> Default for Slots<C> {
    fn default() -> Self {
        Slots {
            held: Vec::new(),
            tags: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<C: Slot> Slots<C> {
    /// The accept helper: what happens to a socket the kernel handed over on a listener
    /// (`tls`: a TLS listener) before it is served. Over `-c` it is refused with
    /// memcached's line and dropped. Otherwise it gets the socket options, a slot and
    /// its TLS session; `register` puts it on the backend's poller or ring under the
    /// slot's index and tag (`None`: it could not, and the socket is dropped); then its
    /// `stats conns` entry and `conn_new` line, and `client` makes the backend's
    /// connection of its [`Link`] and what `register` returned. Returns the slot.
    pub fn open<R>(
        &mut self,
        engine: &Engine,
        mut socket: C::Socket,
        tls: bool,
        register: impl FnOnce(&mut C::Socket, usize, C::Tag) -> Option<R>,
        client: impl FnOnce(Link<C::Socket>, R) -> C,
    ) -> Option<usize> {
        let shared = &*engine.shared;
        let Some(admitted) = Admitted::admit(shared, &engine.stats) else {
            let _ = crate::sys::send(socket.as_fd().as_raw_fd(), TOO_MANY_CONNECTIONS);
            return None;
        };
        set_options(socket.as_fd(), &shared.settings);
        let idx = self.vacant(&engine.stats);
        let now = shared.clock.now();
        let session = match (&shared.tls, tls) {
            (Some(t), true) => match TlsConn::new(t, now) {
                Ok(session) => Some(session),
                Err(_) => {
                    self.vacate(idx, admitted, shared);
                    return None;
                }
            },
            _ => None,
        };
        let Some(registered) = register(&mut socket, idx, self.tags[idx]) else {
            self.vacate(idx, admitted, shared);
            return None;
        };
        let entry = shared.conns.accepted(&socket, now);
        conn_opened(shared, &socket);
        let mut conn = Conn::new();
        conn.set_fd(socket.as_fd().as_raw_fd());
        let link = Link {
            socket,
            conn,
            entry,
            tls: session,
            reads: engine.flash.as_ref().map(|f| f.conn()).unwrap_or_default(),
        };
        let client = client(link, registered);
        self.held[idx] = Some(Held { admitted, client });
        Some(idx)
    }

    /// The close path: memcached's `conn_close` line with `reason`, `detach` (the
    /// backend takes the socket off its poller or ring), then [`Slots::release`]; the
    /// socket, the buffers and the TLS session go with the connection. Nothing for a
    /// free slot.
    pub fn close(
        &mut self,
        idx: usize,
        shared: &Shared,
        reason: CloseReason,
        detach: impl FnOnce(&mut C),
    ) {
        drop(self.leave(idx, shared, |c| {
            conn_closing(shared, &c.link_mut().socket, reason);
            detach(c);
        }));
    }

    /// `watch`: the connection leaves the worker for the logger thread, which owns its
    /// socket from now on (memcached's `event_del` and `logger_add_watcher`), once
    /// `detach` took it off the backend's poller or ring. The worker keeps no part of
    /// it, so no watcher can slow it down. It counts as closed here (`curr_connections`,
    /// `stats conns`), without memcached's `conn_close` line. `into_socket` gives the
    /// socket itself (still non-blocking) out of the connection.
    pub fn hand_to_logger(
        &mut self,
        idx: usize,
        shared: &Shared,
        streams: u16,
        detach: impl FnOnce(&mut C),
        into_socket: impl FnOnce(C) -> OwnedFd,
    ) {
        if let Some(c) = self.leave(idx, shared, detach) {
            shared.watch.attach(into_socket(c), streams);
        }
    }

    /// `detach` the connection in slot `idx`, then [`Slots::release`] it.
    fn leave(&mut self, idx: usize, shared: &Shared, detach: impl FnOnce(&mut C)) -> Option<C> {
        detach(self.get_mut(idx)?);
        self.release(idx, shared)
    }

    /// Take the connection out of its slot: `stats conns` forgets it, it no longer
    /// counts in `curr_connections`, and the slot is free for the next. `None` (and
    /// nothing done) for a free slot.
    pub fn release(&mut self, idx: usize, shared: &Shared) -> Option<C> {
        let Held {
            admitted,
            mut client,
        } = self.held.get_mut(idx)?.take()?;
        shared
            .conns
            .closed(client.link_mut().socket.as_fd().as_raw_fd());
        self.vacate(idx, admitted, shared);
        Some(client)
    }

    /// Give back the admission of slot `idx`'s connection, and the slot.
    fn vacate(&mut self, idx: usize, admitted: Admitted, shared: &Shared) {
        admitted.release(shared);
        self.tags[idx] = C::next_tag(self.tags[idx]);
        self.free.push(idx);
    }

    /// A free slot: one given back, or a new one. Each new one publishes the table's
    /// bytes (`stats` `conn_state_bytes`): slots are reused and never freed, so this is
    /// the table's size at the most connections the worker has held.
    fn vacant(&mut self, stats: &WorkerStats) -> usize {
        if let Some(idx) = self.free.pop() {
            return idx;
        }
        if self.held.len() == self.held.capacity() {
            // By an eighth of the table and at least 64 slots: doubling, a table just
            // past a power of two would leave nearly half its slots unused, for ever.
            // The list of free slots may come to hold them all.
            self.held.reserve_exact(self.held.len() / 8 + 64);
            self.free
                .reserve_exact(self.held.capacity() - self.free.len());
            self.tags
                .reserve_exact(self.held.capacity() - self.tags.len());
        }
        self.held.push(None);
        self.tags.push(C::Tag::default());
        let bytes = self.held.capacity() * std::mem::size_of::<Option<Held<C>>>()
            + self.free.capacity() * std::mem::size_of::<usize>()
            + self.tags.capacity() * std::mem::size_of::<C::Tag>();
        stats
            .conn
            .state_bytes
            .store(bytes as u64, Ordering::Relaxed);
        self.held.len() - 1
    }

    /// The connection in slot `idx`.
    #[inline(always)]
    pub fn get_mut(&mut self, idx: usize) -> Option<&mut C> {
        match self.held.get_mut(idx) {
            Some(Some(h)) => Some(&mut h.client),
            _ => None,
        }
    }

    /// The connection in slot `idx`, when the slot's tag is still `tag`.
    #[inline(always)]
    pub fn get_tagged(&mut self, idx: usize, tag: C::Tag) -> Option<&mut C> {
        if self.tags.get(idx) != Some(&tag) {
            return None;
        }
        self.get_mut(idx)
    }

    /// How many slots the table has, free or not: every slot index is below it.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &C> {
        self.held.iter().flatten().map(|h| &h.client)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut C> {
        self.held.iter_mut().flatten().map(|h| &mut h.client)
    }

    /// The slots whose connection `pick` picks.
    pub fn matching(&mut self, mut pick: impl FnMut(&mut C) -> bool) -> Vec<usize> {
        (0..self.held.len())
            .filter(|&i| self.held[i].as_mut().is_some_and(|h| pick(&mut h.client)))
            .collect()
    }

    /// Give the flash reads finished since the last call to their connections, and
    /// `resume` each connection (with its slot) whose reads are all done, so that it
    /// runs again.
    pub fn deliver_reads(&mut self, flash: &WorkerReads, mut resume: impl FnMut(&mut C, usize)) {
        for done in flash.finished() {
            let slot = done.slot;
            if let Some(c) = self.get_mut(slot) {
                let link = c.link_mut();
                if WorkerReads::deliver(done, &mut link.reads, &mut link.conn) {
                    resume(c, slot);
                }
            }
        }
    }
}

/// The options every accepted socket gets, whichever backend serves it: `TCP_NODELAY`,
/// so that a reply goes out at once rather than behind the last one's acknowledgement
/// (a UNIX socket refuses it, which changes nothing), and `--busy-poll-us`'s
/// `SO_BUSY_POLL`.
fn set_options(socket: BorrowedFd<'_>, settings: &Settings) {
    let _ = SockRef::from(&socket).set_nodelay(true);
    if settings.busy_poll_us > 0 {
        if let Err(e) = crate::sys::set_busy_poll(socket.as_raw_fd(), settings.busy_poll_us) {
            if settings.verbose > 0 {
                eprintln!("ferrocache: SO_BUSY_POLL refused: {e}");
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::fs::File;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    use super::*;
    use crate::config::IoBackend;

    /// A connection as a backend would hold it, over one end of a socket pair.
    pub(crate) struct TestClient {
        pub link: Link<UnixStream>,
        /// How often the buffer scan found it idle.
        pub idle_releases: usize,
    }

    impl Slot for TestClient {
        type Socket = UnixStream;
        type Tag = u8;

        fn next_tag(tag: u8) -> u8 {
            tag.wrapping_add(1)
        }

        fn link_mut(&mut self) -> &mut Link<UnixStream> {
            &mut self.link
        }

        fn release_idle(&mut self) {
            self.idle_releases += 1;
        }
    }

    /// A worker's engine for a server started with `args` (after the program name).
    pub(crate) fn engine(args: &[&str]) -> Engine {
        let args = std::iter::once("ferrocache").chain(args.iter().copied());
        let shared = Arc::new(Shared::from_args(args).expect("settings"));
        let stats = shared.worker_stats(0).clone();
        let wake = Arc::new(File::open("/dev/null").expect("/dev/null"));
        Engine::new(shared, stats, &wake, IoBackend::Epoll)
    }

    /// Open a connection over a new socket pair, registered with the tag it is given;
    /// returns its slot (or `None`: refused) and the peer's end.
    pub(crate) fn open(
        slots: &mut Slots<TestClient>,
        engine: &Engine,
    ) -> (Option<usize>, UnixStream) {
        let (ours, peer) = UnixStream::pair().expect("socket pair");
        let idx = slots.open(
            engine,
            ours,
            false,
            |_, _, tag| Some(tag),
            |link, _| TestClient {
                link,
                idle_releases: 0,
            },
        );
        (idx, peer)
    }

    fn curr(engine: &Engine) -> usize {
        engine.shared.curr_connections.load(Ordering::Relaxed)
    }

    fn counter(c: &std::sync::atomic::AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    #[test]
    fn admission_counts_up_to_the_limit_and_back_to_zero() {
        let engine = engine(&["-c", "2"]);
        let (shared, stats) = (&*engine.shared, &*engine.stats);
        let first = Admitted::admit(shared, stats).expect("first of 2");
        let second = Admitted::admit(shared, stats).expect("second of 2");
        assert!(
            Admitted::admit(shared, stats).is_none(),
            "a third past -c 2"
        );
        assert_eq!(curr(&engine), 2, "a refusal is not counted");
        assert_eq!(counter(&stats.rejected_connections), 1);
        assert_eq!(counter(&stats.total_connections), 2);
        first.release(shared);
        second.release(shared);
        assert_eq!(curr(&engine), 0);
        let again = Admitted::admit(shared, stats).expect("room again");
        assert_eq!(curr(&engine), 1);
        again.release(shared);
    }

    #[test]
    fn past_the_limit_a_socket_is_refused_with_memcacheds_line() {
        let engine = engine(&["-c", "1"]);
        let mut slots = Slots::default();
        let (kept, _peer) = open(&mut slots, &engine);
        assert!(kept.is_some());
        let (refused, mut peer) = open(&mut slots, &engine);
        assert_eq!(refused, None);
        assert_eq!(curr(&engine), 1);
        let mut line = Vec::new();
        // The refused socket was dropped: the peer reads the line, then end of stream.
        peer.read_to_end(&mut line).expect("read");
        assert_eq!(line, TOO_MANY_CONNECTIONS);
    }

    #[test]
    fn a_close_releases_once() {
        let engine = engine(&["-c", "2"]);
        let shared = &*engine.shared;
        let mut slots = Slots::default();
        let (a, _pa) = open(&mut slots, &engine);
        let (b, _pb) = open(&mut slots, &engine);
        let (a, b) = (a.expect("a"), b.expect("b"));
        assert_eq!(curr(&engine), 2);
        let mut detached = 0;
        slots.close(a, shared, CloseReason::Normal, |_| detached += 1);
        slots.close(a, shared, CloseReason::Normal, |_| detached += 1);
        assert!(
            slots.release(a, shared).is_none(),
            "a free slot releases nothing"
        );
        assert_eq!(detached, 1, "detached once");
        assert_eq!(curr(&engine), 1, "counted down once");
        assert!(slots.get_mut(a).is_none());
        assert!(slots.get_mut(b).is_some());
        // The slot is reused, under its next tag.
        let (c, _pc) = open(&mut slots, &engine);
        assert_eq!(c, Some(a));
        assert!(slots.get_tagged(a, 0).is_none(), "the old tag names no one");
        assert!(slots.get_tagged(a, 1).is_some());
        slots.close(a, shared, CloseReason::Normal, |_| {});
        slots.close(b, shared, CloseReason::Normal, |_| {});
        assert_eq!(curr(&engine), 0);
        assert_eq!(slots.iter().count(), 0);
    }

    #[test]
    fn a_socket_that_fails_to_register_gives_back_its_admission_and_slot() {
        let engine = engine(&["-c", "1"]);
        let mut slots = Slots::<TestClient>::default();
        let (ours, _peer) = UnixStream::pair().expect("socket pair");
        let idx = slots.open(
            &engine,
            ours,
            false,
            |_, _, _| None::<()>,
            |_, _| unreachable!("not registered"),
        );
        assert_eq!(idx, None);
        assert_eq!(curr(&engine), 0);
        let (again, _peer) = open(&mut slots, &engine);
        assert_eq!(again, Some(0), "the slot was given back");
        assert_eq!(curr(&engine), 1);
    }

    #[test]
    fn a_connection_handed_to_the_logger_no_longer_counts() {
        let engine = engine(&[]);
        let shared = &*engine.shared;
        let mut slots = Slots::default();
        let (idx, _peer) = open(&mut slots, &engine);
        let idx = idx.expect("opened");
        slots.hand_to_logger(idx, shared, 0, |_| {}, |c| c.link.socket.into());
        assert_eq!(curr(&engine), 0);
        assert!(slots.get_mut(idx).is_none());
    }

    #[test]
    fn the_table_publishes_its_bytes_as_it_grows() {
        let engine = engine(&[]);
        let mut slots = Slots::default();
        let (_idx, _peer) = open(&mut slots, &engine);
        let bytes = counter(&engine.stats.conn.state_bytes) as usize;
        let slot = std::mem::size_of::<Option<Held<TestClient>>>();
        assert_eq!(
            slot,
            std::mem::size_of::<Option<TestClient>>(),
            "the token is free"
        );
        assert!(slots.held.capacity() >= 64, "at least 64 slots at once");
        let expected =
            slots.held.capacity() * slot + slots.free.capacity() * 8 + slots.tags.capacity();
        assert_eq!(
            bytes, expected,
            "the slots, the list of free ones and their tags"
        );
        slots.close(0, &engine.shared, CloseReason::Normal, |_| {});
    }
}
