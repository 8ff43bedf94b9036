//! `tagwire-core` — the pure logic of tagwire: no sockets, no threads, no clocks.
