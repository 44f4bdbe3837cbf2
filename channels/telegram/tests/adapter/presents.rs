//! `channel.present` → one API call → one `channel.settle`.

use crate::harness::{Adapter, CHAT, OTHER_CHAT, TOKEN, USER, WAIT, on_message_payload, send_and_settle, send_payload};
use channel_protocol::Kind;
use channel_telegram::fake_api::{FakeBotApi, FakeFailure};
use serde_json::{Value, json};

#[test]
fn send_shows_one_opaque_button_per_choice_and_settles_applied() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    adapter.present(send_payload("cm-1", "nonceAAAA1", CHAT), 3, "att-1");
    let settle = adapter.expect_settle("att-1");
    let sent = api.sent_messages();
    assert_eq!(sent.len(), 1);
    let message = &sent[0];
    assert_eq!(
        settle.payload,
        json!({"channelMessageId": "cm-1", "outcome": "applied",
            "telegram": {"chatId": CHAT, "messageId": message.message_id}})
    );
    assert_eq!(
        settle.header.channel_revision, 3,
        "the settle carries the present's revision"
    );
    assert_eq!(message.chat_id, CHAT);
    assert_eq!(message.parse_mode.as_deref(), Some("HTML"));
    assert_eq!(message.button_labels, vec!["Approve", "Replan"]);
    assert_eq!(message.callback_data, vec!["nonceAAAA1:0", "nonceAAAA1:1"]);
    for data in &message.callback_data {
        assert!(data.len() <= 64);
        assert!(
            !data.contains("approve") && !data.contains("replan"),
            "no choice id in {data}"
        );
    }
    assert!(
        message
            .visible_text
            .starts_with("Deploy release 1.2?\nShips the new billing code <fast> & safe.")
    );
    assert!(message.visible_text.contains("Environment: production"));
    assert!(
        message
            .visible_text
            .contains("Deadline: 2030-03-17 17:46 UTC (then: Approve)"),
        "{}",
        message.visible_text
    );
    assert!(
        message.text.contains("&lt;fast&gt; &amp; safe"),
        "escaped HTML: {}",
        message.text
    );
    assert!(!message.force_reply);
    adapter.finish();
}

#[test]
fn long_presentations_are_cut_visibly() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let mut payload = send_payload("cm-long", "nonceLONG1", CHAT);
    payload["presentation"]["blocks"] = json!([
        {"kind": "text", "text": "a&b<".repeat(3000)},
        {"kind": "code", "text": "x".repeat(5000)}
    ]);
    adapter.present(payload, 1, "att-long");
    let settle = adapter.expect_settle("att-long");
    assert_eq!(settle.payload["outcome"], "applied", "{settle:?}");
    let text = &api.sent_messages()[0].visible_text;
    assert!(text.contains("…(cut)"), "{text}");
    assert!(text.ends_with("(then: Approve)"), "the deadline survives the cut");
    adapter.finish();
}

fn rejected_error(api: &FakeBotApi, adapter: &mut Adapter, failure: FakeFailure, attempt_id: &str) -> Value {
    api.fail_next("sendMessage", failure);
    adapter.present(send_payload("cm-fail", "nonceFAIL1", CHAT), 1, attempt_id);
    let settle = adapter.expect_settle(attempt_id);
    assert_eq!(settle.payload["outcome"], "rejected", "{settle:?}");
    assert!(settle.payload.get("telegram").is_none());
    settle.payload["error"].clone()
}

#[test]
fn api_failures_settle_rejected_with_closed_codes() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();

    let limited = rejected_error(&api, &mut adapter, FakeFailure::RetryAfter(3), "att-429");
    assert_eq!(limited["code"], "rateLimited");
    assert_eq!(limited["retryable"], true);
    assert_eq!(limited["retryAfterMs"], 3000);
    assert_eq!(limited["uncertain"], false);

    let bad = FakeFailure::Status(400, "Bad Request: chat not found".to_owned());
    let bad = rejected_error(&api, &mut adapter, bad, "att-400");
    assert_eq!(bad["code"], "badRequest");
    assert_eq!(bad["retryable"], false);
    assert_eq!(bad["uncertain"], false);
    assert_eq!(bad["message"], "Bad Request: chat not found");

    let forbidden = FakeFailure::Status(403, "Forbidden: bot was blocked by the user".to_owned());
    assert_eq!(
        rejected_error(&api, &mut adapter, forbidden, "att-403")["code"],
        "forbidden"
    );

    let server = FakeFailure::Status(502, "Bad Gateway".to_owned());
    let server = rejected_error(&api, &mut adapter, server, "att-502");
    assert_eq!(
        (server["code"].as_str(), server["retryable"].as_bool()),
        (Some("serverError"), Some(true))
    );

    let dropped = rejected_error(&api, &mut adapter, FakeFailure::Drop, "att-drop");
    assert_eq!(dropped["code"], "network");
    assert_eq!(dropped["retryable"], false);
    assert_eq!(dropped["uncertain"], true, "the request may have reached Telegram");

    // A slow answer within the request timeout is still an answer.
    api.fail_next("sendMessage", FakeFailure::Hang(300));
    adapter.present(send_payload("cm-slow", "nonceSLOW1", CHAT), 1, "att-slow");
    assert_eq!(adapter.expect_settle("att-slow").payload["outcome"], "applied");
    adapter.finish();
}

#[test]
fn a_token_in_telegrams_words_is_redacted() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let echo = FakeFailure::Status(400, format!("Bad Request: bot{TOKEN} is confused"));
    let error = rejected_error(&api, &mut adapter, echo, "att-echo");
    assert_eq!(error["message"], "Bad Request: bot[redacted] is confused");
    adapter.finish();
}

#[test]
fn presents_the_adapter_refuses_settle_invalid_presentation() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();

    adapter.present(send_payload("cm-x", "nonceXXXX1", OTHER_CHAT), 1, "att-chat");
    let settle = adapter.expect_settle("att-chat");
    assert_eq!(settle.payload["error"]["code"], "invalidPresentation");

    let mut bad_choice = send_payload("cm-y", "nonceYYYY1", CHAT);
    bad_choice["presentation"]["choices"][0]["id"] = json!("Not Valid");
    adapter.present(bad_choice, 1, "att-choice");
    let settle = adapter.expect_settle("att-choice");
    assert_eq!(settle.payload["channelMessageId"], "cm-y");
    assert_eq!(settle.payload["error"]["code"], "invalidPresentation");
    let message = settle.payload["error"]["message"].as_str().expect("message");
    assert!(message.contains("presentation.choices[].id"), "{message}");
    assert!(!message.contains("Not Valid"), "no content echoed: {message}");

    let mut unknown_field = send_payload("cm-z", "nonceZZZZ1", CHAT);
    unknown_field["extra"] = json!(true);
    adapter.present(unknown_field, 1, "att-field");
    assert_eq!(
        adapter.expect_settle("att-field").payload["error"]["code"],
        "invalidPresentation"
    );

    assert!(api.sent_messages().is_empty(), "nothing was sent");
    adapter.finish();
}

#[test]
fn edit_updates_and_a_closed_edit_removes_the_buttons() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let message_id = send_and_settle(&mut adapter, "cm-1", "nonceEDIT1", "att-1");

    // An open edit keeps the keyboard.
    let mut edit = on_message_payload("edit", "cm-1", "nonceEDIT1", message_id);
    edit["presentation"]["title"] = json!("Deploy release 1.2.1?");
    adapter.present(Value::Object(edit.clone()), 2, "att-2");
    let settle = adapter.expect_settle("att-2");
    assert_eq!(
        settle.payload["telegram"],
        json!({"chatId": CHAT, "messageId": message_id})
    );
    let edits = api.edits();
    assert_eq!(edits.len(), 1);
    assert!(edits[0].has_keyboard);
    assert!(edits[0].visible_text.starts_with("Deploy release 1.2.1?"));

    // The same edit again: Telegram says "not modified", which means it is in place.
    adapter.present(Value::Object(edit), 2, "att-2b");
    assert_eq!(adapter.expect_settle("att-2b").payload["outcome"], "applied");

    let mut closed = on_message_payload("edit", "cm-1", "nonceEDIT1", message_id);
    closed.insert("closed".to_owned(), json!({"text": "Approved by ann"}));
    adapter.present(Value::Object(closed), 3, "att-3");
    assert_eq!(adapter.expect_settle("att-3").payload["outcome"], "applied");
    let last = api.edits().pop().expect("closed edit");
    assert!(!last.has_keyboard, "a closed message has no buttons");
    assert!(last.visible_text.ends_with("Approved by ann"), "{}", last.visible_text);
    assert!(!last.visible_text.contains("Deadline"));

    // A later press: told it is closed, nothing forwarded.
    api.push_callback(USER, CHAT, message_id, "nonceEDIT1:0");
    assert!(api.wait_for_callback_answers(1, WAIT));
    assert_eq!(
        api.callback_answers()[0].text.as_deref(),
        Some("This decision is closed")
    );
    let other_id = send_and_settle(&mut adapter, "cm-2", "nonceEDIT2", "att-4");
    api.push_callback(USER, CHAT, other_id, "nonceEDIT2:0");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(
        answer.payload["channelMessageId"], "cm-2",
        "the closed press was not forwarded"
    );
    adapter.finish();
}

#[test]
fn an_older_revision_does_not_overwrite_a_newer_one() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    adapter.present(send_payload("cm-1", "nonceREV01", CHAT), 5, "att-1");
    let message_id = adapter.expect_settle("att-1").payload["telegram"]["messageId"]
        .as_i64()
        .expect("id");
    let edit = on_message_payload("edit", "cm-1", "nonceREV01", message_id);
    adapter.present(Value::Object(edit), 4, "att-2");
    let settle = adapter.expect_settle("att-2");
    assert_eq!(settle.payload["error"]["code"], "staleRevision");
    assert!(api.edits().is_empty());
    adapter.finish();
}
