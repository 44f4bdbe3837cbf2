//! Origin sessions in the store (docs/SESSIONS.md): the message window and eligibility,
//! branch reports, turn reports with the unproductive-turn rule, Escape and resume, terminal
//! messages and the retained terminal view. Real SQLite files; every refusal changes nothing.

mod common;

use common::sessions::*;
use common::{open_store, snapshot};
use pi_workflows::store::blobs::put_json;
use pi_workflows::store::interactions::{self, InteractionKind};
use pi_workflows::store::messages::{self, MessageKind, NewMessage};
use pi_workflows::store::runs::{self, NewRun, RunOrigin};
use pi_workflows::store::session_view::{self, TERMINAL_RETAINED_MS};
use pi_workflows::store::turns::{self, Ownership, TurnOutcome};
use pi_workflows::store::{Store, StoreError, StoreResult};

// Messages and the window ------------------------------------------------------------------

#[test]
fn one_pending_step_per_request_is_enforced_by_the_index() {
    let t = open_store();
    waiting_step(&t.store);
    let second = t.store.write(|tx| {
        let hash = put_json(tx, &serde_json::json!({"prompt": "again"}), 1024)?;
        messages::queue_message(
            tx,
            &NewMessage {
                run_id: RUN,
                target_session_id: SESSION,
                kind: MessageKind::Step,
                source_id: REQUEST,
                reason: Some("reminder"),
                content_hash: &hash,
            },
        )
    });
    assert!(
        matches!(&second, Err(StoreError::Sqlite(err)) if err.to_string().contains("UNIQUE")),
        "{second:?}"
    );
    assert_eq!(messages_of(&t.store).len(), 1);
}

#[test]
fn the_window_shows_pending_and_recovery_messages_with_their_content() {
    let t = open_store();
    waiting_step(&t.store);
    let facts = view(&t);
    assert_eq!(facts.active_run_id.as_deref(), Some(RUN));
    assert_eq!(facts.messages.len(), 1);
    let message = &facts.messages[0];
    assert_eq!(
        (message.kind.as_str(), message.reason.as_deref()),
        ("step", Some("initial"))
    );
    assert_eq!(message.content, serde_json::json!({"prompt": "count to three"}));
    assert_eq!(message.content_bytes, r#"{"prompt":"count to three"}"#.len());
    assert!(message.eligible);
    assert!(message.workflow_message_id.starts_with("msg-") && !message.workflow_message_id.contains(SESSION));

    // Sent, it stays in the window (the newest sent step of a pending request) but is not
    // sent again.
    branch(&t.store, false, &[(&message.workflow_message_id, "entry-1")]).expect("report");
    let facts = view(&t);
    assert_eq!(facts.messages[0].status, "sent");
    assert_eq!(facts.messages[0].pi_entry_id.as_deref(), Some("entry-1"));
    assert!(!facts.messages[0].eligible);
    assert_eq!(read(&t.store, OTHER_SESSION, t.store.now_ms()).messages, []);
    assert_verified(&t.store);
}

#[test]
fn the_window_is_bounded_by_count_and_by_content_bytes() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    let total = session_view::SESSION_WINDOW_MESSAGES_MAX + 6;
    t.store
        .write(move |tx| {
            for index in 0..total {
                let hash = put_json(tx, &serde_json::json!({"note": index}), 1024)?;
                notify(tx, &hash)?;
            }
            Ok(())
        })
        .expect("notifications");
    let facts = view(&t);
    assert_eq!(facts.messages.len(), session_view::SESSION_WINDOW_MESSAGES_MAX);
    assert_eq!(facts.message_count, total as i64);
    assert!(facts.truncated);

    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    let big = "x".repeat(200 * 1024);
    t.store
        .write(move |tx| {
            for index in 0..3 {
                let hash = put_json(tx, &serde_json::json!({"note": index, "text": big}), 256 * 1024)?;
                notify(tx, &hash)?;
            }
            Ok(())
        })
        .expect("notifications");
    let facts = view(&t);
    assert_eq!(facts.messages.len(), 2, "three would pass 512 KiB");
    assert!(
        facts.messages.iter().map(|m| m.content_bytes).sum::<usize>() <= session_view::SESSION_WINDOW_CONTENT_BYTES_MAX
    );
    assert_eq!((facts.message_count, facts.truncated), (3, true));
}

fn notify(tx: &pi_workflows::store::WriteTx<'_>, hash: &str) -> StoreResult<String> {
    messages::queue_message(
        tx,
        &NewMessage {
            run_id: RUN,
            target_session_id: SESSION,
            kind: MessageKind::Notification,
            source_id: "notify-node",
            reason: None,
            content_hash: hash,
        },
    )
}

#[test]
fn an_earlier_ineligible_or_cancelled_message_does_not_block_a_later_one() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    for id in ["follow-up-a", "follow-up-b"] {
        t.store
            .write(move |tx| {
                let hash = put_json(tx, &serde_json::json!({"prompt": id}), 1024)?;
                messages::queue_follow_up(tx, RUN, id, &hash).map(|_| ())
            })
            .expect("follow-up");
    }
    t.store
        .write(|tx| messages::remove_follow_up(tx, RUN, "follow-up-a"))
        .expect("remove");
    request(&t.store, RUN, REQUEST, InteractionKind::Agent);
    let facts = view(&t);
    let shown: Vec<(&str, bool)> = facts.messages.iter().map(|m| (m.kind.as_str(), m.eligible)).collect();
    // The cancelled follow-up is gone; the other waits for the run's end; the step after
    // them is the one to send.
    assert_eq!(shown, [("followUp", false), ("step", true)]);

    // While a turn is open nothing is eligible.
    let step = facts.messages[1].workflow_message_id.clone();
    branch(&t.store, false, &[(&step, "entry-1")]).expect("sent");
    start(&t.store, "turn-1", &step).expect("start");
    assert!(view(&t).messages.iter().all(|m| !m.eligible));
}

// Branch reports ---------------------------------------------------------------------------

#[test]
fn branch_evidence_marks_a_cancelled_message_sent() {
    let t = open_store();
    waiting_step(&t.store);
    let message = only_message(&t.store);
    // Sent by the coordinator, then the run was paused before the entry was reported.
    t.store.write(|tx| runs::pause_unclaimed(tx, RUN, None)).expect("pause");
    assert_eq!(messages_of(&t.store)[0].3, "cancelled");
    let outcome = branch(&t.store, true, &[(&message, "entry-1")]).expect("report");
    assert_eq!(outcome.sent, std::slice::from_ref(&message));
    assert_eq!(
        outcome.created,
        Vec::<String>::new(),
        "a paused step is not presented again"
    );
    assert_eq!(messages_of(&t.store)[0].3, "sent");
    // A repeat marks nothing new.
    assert_eq!(
        branch(&t.store, true, &[(&message, "entry-1")]).expect("again").sent,
        Vec::<String>::new()
    );
    assert_verified(&t.store);
}

#[test]
fn a_branch_report_naming_a_message_outside_the_window_changes_nothing() {
    let t = open_store();
    waiting_step(&t.store);
    queue_interactive(&t.store, "run-2", OTHER_SESSION);
    request(&t.store, "run-2", "req-2", InteractionKind::Agent);
    let mine = only_message(&t.store);
    let theirs = read(&t.store, OTHER_SESSION, t.store.now_ms()).messages[0]
        .workflow_message_id
        .clone();
    let before = snapshot(&t.store);
    for found in [
        vec![(mine.as_str(), "entry-1"), ("msg-unknown", "entry-2")],
        vec![(theirs.as_str(), "entry-3")],
        vec![(mine.as_str(), "entry-1"), (mine.as_str(), "entry-1")],
        vec![(mine.as_str(), "")],
    ] {
        let refused = branch(&t.store, true, &found);
        assert!(matches!(refused, Err(StoreError::InvalidInput { .. })), "{refused:?}");
        assert_eq!(refused.unwrap_err().refusal_code(), Some("invalidInput"));
        assert_eq!(snapshot(&t.store), before, "a refused report changes nothing");
    }
}

#[test]
fn a_source_absent_from_the_branch_is_presented_again_at_most_once() {
    let t = open_store();
    waiting_step(&t.store);
    let initial = only_message(&t.store);
    branch(&t.store, false, &[(&initial, "entry-1")]).expect("sent");
    // A busy Pi proves nothing about absence.
    assert_eq!(
        branch(&t.store, false, &[]).expect("busy").created,
        Vec::<String>::new()
    );
    let first = branch(&t.store, true, &[]).expect("idle, absent");
    assert_eq!(first.created.len(), 1);
    let again = branch(&t.store, true, &[]).expect("repeat");
    assert_eq!(again.created, Vec::<String>::new(), "the new message is pending");
    let all = messages_of(&t.store);
    assert_eq!(all[1].1, "step");
    assert_eq!(all[1].2.as_deref(), Some("resumed"));

    // Once sent on the new branch, that branch shows it: nothing more.
    branch(&t.store, true, &[(&first.created[0], "entry-2")]).expect("sent");
    assert_eq!(
        branch(&t.store, true, &[(&first.created[0], "entry-2")])
            .expect("same")
            .created
            .len(),
        0
    );
    // Back on the first branch, which still carries the source's older message: nothing.
    assert_eq!(
        branch(&t.store, true, &[(&initial, "entry-1")])
            .expect("back")
            .created
            .len(),
        0
    );
    assert_eq!(messages_of(&t.store).len(), 2);
    assert_verified(&t.store);
}

#[test]
fn an_absent_decision_is_presented_again_as_a_decision() {
    let t = open_store();
    waiting_at(&t.store, InteractionKind::Decision);
    let decision = send_only_message(&t.store);
    assert!(
        view(&t).messages.iter().any(|m| m.workflow_message_id == decision),
        "shown until answered"
    );
    let outcome = branch(&t.store, true, &[]).expect("absent");
    assert_eq!(outcome.created.len(), 1);
    let all = messages_of(&t.store);
    assert_eq!((all[1].1.as_str(), all[1].2.as_deref()), ("decision", None));
}

#[test]
fn an_idle_branch_report_closes_the_open_turn_lost_by_the_unproductive_rule() {
    let t = open_store();
    let message = step_in_turn(&t);
    let on_branch = [(message.as_str(), "entry-1")];
    // Busy: the same turn goes on.
    assert_eq!(branch(&t.store, false, &on_branch).expect("busy").lost_turns, 0);
    let outcome = branch(&t.store, true, &on_branch).expect("idle");
    assert_eq!(
        outcome.created,
        Vec::<String>::new(),
        "the step still shows on the branch"
    );
    assert_eq!(outcome.lost_turns, 1);
    assert_eq!(unproductive(&t.store), 1);
    let all = messages_of(&t.store);
    assert_eq!(all.len(), 2, "one reminder, nothing else: {all:?}");
    assert_eq!((all[1].2.as_deref(), all[1].3.as_str()), (Some("reminder"), "pending"));
    assert_eq!(view(&t).open_turn, None);
    // A late end of that turn adopts the cleanup.
    let late = end(&t.store, "turn-1", TurnOutcome::Completed).expect("late end");
    assert_eq!(late.ownership, Ownership::Settled);
    assert_eq!(late.turn.expect("saved").status, "lost");
    assert_eq!(unproductive(&t.store), 1, "counted once");
    assert_verified(&t.store);
}

// Turn reports -----------------------------------------------------------------------------

#[test]
fn a_turn_starts_only_on_an_open_message_and_a_repeat_adopts_it() {
    let t = open_store();
    waiting_step(&t.store);
    let message = only_message(&t.store);
    let before = snapshot(&t.store);
    let pending = start(&t.store, "turn-1", &message).expect("pending message");
    assert_eq!((pending.ownership, pending.turn), (Ownership::Absent, None));
    assert_eq!(
        start(&t.store, "turn-1", "msg-unknown").expect("unknown").ownership,
        Ownership::Absent
    );
    assert_eq!(snapshot(&t.store), before, "an absent start changes nothing");

    branch(&t.store, false, &[(&message, "entry-1")]).expect("sent");
    let active = start(&t.store, "turn-1", &message).expect("start");
    assert_eq!(active.ownership, Ownership::Active);
    let turn = active.turn.expect("saved turn");
    assert_eq!((turn.status.as_str(), turn.run_id.as_str()), ("open", RUN));
    assert_eq!(view(&t).open_turn.as_ref(), Some(&turn));
    let shown = t
        .store
        .read(|conn| turns::open_turn_of_run(conn, RUN))
        .expect("open turn");
    assert_eq!(shown, Some(("turn-1".to_string(), turn.started_at)));

    let repeat = start(&t.store, "turn-1", &message).expect("repeat");
    assert_eq!(
        (repeat.ownership, repeat.turn.as_ref()),
        (Ownership::Active, Some(&turn))
    );

    let before = snapshot(&t.store);
    let conflict = start(&t.store, "turn-1", "msg-other");
    assert!(matches!(conflict, Err(StoreError::TurnConflict)), "{conflict:?}");
    assert_eq!(conflict.unwrap_err().refusal_code(), Some("turnConflict"));
    assert_eq!(snapshot(&t.store), before);
    assert_verified(&t.store);
}

#[test]
fn decisions_and_notifications_never_open_a_turn() {
    let t = open_store();
    waiting_at(&t.store, InteractionKind::Decision);
    let decision = only_message(&t.store);
    let notification = t
        .store
        .write(|tx| {
            let hash = put_json(tx, &serde_json::json!({"note": "hi"}), 1024)?;
            notify(tx, &hash)
        })
        .expect("notify");
    branch(&t.store, false, &[(&decision, "entry-1"), (&notification, "entry-2")]).expect("sent");
    for message in [&decision, &notification] {
        assert_eq!(
            start(&t.store, "turn-1", message).expect("start").ownership,
            Ownership::Absent
        );
    }
    assert_eq!(view(&t).open_turn, None);
}

#[test]
fn a_new_start_closes_the_older_open_turn_and_a_stale_report_never_clears_it() {
    let t = open_store();
    let message = step_in_turn(&t);
    let newer = start(&t.store, "turn-2", &message).expect("newer start");
    assert_eq!(newer.ownership, Ownership::Active);
    assert_eq!(unproductive(&t.store), 1, "the older turn was lost unproductively");

    // The older turn's late end adopts its loss; the newer turn stays open.
    let stale = end(&t.store, "turn-1", TurnOutcome::Completed).expect("stale end");
    assert_eq!(
        (stale.ownership, stale.turn.expect("turn").status.as_str()),
        (Ownership::Settled, "lost")
    );
    assert_eq!(view(&t).open_turn.expect("open").turn_id, "turn-2");
    let unknown = end(&t.store, "turn-9", TurnOutcome::Completed).expect("unknown");
    assert_eq!((unknown.ownership, unknown.turn), (Ownership::Absent, None));
    assert_eq!(view(&t).open_turn.expect("still open").turn_id, "turn-2");
    // A repeated start of the lost turn does not reopen it either.
    let restarted = start(&t.store, "turn-1", &message).expect("repeat of lost start");
    assert_eq!(restarted.ownership, Ownership::Settled);
    assert_eq!(view(&t).open_turn.expect("still open").turn_id, "turn-2");
    assert_verified(&t.store);
}

#[test]
fn a_turn_end_settles_the_exact_turn_and_a_repeat_adopts_it() {
    let t = open_store();
    step_in_turn(&t);
    let ended = end(&t.store, "turn-1", TurnOutcome::Error).expect("end");
    assert_eq!(ended.ownership, Ownership::Settled);
    let turn = ended.turn.expect("turn");
    assert_eq!(
        (turn.status.as_str(), turn.outcome.as_deref()),
        ("ended", Some("error"))
    );
    let before = snapshot(&t.store);
    let repeat = end(&t.store, "turn-1", TurnOutcome::Error).expect("repeat");
    assert_eq!((repeat.ownership, repeat.turn), (Ownership::Settled, Some(turn)));
    assert_eq!(snapshot(&t.store), before, "a repeat changes nothing");
    let conflict = end(&t.store, "turn-1", TurnOutcome::Completed);
    assert!(matches!(conflict, Err(StoreError::TurnConflict)), "{conflict:?}");
    assert_eq!(snapshot(&t.store), before);
}

#[test]
fn three_unproductive_turn_ends_fail_the_step_for_its_outcome_route() {
    let t = open_store();
    step_in_turn(&t);
    end(&t.store, "turn-1", TurnOutcome::Completed).expect("end 1");
    assert_eq!(unproductive(&t.store), 1);
    assert_eq!(messages_of(&t.store)[1].2.as_deref(), Some("reminder"));

    send_and_start(&t, "turn-2");
    end(&t.store, "turn-2", TurnOutcome::Error).expect("end 2");
    assert_eq!(unproductive(&t.store), 2);
    let reminders = messages_of(&t.store)
        .iter()
        .filter(|m| m.2.as_deref() == Some("reminder"))
        .count();
    assert_eq!(reminders, 2);

    send_and_start(&t, "turn-3");
    let revision_before = revision(&t.store);
    end(&t.store, "turn-3", TurnOutcome::Completed).expect("end 3");
    assert_eq!(unproductive(&t.store), 3);
    assert_eq!(
        revision(&t.store),
        revision_before + 1,
        "one event for the whole report"
    );
    let run: (String, String) = t
        .store
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT r.status, q.status FROM runs r JOIN run_queue q ON q.run_id = r.run_id",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?)
        })
        .expect("run");
    assert_eq!(
        run,
        ("queued".to_string(), "queued".to_string()),
        "queued to continue by its route"
    );
    let attempt: String = value(&t.store, "SELECT status FROM node_attempts");
    assert_eq!(attempt, "failed");
    let request: String = value(&t.store, "SELECT status FROM interactive_requests");
    assert_eq!(request, "cancelled");
    // The next runner replays the failed attempt with its error and routes on it.
    let state = t
        .store
        .read(|conn| pi_workflows::store::run_state::read_run_state(conn, RUN))
        .expect("run state");
    assert_eq!(state["attempts"][0]["error"]["code"], "missingSubmission");
    assert!(
        messages_of(&t.store).iter().all(|m| m.3 != "pending"),
        "no step left to send"
    );
    assert_verified(&t.store);
}

#[test]
fn a_checkpoint_turn_without_an_answer_never_counts_as_unproductive() {
    let t = open_store();
    waiting_at(&t.store, InteractionKind::Checkpoint);
    let message = send_only_message(&t.store);
    for turn in ["turn-1", "turn-2", "turn-3", "turn-4"] {
        if start(&t.store, turn, &message).expect("start").ownership == Ownership::Active {
            end(&t.store, turn, TurnOutcome::Completed).expect("end");
        }
    }
    assert_eq!(
        unproductive(&t.store),
        0,
        "a checkpoint waits for an answer, not for output"
    );
    assert_eq!(
        value::<String>(
            &t.store,
            "SELECT status FROM interactive_requests WHERE request_id = 'req-1'"
        ),
        "pending"
    );
    assert_verified(&t.store);
}

#[test]
fn a_submission_keeps_a_turn_end_from_counting() {
    let t = open_store();
    step_in_turn(&t);
    submit_candidate(&t.store);
    end(&t.store, "turn-1", TurnOutcome::Completed).expect("end");
    assert_eq!(unproductive(&t.store), 0);
    assert_eq!(messages_of(&t.store).len(), 1, "no reminder");
}

#[test]
fn escape_pauses_the_run_without_counting_and_resume_presents_one_resumed_step() {
    let t = open_store();
    let message = step_in_turn(&t);
    end(&t.store, "turn-1", TurnOutcome::Completed).expect("unproductive end");
    send_and_start(&t, "turn-2");
    // A third message is pending (a reminder would be, after turn-2): make one pending step
    // exist so the pause has something to cancel.
    t.store
        .write(|tx| {
            let hash = put_json(tx, &serde_json::json!({"prompt": "count to three"}), 1024)?;
            messages::queue_message(
                tx,
                &NewMessage {
                    run_id: RUN,
                    target_session_id: SESSION,
                    kind: MessageKind::Step,
                    source_id: REQUEST,
                    reason: Some("reminder"),
                    content_hash: &hash,
                },
            )
        })
        .expect("pending step");

    let aborted = end(&t.store, "turn-2", TurnOutcome::Aborted).expect("escape");
    assert_eq!(aborted.turn.expect("turn").outcome.as_deref(), Some("aborted"));
    assert_eq!(unproductive(&t.store), 1, "Escape does not count");
    let paused: bool = value(&t.store, "SELECT paused FROM runs");
    let request: String = value(&t.store, "SELECT status FROM interactive_requests");
    assert!(paused);
    assert_eq!(request, "pending", "the request stays pending; its pause is the run's");
    assert_eq!(messages_of(&t.store).last().expect("last").3, "cancelled");
    assert!(view(&t).messages.iter().all(|m| !m.eligible));
    assert_eq!(
        start(&t.store, "turn-3", &message).expect("paused").ownership,
        Ownership::Absent
    );

    let revision_before: i64 = value(&t.store, "SELECT revision FROM interactive_requests");
    t.store.write(|tx| runs::resume_run(tx, RUN, None)).expect("resume");
    let revision_after: i64 = value(&t.store, "SELECT revision FROM interactive_requests");
    assert_eq!(revision_after, revision_before + 1);
    let pending: Vec<_> = messages_of(&t.store).into_iter().filter(|m| m.3 == "pending").collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].2.as_deref(), Some("resumed"));
    assert!(
        view(&t)
            .messages
            .iter()
            .any(|m| m.eligible && m.reason.as_deref() == Some("resumed"))
    );
    // A branch report finds it absent but pending: nothing more.
    assert_eq!(branch(&t.store, true, &[]).expect("report").created.len(), 0);
    assert_verified(&t.store);
}

#[test]
fn pausing_and_resuming_a_protected_decision_changes_neither_its_revision_nor_its_messages() {
    let t = open_store();
    waiting_at(&t.store, InteractionKind::Decision);
    let before = messages_of(&t.store);
    t.store.write(|tx| runs::pause_unclaimed(tx, RUN, None)).expect("pause");
    t.store.write(|tx| runs::resume_run(tx, RUN, None)).expect("resume");
    let revision: i64 = value(&t.store, "SELECT revision FROM interactive_requests");
    assert_eq!(revision, 1);
    assert_eq!(
        messages_of(&t.store),
        before,
        "the pending decision message stays as it was"
    );
}

#[test]
fn an_aborted_step_being_validated_waits_for_the_verdict() {
    let t = open_store();
    step_in_turn(&t);
    submit_candidate(&t.store);
    let validator = claim(&t.store, RUN);
    let before = snapshot(&t.store);
    let held = end(&t.store, "turn-1", TurnOutcome::Aborted);
    assert!(matches!(held, Err(StoreError::ClaimHeld { .. })), "{held:?}");
    assert_eq!(
        held.unwrap_err().refusal_code(),
        None,
        "transient: retried, never stored"
    );
    assert_eq!(snapshot(&t.store), before);
    drop(validator);
}

#[test]
fn a_turn_fact_while_a_runner_holds_the_claim_does_not_fence_it() {
    let t = open_store();
    step_in_turn(&t);
    submit_candidate(&t.store);
    let validator = claim(&t.store, RUN);
    let presentation = |store: &Store| {
        store
            .read(|conn| pi_workflows::store::run_view::presentation_revision(conn, RUN))
            .expect("presentation")
            .expect("run")
    };
    let (revision_before, shown_before) = (revision(&t.store), presentation(&t.store));
    end(&t.store, "turn-1", TurnOutcome::Completed).expect("end");
    assert_eq!(
        revision(&t.store),
        revision_before,
        "the runner's expected revision still holds"
    );
    assert!(presentation(&t.store) > shown_before, "views still see the turn end");
    let expected = Some(revision_before);
    t.store
        .write(move |tx| {
            let output = put_json(tx, &serde_json::json!({"n": 3}), 1024)?;
            let judged = interactions::Judged {
                request_id: REQUEST,
                submission_id: "sub-1",
                receipt_hash: &output,
            };
            interactions::accept(tx, &validator, expected, &judged)
        })
        .expect("the runner's verdict commits");
    assert_verified(&t.store);
}

#[test]
fn every_session_change_of_an_unclaimed_run_advances_its_revision_with_one_event() {
    let t = open_store();
    waiting_step(&t.store);
    let message = only_message(&t.store);
    let events = |store: &Store| -> Vec<String> {
        store
            .read(|conn| {
                Ok(conn
                    .prepare("SELECT event_type FROM events WHERE run_id = ?1 ORDER BY resource_revision")?
                    .query_map([RUN], |row| row.get(0))?
                    .collect::<Result<Vec<_>, _>>()?)
            })
            .expect("events")
    };
    let base = events(&t.store).len();
    branch(&t.store, false, &[(&message, "entry-1")]).expect("sent");
    start(&t.store, "turn-1", &message).expect("start");
    end(&t.store, "turn-1", TurnOutcome::Completed).expect("end");
    assert_eq!(events(&t.store)[base..], ["message.sent", "turn.started", "turn.ended"]);
    assert_eq!(revision(&t.store) as usize, events(&t.store).len());
    // A repeat changes nothing, so no event.
    end(&t.store, "turn-1", TurnOutcome::Completed).expect("repeat");
    assert_eq!(events(&t.store).len(), base + 3);
    assert_verified(&t.store);
}

// Terminal messages and the retained view --------------------------------------------------

#[test]
fn a_run_end_loses_its_turns_cancels_its_messages_and_queues_one_terminal_message() {
    let t = open_store();
    let message = step_in_turn(&t);
    t.store
        .write(|tx| runs::cancel_unclaimed(tx, RUN, None))
        .expect("cancel");
    let all = messages_of(&t.store);
    assert_eq!(all.len(), 2);
    assert_eq!((all[1].1.as_str(), all[1].3.as_str()), ("terminal", "pending"));
    let facts = view(&t);
    assert_eq!(facts.open_turn, None, "the run's turn is lost");
    assert_eq!(facts.active_run_id, None);
    assert_eq!(facts.retained_terminal_run_id.as_deref(), Some(RUN));
    let terminal = facts
        .messages
        .iter()
        .find(|m| m.kind == "terminal")
        .expect("terminal in window");
    assert_eq!(
        terminal.content,
        serde_json::json!({"outcome": "cancelled", "runId": RUN, "workflowName": "example"})
    );
    assert!(terminal.eligible);
    // The late end adopts the cleanup; no new step turn can start.
    assert_eq!(
        end(&t.store, "turn-1", TurnOutcome::Completed).expect("late").ownership,
        Ownership::Settled
    );
    assert_eq!(
        start(&t.store, "turn-2", &message).expect("start").ownership,
        Ownership::Absent
    );
    assert_verified(&t.store);
}

#[test]
fn only_the_final_leaf_of_a_continuation_chain_gets_a_terminal_message() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    t.store
        .write(|tx| runs::cancel_unclaimed(tx, RUN, None))
        .expect("parent settles");
    let continuation = NewRun {
        parent_run_id: Some(RUN.to_string()),
        root_run_id: Some(RUN.to_string()),
        origin: RunOrigin::Continuation {
            parent_attempt_id: "a-checkpoint".to_string(),
        },
        ..interactive_run("run-2", SESSION)
    };
    t.store
        .write(move |tx| runs::queue_run(tx, &continuation))
        .expect("continuation");
    assert_eq!(
        messages_of(&t.store)[0].3,
        "cancelled",
        "the parent was settled by its continuation"
    );
    t.store
        .write(|tx| runs::cancel_unclaimed(tx, "run-2", None))
        .expect("leaf ends");
    let terminals: Vec<_> = messages_of(&t.store)
        .into_iter()
        .filter(|m| m.1 == "terminal" && m.3 == "pending")
        .collect();
    assert_eq!(terminals.len(), 1);
    assert_eq!(view(&t).retained_terminal_run_id.as_deref(), Some("run-2"));
    assert_verified(&t.store);
}

/// `RUN` of `SESSION` completed (claimed, then completed by its runner).
fn completed_run(store: &Store) {
    queue_interactive(store, RUN, SESSION);
    let authority = claim(store, RUN);
    store
        .write(move |tx| runs::complete_run(tx, &authority, None, None))
        .expect("complete");
}

#[test]
fn a_terminal_run_is_retained_until_a_minute_after_its_first_turn_ended() {
    let t = open_store();
    completed_run(&t.store);
    let terminal = only_message(&t.store);
    t.clock.advance_ms(10 * TERMINAL_RETAINED_MS);
    assert_eq!(
        view(&t).retained_terminal_run_id.as_deref(),
        Some(RUN),
        "pending: retained"
    );

    branch(&t.store, false, &[(&terminal, "entry-1")]).expect("sent");
    assert_eq!(
        start(&t.store, "turn-1", &terminal).expect("start").ownership,
        Ownership::Active
    );
    t.clock.advance_ms(10 * TERMINAL_RETAINED_MS);
    assert_eq!(
        view(&t).retained_terminal_run_id.as_deref(),
        Some(RUN),
        "first turn open: retained"
    );

    end(&t.store, "turn-1", TurnOutcome::Completed).expect("end");
    // The terminal message closed with its first turn: no second turn on it.
    assert_eq!(
        start(&t.store, "turn-2", &terminal).expect("again").ownership,
        Ownership::Absent
    );
    t.clock.advance_ms(TERMINAL_RETAINED_MS - 1);
    assert_eq!(
        view(&t).retained_terminal_run_id.as_deref(),
        Some(RUN),
        "within the minute"
    );
    t.clock.advance_ms(1);
    assert_eq!(view(&t).retained_terminal_run_id, None, "a minute after the turn ended");
    assert!(
        view(&t).messages.is_empty(),
        "the closed terminal message left the window"
    );
}

#[test]
fn a_cancelled_run_s_terminal_message_is_passive_and_retained_a_minute_after_it_was_sent() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    t.store
        .write(|tx| runs::cancel_unclaimed(tx, RUN, None))
        .expect("cancel");
    let terminal = only_message(&t.store);
    branch(&t.store, false, &[(&terminal, "entry-1")]).expect("sent");
    // A person cancelled it: no model turn is about it.
    assert_eq!(
        start(&t.store, "turn-1", &terminal).expect("start").ownership,
        Ownership::Absent
    );
    assert_eq!(view(&t).open_turn, None);
    t.clock.advance_ms(TERMINAL_RETAINED_MS - 1);
    assert_eq!(view(&t).retained_terminal_run_id.as_deref(), Some(RUN));
    t.clock.advance_ms(1);
    assert_eq!(view(&t).retained_terminal_run_id, None, "a minute after it was sent");
}

#[test]
fn the_startup_scan_makes_a_missing_terminal_message_once() {
    let t = open_store();
    completed_run(&t.store);
    // A terminal message that never got made (an older build, failed presentation data).
    t.store
        .write(|tx| {
            tx.conn()
                .execute("DELETE FROM workflow_messages WHERE kind = 'terminal'", [])?;
            Ok(())
        })
        .expect("remove");
    let scan = |store: &Store| {
        store
            .write(pi_workflows::store::messages::queue_missing_terminals)
            .expect("scan")
    };
    assert_eq!(scan(&t.store), 1);
    let all = messages_of(&t.store);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!((all[0].1.as_str(), all[0].3.as_str()), ("terminal", "pending"));
    assert_eq!(scan(&t.store), 0, "a repeat makes none");
    // A sent or cancelled one is not missing either, and a headless run has no session.
    let sent = only_message(&t.store);
    branch(&t.store, false, &[(&sent, "entry-1")]).expect("sent");
    assert_eq!(scan(&t.store), 0);
    assert_verified(&t.store);
}

/// Queue follow-up `id` of `RUN`.
fn follow_up(store: &Store, id: &'static str) {
    store
        .write(move |tx| {
            let hash = put_json(tx, &serde_json::json!({"prompt": id}), 1024)?;
            messages::queue_follow_up(tx, RUN, id, &hash).map(|_| ())
        })
        .expect("follow-up");
}

/// (kind, eligible) of the window's pending messages, in order.
fn pending_eligibility(t: &common::TestStore) -> Vec<(String, bool)> {
    view(t)
        .messages
        .iter()
        .filter(|m| m.status == "pending")
        .map(|m| (m.kind.clone(), m.eligible))
        .collect()
}

#[test]
fn follow_ups_wait_for_completion_and_the_terminal_turn_then_go_one_turn_at_a_time_in_order() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    follow_up(&t.store, "follow-up-a");
    follow_up(&t.store, "follow-up-b");
    let waiting = pending_eligibility(&t);
    assert!(
        waiting.iter().all(|(_, eligible)| !eligible),
        "the run still holds the session: {waiting:?}"
    );
    let authority = claim(&t.store, RUN);
    t.store
        .write(move |tx| runs::complete_run(tx, &authority, None, None))
        .expect("complete");
    // The terminal message first; the follow-ups only once its turn is over.
    assert_eq!(
        pending_eligibility(&t),
        [
            ("followUp".to_string(), false),
            ("followUp".to_string(), false),
            ("terminal".to_string(), true)
        ]
    );
    send_and_start(&t, "turn-t");
    assert!(
        pending_eligibility(&t).iter().all(|(_, eligible)| !eligible),
        "a turn is open"
    );
    end(&t.store, "turn-t", TurnOutcome::Completed).expect("end");
    assert_eq!(
        pending_eligibility(&t),
        [("followUp".to_string(), true), ("followUp".to_string(), true)]
    );
    // One at a time: while the first follow-up's turn is open, the second waits.
    let first = messages_of(&t.store)
        .into_iter()
        .find(|(_, kind, _, status)| kind == "followUp" && status == "pending")
        .expect("first follow-up")
        .0;
    branch(&t.store, false, &[(&first, "entry-f1")]).expect("sent");
    assert_eq!(
        start(&t.store, "turn-f1", &first).expect("start").ownership,
        Ownership::Active
    );
    assert_eq!(pending_eligibility(&t), [("followUp".to_string(), false)]);
    end(&t.store, "turn-f1", TurnOutcome::Completed).expect("end");
    assert_eq!(pending_eligibility(&t), [("followUp".to_string(), true)]);
    // A follow-up's turn is not the workflow's activity: the completed run never shows running.
    assert_eq!(view(&t).active_run_id, None);
    assert_verified(&t.store);
}

#[test]
fn at_most_32_follow_ups_wait_and_a_refused_one_changes_nothing() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    for n in 0..messages::FOLLOW_UPS_PENDING_MAX {
        t.store
            .write(move |tx| {
                let hash = put_json(tx, &serde_json::json!({"prompt": n}), 1024)?;
                messages::queue_follow_up(tx, RUN, &format!("follow-up-{n}"), &hash).map(|_| ())
            })
            .expect("follow-up");
    }
    let before = common::snapshot(&t.store);
    let refused = t.store.write(|tx| {
        let hash = put_json(tx, &serde_json::json!({"prompt": "one more"}), 1024)?;
        messages::queue_follow_up(tx, RUN, "follow-up-extra", &hash).map(|_| ())
    });
    assert!(matches!(refused, Err(StoreError::InvalidInput { .. })), "{refused:?}");
    assert_eq!(common::snapshot(&t.store), before);
}

#[test]
fn a_failed_run_cancels_its_follow_ups_and_its_terminal_message_still_comes() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    follow_up(&t.store, "follow-up-a");
    let authority = claim(&t.store, RUN);
    t.store
        .write(move |tx| runs::fail_run(tx, &authority, None, runs::FailureClass::NodeFailed, None))
        .expect("fail");
    let all = messages_of(&t.store);
    let states: Vec<(&str, &str)> = all.iter().map(|m| (m.1.as_str(), m.3.as_str())).collect();
    assert_eq!(states, [("followUp", "cancelled"), ("terminal", "pending")]);
}

#[test]
fn a_newer_run_or_clear_terminal_removes_the_retained_run() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    t.store.write(|tx| runs::cancel_unclaimed(tx, RUN, None)).expect("end");
    let revision_before = revision(&t.store);
    let digest_before = view(&t).digest;
    assert!(
        t.store
            .write(|tx| messages::clear_terminal(tx, SESSION))
            .expect("clear")
    );
    let facts = view(&t);
    assert_eq!(facts.retained_terminal_run_id, None);
    assert_ne!(facts.digest, digest_before, "the view changed");
    assert_eq!(revision(&t.store), revision_before, "no workflow state changed");
    assert!(
        !t.store
            .write(|tx| messages::clear_terminal(tx, SESSION))
            .expect("again")
    );
    assert!(
        !t.store
            .write(|tx| messages::clear_terminal(tx, OTHER_SESSION))
            .expect("nothing there")
    );

    // A terminal run that a newer run follows is not retained either.
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    t.store.write(|tx| runs::cancel_unclaimed(tx, RUN, None)).expect("end");
    t.clock.advance_ms(1);
    queue_interactive(&t.store, "run-2", SESSION);
    t.store
        .write(|tx| runs::cancel_unclaimed(tx, "run-2", None))
        .expect("end 2");
    assert_eq!(view(&t).retained_terminal_run_id.as_deref(), Some("run-2"));
    assert_verified(&t.store);
}

#[test]
fn the_digest_is_stable_for_the_same_facts() {
    let t = open_store();
    waiting_step(&t.store);
    assert_eq!(view(&t).digest, view(&t).digest);
    let before = view(&t).digest;
    send_only_message(&t.store);
    assert_ne!(view(&t).digest, before);
}

/// A live view's revision moves with every reported step update, by the request's newest
/// update number: a new key and a newer value of a known key both move it.
#[test]
fn step_updates_move_the_presentation_revision_by_the_newest_update() {
    let t = open_store();
    waiting_step(&t.store);
    let presentation = |store: &Store| {
        store
            .read(|conn| pi_workflows::store::run_view::presentation_revision(conn, RUN))
            .expect("presentation")
            .expect("run")
    };
    let update = |store: &Store, key: &'static str| {
        store
            .write(move |tx| interactions::record_update(tx, RUN, REQUEST, "progress", key, &"0".repeat(64)))
            .expect("update")
    };
    let before = presentation(&t.store);
    let first = update(&t.store, "files");
    assert_eq!(presentation(&t.store), before + first);
    let second = update(&t.store, "tests");
    let third = update(&t.store, "files");
    assert!(
        first < second && second < third,
        "update numbers grow: {first}, {second}, {third}"
    );
    assert_eq!(
        presentation(&t.store),
        before + third,
        "the newest update of the request counts, once"
    );
}
