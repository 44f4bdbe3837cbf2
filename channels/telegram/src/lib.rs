//! The Telegram channel adapter: a transport-only child of the pi-workflows server, one per
//! Telegram profile (docs/CHANNEL-PROTOCOL.md).
//!
//! It shows complete presentations the server sends (`channel.present`), reports each attempt
//! (`channel.settle`), and forwards presses and replies of allowed people (`channel.answer`).
//! **Architecture Invariant:** it never opens the state database, never loads workflow code,
//! never receives a decision's subject and never decides which answer wins; it depends on
//! neither the `pi-workflows` crate nor SQLite.
//!
//! Modules: [`adapter`] (start-up and the one loop that owns all state), [`inbound`] (stdin
//! reader and fence), [`poller`] (the one `getUpdates` consumer), [`present`] and [`updates`]
//! (what the loop does with frames and updates), [`api`] and [`telegram`] (the Bot API client
//! and objects), [`render`] (text and keyboards), [`registry`] (open messages and prompts),
//! [`token`] (the token file and redaction), [`outbox`] and [`logging`]. With the `fake-api`
//! feature, [`fake_api`] is an in-process fake Bot API for tests.

pub mod adapter;
pub mod api;
pub mod inbound;
pub mod logging;
pub mod outbox;
pub mod poller;
pub mod present;
pub mod registry;
pub mod render;
pub mod startup;
pub mod streams;
pub mod telegram;
pub mod token;
pub mod updates;

#[cfg(feature = "fake-api")]
pub mod fake_api;

pub use adapter::run;
