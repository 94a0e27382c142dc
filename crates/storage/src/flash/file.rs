//! The flash files themselves: opened, locked against a second server, given their
//! whole size up front, and read and written at offsets.
//!
//! Reads and writes go through `std`'s positional I/O (`pread`/`pwrite`), which needs no
//! `unsafe`; the two `libc` calls below (an advisory lock and `posix_fallocate`) are the
//! module's only `unsafe`, each on a descriptor this module owns.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// One flash file, open for reading and writing.
#[derive(Debug)]
pub(crate) struct FlashFile {
    file: File,
}

impl FlashFile {
    /// Open (creating it if needed) `path`, take an exclusive lock on it and make sure
    /// `size` bytes of it are allocated on disk. Each failure names the path and what
    /// failed, as the start-up error the operator sees: a directory that is read-only,
    /// a file another server holds, a disk without room for the size.
    pub(crate) fn open(path: &Path, size: u64) -> Result<FlashFile, String> {
        let name = path.display();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("failed to open extstore file {name}: {e}"))?;
        // SAFETY: `file` is an open descriptor owned here; flock only reads its number.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if locked != 0 {
            let e = io::Error::last_os_error();
            return Err(format!(
                "failed to lock extstore file {name}: {e} (is another server using it?)"
            ));
        }
        let len =
            i64::try_from(size).map_err(|_| format!("extstore file {name}: size too large"))?;
        // SAFETY: as above; posix_fallocate allocates blocks of the open file and
        // touches no memory of this process.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        if rc != 0 {
            let e = io::Error::from_raw_os_error(rc);
            // Filesystems without fallocate (EOPNOTSUPP) get a plain length instead: the
            // blocks are then found at write time, and a full disk is a counted write
            // error rather than a start-up one.
            if rc == libc::EOPNOTSUPP || rc == libc::EINVAL {
                file.set_len(size.max(file.metadata().map(|m| m.len()).unwrap_or(0)))
                    .map_err(|e| format!("failed to size extstore file {name}: {e}"))?;
            } else {
                return Err(format!(
                    "failed to allocate {size} bytes for extstore file {name}: {e}"
                ));
            }
        }
        Ok(FlashFile { file })
    }

    /// Read exactly `buf.len()` bytes at `offset`. A short read (the file shrank under
    /// the server) is an error, never partly filled bytes taken for data.
    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Write all of `buf` at `offset`.
    pub(crate) fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("ferro-flashfile-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_second_open_of_a_locked_file_is_refused() {
        let p = temp("lock");
        let first = FlashFile::open(&p, 1 << 20).unwrap();
        let err = FlashFile::open(&p, 1 << 20).unwrap_err();
        assert!(err.contains("another server"), "{err}");
        drop(first);
        FlashFile::open(&p, 1 << 20).unwrap();
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn reads_past_the_end_fail_instead_of_returning_short_data() {
        let p = temp("short");
        let f = FlashFile::open(&p, 1 << 16).unwrap();
        f.write_at(b"hello", 100).unwrap();
        let mut b = [0u8; 5];
        f.read_at(&mut b, 100).unwrap();
        assert_eq!(&b, b"hello");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(102)
            .unwrap();
        assert!(f.read_at(&mut b, 100).is_err());
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_missing_directory_is_a_clear_start_up_error() {
        let err = FlashFile::open(Path::new("/nonexistent-dir/x/file"), 1 << 20).unwrap_err();
        assert!(
            err.starts_with("failed to open extstore file /nonexistent-dir"),
            "{err}"
        );
    }
}
