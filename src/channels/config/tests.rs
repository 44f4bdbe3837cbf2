use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;

struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = self.path().join(name);
        fs::write(&path, text).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    /// A complete configuration: audience `operator` on Pi and profile `ops`.
    fn complete(&self) -> PathBuf {
        let token = self.write("ops.token", "123456:CANARY-TOKEN\n", 0o600);
        let credentials = json!({"schema": CREDENTIALS_SCHEMA,
                                 "credentials": {"ops-bot": {"kind": "telegramBotToken", "tokenFile": token}}});
        self.write(CREDENTIALS_FILE, &credentials.to_string(), 0o600);
        let channels = json!({
            "schema": CHANNELS_SCHEMA,
            "audiences": {"operator": {"channels": ["pi", "telegram:ops"], "accept": "first-valid-answer"}},
            "telegram": {"ops": {"credential": "ops-bot", "allowedUserIds": [42], "allowedChatIds": [42]}},
        });
        self.write(CHANNELS_FILE, &channels.to_string(), 0o600)
    }

    fn channels(&self, value: serde_json::Value) {
        self.write(CHANNELS_FILE, &value.to_string(), 0o600);
    }
}

#[test]
fn no_channels_file_means_pi_only() {
    let dir = Dir::new();
    assert_eq!(load(dir.path()), Ok(None));
}

#[test]
fn a_complete_configuration_maps_audiences_to_profiles() {
    let dir = Dir::new();
    dir.complete();
    let config = load(dir.path()).expect("valid").expect("present");
    assert_eq!(config.telegram_profiles_of("operator"), Some(vec!["ops"]));
    assert_eq!(config.telegram_profiles_of("nobody"), None);
    let profile = &config.telegram["ops"];
    assert_eq!(profile.api_base_url, TELEGRAM_API_DEFAULT);
    assert_eq!(profile.poll_timeout_s, POLL_TIMEOUT_S_DEFAULT);
    assert!(
        !format!("{config:?}").contains("CANARY"),
        "the server never reads the token"
    );
}

#[test]
fn a_file_others_can_read_is_refused_with_the_fix() {
    for (name, mode) in [(CHANNELS_FILE, 0o644), (CREDENTIALS_FILE, 0o640), ("ops.token", 0o604)] {
        let dir = Dir::new();
        dir.complete();
        fs::set_permissions(dir.path().join(name), fs::Permissions::from_mode(mode)).expect("chmod");
        let err = load(dir.path()).expect_err(name);
        assert!(matches!(err, ConfigError::NotPrivate { .. }), "{name}: {err}");
        assert!(err.to_string().contains("chmod 600"), "{err}");
        assert!(!err.to_string().contains("CANARY"), "{err}");
    }
}

#[test]
fn malformed_configurations_are_refused_whole() {
    let bad = [
        json!({"schema": "other", "audiences": {}}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {"Ops Team": {"channels": ["pi"]}}}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {"ops": {"channels": []}}}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {"ops": {"channels": ["email"]}}}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {"ops": {"channels": ["telegram:missing"]}}}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {"ops": {"channels": ["pi"], "accept": "majority"}}}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {}, "extra": true}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {},
               "telegram": {"ops": {"credential": "ops-bot", "allowedUserIds": [], "allowedChatIds": [1]}}}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {},
               "telegram": {"ops": {"credential": "unknown", "allowedUserIds": [1], "allowedChatIds": [1]}}}),
        json!({"schema": CHANNELS_SCHEMA, "audiences": {},
               "telegram": {"ops": {"credential": "ops-bot", "allowedUserIds": [1], "allowedChatIds": [1],
                                    "apiBaseUrl": "http://example.com"}}}),
    ];
    for value in bad {
        let dir = Dir::new();
        dir.complete();
        dir.channels(value.clone());
        let err = load(dir.path()).expect_err(&value.to_string());
        assert!(matches!(err, ConfigError::Invalid { .. }), "{value}: {err}");
    }
    let dir = Dir::new();
    dir.write(CHANNELS_FILE, "{not json", 0o600);
    assert!(matches!(load(dir.path()), Err(ConfigError::Invalid { .. })));
}

#[test]
fn a_missing_token_file_or_credentials_file_is_named() {
    let dir = Dir::new();
    dir.complete();
    fs::remove_file(dir.path().join("ops.token")).expect("rm");
    let err = load(dir.path()).expect_err("no token file");
    assert!(err.to_string().contains("does not exist"), "{err}");
    fs::remove_file(dir.path().join(CREDENTIALS_FILE)).expect("rm");
    let err = load(dir.path()).expect_err("no credentials");
    assert!(err.to_string().contains(CREDENTIALS_FILE), "{err}");
}

#[test]
fn an_oversized_file_is_refused_before_it_is_parsed() {
    let dir = Dir::new();
    let big = format!("{{\"schema\": \"{}\"}}", "x".repeat(CONFIG_FILE_BYTES_MAX as usize));
    dir.write(CHANNELS_FILE, &big, 0o600);
    assert!(matches!(load(dir.path()), Err(ConfigError::TooLarge { .. })));
}

#[test]
fn two_profiles_on_one_bot_token_file_are_refused() {
    let dir = Dir::new();
    let token = dir.complete().with_file_name("ops.token");
    let link = dir.path().join("ops-link.token");
    std::os::unix::fs::symlink(&token, &link).expect("symlink");
    let hard = dir.path().join("ops-hard.token");
    fs::hard_link(&token, &hard).expect("hard link");
    let other = dir.write("other.token", "654321:OTHER-TOKEN\n", 0o600);
    let profiles = |second: &Path, credential_of_second: &str| {
        let credentials = json!({"schema": CREDENTIALS_SCHEMA, "credentials": {
            "ops-bot": {"kind": "telegramBotToken", "tokenFile": token},
            "second-bot": {"kind": "telegramBotToken", "tokenFile": second}}});
        dir.write(CREDENTIALS_FILE, &credentials.to_string(), 0o600);
        dir.channels(json!({
            "schema": CHANNELS_SCHEMA,
            "audiences": {"operator": {"channels": ["telegram:ops", "telegram:second"]}},
            "telegram": {
                "ops": {"credential": "ops-bot", "allowedUserIds": [42], "allowedChatIds": [42]},
                "second": {"credential": credential_of_second, "allowedUserIds": [42], "allowedChatIds": [43]}},
        }));
        load(dir.path())
    };
    for (second, credential) in [
        (token.as_path(), "ops-bot"),
        (token.as_path(), "second-bot"),
        (link.as_path(), "second-bot"),
        (hard.as_path(), "second-bot"),
    ] {
        let refused = profiles(second, credential).expect_err("one bot, two profiles");
        let text = refused.to_string();
        assert!(
            text.contains("profiles ops and second use the same bot token file"),
            "{second:?} {credential}: {text}"
        );
    }
    let two_bots = profiles(&other, "second-bot").expect("two bots").expect("present");
    assert_eq!(two_bots.telegram.len(), 2);
}
