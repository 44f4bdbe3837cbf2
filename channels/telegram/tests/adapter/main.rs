//! End-to-end tests of the `pi-workflows-telegram` binary against the fake Bot API.
//!
//! Each test spawns the real adapter with a 0600 token file and drives it over stdin/stdout
//! frames; every test ends with the canary check (the token never appears in stdout or
//! stderr). Waits are bounded and wait on conditions, never on time.

// Each test module uses a different part of the harness.
#![allow(dead_code)]

mod answers;
mod harness;
mod lifecycle;
mod presents;
mod startup;
