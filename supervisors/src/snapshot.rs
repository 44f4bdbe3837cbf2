//! A point-in-time view of a supervision tree, for `server status --tree` and the examples.
//! It holds names, states, labels and counts only: nothing private.

use serde::{Deserialize, Serialize};

use crate::spec::{ChildKind, Restart, Strategy};

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
