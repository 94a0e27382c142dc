//! The open-file limit. ferrobench holds one descriptor per connection, so a
//! run of thousands of connections needs more than the soft `RLIMIT_NOFILE`
//! many systems start a shell with (1024). Raising the soft limit up to the
//! hard one needs no privilege, so ferrobench does it once at start
//! ([`raise`]); the servers `ferrobench compare` starts inherit the raised
//! limit (memcached then sets its own to its `-c`).

use std::sync::OnceLock;

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use serde::{Deserialize, Serialize};

/// Descriptors a run needs besides its connections: stdio, the event loop,
/// the preload's sockets, timers, `/proc` reads.
pub const ENGINE_FD_RESERVE: u64 = 64;

/// The open-file limit before and after [`raise`] (`None`: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NofileLimit {
    /// The soft limit ferrobench started with.
    pub before: Option<u64>,
    /// The soft limit now.
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

impl NofileLimit {
    /// One line for a report's settings.
    pub fn describe(&self) -> String {
        let n = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
        if self.soft != self.hard {
            format!(
                "soft RLIMIT_NOFILE {} (could not raise it to the hard limit {})",
                n(self.soft),
                n(self.hard)
            )
        } else if self.before == self.soft {
            format!(
                "soft RLIMIT_NOFILE {} already at the hard limit",
                n(self.soft)
            )
        } else {
            format!(
                "soft RLIMIT_NOFILE raised from {} to the hard limit {}",
                n(self.before),
                n(self.hard)
            )
        }
    }

    /// Whether `fds` descriptors fit under the soft limit.
    pub fn fits(&self, fds: u64) -> bool {
        self.soft.is_none_or(|s| fds <= s)
    }
}

static RAISED: OnceLock<NofileLimit> = OnceLock::new();

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, once per process, and
/// says what it found and did. Later calls return the first call's answer.
pub fn raise() -> NofileLimit {
    *RAISED.get_or_init(|| {
        let start = getrlimit(Resource::Nofile);
        if start.current != start.maximum {
            // Fails only where the hard limit is unlimited and the kernel
            // caps descriptors lower (fs.nr_open); the old limit then stays.
            let _ = setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: start.maximum,
                    maximum: start.maximum,
                },
            );
        }
        let now = getrlimit(Resource::Nofile);
        NofileLimit {
            before: start.current,
            soft: now.current,
            hard: now.maximum,
        }
    })
}

/// The soft and hard limits as they are now (`before` = `soft`).
pub fn current() -> NofileLimit {
    let now = getrlimit(Resource::Nofile);
    NofileLimit {
        before: now.current,
        soft: now.current,
        hard: now.maximum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit_and_is_done_once() {
        let first = raise();
        assert_eq!(raise(), first, "a second call changes nothing");
        let now = current();
        assert_eq!(now.soft, first.soft);
        if first.hard.is_some() {
            assert_eq!(first.soft, first.hard);
        }
    }

    #[test]
    fn descriptions_and_fit() {
        let lim = |before, soft, hard| NofileLimit {
            before: Some(before),
            soft: Some(soft),
            hard: Some(hard),
        };
        assert_eq!(
            lim(1024, 20000, 20000).describe(),
            "soft RLIMIT_NOFILE raised from 1024 to the hard limit 20000"
        );
        assert!(lim(20000, 20000, 20000).describe().contains("already"));
        assert!(lim(1024, 1024, 4096).describe().contains("could not raise"));
        assert!(lim(1024, 4096, 4096).fits(4096));
        assert!(!lim(1024, 4096, 4096).fits(4097));
        let unlimited = NofileLimit {
            before: None,
            soft: None,
            hard: None,
        };
        assert!(unlimited.fits(u64::MAX));
        assert!(unlimited.describe().contains("unlimited"));
    }
}
