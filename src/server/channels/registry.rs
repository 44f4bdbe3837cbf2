//! What the `channels` handle and its adapter actors share: each profile's live state, shown
//! by `channel status`, and the quick-death counts the adapters' backoff reads. It imports no
//! sibling, so the handle (which starts adapters) and the adapters (which report here) stay
//! free of each other.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

use crate::server::shared::lock;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// A profile's adapter as `channel status` shows it.
    pub enum AdapterState {
        /// Its process is starting (or waiting out a backoff before it starts again).
        Starting = "starting",
        /// `channel.ready` came: it presents and takes answers.
        Ready = "ready",
        /// It stopped for a reason a restart cannot fix (a refused token, a bad launch):
        /// fix the configuration and `channel reload`.
        Stopped = "stopped",
    }
}

/// One profile in `channel status`: no token, chat or user IDs, bot names or content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileStatus {
    pub profile: String,
    pub state: AdapterState,
    /// The current launch's epoch.
    pub epoch: Option<i64>,
    /// Process starts of this profile since the server started.
    pub launches: u64,
    /// Why the last process ended, as a closed code (e.g. `credentialRejected`, `exited`).
    pub last_exit: Option<String>,
}

#[derive(Default)]
struct RegistryState {
    profiles: BTreeMap<String, ProfileStatus>,
    quick_deaths: BTreeMap<String, u32>,
    /// The bot (Telegram user id, from `channel.ready`) each live adapter serves.
    bots: BTreeMap<String, i64>,
}

/// The profiles' live state.
#[derive(Default)]
pub struct ChannelRegistry {
    state: Mutex<RegistryState>,
}

impl ChannelRegistry {
    pub fn profiles(&self) -> Vec<ProfileStatus> {
        lock(&self.state).profiles.values().cloned().collect()
    }

    pub fn forget(&self, profile: &str) {
        let mut state = lock(&self.state);
        state.profiles.remove(profile);
        state.bots.remove(profile);
    }

    pub fn clear(&self) {
        let mut state = lock(&self.state);
        state.profiles.clear();
        state.bots.clear();
    }

    /// Record that `profile`'s adapter serves bot `bot_id`; `Err` names the live profile that
    /// already serves it (two token files holding one token: only one may poll the bot).
    pub fn claim_bot(&self, profile: &str, bot_id: i64) -> Result<(), String> {
        let mut state = lock(&self.state);
        let owner = state
            .bots
            .iter()
            .find(|(other, bot)| other.as_str() != profile && **bot == bot_id);
        if let Some((other, _)) = owner {
            return Err(other.clone());
        }
        state.bots.insert(profile.to_string(), bot_id);
        Ok(())
    }

    /// Record a profile's state; `epoch` is a new launch's.
    pub fn set_status(&self, profile: &str, adapter: AdapterState, epoch: Option<i64>) {
        let mut state = lock(&self.state);
        let entry = state
            .profiles
            .entry(profile.to_string())
            .or_insert_with(|| ProfileStatus {
                profile: profile.to_string(),
                state: adapter,
                epoch: None,
                launches: 0,
                last_exit: None,
            });
        entry.state = adapter;
        if let Some(epoch) = epoch {
            entry.epoch = Some(epoch);
            entry.launches += 1;
        }
    }

    /// A process of `profile` ended (`quickly`: before it was up for a stable period). Only a
    /// process that stayed up resets the count: `channel.ready` alone proves nothing.
    pub fn note_exit(&self, profile: &str, why: &str, quickly: bool) {
        let mut state = lock(&self.state);
        state.bots.remove(profile);
        if let Some(entry) = state.profiles.get_mut(profile) {
            entry.last_exit = Some(why.to_string());
        }
        let deaths = state.quick_deaths.entry(profile.to_string()).or_default();
        *deaths = if quickly { deaths.saturating_add(1) } else { 0 };
    }

    pub fn quick_deaths(&self, profile: &str) -> u32 {
        lock(&self.state).quick_deaths.get(profile).copied().unwrap_or(0)
    }
}
