//! `pi-workflows.run-view.v1`: the one document every renderer draws a run from. Built from
//! facts read in one snapshot; values too large to inline become digest-bound references to
//! generated content that the server stores before it sends the document.

use serde_json::{Value, json};

use super::display::{Activity, Control, DisplayFacts, DisplayStatus, controls, display_status};
use crate::digest::sha256_hex;
use crate::store::run_view::{AttemptBlob, AttemptFacts, AttemptValue, RunValue, RunViewFacts};

pub const RUN_VIEW_SCHEMA: &str = "pi-workflows.run-view.v1";
/// The shared inline-content threshold: a larger reason becomes a reference.
pub const INLINE_CONTENT_BYTES_MAX: usize = 16 * 1024;
/// How much of a referenced reason stays inline as its notice.
pub const REASON_NOTICE_BYTES_MAX: usize = 512;
/// Attempts inlined in a view (older ones are read with `view.page`).
pub const HISTORY_WINDOW: usize = 50;
/// Topology nodes inlined in a view (the complete definition is referenced content).
pub const TOPOLOGY_NODES_INLINE_MAX: usize = 200;
/// Encoded bytes of the inlined topology projection.
pub const TOPOLOGY_INLINE_BYTES_MAX: usize = 64 * 1024;
pub const REASON_MEDIA_TYPE: &str = "application/vnd.pi-workflows.reason+json";
/// A run's definition, read in place by `view.content` (the store keeps it under this type).
pub use crate::store::blobs::DEFINITION_MEDIA_TYPE;
/// An attempt's output (`outputRef`) and error (`errorRef`): the attempt's stored JSON value,
/// served by `view.content` only for an attempt of the run the read names.
pub const ATTEMPT_OUTPUT_MEDIA_TYPE: &str = "application/vnd.pi-workflows.attempt-output+json";
pub const ATTEMPT_ERROR_MEDIA_TYPE: &str = "application/vnd.pi-workflows.attempt-error+json";

/// Content a view names; the server stores it (run, digest, media type) before sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedContent {
    pub media_type: &'static str,
    pub bytes: Vec<u8>,
}

impl GeneratedContent {
    pub fn digest_hex(&self) -> String {
        sha256_hex(&self.bytes)
    }

    /// The reference a document carries.
    pub fn reference(&self) -> Value {
        content_reference(
            &format!("sha256:{}", self.digest_hex()),
            self.media_type,
            Some(self.bytes.len()),
        )
    }
}

/// The one reference shape of a document (`digest` `sha256:<hex>`, `mediaType`, `byteLength`);
/// `byteLength` is absent when the stored bytes are missing (a damaged store), so a renderer
/// reports that section unavailable.
fn content_reference(digest: &str, media_type: &str, byte_length: Option<usize>) -> Value {
    let mut reference = json!({ "digest": digest, "mediaType": media_type });
    if let Some(length) = byte_length {
        reference["byteLength"] = json!(length);
    }
    reference
}

/// What a view shows of a run's stored definition, derived once per definition (the views'
/// cache keeps it by digest; every rebuild of every view of its runs reuses it): the size of
/// its canonical bytes and its bounded node projection.
#[derive(Debug, Clone)]
pub struct Definition {
    pub canonical_bytes: usize,
    pub topology: Value,
}

impl Definition {
    pub fn new(canonical: &[u8], value: &Value) -> Self {
        Self {
            canonical_bytes: canonical.len(),
            topology: topology_projection(value),
        }
    }
}

/// A JSON object value of these entries, their values moved in (`json!` would deep-copy them).
fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Object(crate::protocol::json_object(entries))
}

/// Why the run needs action, as stored (an error's code and message, or a park reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    pub code: String,
    pub message: String,
}

pub struct RunViewInput<'a> {
    pub facts: &'a RunViewFacts,
    pub definition: Option<&'a Definition>,
    pub reason: Option<Reason>,
}

/// A built view: the document and the content it references.
#[derive(Debug, Clone)]
pub struct RunView {
    /// The presentation revision (`store::run_view::presentation_revision`); the run's
    /// durable revision is `run.revision` inside the document.
    pub revision: i64,
    pub document: Value,
    pub contents: Vec<GeneratedContent>,
}

pub fn run_view(input: &RunViewInput<'_>) -> RunView {
    let facts = input.facts;
    let run = &facts.run;
    let mut contents = Vec::new();
    let display = display_object(facts, input.reason.as_ref(), &mut contents);
    let mut document = object([
        ("schema", json!(RUN_VIEW_SCHEMA)),
        ("runId", json!(run.run_id)),
        ("revision", json!(facts.presentation_revision)),
        ("workflow", workflow_object(facts, input.definition)),
        ("run", run_object(facts)),
        ("queue", json!({ "status": run.queue_status })),
        ("display", display),
        ("history", history_object(facts)),
    ]);
    strip_nulls(&mut document);
    RunView {
        revision: facts.presentation_revision,
        document,
        contents,
    }
}

pub fn display_facts(facts: &RunViewFacts) -> DisplayFacts<'_> {
    DisplayFacts {
        run_status: &facts.run.status,
        queue_status: &facts.run.queue_status,
        paused: facts.run.paused,
        pending_kind: facts.pending_request.as_ref().map(|request| request.kind.as_str()),
        ambiguous_effects: facts.ambiguous_effects,
        worker_active: facts.worker.is_some(),
        origin_turn: facts.origin_turn.is_some(),
    }
}

fn display_object(facts: &RunViewFacts, reason: Option<&Reason>, contents: &mut Vec<GeneratedContent>) -> Value {
    let display_facts = display_facts(facts);
    let status = display_status(&display_facts);
    let controls: Vec<Control> = controls(status, &display_facts);
    let mut display = json!({
        "status": status,
        "activity": activity(facts),
        "controls": controls,
    });
    let object = display.as_object_mut().expect("a JSON object");
    if let Some(node) = current_node(facts, status) {
        object.insert("currentNode".into(), node_object(node));
    }
    if let Some(node) = waiting_on(facts, status) {
        object.insert("waitingOn".into(), node_object(node));
    }
    if let Some(request) = &facts.pending_request {
        let updates: Vec<Value> = request.updates.iter().map(update_object).collect();
        object.insert(
            "request".into(),
            json!({ "requestId": request.request_id, "kind": request.kind, "since": request.created_at,
                    "updates": updates }),
        );
    }
    if let Some(reason) = reason {
        insert_reason(object, reason, contents);
    }
    display
}

/// One reported update: its data inline when small, else only its size.
/// One step update as the view and `view.page` kind `updates` show it (no nulls).
pub fn update_object(update: &crate::store::run_view::UpdateView) -> Value {
    let mut object = json!({
        "type": update.update_type,
        "key": update.update_key,
        "seq": update.seq,
        "at": update.at,
        "dataBytes": update.data_bytes,
        "dataJson": update.data_json,
    });
    strip_nulls(&mut object);
    object
}

fn activity(facts: &RunViewFacts) -> Activity {
    if let Some((_, since)) = &facts.origin_turn {
        return Activity {
            kind: "originTurn",
            state: None,
            since: Some(*since),
        };
    }
    match &facts.worker {
        Some(worker) => Activity {
            kind: "worker",
            state: Some(worker.status.clone()),
            since: Some(
                worker
                    .unresponsive_since
                    .or(worker.ready_at)
                    .unwrap_or(worker.started_at),
            ),
        },
        None => Activity::none(),
    }
}

/// A running run shows its unfinished attempt as the current node; during the exact origin
/// turn that works on a pending request, the node that request came from (the same node
/// `waitingOn` names, presented as running).
fn current_node(facts: &RunViewFacts, status: DisplayStatus) -> Option<&AttemptFacts> {
    if status.is_terminal() {
        return None;
    }
    match &facts.pending_request {
        None => facts.unfinished.as_ref(),
        Some(request) if status == DisplayStatus::Running && facts.origin_turn.is_some() => {
            request.attempt.as_ref().or(facts.unfinished.as_ref())
        }
        Some(_) => None,
    }
}

/// A waiting run shows the node its pending request came from: the unfinished attempt, or
/// (a checkpoint, which has none) the completed checkpoint node.
fn waiting_on(facts: &RunViewFacts, status: DisplayStatus) -> Option<&AttemptFacts> {
    if status.is_terminal() {
        return None;
    }
    let request = facts.pending_request.as_ref()?;
    request.attempt.as_ref().or(facts.unfinished.as_ref())
}

fn insert_reason(display: &mut serde_json::Map<String, Value>, reason: &Reason, contents: &mut Vec<GeneratedContent>) {
    if reason.message.len() <= INLINE_CONTENT_BYTES_MAX {
        display.insert(
            "reason".into(),
            json!({ "code": reason.code, "message": reason.message }),
        );
        return;
    }
    let complete = json!({ "code": reason.code, "message": reason.message });
    let content = GeneratedContent {
        media_type: REASON_MEDIA_TYPE,
        bytes: crate::protocol::value_to_canonical_vec(&complete),
    };
    let notice = crate::protocol::bounded_text(&reason.message, REASON_NOTICE_BYTES_MAX);
    display.insert(
        "reason".into(),
        json!({ "code": reason.code, "message": notice, "truncated": true }),
    );
    display.insert("reasonContent".into(), content.reference());
    contents.push(content);
}

fn node_object(attempt: &AttemptFacts) -> Value {
    json!({
        "attemptId": attempt.attempt_id,
        "nodeId": attempt.node_id,
        "nodePath": attempt.node_path,
        "nodeType": attempt.node_type,
        "visit": attempt.visit,
        "status": attempt.status,
        "startedAt": attempt.started_at,
    })
}

/// One history item: the attempt with its timing, and digest-bound references to its output
/// and error when it has them. The values are never inlined, however small: a window of 50
/// items (and a 200-item page) must stay far below the frame limit, and a renderer reads a
/// value only for the attempt it shows.
pub fn attempt_item(attempt: &AttemptFacts) -> Value {
    let mut item = node_object(attempt);
    let object = item.as_object_mut().expect("a JSON object");
    object.insert("seq".into(), json!(attempt.seq));
    object.insert("finishedAt".into(), json!(attempt.finished_at));
    object.insert(
        "durationMs".into(),
        json!(attempt.finished_at.map(|end| (end - attempt.started_at).max(0))),
    );
    if let Some(output) = &attempt.output {
        object.insert("outputRef".into(), attempt_reference(output, ATTEMPT_OUTPUT_MEDIA_TYPE));
    }
    if let Some(error) = &attempt.error {
        object.insert("errorRef".into(), attempt_reference(error, ATTEMPT_ERROR_MEDIA_TYPE));
    }
    item
}

fn attempt_reference(blob: &AttemptBlob, media_type: &str) -> Value {
    let length = blob.byte_length.and_then(|length| usize::try_from(length).ok());
    content_reference(&format!("sha256:{}", blob.digest), media_type, length)
}

/// The stored fact of a run a `view.content` media type stands for (`None`: generated content).
pub fn run_value_of(media_type: &str) -> Option<RunValue> {
    match media_type {
        ATTEMPT_OUTPUT_MEDIA_TYPE => Some(RunValue::Attempt(AttemptValue::Output)),
        ATTEMPT_ERROR_MEDIA_TYPE => Some(RunValue::Attempt(AttemptValue::Error)),
        DEFINITION_MEDIA_TYPE => Some(RunValue::Definition),
        _ => None,
    }
}

fn run_object(facts: &RunViewFacts) -> Value {
    let run = &facts.run;
    json!({
        "status": run.status,
        "revision": run.revision,
        "paused": run.paused,
        "executionMode": run.execution_mode,
        "origin": run.origin,
        "parentRunId": run.parent_run_id,
        // Set once an answered checkpoint settled this run: the workflow goes on there.
        "continuedAs": run.continued_as,
        "createdAt": run.created_at,
        "updatedAt": run.updated_at,
        "finishedAt": run.finished_at,
        "completedSteps": run.completed_steps,
        "attemptCount": run.attempt_count,
        // The value is a `view.page` read (kind `settings`); the view names only its version.
        "settingsChangeNumber": run.settings_change_number,
    })
}

/// The newest attempts keyed by their decimal `seq` (renderers order them by it): a new
/// attempt then changes one key of the view, so a merge patch stays small where a replaced
/// array would resend the whole window.
fn history_object(facts: &RunViewFacts) -> Value {
    let items: serde_json::Map<String, Value> = facts
        .recent_attempts
        .iter()
        .map(|attempt| (attempt.seq.to_string(), attempt_item(attempt)))
        .collect();
    let first_seq = facts.recent_attempts.first().map(|attempt| attempt.seq);
    let complete = facts.recent_attempts.len() as i64 >= facts.run.attempt_count;
    object([
        ("items", Value::Object(items)),
        ("total", json!(facts.run.attempt_count)),
        // Older attempts: `view.page` with kind `attempts` from the start, up to this cursor.
        ("olderBefore", json!(if complete { None } else { first_seq })),
    ])
}

/// The workflow's name, digest, a bounded node projection and the complete definition as
/// referenced content.
fn workflow_object(facts: &RunViewFacts, definition: Option<&Definition>) -> Value {
    let mut workflow = json!({
        "name": facts.run.workflow_name,
        "definitionDigest": facts.run.definition_digest,
    });
    let Some(definition) = definition else {
        return workflow;
    };
    let object = workflow.as_object_mut().expect("a JSON object");
    object.insert("nodes".into(), definition.topology.clone());
    // A stored fact of the run (its blob was verified against this digest when read), read in
    // place by `view.content`: referenced, never copied or hashed again.
    let reference = content_reference(
        &facts.run.definition_digest,
        DEFINITION_MEDIA_TYPE,
        Some(definition.canonical_bytes),
    );
    object.insert("definition".into(), reference);
    workflow
}

/// Node path, type and title of the first nodes, within both the item and byte budgets.
fn topology_projection(definition: &Value) -> Value {
    let nodes = definition
        .get("nodes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut items = Vec::new();
    let mut bytes = 0;
    for node in nodes.iter().take(TOPOLOGY_NODES_INLINE_MAX) {
        let item = json!({
            "path": node.get("path").cloned().unwrap_or(Value::Null),
            "type": node.get("type").cloned().unwrap_or(Value::Null),
            "title": node.get("title").cloned().unwrap_or(Value::Null),
        });
        bytes += item.to_string().len();
        if bytes > TOPOLOGY_INLINE_BYTES_MAX {
            break;
        }
        items.push(item);
    }
    json!({ "items": items, "total": nodes.len() })
}

/// Absent and null mean the same in a view; dropping nulls keeps JSON merge patches exact.
fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(output: Option<AttemptBlob>, error: Option<AttemptBlob>) -> AttemptFacts {
        AttemptFacts {
            seq: 3,
            attempt_id: "a-3".into(),
            node_id: "n".into(),
            node_path: "n".into(),
            node_type: "compute".into(),
            visit: 1,
            status: "completed".into(),
            started_at: 10,
            finished_at: Some(15),
            output,
            error,
        }
    }

    #[test]
    fn attempt_items_reference_their_values_only_when_they_have_them() {
        let stored = AttemptBlob {
            digest: "ab".repeat(32),
            byte_length: Some(12),
        };
        let item = attempt_item(&attempt(Some(stored), None));
        assert_eq!(
            item["outputRef"],
            json!({"digest": format!("sha256:{}", "ab".repeat(32)), "mediaType": ATTEMPT_OUTPUT_MEDIA_TYPE, "byteLength": 12})
        );
        assert!(item.get("errorRef").is_none());
        let missing = AttemptBlob {
            digest: "cd".repeat(32),
            byte_length: None,
        };
        let item = attempt_item(&attempt(None, Some(missing)));
        assert_eq!(item["errorRef"]["mediaType"], ATTEMPT_ERROR_MEDIA_TYPE);
        assert!(
            item["errorRef"].get("byteLength").is_none(),
            "no length for a missing blob"
        );
        assert!(item.get("outputRef").is_none());
        assert_eq!(
            run_value_of(ATTEMPT_ERROR_MEDIA_TYPE),
            Some(RunValue::Attempt(AttemptValue::Error))
        );
        assert_eq!(run_value_of(DEFINITION_MEDIA_TYPE), Some(RunValue::Definition));
        assert_eq!(run_value_of(REASON_MEDIA_TYPE), None, "a reason is generated content");
    }
}
