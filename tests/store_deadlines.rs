//! Step deadlines in the store (docs/SESSIONS.md "Deadlines"): an agent step's budget is the
//! model time of its reported Pi turns in a connected session — delivery, waiting, pause, a
//! disconnected session, a clock jump and server downtime add nothing — and a checkpoint's or
//! decision's deadline is wall-clock. A step whose time is up is timed out once: its attempt
//! and request `timed_out`, its step messages cancelled, its run queued for the runner that
//! follows its `$result.outcome` route. Real SQLite files and a manual clock.

mod common;

use common::open_store;
use common::sessions::*;
use pi_workflows::store::deadlines::{self, OBSERVATION_STEP_MS_MAX};
use pi_workflows::store::effects;
use pi_workflows::store::interactions::{InteractionKind, Submission};
use pi_workflows::store::recovery;
use pi_workflows::store::turns::TurnOutcome;
use pi_workflows::store::{Store, StoreError, verify};

const BUDGET_MS: i64 = 10_000;

/// An interactive agent step with a `BUDGET_MS` model-time budget, its message sent and
/// turn `turn-1` open on it.
fn budgeted_step_in_turn(t: &common::TestStore) -> String {
    queue_interactive(&t.store, RUN, SESSION);
    let timing = Timing {
        timeout_ms: Some(BUDGET_MS),
        ..Timing::default()
    };
    request_timed(&t.store, RUN, REQUEST, InteractionKind::Agent, timing);
    let message = send_only_message(&t.store);
    start(&t.store, "turn-1", &message).expect("start");
    message
}

/// One observation of the deadline task, with the session connected or not.
fn observe(store: &Store, connected: bool) {
    let seen = store.read(deadlines::observation).expect("observation");
    store
        .write(move |tx| deadlines::observe(tx, &seen, |_| connected))
        .expect("observe");
}

fn used(store: &Store) -> i64 {
    store.read(|conn| deadlines::used_ms(conn, REQUEST)).expect("used")
}

fn expired(store: &Store) -> Vec<deadlines::Expired> {
    let now = store.now_ms();
    store
        .read(move |conn| deadlines::expired(conn, now, 10))
        .expect("expired")
}

fn time_out_due(store: &Store) -> Vec<String> {
    store.write(deadlines::time_out_due).expect("time out")
}

/// Observe every second for `ms`, the clock moving with it.
fn run_for(t: &common::TestStore, ms: i64, connected: bool) {
    for _ in 0..ms / 1000 {
        t.clock.advance_ms(1000);
        observe(&t.store, connected);
    }
}

#[test]
fn only_an_open_turn_in_a_connected_session_spends_model_time() {
    let t = open_store();
    budgeted_step_in_turn(&t);
    // The first observation opens the interval; time before it (delivery) does not count.
    t.clock.advance_ms(4000);
    observe(&t.store, true);
    assert_eq!(
        used(&t.store),
        0,
        "delivery and the wait before the turn are no model time"
    );
    run_for(&t, 3000, true);
    assert_eq!(used(&t.store), 3000);
    // Disconnected: the interval closes and the clock does not move.
    run_for(&t, 5000, false);
    assert_eq!(used(&t.store), 3000, "a disconnected session spends nothing");
    // Connected again with the turn still open (Pi re-reports the same start): a new interval.
    observe(&t.store, true);
    run_for(&t, 2000, true);
    assert_eq!(used(&t.store), 5000);
    let intervals: i64 = t
        .store
        .read(|conn| Ok(conn.query_row("SELECT count(*) FROM active_intervals", [], |row| row.get(0))?))
        .expect("intervals");
    assert_eq!(intervals, 2, "one interval per connected stretch");
    // The turn ends: nothing more is spent while the step waits for the next turn.
    end(&t.store, "turn-1", TurnOutcome::Completed).expect("end");
    run_for(&t, 20_000, true);
    assert_eq!(used(&t.store), 5000, "waiting between turns is no model time");
    assert!(expired(&t.store).is_empty());
}

/// Whether the deadline task must look again soon, with the session connected or not.
fn needs_observing(store: &Store, connected: bool) -> bool {
    let seen = store.read(deadlines::observation).expect("observation");
    seen.needs_observing(|session| connected && session == SESSION)
}

#[test]
fn a_turn_left_open_by_a_closed_pi_needs_no_looking_until_its_session_reconnects() {
    let t = open_store();
    budgeted_step_in_turn(&t);
    assert!(
        !needs_observing(&t.store, false),
        "an open step turn with no coordinator: observing would change nothing"
    );
    assert!(needs_observing(&t.store, true), "connected, its interval must open");
    observe(&t.store, true);
    assert!(
        needs_observing(&t.store, false),
        "an open interval must be grown or closed, connected or not"
    );
    // Pi closes mid-turn: the next observation closes the interval, then nothing is left
    // to do for as long as the session stays away.
    observe(&t.store, false);
    assert!(!needs_observing(&t.store, false));
    t.clock.advance_ms(3_600_000);
    assert!(!needs_observing(&t.store, false), "an hour later still nothing");
    assert_eq!(used(&t.store), 0, "and no model time was spent");
    assert!(needs_observing(&t.store, true), "until the session reconnects");
}

#[test]
fn a_clock_jump_and_server_downtime_add_nothing_beyond_one_bounded_step() {
    let t = open_store();
    budgeted_step_in_turn(&t);
    observe(&t.store, true);
    // A suspended server or a jump forward: one observation adds at most the bounded step.
    t.clock.advance_ms(60 * 60 * 1000);
    observe(&t.store, true);
    assert_eq!(used(&t.store), OBSERVATION_STEP_MS_MAX);
    // Startup closes what an older server left open: its downtime counts for nothing.
    let report = t
        .store
        .write(|tx| recovery::recover(tx, "server-2", &[]))
        .expect("recover");
    assert_eq!(report.closed_intervals, 1);
    assert_eq!(report.timed_out_steps, 0);
    t.clock.advance_ms(60_000);
    assert_eq!(used(&t.store), OBSERVATION_STEP_MS_MAX, "downtime is no model time");
}

#[test]
fn a_pause_stops_the_clock_and_a_paused_step_never_times_out() {
    let t = open_store();
    budgeted_step_in_turn(&t);
    observe(&t.store, true);
    run_for(&t, 9000, true);
    // Escape: the aborted end pauses the run.
    end(&t.store, "turn-1", TurnOutcome::Aborted).expect("end");
    run_for(&t, 30_000, true);
    assert_eq!(used(&t.store), 9000);
    assert!(time_out_due(&t.store).is_empty(), "a paused step is not timed out");
}

#[test]
fn a_spent_budget_times_the_step_out_once_for_its_outcome_route() {
    let t = open_store();
    budgeted_step_in_turn(&t);
    observe(&t.store, true);
    run_for(&t, BUDGET_MS - 1000, true);
    assert!(expired(&t.store).is_empty(), "one second is left");
    run_for(&t, 1000, true);
    assert_eq!(expired(&t.store).len(), 1);
    let revision_before = revision(&t.store);
    let (generation, _) = common::run_lease(&t.store, "run-1");
    assert_eq!(time_out_due(&t.store), vec![RUN.to_string()]);
    assert_eq!(revision(&t.store), revision_before + 1, "one transition");
    assert_eq!(
        common::run_lease(&t.store, "run-1"),
        (generation + 1, None),
        "made under a control claim of the next generation, released with it"
    );
    let row = |sql: &'static str| -> String { value(&t.store, sql) };
    assert_eq!(
        row("SELECT status FROM interactive_requests WHERE request_id = 'req-1'"),
        "timed_out"
    );
    assert_eq!(
        row("SELECT status FROM node_attempts WHERE attempt_id = 'a-req-1'"),
        "timed_out"
    );
    assert_eq!(row("SELECT status FROM runs WHERE run_id = 'run-1'"), "queued");
    assert_eq!(row("SELECT status FROM run_queue WHERE run_id = 'run-1'"), "queued");
    let error: String = value(
        &t.store,
        "SELECT CAST(b.content AS TEXT) FROM node_attempts a JOIN blobs b ON b.blob_hash = a.error_hash
         WHERE a.attempt_id = 'a-req-1'",
    );
    assert!(error.contains("\"timedOut\""), "{error}");
    assert!(
        messages_of(&t.store)
            .iter()
            .all(|(_, _, _, status)| status != "pending"),
        "nothing of the step is left to present"
    );
    assert_eq!(
        value::<String>(&t.store, "SELECT status FROM active_intervals"),
        "closed"
    );
    // Once: nothing is due any more, and a late submission is refused without a change.
    assert!(time_out_due(&t.store).is_empty());
    let late = t.store.write(|tx| {
        let payload_hash = pi_workflows::store::blobs::put_json(tx, &serde_json::json!({"n": 3}), 1024)?;
        let submission = Submission {
            run_id: RUN,
            request_id: REQUEST,
            submission_id: "sub-late",
            idempotency_key: "key-late",
            payload_hash: &payload_hash,
        };
        pi_workflows::store::interactions::submit(tx, &submission, None)
    });
    let Err(StoreError::InvalidInput { detail, .. }) = &late else {
        panic!("a late submission is refused: {late:?}");
    };
    assert!(
        detail.contains("timed out"),
        "it says what became of the step: {detail}"
    );
    assert_eq!(revision(&t.store), revision_before + 1);
    // The turn in Pi may still be running; its late end adopts the closed step.
    end(&t.store, "turn-1", TurnOutcome::Completed).expect("late end");
    assert_verified(&t.store);
}

#[test]
fn a_validating_submission_holds_the_timeout_back_until_its_verdict() {
    let t = open_store();
    budgeted_step_in_turn(&t);
    observe(&t.store, true);
    run_for(&t, BUDGET_MS - 1000, true);
    submit_candidate(&t.store);
    // The run is queued for the check: the clock stops and nothing times out.
    run_for(&t, 10_000, true);
    assert_eq!(used(&t.store), BUDGET_MS - 1000);
    assert!(time_out_due(&t.store).is_empty());
}

#[test]
fn a_checkpoint_deadline_is_wall_clock_and_keeps_an_idle_server_up_until_it_fires() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    let deadline_at = t.store.now_ms() + 60_000;
    let timing = Timing {
        deadline_at: Some(deadline_at),
        ..Timing::default()
    };
    request_timed(&t.store, RUN, REQUEST, InteractionKind::Checkpoint, timing);
    let unsettled = |store: &Store| store.read(verify::unsettled_work).expect("unsettled");
    assert_eq!(unsettled(&t.store), 1, "a wall-clock deadline is scheduled work");
    assert_eq!(
        next_due(&t.store),
        Some(deadline_at),
        "the deadline task sleeps until it"
    );
    // No turn, no session: the deadline passes anyway.
    t.clock.advance_ms(59_999);
    assert!(time_out_due(&t.store).is_empty());
    t.clock.advance_ms(1);
    let (generation, holder) = common::run_lease(&t.store, "run-1");
    assert_eq!(holder, None, "a waiting run has no holder");
    assert_eq!(time_out_due(&t.store), vec![RUN.to_string()]);
    assert_eq!(
        value::<String>(
            &t.store,
            "SELECT status FROM node_attempts WHERE attempt_id = 'a-req-1'"
        ),
        "timed_out"
    );
    assert_eq!(
        common::run_lease(&t.store, "run-1"),
        (generation + 1, None),
        "the deadline's control claim took the next generation and released it"
    );
    // Queued for its runner now (that is work too), but the wait itself is over.
    let waits: i64 = value(
        &t.store,
        "SELECT count(*) FROM interactive_requests WHERE status = 'pending'",
    );
    assert_eq!(waits, 0);
    assert_eq!(next_due(&t.store), None, "nothing is due once the step timed out");
}

fn next_due(store: &Store) -> Option<i64> {
    store.read(deadlines::next_due_ms).expect("next due")
}

#[test]
fn an_agent_budget_keeps_no_idle_server_alive_and_startup_times_out_a_spent_one() {
    let t = open_store();
    budgeted_step_in_turn(&t);
    let unsettled = |store: &Store| store.read(verify::unsettled_work).expect("unsettled");
    assert_eq!(
        unsettled(&t.store),
        0,
        "model time passes only with a connected session"
    );
    observe(&t.store, true);
    run_for(&t, BUDGET_MS, true);
    // The server died right after the observation that spent the budget.
    let report = t
        .store
        .write(|tx| recovery::recover(tx, "server-2", &[]))
        .expect("recover");
    assert_eq!(report.timed_out_steps, 1, "the timeout path runs first at startup");
    assert_eq!(
        value::<String>(&t.store, "SELECT status FROM runs WHERE run_id = 'run-1'"),
        "queued"
    );
}

/// A headless run holding a running attempt with a wall-clock deadline `ms` from now.
fn running_with_deadline(t: &common::TestStore, ms: i64, with_effect: bool) {
    t.store
        .write(|tx| pi_workflows::store::runs::queue_run(tx, &common::new_run(RUN)))
        .expect("queue");
    let authority = claim(&t.store, RUN);
    let deadline_at = t.store.now_ms() + ms;
    t.store
        .write(move |tx| {
            let attempt = pi_workflows::store::attempts::NewAttempt {
                attempt_id: "a-1".to_string(),
                node_id: "ask".to_string(),
                node_path: "ask".to_string(),
                visit: 1,
                node_type: "agent".to_string(),
                deadline_at: Some(deadline_at),
                timeout_ms: Some(ms),
                settings_change_number: None,
            };
            pi_workflows::store::attempts::start_attempt(tx, &authority, None, &attempt)?;
            if with_effect {
                let request = effects::EffectRequest {
                    effect_type: "ticket.create".to_string(),
                    idempotency_key: "key-1".to_string(),
                    request_fingerprint: "f".repeat(64),
                    recovery: effects::EffectRecovery::Manual,
                    attempt_id: Some("a-1".to_string()),
                    request_summary: None,
                };
                effects::reserve(tx, &authority, None, &request)?;
            }
            Ok(())
        })
        .expect("attempt");
}

#[test]
fn a_reclaimed_step_past_its_deadline_is_timed_out_not_rerun() {
    let t = open_store();
    assert_eq!(next_due(&t.store), None, "an empty store has no deadline");
    let started_at = t.store.now_ms();
    running_with_deadline(&t, 1000, false);
    assert_eq!(
        next_due(&t.store),
        Some(started_at + 1000 + deadlines::OVERDUE_GRACE_MS),
        "the server looks for an overdue runner when its grace is over"
    );
    // Within the grace its own runner may still end it: a reclaim now interrupts it.
    t.clock.advance_ms(1000 + deadlines::OVERDUE_GRACE_MS - 1);
    let now = t.store.now_ms();
    assert!(
        t.store
            .read(move |conn| deadlines::overdue_runs(conn, now, 10))
            .expect("overdue")
            .is_empty()
    );
    t.clock.advance_ms(1);
    let now = t.store.now_ms();
    assert_eq!(
        t.store
            .read(move |conn| deadlines::overdue_runs(conn, now, 10))
            .expect("overdue"),
        [RUN.to_string()]
    );
    // The server went away (or stopped the blocked runner): the reclaim times the step out.
    let report = t
        .store
        .write(|tx| recovery::recover(tx, "server-2", &[]))
        .expect("recover");
    assert_eq!(report.reclaimed_runs, 1);
    assert_eq!(report.requeued_runs, 1);
    assert_eq!(
        value::<String>(&t.store, "SELECT status FROM node_attempts WHERE attempt_id = 'a-1'"),
        "timed_out"
    );
    assert_eq!(
        value::<String>(&t.store, "SELECT status FROM runs WHERE run_id = 'run-1'"),
        "queued"
    );
}

#[test]
fn an_overdue_step_with_an_applying_effect_is_left_to_its_effect_contract() {
    let t = open_store();
    running_with_deadline(&t, 1000, true);
    t.clock.advance_ms(60_000);
    t.store
        .write(|tx| recovery::recover(tx, "server-2", &[]))
        .expect("recover");
    assert_eq!(
        value::<String>(&t.store, "SELECT status FROM node_attempts WHERE attempt_id = 'a-1'"),
        "interrupted",
        "the effect decides: not timed out"
    );
    assert_eq!(value::<String>(&t.store, "SELECT status FROM effects"), "ambiguous");
}
