//! `channels.json` (`pi-workflows.channels.v1`) and `credentials.json`
//! (`pi-workflows.credentials.v1`) under the config directory (`paths::config_dir`:
//! `PI_WORKFLOWS_CONFIG_DIR`, else `~/.config/pi-workflows`).
//!
//! Both files and every token file must be user-only (no group or other permission bits): a
//! file others can read is refused, naming the file and the `chmod` that fixes it. Nothing is
//! half-loaded: a bad file refuses the whole configuration, and the server keeps the last good
//! one on a reload.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub const CHANNELS_SCHEMA: &str = "pi-workflows.channels.v1";
pub const CREDENTIALS_SCHEMA: &str = "pi-workflows.credentials.v1";
pub const CHANNELS_FILE: &str = "channels.json";
pub const CREDENTIALS_FILE: &str = "credentials.json";
/// One configuration file, bytes.
pub const CONFIG_FILE_BYTES_MAX: u64 = 64 * 1024;
/// A token file, bytes (a Telegram bot token is about 46).
pub const TOKEN_FILE_BYTES_MAX: u64 = 256;
pub const AUDIENCES_MAX: usize = 64;
/// Telegram profiles (one adapter child each).
pub const PROFILES_MAX: usize = 8;
/// Allowed user or chat IDs of one profile.
pub const ALLOWED_IDS_MAX: usize = 64;
/// Channels one audience is presented on.
pub const AUDIENCE_CHANNELS_MAX: usize = 8;
/// The adapter's long-poll timeout bound (Telegram allows up to 50 s).
pub const POLL_TIMEOUT_S_MAX: u32 = 50;
pub const POLL_TIMEOUT_S_DEFAULT: u32 = 25;
pub const TELEGRAM_API_DEFAULT: &str = "https://api.telegram.org";

/// Why a configuration was refused: what is wrong, in which file, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{file} cannot be read: {detail}")]
    Unreadable { file: String, detail: String },
    #[error(
        "{file} is readable by group or others (mode {mode:o}); it holds private settings: run `chmod 600 {file}` and reload"
    )]
    NotPrivate { file: String, mode: u32 },
    #[error("{file} is {bytes} bytes; the limit is {max}")]
    TooLarge { file: String, bytes: u64, max: u64 },
    #[error("{file} is invalid: {detail}; see docs/CHANNELS.md")]
    Invalid { file: String, detail: String },
}

/// The validated configuration: audiences and the Telegram profiles they use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChannelsConfig {
    pub audiences: BTreeMap<String, Audience>,
    pub telegram: BTreeMap<String, TelegramProfile>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audience {
    pub channels: Vec<ChannelRef>,
}

/// A channel an audience is presented on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelRef {
    /// The run's origin Pi session (and the CLI): always available for interactive runs.
    Pi,
    /// A Telegram profile by name.
    Telegram(String),
}

/// One bot: its token file (never read here), who may answer, and where its API is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelegramProfile {
    pub token_file: PathBuf,
    pub allowed_user_ids: Vec<i64>,
    pub allowed_chat_ids: Vec<i64>,
    pub api_base_url: String,
    pub poll_timeout_s: u32,
}

impl ChannelsConfig {
    /// The Telegram profiles an audience is presented on; `None` for an audience the file does
    /// not name (a refusal for the decision: its author named an audience nobody set up).
    #[must_use]
    pub fn telegram_profiles_of(&self, audience: &str) -> Option<Vec<&str>> {
        let audience = self.audiences.get(audience)?;
        Some(
            audience
                .channels
                .iter()
                .filter_map(|channel| match channel {
                    ChannelRef::Telegram(profile) => Some(profile.as_str()),
                    ChannelRef::Pi => None,
                })
                .collect(),
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ChannelsFile {
    schema: String,
    audiences: BTreeMap<String, AudienceEntry>,
    #[serde(default)]
    telegram: BTreeMap<String, ProfileEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AudienceEntry {
    channels: Vec<String>,
    #[serde(default = "first_valid_answer")]
    accept: String,
}

fn first_valid_answer() -> String {
    "first-valid-answer".to_string()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProfileEntry {
    credential: String,
    allowed_user_ids: Vec<i64>,
    allowed_chat_ids: Vec<i64>,
    #[serde(default)]
    api_base_url: Option<String>,
    #[serde(default)]
    poll_timeout_s: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CredentialsFile {
    schema: String,
    credentials: BTreeMap<String, CredentialEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CredentialEntry {
    kind: String,
    token_file: PathBuf,
}

/// Load and check the configuration in `dir`. No `channels.json`: no external channels
/// (decisions show in Pi and the CLI only), which is not an error.
pub fn load(dir: &Path) -> Result<Option<ChannelsConfig>, ConfigError> {
    let channels_path = dir.join(CHANNELS_FILE);
    let Some(text) = read_private(&channels_path)? else {
        return Ok(None);
    };
    let file: ChannelsFile = parse(&channels_path, &text)?;
    let credentials = match file.telegram.is_empty() {
        true => BTreeMap::new(),
        false => load_credentials(&dir.join(CREDENTIALS_FILE))?,
    };
    resolve(&channels_path, file, &credentials).map(Some)
}

fn load_credentials(path: &Path) -> Result<BTreeMap<String, CredentialEntry>, ConfigError> {
    let Some(text) = read_private(path)? else {
        return Err(invalid(
            path,
            "it is missing, and the Telegram profiles name credentials".to_string(),
        ));
    };
    let file: CredentialsFile = parse(path, &text)?;
    if file.schema != CREDENTIALS_SCHEMA {
        return Err(invalid(path, format!("schema must be {CREDENTIALS_SCHEMA}")));
    }
    Ok(file.credentials)
}

fn resolve(
    path: &Path,
    file: ChannelsFile,
    credentials: &BTreeMap<String, CredentialEntry>,
) -> Result<ChannelsConfig, ConfigError> {
    if file.schema != CHANNELS_SCHEMA {
        return Err(invalid(path, format!("schema must be {CHANNELS_SCHEMA}")));
    }
    if file.audiences.len() > AUDIENCES_MAX || file.telegram.len() > PROFILES_MAX {
        return Err(invalid(
            path,
            format!("at most {AUDIENCES_MAX} audiences and {PROFILES_MAX} Telegram profiles"),
        ));
    }
    let mut telegram = BTreeMap::new();
    for (name, entry) in file.telegram {
        check_name(path, "a Telegram profile name", &name)?;
        let profile = resolve_profile(path, &name, entry, credentials)?;
        telegram.insert(name, profile);
    }
    check_one_profile_per_bot(path, &telegram)?;
    let mut audiences = BTreeMap::new();
    for (name, entry) in file.audiences {
        check_name(path, "an audience name", &name)?;
        let audience = resolve_audience(path, &name, entry, &telegram)?;
        audiences.insert(name, audience);
    }
    Ok(ChannelsConfig { audiences, telegram })
}

fn resolve_audience(
    path: &Path,
    name: &str,
    entry: AudienceEntry,
    telegram: &BTreeMap<String, TelegramProfile>,
) -> Result<Audience, ConfigError> {
    if entry.accept != "first-valid-answer" {
        return Err(invalid(
            path,
            format!("audience {name}: accept must be \"first-valid-answer\""),
        ));
    }
    if entry.channels.is_empty() || entry.channels.len() > AUDIENCE_CHANNELS_MAX {
        return Err(invalid(
            path,
            format!("audience {name}: channels must list 1 to {AUDIENCE_CHANNELS_MAX} channels"),
        ));
    }
    let channels = entry
        .channels
        .iter()
        .map(|channel| match channel.strip_prefix("telegram:") {
            None if channel == "pi" => Ok(ChannelRef::Pi),
            Some(profile) if telegram.contains_key(profile) => Ok(ChannelRef::Telegram(profile.to_string())),
            Some(profile) => Err(invalid(
                path,
                format!("audience {name} names Telegram profile {profile:?}, which `telegram` does not define"),
            )),
            None => Err(invalid(
                path,
                format!("audience {name}: a channel is \"pi\" or \"telegram:<profile>\", not {channel:?}"),
            )),
        })
        .collect::<Result<_, _>>()?;
    Ok(Audience { channels })
}

fn resolve_profile(
    path: &Path,
    name: &str,
    entry: ProfileEntry,
    credentials: &BTreeMap<String, CredentialEntry>,
) -> Result<TelegramProfile, ConfigError> {
    let Some(credential) = credentials.get(&entry.credential) else {
        return Err(invalid(
            path,
            format!(
                "Telegram profile {name} names credential {:?}, which credentials.json does not define",
                entry.credential
            ),
        ));
    };
    if credential.kind != "telegramBotToken" {
        return Err(invalid(
            path,
            format!("credential {:?} must be of kind telegramBotToken", entry.credential),
        ));
    }
    check_ids(path, name, "allowedUserIds", &entry.allowed_user_ids)?;
    check_ids(path, name, "allowedChatIds", &entry.allowed_chat_ids)?;
    check_token_file(&credential.token_file)?;
    let api_base_url = entry.api_base_url.unwrap_or_else(|| TELEGRAM_API_DEFAULT.to_string());
    if !is_allowed_api(&api_base_url) {
        return Err(invalid(
            path,
            format!("Telegram profile {name}: apiBaseUrl must be https://…, or http:// on the loopback (tests)"),
        ));
    }
    let poll_timeout_s = entry.poll_timeout_s.unwrap_or(POLL_TIMEOUT_S_DEFAULT);
    if poll_timeout_s > POLL_TIMEOUT_S_MAX {
        return Err(invalid(
            path,
            format!("Telegram profile {name}: pollTimeoutS is at most {POLL_TIMEOUT_S_MAX}"),
        ));
    }
    Ok(TelegramProfile {
        token_file: credential.token_file.clone(),
        allowed_user_ids: entry.allowed_user_ids,
        allowed_chat_ids: entry.allowed_chat_ids,
        api_base_url,
        poll_timeout_s,
    })
}

/// One bot serves one profile: two adapters on one bot would run two long-poll consumers, and
/// Telegram answers the second with 409 Conflict for as long as both run. Two profiles naming
/// the same credential, the same token file, or one file by two paths (a symlink or a hard
/// link: the same device and inode) are refused. The token itself is never read here; two
/// files holding the same token are caught when the second adapter reports its bot.
fn check_one_profile_per_bot(path: &Path, telegram: &BTreeMap<String, TelegramProfile>) -> Result<(), ConfigError> {
    let mut seen: BTreeMap<(u64, u64), &str> = BTreeMap::new();
    for (name, profile) in telegram {
        let metadata = fs::metadata(&profile.token_file).map_err(|err| ConfigError::Unreadable {
            file: profile.token_file.display().to_string(),
            detail: err.to_string(),
        })?;
        if let Some(first) = seen.insert((metadata.dev(), metadata.ino()), name) {
            return Err(invalid(
                path,
                format!(
                    "Telegram profiles {first} and {name} use the same bot token file; a bot serves one profile \
                     (two would both poll it): create another bot with @BotFather, or let one profile serve both audiences"
                ),
            ));
        }
    }
    Ok(())
}

/// A token must never cross the network in clear text: https, except a loopback test server.
fn is_allowed_api(url: &str) -> bool {
    let loopback = ["http://127.0.0.1:", "http://localhost:", "http://[::1]:"];
    url.starts_with("https://") || loopback.iter().any(|prefix| url.starts_with(prefix))
}

fn check_ids(path: &Path, profile: &str, what: &str, ids: &[i64]) -> Result<(), ConfigError> {
    if ids.is_empty() || ids.len() > ALLOWED_IDS_MAX {
        return Err(invalid(
            path,
            format!("Telegram profile {profile}: {what} must list 1 to {ALLOWED_IDS_MAX} IDs (nobody else can answer)"),
        ));
    }
    Ok(())
}

/// The token file exists, is a small regular file and is user-only; it is not read.
fn check_token_file(path: &Path) -> Result<(), ConfigError> {
    if !path.is_absolute() {
        return Err(invalid(
            Path::new(CREDENTIALS_FILE),
            "tokenFile must be an absolute path".to_string(),
        ));
    }
    let metadata = private_metadata(path)?.ok_or_else(|| ConfigError::Unreadable {
        file: path.display().to_string(),
        detail: "it does not exist; write the bot token there (see docs/CHANNELS.md)".to_string(),
    })?;
    if metadata.len() > TOKEN_FILE_BYTES_MAX {
        return Err(ConfigError::TooLarge {
            file: path.display().to_string(),
            bytes: metadata.len(),
            max: TOKEN_FILE_BYTES_MAX,
        });
    }
    Ok(())
}

/// A regular, user-only file's metadata; `None` when it does not exist.
fn private_metadata(path: &Path) -> Result<Option<fs::Metadata>, ConfigError> {
    let file = path.display().to_string();
    let metadata = match fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            return Err(ConfigError::Unreadable {
                file,
                detail: err.to_string(),
            });
        }
    };
    if !metadata.is_file() {
        return Err(ConfigError::Unreadable {
            file,
            detail: "it is not a regular file".to_string(),
        });
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ConfigError::NotPrivate { file, mode });
    }
    if metadata.uid() != rustix::process::geteuid().as_raw() {
        return Err(ConfigError::Unreadable {
            file,
            detail: "it belongs to another user".to_string(),
        });
    }
    Ok(Some(metadata))
}

/// A user-only file's text (bounded); `None` when it does not exist.
fn read_private(path: &Path) -> Result<Option<String>, ConfigError> {
    let Some(metadata) = private_metadata(path)? else {
        return Ok(None);
    };
    let file = path.display().to_string();
    if metadata.len() > CONFIG_FILE_BYTES_MAX {
        return Err(ConfigError::TooLarge {
            file,
            bytes: metadata.len(),
            max: CONFIG_FILE_BYTES_MAX,
        });
    }
    let mut text = String::new();
    fs::File::open(path)
        .and_then(|handle| handle.take(CONFIG_FILE_BYTES_MAX).read_to_string(&mut text))
        .map_err(|err| ConfigError::Unreadable {
            file,
            detail: err.to_string(),
        })?;
    Ok(Some(text))
}

fn parse<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    serde_json::from_str(text).map_err(|err| invalid(path, err.to_string()))
}

fn check_name(path: &Path, what: &str, name: &str) -> Result<(), ConfigError> {
    let plain = name
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-');
    if name.is_empty() || name.len() > 64 || !plain {
        return Err(invalid(
            path,
            format!("{what} must be 1 to 64 characters of a-z, 0-9, _ and -, not {name:?}"),
        ));
    }
    Ok(())
}

fn invalid(path: &Path, detail: String) -> ConfigError {
    let file = path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    );
    ConfigError::Invalid { file, detail }
}

#[cfg(test)]
mod tests;
