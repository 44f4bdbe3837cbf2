//! The operations behind the front door: dispatch, run controls, run commands, submissions,
//! protected decisions,
//! updates, settings, follow-ups, effect reviews, views, state maintenance, server status and
//! the workflow listing.
//!
//! Architecture Invariant: `ops/` never owns a process or a task; it reads and writes the
//! store and reaches live runners and the resolver through their subtrees' handles.

pub mod authority;
pub mod channels;
pub mod context;
pub mod decisions;
pub mod dispatch;
pub mod effects;
pub mod follow_ups;
pub mod rate_limit;
pub mod run_commands;
pub mod run_controls;
pub mod sessions;
pub mod settings;
pub mod state;
pub mod status;
pub mod status_cache;
pub mod submissions;
pub mod updates;
pub mod views;
pub mod workflows;
