//! pi-workflows: a durable workflow server for the Pi coding agent.
//!
//! See `docs/ARCHITECTURE.md` for the codemap.

pub mod channels;
pub mod cli;
pub mod client;
pub mod decision;
pub mod digest;
pub mod input_wait;
pub mod package;
pub mod paths;
pub mod printable;
pub mod protocol;
pub mod server;
pub mod settings;
pub mod store;
pub mod view;
mod wire_enum;
