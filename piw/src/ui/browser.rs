//! The run browser: newest first, as the server's run list orders it, with the display
//! status, workflow name, elapsed time and current node of each run.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::app::{App, Pane, duration, safe};
use super::draw::{fit, pane_block, status_span};

/// Columns of the status word.
const STATUS_COLUMNS: usize = 9;
const NAME_COLUMNS: usize = 16;
const ELAPSED_COLUMNS: usize = 7;
const NODE_COLUMNS: usize = 10;

pub fn draw(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let title = format!("runs ({})", app.runs.len());
    let block = pane_block(app, Pane::Browser, &title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if app.runs.is_empty() {
        let text = if app.runs_loaded {
            "no runs yet; start one with `pi-workflows run start <workflow>`"
        } else {
            "loading the run list…"
        };
        frame.render_widget(Paragraph::new(text).style(app.theme.dim), inner);
        return;
    }
    let rows = inner.height as usize;
    let selected = app.browser_row();
    let first = selected.map_or(0, |row| (row + 1).saturating_sub(rows));
    let lines: Vec<Line<'_>> = app.runs[first..]
        .iter()
        .take(rows)
        .enumerate()
        .map(|(offset, run)| {
            let end = run.finished_at.unwrap_or(app.now_ms);
            let mut line = Line::from(vec![
                status_span(app, &format!("{:<STATUS_COLUMNS$}", run.display.status)),
                Span::raw(" "),
                Span::raw(format!(
                    "{:<NAME_COLUMNS$}",
                    fit(&safe(&run.workflow_name), NAME_COLUMNS)
                )),
                Span::raw(" "),
                Span::styled(
                    format!("{:>ELAPSED_COLUMNS$}", duration(end - run.created_at)),
                    app.theme.dim,
                ),
                Span::raw(" "),
                Span::raw(fit(&safe(run.current_node_id.as_deref().unwrap_or("")), NODE_COLUMNS)),
            ]);
            if Some(first + offset) == selected {
                line = line.style(app.theme.selected);
            }
            line
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The run at a browser row (mouse clicks): rows start below the border.
pub fn run_at(app: &App, row: u16) -> Option<String> {
    let area = app.regions.get().browser;
    if row <= area.y || row >= area.y + area.height.saturating_sub(1) {
        return None;
    }
    let rows = area.height.saturating_sub(2) as usize;
    let first = app.browser_row().map_or(0, |r| (r + 1).saturating_sub(rows));
    app.runs
        .get(first + (row - area.y - 1) as usize)
        .map(|run| run.run_id.clone())
}
