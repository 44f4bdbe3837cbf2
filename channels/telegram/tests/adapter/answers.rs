//! Presses and replies → `channel.answer`; everything else ignored, answered neutrally.

use crate::harness::{
    Adapter, CHAT, GROUP, OTHER_CHAT, STRANGER, TOKEN, USER, WAIT, on_message_payload, send_and_settle,
};
use channel_protocol::Kind;
use channel_telegram::fake_api::FakeBotApi;
use serde_json::{Value, json};

#[test]
fn an_allowed_press_is_forwarded_every_time() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let message_id = send_and_settle(&mut adapter, "cm-1", "noncePRESS", "att-1");

    let first = api.push_callback(USER, CHAT, message_id, "noncePRESS:0");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(
        answer.payload,
        json!({"channelMessageId": "cm-1", "choiceId": "approve", "stage": "final",
            "from": {"userId": USER, "chatId": CHAT}, "updateId": first})
    );
    assert_eq!(answer.header.attempt_id, None);
    assert_eq!(
        answer.header.channel_revision, 1,
        "the revision the adapter knows for the message"
    );
    assert!(api.wait_for_callback_answers(1, WAIT));
    assert_eq!(api.callback_answers()[0].text.as_deref(), Some("Received"));

    // The server decides winners: a second press is forwarded too.
    let second = api.push_callback(USER, CHAT, message_id, "noncePRESS:0");
    let again = adapter.expect(Kind::Answer);
    assert_eq!(again.payload["channelMessageId"], "cm-1");
    assert_eq!(again.payload["updateId"], second);
    assert!(api.wait_for_confirmed_updates(WAIT), "handled updates are confirmed");
    adapter.finish();
}

#[test]
fn an_input_choice_asks_for_text_with_a_prompt() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let message_id = send_and_settle(&mut adapter, "cm-1", "nonceINPUT", "att-1");

    api.push_callback(USER, CHAT, message_id, "nonceINPUT:1");
    let wants = adapter.expect(Kind::Answer);
    assert_eq!(wants.payload["choiceId"], "replan");
    assert_eq!(wants.payload["stage"], "wantsText");
    assert!(wants.payload.get("text").is_none());

    let mut prompt = on_message_payload("prompt", "cm-1", "nonceINPUT", message_id);
    prompt.insert("forChoiceId".to_owned(), json!("replan"));
    adapter.present(Value::Object(prompt), 1, "att-prompt");
    let settle = adapter.expect_settle("att-prompt");
    assert_eq!(settle.payload["outcome"], "applied");
    let sent = api.sent_messages();
    let question = sent.last().expect("prompt message");
    assert!(question.force_reply);
    assert_eq!(question.reply_to_message_id, Some(message_id));
    assert_eq!(question.placeholder.as_deref(), Some("Your notes"));
    assert!(question.callback_data.is_empty());
    assert!(
        question.visible_text.starts_with("What should change?"),
        "{}",
        question.visible_text
    );
    assert_eq!(settle.payload["telegram"]["messageId"], question.message_id);

    // Over maxLength (20): not the text; the server is asked to prompt again (a managed
    // effect), and the adapter sends nothing by itself.
    let update = api.push_reply(USER, CHAT, question.message_id, "this is far too long for it");
    let again = adapter.expect(Kind::Answer);
    assert_eq!(
        again.payload,
        json!({"channelMessageId": "cm-1", "choiceId": "replan", "stage": "wantsText",
            "from": {"userId": USER, "chatId": CHAT}, "updateId": update})
    );
    adapter.wait_for_stderr("replyTooLong");
    assert_eq!(api.sent_messages().len(), 2, "no message without a present");

    let update = api.push_reply(USER, CHAT, question.message_id, "add more tests");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(
        answer.payload,
        json!({"channelMessageId": "cm-1", "choiceId": "replan", "text": "add more tests",
            "stage": "final", "from": {"userId": USER, "chatId": CHAT}, "updateId": update})
    );
    adapter.finish();
}

#[test]
fn presses_of_strangers_or_in_other_chats_are_not_allowed() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let message_id = send_and_settle(&mut adapter, "cm-1", "nonceALLOW", "att-1");

    api.push_callback(STRANGER, CHAT, message_id, "nonceALLOW:0");
    api.push_callback(USER, OTHER_CHAT, message_id, "nonceALLOW:0");
    // A stranger's reply to a prompt does not count either.
    assert!(api.wait_for_callback_answers(2, WAIT));
    let answers: Vec<_> = api.callback_answers().into_iter().map(|answer| answer.text).collect();
    assert_eq!(
        answers,
        vec![Some("Not allowed".to_owned()), Some("Not allowed".to_owned())]
    );

    let allowed = api.push_callback(USER, CHAT, message_id, "nonceALLOW:0");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(
        answer.payload["updateId"], allowed,
        "the refused presses made no answer"
    );

    adapter.wait_for_stderr("userNotAllowed");
    adapter.wait_for_stderr("chatNotAllowed");
    let stderr = adapter.stderr();
    // Each line without its leading timestamp (whose digits could match an id by chance).
    let text: String = stderr
        .lines()
        .map(|line| line.split_once(' ').map_or(line, |(_, rest)| rest))
        .collect();
    for id in [
        STRANGER.to_string(),
        OTHER_CHAT.to_string(),
        USER.to_string(),
        "cm-1".to_owned(),
        "nonceALLOW".to_owned(),
    ] {
        assert!(!text.contains(&id), "stderr holds an id ({id}):\n{stderr}");
    }
    let line = stderr
        .lines()
        .find(|line| line.contains("userNotAllowed"))
        .expect("line");
    assert!(line.contains("count=1"), "{line}");
    adapter.finish();
}

#[test]
fn a_stranger_reply_to_a_prompt_is_ignored() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let message_id = send_and_settle(&mut adapter, "cm-1", "nonceREPLY", "att-1");
    let mut prompt = on_message_payload("prompt", "cm-1", "nonceREPLY", message_id);
    prompt.insert("forChoiceId".to_owned(), json!("replan"));
    adapter.present(Value::Object(prompt), 1, "att-prompt");
    let question_id = adapter.expect_settle("att-prompt").payload["telegram"]["messageId"]
        .as_i64()
        .expect("id");
    api.push_reply(STRANGER, CHAT, question_id, "mine");
    let update = api.push_reply(USER, CHAT, question_id, "ours");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(
        (answer.payload["text"].as_str(), answer.payload["updateId"].as_i64()),
        (Some("ours"), Some(update))
    );
    adapter.wait_for_stderr("replyNotAllowed");
    adapter.finish();
}

#[test]
fn forged_callback_data_is_ignored() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    let message_id = send_and_settle(&mut adapter, "cm-1", "nonceFORGE", "att-1");

    let forged = [
        (message_id, "garbage"),
        (message_id, "nonceOTHER:0"),
        (message_id, "nonceFORGE:9"),
        (message_id, "nonceFORGE:01"),
        (message_id, "nonceFORGE:approve"),
        (message_id + 100, "nonceFORGE:0"),
        (message_id, ""),
    ];
    for (on_message, data) in forged {
        api.push_callback(USER, CHAT, on_message, data);
    }
    assert!(api.wait_for_callback_answers(forged.len(), WAIT));
    assert!(
        api.callback_answers()
            .iter()
            .all(|answer| answer.text.as_deref() != Some("Received")),
        "{:?}",
        api.callback_answers()
    );
    let real = api.push_callback(USER, CHAT, message_id, "nonceFORGE:1");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(answer.payload["updateId"], real, "no forged press was forwarded");
    assert_eq!(answer.payload["choiceId"], "replan");
    adapter.finish();
}

#[test]
fn a_group_chat_press_names_the_group() {
    let api = FakeBotApi::start(TOKEN);
    let mut adapter = Adapter::launch(&api);
    adapter.expect_ready();
    adapter.present(crate::harness::send_payload("cm-g", "nonceGROUP", GROUP), 1, "att-g");
    let message_id = adapter.expect_settle("att-g").payload["telegram"]["messageId"]
        .as_i64()
        .expect("id");
    api.push_callback(USER, GROUP, message_id, "nonceGROUP:0");
    let answer = adapter.expect(Kind::Answer);
    assert_eq!(answer.payload["from"], json!({"userId": USER, "chatId": GROUP}));
    adapter.finish();
}
