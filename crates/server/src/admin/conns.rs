//! `stats conns`: every open socket, as memcached 1.6.18 lists them.
//!
//! ```text
//! STAT <fd>:addr tcp:0.0.0.0:11211             a listening socket
//! STAT <fd>:state conn_listening
//! STAT <fd>:secs_since_last_cmd 12
//! STAT <fd>:UDP UDP                            a UDP socket
//! STAT <fd>:addr udp:0.0.0.0:11211
//! STAT <fd>:state conn_read
//! STAT <fd>:secs_since_last_cmd 12
//! STAT <fd>:addr tcp:127.0.0.1:40122           a client: its address,
//! STAT <fd>:listen_addr tcp:127.0.0.1:11211    the address it reached,
//! STAT <fd>:state conn_read                    waiting for a request
//! STAT <fd>:secs_since_last_cmd 3              (conn_parse_cmd for the one asking)
//! ```
//!
//! Workers own their connections, so the list lives apart from them: an entry is added
//! when a socket is opened and removed when it is closed (a lock taken then, never per
//! request). A client's entry also holds the server time of its last input, which its
//! worker keeps up to date for `-o idle_timeout` anyway. memcached counts from the last
//! command; ferrocache from the last bytes received, the same thing unless a request
//! arrives in pieces.
//!
//! Each worker has its own listening socket per address (`SO_REUSEPORT`), so with `-t N`
//! an address is listed N times; memcached lists it once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use socket2::{SockAddr, SockRef};

/// What kind of socket an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Listening,
    Udp,
    Client,
}

/// A socket's address, kept as the kernel gave it and written out only when `stats
/// conns` asks: formatted at every accept, two strings cost a client connection about
/// 100 bytes and two allocations.
#[derive(Debug)]
enum Name {
    Inet(SocketAddr),
    /// A UNIX socket's path (or `unknown`, where the kernel gave no address).
    Text(Box<str>),
}

impl Name {
    fn of(a: Option<SockAddr>) -> Name {
        match a {
            Some(a) => match a.as_socket() {
                Some(inet) => Name::Inet(inet),
                None => Name::Text(
                    format!(
                        "unix:{}",
                        a.as_pathname()
                            .map_or_else(String::new, |p| p.display().to_string())
                    )
                    .into(),
                ),
            },
            None => Name::Text("unknown".into()),
        }
    }

    /// memcached's address form: `tcp:1.2.3.4:11211`, `tcp6:[::1]:11211`, `udp:...`,
    /// `udp6:...`, `unix:/path`.
    fn write(&self, udp: bool) -> String {
        let proto = if udp { "udp" } else { "tcp" };
        match self {
            // `ip:port`, and `[ip]:port` for IPv6.
            Name::Inet(SocketAddr::V4(v4)) => format!("{proto}:{v4}"),
            Name::Inet(SocketAddr::V6(v6)) => format!("{proto}6:{v6}"),
            Name::Text(t) => t.to_string(),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Name::Inet(_) => 0,
            Name::Text(t) => t.len(),
        }
    }
}

/// One open socket.
#[derive(Debug)]
pub struct Entry {
    kind: Kind,
    /// Server time of the last input (for a listening socket: when it was opened).
    last_input: AtomicU32,
    addr: Name,
    /// The address a client reached (for others, unused).
    listen_addr: Name,
}

impl Entry {
    /// Heap bytes the entry takes, with its share of the map, as glibc's malloc
    /// rounds each allocation (`stats` `conn_state_bytes`).
    fn footprint(&self) -> usize {
        fn chunk(n: usize) -> usize {
            if n == 0 {
                0
            } else {
                ((n + 8 + 15) & !15).max(32)
            }
        }
        // The Arc's two counts; a map slot (descriptor and pointer, nodes about
        // two-thirds full).
        chunk(16 + std::mem::size_of::<Entry>())
            + chunk(self.addr.heap_bytes())
            + chunk(self.listen_addr.heap_bytes())
            + 24
    }

    /// Input arrived at server time `now`.
    #[inline]
    pub fn touch(&self, now: u32) {
        self.last_input.store(now, Ordering::Relaxed);
    }

    /// Server time of the last input.
    #[inline]
    #[must_use]
    pub fn last_input(&self) -> u32 {
        self.last_input.load(Ordering::Relaxed)
    }
}

/// The open sockets, by descriptor.
#[derive(Debug, Default)]
pub struct ConnRegistry {
    entries: Mutex<BTreeMap<RawFd, Arc<Entry>>>,
    /// The entries' [`Entry::footprint`]s, changed under the lock.
    bytes: AtomicUsize,
}

impl ConnRegistry {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<RawFd, Arc<Entry>>> {
        // Nothing panics while holding it; a poisoned map is still a valid map.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A listening TCP or UNIX socket, or a UDP socket, opened at server time `now`.
    pub fn listening(&self, socket: &impl AsFd, udp: bool, now: u32) {
        let fd = socket.as_fd().as_raw_fd();
        let sock = SockRef::from(socket);
        let addr = Name::of(sock.local_addr().ok());
        let kind = if udp { Kind::Udp } else { Kind::Listening };
        self.insert(fd, kind, addr, Name::Text("".into()), now);
    }

    /// A client connection accepted at server time `now`; the entry is for its worker
    /// to [`Entry::touch`].
    pub fn accepted(&self, socket: &impl AsFd, now: u32) -> Arc<Entry> {
        let fd = socket.as_fd().as_raw_fd();
        let sock = SockRef::from(socket);
        let local = sock.local_addr().ok();
        // A UNIX client has no name of its own: memcached shows the socket's path.
        let peer = sock
            .peer_addr()
            .ok()
            .filter(|a| a.as_socket().is_some())
            .or_else(|| local.clone());
        self.insert(fd, Kind::Client, Name::of(peer), Name::of(local), now)
    }

    fn insert(&self, fd: RawFd, kind: Kind, addr: Name, listen_addr: Name, now: u32) -> Arc<Entry> {
        let entry = Arc::new(Entry {
            kind,
            addr,
            listen_addr,
            last_input: AtomicU32::new(now),
        });
        let mut entries = self.entries();
        self.bytes.fetch_add(entry.footprint(), Ordering::Relaxed);
        if let Some(old) = entries.insert(fd, entry.clone()) {
            self.bytes.fetch_sub(old.footprint(), Ordering::Relaxed);
        }
        entry
    }

    /// The socket `fd` is being closed (call before the descriptor can be reused).
    pub fn closed(&self, fd: RawFd) {
        if let Some(old) = self.entries().remove(&fd) {
            self.bytes.fetch_sub(old.footprint(), Ordering::Relaxed);
        }
    }

    /// Heap bytes of the entries (`stats` `conn_state_bytes`).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The `stats conns` reply, asked for on connection `asking` at server time `now`.
    pub fn report(&self, asking: RawFd, now: u32, out: &mut Vec<u8>) {
        let entries = self.entries();
        for (fd, e) in entries.iter() {
            let mut line = |name: &str, value: &str| {
                out.extend_from_slice(format!("STAT {fd}:{name} {value}\r\n").as_bytes());
            };
            if e.kind == Kind::Udp {
                line("UDP", "UDP");
            }
            let udp = e.kind == Kind::Udp;
            line("addr", &e.addr.write(udp));
            if e.kind == Kind::Client {
                line("listen_addr", &e.listen_addr.write(udp));
            }
            let state = match e.kind {
                Kind::Listening => "conn_listening",
                Kind::Client if *fd == asking => "conn_parse_cmd",
                Kind::Udp | Kind::Client => "conn_read",
            };
            line("state", state);
            line(
                "secs_since_last_cmd",
                &now.saturating_sub(e.last_input()).to_string(),
            );
        }
        out.extend_from_slice(b"END\r\n");
    }
}
