//! The `ferrocache` binary: memcached's flags in, a running server out. Everything
//! else is the `ferrocache_server` library (its `lib.rs` has the tour).

use ferrocache_server::config::Settings;

fn main() {
    let served = Settings::from_args(std::env::args_os()).and_then(ferrocache_server::io::serve);
    if let Err(e) = served {
        eprintln!("ferrocache: {e:#}");
        std::process::exit(71);
    }
}
