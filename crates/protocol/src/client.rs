//! Client side of the memcached protocols: request composition and reply parsing.
