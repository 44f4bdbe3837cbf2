//! External decision channels: the private configuration (`channels.json`,
//! `credentials.json`) that maps a decision's audience to the channels that present it.
//! docs/CHANNELS.md is the user's reference.
//!
//! Architecture Invariant: the server never reads a credential. It checks that a token file
//! exists and is user-only and hands its path to the one adapter child that needs it; no token
//! is ever in this process, a log, a status or an error.

pub mod config;
