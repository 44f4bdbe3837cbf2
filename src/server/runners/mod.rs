//! The `runners` subtree: one runner actor per active run generation (its process owned by a
//! linked `ProcessActor`), the warm pool, and the registry that names them.
//!
//! Architecture Invariant: `runners/` never talks to clients; it hears of client controls
//! only as `RunnerMsg::Control`, and answers them with a stored receipt.

pub mod admission;
pub mod apply;
pub mod channel;
pub mod code_cache;
pub mod liveness;
pub mod mailbox;
pub mod memory;
pub mod messages;
pub mod pool;
pub mod reaper;
pub mod registry;
pub mod runner;
pub mod settle;
pub mod snapshot;
pub mod state;
