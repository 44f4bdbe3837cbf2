//! The workflow graph laid out from the complete definition snapshot
//! (`pi-workflows.definition-snapshot.v1`: nodes, edges — `to` or `switch` cases — and
//! includes). Layers are breadth-first distances from `startAt`, so a loop's back edge
//! points up and never makes the layering grow; nodes no edge reaches come last, in
//! definition order.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphNode {
    pub path: String,
    pub node_type: String,
    pub title: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphEdge {
    pub from: usize,
    pub to: usize,
    /// The switch case that takes it (`None` for a plain edge).
    pub label: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Graph {
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
    /// Node indices per layer, top to bottom.
    pub layers: Vec<Vec<usize>>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GraphError {
    #[error("the definition has no nodes")]
    NoNodes,
}

impl Graph {
    pub fn from_definition(definition: &Value) -> Result<Self, GraphError> {
        let nodes = read_nodes(definition);
        if nodes.is_empty() {
            return Err(GraphError::NoNodes);
        }
        let index: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.path.as_str(), i)).collect();
        let resolver = Resolver::new(definition, &index);
        let edges = read_edges(definition, &resolver);
        let start = definition
            .get("startAt")
            .and_then(Value::as_str)
            .and_then(|path| resolver.node(path))
            .unwrap_or(0);
        let layers = layer(nodes.len(), &edges, start);
        Ok(Self { nodes, edges, layers })
    }

    /// Edges leaving `node`.
    pub fn outgoing(&self, node: usize) -> impl Iterator<Item = &GraphEdge> {
        self.edges.iter().filter(move |edge| edge.from == node)
    }

    pub fn position(&self, path: &str) -> Option<usize> {
        self.nodes.iter().position(|node| node.path == path)
    }
}

fn read_nodes(definition: &Value) -> Vec<GraphNode> {
    let text = |node: &Value, key: &str| node.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    definition
        .get("nodes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|node| GraphNode {
            path: text(node, "path"),
            node_type: text(node, "type"),
            title: text(node, "title"),
        })
        .filter(|node| !node.path.is_empty())
        .collect()
}

/// Edge ends name a node, an include mount (its first node), or `mount.exit` (the node that
/// exit names inside the mount).
struct Resolver<'a> {
    index: &'a HashMap<&'a str, usize>,
    /// mount path → (startAt, exits) of the included workflow.
    mounts: HashMap<String, (String, HashMap<String, String>)>,
}

impl<'a> Resolver<'a> {
    fn new(definition: &Value, index: &'a HashMap<&'a str, usize>) -> Self {
        let mut mounts = HashMap::new();
        for include in definition
            .get("includes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(path) = include.get("path").and_then(Value::as_str) else {
                continue;
            };
            let start = include.get("startAt").and_then(Value::as_str).unwrap_or_default();
            let exits = include
                .get("exits")
                .and_then(Value::as_object)
                .map(|exits| {
                    exits
                        .iter()
                        .filter_map(|(name, node)| Some((name.clone(), node.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            mounts.insert(path.to_string(), (start.to_string(), exits));
        }
        Self { index, mounts }
    }

    fn node(&self, path: &str) -> Option<usize> {
        self.node_within(path, 0)
    }

    fn node_within(&self, path: &str, depth: usize) -> Option<usize> {
        // Includes nest a bounded number of levels; a cycle in a broken snapshot stops here.
        const INCLUDE_DEPTH_MAX: usize = 32;
        if depth > INCLUDE_DEPTH_MAX {
            return None;
        }
        if let Some(index) = self.index.get(path) {
            return Some(*index);
        }
        if let Some((start, _)) = self.mounts.get(path) {
            return self.node_within(&join(path, start), depth + 1);
        }
        let (mount, exit) = path.rsplit_once('.')?;
        let (_, exits) = self.mounts.get(mount)?;
        self.node_within(&join(mount, exits.get(exit)?), depth + 1)
    }
}

fn join(base: &str, local: &str) -> String {
    if base.is_empty() {
        local.to_string()
    } else {
        format!("{base}/{local}")
    }
}

fn read_edges(definition: &Value, resolver: &Resolver<'_>) -> Vec<GraphEdge> {
    let mut edges = Vec::new();
    for edge in definition.get("edges").and_then(Value::as_array).into_iter().flatten() {
        let Some(from) = edge.get("from").and_then(Value::as_str).and_then(|p| resolver.node(p)) else {
            continue;
        };
        if let Some(to) = edge.get("to").and_then(Value::as_str).and_then(|p| resolver.node(p)) {
            edges.push(GraphEdge { from, to, label: None });
        }
        let cases = edge.pointer("/switch/cases").and_then(Value::as_object);
        for (case, target) in cases.into_iter().flatten() {
            if let Some(to) = target.as_str().and_then(|p| resolver.node(p)) {
                edges.push(GraphEdge {
                    from,
                    to,
                    label: Some(case.clone()),
                });
            }
        }
    }
    edges
}

/// Breadth-first layers from `start`; unreached nodes form one last layer.
fn layer(count: usize, edges: &[GraphEdge], start: usize) -> Vec<Vec<usize>> {
    let mut depth: Vec<Option<usize>> = vec![None; count];
    depth[start] = Some(0);
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        let next = depth[node].unwrap_or(0) + 1;
        for edge in edges.iter().filter(|edge| edge.from == node) {
            if depth[edge.to].is_none() {
                depth[edge.to] = Some(next);
                queue.push_back(edge.to);
            }
        }
    }
    let deepest = depth.iter().flatten().max().copied().unwrap_or(0);
    let mut layers = vec![Vec::new(); deepest + 1];
    let mut unreached = Vec::new();
    for (node, level) in depth.iter().enumerate() {
        match level {
            Some(level) => layers[*level].push(node),
            None => unreached.push(node),
        }
    }
    if !unreached.is_empty() {
        layers.push(unreached);
    }
    layers
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn switch_cases_branch_and_a_loop_does_not_deepen_the_layers() {
        let definition = json!({
            "startAt": "a",
            "nodes": [{"path": "a"}, {"path": "b"}, {"path": "c"}, {"path": "d"}, {"path": "lonely"}],
            "edges": [
                {"from": "a", "switch": {"on": "$.x", "cases": {"yes": "b", "no": "c"}}},
                {"from": "b", "to": "d"},
                {"from": "d", "to": "a"}
            ],
            "includes": []
        });
        let graph = Graph::from_definition(&definition).expect("graph");
        assert_eq!(graph.layers, vec![vec![0], vec![1, 2], vec![3], vec![4]]);
        assert_eq!(graph.outgoing(0).count(), 2);
    }

    #[test]
    fn an_edge_into_a_mount_reaches_its_first_node() {
        let definition = json!({
            "startAt": "a",
            "nodes": [{"path": "a"}, {"path": "sub/x"}, {"path": "sub/y"}, {"path": "z"}],
            "edges": [{"from": "a", "to": "sub"}, {"from": "sub/x", "to": "sub/y"}, {"from": "sub.done", "to": "z"}],
            "includes": [{"path": "sub", "startAt": "x", "exits": {"done": "y"}}]
        });
        let graph = Graph::from_definition(&definition).expect("graph");
        assert_eq!(graph.layers, vec![vec![0], vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn a_definition_without_nodes_is_an_error() {
        assert_eq!(Graph::from_definition(&json!({"nodes": []})), Err(GraphError::NoNodes));
    }
}
