//! The run view as piw reads it: a lenient typed reading of the server's
//! `pi-workflows.run-view.v1` document. Nothing here derives status: every status, control
//! and current node is the server's `display` (spec "Live run view").

use serde::Deserialize;
use serde_json::Value;

/// One node attempt (a history item or an attempts-page item).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Attempt {
    pub seq: i64,
    pub attempt_id: String,
    pub node_id: String,
    pub node_path: String,
    pub node_type: String,
    pub visit: i64,
    pub status: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    /// Digest-bound reference to the attempt's stored output (read with `view.content`).
    pub output_ref: Option<Value>,
    /// Digest-bound reference to the attempt's stored error.
    pub error_ref: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Reason {
    pub code: String,
    pub message: String,
    pub truncated: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StepUpdate {
    #[serde(rename = "type")]
    pub update_type: String,
    pub key: String,
    pub seq: i64,
    pub at: i64,
    pub data_bytes: i64,
    pub data_json: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PendingRequest {
    pub request_id: String,
    pub kind: String,
    pub since: i64,
    pub updates: Vec<StepUpdate>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Activity {
    pub kind: String,
    pub state: Option<String>,
    pub since: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Display {
    pub status: String,
    pub activity: Activity,
    pub controls: Vec<String>,
    pub current_node: Option<Attempt>,
    pub waiting_on: Option<Attempt>,
    pub request: Option<PendingRequest>,
    pub reason: Option<Reason>,
    pub reason_content: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RunFacts {
    pub status: String,
    pub revision: i64,
    pub paused: bool,
    pub execution_mode: String,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub completed_steps: i64,
    pub attempt_count: i64,
    pub settings_change_number: Option<i64>,
    /// The continuation run an answered checkpoint settled this run by: the workflow goes on there.
    pub continued_as: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Workflow {
    pub name: String,
    pub definition_digest: String,
    pub definition: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct History {
    pub items: std::collections::BTreeMap<String, Attempt>,
    pub total: i64,
    pub older_before: Option<i64>,
}

/// The whole document.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RunView {
    pub run_id: String,
    pub revision: i64,
    pub workflow: Workflow,
    pub run: RunFacts,
    pub display: Display,
    pub history: History,
}

impl RunView {
    /// Read a document; a document that does not even have this shape is a protocol error.
    pub fn from_document(document: &Value) -> Result<Self, serde_json::Error> {
        Self::deserialize(document)
    }

    /// The history window in attempt order.
    pub fn history_in_order(&self) -> Vec<Attempt> {
        let mut items: Vec<Attempt> = self.history.items.values().cloned().collect();
        items.sort_by_key(|attempt| attempt.seq);
        items
    }

    /// The node the display highlights: the current node, else the waited-on one.
    pub fn highlighted_path(&self) -> Option<&str> {
        self.display
            .current_node
            .as_ref()
            .or(self.display.waiting_on.as_ref())
            .map(|node| node.node_path.as_str())
    }

    pub fn offers(&self, control: &str) -> bool {
        self.display.controls.iter().any(|offered| offered == control)
    }
}

/// One run-list item (`pi-workflows.run-list.v1`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RunItem {
    pub run_id: String,
    pub workflow_name: String,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub display: ListDisplay,
    pub current_node_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListDisplay {
    pub status: String,
    pub controls: Vec<String>,
}

/// The items of a `runs` event or `view.runs.page`, newest first as the server sends them.
pub fn run_items(page: &Value) -> Vec<RunItem> {
    page.get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| RunItem::deserialize(item).ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_view_reads_the_server_display_as_it_is() {
        let document = json!({
            "runId": "r1", "revision": 7,
            "workflow": {"name": "w", "definitionDigest": "sha256:aa"},
            "run": {"status": "running", "revision": 5, "createdAt": 1},
            "display": {"status": "waiting", "controls": ["answer", "cancel"],
                        "waitingOn": {"nodePath": "approve", "status": "completed"},
                        "request": {"requestId": "q", "kind": "checkpoint"}},
            "history": {"items": {"2": {"seq": 2, "nodePath": "b"}, "1": {"seq": 1, "nodePath": "a"}}, "total": 2}
        });
        let view = RunView::from_document(&document).expect("view");
        assert_eq!(view.display.status, "waiting");
        assert_eq!(view.highlighted_path(), Some("approve"));
        assert!(view.offers("answer") && !view.offers("pause"));
        let order: Vec<_> = view.history_in_order().into_iter().map(|a| a.seq).collect();
        assert_eq!(order, vec![1, 2]);
    }
}
