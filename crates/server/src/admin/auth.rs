//! memcached's ASCII authentication (`-Y FILE`): before anything else, a connection
//! must send a `set` whose data block is `<user> <password>`, checked against the
//! `user:password` lines of FILE. Nothing is stored; the reply is `STORED` on success.
//!
//! ```text
//!   set <any key> <any flags> <any exptime> <bytes>\r\n
//!   <user> <password>\r\n          -> STORED | CLIENT_ERROR authentication failure
//! ```
//!
//! Every rule here is memcached 1.6.18's, checked against it in `tests/it/ascii_auth.rs`:
//!
//! - Until a connection authenticates, every line that is not such a `set` (`get`,
//!   `quit`, meta commands, a `set` with fewer than five tokens or a bad length) is
//!   answered `CLIENT_ERROR unauthenticated` and dropped, and the connection stays.
//! - The command line is split on spaces (runs of them, and leading ones, count as one
//!   separator) and may end in `\n` alone; tokens past the fifth are ignored, `noreply`
//!   included: the attempt is always answered.
//! - The data block must end in `\r\n` (`CLIENT_ERROR bad command line termination`).
//!   It is split on spaces as the line is, up to its first NUL byte; fewer than two
//!   tokens is `CLIENT_ERROR bad authentication token format`. The first two are the
//!   user and password, so a password with a space never matches (memcached's too).
//! - A failed attempt leaves the connection open and unauthenticated, to try again.
//! - A line not ended within 2048 bytes closes the connection, as does a data block
//!   larger than memcached's 16 KiB read buffer, once that much of it has arrived.
//! - `stats` counts every checked attempt in `auth_cmds`, the failed ones also in
//!   `auth_errors`.
//!
//! The file: one `user:password` per line, the password ending at the line's end or a
//! `\r`; a line without a `:` (an empty one included) makes the file malformed, and
//! the server does not start. At most eight entries are read, as in memcached; later
//! lines are ignored.

use std::fmt;

use protocol::text::safe_strtoul;

/// Entries memcached reads from the file at most.
pub const MAX_ENTRIES: usize = 8;
/// Bytes of an unterminated first line after which the connection is closed.
const MAX_LINE_BYTES: usize = 2048;
/// Largest data block (with its `\r\n`) waited for: memcached's read buffer.
const MAX_DATA_BYTES: usize = 16 * 1024;

/// The loaded `-Y` file; SIGHUP reads it again ([`AuthFile::reload`]).
pub struct AuthFile {
    path: String,
    entries: std::sync::RwLock<Vec<(Vec<u8>, Vec<u8>)>>,
}

/// Why the file could not be used; `Display` is memcached's message.
#[derive(Debug)]
pub enum AuthFileError {
    Open(String, std::io::Error),
    Malformed(String),
}

impl fmt::Display for AuthFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthFileError::Open(path, e) => {
                write!(f, "Could not open authfile [{path}] for reading, error {e}")
            }
            AuthFileError::Malformed(path) => write!(
                f,
                "Authfile [{path}] has a malformed entry. Should be 'user:password'"
            ),
        }
    }
}

impl std::error::Error for AuthFileError {}

impl AuthFile {
    /// Read and parse the file at `path`.
    pub fn load(path: &str) -> Result<AuthFile, AuthFileError> {
        let bytes = std::fs::read(path).map_err(|e| AuthFileError::Open(path.to_string(), e))?;
        let entries = parse(&bytes).ok_or_else(|| AuthFileError::Malformed(path.to_string()))?;
        Ok(AuthFile {
            path: path.to_string(),
            entries: std::sync::RwLock::new(entries),
        })
    }

    /// Read the file again (SIGHUP, as memcached does): on success its entries replace
    /// the old ones; on failure the old ones stay.
    pub fn reload(&self) -> Result<(), AuthFileError> {
        let fresh = AuthFile::load(&self.path)?;
        let entries = fresh
            .entries
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        *self.entries.write().unwrap_or_else(|e| e.into_inner()) = entries;
        Ok(())
    }

    /// The file's path, as `stats settings` shows it (`auth_enabled_ascii`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether `user` and `password` name an entry. Every entry is compared in full,
    /// whatever matched before, so the time taken does not tell how much of a guess was
    /// right.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries.iter().fold(false, |found, (u, p)| {
            found | (same_bytes(u, user) & same_bytes(p, password))
        })
    }
}

/// `a == b`, comparing every byte when the lengths agree.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The entries of a file, or `None` when a line has no `:`.
fn parse(bytes: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut entries = Vec::new();
    for line in body.split(|&b| b == b'\n') {
        let colon = line.iter().position(|&b| b == b':')?;
        let password = &line[colon + 1..];
        let end = password
            .iter()
            .position(|&b| b == b'\r')
            .unwrap_or(password.len());
        entries.push((line[..colon].to_vec(), password[..end].to_vec()));
        if entries.len() == MAX_ENTRIES {
            break;
        }
    }
    Some(entries)
}

/// What an unauthenticated connection's buffered input amounts to.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Not a whole attempt yet: wait until `need` bytes are buffered (0: a line end).
    Incomplete { need: usize },
    /// `used` bytes were one attempt, or one refused line: send `reply`. `checked` is
    /// whether a user and password were compared (for `auth_cmds`), `ok` whether they
    /// matched.
    Done {
        used: usize,
        reply: &'static [u8],
        checked: bool,
        ok: bool,
    },
    /// Junk, or more than memcached would buffer: close the connection.
    Close,
}

const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";

/// The next step of authentication for `input`, the connection's unread bytes.
pub fn step(input: &[u8], file: &AuthFile) -> Step {
    let Some(nl) = input.iter().position(|&b| b == b'\n') else {
        return if input.len() > MAX_LINE_BYTES {
            Step::Close
        } else {
            Step::Incomplete { need: 0 }
        };
    };
    let line_len = nl + 1;
    let refused = Step::Done {
        used: line_len,
        reply: UNAUTHENTICATED,
        checked: false,
        ok: false,
    };
    let line: Vec<&[u8]> = tokens(&input[..nl]).take(5).collect();
    if line.len() < 5 || line[0] != b"set" {
        return refused;
    }
    let Some(size) = safe_strtoul(line[4]) else {
        return refused;
    };
    let used = line_len + size as usize + 2;
    if input.len() < used {
        // memcached reads a block into its 16 KiB buffer and closes the connection when
        // the buffer fills before the block is whole.
        let cap = line_len + MAX_DATA_BYTES;
        return if input.len() >= cap {
            Step::Close
        } else {
            Step::Incomplete {
                need: used.min(cap),
            }
        };
    }
    let data = &input[line_len..used];
    let done = |reply, checked, ok| Step::Done {
        used,
        reply,
        checked,
        ok,
    };
    if !data.ends_with(b"\r\n") {
        return done(
            b"CLIENT_ERROR bad command line termination\r\n",
            false,
            false,
        );
    }
    let block = &data[..size as usize];
    let block = &block[..block.iter().position(|&b| b == 0).unwrap_or(block.len())];
    let mut words = tokens(block);
    let (Some(user), Some(password)) = (words.next(), words.next()) else {
        return done(
            b"CLIENT_ERROR bad authentication token format\r\n",
            false,
            false,
        );
    };
    if file.check(user, password) {
        done(b"STORED\r\n", true, true)
    } else {
        done(b"CLIENT_ERROR authentication failure\r\n", true, false)
    }
}

/// memcached's tokenizer: the non-empty runs between spaces.
fn tokens(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|&b| b == b' ').filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &[u8]) -> AuthFile {
        AuthFile {
            path: "test".into(),
            entries: std::sync::RwLock::new(parse(text).expect("well formed")),
        }
    }

    #[test]
    fn parses_user_password_lines() {
        assert_eq!(
            parse(b"alice:secret\nbob:pw:2\r\ncarol:\n"),
            Some(vec![
                (b"alice".to_vec(), b"secret".to_vec()),
                (b"bob".to_vec(), b"pw:2".to_vec()),
                (b"carol".to_vec(), b"".to_vec()),
            ])
        );
        assert_eq!(parse(b"alice:secret").map(|e| e.len()), Some(1));
        assert_eq!(parse(b"alice:secret\nnocolon\n"), None);
        assert_eq!(parse(b"alice:secret\n\nbob:x\n"), None);
        assert_eq!(parse(b"alice:secret\n\n"), None);
        let nine: Vec<u8> = (0..9)
            .flat_map(|i| format!("u{i}:p{i}\n").into_bytes())
            .collect();
        let f = file(&nine);
        assert!(f.check(b"u7", b"p7"));
        assert!(!f.check(b"u8", b"p8"), "only eight entries are read");
    }

    #[test]
    fn attempts_and_refusals() {
        let f = file(b"bob:pw2\n");
        let done = |used, reply: &'static [u8], checked, ok| Step::Done {
            used,
            reply,
            checked,
            ok,
        };
        let ok = |s: &[u8]| step(s, &f);
        assert_eq!(
            ok(b"set x 0 0 7\r\nbob pw2\r\n"),
            done(22, b"STORED\r\n", true, true)
        );
        assert_eq!(
            ok(b"set x 0 0 7\r\nbob pw3\r\nget x\r\n"),
            done(22, b"CLIENT_ERROR authentication failure\r\n", true, false)
        );
        // Extra tokens on the line and in the block are ignored; a bare \n ends a line.
        assert_eq!(
            ok(b" set  x 0 0 11 noreply\nbob pw2 xyz\r\n"),
            done(36, b"STORED\r\n", true, true)
        );
        for line in [
            &b"get x\r\n"[..],
            b"quit\r\n",
            b"setx a 0 0 7\r\n",
            b"SET x 0 0 7\r\n",
            b"set x 0 0\r\n",
            b"set x 0 0 -1\r\n",
            b"set x 0 0 7x\r\n",
            b"mg x v\r\n",
        ] {
            assert_eq!(
                ok(line),
                done(line.len(), UNAUTHENTICATED, false, false),
                "{line:?}"
            );
        }
        assert_eq!(
            ok(b"set x 0 0 6\r\nbobpw2\r\n"),
            done(
                21,
                b"CLIENT_ERROR bad authentication token format\r\n",
                false,
                false
            )
        );
        assert_eq!(
            ok(b"set x 0 0 7\r\nbob\0pw2\r\n"),
            done(
                22,
                b"CLIENT_ERROR bad authentication token format\r\n",
                false,
                false
            )
        );
        assert_eq!(
            ok(b"set x 0 0 7\r\nbob pw2XX"),
            done(
                22,
                b"CLIENT_ERROR bad command line termination\r\n",
                false,
                false
            )
        );
        assert_eq!(ok(b"set x 0 0 7\r\nbo"), Step::Incomplete { need: 22 });
        assert_eq!(ok(b"set x 0"), Step::Incomplete { need: 0 });
        assert_eq!(ok(&[b'x'; 2048]), Step::Incomplete { need: 0 });
        assert_eq!(ok(&[b'x'; 2049]), Step::Close);
        let big = b"set x 0 0 100000\r\n";
        assert_eq!(
            ok(big),
            Step::Incomplete {
                need: big.len() + 16384
            }
        );
        let mut filled = big.to_vec();
        filled.resize(big.len() + 16384, b'a');
        assert_eq!(ok(&filled), Step::Close);
    }

    #[test]
    fn compares_whole_entries() {
        let f = file(b"alice:secret\nbob:pw2\n");
        assert!(f.check(b"alice", b"secret"));
        assert!(f.check(b"bob", b"pw2"));
        assert!(!f.check(b"alice", b"pw2"));
        assert!(!f.check(b"alice", b"secre"));
        assert!(!f.check(b"alic", b"secret"));
        assert!(!f.check(b"", b""));
    }
}
