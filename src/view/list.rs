//! Run-list items (`pi-workflows.run-list.v1`): status facts of each run, never a history.

use serde_json::{Value, json};

use super::display::{DisplayFacts, controls, display_status};
use crate::store::run_view::RunListFacts;

pub const RUN_LIST_SCHEMA: &str = "pi-workflows.run-list.v1";

pub fn list_item(facts: &RunListFacts) -> Value {
    let run = &facts.run;
    let display_facts = DisplayFacts {
        run_status: &run.status,
        queue_status: &run.queue_status,
        paused: run.paused,
        pending_kind: facts.pending_kind.as_deref(),
        ambiguous_effects: facts.ambiguous_effects,
        worker_active: facts.worker_active,
        origin_turn: facts.origin_turn,
    };
    let status = display_status(&display_facts);
    let mut item = json!({
        "runId": run.run_id,
        "workflowName": run.workflow_name,
        "revision": run.revision,
        "executionMode": run.execution_mode,
        "createdAt": run.created_at,
        "updatedAt": run.updated_at,
        "display": { "status": status, "controls": controls(status, &display_facts) },
    });
    let object = item.as_object_mut().expect("a JSON object");
    if let Some(finished_at) = run.finished_at {
        object.insert("finishedAt".into(), json!(finished_at));
    }
    if let Some(node_id) = &facts.current_node_id {
        object.insert("currentNodeId".into(), json!(node_id));
    }
    item
}
