//! The graph pane: one card per node, layers left to right (breadth-first from the start)
//! with a layer's nodes stacked in its column; layers that do not fit the width wrap onto
//! a band below, like words onto lines. A card shows the node's newest attempt up to the
//! timeline cursor; live, the server's `currentNode` / `waitingOn` is highlighted. Only the
//! cards in sight are drawn, so a large graph costs what fits.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use super::app::{App, GraphState, Pane, Selected, safe};
use super::draw::{fit, pane_block};
use crate::model::graph::Graph;

pub const CARD_WIDTH: u16 = 26;
/// Border, state line, exits line, border.
pub const CARD_HEIGHT: u16 = 4;
const CARD_GAP_X: u16 = 2;
/// The row between card rows (arrows).
const CARD_GAP_Y: u16 = 1;

/// A card's place in the virtual grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub node: usize,
    pub column: usize,
    pub row: usize,
    /// An arrow from the layer before goes in front of it (the first card of a layer that is
    /// not first in its band).
    pub arrow: bool,
}

/// Layer columns per band in a pane of `width` inner columns.
pub fn columns_for(width: u16) -> usize {
    (((width + CARD_GAP_X) / (CARD_WIDTH + CARD_GAP_X)) as usize).max(1)
}

/// Every node's slot: layer `i` in column `i % columns` of band `i / columns`; a band is
/// as tall as its tallest layer.
pub fn slots(graph: &Graph, columns: usize) -> Vec<Slot> {
    let mut slots = Vec::with_capacity(graph.nodes.len());
    let mut band_top = 0;
    for band in graph.layers.chunks(columns) {
        for (column, layer) in band.iter().enumerate() {
            for (index, node) in layer.iter().enumerate() {
                slots.push(Slot {
                    node: *node,
                    column,
                    row: band_top + index,
                    arrow: column > 0 && index == 0,
                });
            }
        }
        band_top += band.iter().map(Vec::len).max().unwrap_or(1).max(1);
    }
    slots
}

pub fn draw(frame: &mut Frame<'_>, app: &App, selected: &Selected, area: Rect) {
    let title = match selected.cursor {
        None => "graph · live".to_string(),
        Some(_) => "graph · at the timeline cursor".to_string(),
    };
    let block = pane_block(app, Pane::Graph, &title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let graph = match &selected.graph {
        GraphState::Ready(graph) => graph,
        GraphState::Loading if selected.view.is_none() => {
            return message(frame, app, inner, "waiting for the run view…");
        }
        GraphState::Loading => return message(frame, app, inner, "reading the workflow definition…"),
        GraphState::Failed(err) => {
            // Wrapped: the reason (two digests for a mismatch) is wider than the pane.
            let text = format!("graph unavailable: {}", safe(err));
            let paragraph = Paragraph::new(text).style(app.theme.error).wrap(Wrap { trim: false });
            return frame.render_widget(paragraph, inner);
        }
    };
    let columns = columns_for(inner.width);
    let slots = slots(graph, columns);
    let highlighted = highlighted_node(app, selected, graph);
    let (column_offset, row_offset) = offset(app, &slots, highlighted, inner);
    for slot in &slots {
        let Some(rect) = card_rect(inner, slot, column_offset, row_offset) else {
            continue;
        };
        draw_card(
            frame,
            app,
            selected,
            graph,
            slot.node,
            highlighted == Some(slot.node),
            rect,
        );
        if slot.arrow {
            // In the gap before the card, on its state line: "from the layer before".
            let arrow = Rect::new(rect.x - CARD_GAP_X, rect.y + 1, CARD_GAP_X, 1);
            frame.render_widget(Paragraph::new("→").style(app.theme.dim), arrow);
        }
    }
}

fn message(frame: &mut Frame<'_>, app: &App, area: Rect, text: &str) {
    frame.render_widget(Paragraph::new(text.to_string()).style(app.theme.dim), area);
}

/// The node to highlight: live, the display's current or waited-on node; on the timeline,
/// the attempt at the cursor.
fn highlighted_node(app: &App, selected: &Selected, graph: &Graph) -> Option<usize> {
    let path = match selected.cursor {
        Some(seq) => selected
            .index_of(seq)
            .and_then(|index| selected.attempts.get(index))
            .map(|attempt| attempt.node_path.clone()),
        None => app.view().and_then(|view| view.highlighted_path().map(str::to_string)),
    }?;
    graph.position(&path)
}

/// The pan: the user's, or (following) the smallest that shows the highlighted card.
fn offset(app: &App, slots: &[Slot], highlighted: Option<usize>, inner: Rect) -> (usize, usize) {
    let visible_rows = ((inner.height + CARD_GAP_Y) / (CARD_HEIGHT + CARD_GAP_Y)).max(1) as usize;
    let slot = highlighted.and_then(|node| slots.iter().find(|slot| slot.node == node));
    match (app.follow, slot) {
        (true, Some(slot)) => (0, (slot.row + 1).saturating_sub(visible_rows)),
        _ => app.graph_offset,
    }
}

fn card_rect(inner: Rect, slot: &Slot, column_offset: usize, row_offset: usize) -> Option<Rect> {
    let column = slot.column.checked_sub(column_offset)? as u16;
    let row = slot.row.checked_sub(row_offset)? as u16;
    let x = inner.x + column * (CARD_WIDTH + CARD_GAP_X);
    let y = inner.y + row * (CARD_HEIGHT + CARD_GAP_Y);
    let fits = x + CARD_WIDTH <= inner.x + inner.width && y + CARD_HEIGHT <= inner.y + inner.height;
    fits.then_some(Rect::new(x, y, CARD_WIDTH, CARD_HEIGHT))
}

fn draw_card(frame: &mut Frame<'_>, app: &App, selected: &Selected, graph: &Graph, node: usize, lit: bool, rect: Rect) {
    let theme = &app.theme;
    let info = &graph.nodes[node];
    let width = (CARD_WIDTH - 2) as usize;
    let name = if info.title.is_empty() { &info.path } else { &info.title };
    let (state, style) = node_state(app, selected, &info.path, lit);
    let border = if lit { theme.highlight } else { theme.border };
    let block = Block::bordered().border_style(border).title(Span::styled(
        fit(&safe(name), width),
        if lit { theme.highlight } else { theme.title },
    ));
    let exits: Vec<String> = graph
        .outgoing(node)
        .map(|edge| {
            let target = graph.nodes[edge.to]
                .path
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            match &edge.label {
                Some(label) => format!("{label}→{target}"),
                None => format!("→{target}"),
            }
        })
        .collect();
    let exits = if exits.is_empty() {
        "(end)".to_string()
    } else {
        exits.join(" ")
    };
    let lines = vec![
        Line::from(Span::styled(fit(&state, width), style)),
        Line::from(Span::styled(fit(&safe(&exits), width), theme.dim)),
    ];
    frame.render_widget(Paragraph::new(lines).block(block), rect);
}

/// A node's state line: marked when highlighted; from its newest attempt otherwise.
fn node_state(app: &App, selected: &Selected, path: &str, lit: bool) -> (String, Style) {
    let theme = &app.theme;
    let view = app.view();
    if lit && selected.cursor.is_none() {
        let display = view.map(|v| &v.display);
        let waiting = display
            .and_then(|d| d.waiting_on.as_ref())
            .is_some_and(|n| n.node_path == path);
        if waiting {
            let kind = display.and_then(|d| d.request.as_ref()).map_or("", |r| r.kind.as_str());
            return (format!("◆ WAITING {}", safe(kind)), theme.warn);
        }
        return ("▶ RUNNING".to_string(), theme.highlight);
    }
    match selected.states.get(path) {
        Some(attempt) => {
            let visit = if attempt.visit > 1 {
                format!(" ×{}", attempt.visit)
            } else {
                String::new()
            };
            let mark = if lit { "▶" } else { mark(&attempt.status) };
            (
                format!("{mark} {}{visit}", safe(&attempt.status)),
                theme.status(&attempt.status),
            )
        }
        None => ("· not run".to_string(), theme.dim),
    }
}

pub fn mark(status: &str) -> &'static str {
    match status {
        "completed" => "✓",
        "failed" | "timed_out" => "✗",
        "cancelled" | "interrupted" => "○",
        "running" => "▶",
        _ => "·",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layers_run_left_to_right_and_wrap_into_bands() {
        let definition = json!({"startAt": "a", "nodes": [{"path": "a"}, {"path": "b"}, {"path": "c"}, {"path": "d"}, {"path": "e"}],
            "edges": [{"from": "a", "switch": {"on": "$.x", "cases": {"1": "b", "2": "c", "3": "d"}}}, {"from": "b", "to": "e"}]});
        let graph = Graph::from_definition(&definition).expect("graph");
        let slots = slots(&graph, 2);
        // Layers [a] [b c d] [e]: the first two share a band, e wraps below the taller one.
        let rows: Vec<_> = slots.iter().map(|s| (s.node, s.row, s.column)).collect();
        assert_eq!(rows, vec![(0, 0, 0), (1, 0, 1), (2, 1, 1), (3, 2, 1), (4, 3, 0)]);
        assert_eq!(columns_for(120), 4);
    }
}
