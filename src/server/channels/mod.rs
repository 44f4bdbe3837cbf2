//! The `channels` subtree (docs/CHANNELS.md): one adapter child per Telegram profile of the
//! private configuration, each owning one transport-only `pi-workflows-telegram` process that
//! speaks the channel protocol (docs/CHANNEL-PROTOCOL.md) on an inherited socket.
//!
//! ```text
//! channels          one_for_one, 10 / 60 s
//! ├── loader        task, transient: loads the configuration at start and starts the adapters
//! └── adapter-<p>   worker, permanent (started by the handle): one Telegram profile
//! ```
//!
//! `handle.rs` ([`Channels`]: configuration and reload, shared with `ops/`), `adapter.rs` (one
//! profile's actor and process), `registry.rs` (each profile's live state, shared by both),
//! `present.rs` (the stored request as the protocol's presentation).
//!
//! Architecture Invariant: an adapter's failure stays in this subtree. Its process dying is
//! its actor's failure, restarted with backoff (quick deaths double the wait up to 30 s, so
//! the subtree's intensity is never reached by a crash loop); a refused credential or
//! configuration stops the profile until a reload instead of restarting. Nothing here touches
//! a run beyond the decisions the adapter presents.

pub mod adapter;
pub mod handle;
mod present;
pub mod registry;

use std::sync::Arc;
use std::time::Duration;

use supervisors::{ChildSpec, Restart, Strategy, SupervisorSpec};

pub use handle::{ChannelSettings, Channels};

const CHANNELS_RESTARTS_MAX: u32 = 10;
const CHANNELS_PERIOD_MS: u64 = 60_000;

/// The `channels` subtree: the loader task starts the configured adapters.
pub fn channels_spec(channels: &Arc<Channels>) -> ChildSpec {
    let channels = Arc::clone(channels);
    ChildSpec::supervisor("channels", Restart::Permanent, move || {
        let channels = Arc::clone(&channels);
        let loader = ChildSpec::task("loader", Restart::Transient, move || {
            let channels = Arc::clone(&channels);
            async move {
                // A refused configuration is reported by `channel status`; the server runs on.
                let _ = channels.start().await;
                Ok(())
            }
        });
        SupervisorSpec::new("channels", Strategy::OneForOne)
            .with_intensity(CHANNELS_RESTARTS_MAX, Duration::from_millis(CHANNELS_PERIOD_MS))
            .with_child(loader)
    })
}
