//! Start-up: ready, refused tokens, refused token files, bad launches, an unreachable API.

use crate::harness::{Adapter, LaunchOptions, TOKEN, TOKEN_SECRET};
use channel_protocol::Kind;
use channel_telegram::fake_api::{FAKE_BOT_ID, FAKE_BOT_USERNAME, FakeBotApi};
use serde_json::json;
use std::net::TcpListener;

#[test]
fn ready_after_get_me() {
    let api = FakeBotApi::start(TOKEN);
    let adapter = Adapter::launch(&api);
    let ready = adapter.expect_ready();
    assert_eq!(
        ready.payload,
        json!({"bot": {"id": FAKE_BOT_ID, "username": FAKE_BOT_USERNAME}})
    );
    assert_eq!(ready.header.sequence, 1);
    assert_eq!(ready.header.adapter_epoch, 1);
    assert_eq!(ready.header.channel_revision, 0);
    assert_eq!(ready.header.attempt_id, None);
    assert_eq!(api.requests().first().map(String::as_str), Some("getMe"));
    // The one long-poll consumer starts after ready.
    assert!(api.wait_for_requests("getUpdates", 1, crate::harness::WAIT));
    adapter.finish();
}

#[test]
fn a_wrong_token_is_credential_rejected() {
    let api = FakeBotApi::start("999:another-token-entirely");
    let mut adapter = Adapter::launch(&api);
    let exiting = adapter.expect(Kind::Exiting);
    assert_eq!(exiting.payload, json!({"reason": "credentialRejected"}));
    assert_eq!(adapter.wait_exit(), 78);
    assert_eq!(api.requests(), vec!["getMe"], "no retry of a refused token");
    adapter.assert_no_token();
}

#[test]
fn a_group_readable_token_file_is_refused_without_showing_the_token() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch_with(
        &api,
        LaunchOptions {
            mode: 0o644,
            ..LaunchOptions::default()
        },
    );
    assert_eq!(adapter.wait_exit(), 78);
    let stderr = adapter.stderr();
    assert!(stderr.contains("mode 0644"), "{stderr}");
    assert!(stderr.contains(adapter.token_file.to_str().expect("path")), "{stderr}");
    assert!(!stderr.contains(TOKEN_SECRET), "{stderr}");
    assert!(api.requests().is_empty(), "no request with a refused token file");
    adapter.assert_no_token();
}

#[test]
fn a_missing_or_bad_launch_envelope_is_refused() {
    let mut missing = Adapter::launch_raw(None);
    assert_eq!(missing.wait_exit(), 78);
    assert!(
        missing.stderr().contains("PI_WORKFLOWS_CHANNEL_LAUNCH is not set"),
        "{}",
        missing.stderr()
    );

    let mut garbage = Adapter::launch_raw(Some("{not json".to_owned()));
    assert_eq!(garbage.wait_exit(), 78);
    assert!(garbage.stderr().contains("launch envelope"), "{}", garbage.stderr());

    // A token in the envelope is an unknown field: refused, and never echoed.
    let with_token = json!({
        "schema": "pi-workflows.channel-launch.v1", "adapterEpoch": 1, "profile": "ops",
        "tokenFile": "/nonexistent", "allowedUserIds": [1], "allowedChatIds": [1], "token": TOKEN
    });
    let mut leaky = Adapter::launch_raw(Some(with_token.to_string()));
    assert_eq!(leaky.wait_exit(), 78);
    leaky.assert_no_token();

    let plain_http = json!({
        "schema": "pi-workflows.channel-launch.v1", "adapterEpoch": 1, "profile": "ops",
        "apiBaseUrl": "http://api.telegram.org", "tokenFile": "/nonexistent",
        "allowedUserIds": [1], "allowedChatIds": [1]
    });
    let mut insecure = Adapter::launch_raw(Some(plain_http.to_string()));
    assert_eq!(insecure.wait_exit(), 78);
    assert!(insecure.stderr().contains("apiBaseUrl"), "{}", insecure.stderr());
}

#[test]
fn an_unreachable_api_gives_up_after_bounded_retries() {
    let api = FakeBotApi::start(TOKEN);
    // A port that was just free: nothing listens there.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let mut adapter = Adapter::launch_with(
        &api,
        LaunchOptions {
            api_base_url: Some(format!("http://127.0.0.1:{port}")),
            ..LaunchOptions::default()
        },
    );
    let exiting = adapter.expect(Kind::Exiting);
    assert_eq!(exiting.payload, json!({"reason": "apiUnreachable"}));
    assert_eq!(adapter.wait_exit(), 69);
    assert_eq!(
        adapter.stderr().matches("getMe failed").count(),
        channel_telegram::startup::GET_ME_ATTEMPTS_MAX as usize
    );
    adapter.assert_no_token();
}
