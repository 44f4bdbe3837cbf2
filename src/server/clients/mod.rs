//! The `clients` subtree: the socket listener, one actor per client connection, and the
//! connections' subscriptions (whose feeds run under `clients/feeds`).
//!
//! Architecture Invariant: a connection only answers its own client; one bad or slow
//! client closes its own connection, never another's.

pub mod connection;
pub mod listener;
pub mod session_forwarder;
pub mod subscriptions;
pub mod writer;
