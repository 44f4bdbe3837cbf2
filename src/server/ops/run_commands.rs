//! Run commands and reads of the client protocol: `run.start`, `run.restart`,
//! `checkpoint.answer` (each commits its change with its command receipt before it
//! answers), `run.status` and `run.list` (reads; no receipts).

use std::sync::Arc;

use serde_json::{Value, json};

use super::context::OpsContext;
use crate::protocol::{
    INPUT_DEPTH_MAX, JsonObject, Outcome, Request, canonical_sha256_hex, json_text_depth, value_to_canonical_vec,
};
use crate::server::answers::{
    Answer, answer_of, command_request, expected_revision_of, page_limit, read_refusal, rejected, run_id_of, to_object,
};
use crate::server::blocking;
use crate::server::resolvers::mailbox::ResolveFailure;
use crate::server::runners::admission::{self, Admission};
use crate::settings::Declaration;
use crate::store::blobs::{self, put_json};
use crate::store::commands::{self, Accepted};
use crate::store::continuations;
use crate::store::interactions::{self, Submission};
use crate::store::run_summary;
use crate::store::runs::{self, ExecutionMode, NewRun, RunOrigin};
use crate::store::settings;
use crate::store::{StoreResult, WriteTx};

/// A run input, as canonical JSON.
pub const INPUT_BYTES_MAX: usize = 256 * 1024;
/// A definition snapshot (topology only), as canonical JSON.
pub const SNAPSHOT_BYTES_MAX: usize = 512 * 1024;
/// A workflow source identity (root and mounted file hashes), as canonical JSON.
pub const SOURCE_BYTES_MAX: usize = 64 * 1024;
pub const WORKFLOW_NAME_BYTES_MAX: usize = 128;
/// The media type of stored definition snapshots (views draw the topology from them).
pub use crate::view::document::DEFINITION_MEDIA_TYPE;

/// `run.start`: queue a new run with its source identity, definition and input. A request
/// that names the workflow (`workflow`, `projectPath`, `inputJson`) is resolved first by the
/// server's warm resolver; one that carries a resolution is checked as given.
///
/// When a runner slot is free and no older run is admissible, the run is admitted in its
/// creation commit (`runners::admission`): the scheduler's round and a commit of its own are
/// saved, and its runner starts while the client reads the answer.
pub async fn run_start(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let payload = match request.payload.get("workflow") {
        Some(_) => resolved_payload(ctx, &request.payload).await?,
        None => request.payload.clone(),
    };
    let start = StartRequest::parse(run_id, &payload)?;
    let admission = admission::prepare(&ctx.shared, &ctx.runners).await;
    let record = admission.as_ref().map(Admission::record);
    let stored = blocking::write(&ctx.store, move |tx| {
        let receipt = commands::run_command(tx, &command, |tx| {
            let revision = start.queue(tx)?;
            Ok(Accepted {
                revision: Some(revision),
                receipt: json!({"runId": start.run_id, "workflowName": start.workflow_name, "revision": revision}),
            })
        })?;
        let admitted = record.and_then(|record| record.record_if_first(tx, &start.run_id));
        Ok((receipt, admitted))
    })
    .await;
    let (stored, admitted) = match stored {
        Ok((receipt, admitted)) => (Ok(receipt), admitted),
        Err(err) => (Err(err), None),
    };
    match (admission, admitted) {
        (Some(admission), Some(admitted)) => {
            let (shared, runners) = (Arc::clone(&ctx.shared), Arc::clone(&ctx.runners));
            tokio::spawn(async move { admission.launch(&shared, &runners, admitted).await });
        }
        // Not admitted with its creation: the scheduler admits the run in turn.
        (Some(admission), None) => {
            admission.give_back(&ctx.runners);
            ctx.shared.wake_scheduler();
        }
        (None, _) => ctx.shared.wake_scheduler(),
    }
    answer_of(stored)
}

struct StartRequest {
    run_id: String,
    workflow_name: String,
    project_path: String,
    source_json: String,
    definition_digest: String,
    snapshot: Vec<u8>,
    /// The workflow's settings declaration, when it has one.
    settings: Option<Value>,
    input: Value,
    execution: ExecutionMode,
}

type Refusal = (Outcome, crate::protocol::ResponseError);

/// The longest workflow name or path a `run.start` may name, and its raw input.
pub const WORKFLOW_TARGET_BYTES_MAX: usize = 4096;

/// Resolve a named workflow with the warm resolver into a `run.start` payload.
async fn resolved_payload(ctx: &OpsContext, payload: &JsonObject) -> Result<JsonObject, Refusal> {
    let text = |key: &str| payload.get(key).and_then(Value::as_str);
    let target = text("workflow").filter(|t| !t.is_empty() && t.len() <= WORKFLOW_TARGET_BYTES_MAX);
    let project = text("projectPath").filter(|p| p.starts_with('/') && p.len() <= WORKFLOW_TARGET_BYTES_MAX);
    let (Some(target), Some(project)) = (target, project) else {
        return Err(rejected(
            "invalidRequest",
            "run.start needs workflow (a name or path) and an absolute projectPath",
        ));
    };
    let input_json = text("inputJson");
    if input_json.is_some_and(|input| input.len() > INPUT_BYTES_MAX) {
        return Err(rejected(
            "tooLarge",
            &format!("inputJson is above {INPUT_BYTES_MAX} bytes"),
        ));
    }
    if input_json.is_some_and(|input| json_text_depth(input) > INPUT_DEPTH_MAX) {
        return Err(rejected(
            "invalidInput",
            &format!("inputJson nests deeper than {INPUT_DEPTH_MAX} levels; flatten it"),
        ));
    }
    let answer = ctx
        .resolvers
        .resolve(target, project, input_json)
        .await
        .map_err(|failure| match failure {
            ResolveFailure::Workflow { code, message } => rejected(&code, &message),
            ResolveFailure::TimedOut { seconds } => rejected(
                "resolveTimeout",
                &format!(
                    "the workflow {target} did not finish loading within {seconds} s; look for top-level code that never \
                     finishes (a loop, or an await that never settles), fix it and start again"
                ),
            ),
            ResolveFailure::Busy => rejected(
                "resolverBusy",
                "every workflow resolver is busy loading other workflows; retry in a moment",
            ),
            ResolveFailure::Unavailable(why) => rejected(
                "resolverUnavailable",
                &format!("the workflow could not be resolved: {why}; check Node 20 and the pi-workflows package"),
            ),
        })?;
    let mut resolved = JsonObject::new();
    resolved.insert(
        "workflowName".into(),
        answer.get("name").cloned().unwrap_or(Value::Null),
    );
    resolved.insert("projectPath".into(), Value::String(project.to_string()));
    for (to, from) in [
        ("workflowSource", "workflowSource"),
        ("definitionDigest", "definitionDigest"),
        ("definitionSnapshot", "snapshot"),
        ("input", "input"),
    ] {
        resolved.insert(to.into(), answer.get(from).cloned().unwrap_or(Value::Null));
    }
    for key in ["executionMode", "originSessionId"] {
        if let Some(value) = payload.get(key) {
            resolved.insert(key.into(), value.clone());
        }
    }
    Ok(resolved)
}

/// The most of a node path one refusal shows.
const PATH_SHOWN_CHARS_MAX: usize = 128;

/// A headless run cannot run a step whose output is the visible assistant reply: no Pi
/// session shows that reply to anyone (spec "Detached execution"). Refused at start, naming
/// the first such step, before anything is queued.
fn refuse_assistant_messages(snapshot: &Value) -> Result<(), Refusal> {
    let nodes = snapshot
        .get("nodes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let Some(node) = nodes
        .iter()
        .find(|node| node.get("form").and_then(Value::as_str) == Some("assistantMessage"))
    else {
        return Ok(());
    };
    let path = node.get("path").and_then(Value::as_str).unwrap_or("?");
    Err(rejected(
        "assistantMessageHeadless",
        &format!(
            "step \"{}\" answers with a visible assistant message, which needs the Pi session that starts the run: \
             start it from Pi (/workflow start), or give the step an expectedOutput",
            crate::printable::printable(path)
                .chars()
                .take(PATH_SHOWN_CHARS_MAX)
                .collect::<String>()
        ),
    ))
}

impl StartRequest {
    fn parse(run_id: String, payload: &JsonObject) -> Result<Self, Refusal> {
        let text = |key: &str| payload.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        let workflow_name = text("workflowName");
        if workflow_name.is_empty() || workflow_name.len() > WORKFLOW_NAME_BYTES_MAX {
            return Err(rejected(
                "invalidRequest",
                &format!("workflowName must be 1 to {WORKFLOW_NAME_BYTES_MAX} bytes"),
            ));
        }
        let snapshot = payload.get("definitionSnapshot").cloned().unwrap_or(Value::Null);
        let definition_digest = text("definitionDigest");
        let digest = canonical_sha256_hex(&snapshot).map_err(|err| rejected("invalidDefinition", &err.to_string()))?;
        if !snapshot.is_object() || definition_digest != format!("sha256:{digest}") {
            return Err(rejected(
                "invalidDefinition",
                "definitionDigest is not the SHA-256 of the canonical definitionSnapshot; resolve the workflow again",
            ));
        }
        // Checked here so a bad declaration is refused before anything is queued.
        let settings = Declaration::of_snapshot(&snapshot)
            .map_err(|err| rejected(err.code(), &err.to_string()))?
            .map(|_| snapshot["settings"].clone());
        let snapshot_value = snapshot;
        let snapshot = bounded(&snapshot_value, SNAPSHOT_BYTES_MAX, "definitionSnapshot")?;
        let source = payload.get("workflowSource").cloned().unwrap_or(Value::Null);
        if !source.is_object() {
            return Err(rejected("invalidRequest", "workflowSource must be an object"));
        }
        let source_json = String::from_utf8(bounded(&source, SOURCE_BYTES_MAX, "workflowSource")?)
            .map_err(|_| rejected("invalidRequest", "workflowSource is not UTF-8"))?;
        let execution = match (text("executionMode").as_str(), text("originSessionId")) {
            ("headless" | "", _) => ExecutionMode::Headless,
            ("interactive", session) if !session.is_empty() => ExecutionMode::Interactive {
                origin_session_id: session,
            },
            _ => {
                return Err(rejected(
                    "invalidRequest",
                    "executionMode is headless, or interactive with an originSessionId",
                ));
            }
        };
        if execution == ExecutionMode::Headless {
            refuse_assistant_messages(&snapshot_value)?;
        }
        Ok(Self {
            run_id,
            workflow_name,
            project_path: text("projectPath"),
            source_json,
            definition_digest,
            snapshot,
            settings,
            input: payload.get("input").cloned().unwrap_or(Value::Null),
            execution,
        })
    }

    fn queue(&self, tx: &WriteTx<'_>) -> StoreResult<i64> {
        let input_hash = put_json(tx, &self.input, INPUT_BYTES_MAX)?;
        blobs::put_blob(tx, &self.snapshot, DEFINITION_MEDIA_TYPE)?;
        let revision = runs::queue_run(
            tx,
            &NewRun {
                run_id: self.run_id.clone(),
                workflow_name: self.workflow_name.clone(),
                project_path: self.project_path.clone(),
                parent_run_id: None,
                root_run_id: None,
                origin: RunOrigin::Start,
                definition_digest: self.definition_digest.clone(),
                workflow_source_json: self.source_json.clone(),
                input_hash: format!("sha256:{input_hash}"),
                execution: self.execution.clone(),
            },
        )?;
        if let Some(declared) = &self.settings {
            settings::declare(tx, &self.run_id, declared)?;
        }
        Ok(revision)
    }
}

fn bounded(value: &Value, bytes_max: usize, what: &str) -> Result<Vec<u8>, Refusal> {
    let bytes = value_to_canonical_vec(value);
    if bytes.len() > bytes_max {
        return Err(rejected(
            "tooLarge",
            &format!("{what} is {} bytes, above the {bytes_max}-byte limit", bytes.len()),
        ));
    }
    Ok(bytes)
}

/// `run.restart`: a new run (`newRunId`) of a terminal run from the workflow start.
pub async fn run_restart(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let old = run_id_of(request)?;
    let new = request
        .payload
        .get("newRunId")
        .and_then(Value::as_str)
        .filter(|id| crate::protocol::check_id("newRunId", id).is_ok())
        .ok_or_else(|| {
            rejected(
                "invalidRequest",
                "run.restart needs payload.newRunId: 1 to 256 ASCII letters, digits and ._:@|+=~-",
            )
        })?
        .to_string();
    let expected = expected_revision_of(request);
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let revision = runs::restart_run(tx, &old, &new, expected)?;
            Ok(Accepted {
                revision: Some(revision),
                receipt: json!({"runId": new, "restartedRunId": old, "revision": revision}),
            })
        })
    })
    .await;
    ctx.shared.wake_scheduler();
    answer_of(stored)
}

/// `checkpoint.answer`: the answer to the run's pending checkpoint. The run is settled by a
/// continuation run (`payload.continuationRunId`, or one derived from the command), which
/// goes on from the checkpoint; the receipt names it.
pub async fn checkpoint_answer(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let answer = request.payload.get("answer").cloned().unwrap_or(Value::Null);
    bounded(&answer, INPUT_BYTES_MAX, "answer")?;
    let named = request
        .payload
        .get("requestId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let continuation_run_id = continuation_run_id_of(request, &command.fingerprint)?;
    let expected = expected_revision_of(request);
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let request_id =
                interactions::pending_request_of(tx.conn(), &run_id, named.as_deref(), Some("checkpoint"))?;
            let payload_hash = put_json(tx, &answer, INPUT_BYTES_MAX)?;
            let continued = continuations::answer_checkpoint(
                tx,
                &continuations::CheckpointAnswer {
                    answer: Submission {
                        run_id: &run_id,
                        request_id: &request_id,
                        submission_id: &interactions::submission_id_of(&command.fingerprint),
                        idempotency_key: &command.idempotency_key,
                        payload_hash: &payload_hash,
                    },
                    continuation_run_id: &continuation_run_id,
                },
                expected,
            )?;
            Ok(Accepted {
                revision: Some(continued.revision),
                receipt: json!({
                    "runId": run_id,
                    "requestId": request_id,
                    "revision": continued.revision,
                    "continuationRunId": continued.continuation_run_id,
                }),
            })
        })
    })
    .await;
    ctx.shared.wake_scheduler();
    answer_of(stored)
}

/// The continuation's run ID: the client's `continuationRunId` (checked like any run ID), or
/// one derived from the command's fingerprint, so a resend names the same run.
fn continuation_run_id_of(request: &Request, fingerprint: &str) -> Result<String, Refusal> {
    match request.payload.get("continuationRunId") {
        None => Ok(format!("run-c{}", &fingerprint[..CONTINUATION_ID_HEX])),
        Some(Value::String(id)) if crate::protocol::check_id("continuationRunId", id).is_ok() => Ok(id.clone()),
        Some(_) => Err(rejected(
            "invalidRequest",
            "continuationRunId must be a run ID (1 to 256 bytes of letters, digits and ._:@|+=~-)",
        )),
    }
}

/// Hex digits of the command fingerprint in a derived continuation run ID.
const CONTINUATION_ID_HEX: usize = 24;

/// `run.status`: one run's summary; `includeResult: true` adds a terminal run's output or
/// error, or a waiting run's pending request contract (explicit reads of the run's own
/// content, never part of plain status).
pub async fn run_status(ctx: &OpsContext, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let include_result = request.payload.get("includeResult").and_then(Value::as_bool) == Some(true);
    if include_result {
        return run_status_read(ctx, run_id, true).await;
    }
    // Read before the read transaction begins: see `status_cache`.
    let data_version = ctx.store.data_version();
    if let Some(kept) = ctx.status_cache.get(&run_id, data_version) {
        return Ok((Outcome::Accepted, kept, None));
    }
    let answer = run_status_read(ctx, run_id.clone(), false).await?;
    ctx.status_cache.put(&run_id, data_version, &answer.1);
    Ok(answer)
}

async fn run_status_read(ctx: &OpsContext, run_id: String, include_result: bool) -> Answer {
    let query = move |conn: &rusqlite::Connection| {
        let summary = run_summary::run_summary(conn, &run_id)?;
        let result = match include_result && summary.finished_at.is_some() {
            true => run_summary::run_result(conn, &run_id)?,
            false => None,
        };
        let contract = match include_result && summary.pending_request.is_some() {
            true => run_summary::pending_contract(conn, &run_id)?,
            false => None,
        };
        Ok((summary, result, contract))
    };
    // A plain status is one run's summary row (read in place); a result or a request
    // contract may be large content, read off the async workers.
    let read = blocking::read_small_if(&ctx.store, !include_result, query).await;
    let (summary, result, contract) = read.map_err(read_refusal)?;
    let mut receipt = to_object(&summary)?;
    if let Some(result) = result {
        receipt.insert("result".to_string(), result);
    }
    if let Some(contract) = contract {
        receipt.insert("request".to_string(), contract);
    }
    Ok((Outcome::Accepted, receipt, None))
}

/// Runs `run.list` returns by default and at most.
const RUN_LIST_DEFAULT: usize = 50;
const RUN_LIST_MAX: usize = 200;

/// `run.list`: the newest runs first (`limit`, default 50, at most 200).
pub async fn run_list(ctx: &OpsContext, request: &Request) -> Answer {
    let limit = page_limit(&request.payload, RUN_LIST_DEFAULT, RUN_LIST_MAX)?;
    let runs = blocking::read(&ctx.store, move |conn| run_summary::list_runs(conn, limit))
        .await
        .map_err(read_refusal)?;
    let mut receipt = JsonObject::new();
    receipt.insert("runs".to_string(), serde_json::to_value(runs).unwrap_or(Value::Null));
    Ok((Outcome::Accepted, receipt, None))
}
