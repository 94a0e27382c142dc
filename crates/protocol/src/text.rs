//! Server side of the memcached text protocol.
