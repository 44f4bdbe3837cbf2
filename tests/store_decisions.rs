//! Protected human decisions in the store (docs/STATE.md "Human decisions"): the server
//! verifies a person's answer against the declared choices and settles the decision with
//! exactly one winner — a person, the timeout default, an explicit cancel, or an expiry with no
//! default. A refused answer changes nothing. Real SQLite files and a manual clock.

mod common;

use common::sessions::*;
use common::{open_store, snapshot};
use pi_workflows::decision::{
    Block, CODE_TEXT_CHARS_MAX, DecisionError, DecisionRequest, PRESENTATION_BYTES_MAX, Response,
};
use pi_workflows::store::claims::{self, ClaimAuthority, OwnerType, ResourceType};
use pi_workflows::store::decisions::{self, HumanAnswer, NewDecision, Resolved};
use pi_workflows::store::interactions::{InteractionKind, Submission};
use pi_workflows::store::runs::FailureClass;
use pi_workflows::store::{StoreError, StoreResult, attempts, deadlines, interactions, run_waits, runs};

const DEADLINE_MS: i64 = 60_000;

fn answer(t: &common::TestStore, choice: &str, text: Option<&str>) -> StoreResult<Resolved> {
    answer_with(t, choice, text, None)
}

fn answer_with(t: &common::TestStore, choice: &str, text: Option<&str>, digest: Option<&str>) -> StoreResult<Resolved> {
    let response = Response {
        choice: choice.to_string(),
        text: text.map(str::to_string),
    };
    let digest = digest.map(str::to_string);
    t.store.write(move |tx| {
        decisions::answer(
            tx,
            &HumanAnswer {
                run_id: RUN,
                decision_id: None,
                request_digest: digest.as_deref(),
                response: &response,
                expected: None,
            },
        )
    })
}

/// An interactive run waiting at a protected decision, with a deadline and maybe a default.
fn waiting_decision(t: &common::TestStore, default_choice: Option<&'static str>) {
    queue_interactive(&t.store, RUN, SESSION);
    let timing = Timing {
        deadline_at: Some(t.store.now_ms() + DEADLINE_MS),
        default_choice,
        ..Timing::default()
    };
    request_timed(&t.store, RUN, REQUEST, InteractionKind::Decision, timing);
}

fn resolution(t: &common::TestStore) -> (String, String) {
    let rows: Vec<(String, String)> = t
        .store
        .read(|conn| {
            let mut statement = conn.prepare("SELECT outcome, provenance FROM human_decision_resolutions")?;
            let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .expect("resolutions");
    assert_eq!(rows.len(), 1, "exactly one resolution: {rows:?}");
    rows.into_iter().next().expect("one")
}

fn attempt_output(t: &common::TestStore) -> serde_json::Value {
    let hash: String = value(
        &t.store,
        "SELECT output_hash FROM node_attempts WHERE attempt_id = 'a-req-1' AND status = 'completed'",
    );
    t.store
        .read(move |conn| pi_workflows::store::blobs::read_json(conn, &hash))
        .expect("read")
        .expect("stored output")
}

fn run_status(t: &common::TestStore) -> String {
    value(&t.store, "SELECT status FROM runs WHERE run_id = 'run-1'")
}

fn decision_error(result: StoreResult<Resolved>) -> DecisionError {
    match result {
        Err(StoreError::Decision(err)) => err,
        other => panic!("expected a decision refusal, got {other:?}"),
    }
}

#[test]
fn a_person_answer_settles_the_decision_completes_the_step_and_queues_the_run() {
    let t = open_store();
    waiting_decision(&t, None);
    let message = only_message(&t.store);
    let resolved = answer(&t, "ship", None).expect("answer");
    assert_eq!(
        (resolved.choice.as_str(), resolved.provenance.as_str()),
        ("ship", "human")
    );
    assert_eq!(resolution(&t), ("accepted".to_string(), "human".to_string()));
    assert_eq!(
        attempt_output(&t),
        serde_json::json!({"choice": "ship", "provenance": "human"})
    );
    assert_eq!(run_status(&t), "queued", "its runner replays the step and routes on it");
    let request: String = value(&t.store, "SELECT status FROM interactive_requests");
    assert_eq!(request, "settled");
    let state: String = value(&t.store, "SELECT status FROM workflow_messages");
    assert_eq!(
        state, "cancelled",
        "the pending decision message {message} is withdrawn"
    );
    assert_verified(&t.store);
}

#[test]
fn a_choice_with_text_input_takes_its_text_within_the_limit() {
    let t = open_store();
    waiting_decision(&t, None);
    let before = snapshot(&t.store);
    for (choice, text, code) in [
        ("fix", None, "invalidAnswer"),
        ("fix", Some("  "), "invalidAnswer"),
        ("fix", Some(&"x".repeat(41)[..]), "invalidAnswer"),
        ("ship", Some("why not"), "invalidAnswer"),
        ("maybe", None, "invalidAnswer"),
    ] {
        let err = decision_error(answer(&t, choice, text));
        assert_eq!(err.code(), code, "{choice} {text:?}: {err}");
    }
    let unknown = decision_error(answer(&t, "maybe", None));
    assert!(unknown.to_string().contains("ship, fix"), "{unknown}");
    assert_eq!(snapshot(&t.store), before, "a refused answer changes nothing");
    answer(&t, "fix", Some("rename the flag")).expect("answer with text");
    assert_eq!(
        attempt_output(&t),
        serde_json::json!({"choice": "fix", "text": "rename the flag", "provenance": "human"})
    );
}

#[test]
fn the_first_valid_answer_wins_over_a_second_person_and_over_the_timeout() {
    let t = open_store();
    waiting_decision(&t, Some("ship"));
    answer(&t, "fix", Some("tests first")).expect("first answer");
    let after_first = snapshot(&t.store);
    let second = decision_error(answer(&t, "ship", None));
    assert_eq!(
        second,
        DecisionError::Settled {
            provenance: "human".to_string()
        }
    );
    t.clock.advance_ms(DEADLINE_MS + 1);
    let timed_out = t.store.write(deadlines::time_out_due).expect("deadline pass");
    assert!(timed_out.is_empty(), "the settled decision has no deadline left");
    assert_eq!(
        snapshot(&t.store),
        after_first,
        "neither the second answer nor the deadline changed anything"
    );
    assert_eq!(resolution(&t).1, "human");
}

#[test]
fn the_timeout_default_wins_when_nobody_answers_and_a_later_answer_loses() {
    let t = open_store();
    waiting_decision(&t, Some("ship"));
    t.clock.advance_ms(DEADLINE_MS);
    // The deadline task has not run yet: the person is already too late.
    let before = snapshot(&t.store);
    let late = decision_error(answer(&t, "fix", Some("wait")));
    assert_eq!(late, DecisionError::DeadlinePassed);
    assert_eq!(snapshot(&t.store), before);
    let queued = t.store.write(deadlines::time_out_due).expect("deadline pass");
    assert_eq!(queued, vec![RUN.to_string()]);
    assert_eq!(resolution(&t), ("accepted".to_string(), "timeout_policy".to_string()));
    assert_eq!(
        attempt_output(&t),
        serde_json::json!({"choice": "ship", "provenance": "timeout_policy"})
    );
    assert_eq!(run_status(&t), "queued");
    let again = decision_error(answer(&t, "fix", Some("wait")));
    assert_eq!(
        again,
        DecisionError::Settled {
            provenance: "timeout_policy".to_string()
        }
    );
    assert_verified(&t.store);
}

#[test]
fn a_deadline_with_no_default_times_the_step_out_as_expired_no_default() {
    let t = open_store();
    waiting_decision(&t, None);
    t.clock.advance_ms(DEADLINE_MS);
    assert_eq!(
        t.store.write(deadlines::time_out_due).expect("pass"),
        vec![RUN.to_string()]
    );
    assert_eq!(
        resolution(&t),
        ("cancelled".to_string(), "expired_no_default".to_string())
    );
    let attempt: String = value(
        &t.store,
        "SELECT status FROM node_attempts WHERE attempt_id = 'a-req-1'",
    );
    assert_eq!(
        attempt, "timed_out",
        "its runner follows the timed_out route or ends the run"
    );
    assert_verified(&t.store);
}

#[test]
fn an_answer_to_a_changed_presentation_is_refused() {
    let t = open_store();
    waiting_decision(&t, None);
    let digest: String = value(&t.store, "SELECT request_digest FROM human_decisions");
    let stale = "0".repeat(64);
    let before = snapshot(&t.store);
    assert_eq!(
        decision_error(answer_with(&t, "ship", None, Some(&stale))),
        DecisionError::Changed
    );
    assert_eq!(snapshot(&t.store), before);
    answer_with(&t, "ship", None, Some(&digest)).expect("the current digest is answered");
}

#[test]
fn a_paused_run_takes_no_answer_and_keeps_its_deadline_until_resumed() {
    let t = open_store();
    waiting_decision(&t, Some("ship"));
    t.store.write(|tx| runs::pause_unclaimed(tx, RUN, None)).expect("pause");
    let paused = answer(&t, "fix", Some("x"));
    assert!(
        matches!(paused, Err(StoreError::InvalidTransition { paused: true, .. })),
        "{paused:?}"
    );
    t.clock.advance_ms(DEADLINE_MS + 5);
    assert!(
        t.store.write(deadlines::time_out_due).expect("pass").is_empty(),
        "a paused run waits"
    );
    let next_due = |t: &common::TestStore| t.store.read(deadlines::next_due_ms).expect("next due");
    assert_eq!(next_due(&t), None, "a paused run's deadline wakes nobody");
    t.store.write(|tx| runs::resume_run(tx, RUN, None)).expect("resume");
    assert!(
        next_due(&t).is_some_and(|due| due <= t.store.now_ms()),
        "resumed, it is due at once"
    );
    let revision: i64 = value(&t.store, "SELECT revision FROM interactive_requests");
    assert_eq!(revision, 1, "resume keeps the answer revision");
    assert_eq!(
        t.store.write(deadlines::time_out_due).expect("pass"),
        vec![RUN.to_string()]
    );
    assert_eq!(
        resolution(&t).1,
        "timeout_policy",
        "after the deadline the default wins, not a person"
    );
}

#[test]
fn cancelling_the_run_settles_its_decision_as_an_explicit_cancel() {
    let t = open_store();
    waiting_decision(&t, Some("ship"));
    t.store
        .write(|tx| runs::cancel_unclaimed(tx, RUN, None))
        .expect("cancel");
    assert_eq!(resolution(&t), ("cancelled".to_string(), "explicit_cancel".to_string()));
    let late = decision_error(answer(&t, "ship", None));
    assert_eq!(
        late,
        DecisionError::Settled {
            provenance: "explicit_cancel".to_string()
        }
    );
    assert_verified(&t.store);
}

#[test]
fn no_submission_path_answers_a_protected_decision() {
    let t = open_store();
    waiting_decision(&t, None);
    let before = snapshot(&t.store);
    let submitted = t.store.write(|tx| {
        let payload_hash = pi_workflows::store::blobs::put_json(tx, &serde_json::json!("ship"), 1024)?;
        let submission = Submission {
            run_id: RUN,
            request_id: REQUEST,
            submission_id: "sub-1",
            idempotency_key: "key-1",
            payload_hash: &payload_hash,
        };
        interactions::submit(tx, &submission, None)
    });
    let Err(StoreError::InvalidInput { detail, .. }) = submitted else {
        panic!("the model's submission path refuses a decision: {submitted:?}");
    };
    assert!(detail.contains("only a person answers it"), "{detail}");
    assert_eq!(snapshot(&t.store), before);
}

/// Start the decision's attempt under `authority` and request it with `decision`, in one write.
fn request_decision(
    t: &common::TestStore,
    authority: ClaimAuthority,
    decision: Option<NewDecision>,
) -> StoreResult<i64> {
    let contract = contract_of(InteractionKind::Decision, Timing::default());
    t.store.write(move |tx| {
        let attempt = attempts::NewAttempt {
            attempt_id: "a-req-1".to_string(),
            node_id: "ask".to_string(),
            node_path: "ask".to_string(),
            visit: 1,
            node_type: "humanDecision".to_string(),
            deadline_at: None,
            timeout_ms: None,
            settings_change_number: None,
        };
        attempts::start_attempt(tx, &authority, None, &attempt)?;
        let interaction = interactions::NewInteraction {
            request_id: REQUEST.to_string(),
            attempt_id: "a-req-1".to_string(),
            kind: InteractionKind::Decision,
            contract_hash: pi_workflows::store::blobs::put_json(tx, &contract, 16 * 1024)?,
            deadline_at: None,
            decision,
        };
        interactions::request(tx, &authority, None, &interaction)
    })
}

/// The valid request of `contract_of` with a presentation above `PRESENTATION_BYTES_MAX`
/// (every block within its own limit, so only the whole-presentation bound refuses it).
fn oversized_decision() -> NewDecision {
    let contract = contract_of(InteractionKind::Decision, Timing::default());
    let mut request = DecisionRequest::from_contract(&contract).expect("a valid request");
    let block = Block::Code {
        text: "y".repeat(CODE_TEXT_CHARS_MAX),
        language: None,
    };
    let blocks = PRESENTATION_BYTES_MAX / CODE_TEXT_CHARS_MAX + 1;
    request.presentation.blocks = vec![block; blocks];
    NewDecision {
        request,
        subject: serde_json::json!({"commit": "abc123"}),
    }
}

#[test]
fn an_oversized_decision_presentation_is_refused_and_nothing_is_written() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    let authority = claim(&t.store, RUN);
    let before = snapshot(&t.store);
    let refused = request_decision(&t, authority, Some(oversized_decision()));
    let Err(StoreError::Decision(err)) = refused else {
        panic!("an oversized presentation is refused: {refused:?}");
    };
    assert_eq!(err.code(), "invalidDecision");
    assert!(err.to_string().contains("bytes"), "{err}");
    assert_eq!(snapshot(&t.store), before, "nothing of the refused request was written");
    assert_eq!(run_status(&t), "running", "the run keeps running");
}

#[test]
fn a_decision_request_without_its_decision_is_refused_and_nothing_is_written() {
    let t = open_store();
    queue_interactive(&t.store, RUN, SESSION);
    let authority = claim(&t.store, RUN);
    let mut contract = contract_of(InteractionKind::Decision, Timing::default());
    contract["decision"]["presentation"]["summary"] = serde_json::json!("s".repeat(5000));
    let parsed = DecisionRequest::from_contract(&contract);
    assert_eq!(parsed.map_err(|err| err.code()).err(), Some("invalidDecision"));
    let before = snapshot(&t.store);
    let missing = request_decision(&t, authority, None);
    assert!(matches!(missing, Err(StoreError::InvalidInput { .. })), "{missing:?}");
    assert_eq!(snapshot(&t.store), before, "nothing of the refused request was written");
    assert_eq!(run_status(&t), "running");
}

#[test]
fn a_run_that_ends_another_way_settles_its_pending_decision_as_run_ended_once() {
    let t = open_store();
    waiting_decision(&t, Some("ship"));
    // No ordinary transition lets a runner hold a run whose decision is pending; put it there
    // (queued without an answer, then started) to prove the ending still settles the decision.
    t.store
        .write(|tx| run_waits::continue_waiting(tx, RUN, None, |_| Ok(())))
        .expect("queue without an answer");
    let authority = claim(&t.store, RUN);
    t.store
        .write(move |tx| runs::fail_run(tx, &authority, None, FailureClass::NodeFailed, None))
        .expect("fail");
    assert_eq!(resolution(&t), ("cancelled".to_string(), "run_ended".to_string()));
    let request: String = value(&t.store, "SELECT status FROM interactive_requests");
    assert_eq!(request, "cancelled");
    let after = snapshot(&t.store);
    let late = decision_error(answer(&t, "ship", None));
    assert_eq!(
        late,
        DecisionError::Settled {
            provenance: "run_ended".to_string()
        }
    );
    t.clock.advance_ms(DEADLINE_MS);
    assert!(
        t.store.write(deadlines::time_out_due).expect("pass").is_empty(),
        "an ended run has no deadline left"
    );
    assert_eq!(
        snapshot(&t.store),
        after,
        "the late answer and the deadline changed nothing"
    );
    assert_verified(&t.store);
}

// The deadline's control claim -------------------------------------------------------------

#[test]
fn the_deadline_default_is_recorded_under_a_control_claim_of_the_next_generation() {
    let t = open_store();
    waiting_decision(&t, Some("ship"));
    let (generation, holder) = common::run_lease(&t.store, "run-1");
    assert_eq!(holder, None, "a waiting run has no holder");
    t.clock.advance_ms(DEADLINE_MS);
    assert_eq!(
        t.store.write(deadlines::time_out_due).expect("pass"),
        vec![RUN.to_string()]
    );
    assert_eq!(resolution(&t).1, "timeout_policy");
    assert_eq!(
        common::run_lease(&t.store, "run-1"),
        (generation + 1, None),
        "the deadline took the next generation and released it"
    );
    let fenced: i64 = value(
        &t.store,
        "SELECT lease_generation FROM events WHERE event_type = 'decision.resolved'",
    );
    assert_eq!(
        fenced,
        generation + 1,
        "the resolution is written under the control claim"
    );
    assert_eq!(run_status(&t), "queued");
    assert_verified(&t.store);
}

/// Someone other than the deadline takes a live claim on the waiting run.
fn hold(t: &common::TestStore) {
    t.store
        .write(|tx| {
            claims::acquire(
                tx,
                ResourceType::Run,
                RUN,
                OwnerType::Host,
                "someone",
                claims::RUN_CLAIM_LEASE_MS,
            )
        })
        .expect("a live claim");
}

#[test]
fn a_live_claim_makes_the_deadline_wait_and_changes_nothing() {
    for default_choice in [Some("ship"), None] {
        let t = open_store();
        waiting_decision(&t, default_choice);
        // Someone holds the run when its deadline comes.
        t.clock.advance_ms(DEADLINE_MS);
        hold(&t);
        let (generation, _) = common::run_lease(&t.store, "run-1");
        let before = snapshot(&t.store);
        assert!(
            t.store.write(deadlines::time_out_due).expect("pass").is_empty(),
            "{default_choice:?}: a live claim is never overridden"
        );
        assert_eq!(
            snapshot(&t.store),
            before,
            "{default_choice:?}: the refused deadline wrote nothing (no resolution)"
        );
        // Once that claim has expired, the deadline proves it and takes the next generation.
        t.clock.advance_ms(claims::RUN_CLAIM_LEASE_MS);
        assert_eq!(
            t.store.write(deadlines::time_out_due).expect("pass"),
            vec![RUN.to_string()]
        );
        assert_eq!(common::run_lease(&t.store, "run-1"), (generation + 1, None));
        let expected = if default_choice.is_some() {
            "timeout_policy"
        } else {
            "expired_no_default"
        };
        assert_eq!(resolution(&t).1, expected);
    }
}
