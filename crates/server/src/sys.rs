//! The few direct system calls the server makes, each wrapped safely.
//!
//! This is the only module of the server with `unsafe`: resource usage for
//! `stats`, signal masks for a clean shutdown, dropping root for `-u`, and the
//! connections' `recv` and `send` as bare system calls.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

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
        libc::sigaddset(&mut set, libc::SIGHUP);
    }
    set
}

/// Block SIGINT, SIGTERM, SIGUSR1 and SIGHUP in the calling thread and every thread it
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

/// Wait until one of the signals [`block_shutdown_signals`] blocked arrives (SIGHUP
/// included, which reloads rather than stops); returns its number.
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

/// `recv(fd, buf, 0)` made as a bare system call.
///
/// glibc's `recv` and `send` are thread cancellation points: in a process with
/// more than one thread, each call also switches asynchronous cancellation on and
/// off around the system call, a cost comparable to a whole single-key get's own
/// work. ferrocache never cancels a thread, so a connection's
/// I/O goes through `syscall(2)`, which does nothing but the system call.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which is
    // borrowed mutably for the call.
    unsafe { socket_io(libc::SYS_recvfrom, fd, buf.as_mut_ptr(), buf.len(), 0) }
}

/// `send(fd, buf, MSG_NOSIGNAL)` made as a bare system call (see [`recv`]).
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the kernel only reads the `buf.len()` bytes of `buf`, borrowed for the
    // call, though the pointer is passed as `*mut` for `recvfrom`'s sake.
    unsafe {
        socket_io(
            libc::SYS_sendto,
            fd,
            buf.as_ptr().cast_mut(),
            buf.len(),
            libc::MSG_NOSIGNAL,
        )
    }
}

/// `sendmsg(fd, {iov}, MSG_NOSIGNAL | MSG_DONTWAIT)` made as a bare system call (see
/// [`recv`]): one send of several buffers, as `writev` but without SIGPIPE, and never
/// blocking, even on a socket left in blocking mode (the io_uring backend's). At most
/// [`MAX_SEND_SLICES`] slices are passed; the count sent is returned as by `send`.
pub fn send_vectored(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    let bufs = &bufs[..bufs.len().min(MAX_SEND_SLICES)];
    // SAFETY: an all-zero msghdr is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `struct iovec` on Unix.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast::<libc::iovec>();
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: `msg` points at `bufs`, whose slices the kernel only reads, all borrowed
    // for the call; `msg` itself outlives the call.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            libc::c_long::from(fd),
            std::ptr::addr_of!(msg) as libc::c_long,
            libc::c_long::from(libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT),
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Most slices one [`send_vectored`] passes (Linux's `UIO_MAXIOV` is 1024).
pub const MAX_SEND_SLICES: usize = 1024;

/// `recvfrom` or `sendto` (`nr`) on a connected socket: no peer address (null, 0).
///
/// # Safety
/// `buf..buf + len` must be valid for what the call does with it (written by
/// `recvfrom`, read by `sendto`) for the duration of the call.
#[inline(always)]
unsafe fn socket_io(
    nr: libc::c_long,
    fd: RawFd,
    buf: *mut u8,
    len: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    // SAFETY: the caller vouches for the buffer; null address pointers are allowed.
    let n = unsafe {
        syscall6(
            nr,
            [
                libc::c_long::from(fd),
                buf as libc::c_long,
                len as libc::c_long,
                libc::c_long::from(flags),
                0,
                0,
            ],
        )
    };
    n.map(|n| n as usize)
}

/// System call `nr` with six arguments, made with the `syscall` instruction itself:
/// glibc's `syscall(2)` is a variadic function that moves all seven arguments into
/// place again, with a stack argument, twice per get.
/// The kernel returns `-errno` in `rax` on failure.
///
/// # Safety
/// As for the system call itself: every pointer among the arguments must be valid for
/// what the kernel does with it.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
unsafe fn syscall6(nr: libc::c_long, args: [libc::c_long; 6]) -> io::Result<libc::c_long> {
    let ret: libc::c_long;
    // SAFETY: the x86-64 Linux system call convention: number in rax, arguments in
    // rdi, rsi, rdx, r10, r8, r9; the kernel clobbers rcx and r11 and returns in rax.
    // Memory the arguments point at may be read or written, which `asm!` assumes by
    // default; the caller vouches for those pointers.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if (-4095..0).contains(&ret) {
        Err(io::Error::from_raw_os_error(-ret as i32))
    } else {
        Ok(ret)
    }
}

/// [`syscall6`] through glibc's `syscall(2)`, where there is no hand-made one.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
unsafe fn syscall6(nr: libc::c_long, a: [libc::c_long; 6]) -> io::Result<libc::c_long> {
    // SAFETY: as for the system call itself (the caller's contract).
    let n = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n)
    }
}

/// Send SIGTERM to this process (the `shutdown` command), which the signal
/// thread turns into a clean shutdown.
pub fn signal_self_terminate() {
    // SAFETY: kill on our own pid with a valid signal number has no memory effects.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
}

/// Send SIGUSR1 to this process (`shutdown graceful`): the signal thread stops as
/// for SIGTERM, and with `-e` saves the cache for a warm restart.
pub fn signal_self_graceful() {
    // SAFETY: kill on our own pid with a valid signal number has no memory effects.
    unsafe { libc::kill(libc::getpid(), libc::SIGUSR1) };
}

/// memcached's `-d`: detach from the terminal and the launching process. Fork; the
/// parent exits 0 at once; the child starts a new session, ignores SIGHUP, moves to `/`
/// unless `keep_dir` (memcached keeps the directory with `-r`, for core files), and
/// points standard input at /dev/null, and standard output and error too unless
/// `keep_output` (memcached keeps them with `-v`).
///
/// Call it while the process has one thread: a fork copies only the calling thread.
pub fn daemonize(keep_dir: bool, keep_output: bool) -> io::Result<()> {
    // SAFETY: the caller runs this before any other thread exists, so the child is a
    // complete copy of the process; the parent leaves through `_exit`, which runs no
    // destructors or exit handlers that the child will run again.
    match unsafe { libc::fork() } {
        -1 => return Err(io::Error::last_os_error()),
        0 => {}
        // SAFETY: `_exit` ends the parent at once, running nothing of this program's.
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: setsid takes no arguments; the child of a fork is never a group leader.
    if unsafe { libc::setsid() } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: setting SIG_IGN installs no Rust code as a handler.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
    if !keep_dir {
        std::env::set_current_dir("/")?;
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for target in [0, 1, 2] {
        if target > 0 && keep_output {
            continue;
        }
        // SAFETY: both are open descriptors; dup2 replaces `target` atomically, and the
        // standard streams are not borrowed as files anywhere in the server.
        if unsafe { libc::dup2(null.as_raw_fd(), target) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// memcached's `-k`, for what is mapped now: `mlockall(MCL_CURRENT)`. Item memory is
/// locked segment by segment as the store allocates it (`StoreBuilder::lock_memory`),
/// not with memcached's `MCL_FUTURE` (see there).
pub fn lock_current_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only and touches no memory of this program.
    if unsafe { libc::mlockall(libc::MCL_CURRENT) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The soft `RLIMIT_MEMLOCK` in bytes, when it is a limit (not unlimited) that binds
/// this process: not for root, whose `CAP_IPC_LOCK` lets it lock past the limit.
pub fn memlock_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct passed; geteuid has no arguments.
    let (rc, euid) = unsafe {
        (
            libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit),
            libc::geteuid(),
        )
    };
    (rc == 0 && euid != 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Raise the soft descriptor limit (`RLIMIT_NOFILE`) to `want`, or as far as the hard
/// limit allows; returns the soft limit now in force. Never lowers it.
pub fn raise_nofile_limit(want: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want.min(limit.rlim_max),
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// memcached's `-r`: raise the core file size limit to unlimited, or failing that to
/// the hard limit. An error when the soft limit is still 0.
pub fn raise_core_limit() -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) == 0 {
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_CORE, &unlimited) != 0 {
                let hard = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &hard);
            }
        }
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) != 0 || limit.rlim_cur == 0 {
            return Err(io::Error::other("failed to ensure corefile creation"));
        }
    }
    Ok(())
}

/// Whether this process runs as root (real or effective), where memcached requires `-u`.
#[must_use]
pub fn running_as_root() -> bool {
    // SAFETY: getuid and geteuid have no preconditions.
    unsafe { libc::getuid() == 0 || libc::geteuid() == 0 }
}

/// Whether the password database has `user` (`-u`'s check before anything starts).
#[must_use]
pub fn user_exists(user: &str) -> bool {
    let Ok(name) = CString::new(user) else {
        return false;
    };
    // SAFETY: `name` is a valid C string; only the null check reads the result.
    !unsafe { libc::getpwnam(name.as_ptr()) }.is_null()
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
        return Err(io::Error::other(format!(
            "can't find the user {user} to switch to"
        )));
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

/// Pin the calling thread to one CPU (`--pin`).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit inside the set we own; `cpu` is bounded
    // by the caller to the machine's CPU count, far below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 means the calling thread; the set pointer and size are valid.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A non-blocking, close-on-exec eventfd: how the signal thread wakes a
/// worker, whichever backend the worker polls with.
pub fn eventfd() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd takes no pointers; a non-negative result is a new
    // descriptor that nothing else owns.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, `fd` is ours alone.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Set an integer socket option on a raw descriptor.
fn set_int_option(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the option value points to a live i32 of the stated size; the
    // kernel validates `fd`, `level` and `name`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `--busy-poll-us`: `SO_BUSY_POLL` and `SO_PREFER_BUSY_POLL` on a socket.
pub fn set_busy_poll(fd: i32, micros: u32) -> io::Result<()> {
    const SO_PREFER_BUSY_POLL: i32 = 69;
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, micros as i32)?;
    set_int_option(fd, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, 1)
}

/// With `--pin`, steer each new connection to the listener of the worker
/// pinned to the CPU that received its packets: a classic BPF program on the
/// `SO_REUSEPORT` group returns `cpu % workers` as the socket index (sockets
/// are indexed in bind order, which is worker order).
pub fn attach_reuseport_cpu_steering(fd: i32, workers: u32) -> io::Result<()> {
    const SO_ATTACH_REUSEPORT_CBPF: i32 = 51;
    const SKF_AD_OFF: u32 = (-0x1000i32) as u32;
    const SKF_AD_CPU: u32 = 36;
    let program = [
        // A = current CPU
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: SKF_AD_OFF + SKF_AD_CPU,
        },
        // A = A % workers
        libc::sock_filter {
            code: (libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: workers.max(1),
        },
        // return A
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_A) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points to `program`, which outlives the call; the kernel
    // copies and verifies the filter before returning.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&prog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Number of CPUs this process may run on.
#[must_use]
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Give the pages of freed heap memory back to the kernel (glibc's `malloc_trim`).
///
/// glibc keeps what is freed in its arenas, resident, until it is reused: a burst of
/// large connection buffers, or the allocator's own growth, would stay in RSS for good
/// and count against `-m`'s promise. Called once a second by the maintenance thread;
/// it walks only the free lists. A no-op where the C library is not glibc.
pub fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `malloc_trim` takes a padding size and touches only the allocator's own
    // free memory, under the allocator's locks; any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_recv_and_send_behave_like_the_libc_calls() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        // Over TCP on loopback, as the connections use them.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let fd = server.as_raw_fd();
        let mut buf = [0u8; 64];
        // Nothing arrived yet: EAGAIN, as WouldBlock.
        let err = recv(fd, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        // The kernel's -errno comes back as the error's OS code.
        let err = send(-1, b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
        client.write_all(b"get k\r\n").unwrap();
        let mut got = Vec::new();
        while got.len() < 7 {
            match recv(fd, &mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, b"get k\r\n");
        assert_eq!(send(fd, b"END\r\n").unwrap(), 5);
        let mut reply = [0u8; 5];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"END\r\n");
        // The peer closed: recv reads end of stream, and send fails with an error
        // (EPIPE or ECONNRESET) instead of raising SIGPIPE, which would kill the test.
        drop(client);
        loop {
            match recv(fd, &mut buf) {
                Ok(0) => break,
                Ok(n) => panic!("{n} unexpected bytes"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        let failed = (0..100).find_map(|_| send(fd, &[0u8; 4096]).err());
        let kind = failed.expect("send to a closed peer never failed").kind();
        assert!(
            matches!(
                kind,
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{kind:?}"
        );
        // A descriptor that is not open.
        assert_eq!(
            recv(-1, &mut buf).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        assert_eq!(
            send(-1, b"x").unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn vectored_send_sends_the_slices_in_order() {
        use std::io::{IoSlice, Read};
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let fd = server.as_raw_fd();
        let big = vec![b'v'; 3000];
        let slices = [
            IoSlice::new(b"VALUE k 0 3000\r\n"),
            IoSlice::new(&big),
            IoSlice::new(b"\r\nEND\r\n"),
        ];
        assert_eq!(send_vectored(fd, &slices).unwrap(), 16 + 3000 + 7);
        let mut got = vec![0u8; 16 + 3000 + 7];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got[..16], b"VALUE k 0 3000\r\n");
        assert!(got[16..3016].iter().all(|&b| b == b'v'));
        assert_eq!(&got[3016..], b"\r\nEND\r\n");
        // More slices than one call takes: the first MAX_SEND_SLICES go.
        let many = vec![IoSlice::new(b"x"); MAX_SEND_SLICES + 10];
        assert_eq!(send_vectored(fd, &many).unwrap(), MAX_SEND_SLICES);
        let mut xs = vec![0u8; MAX_SEND_SLICES];
        client.read_exact(&mut xs).unwrap();
        assert!(xs.iter().all(|&b| b == b'x'));
        assert_eq!(
            send_vectored(-1, &slices).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

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
