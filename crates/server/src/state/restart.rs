//! Warm restart: memcached's `-e FILE` (`--memory-file`). SIGUSR1 or `shutdown graceful`
//! saves the cache into FILE on the way out; the next start with the same FILE, `-m`,
//! `-I` and `-C` loads it before it accepts a connection and serves every item that was
//! live, with its value, flags, CAS and remaining TTL.
//!
//! The store writes and reads the image (`storage::ImageHead`, `store/image.rs`); this
//! file owns the file, the settings and clock saved beside the store's state, and the
//! one line on stderr that says why a start is empty.
//!
//! ```text
//!   start:  FILE.tmp left over?  remove it
//!           FILE an image, same build, same -m/-I/-C, every checksum good?
//!                 yes: load it, clock resumes (uptime + seconds stopped)
//!                 no:  start empty, one line on stderr saying why
//!           FILE := "in use" marker      (FILE.tmp, fsync, rename: the image is gone)
//!           bind, serve ...
//!   SIGUSR1: stop accepting, drain, join the workers, then
//!           FILE.tmp := image, fsync, rename to FILE, fsync the directory
//! ```
//!
//! So FILE holds a loadable image only between a complete save and the next start: a
//! server killed (SIGKILL, a crash, SIGTERM, which does not save) while serving leaves
//! the marker, and one killed while saving leaves the marker and a partial FILE.tmp.
//! Either way the next start is empty and says so. A server killed while loading leaves
//! the image as it was, which nobody has served from, so the next start loads it.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use storage::{ImageHead, ImageSummary};

use super::Shared;

/// What FILE holds while a server uses it: not an image, so nothing loads from it.
const IN_USE_MAGIC: &[u8] = b"ferrocache memory file in use\n";
/// The version of the settings and clock saved beside the store (`Saved`).
const SAVED_VERSION: &str = "1";

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn tmp_path(path: &str) -> PathBuf {
    PathBuf::from(format!("{path}.tmp"))
}

/// The one line that says why this start serves an empty cache.
fn starting_empty(path: &str, why: &str) {
    eprintln!("ferrocache: [restart] {path}: {why}; starting with an empty cache");
}

/// The server's state saved beside the store's: the settings a load must match and
/// the clock, as `key value` lines.
fn saved_lines(shared: &Shared) -> Vec<u8> {
    let s = &shared.settings;
    shared.clock.tick();
    format!(
        "version {SAVED_VERSION}\nmemory_limit {}\nitem_size_max {}\ncas_enabled {}\n\
         process_started {}\ncurrent_time {}\nstop_time {}\n",
        s.memory_limit_bytes,
        s.item_size_max_bytes,
        u8::from(s.cas_enabled),
        shared.clock.process_started(),
        shared.clock.now(),
        unix_now(),
    )
    .into_bytes()
}

/// Check the saved lines against this server: `Ok(process_started)` to resume the
/// clock from, or why the image cannot be used.
fn check_saved(shared: &Shared, extra: &[u8]) -> Result<i64, String> {
    let text = std::str::from_utf8(extra).map_err(|_| "unreadable saved settings")?;
    let saved: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once(' ')).collect();
    let get = |key: &str| -> Result<i64, String> {
        saved
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("saved settings lack {key}"))
    };
    if saved.get("version") != Some(&SAVED_VERSION) {
        return Err("saved settings of another version".into());
    }
    let s = &shared.settings;
    let mb = |b: i64| b >> 20;
    let memory = get("memory_limit")?;
    if memory != s.memory_limit_bytes as i64 {
        return Err(format!(
            "saved with -m {}, this server has -m {}",
            mb(memory),
            mb(s.memory_limit_bytes as i64)
        ));
    }
    let item = get("item_size_max")?;
    if item != s.item_size_max_bytes as i64 {
        return Err(format!(
            "saved with -I {item}, this server has -I {} (bytes)",
            s.item_size_max_bytes
        ));
    }
    if get("cas_enabled")? != i64::from(s.cas_enabled) {
        return Err("saved with another -C setting".into());
    }
    let stopped = get("stop_time")?;
    let now = unix_now();
    if now < stopped {
        return Err(format!(
            "the wall clock is {} s before the time it was saved at",
            stopped - now
        ));
    }
    let started = get("process_started")?;
    let current = get("current_time")?;
    // The uptime the image was saved at must come back as at least that much.
    if now - started < current {
        return Err("the saved clock is inconsistent".into());
    }
    Ok(started)
}

/// Why FILE cannot be loaded, or the items it held once loaded into the store. The
/// file is handed back open (when it could be opened), so that the caller can free
/// its pages after it has marked the file in use, without making the start wait.
fn load(shared: &Shared, path: &str, file: &mut Option<File>) -> Result<u64, String> {
    let f = match File::open(path) {
        Ok(f) => file.insert(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("no memory file saved".into())
        }
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let head = match ImageHead::read(&*f) {
        Ok(head) => head,
        Err(storage::ImageError::NotAnImage) => {
            let mut start = vec![0u8; IN_USE_MAGIC.len()];
            let marked = f.read_exact_at(&mut start, 0).is_ok() && start == IN_USE_MAGIC;
            return Err(if marked {
                "not saved: the server that used it stopped without saving (killed, \
                 crashed, or stopped by SIGTERM/SIGINT rather than SIGUSR1 or \
                 shutdown graceful)"
                    .into()
            } else {
                "not a ferrocache memory file".into()
            });
        }
        Err(e) => return Err(format!("unusable image: {e}")),
    };
    if head.total_bytes() != len {
        return Err(format!(
            "unusable image: {len} bytes where its header says {} (truncated or torn)",
            head.total_bytes()
        ));
    }
    let started = check_saved(shared, head.extra())?;
    let items = head.items();
    // Nothing else runs yet: every CPU reads (a load is mostly first touches of
    // fresh pages, which run in parallel).
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(16));
    head.load_into(&shared.store, &*f, threads)
        .map_err(|e| format!("unusable image: {e}"))?;
    shared.clock.resume(started);
    Ok(items)
}

/// Replace `path` with `bytes` all at once: written to `path.tmp`, synced, renamed
/// over `path`, and the directory synced, so a crash leaves the old file or the new
/// one, never part of the new one under the name.
fn replace_file(
    path: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        // As memcached's metadata file: readable by the server's user only.
        .mode(0o600)
        .open(&tmp)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let written = write(&mut out)
        .and_then(|()| out.into_inner().map_err(|e| e.into_error()))
        .and_then(|f| f.sync_all());
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, path)?;
    let dir = Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// At start, before any listener is bound: load the memory file `-e` names if it is
/// a good image for this server (else say why and start empty), then mark the file in
/// use. An error (the file cannot be written) stops the start, as in memcached: a
/// server that cannot mark the file could later serve an image it has since changed.
pub fn restore(shared: &Shared) -> Result<()> {
    let Some(path) = shared.settings.memory_file.as_deref() else {
        return Ok(());
    };
    // A save interrupted by a crash: never an image.
    let _ = fs::remove_file(tmp_path(path));
    let started = Instant::now();
    let mut file = None;
    match load(shared, path, &mut file) {
        Ok(items) => {
            if shared.settings.verbose > 0 {
                eprintln!(
                    "ferrocache: [restart] {path}: restored {items} items in {} ms",
                    started.elapsed().as_millis()
                );
            }
            // Items whose values were on flash come back as stubs, but the flash tier's
            // page table is not in the image (nor flushed with it), so their records
            // cannot be told from stale ones: they are dropped, and said so whatever
            // the verbosity, as memcached's restart says what it throws away.
            let dropped = shared.store.drop_flash_stubs();
            if dropped > 0 {
                eprintln!(
                    "ferrocache: [restart] {path}: dropped {dropped} items whose values were on \
                     flash: the flash tier does not survive a restart (its page table is not saved)"
                );
            }
        }
        Err(why) => starting_empty(path, &why),
    }
    replace_file(path, |out| {
        out.write_all(IN_USE_MAGIC)?;
        writeln!(out, "pid {}", std::process::id())
    })
    .with_context(|| format!("memory file {path}: cannot write it"))?;
    // The image's name is gone; its pages (on a RAM disk, the size of the cache) are
    // freed when the last descriptor closes: on a thread of its own, so that serving
    // does not wait for it.
    if let Some(f) = file {
        let _ = std::thread::Builder::new()
            .name("restart-free".into())
            .spawn(move || drop(f));
    }
    Ok(())
}

/// After a graceful stop, once every worker has finished: save the cache into the
/// memory file for the next start.
pub fn save(shared: &Shared) -> Result<ImageSummary> {
    let path = shared
        .settings
        .memory_file
        .as_deref()
        .context("no memory file (-e)")?;
    let started = Instant::now();
    let extra = saved_lines(shared);
    let mut summary = ImageSummary::default();
    replace_file(path, |out| {
        summary = shared.store.save_image(out, &extra)?;
        Ok(())
    })
    .with_context(|| format!("[restart] saving {path}"))?;
    if shared.settings.verbose > 0 {
        eprintln!(
            "ferrocache: [restart] {path}: saved {} items ({} bytes) in {} ms",
            summary.items,
            summary.bytes,
            started.elapsed().as_millis()
        );
    }
    Ok(summary)
}
