//! The few direct system calls the server makes, each wrapped safely.
//!
//! This is the only module of the server with `unsafe`: resource usage for
//! `stats`, signal masks for a clean shutdown, and dropping root for `-u`.

use std::ffi::CString;
use std::io;

/// User and system CPU time of this process, formatted as memcached does
/// (`seconds.microseconds`).
#[must_use]
pub fn rusage_self() -> (String, String) {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only into the struct we own and pass by pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let fmt = |tv: libc::timeval| format!("{}.{:06}", tv.tv_sec, tv.tv_usec);
    (fmt(ru.ru_utime), fmt(ru.ru_stime))
}

fn shutdown_sigset() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is valid storage; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t we own; these calls only write to it.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGUSR1);
    }
    set
}

/// Block SIGINT, SIGTERM and SIGUSR1 in the calling thread and every thread it
/// spawns afterwards, so that only [`wait_for_shutdown_signal`] receives them.
pub fn block_shutdown_signals() -> io::Result<()> {
    let set = shutdown_sigset();
    // SAFETY: `set` is initialised; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SIGPIPE must never kill the server when a client goes away mid-write.
    // SAFETY: setting SIG_IGN for SIGPIPE installs no Rust code as a handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    Ok(())
}

/// Wait until one of the shutdown signals arrives; returns its number.
#[must_use]
pub fn wait_for_shutdown_signal() -> i32 {
    let set = shutdown_sigset();
    let mut sig: libc::c_int = 0;
    loop {
        // SAFETY: `set` is initialised and `sig` is a valid out pointer.
        let rc = unsafe { libc::sigwait(&set, &mut sig) };
        if rc == 0 {
            return sig;
        }
    }
}

/// Send SIGTERM to this process (the `shutdown` command), which the signal
/// thread turns into a clean shutdown.
pub fn signal_self_terminate() {
    // SAFETY: kill on our own pid with a valid signal number has no memory effects.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
}

/// memcached's `-u`: when running as root, switch to `user`.
pub fn drop_privileges(user: &str) -> io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let name = CString::new(user).map_err(|_| io::Error::other("user name has a NUL byte"))?;
    // SAFETY: `name` is a valid C string; getpwnam returns null or a pointer to
    // static storage that we read before any other passwd call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(io::Error::other(format!("can't find the user {user} to switch to")));
    }
    // SAFETY: `pw` was checked non-null and points to a valid passwd struct.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    if uid == 0 {
        return Ok(());
    }
    // SAFETY: setgid/setuid take plain integers; failure is reported by rc.
    if unsafe { libc::setgid(gid) } != 0 || unsafe { libc::setuid(uid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rusage_is_formatted_like_memcached() {
        let (user, system) = rusage_self();
        for v in [user, system] {
            let (secs, micros) = v.split_once('.').unwrap();
            assert!(secs.parse::<u64>().is_ok());
            assert_eq!(micros.len(), 6);
        }
    }
}
