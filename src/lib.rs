//! pi-workflows: a durable workflow server for the Pi coding agent.
//!
//! See `docs/ARCHITECTURE.md` for the codemap.

pub mod digest;
pub mod protocol;
pub mod store;
