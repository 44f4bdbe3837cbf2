//! Protected decisions on Telegram end to end: the real server supervises the real
//! `pi-workflows-telegram` adapter against a fake Bot API on 127.0.0.1 (`channel_telegram::
//! fake_api`), with the real Node runner. A person answers by button and by text; a person
//! who is not allowed and a forged callback change nothing; a SIGKILL of the adapter while it
//! sends makes only that attempt ambiguous, and `channel recover` does what it says; the token
//! never appears in logs, status or errors.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use channel_telegram::fake_api::{FakeBotApi, FakeFailure, SentMessage};
use common::e2e::*;
use serde_json::{Value, json};

const TOKEN: &str = "123456789:CANARY-e2e-token-never-logged";
const ALLOWED_USER: i64 = 70_001;
/// A second person allowed to answer, in the same chat.
const SECOND_USER: i64 = 70_002;
const CHAT: i64 = 70_001;
const STRANGER: i64 = 99_999;
const WAIT: Duration = Duration::from_secs(60);

struct Channels {
    env: Env,
    fake: FakeBotApi,
    _config: tempfile::TempDir,
}

fn adapter_binary() -> PathBuf {
    let path = repo_root().join("target/debug/pi-workflows-telegram");
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// A server whose config directory maps audience `operator` to Pi and Telegram profile `ops`.
fn with_channels() -> Channels {
    with_adapter(&adapter_binary())
}

/// The edit that closed the decision's message (its buttons removed), once it came.
fn closing_edit(c: &Channels) -> channel_telegram::fake_api::Edit {
    c.wait("the closing edit", || {
        c.fake.edits().iter().any(|edit| !edit.has_keyboard)
    });
    c.fake
        .edits()
        .into_iter()
        .find(|edit| !edit.has_keyboard)
        .expect("closing edit")
}

/// A decision whose first send reached Telegram, but whose adapter was SIGKILLed before the
/// answer came back: the attempt is ambiguous and a new adapter epoch is ready. The run's ID.
fn start_with_an_ambiguous_send(c: &Channels) -> String {
    c.fake.fail_next("sendMessage", FakeFailure::Hang(60_000));
    let run_id = c.start_approval();
    assert!(c.fake.wait_for_requests("sendMessage", 1, WAIT), "the send was made");
    let pids = adapter_pids(c.env.server_pid());
    assert_eq!(pids.len(), 1, "one adapter per profile: {pids:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0]), nix::sys::signal::Signal::SIGKILL).expect("SIGKILL");
    c.wait("the attempt to become ambiguous", || c.status()["ambiguous"] == 1);
    c.wait("a new adapter epoch ready", || {
        let status = c.status();
        status["profiles"][0]["state"] == "ready" && status["profiles"][0]["epoch"].as_i64() >= Some(2)
    });
    run_id
}

fn with_adapter(program: &Path) -> Channels {
    with_profiles(program, &["ops"])
}

/// A server whose audience `operator` is Pi and one Telegram profile per name, each with its
/// own credential and token file; every token file holds `TOKEN` (one bot).
fn with_profiles(program: &Path, profiles: &[&str]) -> Channels {
    let fake = FakeBotApi::start(TOKEN);
    let config = short_temp_dir("piwc");
    let mut credentials = serde_json::Map::new();
    let mut telegram = serde_json::Map::new();
    let mut audience_channels = vec![json!("pi")];
    for profile in profiles {
        let token = config.path().join(format!("{profile}.token"));
        write_private(&token, TOKEN);
        let credential = format!("{profile}-bot");
        credentials.insert(
            credential.clone(),
            json!({"kind": "telegramBotToken", "tokenFile": token}),
        );
        telegram.insert(
            profile.to_string(),
            json!({"credential": credential, "allowedUserIds": [ALLOWED_USER, SECOND_USER], "allowedChatIds": [CHAT],
                   "apiBaseUrl": fake.base_url(), "pollTimeoutS": 1}),
        );
        audience_channels.push(json!(format!("telegram:{profile}")));
    }
    let credentials = json!({"schema": "pi-workflows.credentials.v1", "credentials": credentials});
    write_private(&config.path().join("credentials.json"), &credentials.to_string());
    let channels = json!({
        "schema": "pi-workflows.channels.v1",
        "audiences": {"operator": {"channels": audience_channels, "accept": "first-valid-answer"}},
        "telegram": telegram,
    });
    write_private(&config.path().join("channels.json"), &channels.to_string());
    let env = Env::with_vars(vec![
        (
            "PI_WORKFLOWS_CONFIG_DIR".to_string(),
            config.path().display().to_string(),
        ),
        ("PI_WORKFLOWS_TELEGRAM_BIN".to_string(), program.display().to_string()),
    ]);
    Channels {
        env,
        fake,
        _config: config,
    }
}

impl Channels {
    /// Start the merge-approval example; it waits for a person.
    fn start_approval(&self) -> String {
        start_merge_approval(&self.env)["runId"]
            .as_str()
            .expect("runId")
            .to_string()
    }

    /// The first message the adapter sent (the decision's), once it was sent.
    fn first_message(&self) -> SentMessage {
        self.wait("the decision message", || !self.fake.sent_messages().is_empty());
        self.fake.sent_messages()[0].clone()
    }

    fn wait(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !check() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.env.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn status(&self) -> Value {
        let out = self.env.cli(&["channel", "status", "--json"]);
        self.env.expect_code(&out, 0, "channel status");
        json_of(&out)
    }

    fn run_status(&self, run_id: &str) -> String {
        self.env
            .text(&format!("SELECT status FROM runs WHERE run_id = '{run_id}'"))
    }

    /// Every log file of the state directory, the status, every run's view and `extra` hold
    /// no token.
    fn assert_no_token(&self, extra: &[&str]) {
        let secret = TOKEN.split(':').nth(1).expect("secret part");
        let mut texts: Vec<String> = extra.iter().map(|text| text.to_string()).collect();
        texts.push(self.status().to_string());
        for run_id in self.env.texts("SELECT run_id FROM runs") {
            let view = self.env.cli(&["view", &run_id, "--once", "--json"]);
            self.env.expect_code(&view, 0, "view --once --json");
            assert!(!view.stdout.is_empty(), "the view of {run_id}");
            texts.push(String::from_utf8_lossy(&view.stdout).into_owned());
        }
        for entry in walk(&self.env.dir().join("logs"))
            .into_iter()
            .chain(walk(&self.env.dir().join("server")))
        {
            if let Ok(bytes) = std::fs::read(&entry) {
                texts.push(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
        for text in texts {
            assert!(
                !text.contains(secret),
                "the token leaked: {}",
                &text[..text.len().min(500)]
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect()
}

/// The adapter processes the server `server_pid` started (tests run side by side).
fn adapter_pids(server_pid: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The parent PID is the second field after the parenthesised command name.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
        if String::from_utf8_lossy(&cmdline).contains("pi-workflows-telegram") && parent == Some(server_pid) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn a_button_press_answers_the_decision_and_the_message_is_closed() {
    let c = with_channels();
    let run_id = c.start_approval();
    c.wait("the decision message on Telegram", || {
        !c.fake.sent_messages().is_empty()
    });
    let sent = &c.fake.sent_messages()[0];
    assert_eq!(sent.chat_id, CHAT);
    assert_eq!(sent.button_labels, ["Approve the merge", "Request changes", "Hold"]);
    assert!(sent.visible_text.contains("Merge fix-1?"), "{}", sent.visible_text);
    assert!(
        sent.callback_data.iter().all(|data| !data.contains("approve")),
        "callback data is opaque: {:?}",
        sent.callback_data
    );

    // A stranger's press and a forged callback change nothing.
    c.fake
        .push_callback(STRANGER, CHAT, sent.message_id, &sent.callback_data[0]);
    c.fake
        .push_callback(ALLOWED_USER, CHAT, sent.message_id, "forged-nonce:0");
    assert!(c.fake.wait_for_callback_answers(2, WAIT), "both presses were answered");
    let answers: Vec<Option<String>> = c
        .fake
        .callback_answers()
        .into_iter()
        .map(|answer| answer.text)
        .collect();
    assert_eq!(
        answers,
        [
            Some("Not allowed".to_string()),
            Some("This decision is closed".to_string())
        ],
        "a stranger is not allowed; an unknown nonce is no open decision"
    );
    assert_eq!(c.run_status(&run_id), "waiting");

    c.fake
        .push_callback(ALLOWED_USER, CHAT, sent.message_id, &sent.callback_data[0]);
    c.wait("the run to complete", || c.run_status(&run_id) == "completed");
    assert_eq!(
        c.env.node_output(&run_id, "approve"),
        json!({"choice": "approve", "provenance": "human"})
    );
    let closed = closing_edit(&c);
    assert!(
        closed.visible_text.contains("Decided: Approve the merge"),
        "{}",
        closed.visible_text
    );
    assert_eq!(c.fake.sent_messages().len(), 1, "sent once");
    let late = c.env.cli(&["decision", "answer", &run_id, "hold"]);
    c.env.expect_code(&late, 1, "a later answer in the CLI loses");
    let tree = c.env.cli(&["server", "status", "--tree"]);
    let tree = String::from_utf8_lossy(&tree.stdout).into_owned();
    assert!(tree.contains("adapter-ops"), "the adapter shows in the tree: {tree}");
    c.assert_no_token(&[&stderr_of(&late), &tree]);
}

#[test]
fn a_text_choice_is_asked_with_force_reply_and_the_reply_is_the_answer() {
    let c = with_channels();
    let run_id = c.start_approval();
    let sent = c.first_message();
    c.fake
        .push_callback(ALLOWED_USER, CHAT, sent.message_id, &sent.callback_data[1]);
    c.wait("the prompt", || {
        c.fake.sent_messages().iter().any(|message| message.force_reply)
    });
    let prompt = c
        .fake
        .sent_messages()
        .into_iter()
        .find(|message| message.force_reply)
        .expect("prompt");
    assert_eq!(prompt.reply_to_message_id, Some(sent.message_id));
    assert!(
        prompt.visible_text.contains("What should change?"),
        "{}",
        prompt.visible_text
    );
    c.fake
        .push_reply(ALLOWED_USER, CHAT, prompt.message_id, "split the migration");
    c.wait("the run to complete", || c.run_status(&run_id) == "completed");
    assert_eq!(
        c.env.node_output(&run_id, "approve"),
        json!({"choice": "changes", "text": "split the migration", "provenance": "human"})
    );
    c.assert_no_token(&[]);
}

#[test]
fn a_sigkilled_adapter_leaves_only_its_in_flight_send_ambiguous_until_recovered() {
    let c = with_channels();
    let run_id = start_with_an_ambiguous_send(&c);
    // Ready and idle: it tracked what is open and made no second send by itself.
    std::thread::sleep(Duration::from_millis(500));
    let sends = c
        .fake
        .requests()
        .iter()
        .filter(|method| *method == "sendMessage")
        .count();
    assert_eq!(sends, 1, "an ambiguous send is never repeated without recovery");
    assert_eq!(c.run_status(&run_id), "waiting", "the run is not affected");
    let answered_in_pi = c.env.count("SELECT count(*) FROM human_decision_resolutions");
    assert_eq!(answered_in_pi, 0);

    let message_id = c.status()["messages"][0]["channelMessageId"]
        .as_str()
        .expect("id")
        .to_string();
    let retry = c.env.cli(&["channel", "recover", &message_id, "retry"]);
    c.env.expect_code(&retry, 0, "channel recover retry");
    assert!(
        String::from_utf8_lossy(&retry.stdout).contains("people see it twice"),
        "retry warns"
    );
    assert!(c.fake.wait_for_requests("sendMessage", 2, WAIT), "retry sends again");
    c.wait("the retried send applied", || {
        c.status()["messages"][0]["state"] == "presented"
    });
    let again = c.env.cli(&["channel", "recover", &message_id, "confirm"]);
    c.env.expect_code(&again, 1, "nothing is ambiguous any more");
    // The decision is still answered normally.
    let sent = c.fake.sent_messages().last().cloned().expect("the retried message");
    c.fake
        .push_callback(ALLOWED_USER, CHAT, sent.message_id, &sent.callback_data[2]);
    c.wait("the run to complete", || c.run_status(&run_id) == "completed");
    c.assert_no_token(&[&stderr_of(&again)]);
}

#[test]
fn a_reload_of_a_file_others_can_read_is_refused_and_the_last_good_configuration_stays() {
    let c = with_channels();
    let channels = c._config.path().join("channels.json");
    std::fs::set_permissions(&channels, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = c.env.cli(&["channel", "reload"]);
    c.env.expect_code(&out, 1, "reload of a group-readable channels.json");
    assert!(stderr_of(&out).contains("chmod 600"), "{}", stderr_of(&out));
    let status = c.status();
    assert!(
        status["configError"]
            .as_str()
            .is_some_and(|why| why.contains("chmod 600")),
        "{status}"
    );
    c.assert_no_token(&[&stderr_of(&out)]);
}

#[test]
fn a_decision_for_an_audience_no_channel_names_is_shown_in_pi_only_and_status_says_so() {
    let c = with_channels();
    let run_id = c.env.start_fixture("decision-audience", None);
    c.wait("the run to wait", || c.run_status(&run_id) == "waiting");
    c.wait("the status to name the audience", || {
        c.status()["unroutedAudiences"] == json!(["release-team"])
    });
    assert!(c.fake.sent_messages().is_empty(), "nothing goes to Telegram for it");
    let out = c.env.cli(&["channel", "status"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("audiences channels.json does not define: release-team"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let answered = c.env.cli(&["decision", "answer", &run_id, "go"]);
    c.env.expect_code(&answered, 0, "the CLI answers it");
}

#[test]
fn an_adapter_that_cannot_start_stops_its_profile_and_nothing_else() {
    let c = with_adapter(Path::new("/nonexistent/pi-workflows-telegram"));
    let run_id = c.start_approval();
    c.wait("the profile to stop", || {
        c.status()["profiles"][0]["state"] == "stopped"
    });
    assert_eq!(c.status()["profiles"][0]["lastExit"], "launchFailed");
    let tree = c.env.cli(&["server", "status"]);
    c.env.expect_code(&tree, 0, "the server is up");
    let answered = c
        .env
        .cli(&["decision", "answer", &run_id, "approve", "--follow", "--json"]);
    c.env.expect_code(&answered, 0, "the decision is answered in the CLI");
    assert_eq!(json_of(&answered)["status"], "completed");
}

/// Two profiles whose token files hold one bot's token: two long polls of one bot would
/// conflict forever, so the second to be ready is stopped for good (`duplicateBot`) and the
/// first serves the decision alone, sending it once.
#[test]
fn a_second_profile_of_the_same_bot_is_stopped_and_the_first_serves_alone() {
    let c = with_profiles(&adapter_binary(), &["ops", "ops2"]);
    let run_id = c.start_approval();
    let shown = |status: &Value| -> Vec<(String, String)> {
        let mut states: Vec<(String, String)> = status["profiles"]
            .as_array()
            .expect("profiles")
            .iter()
            .map(|profile| {
                (
                    profile["state"].as_str().unwrap_or_default().to_string(),
                    profile["lastExit"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        states.sort();
        states
    };
    c.wait("one profile ready and the other stopped", || {
        shown(&c.status())
            == [
                ("ready".to_string(), String::new()),
                ("stopped".to_string(), "duplicateBot".to_string()),
            ]
    });
    let sent = c.first_message();
    assert_eq!(sent.chat_id, CHAT);
    c.fake
        .push_callback(ALLOWED_USER, CHAT, sent.message_id, &sent.callback_data[0]);
    c.wait("the run to complete", || c.run_status(&run_id) == "completed");
    closing_edit(&c);
    assert_eq!(c.fake.sent_messages().len(), 1, "one bot sends the decision once");
    let status = c.status();
    assert_eq!(
        shown(&status)[1],
        ("stopped".to_string(), "duplicateBot".to_string()),
        "a restart cannot fix a shared token: the profile stays stopped"
    );
    c.assert_no_token(&[]);
}

/// An adapter that says `channel.ready` and dies at once, every time (a crash right after
/// ready): the stand-in for a bug that only shows once the adapter runs.
fn crash_after_ready_adapter(dir: &Path) -> PathBuf {
    let path = dir.join("crash-after-ready.sh");
    let script = r#"#!/bin/sh
epoch=$(printf '%s' "$PI_WORKFLOWS_CHANNEL_LAUNCH" | sed 's/.*"adapterEpoch":\([0-9]*\).*/\1/')
printf '{"adapterEpoch":%s,"attemptId":null,"channelRevision":0,"kind":"channel.ready","payload":{"bot":{"id":1,"username":"crash_bot"}},"profile":"ops","protocol":"pi-workflows.channel.v1","sequence":1}\n' "$epoch" >&3
exit 1
"#;
    std::fs::write(&path, script).expect("write the adapter");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    path
}

#[test]
fn an_adapter_that_crashes_right_after_ready_backs_off_and_the_server_keeps_serving() {
    let programs = short_temp_dir("piwp");
    let c = with_adapter(&crash_after_ready_adapter(programs.path()));
    let run_id = c.start_approval();
    c.wait("the adapter to have been ready and died", || {
        c.status()["profiles"][0]["lastExit"] == "exited"
    });
    // Ready is not stability: the waits double (0.5, 1, 2, 4 s …) instead of restarting every
    // 0.5 s, which would exhaust the `channels` supervisor and then the root within seconds.
    std::thread::sleep(Duration::from_secs(8));
    // The epoch counts every launch durably (a restarted subtree would reset `launches`).
    let launches = c.status()["profiles"][0]["epoch"].as_i64().expect("epoch");
    assert!(
        (3..=6).contains(&launches),
        "a crash loop backs off: {launches} launches in about 8 s\n{}",
        c.env.diagnostics()
    );
    let tree = c.env.cli(&["server", "status", "--tree"]);
    c.env.expect_code(&tree, 0, "the server is up");
    let tree = String::from_utf8_lossy(&tree.stdout).into_owned();
    assert!(tree.contains("adapter-ops"), "the profile is still supervised: {tree}");
    assert_eq!(c.run_status(&run_id), "waiting", "the run is not affected");
    // Each crash may leave a send ambiguous: the channel's to recover, never the run's.
    let view = json_of(&c.env.cli(&["view", &run_id, "--once", "--json"]));
    assert_eq!(view["display"]["status"], "waiting", "{view}");
    let answered = c
        .env
        .cli(&["decision", "answer", &run_id, "approve", "--follow", "--json"]);
    c.env.expect_code(&answered, 0, "the decision is answered in the CLI");
    assert_eq!(json_of(&answered)["status"], "completed");
    c.assert_no_token(&[]);
}

#[test]
fn the_first_press_wins_over_a_second_person_and_over_the_deadline() {
    let c = with_channels();
    let run_id = c.env.start_fixture("channel-decision-deadline", None);
    let sent = c.first_message();
    assert_eq!(sent.button_labels, ["Go", "Hold"]);
    c.fake
        .push_callback(ALLOWED_USER, CHAT, sent.message_id, &sent.callback_data[0]);
    c.fake
        .push_callback(SECOND_USER, CHAT, sent.message_id, &sent.callback_data[1]);
    c.wait("the run to complete", || c.run_status(&run_id) == "completed");
    assert_eq!(
        c.env.node_output(&run_id, "ask"),
        json!({"choice": "go", "provenance": "human"})
    );
    assert!(c.fake.wait_for_callback_answers(2, WAIT), "both presses were answered");
    // Past the deadline (10 s): the default does not replace the answer.
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(c.env.count("SELECT count(*) FROM human_decision_resolutions"), 1);
    assert_eq!(c.env.text("SELECT provenance FROM human_decision_resolutions"), "human");
    assert_eq!(
        c.env.count(&format!(
            "SELECT count(*) FROM node_attempts WHERE run_id = '{run_id}' AND node_path = 'hold'"
        )),
        0
    );
    let closing: Vec<_> = c.fake.edits().into_iter().filter(|edit| !edit.has_keyboard).collect();
    assert_eq!(closing.len(), 1, "closed once: {closing:?}");
    assert!(
        closing[0].visible_text.contains("Decided: Go"),
        "{}",
        closing[0].visible_text
    );
    c.assert_no_token(&[]);
}

#[test]
fn the_deadline_default_wins_when_nobody_answers_and_the_message_says_so() {
    let c = with_channels();
    let run_id = c.env.start_fixture("decision-timeout", None);
    let sent = c.first_message();
    c.wait("the run to complete", || c.run_status(&run_id) == "completed");
    assert_eq!(
        c.env.node_output(&run_id, "hold"),
        json!({"held": true, "by": "timeout_policy"})
    );
    let closed = closing_edit(&c);
    assert_eq!(closed.message_id, sent.message_id);
    assert!(
        closed.visible_text.contains("No answer in time: Hold applied"),
        "{}",
        closed.visible_text
    );
    // A press after the deadline finds the decision closed and changes nothing.
    c.fake
        .push_callback(ALLOWED_USER, CHAT, sent.message_id, &sent.callback_data[0]);
    assert!(c.fake.wait_for_callback_answers(1, WAIT));
    assert_eq!(
        c.fake.callback_answers()[0].text.as_deref(),
        Some("This decision is closed")
    );
    assert_eq!(
        c.env.text("SELECT provenance FROM human_decision_resolutions"),
        "timeout_policy"
    );
    c.assert_no_token(&[]);
}

#[test]
fn recover_confirm_makes_the_buttons_of_the_confirmed_message_work_and_its_closing_edit_happen() {
    let c = with_channels();
    let run_id = start_with_an_ambiguous_send(&c);
    // The operator finds the message in the chat.
    let sent = c.fake.sent_messages()[0].clone();
    let message_id = c.status()["messages"][0]["channelMessageId"]
        .as_str()
        .expect("id")
        .to_string();
    let confirm = c.env.cli(&["channel", "recover", &message_id, "confirm"]);
    c.env.expect_code(&confirm, 0, "channel recover confirm");
    c.wait("the confirmed message presented", || {
        c.status()["messages"][0]["state"] == "presented"
    });
    // Its buttons work in the running adapter (no restart): the press answers the decision.
    let deadline = Instant::now() + WAIT;
    let mut presses = 0;
    loop {
        c.fake
            .push_callback(ALLOWED_USER, CHAT, sent.message_id, &sent.callback_data[2]);
        presses += 1;
        assert!(
            c.fake.wait_for_callback_answers(presses, WAIT),
            "every press is answered"
        );
        let answer = c.fake.callback_answers()[presses - 1].text.clone();
        if answer.as_deref() == Some("Received") {
            break;
        }
        // Only until the adapter was told to track it (a commit away).
        assert_eq!(answer.as_deref(), Some("This decision is closed"));
        assert!(Instant::now() < deadline, "the confirmed message never took a press");
        std::thread::sleep(Duration::from_millis(200));
    }
    c.wait("the run to complete", || c.run_status(&run_id) == "completed");
    assert_eq!(
        c.env.node_output(&run_id, "approve"),
        json!({"choice": "hold", "provenance": "human"})
    );
    // The press told the server which message it is: the closing edit names it.
    let closed = closing_edit(&c);
    assert_eq!(closed.message_id, sent.message_id);
    assert!(closed.visible_text.contains("Decided: Hold"), "{}", closed.visible_text);
    let sends = c
        .fake
        .requests()
        .iter()
        .filter(|method| *method == "sendMessage")
        .count();
    assert_eq!(sends, 1, "a confirmed send is never sent again");
    c.assert_no_token(&[&stderr_of(&confirm)]);
}
