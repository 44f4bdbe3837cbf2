//! The runner channel's messages on the server side: decode and fence each frame, apply
//! state-changing messages exactly once (receipt and change in one writer job), answer in
//! order. Consecutive pipelinable proposals of one runner (pure node results, progress)
//! are queued to the writer together and share one group commit; each stays atomic in its
//! own savepoint and is answered only after that commit.
//!
//! Architecture Invariant: the generation and runner epoch of a frame are checked before its
//! payload is read; a stale runner gets one `claimLost` answer and is stopped.

use std::sync::Arc;

use ractor::ActorProcessingErr;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::apply::{Applied, Checked, Registration, apply, claimed_settings_number, record_ready};
use super::channel;
use super::state::RunnerState;
use crate::protocol::decode_frame;
use crate::protocol::encode_frame;
use crate::protocol::runner::{Message, MessageKind, Response, ResponseOutcome, fencing_of, pong_of};
use crate::server::blocking;
use crate::store::writer::PendingAnswer;
use crate::store::{Durability, StoreError, StoreResult, settings, workers};

/// Check, apply and answer frames that arrived together; false closes the channel (and
/// stops the runner).
pub async fn on_frames(state: &mut RunnerState, lines: Vec<Vec<u8>>) -> bool {
    let mut pipelined: Vec<(Arc<Message>, Submitted)> = Vec::new();
    for line in lines {
        let (message, hash) = match parse(state, &line) {
            Parsed::Message(message, hash) => (message, hash),
            Parsed::Stale(message_id) => {
                // Earlier frames are answered first: answers keep message order.
                flush(state, &mut pipelined).await;
                let _ = reply(state, Response::new(&message_id, ResponseOutcome::ClaimLost)).await;
                return false;
            }
            Parsed::Bad => {
                flush(state, &mut pipelined).await;
                return false;
            }
            Parsed::Pong(number) => {
                super::liveness::on_pong(state, number).await;
                continue;
            }
        };
        if message.kind == MessageKind::RunnerReady {
            // The handshake arrived in time: the process actor's deadline no longer applies,
            // even if its commit then takes a while.
            let _ = state.process.cast(supervisors::ProcessMsg::Ready);
        }
        if state.ready() && pipelinable(message.kind) {
            let submitted = submit(state, &message, hash);
            pipelined.push((message, submitted));
            continue;
        }
        if !flush(state, &mut pipelined).await || !handle(state, message, hash).await {
            return false;
        }
    }
    // A full disk refused a proposal: the runner is stopped after its answers (`disk_full`).
    flush(state, &mut pipelined).await && !state.disk_full
}

/// Proposals a runner may send without waiting for the previous answer: nothing it does
/// next depends on their results (a pure node reruns if its result was not committed). A
/// run's end may follow them unanswered too (the runner then waits for every answer): it
/// expects the revision they lead to, so it commits with them or, after a refusal, not at
/// all, and the run's last results and its end share one group commit.
fn pipelinable(kind: MessageKind) -> bool {
    matches!(
        kind,
        MessageKind::NodeFinished
            | MessageKind::NodeFailed
            | MessageKind::NodesFinished
            | MessageKind::NodeUpdate
            | MessageKind::RunFinished
    )
}

/// Answer the pipelined proposals in order, each after its commit, in one write: a runner
/// woken by the first answer alone would send its next proposal alone, and the pipeline
/// would shrink to one message per commit.
async fn flush(state: &mut RunnerState, pipelined: &mut Vec<(Arc<Message>, Submitted)>) -> bool {
    if pipelined.is_empty() {
        return true;
    }
    let mut keep_reading = true;
    let mut answers = Vec::new();
    for (message, submitted) in pipelined.drain(..) {
        let response = finish(state, &message, submitted).await;
        keep_reading &= response.outcome != ResponseOutcome::ClaimLost;
        match encode_frame(&response) {
            Ok(bytes) => answers.extend_from_slice(&bytes),
            Err(err) => {
                tracing::warn!(run_id = %state.args.run.run_id, error = %err, "runner answer could not be encoded");
                keep_reading = false;
                break;
            }
        }
    }
    let written = state.writer.write_all(&answers).await.is_ok();
    keep_reading && written && !state.disk_full
}

/// A frame after decoding and fencing.
enum Parsed {
    /// A liveness pong (not a protocol message: no fencing, no receipt).
    Pong(u64),
    /// A fenced message and the SHA-256 of its frame (canonical JSON: a repeat is the same
    /// message byte for byte). Shared with its writer job rather than copied.
    Message(Arc<Message>, String),
    /// Another generation or epoch: answered `claimLost` (after earlier frames), then stop.
    Stale(String),
    /// Not a protocol message: stop the runner.
    Bad,
}

/// The longest message ID a runner may use (receipts are keyed by it).
const MESSAGE_ID_BYTES_MAX: usize = 256;

/// Decode a frame and check its fencing before its payload is read.
fn parse(state: &mut RunnerState, line: &[u8]) -> Parsed {
    let Ok(frame) = decode_frame(line) else {
        tracing::warn!(run_id = %state.args.run.run_id, "runner sent a bad frame; stopping it");
        return Parsed::Bad;
    };
    if let Some(number) = pong_of(&frame) {
        return Parsed::Pong(number);
    }
    let Some(fencing) =
        fencing_of(&frame).filter(|f| !f.message_id.is_empty() && f.message_id.len() <= MESSAGE_ID_BYTES_MAX)
    else {
        tracing::warn!(run_id = %state.args.run.run_id, "runner message without valid fencing fields; stopping it");
        return Parsed::Bad;
    };
    if let Err(refused) = state.fence.admit(&fencing) {
        tracing::warn!(run_id = %state.args.run.run_id, generation = fencing.generation, %refused, "stale runner message; claimLost");
        state.runner_stale = true;
        return Parsed::Stale(fencing.message_id);
    }
    let Ok(message) = serde_json::from_value::<Message>(Value::Object(frame)) else {
        tracing::warn!(run_id = %state.args.run.run_id, "runner message does not match the protocol; stopping it");
        return Parsed::Bad;
    };
    let hash = crate::digest::sha256_hex(line.strip_suffix(b"\n").unwrap_or(line));
    Parsed::Message(Arc::new(message), hash)
}

/// One message on its own: a read, or a state change answered before the next frame.
async fn handle(state: &mut RunnerState, message: Arc<Message>, hash: String) -> bool {
    if message.kind == MessageKind::ContentRead {
        let response = match channel::read_content(&state.args.shared.store, &state.advertised, &message).await {
            Ok(result) => {
                let mut response = Response::new(&message.message_id, ResponseOutcome::Accepted);
                response.result = Some(result);
                response
            }
            Err(failure) => {
                Response::new(&message.message_id, ResponseOutcome::Rejected).with_error(failure.code, &failure.message)
            }
        };
        return reply(state, response).await.is_ok();
    }
    if message.kind == MessageKind::RunnerReady {
        return on_ready(state, &message).await;
    }
    if message.kind == MessageKind::RunnerExiting && state.ready() {
        // A goodbye changes nothing: answered at once, without a receipt or a commit (a
        // repeat gets the same answer), so a run's end costs one fsync less.
        return reply(state, Response::new(&message.message_id, ResponseOutcome::Accepted))
            .await
            .is_ok();
    }
    let submitted = submit(state, &message, hash);
    let response = finish(state, &message, submitted).await;
    let claim_lost = response.outcome == ResponseOutcome::ClaimLost;
    let written = reply(state, response).await.is_ok();
    written && !claim_lost && !state.disk_full
}

/// `runner.ready`: its answer and, after it, the one explicit command with the narrow run
/// state, in one write (the runner wakes once for both). It commits nothing of its own: the
/// worker's ready and the run's `running` ride the runner's first proposal
/// (`apply::record_ready`), so a run costs one commit and one wake of every watcher less.
/// The answer names the revision that record leads to, the one the runner's first proposal
/// expects. A repeat gets the same revision, `adopted`. Only a fresh run's small state is
/// read on the actor's thread; any other goes to the blocking pool (`channel.rs`), so a large
/// one never holds it.
async fn on_ready(state: &mut RunnerState, message: &Message) -> bool {
    if state.claim_lost {
        let _ = reply(state, Response::new(&message.message_id, ResponseOutcome::ClaimLost)).await;
        return false;
    }
    let store = Arc::clone(&state.args.shared.store);
    let ready_at_ms = store.now_ms();
    let frame = match channel::first_command_frame(&store, &state.args.run.run_id).await {
        Ok(frame) => frame,
        Err(err) => {
            tracing::warn!(run_id = %state.args.run.run_id, error = %err, "runner command could not be built; stopping the runner");
            return false;
        }
    };
    let outcome = match state.ready() {
        true => ResponseOutcome::Adopted,
        false => {
            state.ready_at_ms = Some(ready_at_ms);
            state.revision_at_ready = Some(frame.revision + 1);
            ResponseOutcome::Accepted
        }
    };
    state.advertised.extend(frame.advertised);
    state.settings_known = state.settings_known.max(frame.settings_change_number);
    let mut response = Response::new(&message.message_id, outcome);
    response.revision = state.revision_at_ready.map(|revision| revision as u64);
    let Ok(mut bytes) = encode_frame(&response) else {
        return false;
    };
    bytes.extend_from_slice(&frame.bytes);
    state.writer.write_all(&bytes).await.is_ok()
}

/// How long a ready waits for the runner's first proposal to record it before it is
/// recorded alone: a short run's first results come well within it, and a view shows a
/// runner busy with a long first pure node (or a slow load) as ready soon after all.
pub const READY_RECORD_WAIT_MS: u64 = 100;

/// Record the ready alone (the worker ready, the run running) when no proposal did within
/// `READY_RECORD_WAIT_MS`: a fact a power loss ends with the process, so no `fsync`. Proposals
/// in flight still carry it (a no-op once recorded). False when the run's claim is lost.
pub async fn record_ready_alone(state: &mut RunnerState) -> bool {
    let Some(ready_at_ms) = state.ready_at_ms else {
        return true;
    };
    let (authority, epoch) = (state.args.authority.clone(), state.args.runner_epoch.clone());
    let recorded = blocking::write_without_fsync(&state.args.shared.store, move |tx| {
        record_ready(tx, &authority, &epoch, ready_at_ms)
    })
    .await;
    match recorded {
        Ok(()) => state.ready_recorded = true,
        Err(StoreError::ClaimLost(lost)) => {
            tracing::info!(run_id = %lost.resource_id, reason = %lost.reason, "run claim lost at ready; stopping the runner");
            return false;
        }
        // A later proposal (or the settle) records it.
        Err(err) => tracing::warn!(run_id = %state.args.run.run_id, error = %err, "runner ready not recorded yet"),
    }
    true
}

pub async fn reply(state: &mut RunnerState, response: Response) -> Result<(), ActorProcessingErr> {
    send(state, &response).await
}

async fn send(state: &mut RunnerState, value: &impl serde::Serialize) -> Result<(), ActorProcessingErr> {
    let bytes = encode_frame(value)?;
    state.writer.write_all(&bytes).await?;
    Ok(())
}

/// A message on its way to the writer, or already answered (refused before any write).
enum Submitted {
    Answered(Response),
    /// Queued to the writer, with the message's hash (a refusal's receipt records it).
    Queued(String, StoreResult<PendingAnswer<Answer>>),
}

/// Queue one fenced message to be applied exactly once: a repeated message ID gets its
/// stored answer. The receipt lookup and the change share one writer job.
fn submit(state: &RunnerState, message: &Arc<Message>, message_hash: String) -> Submitted {
    let Some(ready_at_ms) = state.ready_at_ms else {
        return Submitted::Answered(
            Response::new(&message.message_id, ResponseOutcome::Rejected)
                .with_error("notReady", "send runner.ready first"),
        );
    };
    // Until a proposal committed, each one carries the ready's record (a no-op after the
    // first): the ones pipelined behind the first may be the first to commit.
    let ready_at_ms = (!state.ready_recorded).then_some(ready_at_ms);
    let checked = check_outside_store(state, message);
    let stored_hash = message_hash.clone();
    let (authority, epoch, owned, known) = (
        state.args.authority.clone(),
        state.args.runner_epoch.clone(),
        Arc::clone(message),
        state.settings_known,
    );
    let store = &state.args.shared.store;
    Submitted::Queued(
        stored_hash,
        store.submit_write(Durability::Disk, move |tx| {
            if let Some(stored) = workers::message_receipt(tx.conn(), &epoch, &owned.message_id)? {
                return Ok(match stored.message_hash == message_hash {
                    true => Answer::Stored(stored, newer_settings(tx.conn(), &owned, known)?),
                    false => Answer::Reused,
                });
            }
            if let Some(ready_at_ms) = ready_at_ms {
                record_ready(tx, &authority, &epoch, ready_at_ms)?;
            }
            let (revision, result) = apply(tx, &authority, &owned, &checked)?;
            let settings = newer_settings(tx.conn(), &owned, known)?;
            let result_json = result.as_ref().map(Value::to_string);
            let receipt = workers::MessageReceipt {
                outcome: "accepted".to_string(),
                revision,
                result_json,
                message_hash,
            };
            workers::store_message_receipt(tx, &epoch, &owned.message_id, owned.kind.as_str(), &receipt)?;
            Ok(Answer::Applied((revision, result), settings))
        }),
    )
}

/// The run's current settings version when it is newer than what the runner knows (its
/// known version, or the one the message's start fields name), read in the message's own
/// transaction; `None` otherwise, and without a read for a run that declares no settings.
fn newer_settings(conn: &rusqlite::Connection, message: &Message, known: Option<i64>) -> StoreResult<Option<Value>> {
    let Some(known) = known.max(claimed_settings_number(message)) else {
        return Ok(None);
    };
    let Some(current) = settings::current_number(conn, &message.run_id)?.filter(|current| *current > known) else {
        return Ok(None);
    };
    Ok(settings::version(conn, &message.run_id, current)?
        .map(|version| json!({"changeNumber": version.change_number, "value": version.value})))
}

/// The answer to a submitted message, after its commit.
async fn finish(state: &mut RunnerState, message: &Message, submitted: Submitted) -> Response {
    let (hash, applied) = match submitted {
        Submitted::Answered(response) => return response,
        Submitted::Queued(hash, Ok(pending)) => (hash, pending.wait().await),
        Submitted::Queued(hash, Err(err)) => (hash, Err(err)),
    };
    match applied {
        Ok(Answer::Stored(receipt, settings)) => with_settings(state, stored_response(message, receipt), settings),
        Ok(Answer::Reused) => Response::new(&message.message_id, ResponseOutcome::Rejected).with_error(
            "messageIdReused",
            "this message ID already named another message; nothing changed (use a new ID per message)",
        ),
        Ok(Answer::Applied(applied, settings)) => {
            // Every proposal submitted before this answer carried the ready's record.
            state.ready_recorded = true;
            let response = respond(state, message, hash, Ok(applied)).await;
            with_settings(state, response, settings)
        }
        Err(err) => respond(state, message, hash, Err(err)).await,
    }
}

/// What a submitted message got.
enum Answer {
    /// A message seen before: its first answer, again (with newer settings, if any).
    Stored(workers::MessageReceipt, Option<Value>),
    /// The ID named another message before: refused, nothing changed, nothing stored.
    Reused,
    /// Applied now, with newer settings than the message named, if any.
    Applied(Applied, Option<Value>),
}

/// Attach a newer settings version to an accepted or adopted answer (a refusal ends in a
/// runner error path that would not adopt it), once per version, and remember that the
/// runner knows it.
fn with_settings(state: &mut RunnerState, mut response: Response, settings: Option<Value>) -> Response {
    let delivered = matches!(response.outcome, ResponseOutcome::Accepted | ResponseOutcome::Adopted);
    let number = settings
        .as_ref()
        .and_then(|s| s.get("changeNumber"))
        .and_then(Value::as_i64);
    if let Some(number) = number.filter(|number| delivered && Some(*number) > state.settings_known) {
        state.settings_known = Some(number);
        response.settings = settings;
    }
    response
}

fn stored_response(message: &Message, receipt: workers::MessageReceipt) -> Response {
    let outcome = if receipt.outcome == "accepted" {
        ResponseOutcome::Adopted
    } else {
        ResponseOutcome::Rejected
    };
    let mut response = Response::new(&message.message_id, outcome);
    response.revision = receipt.revision.map(|r| r as u64);
    response.result = receipt.result_json.and_then(|json| serde_json::from_str(&json).ok());
    response
}

/// Facts a message needs from outside the store: a registered process must be a direct
/// child of this runner, recorded with its start identity while it runs.
fn check_outside_store(state: &RunnerState, message: &Message) -> Checked {
    let registering = message.kind == MessageKind::RunnerProgress
        && message.payload.get("operation").and_then(Value::as_str) == Some("process.register");
    let pid = message
        .payload
        .get("pid")
        .and_then(Value::as_i64)
        .and_then(|pid| i32::try_from(pid).ok())
        .filter(|pid| *pid > 1);
    let registration = match pid.filter(|_| registering) {
        None => Registration::None,
        Some(pid) => classify_registration(pid, state.pid),
    };
    Checked { registration }
}

fn classify_registration(pid: i32, runner_pid: i32) -> Registration {
    use supervisors::process::{identity_of, parent_of};
    match parent_of(pid) {
        // Exited and already reaped by the runner: nothing is left to supervise.
        None => Registration::Exited { pid },
        Some((parent, _)) if parent != runner_pid => Registration::Foreign,
        Some((_, false)) => Registration::Exited { pid },
        Some((_, true)) => match identity_of(pid) {
            Some(identity) => Registration::Child {
                pid,
                identity: identity.to_string(),
            },
            None => Registration::Exited { pid },
        },
    }
}

async fn respond(state: &mut RunnerState, message: &Message, hash: String, applied: StoreResult<Applied>) -> Response {
    match applied {
        Ok((revision, result)) => {
            match message.kind {
                // The run left this runner's hands (its claim is released): no more claim
                // renewals, and its exit is not a crash to park.
                MessageKind::RunFinished
                | MessageKind::RunParked
                | MessageKind::InteractionRequested
                | MessageKind::InteractionRejected => state.finished = true,
                _ => {}
            }
            let mut response = Response::new(&message.message_id, ResponseOutcome::Accepted);
            response.revision = revision.map(|r| r as u64);
            response.result = result;
            response
        }
        Err(StoreError::ClaimLost(lost)) => {
            tracing::info!(run_id = %lost.resource_id, generation = lost.generation, reason = %lost.reason, "runner's claim lost");
            state.claim_lost = true;
            Response::new(&message.message_id, ResponseOutcome::ClaimLost)
        }
        Err(err) if err.refusal_code().is_none() => {
            // Not an answer to this message (the store failed): nothing is stored, so the
            // runner's retry or a resumed runner gets a real answer later. A full disk
            // (`diskFull`) also stops the runner after this answer: nothing it proposes can
            // commit until space returns, and its run resumes from what is durable.
            state.disk_full |= err.is_disk_full();
            tracing::warn!(run_id = %state.args.run.run_id, error = %err, "runner message not applied");
            Response::new(&message.message_id, ResponseOutcome::Rejected)
                .with_error(err.failure_code(), &err.to_string())
        }
        Err(err) => {
            let (epoch, id, kind) = (
                state.args.runner_epoch.clone(),
                message.message_id.clone(),
                message.kind.as_str(),
            );
            let receipt = workers::MessageReceipt {
                outcome: "rejected".to_string(),
                revision: None,
                result_json: None,
                message_hash: hash,
            };
            let _ = blocking::write(&state.args.shared.store, move |tx| {
                workers::store_message_receipt(tx, &epoch, &id, kind, &receipt)
            })
            .await;
            Response::new(&message.message_id, ResponseOutcome::Rejected)
                .with_error("protocolRejected", &err.to_string())
        }
    }
}
