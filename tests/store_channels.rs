//! Channel delivery of protected decisions in the store (docs/CHANNELS.md): every send, prompt
//! and closing edit is a managed effect attempt recorded before it is made and settled only by
//! the adapter epoch it was given to; an interrupted attempt becomes ambiguous and waits for an
//! operator's `recover`; a person's press settles the decision through the one answer path.
//! Real SQLite files and a manual clock.

mod common;

use common::open_store;
use common::sessions::*;
use pi_workflows::store::channels::{
    self, AdapterFence, Answered, AttemptOutcome, ChannelAnswer, ChannelError, ChannelOperation, ChannelRecovery,
    Present, SettleClaim,
};
use pi_workflows::store::interactions::InteractionKind;
use pi_workflows::store::{StoreError, StoreResult};

const PROFILE: &str = "ops";
const CHAT: i64 = 70_001;

fn audiences() -> Vec<String> {
    vec!["operator".to_string()]
}

/// A run waiting at a protected decision of audience `operator`, and a launched adapter.
fn presented_setup(t: &common::TestStore) -> AdapterFence {
    queue_interactive(&t.store, RUN, SESSION);
    let timing = Timing {
        deadline_at: Some(t.store.now_ms() + 60_000),
        ..Timing::default()
    };
    request_timed(&t.store, RUN, REQUEST, InteractionKind::Decision, timing);
    launch(t)
}

fn launch(t: &common::TestStore) -> AdapterFence {
    t.store.write(|tx| channels::launch(tx, PROFILE)).expect("launch")
}

fn plan(t: &common::TestStore, fence: &AdapterFence) -> usize {
    let fence = fence.clone();
    t.store
        .write(move |tx| channels::plan(tx, &fence, &audiences(), &[CHAT]))
        .expect("plan")
}

fn next(t: &common::TestStore, fence: &AdapterFence) -> Option<Present> {
    let fence = fence.clone();
    t.store
        .write(move |tx| channels::next_present(tx, &fence))
        .expect("next present")
}

/// The adapter's settle of `present`, as its frame claims it.
fn settle(t: &common::TestStore, fence: &AdapterFence, present: &Present, outcome: AttemptOutcome) -> StoreResult<()> {
    settle_claiming(t, fence, present, present.channel_revision, outcome)
}

/// A settle of `present` whose frame carries `channel_revision`.
fn settle_claiming(
    t: &common::TestStore,
    fence: &AdapterFence,
    present: &Present,
    channel_revision: i64,
    outcome: AttemptOutcome,
) -> StoreResult<()> {
    let (fence, present) = (fence.clone(), present.clone());
    t.store.write(move |tx| {
        let claim = SettleClaim {
            channel_revision,
            ..present.claim()
        };
        channels::settle(tx, &fence, &claim, &outcome)
    })
}

fn press(
    t: &common::TestStore,
    fence: &AdapterFence,
    message: &str,
    choice: &str,
    text: Option<&str>,
    wants_text: bool,
    update: i64,
) -> StoreResult<Answered> {
    let (fence, message, choice, text) = (
        fence.clone(),
        message.to_string(),
        choice.to_string(),
        text.map(str::to_string),
    );
    t.store.write(move |tx| {
        channels::answer(
            tx,
            &fence,
            &ChannelAnswer {
                channel_message_id: &message,
                choice: &choice,
                text: text.as_deref(),
                wants_text,
                update_id: update,
                channel_revision: 1,
                telegram_message_id: None,
            },
        )
    })
}

fn applied(message_id: i64) -> AttemptOutcome {
    AttemptOutcome::Applied {
        chat_id: CHAT,
        message_id,
    }
}

fn effect_statuses(t: &common::TestStore) -> Vec<String> {
    t.store
        .read(|conn| {
            let mut statement = conn
                .prepare("SELECT effect_type || ' ' || status FROM effects WHERE owner = 'channel' ORDER BY rowid")?;
            let rows = statement.query_map([], |row| row.get(0))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .expect("effects")
}

/// Sent and presented: returns the channel message ID.
fn sent(t: &common::TestStore, fence: &AdapterFence) -> String {
    assert_eq!(plan(t, fence), 1);
    let send = next(t, fence).expect("a send is due");
    assert_eq!(send.operation, ChannelOperation::Send);
    settle(t, fence, &send, applied(42)).expect("settle");
    send.channel_message_id
}

#[test]
fn a_send_is_recorded_applying_before_it_is_made_and_one_is_in_flight_at_a_time() {
    let t = open_store();
    let fence = presented_setup(&t);
    assert_eq!(plan(&t, &fence), 1);
    assert_eq!(plan(&t, &fence), 0, "planned once");
    let send = next(&t, &fence).expect("send");
    assert_eq!(send.chat_id, CHAT);
    assert_eq!(send.request.title, "Ship it?");
    assert_eq!(effect_statuses(&t), ["channel.telegram.send applying"]);
    assert!(next(&t, &fence).is_none(), "nothing else while the send is in flight");
    settle(&t, &fence, &send, applied(42)).expect("settle");
    assert_eq!(effect_statuses(&t), ["channel.telegram.send applied"]);
    let state: String = value(&t.store, "SELECT state FROM channel_messages");
    assert_eq!(state, "presented");
    assert!(next(&t, &fence).is_none(), "an open decision needs nothing more");
    assert_verified(&t.store);
}

#[test]
fn a_press_settles_the_decision_and_the_message_is_closed_by_a_recorded_edit() {
    let t = open_store();
    let fence = presented_setup(&t);
    let message = sent(&t, &fence);
    let answered = press(&t, &fence, &message, "ship", None, false, 900).expect("press");
    assert!(
        matches!(answered, Answered::Settled(ref resolved) if resolved.choice == "ship"),
        "{answered:?}"
    );
    let second = press(&t, &fence, &message, "fix", Some("no"), false, 901);
    assert!(
        matches!(second, Err(StoreError::Decision(_))),
        "the first valid answer won: {second:?}"
    );
    let close = next(&t, &fence).expect("the closing edit");
    assert_eq!(close.operation, ChannelOperation::Close);
    assert_eq!(close.telegram_message_id, Some(42));
    assert_eq!(
        channels::closed_text(&close.request, close.resolution.as_ref().expect("resolution")),
        "Decided: Ship"
    );
    settle(&t, &fence, &close, applied(42)).expect("settle close");
    let state: String = value(&t.store, "SELECT state FROM channel_messages");
    assert_eq!(state, "closed");
    assert_eq!(
        effect_statuses(&t),
        ["channel.telegram.send applied", "channel.telegram.close applied"]
    );
}

#[test]
fn a_text_choice_asks_for_its_text_once_per_press_and_the_reply_answers() {
    let t = open_store();
    let fence = presented_setup(&t);
    let message = sent(&t, &fence);
    assert_eq!(
        press(&t, &fence, &message, "fix", None, true, 900).expect("press"),
        Answered::Prompted
    );
    assert_eq!(
        press(&t, &fence, &message, "fix", None, true, 900).expect("repeat"),
        Answered::Repeated,
        "the same update delivered again asks nothing more"
    );
    let refused = press(&t, &fence, &message, "ship", None, true, 901);
    assert!(refused.is_err(), "ship takes no text: {refused:?}");
    let prompt = next(&t, &fence).expect("the prompt");
    assert_eq!(
        (
            prompt.operation,
            prompt.for_choice_id.as_deref(),
            prompt.telegram_message_id
        ),
        (ChannelOperation::Prompt, Some("fix"), Some(42))
    );
    settle(&t, &fence, &prompt, applied(43)).expect("settle prompt");
    let answered = press(&t, &fence, &message, "fix", Some("rename it"), false, 902).expect("reply");
    assert!(matches!(answered, Answered::Settled(_)), "{answered:?}");
}

#[test]
fn a_stale_adapter_epoch_or_attempt_cannot_settle_newer_work() {
    let t = open_store();
    let old = presented_setup(&t);
    plan(&t, &old);
    let send = next(&t, &old).expect("send");
    // The adapter is relaunched: its in-flight send may have reached Telegram.
    let new = launch(&t);
    assert_eq!(new.epoch, old.epoch + 1);
    assert_eq!(effect_statuses(&t), ["channel.telegram.send ambiguous"]);
    let stale = settle(&t, &old, &send, applied(42));
    assert!(
        matches!(stale, Err(StoreError::Channel(ChannelError::StaleAdapter { .. }))),
        "{stale:?}"
    );
    let forged = settle(&t, &new, &send, applied(42));
    assert!(
        matches!(forged, Err(StoreError::Channel(ChannelError::StaleAttempt { .. }))),
        "{forged:?}"
    );
    assert!(
        next(&t, &new).is_none(),
        "an ambiguous send is never sent again by itself"
    );
    assert_eq!(effect_statuses(&t), ["channel.telegram.send ambiguous"]);
}

#[test]
fn recover_confirm_records_the_send_and_retry_makes_a_new_numbered_attempt() {
    let t = open_store();
    let fence = presented_setup(&t);
    plan(&t, &fence);
    let send = next(&t, &fence).expect("send");
    let fence = launch(&t);
    let retried = t
        .store
        .write(move |tx| channels::recover(tx, &send.channel_message_id, ChannelRecovery::Retry))
        .expect("retry");
    assert_eq!(retried, "channel.telegram.send");
    let again = next(&t, &fence).expect("a new attempt");
    assert!(again.attempt_id.ends_with(".send.2"), "{}", again.attempt_id);
    // Interrupted again; this time the operator finds the message in Telegram.
    let fence = launch(&t);
    let id = again.channel_message_id.clone();
    t.store
        .write(move |tx| channels::recover(tx, &id, ChannelRecovery::Confirm))
        .expect("confirm");
    let state: String = value(&t.store, "SELECT state FROM channel_messages");
    assert_eq!(state, "presented");
    let nothing = t
        .store
        .write(move |tx| channels::recover(tx, &again.channel_message_id, ChannelRecovery::Confirm));
    assert!(
        matches!(nothing, Err(StoreError::Channel(ChannelError::NothingToRecover { .. }))),
        "{nothing:?}"
    );
    assert!(next(&t, &fence).is_none());
}

#[test]
fn a_rate_limited_send_is_tried_again_and_a_refused_one_fails_without_blocking_the_decision() {
    let t = open_store();
    let fence = presented_setup(&t);
    plan(&t, &fence);
    let send = next(&t, &fence).expect("send");
    settle(&t, &fence, &send, AttemptOutcome::Rejected { retryable: true }).expect("rate limited");
    let again = next(&t, &fence).expect("again");
    assert!(again.attempt_id.ends_with(".send.2"));
    settle(&t, &fence, &again, AttemptOutcome::Rejected { retryable: false }).expect("forbidden");
    let state: String = value(&t.store, "SELECT state FROM channel_messages");
    assert_eq!(state, "failed");
    let run: String = value(&t.store, "SELECT status FROM runs");
    assert_eq!(run, "waiting", "the decision stays answerable in Pi and the CLI");
    assert!(next(&t, &fence).is_none());
}

#[test]
fn startup_recovery_makes_an_in_flight_attempt_ambiguous_and_the_run_never_sees_it() {
    let t = open_store();
    let fence = presented_setup(&t);
    plan(&t, &fence);
    next(&t, &fence).expect("send");
    let report = t
        .store
        .write(|tx| pi_workflows::store::recovery::recover(tx, "server-2", &[]))
        .expect("recover");
    assert_eq!(report.ambiguous_channel_attempts, 1);
    let ambiguous = t
        .store
        .read(|conn| pi_workflows::store::effects::ambiguous_count(conn, RUN))
        .expect("count");
    assert_eq!(ambiguous, 0, "a channel's ambiguity does not gate its run");
    let unsettled = t
        .store
        .read(pi_workflows::store::verify::unsettled_work)
        .expect("unsettled");
    assert!(unsettled > 0, "a pending channel decision keeps the server up");
}

#[test]
fn a_settle_with_a_stale_channel_revision_settles_nothing() {
    let t = open_store();
    let fence = presented_setup(&t);
    let message = sent(&t, &fence);
    press(&t, &fence, &message, "ship", None, false, 900).expect("press");
    let close = next(&t, &fence).expect("the closing edit");
    assert_eq!(close.channel_revision, 2);
    // A frame that expects the send's revision (1) cannot settle the closing edit (2), nor
    // can one from the future.
    for stale in [1, 3] {
        let refused = settle_claiming(&t, &fence, &close, stale, applied(42));
        assert!(
            matches!(refused, Err(StoreError::Channel(ChannelError::StaleRevision { revision, .. })) if revision == stale),
            "{refused:?}"
        );
    }
    assert_eq!(
        effect_statuses(&t),
        ["channel.telegram.send applied", "channel.telegram.close applying"],
        "nothing was settled"
    );
    let state: String = value(&t.store, "SELECT state FROM channel_messages");
    assert_eq!(state, "presented");
    let attempts = t.store.read(|conn| {
        Ok(conn.query_row(
            "SELECT count(*) FROM effect_attempts WHERE outcome IS NULL",
            [],
            |row| row.get::<_, i64>(0),
        )?)
    });
    assert_eq!(attempts.expect("attempts"), 1, "the closing attempt is still applying");
    // The adapter's own settle still works.
    settle(&t, &fence, &close, applied(42)).expect("the closing edit's own settle");
    let state: String = value(&t.store, "SELECT state FROM channel_messages");
    assert_eq!(state, "closed");
}

#[test]
fn an_answer_with_a_stale_channel_revision_changes_nothing() {
    let t = open_store();
    let fence = presented_setup(&t);
    let message = sent(&t, &fence);
    let (fence2, message2) = (fence.clone(), message.clone());
    let stale = t.store.write(move |tx| {
        channels::answer(
            tx,
            &fence2,
            &ChannelAnswer {
                channel_message_id: &message2,
                choice: "ship",
                text: None,
                wants_text: false,
                update_id: 900,
                channel_revision: 0,
                telegram_message_id: None,
            },
        )
    });
    assert!(
        matches!(stale, Err(StoreError::Channel(ChannelError::StaleRevision { .. }))),
        "{stale:?}"
    );
    assert_eq!(
        t.store
            .read(|conn| Ok(
                conn.query_row("SELECT count(*) FROM human_decision_resolutions", [], |row| row
                    .get::<_, i64>(0))?
            ))
            .expect("count"),
        0
    );
    press(&t, &fence, &message, "ship", None, false, 901).expect("the current revision answers");
}

#[test]
fn a_confirmed_send_learns_its_telegram_message_from_the_first_press() {
    let t = open_store();
    let fence = presented_setup(&t);
    plan(&t, &fence);
    let send = next(&t, &fence).expect("send");
    let fence = launch(&t);
    let id = send.channel_message_id.clone();
    t.store
        .write(move |tx| channels::recover(tx, &id, ChannelRecovery::Confirm))
        .expect("confirm");
    // The adapter is told to track it, without a Telegram message.
    let open = t
        .store
        .read(|conn| channels::open_messages(conn, PROFILE, &[]))
        .expect("open");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].telegram_message_id, None);
    let tracked = vec![send.channel_message_id.clone()];
    let none = t
        .store
        .read(move |conn| channels::open_messages(conn, PROFILE, &tracked))
        .expect("open");
    assert!(none.is_empty(), "a tracked message is not tracked again");
    // The first press tells which message it is; the closing edit can then name it.
    let (fence2, message) = (fence.clone(), send.channel_message_id.clone());
    let answered = t
        .store
        .write(move |tx| {
            channels::answer(
                tx,
                &fence2,
                &ChannelAnswer {
                    channel_message_id: &message,
                    choice: "ship",
                    text: None,
                    wants_text: false,
                    update_id: 900,
                    channel_revision: 1,
                    telegram_message_id: Some(77),
                },
            )
        })
        .expect("press");
    assert!(matches!(answered, Answered::Settled(_)), "{answered:?}");
    let close = next(&t, &fence).expect("the closing edit");
    assert_eq!(close.telegram_message_id, Some(77));
}
