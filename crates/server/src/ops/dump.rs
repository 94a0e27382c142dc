//! `lru_crawler metadump all|hash|<classes>`: one line per live item, as memcached 1.6.18
//! writes them, then `END`:
//!
//! ```text
//! key=<key, URI-encoded> exp=<unix time, -1 for never> la=<unix time> cas=<cas> fetch=<yes|no> cls=<class> size=<bytes>\n
//! ```
//!
//! There are no slab classes here, so `cls` and `size` are what memcached would report
//! for the item: `size` its item size (48-byte header, 8-byte CAS, key and NUL, value
//! and `\r\n`, 4 bytes of flags when non-zero), `cls` the class of that size under
//! memcached's default `-n 48 -f 1.25` (items past its 512 KiB chunk size: the largest
//! class). A class list selects items by that class. `la` is when the item was last
//! stored (memcached's moves on some reads too).
//!
//! The dump walks the index shard by shard (`Store::dump`) and pauses whenever the
//! connection's output reaches its high-water mark, as a paused multi-get does, so it
//! needs no memory beyond one output buffer whatever the cache holds. Like memcached's
//! crawler, it is not a snapshot of a cache that changes meanwhile.

use protocol::text::DumpClasses;
use storage::{DumpCursor, DumpItem};

use crate::admin::watch::format::uriencode;
use crate::ops::{memcached_item_size, Exec};

/// Index positions looked at per call into the store, between output checks.
const POSITIONS_PER_CALL: usize = 4096;
/// memcached's `-n` default plus its item header: the smallest class's chunk.
const SMALLEST_CHUNK: u32 = 96;
/// memcached's default `slab_chunk_max` (half a 1 MiB slab page).
const CHUNK_MAX: u32 = 512 * 1024;

/// A dump in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dump {
    classes: DumpClasses,
    cursor: DumpCursor,
}

impl Dump {
    pub fn new(classes: DumpClasses) -> Dump {
        Dump {
            classes,
            cursor: DumpCursor::default(),
        }
    }

    /// Append item lines to `out` until it reaches `pause_at` bytes (true: call again
    /// once it has drained) or every item has been listed (false; `END` is written).
    /// Out of line: rare, and kept out of the request path it is called from.
    #[cold]
    #[inline(never)]
    pub fn run(&mut self, exec: &Exec<'_>, out: &mut Vec<u8>, pause_at: usize) -> bool {
        let clock = &exec.shared.clock;
        let now = clock.now();
        let started = clock.process_started();
        let classes = self.classes;
        let settings = &exec.shared.settings;
        loop {
            let more = exec
                .store()
                .dump(&mut self.cursor, now, POSITIONS_PER_CALL, |mut item| {
                    item.cas = settings.item_cas(item.cas);
                    let size = memcached_item_size(
                        item.key.len(),
                        item.flags,
                        item.value_len,
                        settings.cas_enabled,
                    );
                    let class = class_of(size);
                    if classes.contains(class) {
                        write_line(out, &item, started, class, size);
                    }
                });
            if !more {
                out.extend_from_slice(b"END\r\n");
                return false;
            }
            if out.len() >= pause_at {
                return true;
            }
        }
    }
}

/// The slab class memcached (default `-n` and `-f`) would keep an item of `size` bytes
/// in: chunk sizes from 96, each 1.25 times the last (in whole bytes) rounded up to a
/// multiple of 8, up to 512 KiB; larger items are chunked into the largest class.
fn class_of(size: usize) -> u32 {
    let mut chunk = SMALLEST_CHUNK;
    let mut id = 1;
    while id < 63 && f64::from(chunk) < f64::from(CHUNK_MAX) / 1.25 {
        let aligned = chunk.next_multiple_of(8);
        if size <= aligned as usize {
            return id;
        }
        chunk = (f64::from(aligned) * 1.25) as u32;
        id += 1;
    }
    id
}

fn write_line(out: &mut Vec<u8>, item: &DumpItem<'_>, started: i64, class: u32, size: usize) {
    use std::io::Write;
    out.extend_from_slice(b"key=");
    uriencode(item.key, out);
    let exp = if item.exptime == 0 {
        -1
    } else {
        started + i64::from(item.exptime)
    };
    // memcached ends these lines with a bare \n; `writeln!` writes exactly that.
    let _ = writeln!(
        out,
        " exp={exp} la={} cas={} fetch={} cls={class} size={size}",
        started + i64::from(item.time),
        item.cas,
        if item.fetched { "yes" } else { "no" },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_memcached_defaults() {
        // memcached -vv with the defaults prints these chunk sizes for classes 1-12.
        let chunks = [96, 120, 152, 192, 240, 304, 384, 480, 600, 752, 944, 1184];
        for (i, &chunk) in chunks.iter().enumerate() {
            assert_eq!(class_of(chunk), i as u32 + 1, "{chunk}");
            assert_eq!(class_of(chunk + 1), i as u32 + 2, "{}", chunk + 1);
        }
        assert_eq!(class_of(1), 1);
        assert_eq!(class_of(61), 1);
        assert_eq!(class_of(1062), 12);
        let largest = class_of(10 << 20);
        assert!((39..=42).contains(&largest), "{largest}");
        assert_eq!(class_of(CHUNK_MAX as usize), largest);
    }

    #[test]
    fn keys_are_uri_encoded_and_sizes_counted() {
        let mut out = Vec::new();
        uriencode(b"a%b c/\xc3\xa9-._~Z9", &mut out);
        assert_eq!(out, b"a%25b%20c%2F%C3%A9-._~Z9");
        // The sizes memcached 1.6.18 reports for these items, with and without -C.
        assert_eq!(memcached_item_size(1, 0, 1, true), 61);
        assert_eq!(memcached_item_size(1, 5, 2, true), 66);
        assert_eq!(memcached_item_size(1, 0, 1, false), 53);
        let item = |key, value_len, flags| DumpItem {
            key,
            value_len,
            flags,
            exptime: 0,
            time: 5,
            cas: 1,
            fetched: false,
            class: 1,
        };
        let mut line = Vec::new();
        write_line(&mut line, &item(b"a%b", 1, 0), 1000, 1, 63);
        assert_eq!(
            line,
            b"key=a%25b exp=-1 la=1005 cas=1 fetch=no cls=1 size=63\n"
        );
    }
}
