//! `piw`: the terminal UI of pi-workflows and its loopback WebSocket relay. A pure client of
//! `pi-workflows.client.v1`: it never opens the state database (docs/PIW.md).

pub mod config;
pub mod connection;
pub mod exit;
pub mod model;
pub mod once;
pub mod serve;
pub mod tui;
pub mod ui;
