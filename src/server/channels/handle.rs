//! The `channels` subtree's handle (shared with `ops/`): the configuration in force and
//! `reload`, which re-reads the files and starts, stops or restarts exactly the adapters whose
//! profile appeared, went or changed. A bad configuration is refused whole; the adapters keep
//! the last good one.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use supervisors::{ChildSpec, Restart, Shutdown, SupervisorMsg};

use super::adapter::{self, Adapter, AdapterArgs};
use super::registry::{AdapterState, ChannelRegistry, ProfileStatus};
use crate::channels::config::{self, ChannelsConfig, TelegramProfile};
use crate::server::shared::{Shared, lock};

/// What the subtree is started with.
#[derive(Debug, Clone)]
pub struct ChannelSettings {
    /// The private configuration directory (`paths::config_dir`); `None`: no channels.
    pub config_dir: Option<PathBuf>,
    /// The adapter program.
    pub program: PathBuf,
    /// Where adapter stdout/stderr are captured (user-only).
    pub logs_dir: PathBuf,
}

/// Names the adapter program (tests, packaging); default: `pi-workflows-telegram` next to
/// the server's own executable.
pub const ADAPTER_PROGRAM_ENV: &str = "PI_WORKFLOWS_TELEGRAM_BIN";
const ADAPTER_PROGRAM: &str = "pi-workflows-telegram";

impl ChannelSettings {
    /// From the environment: `PI_WORKFLOWS_TELEGRAM_BIN`, else the sibling of this executable.
    pub fn from_env(logs_dir: PathBuf) -> Self {
        let program = std::env::var_os(ADAPTER_PROGRAM_ENV)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::current_exe()
                    .ok()
                    .and_then(|exe| exe.parent().map(|dir| dir.join(ADAPTER_PROGRAM)))
            })
            .unwrap_or_else(|| PathBuf::from(ADAPTER_PROGRAM));
        Self {
            config_dir: crate::paths::config_dir().ok(),
            program,
            logs_dir,
        }
    }
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadReport {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub unchanged: Vec<String>,
}

#[derive(Default)]
struct ChannelsState {
    config: Option<ChannelsConfig>,
    /// Why the last load was refused (shown by `channel status`).
    config_error: Option<String>,
}

/// The subtree's handle.
pub struct Channels {
    shared: Arc<Shared>,
    settings: ChannelSettings,
    state: Mutex<ChannelsState>,
    /// Each profile's live state (shared with the adapters).
    pub registry: Arc<ChannelRegistry>,
    /// One reload at a time: the children it starts and stops must match what it loaded.
    reloading: tokio::sync::Mutex<()>,
}

impl Channels {
    pub fn new(shared: Arc<Shared>, settings: ChannelSettings) -> Arc<Self> {
        Arc::new(Self {
            shared,
            settings,
            state: Mutex::new(ChannelsState::default()),
            registry: Arc::new(ChannelRegistry::default()),
            reloading: tokio::sync::Mutex::new(()),
        })
    }

    /// Start the configured adapters (the subtree started, or restarted without its dynamic
    /// children): as a reload from nothing.
    pub async fn start(self: &Arc<Self>) -> Result<ReloadReport, String> {
        lock(&self.state).config = None;
        self.registry.clear();
        self.reload().await
    }

    /// Re-read the configuration and make the adapters match it. A refused configuration
    /// changes nothing and is returned (and shown by `channel status`).
    pub async fn reload(self: &Arc<Self>) -> Result<ReloadReport, String> {
        let _one = self.reloading.lock().await;
        let loaded = match &self.settings.config_dir {
            Some(dir) => config::load(dir).map_err(|err| err.to_string()),
            None => Ok(None),
        };
        let next = match loaded {
            Ok(next) => next.unwrap_or_default(),
            Err(why) => {
                tracing::warn!(error = %why, "the channel configuration was refused; the adapters keep the last good one");
                lock(&self.state).config_error = Some(why.clone());
                return Err(why);
            }
        };
        let previous = lock(&self.state).config.clone().unwrap_or_default();
        let report = self.apply(&previous, &next).await;
        let mut state = lock(&self.state);
        state.config = Some(next);
        state.config_error = None;
        Ok(report)
    }

    async fn apply(self: &Arc<Self>, previous: &ChannelsConfig, next: &ChannelsConfig) -> ReloadReport {
        let mut report = ReloadReport::default();
        let Some(supervisor) = self.shared.supervisor(&["channels"]).await else {
            tracing::warn!("the channels subtree is not running; no adapter was started");
            return report;
        };
        for (profile, old) in &previous.telegram {
            let same = next.telegram.get(profile) == Some(old)
                && audiences_of(previous, profile) == audiences_of(next, profile);
            if same {
                report.unchanged.push(profile.clone());
                continue;
            }
            let id = child_id(profile);
            let _ = supervisor
                .call(|reply| SupervisorMsg::TerminateChild(id, reply), None)
                .await;
            self.registry.forget(profile);
            report.stopped.push(profile.clone());
        }
        for (profile, telegram) in &next.telegram {
            if report.unchanged.contains(profile) {
                continue;
            }
            self.start_adapter(&supervisor, profile, telegram, audiences_of(next, profile))
                .await;
            report.started.push(profile.clone());
        }
        report
    }

    async fn start_adapter(
        self: &Arc<Self>,
        supervisor: &ractor::ActorRef<SupervisorMsg>,
        profile: &str,
        telegram: &TelegramProfile,
        audiences: Vec<String>,
    ) {
        self.registry.set_status(profile, AdapterState::Starting, None);
        let args = AdapterArgs {
            shared: Arc::clone(&self.shared),
            registry: Arc::clone(&self.registry),
            profile: profile.to_string(),
            telegram: telegram.clone(),
            audiences,
            program: self.settings.program.clone(),
            logs_dir: self.settings.logs_dir.clone(),
            details: supervisors::DetailsCell::default(),
        };
        let details = args.details.clone();
        let shutdown = supervisors::process_shutdown_wait(Duration::from_millis(adapter::ADAPTER_GRACE_MS));
        let spec = ChildSpec::worker(child_id(profile), Restart::Permanent, move || (Adapter, args.clone()))
            .with_details(details)
            .with_shutdown(Shutdown::Timeout(shutdown));
        if let Err(why) = crate::server::shared::start_child(supervisor, spec).await {
            tracing::warn!(profile, error = %why, "a channel adapter did not start");
        }
    }

    /// Every configured profile's state and the configuration's last refusal.
    pub fn status(&self) -> (Vec<ProfileStatus>, Option<String>) {
        (self.registry.profiles(), lock(&self.state).config_error.clone())
    }

    /// The audiences `channels.json` names; `None` without a configuration (then every
    /// decision is shown in Pi and the CLI only, as intended).
    pub fn audiences(&self) -> Option<Vec<String>> {
        let state = lock(&self.state);
        let config = state.config.as_ref().filter(|config| !config.audiences.is_empty())?;
        Some(config.audiences.keys().cloned().collect())
    }
}

fn child_id(profile: &str) -> String {
    format!("adapter-{profile}")
}

/// The audiences a profile presents, in name order.
fn audiences_of(config: &ChannelsConfig, profile: &str) -> Vec<String> {
    config
        .audiences
        .keys()
        .filter(|audience| {
            config
                .telegram_profiles_of(audience)
                .is_some_and(|profiles| profiles.contains(&profile))
        })
        .cloned()
        .collect()
}
