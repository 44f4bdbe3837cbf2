//! Fencing, restarts (`track`), stopping, protocol violations.

use crate::harness::{
    Adapter, CHAT, LaunchOptions, TOKEN, USER, WAIT, on_message_payload, send_and_settle, send_payload,
};
use channel_protocol::Kind;
use channel_protocol::frame::FRAME_BYTES_MAX;
use channel_telegram::fake_api::FakeBotApi;
use serde_json::{Value, json};

#[test]
fn a_restarted_adapter_answers_for_tracked_messages() {
    let api = FakeBotApi::start(TOKEN);
    let mut first = Adapter::launch(&api);
    first.expect_ready();
    let message_id = send_and_settle(&mut first, "cm-1", "nonceTRACK", "att-1");
    first.send(Kind::Exiting, json!({"reason": "requested"}), 0, None);
    assert_eq!(first.expect(Kind::Exiting).payload, json!({"reason": "requested"}));
    assert_eq!(first.wait_exit(), 0);
    first.assert_no_token();

    let mut second = Adapter::launch_with(
        &api,
        LaunchOptions {
            adapter_epoch: 2,
            ..LaunchOptions::default()
        },
    );
    second.expect_ready();
    second.send(
        Kind::Present,
        Value::Object(on_message_payload("track", "cm-1", "nonceTRACK", message_id)),
        1,
        None,
    );
    // A settle of a later present proves the track (earlier on stdin) was handled: no frame
    // of its own, no API call.
    let sends_before = api.sent_messages().len();
    send_and_settle(&mut second, "cm-2", "nonceOTHER", "att-2");
    assert_eq!(api.sent_messages().len(), sends_before + 1, "track made no API call");

    let update = api.push_callback(USER, CHAT, message_id, "nonceTRACK:0");
    let answer = second.expect(Kind::Answer);
    assert_eq!(answer.header.adapter_epoch, 2);
    assert_eq!(answer.payload["channelMessageId"], "cm-1");
    assert_eq!(answer.payload["updateId"], update);
    second.finish();
}

#[test]
fn stale_frames_are_ignored() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();

    let mut stale = adapter.next_header(1, Some("att-stale"));
    stale.adapter_epoch += 1;
    adapter.send_with_header(Kind::Present, stale, send_payload("cm-s", "nonceSTALE", CHAT));
    let mut other_profile = adapter.next_header(1, Some("att-profile"));
    other_profile.profile = "other".to_owned();
    adapter.send_with_header(Kind::Present, other_profile, send_payload("cm-p", "noncePROF1", CHAT));

    adapter.present(send_payload("cm-ok", "nonceOKAY1", CHAT), 1, "att-ok");
    let mut repeat = adapter.next_header(1, Some("att-repeat"));
    repeat.sequence -= 1;
    adapter.send_with_header(Kind::Present, repeat, send_payload("cm-r", "nonceREPT1", CHAT));
    adapter.present(send_payload("cm-ok2", "nonceOKAY2", CHAT), 1, "att-ok2");

    // Only the two fresh frames were handled, in order.
    adapter.expect_settle("att-ok");
    adapter.expect_settle("att-ok2");
    assert_eq!(api.sent_messages().len(), 2);
    adapter.wait_for_stderr("staleEpoch");
    adapter.wait_for_stderr("wrongProfile");
    adapter.wait_for_stderr("staleSequence");
    adapter.finish();
}

#[test]
fn an_oversized_frame_is_a_protocol_violation() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let mut huge = vec![b' '; FRAME_BYTES_MAX + 16];
    huge.push(b'\n');
    adapter.send_raw(&huge);
    assert_eq!(
        adapter.expect(Kind::Exiting).payload,
        json!({"reason": "protocolViolation"})
    );
    assert_eq!(adapter.wait_exit(), 65);
    adapter.assert_no_token();
}

#[test]
fn a_malformed_frame_is_a_protocol_violation() {
    let api = FakeBotApi::start(TOKEN);
    for bad in [&b"{not json}\n"[..], b"{\"b\":1, \"a\":2}\n", b"[]\n"] {
        let mut adapter = Adapter::launch(&api);
        adapter.expect_ready();
        adapter.send_raw(bad);
        assert_eq!(
            adapter.expect(Kind::Exiting).payload,
            json!({"reason": "protocolViolation"})
        );
        assert_eq!(adapter.wait_exit(), 65);
        adapter.assert_no_token();
    }
}

#[test]
fn a_kind_the_server_may_not_send_is_a_protocol_violation() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    adapter.send(Kind::Answer, json!({}), 0, None);
    assert_eq!(
        adapter.expect(Kind::Exiting).payload,
        json!({"reason": "protocolViolation"})
    );
    assert_eq!(adapter.wait_exit(), 65);
}

#[test]
fn stdin_eof_stops_with_stdin_closed() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    adapter.close_stdin();
    let exiting = adapter.expect(Kind::Exiting);
    assert_eq!(exiting.payload, json!({"reason": "stdinClosed"}));
    assert_eq!(exiting.header.sequence, 2);
    assert_eq!(adapter.wait_exit(), 0);
    adapter.assert_no_token();
}

#[test]
fn a_stop_request_settles_what_came_before_it() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    adapter.present(send_payload("cm-1", "nonceSTOP1", CHAT), 1, "att-1");
    adapter.send(Kind::Exiting, json!({"reason": "requested"}), 0, None);
    adapter.expect_settle("att-1");
    assert_eq!(adapter.expect(Kind::Exiting).payload, json!({"reason": "requested"}));
    assert_eq!(adapter.wait_exit(), 0);
    adapter.assert_no_token();
}

#[test]
fn a_message_tracked_without_its_reference_is_pinned_by_its_first_press() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    // A send an operator confirmed: the server knows the message exists, not which it is.
    let mut track = on_message_payload("track", "cm-1", "nonceCONF1", 1);
    track.remove("telegramMessageId");
    adapter.send(Kind::Present, Value::Object(track), 1, None);

    let first = api.push_callback(USER, CHAT, 4242, "nonceCONF1:0");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(
        answer.payload,
        json!({"channelMessageId": "cm-1", "choiceId": "approve", "stage": "final",
            "from": {"userId": USER, "chatId": CHAT}, "updateId": first, "telegramMessageId": 4242})
    );
    // From now on it is that message: a press on another one does not count.
    api.push_callback(USER, CHAT, 4343, "nonceCONF1:0");
    let again = api.push_callback(USER, CHAT, 4242, "nonceCONF1:1");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(answer.payload["updateId"], again);
    assert!(
        answer.payload.get("telegramMessageId").is_none(),
        "{:?}",
        answer.payload
    );
    assert!(api.wait_for_callback_answers(3, WAIT));
    let texts: Vec<_> = api.callback_answers().into_iter().map(|answer| answer.text).collect();
    assert_eq!(
        texts,
        ["Received", "Not allowed", "Received"].map(|text| Some(text.to_owned()))
    );
    adapter.finish();
}
