//! A point-in-time view of a supervision tree, for `server status --tree` and the examples.
//! It holds names, states, labels and counts only: nothing private.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::spec::{ChildKind, Restart, Strategy};

/// Processes one tree node lists at most (a pool of warm processes, for example).
pub const DETAILS_PROCESSES_MAX: usize = 64;

/// One OS process a node owns: numbers only, never its arguments or paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    pub pid: i32,
    pub process_group: i32,
}

/// What a running child tells the tree about itself, kept current by the child: the processes
/// it owns and the generation or epoch that fences it. Public facts only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildDetails {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// How the child works right now, in a word or two (e.g. how a pool starts its processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

impl ChildDetails {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// Where a child keeps its details; the supervisor reads it for each snapshot. A child that
/// restarts clears and refills it, so a dead process never shows as owned.
#[derive(Debug, Clone, Default)]
pub struct DetailsCell(Arc<Mutex<ChildDetails>>);

impl DetailsCell {
    pub fn get(&self) -> ChildDetails {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Change the details in place.
    pub fn update(&self, change: impl FnOnce(&mut ChildDetails)) {
        let mut details = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        change(&mut details);
        details.processes.truncate(DETAILS_PROCESSES_MAX);
    }

    pub fn set_processes(&self, processes: impl IntoIterator<Item = ProcessInfo>) {
        self.update(|details| details.processes = processes.into_iter().collect());
    }
}

/// What the tree knows about one node right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    Running,
    /// Being stopped by its supervisor.
    Stopping,
    /// Exited and not (yet) restarted: a transient child after a normal exit.
    Stopped,
    /// A nested supervisor that did not answer the snapshot in time.
    Unresponsive,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeSnapshot {
    pub id: String,
    pub kind: ChildKind,
    /// Set for supervisors.
    pub strategy: Option<Strategy>,
    /// Set for children (the root has no restart type).
    pub restart: Option<Restart>,
    pub state: NodeState,
    pub restarts: u32,
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "ChildDetails::is_empty")]
    pub details: ChildDetails,
    pub children: Vec<TreeSnapshot>,
}

impl TreeSnapshot {
    /// Every node of the tree, depth first (the node itself first).
    pub fn nodes(&self) -> Vec<&TreeSnapshot> {
        let mut nodes = vec![self];
        for child in &self.children {
            nodes.extend(child.nodes());
        }
        nodes
    }

    /// The first node with this id, depth first.
    pub fn find(&self, id: &str) -> Option<&TreeSnapshot> {
        self.nodes().into_iter().find(|node| node.id == id)
    }

    /// A human-readable tree, one node per line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        render_node(self, "", true, true, &mut out);
        out
    }
}

fn describe(node: &TreeSnapshot) -> String {
    let mut parts = vec![format!("{:?}", node.state).to_lowercase()];
    if let Some(strategy) = node.strategy {
        parts.push(strategy.as_str().to_string());
    }
    if let Some(restart) = node.restart {
        parts.push(restart.as_str().to_string());
    }
    parts.push(format!("restarts {}", node.restarts));
    if let Some(epoch) = node.details.epoch {
        parts.push(format!("epoch {epoch}"));
    }
    if let Some(generation) = node.details.generation {
        parts.push(format!("generation {generation}"));
    }
    for process in &node.details.processes {
        parts.push(format!("pid {} pgid {}", process.pid, process.process_group));
    }
    if let Some(mode) = &node.details.mode {
        parts.push(format!("mode {mode}"));
    }
    if let Some(label) = &node.label {
        parts.push(label.clone());
    }
    format!("{} [{}]", node.id, parts.join(", "))
}

fn render_node(node: &TreeSnapshot, prefix: &str, is_last: bool, is_root: bool, out: &mut String) {
    let (branch, next_prefix) = match (is_root, is_last) {
        (true, _) => ("", String::new()),
        (false, true) => ("└── ", format!("{prefix}    ")),
        (false, false) => ("├── ", format!("{prefix}│   ")),
    };
    out.push_str(prefix);
    out.push_str(branch);
    out.push_str(&describe(node));
    out.push('\n');
    for (index, child) in node.children.iter().enumerate() {
        render_node(child, &next_prefix, index + 1 == node.children.len(), false, out);
    }
}
