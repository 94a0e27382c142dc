//! The conversions between `std::net::SocketAddr` and the kernel's
//! `sockaddr` types that `msg_name` points at: [`to_storage`] for the peer
//! of a queued datagram, [`from_storage`] for the sender of a received one.
//!
//! Every address lives in a `sockaddr_storage`, which is large and aligned
//! enough for both `sockaddr_in` and `sockaddr_in6`, so one slot type serves
//! IPv4 and IPv6 peers alike:
//!
//! ```text
//!   sockaddr_in:   family | port (network order) | IPv4 (network order) | zero[8]
//!   sockaddr_in6:  family | port | flowinfo | IPv6 (16 bytes) | scope id
//! ```

use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr;

/// An empty address (family `AF_UNSPEC`): a receive slot before the
/// kernel writes the sender there.
pub(crate) fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is a C struct of integers; all-zero bytes are
    // a valid value (family AF_UNSPEC).
    unsafe { mem::zeroed() }
}

/// The room a receive slot offers the kernel for the sender's address.
pub(crate) fn storage_len() -> libc::socklen_t {
    mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t
}

/// `addr` as the kernel's sockaddr, in a sockaddr_storage, with its length.
pub(crate) fn to_storage(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut storage = zeroed_storage();
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is at least as large and as aligned as
            // every sockaddr type, sockaddr_in included.
            unsafe { ptr::write(ptr::addr_of_mut!(storage).cast::<libc::sockaddr_in>(), sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe {
                ptr::write(
                    ptr::addr_of_mut!(storage).cast::<libc::sockaddr_in6>(),
                    sin6,
                )
            };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// The address in `storage`, if it is IPv4 or IPv6.
pub(crate) fn from_storage(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which
            // it is large and aligned enough for.
            let sin: libc::sockaddr_in = unsafe { ptr::read(ptr::from_ref(storage).cast()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6: libc::sockaddr_in6 = unsafe { ptr::read(ptr::from_ref(storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        let addrs: [SocketAddr; 4] = [
            "127.0.0.1:11211".parse().unwrap(),
            "10.1.2.3:1".parse().unwrap(),
            "[::1]:65535".parse().unwrap(),
            SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 4242, 7, 3)),
        ];
        for addr in addrs {
            let (storage, len) = to_storage(&addr);
            assert_eq!(from_storage(&storage), Some(addr));
            let want = if addr.is_ipv4() {
                mem::size_of::<libc::sockaddr_in>()
            } else {
                mem::size_of::<libc::sockaddr_in6>()
            };
            assert_eq!(len as usize, want);
        }
        assert_eq!(from_storage(&zeroed_storage()), None);
    }

    #[test]
    fn ipv4_is_in_network_order() {
        let (storage, _) = to_storage(&"1.2.3.4:258".parse().unwrap());
        // SAFETY: to_storage wrote a sockaddr_in there.
        let sin: libc::sockaddr_in = unsafe { ptr::read(ptr::addr_of!(storage).cast()) };
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(sin.sin_port.to_ne_bytes(), [1, 2]);
    }
}
