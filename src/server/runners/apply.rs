//! What each state-changing runner message does to the store: one protected write per
//! message, run inside the writer's transaction together with the message receipt.
//!
//! Architecture Invariant: this module only translates a fenced, decoded message into the
//! store's transactions; it never signals processes or talks to the runner.

use serde::Deserialize;
use serde_json::Value;

use crate::decision::DecisionRequest;
use crate::protocol::runner::{Message, MessageKind, PURE_RESULTS_MAX, PureOutcome, PureResult};
use crate::store::attempts::{self, AttemptOutcome, Finish, NewAttempt, SettledAttempt};
use crate::store::blobs::{keep_json, put_json};
use crate::store::claims::{self, ClaimAuthority, RUN_CLAIM_LEASE_MS};
use crate::store::decisions::NewDecision;
use crate::store::effects::{self, EffectRecovery, EffectRequest, Settlement};
use crate::store::interactions::{self, InteractionKind, Judged, NewInteraction};
use crate::store::messages::{self, MessageKind as WorkflowMessageKind, NewMessage};
use crate::store::runs::{self, FailureClass, ParkReason};
use crate::store::{StoreError, StoreResult, WriteTx, processes, workers};

/// A node output, interaction answer or effect result, as canonical JSON.
pub const VALUE_BYTES_MAX: usize = 256 * 1024;
// Runners cut display texts by UTF-8 bytes (an error message to 4 KiB, an update to 1 KiB, a
// notification to 16 KiB); canonical JSON escaping can grow a control character to six
// bytes, so the stored bounds leave room for that and the envelope: a well-behaved runner's
// value is never refused (a refusal would strand the run), and every value stays bounded.
/// An error value (`{code, message}`).
pub const ERROR_BYTES_MAX: usize = 6 * 4 * 1024 + 1024;
/// A progress update of a running node.
pub const UPDATE_BYTES_MAX: usize = 6 * 1024 + 1024;
/// A notification of a notify node.
pub const NOTIFICATION_BYTES_MAX: usize = 6 * 16 * 1024 + 1024;
/// An ID or node path in a runner payload.
pub const PAYLOAD_ID_BYTES_MAX: usize = 1024;
/// A presentation for the run's terminal message.
pub const PRESENTATION_BYTES_MAX: usize = 64 * 1024;

/// The start field naming the settings version a node saw; a message that carries it is
/// answered with a newer version when there is one.
pub const SETTINGS_CHANGE_NUMBER: &str = "settingsChangeNumber";

/// What an accepted message committed: the new revision (if the run changed) and a small
/// result for the runner (e.g. an effect reservation).
pub type Applied = (Option<i64>, Option<Value>);

/// Facts the actor checked outside the transaction (they need /proc, not the store).
pub struct Checked {
    pub registration: Registration,
}

/// What /proc said about a process a runner registers.
pub enum Registration {
    /// Not a registration.
    None,
    /// A live direct child of the runner, with its start identity: recorded.
    Child { pid: i32, identity: String },
    /// Already exited (gone, or a zombie child of the runner): nothing left to supervise,
    /// so the registration is answered without a record.
    Exited { pid: i32 },
    /// Someone else's process: refused.
    Foreign,
}

/// The store change of one message kind; `None` revision for kinds that change no run.
pub fn apply(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    message: &Message,
    checked: &Checked,
) -> StoreResult<Applied> {
    let expected = message.expected_revision.map(|r| r as i64);
    let payload = Payload(message);
    let revision = match message.kind {
        MessageKind::RunnerReady => {
            return Err(invalid(
                "runner.ready is answered without a writer job; its record rides the first proposal",
            ));
        }
        MessageKind::NodeStarted => attempts::start_attempt(tx, authority, expected, &payload.new_attempt()?)?,
        MessageKind::NodeFinished | MessageKind::NodeFailed => finish_node(tx, authority, expected, &payload)?,
        MessageKind::NodesFinished => record_pure_results(tx, authority, expected, message)?,
        MessageKind::NodeUpdate => {
            let update = put_json(tx, &Value::Object(message.payload.clone()), UPDATE_BYTES_MAX)?;
            runs::note_run(tx, authority, expected, "node.updated", &update)?
        }
        MessageKind::RunFinished => finish_run(tx, authority, expected, &payload)?,
        MessageKind::RunParked => {
            let reason = match payload.text("reason").as_deref() {
                Some("boundary") => ParkReason::Boundary,
                Some("workflowSourceChanged") => ParkReason::WorkflowSourceChanged,
                _ => return Err(invalid("payload.reason must be boundary or workflowSourceChanged")),
            };
            runs::park_run(tx, authority, expected, reason)?
        }
        MessageKind::InteractionRequested => request_interaction(tx, authority, expected, &payload)?,
        MessageKind::InteractionAccepted | MessageKind::InteractionRejected => {
            judge_submission(tx, authority, expected, &payload)?
        }
        MessageKind::NotificationRequested => notify(tx, authority, expected, &payload)?,
        MessageKind::PresentationRequested => {
            let presentation = put_json(tx, payload.value("presentation")?, PRESENTATION_BYTES_MAX)?;
            runs::note_run(tx, authority, expected, "presentation.requested", &presentation)?
        }
        MessageKind::EffectReserve => return reserve_effect(tx, authority, expected, &payload),
        MessageKind::EffectSettle => settle_effect(tx, authority, expected, &payload)?,
        MessageKind::RunnerProgress => {
            progress(tx, authority, message, checked)?;
            return Ok((None, None));
        }
        MessageKind::RunnerExiting => {
            return Err(invalid(
                "runner.exiting changes nothing; it is answered without a receipt",
            ));
        }
        MessageKind::ContentRead => return Err(invalid("content.read is a read; it is answered without a receipt")),
    };
    Ok((Some(revision), None))
}

/// Record a ready answered earlier (`messages::on_ready`), in the transaction of the
/// runner's first proposal: the worker ready at `ready_at_ms` and the run running. A no-op
/// once recorded, so every proposal sent before the first answer may carry it; fencing
/// already proved this is the runner epoch being served.
pub fn record_ready(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    runner_epoch: &str,
    ready_at_ms: i64,
) -> StoreResult<()> {
    if workers::record_ready(tx, runner_epoch, ready_at_ms)? {
        runs::mark_running(tx, authority, None)?;
    }
    Ok(())
}

/// Typed access to a message's payload with bounded, named errors.
struct Payload<'a>(&'a Message);

impl Payload<'_> {
    fn text(&self, key: &str) -> Option<String> {
        self.0.payload.get(key).and_then(Value::as_str).map(str::to_string)
    }

    /// A required ID-like field (IDs, node paths, types): present and bounded.
    fn required_text(&self, key: &'static str) -> StoreResult<String> {
        let text = self.text(key).ok_or_else(|| missing(key))?;
        bounded_id(key, &text)?;
        Ok(text)
    }

    fn value(&self, key: &'static str) -> StoreResult<&Value> {
        self.0.payload.get(key).ok_or_else(|| missing(key))
    }

    fn attempt_id(&self) -> StoreResult<String> {
        let id = self.0.attempt_id.clone().ok_or_else(|| missing("attemptId"))?;
        if id.is_empty() || id.len() > PAYLOAD_ID_BYTES_MAX {
            return Err(invalid("attemptId must be 1 to 1024 bytes"));
        }
        Ok(id)
    }

    fn new_attempt(&self) -> StoreResult<NewAttempt> {
        Ok(NewAttempt {
            attempt_id: self.attempt_id()?,
            node_id: self.required_text("nodeId")?,
            node_path: self.required_text("nodePath")?,
            visit: self.0.payload.get("visit").and_then(Value::as_i64).unwrap_or(1),
            node_type: match self.text("nodeType") {
                Some(_) => self.required_text("nodeType")?,
                None => "compute".to_string(),
            },
            deadline_at: self.0.payload.get("deadlineAt").and_then(Value::as_i64),
            timeout_ms: self.0.payload.get("timeoutMs").and_then(Value::as_i64),
            settings_change_number: self.settings_change_number()?,
        })
    }

    /// The settings version a node started with (start fields of runs with settings).
    fn settings_change_number(&self) -> StoreResult<Option<i64>> {
        match self.0.payload.get(SETTINGS_CHANGE_NUMBER) {
            None => Ok(None),
            Some(number) => number
                .as_i64()
                .filter(|number| *number >= 0)
                .map(Some)
                .ok_or_else(|| invalid("payload.settingsChangeNumber must be a non-negative integer")),
        }
    }

    /// The attempt a finishing message records when the node was never started: a pure
    /// node starts and finishes in one commit.
    fn started_here(&self) -> StoreResult<Option<NewAttempt>> {
        if self.0.payload.contains_key("nodePath") {
            return self.new_attempt().map(Some);
        }
        Ok(None)
    }
}

fn finish_node(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    payload: &Payload<'_>,
) -> StoreResult<i64> {
    let outcome = if payload.0.kind == MessageKind::NodeFinished {
        let output = keep_json(tx, payload.value("output")?, VALUE_BYTES_MAX)?;
        AttemptOutcome::Completed { output: Some(output) }
    } else {
        let error = keep_json(tx, payload.value("error")?, ERROR_BYTES_MAX)?;
        AttemptOutcome::Failed { error: Some(error) }
    };
    finish_attempt_of(tx, authority, expected, payload, &outcome, |_, _| Ok(()))
}

/// The payload key of a `nodes.finished` message's results.
const RESULTS: &str = "results";

// Every batch the protocol admits fits one store write.
const _: () = assert!(PURE_RESULTS_MAX <= attempts::SETTLED_ATTEMPTS_MAX);

/// `nodes.finished`: pure compute nodes that were never started, each recorded settled with
/// its value, all in one protected write (or none of them).
fn record_pure_results(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    message: &Message,
) -> StoreResult<i64> {
    if message.attempt_id.is_some() {
        return Err(invalid(
            "nodes.finished names its attempts in its results, not in attemptId",
        ));
    }
    let results = message.payload.get(RESULTS).ok_or_else(|| missing("results"))?;
    let results = Vec::<PureResult>::deserialize(results)
        .map_err(|err| invalid(&format!("payload.results does not match the protocol: {err}")))?;
    if results.is_empty() || results.len() > PURE_RESULTS_MAX {
        return Err(StoreError::InvalidInput {
            what: "results",
            detail: format!("must hold 1 to {PURE_RESULTS_MAX} results"),
        });
    }
    let settled = results
        .into_iter()
        .map(|result| settled_of(tx, result))
        .collect::<StoreResult<Vec<_>>>()?;
    attempts::record_settled(tx, authority, expected, &settled)
}

/// One pure result as the attempt it records, its value stored.
fn settled_of(tx: &WriteTx<'_>, result: PureResult) -> StoreResult<SettledAttempt> {
    for (what, text) in [
        ("attemptId", &result.attempt_id),
        ("nodeId", &result.node_id),
        ("nodePath", &result.node_path),
    ] {
        bounded_id(what, text)?;
    }
    if result.node_type != "compute" {
        return Err(invalid("nodes.finished carries compute nodes only"));
    }
    if result.settings_change_number.is_some_and(|number| number < 0) {
        return Err(invalid("settingsChangeNumber must be a non-negative integer"));
    }
    let outcome = match result.outcome {
        PureOutcome::Completed => AttemptOutcome::Completed {
            output: Some(keep_json(tx, &result.value, VALUE_BYTES_MAX)?),
        },
        PureOutcome::Failed => AttemptOutcome::Failed {
            error: Some(keep_json(tx, &result.value, ERROR_BYTES_MAX)?),
        },
    };
    let attempt = NewAttempt {
        attempt_id: result.attempt_id,
        node_id: result.node_id,
        node_path: result.node_path,
        visit: result.visit,
        node_type: result.node_type,
        deadline_at: result.deadline_at,
        timeout_ms: result.timeout_ms,
        settings_change_number: result.settings_change_number,
    };
    Ok(SettledAttempt { attempt, outcome })
}

/// The settings version a message says its node(s) saw, the newest of them: the answer then
/// carries a newer one if there is one.
pub fn claimed_settings_number(message: &Message) -> Option<i64> {
    let number_of =
        |fields: &serde_json::Map<String, Value>| fields.get(SETTINGS_CHANGE_NUMBER).and_then(Value::as_i64);
    match message.kind {
        MessageKind::NodesFinished => message
            .payload
            .get(RESULTS)
            .and_then(Value::as_array)?
            .iter()
            .filter_map(|result| result.as_object().and_then(number_of))
            .max(),
        _ => number_of(&message.payload),
    }
}

/// An ID-like text of a runner payload: present and bounded.
fn bounded_id(what: &'static str, text: &str) -> StoreResult<()> {
    if text.is_empty() || text.len() > PAYLOAD_ID_BYTES_MAX {
        return Err(StoreError::InvalidInput {
            what,
            detail: format!("must be 1 to {PAYLOAD_ID_BYTES_MAX} bytes"),
        });
    }
    Ok(())
}

/// Settle the message's attempt (started here when the payload carries start fields) with
/// `also` in the same protected write; `also` gets the attempt ID.
fn finish_attempt_of(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    payload: &Payload<'_>,
    outcome: &AttemptOutcome,
    also: impl FnOnce(&WriteTx<'_>, &str) -> StoreResult<()>,
) -> StoreResult<i64> {
    let started_here = payload.started_here()?;
    let attempt_id = payload.attempt_id()?;
    let finish = Finish {
        attempt_id: &attempt_id,
        started_here: started_here.as_ref(),
        outcome,
    };
    attempts::finish_attempt_with(tx, authority, expected, &finish, |tx| also(tx, &attempt_id))
}

fn finish_run(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    payload: &Payload<'_>,
) -> StoreResult<i64> {
    match payload.text("outcome").as_deref() {
        Some("completed") => {
            let output = match payload.0.payload.get("output") {
                Some(value) => Some(put_json(tx, value, VALUE_BYTES_MAX)?),
                None => None,
            };
            runs::complete_run(tx, authority, expected, output.as_deref())
        }
        Some("failed") => {
            let error = put_json(tx, payload.value("error")?, ERROR_BYTES_MAX)?;
            runs::fail_run(tx, authority, expected, FailureClass::NodeFailed, Some(&error))
        }
        Some("timed_out") => {
            let error = put_json(tx, payload.value("error")?, ERROR_BYTES_MAX)?;
            runs::time_out_run(tx, authority, expected, Some(&error))
        }
        _ => Err(invalid("payload.outcome must be completed, failed or timed_out")),
    }
}

fn request_interaction(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    payload: &Payload<'_>,
) -> StoreResult<i64> {
    let kind = payload
        .text("kind")
        .and_then(|kind| InteractionKind::from_wire(&kind))
        .ok_or_else(|| invalid("payload.kind must be agent, assistant, checkpoint or decision"))?;
    let contract = payload.value("contract")?;
    let decision = match kind {
        InteractionKind::Decision => Some(NewDecision {
            request: DecisionRequest::from_contract(contract)?,
            subject: payload.0.payload.get("subject").cloned().unwrap_or(Value::Null),
        }),
        _ => None,
    };
    let deadline_at = payload.0.payload.get("deadlineAt").and_then(Value::as_i64);
    if decision
        .as_ref()
        .is_some_and(|decision| decision.request.deadline_at != deadline_at)
    {
        return Err(invalid("a decision's deadlineAt must equal the request's deadlineAt"));
    }
    let interaction = NewInteraction {
        request_id: payload.required_text("requestId")?,
        attempt_id: payload.attempt_id()?,
        kind,
        contract_hash: put_json(tx, contract, VALUE_BYTES_MAX)?,
        deadline_at,
        decision,
    };
    interactions::request(tx, authority, expected, &interaction)
}

fn judge_submission(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    payload: &Payload<'_>,
) -> StoreResult<i64> {
    let (request_id, submission_id) = (
        payload.required_text("requestId")?,
        payload.required_text("submissionId")?,
    );
    if payload.0.kind == MessageKind::InteractionAccepted {
        let output = put_json(tx, payload.value("output")?, VALUE_BYTES_MAX)?;
        let judged = Judged {
            request_id: &request_id,
            submission_id: &submission_id,
            receipt_hash: &output,
        };
        return interactions::accept(tx, authority, expected, &judged);
    }
    let error = put_json(tx, payload.value("error")?, ERROR_BYTES_MAX)?;
    let judged = Judged {
        request_id: &request_id,
        submission_id: &submission_id,
        receipt_hash: &error,
    };
    interactions::reject(tx, authority, expected, &judged)
}

/// A notify node: its result and its notification commit together; an interactive run
/// also queues a passive message for its origin session.
fn notify(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    payload: &Payload<'_>,
) -> StoreResult<i64> {
    let output = keep_json(tx, payload.value("output")?, VALUE_BYTES_MAX)?;
    let notification = put_json(tx, payload.value("notification")?, NOTIFICATION_BYTES_MAX)?;
    let outcome = AttemptOutcome::Completed { output: Some(output) };
    let run_id = authority.resource_id.as_str();
    finish_attempt_of(tx, authority, expected, payload, &outcome, |tx, attempt_id| {
        let Some(session) = messages::origin_session(tx, run_id)? else {
            return Ok(());
        };
        let message = NewMessage {
            run_id,
            target_session_id: &session,
            kind: WorkflowMessageKind::Notification,
            source_id: attempt_id,
            reason: None,
            content_hash: &notification,
        };
        messages::queue_message(tx, &message).map(|_| ())
    })
}

fn reserve_effect(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    payload: &Payload<'_>,
) -> StoreResult<Applied> {
    let recovery = payload
        .text("recovery")
        .and_then(|name| EffectRecovery::from_wire(&name))
        .ok_or_else(|| invalid("payload.recovery must be idempotent, readBack or manual"))?;
    let request = EffectRequest {
        effect_type: payload.required_text("effectType")?,
        idempotency_key: payload.required_text("idempotencyKey")?,
        request_fingerprint: payload.required_text("requestFingerprint")?,
        recovery,
        attempt_id: Some(payload.attempt_id()?),
        request_summary: request_summary(payload)?,
    };
    let reserved = effects::reserve(tx, authority, expected, &request)?;
    let result = serde_json::to_value(&reserved.value).map_err(|err| invalid(&err.to_string()))?;
    Ok((Some(reserved.revision), Some(result)))
}

/// The optional non-secret summary a review shows: printable, bounded (refused, not cut,
/// so a reviewer never reads a silently different text).
fn request_summary(payload: &Payload<'_>) -> StoreResult<Option<String>> {
    let Some(summary) = payload.text("requestSummary") else {
        return Ok(None);
    };
    if summary.len() > effects::REQUEST_SUMMARY_BYTES_MAX || summary.chars().any(char::is_control) {
        return Err(invalid(&format!(
            "payload.requestSummary must be at most {} bytes of printable text",
            effects::REQUEST_SUMMARY_BYTES_MAX
        )));
    }
    Ok(Some(summary))
}

fn settle_effect(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    expected: Option<i64>,
    payload: &Payload<'_>,
) -> StoreResult<i64> {
    let settlement = match payload.text("outcome").as_deref() {
        Some("applied") => Settlement::Applied,
        Some("rejected") => Settlement::Rejected,
        Some("ambiguous") => Settlement::Ambiguous,
        _ => return Err(invalid("payload.outcome must be applied, rejected or ambiguous")),
    };
    let result = match payload.0.payload.get("result") {
        Some(value) => Some(put_json(tx, value, VALUE_BYTES_MAX)?),
        None => None,
    };
    let effect_id = payload.required_text("effectId")?;
    effects::settle(tx, authority, expected, &effect_id, settlement, result.as_deref())
}

/// `runner.progress`: attach or detach a child process group. Registration needs the live
/// claim; unregistration stays valid after a terminal state released it (cleanup).
fn progress(tx: &WriteTx<'_>, authority: &ClaimAuthority, message: &Message, checked: &Checked) -> StoreResult<()> {
    let payload = Payload(message);
    let pid = message
        .payload
        .get("pid")
        .and_then(Value::as_i64)
        .and_then(|pid| i32::try_from(pid).ok())
        .filter(|pid| *pid > 1)
        .ok_or_else(|| invalid("payload.pid must be a process ID above 1"))?;
    match payload.text("operation").as_deref() {
        Some("process.register") => {
            claims::renew(tx, authority, RUN_CLAIM_LEASE_MS)?;
            match &checked.registration {
                Registration::Child { pid: child, identity } if *child == pid => {
                    processes::register(tx, &message.runner_epoch, pid, identity)
                }
                Registration::Exited { pid: exited } if *exited == pid => Ok(()),
                _ => Err(invalid("the process is not a direct child of this runner")),
            }
        }
        Some("process.unregister") => processes::unregister(tx, &message.runner_epoch, pid).map(|_| ()),
        _ => Err(invalid(
            "payload.operation must be process.register or process.unregister",
        )),
    }
}

fn missing(what: &'static str) -> StoreError {
    StoreError::InvalidInput {
        what,
        detail: "missing".to_string(),
    }
}

pub fn invalid(detail: &str) -> StoreError {
    StoreError::InvalidInput {
        what: "runner message",
        detail: detail.to_string(),
    }
}
