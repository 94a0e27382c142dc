//! The `ferrocache` binary: memcached's flags in, a running server out. Everything
//! else is the `ferrocache_server` library (its `lib.rs` has the tour).
//!
//! Exit statuses are memcached's: a command line it refuses exits as it does (1 from its
//! option loop, 64 from the checks after it, 67 for an unknown `-u` user; the message
//! printed alone, as memcached prints it), and a start that fails exits 71 (`EX_OSERR`).

use ferrocache_server::config::{Refusal, Settings, EX_OSERR};

fn main() {
    let served = Settings::from_args(std::env::args_os())
        .and_then(|s| {
            s.check_user()?;
            Ok(s)
        })
        .and_then(ferrocache_server::io::serve);
    if let Err(e) = served {
        match e.downcast_ref::<Refusal>() {
            Some(r) => {
                eprintln!("{}", r.message);
                std::process::exit(r.status);
            }
            None => {
                eprintln!("ferrocache: {e:#}");
                std::process::exit(EX_OSERR);
            }
        }
    }
}
